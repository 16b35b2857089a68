"""Input identity by content: a committed shard is reused only while the bytes of its slice are the
ones it read, and a file that changes during a run stops the run with its name."""

from __future__ import annotations

import io
import json
import os

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from batchenum.jobs.dungeons import DungeonJob
from batchenum.jobs.nonary import NonaryJob
from batchenum.pipeline.errors import InputError
from batchenum.pipeline.execute import RunOptions, run_job
from batchenum.pipeline.inputs import plan_slices, read_records, slice_fingerprint
from batchenum.pipeline.job import PlanContext
from batchenum.pipeline.parquet_format import read_metadata
from batchenum.pipeline.progress import Progress
from batchenum.pipeline.storage import Storage

GRIDS = [["@.$", "..$"], ["@$#", "g.$"], ["@..", "$.$"], ["@$$", "..."]] * 6


def write(path, grids) -> None:
    path.write_text("".join(json.dumps({"id": f"d{k}", "grid": g}) + "\n" for k, g in enumerate(grids)))


def replace_keeping_size_and_mtime(path, old: bytes, new: bytes) -> None:
    """What cp -p, rsync -t or a restored backup do: other bytes, same size, same mtime."""
    stat = os.stat(path)
    data = path.read_bytes()
    assert len(old) == len(new) and old in data
    path.write_bytes(data.replace(old, new, 1))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def run(path, out):
    return run_job(
        DungeonJob(str(path), records_per_shard=5),
        RunOptions(out=str(out), serial=True),
        Progress("dungeons", stream=io.StringIO()),
    )


def test_content_changed_behind_same_size_and_mtime_is_recomputed(tmp_path):
    batch = tmp_path / "d.jsonl"
    write(batch, GRIDS)
    first = run(batch, tmp_path / "out")
    assert pd.read_parquet(tmp_path / "out" / "dungeons" / "answers").gold[1] == 0
    replace_keeping_size_and_mtime(batch, b'["@$#", "g.$"]', b'["@$#", "..$"]')  # the monster goes
    second = run(batch, tmp_path / "out")
    assert second.reused == first.shards - 1
    assert second.recomputed == ["s00000"]
    run(batch, tmp_path / "fresh")
    answers = pd.read_parquet(tmp_path / "out" / "dungeons" / "answers")
    pd.testing.assert_frame_equal(answers, pd.read_parquet(tmp_path / "fresh" / "dungeons" / "answers"))
    # the monster next to the start blocked both gold cells; without it both are reached
    assert answers.gold[1] == 2 and first.tables["answers"].rows == len(GRIDS)


def run_saying(path, out, records_per_shard=5):
    said = io.StringIO()
    job = DungeonJob(str(path), records_per_shard=records_per_shard)
    result = run_job(job, RunOptions(out=str(out), serial=True), Progress("dungeons", stream=said))
    return result, said.getvalue()


def append(path, grids, first_id: int) -> None:
    with open(path, "a") as handle:
        handle.write("".join(json.dumps({"id": f"d{first_id + k}", "grid": g}) + "\n" for k, g in enumerate(grids)))


