"""A DataFrame input reuses its unchanged slices, as a JSONL file edited in place does: a rerun with
some rows changed (``overwrite=True``, the frame being another) recomputes only the shards whose
rows changed, and its tables equal a fresh run's."""

from __future__ import annotations

import pandas as pd
import pyarrow.parquet as pq

import batchenum
from batchenum.pipeline.frames import FRAME, FRAME_GROUP_BYTES, frame_neutral, frame_row_group


def grids(rows: int) -> pd.DataFrame:
    return pd.DataFrame(
        {"id": [f"r{k}" for k in range(rows)], "grid": [["@" + "." * (k % 5) + "$"] for k in range(rows)]}
    )


def changed(frame: pd.DataFrame, *rows: int) -> pd.DataFrame:
    edited = frame.copy()
    for row in rows:
        edited.at[row, "grid"] = ["@#" + "." * 7 + "$"]  # 9 cells, no path: gold 0 where it had 1
    return edited


def tables(result: batchenum.Result) -> dict[str, list[dict]]:
    """Every table's rows but their file (each run's out is another)."""
    return {name: table.to_pandas().drop(columns="file").to_dict("records") for name, table in result.tables.items()}


def test_a_frame_with_changed_rows_recomputes_only_their_shards(tmp_path):
    first = grids(100)
    out = str(tmp_path / "out")
    done = batchenum.run("dungeons", input=first, out=out, serial=True, records_per_shard=10)
    assert (done.shards, done.reused) == (10, 0)
    second = changed(first, 37, 38, 91)
    again = batchenum.run("dungeons", input=second, out=out, serial=True, records_per_shard=10, overwrite=True)
    assert (again.shards, again.reused, sorted(again.recomputed)) == (10, 8, ["s00003", "s00009"])
    fresh = batchenum.run("dungeons", input=second, out=str(tmp_path / "fresh"), serial=True, records_per_shard=10)
    assert tables(again) == tables(fresh)
    answers = again.tables["answers"].to_pandas().set_index("id")
    assert answers.loc["r37"].gold == 0 and answers.loc["r36"].gold == 1
    assert set(answers.file) == {f"{tmp_path / 'out' / '_inputs'}/{FRAME}"}  # the same across the frame's versions


def test_automatic_slices_are_reused_too(tmp_path):
    first = grids(60_000)  # dungeons' slices: 25,000 rows at least, so 3 of them
    out = str(tmp_path / "out")
    batchenum.run("dungeons", input=first, out=out, serial=True)
    again = batchenum.run("dungeons", input=changed(first, 30_000), out=out, serial=True, overwrite=True)
    assert (again.shards, again.reused, again.recomputed) == (3, 2, ["s00001"])
    frames = sorted((tmp_path / "out" / "_inputs").iterdir())
    assert [pq.ParquetFile(path).metadata.row_group(0).num_rows for path in frames] == [25_000, 25_000]


def test_the_same_frame_still_reuses_everything_and_another_is_still_refused_without_overwrite(tmp_path):
    first = grids(30)
    out = str(tmp_path / "out")
    batchenum.run("dungeons", input=first, out=out, serial=True, records_per_shard=10)
    same = batchenum.run("dungeons", input=first.copy(), out=out, serial=True, records_per_shard=10)
    assert (same.shards, same.reused) == (3, 3)
    try:
        batchenum.run("dungeons", input=changed(first, 1), out=out, serial=True, records_per_shard=10)
    except batchenum.pipeline.errors.PipelineError as refused:
        assert "holds the tables of another run" in str(refused)
    else:
        raise AssertionError("a different frame into the same out was not refused")


def test_frame_row_groups_follow_the_slicing_within_a_byte_bound():
    assert frame_row_group(10, True, 100.0) == 10  # given: the slices' own size
    assert frame_row_group(1, False, 100.0) == 1024  # automatic, from 1: never a group per row
    assert frame_row_group(25_000, False, 100.0) == 25_000
    assert frame_row_group(25_000, True, FRAME_GROUP_BYTES / 1000) == 782  # 25,000 halved to fit 64 MiB
    assert frame_row_group(3, True, FRAME_GROUP_BYTES * 2.0) == 1


def test_only_batchenums_frame_names_are_neutralised():
    path = "/runs/out/_inputs/" + "0123456789abcdef" * 2 + ".parquet"
    assert frame_neutral({"input": path, "n": 3}) == {"input": f"/runs/out/_inputs/{FRAME}", "n": 3}
    for other in ("/runs/out/_inputs/notes.parquet", "/runs/out/data/" + "0" * 32 + ".parquet"):
        assert frame_neutral([other]) == [other]


def test_on_ray_the_workers_check_the_slices_and_recompute_the_changed_one(tmp_path, ray_session):
    first = grids(40)
    out = str(tmp_path / "out")
    options = {"out": out, "records_per_shard": 10, "head_start": False}  # every shard a Ray task
    batchenum.run("dungeons", input=first, **options)
    again = batchenum.run("dungeons", input=changed(first, 25), overwrite=True, **options)
    assert (again.shards, again.reused, again.recomputed) == (4, 3, ["s00002"])
    assert again.tables["answers"].to_pandas().set_index("id").loc["r25"].gold == 0
