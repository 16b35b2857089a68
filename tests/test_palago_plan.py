"""Palago shards packed by estimated work: every prefix in exactly one shard, exact counts, the
same plan on every call."""

from __future__ import annotations

import json

import numpy as np
import pytest

from batchenum.jobs.palago import PalagoJob, packed_prefixes
from batchenum.pipeline.job import PlanContext
from batchenum.solvers.palago import count_creatures, frontier, prefix_nodes


@pytest.mark.parametrize("max_n,depth,count", [(12, 4, 1), (14, 6, 3), (14, 8, 7), (16, 10, 32)])
def test_every_prefix_of_the_frontier_is_in_exactly_one_shard(max_n, depth, count):
    shards = packed_prefixes(max_n, depth, count)
    assert len(shards) == count
    assert sorted(k for shard in shards for k in shard) == list(range(len(frontier(max_n, depth))))


@pytest.mark.parametrize("shards", [1, 5, 12])
def test_the_shards_of_a_plan_sum_to_the_unsplit_search(shards):
    job = PalagoJob(15, shards=shards)
    whole, _ = count_creatures(15)
    outputs = [job.run_shard(shard).tables["partial_counts"] for shard in job.plan(PlanContext())]
    for column, expected in (("free", whole.free), ("fixed", whole.fixed), ("nodes", whole.nodes)):
        assert np.sum([output[column] for output in outputs], axis=0).tolist() == expected[1:].tolist()


def test_the_plan_is_the_same_on_every_call_and_its_specs_stay_small():
    job = PalagoJob(22, shards=32)
    first, second = job.plan(PlanContext()), PalagoJob(22, shards=32).plan(PlanContext())
    assert first == second
    assert max(len(json.dumps(dict(shard.spec))) for shard in first) < 1000  # about 120 prefix indices each


def test_prefix_nodes_add_up_to_the_whole_search_below_the_cut():
    whole, _ = count_creatures(14)
    cut = frontier(14, 6)
    assert prefix_nodes(14, cut).sum() == whole.nodes.sum() - _trunk_nodes(14, 6)


def _trunk_nodes(max_n: int, depth: int) -> int:
    from batchenum.solvers.palago import SearchCounts

    trunk = SearchCounts.zeros(max_n)
    frontier(max_n, depth, trunk)
    return int(trunk.nodes.sum())
