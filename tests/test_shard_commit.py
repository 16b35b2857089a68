"""A shard's tables are one commit (issue 35, item 4): its answers and errors become visible together
or not at all, whatever stops the writer between them: a folder that refuses the write (an immutable
``_shards/errors``, which binds root as well), a full file system (a small tmpfs), a SIGKILL.  Every
record then ends in exactly one table."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from helpers import assert_exit, cli

from batchenum.pipeline.faults import KILL_BETWEEN_SHARD_TABLES

needs_chattr = pytest.mark.skipif(
    shutil.which("chattr") is None or os.geteuid() != 0,
    reason="chattr +i (root) makes a folder refuse every write, root's included",
)


@contextlib.contextmanager
def immutable(folder: Path):
    """``folder`` refuses new entries and renames, for root too, until the block ends."""
    made = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"this file system has no immutable flag: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


def lines_by_table(out: Path, job: str) -> dict[str, list[int]]:
    return {table: sorted(pd.read_parquet(out / job / table)["line"].tolist()) for table in ("answers", "errors")}


def assert_each_record_in_one_table(out: Path, job: str, records: int) -> None:
    found = lines_by_table(out, job)
    assert not set(found["answers"]) & set(found["errors"]), found
    assert sorted(found["answers"] + found["errors"]) == list(range(1, records + 1))


def same_size_change(batch: Path, line: int, replacement: str) -> None:
    """Line ``line`` (1-based) replaced by ``replacement`` padded to its length, the file's size and
    modification time kept: only its checksum tells."""
    stamp = batch.stat()
    lines = batch.read_text().splitlines(keepends=True)
    old = lines[line - 1]
    assert len(replacement) + 1 <= len(old)
    lines[line - 1] = replacement + " " * (len(old) - len(replacement) - 1) + "\n"
    batch.write_text("".join(lines))
    os.utime(batch, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert batch.stat().st_size == stamp.st_size


@pytest.fixture
def dungeons(tmp_path) -> tuple[Path, tuple[str, ...]]:
    batch = tmp_path / "batch.jsonl"
    cli("generate", "dungeons", "--count", "300", "--height", "8", "--width", "8", "--seed", "1", "--out", str(batch))
    out = tmp_path / "out"
    command = ("run", "dungeons", "--input", str(batch), "--records-per-shard", "100", "--serial", "--out", str(out))
    cli(*command)
    return batch, command


@needs_chattr
def test_a_shard_whose_errors_cannot_be_written_is_not_half_reused(dungeons, tmp_path):
    batch, command = dungeons
    out = tmp_path / "out"
    same_size_change(batch, 5, '{"id":"broken"}')  # line 5 now has no grid: an error row, not an answer
    with immutable(out / "dungeons" / "_shards" / "errors"):
        failed = cli(*command, expect=1)
    assert "_shards/errors/s00000.parquet" in failed.stderr, failed.stderr
    rerun = cli(*command)
    assert "shard s00000 will be recomputed: its tables were not committed together" in rerun.stderr, rerun.stderr
    assert_each_record_in_one_table(out, "dungeons", 300)
    assert lines_by_table(out, "dungeons")["errors"] == [5]


def test_a_writer_killed_between_a_shards_tables_leaves_no_mixed_shard(dungeons, tmp_path):
    batch, command = dungeons
    out = tmp_path / "out"
    same_size_change(batch, 107, "not json")
    cli(*command, env={KILL_BETWEEN_SHARD_TABLES: "s00001"}, expect=-9)
    status = json.loads(cli("status", "--out", str(out), "--json").stdout)["jobs"][0]
    assert status["shards"]["committed"] == 2  # s00001: new answers beside old errors counts as not committed
    rerun = cli(*command)
    assert "shard s00001 will be recomputed: its tables were not committed together" in rerun.stderr, rerun.stderr
    assert_each_record_in_one_table(out, "dungeons", 300)
    assert lines_by_table(out, "dungeons")["errors"] == [107]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None, reason="a tmpfs mount needs root")
def test_a_full_file_system_between_a_shards_tables_leaves_no_mixed_shard(tmp_path):
    """On a tmpfs of 3 MiB filled but for 80 KB: a shard's new errors no longer fit once its new
    answers landed; once room is made, the rerun is exact."""
    script = tmp_path / "full.py"
    script.write_text(_FULL_DISK_SCRIPT)
    done = subprocess.run(
        ["unshare", "-m", "--propagation", "private", sys.executable, str(script), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert_exit(done, 0)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["full_exit"] == 1 and "takes no more" in report["full_stderr"], report
    assert report["rerun_exit"] == 0 and report["not_together"], report
    assert report["overlap"] == [] and report["records"] == report["expected"], report


# Runs in a private mount namespace (unshare -m): a small tmpfs as --out, the batch outside it.
_FULL_DISK_SCRIPT = r"""
import json, os, subprocess, sys
import pandas as pd

