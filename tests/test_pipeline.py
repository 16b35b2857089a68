"""The pipeline on a toy job: atomic shard files, reuse, damage detection, merge, serial vs Ray."""

from __future__ import annotations

import io
import os

import pandas as pd
import pyarrow.parquet as pq
import pytest
import toy_job
from ray import cloudpickle
from toy_job import ToyJob

from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.execute import RunOptions, code_version, run_job
from batchenum.pipeline.job import Column, PlanContext, Shard, ShardResult, TableSpec
from batchenum.pipeline.parquet_format import StoreError
from batchenum.pipeline.progress import Progress
from batchenum.pipeline.runner import ShardFailedError

# Ray workers cannot import the tests folder; ship the toy job's module by value.
cloudpickle.register_pickle_by_value(toy_job)


def quiet() -> Progress:
    return Progress("toy", stream=io.StringIO())


def run(tmp_path, job=None, **options):
    return run_job(
        job or ToyJob(), RunOptions(out=str(tmp_path), serial=options.pop("serial", True), **options), quiet()
    )


def test_merge_deduplicates_sorts_and_partitions(tmp_path):
    result = run(tmp_path)
    items = result.tables["items"].to_pandas()
    assert sorted(items.value.tolist()) == list(range(35))  # 6 overlapping shards of 10 values
    back = pd.read_parquet(tmp_path / "toy" / "items")  # a folder of parts, as merged
    assert back.equals(items)
    assert sorted(back.value.tolist()) == list(range(35))
    assert back.parity.tolist() == sorted(back.parity) and str(back.parity.dtype) == "int64"  # a real column
    totals = pd.read_parquet(tmp_path / "toy" / "totals.parquet")
    assert totals.to_dict("list") == {"parity": [0, 1], "count": [18, 17], "sum": [306, 289]}


def test_rerun_reuses_every_committed_shard(tmp_path):
    first = run(tmp_path)
    second = run(tmp_path)
    assert (first.reused, second.reused) == (0, 6)
    assert second.tables["items"].to_pandas().equals(first.tables["items"].to_pandas())


def test_changed_parameters_are_not_reused(tmp_path):
    run(tmp_path)
    with pytest.raises(PipelineError, match=r"holds the tables of another run .* overwrite=True to replace"):
        run(tmp_path, ToyJob(width=4))
    result = run(tmp_path, ToyJob(width=4), overwrite=True)
    assert result.reused == 0
    assert sorted(result.recomputed) == [f"s{k:03d}" for k in range(6)]
    assert sorted(result.tables["items"].column("value").to_pylist()) == list(range(28))


@pytest.mark.parametrize("damage", ["truncate", "garbage", "delete_footer_byte"])
def test_damaged_shard_is_detected_and_recomputed(tmp_path, damage):
    first = run(tmp_path)
    path = tmp_path / "toy" / "_shards" / "items" / "s002.parquet"
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(data[:8] + bytes(len(data) - 16) + data[-8:])
    else:
        path.write_bytes(data[:-9] + bytes([data[-9] ^ 0xFF]) + data[-8:])
    expected = first.tables["items"].to_pandas()
    result = run(tmp_path)
    assert result.recomputed == ["s002"]
    assert result.reused == 5
    assert result.tables["items"].to_pandas().equals(expected)
    pq.read_table(path)  # rewritten whole


def test_temporary_files_are_removed_not_read(tmp_path):
    run(tmp_path)
    stray = tmp_path / "toy" / "_shards" / "items" / "s001.parquet.tmp-999-deadbeef"
    stray.write_bytes(b"partial")
    result = run(tmp_path)
    assert not stray.exists()
    assert result.reused == 6


def test_a_failing_shard_names_itself_and_keeps_the_others(tmp_path):
    with pytest.raises(ShardFailedError, match="shard s003 failed: ValueError: bad input in s003"):
        run(tmp_path, ToyJob(fail_on="s003"))
    committed = sorted(os.listdir(tmp_path / "toy" / "_shards" / "items"))
    assert committed == ["s000.parquet", "s001.parquet", "s002.parquet"]
    assert run(tmp_path).reused == 3


def test_ray_and_serial_give_identical_files(tmp_path, ray_session):
    run(tmp_path / "serial")
    run(tmp_path / "ray", serial=False, window=2)
    for name in ("totals.parquet", "items/part-00000.parquet"):
        assert (tmp_path / "serial" / "toy" / name).read_bytes() == (tmp_path / "ray" / "toy" / name).read_bytes()


def test_ray_failure_is_not_retried_and_names_the_shard(tmp_path, ray_session):
    with pytest.raises(ShardFailedError, match="shard s004 failed: ValueError: bad input in s004"):
        run(tmp_path, ToyJob(fail_on="s004"), serial=False)


def test_provenance_is_in_the_metadata(tmp_path):
    run(tmp_path)
    meta = pq.read_schema(tmp_path / "toy" / "_shards" / "items" / "s000.parquet").metadata
    assert meta[b"batchenum.job"] == b"toy"
    assert meta[b"batchenum.shard"] == b"s000"
    assert b'"width": 5' in meta[b"batchenum.params"]
    assert meta[b"batchenum.version"] == b"1"  # the declared version, as a final table's (a shard may become a part)
    assert meta[b"batchenum.code"].startswith(b"1+")  # and the code version in full, which reuse checks


