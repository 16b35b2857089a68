"""``batchenum cleanup`` removes the DataFrames under ``OUT/_inputs/`` that no job's tables or plan
name (a refused attempt's, a replaced run's), and nothing else: not the one in use, not a file
younger than an hour, not a link, not a file of another name."""

from __future__ import annotations

import os
import time

import pandas as pd
import pytest
from helpers import cli

import batchenum
from batchenum.pipeline.errors import PipelineError

FRAMES = [
    pd.DataFrame({"id": ["a", "b"], "grid": [["@$"], ["@#$"]]}),
    pd.DataFrame({"id": ["c", "d", "e"], "grid": [["@$$"], ["@.$"], ["@"]]}),
    pd.DataFrame({"id": ["f"], "grid": [["@.$$"]]}),
]


def age(path, hours: float) -> None:
    then = time.time() - hours * 3600
    os.utime(path, (then, then), follow_symlinks=False)


def test_cleanup_removes_the_inputs_no_table_or_plan_names(tmp_path):
    out = tmp_path / "out"
    inputs = out / "_inputs"
    batchenum.run("dungeons", input=FRAMES[0], out=str(out), serial=True)
    with pytest.raises(PipelineError, match="holds the tables of another run"):
        batchenum.run("dungeons", input=FRAMES[1], out=str(out), serial=True)  # refused: its file stays
    batchenum.run("dungeons", input=FRAMES[2], out=str(out), serial=True, overwrite=True)  # replaces the first
    batchenum.run("palago", max_n=8, out=str(out), serial=True)  # a job without input beside it
    files = sorted(inputs.iterdir())
    assert len(files) == 3
    manifest = (out / "dungeons" / "_manifest.json").read_text()
    in_use = {p.name for p in files if p.name in manifest}
    assert len(in_use) == 1
    stale = [p for p in files if p.name not in in_use]
    stale_bytes = sum(p.stat().st_size for p in stale)
    outside = tmp_path / "precious.parquet"
    outside.write_bytes(b"not ours")
    (inputs / ("f" * 32 + ".parquet")).symlink_to(outside)  # a link with a name like ours
    (inputs / "notes.parquet").write_bytes(b"someone's")  # a file of another name
    for path in inputs.iterdir():
        age(path, 2)

    done = cli("cleanup", "--out", str(out))
    assert (
        f"_inputs: removed 2 input files that no job's tables or plan name ({stale_bytes:,} bytes freed)" in done.stdout
    )
    assert sorted(p.name for p in inputs.iterdir()) == sorted([*in_use, "f" * 32 + ".parquet", "notes.parquet"])
    assert outside.read_bytes() == b"not ours"
    rerun = batchenum.run("dungeons", input=FRAMES[2], out=str(out), serial=True)  # its input is still there
    assert sorted(rerun.tables["answers"].to_pandas().id) == ["f"]


def test_a_recent_input_is_kept_and_job_only_cleanup_leaves_inputs(tmp_path):
    out = tmp_path / "out"
    batchenum.run("dungeons", input=FRAMES[0], out=str(out), serial=True)
    with pytest.raises(PipelineError):
        batchenum.run("dungeons", input=FRAMES[1], out=str(out), serial=True)
    assert len(list((out / "_inputs").iterdir())) == 2
    only_job = cli("cleanup", "--out", str(out), "--job", "dungeons")
    assert "_inputs" not in only_job.stdout and len(list((out / "_inputs").iterdir())) == 2
    done = cli("cleanup", "--out", str(out))
    assert "_inputs: removed 0 input files" in done.stdout
    assert "kept 1 written in the last 60 minutes (a run may be starting with them)" in done.stdout
    assert len(list((out / "_inputs").iterdir())) == 2
