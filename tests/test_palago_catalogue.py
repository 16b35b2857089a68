"""The compiled catalogue text (key, tiles, sum) against the pure-Python functions it replaces."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from batchenum.jobs.palago import PalagoJob
from batchenum.pipeline.job import PlanContext
from batchenum.solvers.palago import Catalogue, count_creatures, decode_codes, key_of
from batchenum.solvers.palago.catalogue import catalogue_text
from batchenum.solvers.palago.sums import decode, encode


@pytest.fixture(scope="module")
def catalogue15():
    """Every canonical creature up to n = 15 (2,199 of them)."""
    _, found = count_creatures(15, catalogue_max_n=15)
    return found


def test_text_is_byte_identical_to_python_on_every_creature_up_to_15(catalogue15):
    text = catalogue_text(catalogue15)
    keys, tiles, sums = text.column("key"), text.column("tiles"), text.column("sum")
    assert len(keys) == len(tiles) == len(sums) == len(catalogue15) == 2199
    for k in range(len(catalogue15)):
        creature = decode_codes(catalogue15.tile_codes(k))
        assert keys[k] == key_of(creature)
        assert tiles[k] == json.dumps([list(tile) for tile in creature])
        assert sums[k] == encode(creature), keys[k]
        assert key_of(decode(sums[k])) == keys[k]  # the sum rebuilds the very same fixed creature


def test_empty_catalogue():
    empty = catalogue_text(count_creatures(4, catalogue_max_n=2)[1])
    assert empty.column("key") == [] and empty.key_offsets.tolist() == [0]


def test_subset_of_a_catalogue_is_encoded_independently(catalogue15):
    """Rows depend only on their own codes, whatever comes before them."""
    picks = [len(catalogue15) - 1, 0, 700]
    subset = Catalogue(
        catalogue15.sizes[picks], catalogue15.stabilisers[picks], catalogue15.offsets[picks], catalogue15.codes
    )
    full = catalogue_text(catalogue15).column("sum")
    assert catalogue_text(subset).column("sum") == [full[k] for k in picks]


def test_job_shard_writes_the_same_rows_as_before():
    """run_shard's creatures columns: Arrow strings equal to what the pure-Python path produced."""
    job = PalagoJob(12, catalogue_max_n=11, shards=3)
    out = job.run_shard(job.plan(PlanContext())[1]).tables["creatures"]
    _, catalogue = count_creatures(12, None, 11)
    rows = sorted(
        zip(
            out["n"].tolist(),
            out["key"].to_pylist(),
            out["stabiliser"].tolist(),
            out["tiles"].to_pylist(),
            out["sum"].to_pylist(),
        )
    )
    assert all(isinstance(out[name], pa.StringArray) for name in ("key", "tiles", "sum"))
    expected = {}
    for k in range(len(catalogue)):
        creature = decode_codes(catalogue.tile_codes(k))
        expected[key_of(creature)] = (
            int(catalogue.sizes[k]),
            key_of(creature),
            int(catalogue.stabilisers[k]),
            json.dumps([list(t) for t in creature]),
            encode(creature),
        )
    assert rows and all(expected[row[1]] == row for row in rows)