def test_a_shard_the_driver_cannot_read_stops_the_run_before_any_table(tmp_path):
    """A shard committed where the driver does not see it (a node's own disk) is never skipped: the
    run names it and the node it ran on, and writes no final table."""
    from batchenum.pipeline.execute import _check_complete
    from batchenum.pipeline.parquet_format import Provenance
    from batchenum.pipeline.shard_store import ShardStore
    from batchenum.pipeline.storage import Storage

    job = ToyJob()
    run(tmp_path)
    os.remove(tmp_path / "toy" / "_shards" / "items" / "s004.parquet")
    store = ShardStore(Storage.at(str(tmp_path)), job, Provenance(job.name, code_version(job), job.params()))
    with pytest.raises(PipelineError, match=r"1 of 6 shards are not committed .*s004 \(ran on node-b"):
        _check_complete(job, store, job.plan(PlanContext()), {"s004": "node-b (10.0.0.2)"})


class _StreamedToy(ToyJob):
    """ToyJob's overlapping shards, written as a streamed table: the overlap must be an error."""

    name = "streamed_toy"
    tables = (TableSpec("rows", (Column("value", "int64"),), key=("value",), sort=("value",)),)
    shard_tables = ("rows",)
    streamed_tables = ("rows",)

    def run_shard(self, shard, context=None):
        return ShardResult({"rows": {"value": list(range(shard.spec["start"], shard.spec["stop"]))}})

    def finalize(self, tables, out):
        return tables


def test_a_streamed_table_names_a_repeated_key_instead_of_dropping_rows(tmp_path):
    with pytest.raises(StoreError, match=r"'rows': value = 5 in shard s001 repeats or comes out of order") as raised:
        run(tmp_path, _StreamedToy())
    assert "have run_shard sort its rows" in str(raised.value) and "bug" not in str(raised.value)  # the job's mistake
    assert not (tmp_path / "streamed_toy" / "rows.parquet").exists()


def test_a_streamed_table_is_written_shard_by_shard(tmp_path):
    job = _StreamedToy(width=5)
    job.plan = lambda context: [Shard(f"s{k:03d}", {"start": 5 * k, "stop": 5 * k + 5}) for k in range(6)]
    result = run(tmp_path, job)
    assert len(result.tables["rows"]) == 30
    assert pd.read_parquet(tmp_path / "streamed_toy" / "rows").value.tolist() == list(range(30))


class _PartitionedStreamedToy(ToyJob):
    """A streamed partitioned table with string keys; each shard emits its rows out of order."""

    name = "partitioned_toy"
    tables = (
        TableSpec(
            "rows",
            (Column("group", "int64"), Column("key", "string")),
            key=("key",),
            sort=("group", "key"),
            partition="group",
        ),
    )
    shard_tables = ("rows",)
    streamed_tables = ("rows",)

    def __init__(self, repeat: str | None = None):
        super().__init__(shards=3)
        self.repeat = repeat

    def extra_params(self) -> dict:
        return {"repeat": self.repeat}

    def run_shard(self, shard, context=None):
        k = int(shard.id[1:])
        keys = [f"k{value:03d}" for value in range(k, 60, 3)][::-1] + ([self.repeat] if self.repeat and k == 2 else [])
        return ShardResult({"rows": {"group": [int(key[1:]) % 2 for key in keys], "key": keys}})

    def finalize(self, tables, out):
        return tables


@pytest.mark.parametrize("batch_rows, group_rows, part_rows", [(4, 4, 8), (1 << 17, 1 << 17, 1 << 22)])
def test_a_streamed_partitioned_table_merges_the_shards_sorted_runs(
    tmp_path, monkeypatch, batch_rows, group_rows, part_rows
):
    # small sizes: several row groups and parts, keys checked across them
    monkeypatch.setattr("batchenum.pipeline.table_commit._BATCH_ROWS", batch_rows)
    monkeypatch.setattr("batchenum.pipeline.table_commit.ROW_GROUP_ROWS", group_rows)
    monkeypatch.setattr("batchenum.pipeline.table_commit.PART_ROWS", part_rows)
    run(tmp_path, _PartitionedStreamedToy())
    parts = sorted((tmp_path / "partitioned_toy" / "rows").iterdir())
    # a part closes at the first value boundary past part_rows: one part per group value (30 rows each) here
    assert [part.name for part in parts] == [f"part-{k:05d}.parquet" for k in range(2 if part_rows == 8 else 1)]
    files = [pq.ParquetFile(part) for part in parts]
    assert [file.metadata.num_row_groups for file in files] == ([8, 8] if part_rows == 8 else [1])
    for file in files:  # a part holds whole values: one each here
        assert len(set(file.read(columns=["group"]).column(0).to_pylist())) == (1 if part_rows == 8 else 2)
    rows = pd.concat([file.read().to_pandas() for file in files])
    assert rows.key.tolist() == [f"k{v:03d}" for group in (0, 1) for v in range(group, 60, 2)]
    assert rows.group.tolist() == sorted(rows.group)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "partitioned_toy" / "rows"), rows.reset_index(drop=True))


@pytest.mark.parametrize("batch_rows", [4, 1 << 17])
def test_a_streamed_partitioned_table_names_a_repeated_key(tmp_path, monkeypatch, batch_rows):
    monkeypatch.setattr("batchenum.pipeline.table_commit._BATCH_ROWS", batch_rows)
    with pytest.raises(StoreError, match=r"'rows', group = 1: key 'k007' appears more than once"):
        run(tmp_path, _PartitionedStreamedToy(repeat="k007"))
    assert not (tmp_path / "partitioned_toy" / "rows").exists()  # no part of the failed table is in place


def test_prefetched_items_keep_their_order_and_an_exception_reaches_the_consumer():
    from batchenum.pipeline.table_commit import _prefetched

    def items():
        yield from range(5)
        raise ValueError("bad item 5")

    seen = []
    with pytest.raises(ValueError, match="bad item 5"):
        for item in _prefetched(items()):
            seen.append(item)
    assert seen == [0, 1, 2, 3, 4]