@pytest.mark.parametrize("lines", [24, 25], ids=["last-slice-partial", "last-slice-full"])
def test_appending_lines_reuses_every_shard_whose_bytes_did_not_change(tmp_path, lines):
    batch = tmp_path / "d.jsonl"
    write(batch, (GRIDS * 2)[:lines])
    first, _ = run_saying(batch, tmp_path / "out")
    assert first.shards == 5
    append(batch, (GRIDS * 5)[:100], lines)
    second, said = run_saying(batch, tmp_path / "out")
    assert second.shards == -(-(lines + 100) // 5)
    if lines == 25:  # the five slices keep their bytes: all reused, only the new ones computed
        assert (second.reused, second.recomputed) == (5, [])
        assert "input changed" not in said
    else:  # the last slice (4 lines) now holds 5: its bytes changed, the other four are reused
        assert (second.reused, second.recomputed, second.input_changed) == (4, ["s00004"], ["s00004"])
        assert said.count("input changed") == 1 and "input changed: 1 shard recomputed (s00004)" in said
    for word in ("damaged", "provenance", "mtime_ns", "stale"):
        assert word not in said
    run_saying(batch, tmp_path / "fresh")
    answers = pd.read_parquet(tmp_path / "out" / "dungeons" / "answers")
    assert len(answers) == lines + 100
    pd.testing.assert_frame_equal(answers, pd.read_parquet(tmp_path / "fresh" / "dungeons" / "answers"))


def test_appending_rows_to_a_parquet_input_reuses_the_slices_whose_row_groups_did_not_change(tmp_path):
    path = tmp_path / "d.parquet"
    grids = GRIDS * 5
    pq.write_table(pa.table({"id": [f"d{k}" for k in range(24)], "grid": grids[:24]}), path, row_group_size=4)
    first, _ = run_saying(path, tmp_path / "out", records_per_shard=4)
    pq.write_table(pa.table({"id": [f"d{k}" for k in range(120)], "grid": grids}), path, row_group_size=4)
    second, said = run_saying(path, tmp_path / "out", records_per_shard=4)
    assert (first.shards, second.shards) == (6, 30)
    assert (second.reused, second.recomputed) == (6, [])
    run_saying(path, tmp_path / "fresh", records_per_shard=4)
    answers = pd.read_parquet(tmp_path / "out" / "dungeons" / "answers")
    pd.testing.assert_frame_equal(answers, pd.read_parquet(tmp_path / "fresh" / "dungeons" / "answers"))


def test_unchanged_input_is_reused_after_a_check(tmp_path):
    batch = tmp_path / "d.jsonl"
    write(batch, GRIDS)
    first = run(batch, tmp_path / "out")
    again = run(batch, tmp_path / "out")
    assert again.reused == first.shards and not again.recomputed


def test_a_same_size_edit_during_a_run_is_detected(tmp_path):
    batch = tmp_path / "d.jsonl"
    write(batch, GRIDS)
    spec = plan_slices(str(batch), "grid", 5)[3]
    data = batch.read_bytes()
    batch.write_bytes(data.replace(b'"@.."', b'"@.."', 1))  # same bytes, new mtime: a rewrite in place
    os.utime(batch, ns=(os.stat(batch).st_atime_ns, os.stat(batch).st_mtime_ns + 1_000_000_000))
    with pytest.raises(InputError, match="changed during the run"):
        read_records(spec, "grid", pa.list_(pa.string()))


def test_parquet_fingerprint_follows_the_row_groups_of_the_slice(tmp_path):
    path = tmp_path / "d.parquet"
    table = pa.table({"id": [f"d{k}" for k in range(len(GRIDS))], "grid": GRIDS})
    pq.write_table(table, path, row_group_size=4)
    specs = plan_slices(str(path), "grid", 4)
    before = [slice_fingerprint(spec) for spec in specs]
    assert len(set(before)) == len(before)
    changed = table.set_column(1, "grid", pa.array([GRIDS[1]] + GRIDS[1:]))  # row 1 of slice 0 only
    stat = os.stat(path)
    pq.write_table(changed, path, row_group_size=4)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    specs = plan_slices(str(path), "grid", 4)
    after = [slice_fingerprint(spec) for spec in specs]
    assert after[0] != before[0]
    assert after[1:] == before[1:] or os.stat(path).st_size != stat.st_size


class ReadCountingStorage(Storage):
    """The input's real Storage, noting the byte ranges read through ``read_bytes``, and through
    each file opened with ``open_input`` (its ``read_at`` calls, as one range when they follow
    each other)."""

    def __init__(self, source: Storage):
        super().__init__(source.fs, source.root, source.display_root, source.local)
        self.reads: list[tuple[int, int | None]] = []

    def read_bytes(self, path: str, start: int = 0, end: int | None = None) -> bytes:
        self.reads.append((start, end))
        return super().read_bytes(path, start, end)

    def open_input(self, path: str):
        return RangeNotingInput(super().open_input(path), self.reads)


class RangeNotingInput:
    def __init__(self, handle, reads: list):
        self._handle, self._reads, self._range = handle, reads, None

    def __getattr__(self, name: str):  # planning's counting reads (seek, readinto) are not noted
        return getattr(self._handle, name)

    def read_at(self, size: int, offset: int) -> bytes:
        data = self._handle.read_at(size, offset)
        start, end = self._range or (offset, offset)
        assert end == offset, "a slice is read in one pass, front to back"
        self._range = (start, offset + len(data))
        return data

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._range:
            self._reads.append(self._range)
        self._handle.close()


@pytest.mark.parametrize("job_class", [DungeonJob, NonaryJob])
def test_a_shard_reads_its_slice_once_and_records_its_checksum(tmp_path, job_class):
    batch = tmp_path / "d.jsonl"
    write(batch, GRIDS)
    with open(batch, "a") as handle:  # a doubtful slice: the dungeons' Arrow reader declines, then falls back
        handle.write('{"id": "x", "grid": 7}\nnot json\n')
    job = job_class(str(batch), records_per_shard=5)
    job.files = (source := ReadCountingStorage(job.files[0]),)
    for rerun in (False, True):  # computed, then checked against the input and reused
        source.reads = []
        result = run_job(
            job, RunOptions(out=str(tmp_path / "out"), serial=True), Progress(job.name, stream=io.StringIO())
        )
        assert result.reused == (result.shards if rerun else 0)
        run_reads, source.reads = source.reads, []
        shards = job.plan(PlanContext())  # the reads of planning alone (the file's head and last byte)
        slices = [(shard.spec["from"], shard.spec["to"]) for shard in shards]
        assert sorted(run_reads) == sorted(source.reads + slices)
        for shard in shards:
            committed = tmp_path / "out" / job.name / "_shards" / "answers" / f"{shard.id}.parquet"
            stats = json.loads(read_metadata(str(committed), None)["stats"])
            assert stats["input_fingerprint"] == slice_fingerprint(dict(shard.spec))