root = sys.argv[1]
out = os.path.join(root, "small")
os.makedirs(out)
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", out], check=True)

def cli(*args):
    return subprocess.run([sys.executable, "-m", "batchenum", *args], capture_output=True, text=True)

batch = os.path.join(root, "batch.jsonl")
assert cli("generate", "dungeons", "--count", "4000", "--height", "8", "--width", "8", "--seed", "2",
           "--out", batch).returncode == 0
run = ("run", "dungeons", "--input", batch, "--records-per-shard", "2000", "--serial", "--out", out)
assert cli(*run).returncode == 0
# the same size and modification time, every record of the second shard now an error whose id is
# random: its errors file no longer fits once its answers file has been rewritten
stamp = os.stat(batch)
with open(batch) as handle:
    good = handle.read().splitlines()
bad = [json.dumps({"id": os.urandom(64).hex()[: len(line) - 25], "grid": 1}) for line in good[2000:]]
lines = good[:2000] + [line.ljust(len(old)) for line, old in zip(bad, good[2000:])]
with open(batch, "w") as handle:
    handle.write("\n".join(lines) + "\n")
os.utime(batch, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
assert os.stat(batch).st_size == stamp.st_size
filler = os.path.join(out, "filler")
free = os.statvfs(out).f_bavail * os.statvfs(out).f_frsize
with open(filler, "wb") as handle:
    handle.write(b"\0" * max(0, free - 80_000))
full = cli(*run)
os.remove(filler)
rerun = cli(*run)
answers = pd.read_parquet(os.path.join(out, "dungeons", "answers"))
errors = pd.read_parquet(os.path.join(out, "dungeons", "errors"))
ids = list(answers["id"]) + list(errors["id"])
print(json.dumps({"full_exit": full.returncode, "full_stderr": full.stderr[-600:], "rerun_exit": rerun.returncode,
                  "not_together": "not committed together" in rerun.stderr, "rerun_stderr": rerun.stderr[-600:],
                  "overlap": sorted(set(answers["line"]) & set(errors["line"])), "records": len(set(ids)),
                  "expected": 4000, "rows": len(ids)}))
subprocess.run(["umount", out])
"""


@needs_chattr
def test_nonary_records_that_timed_out_are_retried_exactly_after_a_failed_commit(tmp_path):
    """The issue's report: a record timeout, then a rerun with a longer --record-timeout whose errors
    could not be written; every later run then said "a bug: please report it"."""
    batch = tmp_path / "doors.jsonl"
    cli("generate", "nonary", "--count", "20", "--seed", "5", "--rooms", "6", "--doors", "24", "--out", str(batch))
    out = tmp_path / "out"
    run = ("run", "nonary", "--input", str(batch), "--serial", "--out", str(out), "--record-timeout")
    first = cli(*run, "0.0005")
    assert "timed out" in first.stdout, first.stdout
    with immutable(out / "nonary" / "_shards" / "errors"):
        cli(*run, "600", expect=1)
    for _ in range(2):
        rerun = cli(*run, "600")
        assert "a bug" not in rerun.stderr, rerun.stderr
        assert "nonary: read 20, answered 20, rejected 0" in rerun.stdout, rerun.stdout
    assert_each_record_in_one_table(out, "nonary", 20)
