"""A finish that does not scale with the batch: a shard large enough to be a part of its table is
taken over as it is (a hard link on a disk, a server-side copy on an object store), smaller ones
are still grouped and written anew; the default slicing makes large batches' shards that large."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest
from helpers import cli

import batchenum
from batchenum.pipeline.inputs.plan import MAX_SLICE_BYTES, SLICES_PER_CPU, SliceSize, plan_slices
from batchenum.pipeline.shard_store import SHARDS_DIR
from batchenum.pipeline.table_commit import MANIFEST_FILE, part_plan

RECORDS, PER_SHARD, TAKEOVER = 1050, 200, 150  # shards of 200 records and a last one of 50


def test_part_plan_takes_large_shards_over_and_groups_the_runs_between_them():
    rows = {"a": 10, "b": 0, "c": 100, "d": 5, "e": 0, "f": 70, "g": 0, "h": 0}
    assert part_plan(list(rows), rows, part_rows=1000, takeover_rows=70) == [
        (False, ["a", "b"]),
        (True, ["c"]),
        (False, ["d", "e"]),
        (True, ["f"]),
    ]  # the empty run g, h is dropped
    rows = {"a": 10, "b": 9, "c": 0, "d": 100}  # a run cut into parts of at least part_rows rows
    assert part_plan(list(rows), rows, part_rows=8, takeover_rows=70) == [
        (False, ["a"]),
        (False, ["b", "c"]),
        (True, ["d"]),
    ]
    assert part_plan(["x", "y"], {}, takeover_rows=1) == [(False, ["x", "y"])]  # no rows at all: one empty part
    assert part_plan([], {}) == [(False, [])]


@pytest.mark.parametrize("total", [1, 999, 10_000, 123_457, 5_000_000, 10**9])
@pytest.mark.parametrize("cpus", [1, 2, 16, 1000])
def test_the_automatic_slice_size_is_the_least_times_a_power_of_two_within_its_bounds(total, cpus):
    least, record_bytes = 250, 300
    size = SliceSize(least, cpus).records(total, total * record_bytes)
    assert size >= least and size % least == 0 and (size // least) & (size // least - 1) == 0
    wanted = -(-total // (SLICES_PER_CPU * cpus))  # the size that gives each CPU SLICES_PER_CPU slices
    if size > least:  # grown no further than that, and within the byte cap
        assert size <= wanted and size * record_bytes <= MAX_SLICE_BYTES
    assert size * 2 > wanted or size * 2 * record_bytes > MAX_SLICE_BYTES  # yet as large as both allow


def test_an_edited_file_leaves_the_automatic_slicing_of_the_others_alone(tmp_path):
    lines = [json.dumps({"id": f"r{k}", "grid": ["@."]}) + "\n" for k in range(3000)]
    for name, body in (("a.jsonl", lines[:1500]), ("b.jsonl", lines[1500:])):
        (tmp_path / name).write_text("".join(body))
    size = SliceSize(10, cpus=2)
    before = plan_slices(str(tmp_path), "grid", size)
    (tmp_path / "b.jsonl").write_text("".join(lines[1500:2990]))  # ten records fewer
    after = plan_slices(str(tmp_path), "grid", size)
    assert [s for s in before if s["path"].endswith("a.jsonl")] == [s for s in after if s["path"].endswith("a.jsonl")]
    assert [s["lines"] for s in before] == [320] * 4 + [None] + [320] * 4 + [None]  # 10 x 32 <= 3000 / (4 x 2)


@pytest.fixture
def batch(tmp_path: Path) -> Path:
    path = tmp_path / "batch.jsonl"
    cli(
        "generate",
        "dungeons",
        "--count",
        str(RECORDS),
        "--height",
        "6",
        "--width",
        "6",
        "--seed",
        "4",
        "--out",
        str(path),
    )
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:300] + ["not json\n"] * 3 + lines[303:]))  # three errors in the second shard
    return path


def run_batch(batch: Path, out: str, takeover: int, monkeypatch) -> batchenum.Result:
    monkeypatch.setattr("batchenum.pipeline.table_commit.TAKEOVER_ROWS", takeover)
    return batchenum.run("dungeons", input=str(batch), records_per_shard=PER_SHARD, out=out, serial=True)


def read_table(location: str, filesystem=None) -> pd.DataFrame:
    return ds.dataset(location, filesystem=filesystem, format="parquet").to_table().to_pandas()


def test_large_shards_become_the_tables_parts_by_hard_links_and_the_table_is_unchanged(batch, tmp_path, monkeypatch):
    run_batch(batch, str(tmp_path / "written"), 10**9, monkeypatch)  # every part written anew, as before
    out = tmp_path / "taken"
    run_batch(batch, str(out), TAKEOVER, monkeypatch)
    folder = out / "dungeons"
    parts = sorted((folder / "answers").iterdir())
    assert [part.name for part in parts] == [f"part-{k:05d}.parquet" for k in range(6)]
    for k, part in enumerate(parts[:5]):  # each shard of 197-200 answers is a part by itself, the same file
        assert os.path.samefile(part, folder / SHARDS_DIR / "answers" / f"s{k:05d}.parquet")
    assert parts[5].stat().st_nlink == 1  # the last shard's 50 rows were written anew
    assert (
        os.listdir(folder / "errors") == ["part-00000.parquet"]
        and (folder / "errors" / "part-00000.parquet").stat().st_nlink == 1
    )
    for table in ("answers", "errors"):
        pd.testing.assert_frame_equal(
            read_table(str(folder / table)), read_table(str(tmp_path / "written" / "dungeons" / table))
        )
    manifest = json.loads((folder / MANIFEST_FILE).read_text())
    assert [part["rows"] for part in manifest["tables"]["answers"]["parts"]] == [200, 197, 200, 200, 200, 50]

    shown = cli("status", "--out", str(out)).stdout
    assert "of them also the tables' parts, by hard links" in shown, shown
    shard_bytes = sum(path.stat().st_size for path in (folder / SHARDS_DIR).rglob("*.parquet"))
    linked = sum(path.stat().st_size for path in parts[:5])
    store = json.loads(cli("status", "--out", str(out), "--json").stdout)["jobs"][0]["shard_store"]
    assert store["bytes"] == shard_bytes and store["shared_with_tables_bytes"] == linked
    cleaned = cli("cleanup", "--out", str(out)).stdout
    assert f"({shard_bytes - linked:,} bytes freed)" in cleaned, cleaned
    pd.testing.assert_frame_equal(
        read_table(str(folder / "answers")), read_table(str(tmp_path / "written" / "dungeons" / "answers"))
    )

    again = run_batch(batch, str(out), TAKEOVER, monkeypatch)  # after cleanup: computed again, never stale
    assert again.reused == 0 and again.shards == 6
    pd.testing.assert_frame_equal(
        read_table(str(folder / "answers")), read_table(str(tmp_path / "written" / "dungeons" / "answers"))
    )


def test_on_s3_large_shards_are_copied_server_side_into_the_table(batch, tmp_path, monkeypatch, s3_server, new_bucket):
    for name, value in s3_server.items():
        monkeypatch.setenv(name, value)
    run_batch(batch, str(tmp_path / "written"), 10**9, monkeypatch)
    run_batch(batch, f"s3://{new_bucket}/run", TAKEOVER, monkeypatch)
    s3 = pafs.S3FileSystem(
        endpoint_override=s3_server["AWS_ENDPOINT_URL"],
        access_key=s3_server["AWS_ACCESS_KEY_ID"],
        secret_key=s3_server["AWS_SECRET_ACCESS_KEY"],
        region="us-east-1",
    )
    root = f"{new_bucket}/run/dungeons"
    shards = s3.get_file_info(pafs.FileSelector(f"{root}/{SHARDS_DIR}/answers"))
    assert len(shards) == 6  # copied, not moved: the shard store still reuses them
    for table in ("answers", "errors"):
        pd.testing.assert_frame_equal(
            read_table(f"{root}/{table}", s3), read_table(str(tmp_path / "written" / "dungeons" / table))
        )
