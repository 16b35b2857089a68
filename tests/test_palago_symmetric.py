"""Symmetric creatures counted by the orbit-closed search agree, through Burnside, with the direct
search's stabiliser breakdown."""

from __future__ import annotations

import numpy as np
import pytest

from batchenum.solvers.palago import count_creatures
from batchenum.solvers.palago.symmetric import stabiliser_columns, symmetric_counts

MAX_N = 18


@pytest.fixture(scope="module")
def both():
    direct, _ = count_creatures(MAX_N)
    return direct, symmetric_counts(MAX_N)


def test_symmetric_counts_match_the_direct_search_stabilisers(both):
    direct, sym = both
    f1, f2, f3, f6 = (direct.by_stabiliser[:, k] for k in range(4))
    # A class with a group of order 2 has one member fixed by a given reflection, order 3 has two
    # members fixed by the 120-degree rotation, order 6 one member fixed by everything.
    assert sym.reflection.tolist() == (f2 + f6).tolist()
    assert sym.rotation.tolist() == (2 * f3 + f6).tolist()
    assert sym.full.tolist() == f6.tolist()
    assert sym.reflection[MAX_N - 3 :].sum() > 0 and sym.rotation[15] > 0  # not vacuous


def test_stabiliser_columns_rebuild_the_free_counts(both):
    direct, sym = both
    columns = stabiliser_columns(direct.fixed, sym)
    assert columns["free"].tolist() == direct.free.tolist()
    for k, s in enumerate((1, 2, 3, 6)):
        assert columns[f"free_stabiliser_{s}"].tolist() == direct.by_stabiliser[:, k].tolist()


def test_rotations_need_a_multiple_of_three_tiles(both):
    _, sym = both
    n = np.arange(MAX_N + 1)
    assert (sym.rotation[n % 3 != 0] == 0).all() and (sym.full[n % 3 != 0] == 0).all()


def test_inconsistent_inputs_are_refused(both):
    direct, sym = both
    fixed = direct.fixed.copy()
    fixed[12] += 1
    with pytest.raises(ValueError):
        stabiliser_columns(fixed, sym)


def test_symmetric_counts_rebuild_the_published_table_to_24():
    # results/palago was written by the direct search (n <= 24); every stabiliser column and the
    # free counts follow from its fixed column and the symmetric counts.
    import pandas as pd
    from helpers import REPO

    table = pd.read_parquet(REPO / "results" / "palago" / "creature_counts.parquet")
    max_n = int(table.n.max())
    fixed = np.zeros(max_n + 1, dtype=np.int64)
    fixed[table.n.to_numpy()] = table.fixed.to_numpy()
    columns = stabiliser_columns(fixed, symmetric_counts(max_n))
    for name, column in columns.items():
        assert column[1:].tolist() == table[name].tolist(), name


@pytest.mark.parametrize("parts", [2, 3, 5])
def test_any_split_into_parts_gives_the_same_counts(both, parts):
    _, whole = both
    split = symmetric_counts(MAX_N, parts=parts)
    for kind in ("reflection", "rotation", "full"):
        assert getattr(split, kind).tolist() == getattr(whole, kind).tolist(), kind
    assert split.nodes == whole.nodes


def test_the_transfer_job_counts_symmetric_creatures_in_shards_not_on_the_driver(tmp_path, both):
    import pyarrow.parquet as pq

    from batchenum.jobs.palago_transfer import PalagoTransferJob
    from batchenum.pipeline.execute import RunOptions, run_job
    from batchenum.pipeline.job import PlanContext
    from batchenum.pipeline.progress import Progress
    from batchenum.solvers.palago.symmetric import GROUPS

    # one shard for the reflection (the half-plane sweep), one per rotation group (the search)
    plan = PalagoTransferJob(MAX_N).plan(PlanContext())
    symmetric = [shard.id for shard in plan if "symmetric" in shard.spec]
    assert len(symmetric) == sum(len(generators) for generators in GROUPS.values())
    assert "s-reflection" in symmetric
    run_job(PalagoTransferJob(MAX_N), RunOptions(out=str(tmp_path), serial=True), Progress("palago", quiet=True))
    shards = tmp_path / "palago" / "_shards" / "symmetric_counts"
    rows = pq.ParquetDataset(sorted(str(p) for p in shards.glob("s-*.parquet"))).read().to_pandas()
    summed = rows.groupby("n").sum()
    _, sym = both
    for kind in ("reflection", "rotation", "full"):
        assert summed[kind].tolist() == getattr(sym, kind)[1:].tolist(), kind


def test_the_transfer_job_cuts_each_rotation_group_into_pieces_when_its_search_grows_long(tmp_path, both):
    import pyarrow.parquet as pq

    from batchenum.jobs.palago_transfer import PalagoTransferJob, rotation_group_seconds, rotation_parts
    from batchenum.pipeline.execute import RunOptions, run_job
    from batchenum.pipeline.job import PlanContext
    from batchenum.pipeline.progress import Progress

    assert [rotation_parts(n) for n in (40, 50, 52, 53, 56, 60)] == [1, 1, 1, 2, 6, 48]
    job = PalagoTransferJob(MAX_N)
    # pieces of a quarter of a group's projected search, as if it took hours
    job.symmetric_piece_seconds = rotation_group_seconds(MAX_N) / 3.5
    rotation = [shard.id for shard in job.plan(PlanContext()) if shard.spec.get("symmetric") == "rotation"]
    assert rotation == [f"s-rotation-{group}-{part}" for group in range(3) for part in range(4)]
    run_job(job, RunOptions(out=str(tmp_path), serial=True), Progress("palago", quiet=True))
    shards = tmp_path / "palago" / "_shards" / "symmetric_counts"
    rows = pq.ParquetDataset(sorted(str(p) for p in shards.glob("s-*.parquet"))).read().to_pandas()
    _, sym = both
    assert rows.groupby("n").sum()["rotation"].tolist() == sym.rotation[1:].tolist()
