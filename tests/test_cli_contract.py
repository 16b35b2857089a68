"""The command line as scripts and orchestrators drive it: ``--version``, exit status 2 with one line
for every usage error, ``--json`` shapes, a closed pipe, and refusals that create nothing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pandas as pd
import pytest
from helpers import CASES, assert_exit, cli

from batchenum.jobs import REGISTRY


def test_version_names_the_installed_package():
    from importlib import metadata

    done = cli("--version")
    assert done.stdout.strip() == f"batchenum {metadata.version('batchenum')}"


@pytest.mark.parametrize(
    "args, says",
    [
        (("run", "palago", "--max-n", "99"), "--max-n must be between 1 and"),
        (
            ("run", "palago", "--max-n", "12", "--catalogue-max-n", "13"),
            "--catalogue-max-n must be between 0 and --max-n",
        ),
        (("run", "palago", "--serial", "--workers", "2"), "--serial runs without Ray"),
        (("run", "palago", "--method", "transfer", "--catalogue-max-n", "3"), "--method transfer counts only"),
    ],
)
def test_usage_errors_exit_2_with_one_line(args, says):
    done = cli(*args, expect=2)
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("batchenum: error: ") and says in done.stderr


def test_an_unknown_option_gets_the_jobs_usage_and_the_closest_option():
    done = cli("run", "palago", "--max-m", "10", expect=2)
    assert done.stdout == "" and done.stderr.startswith("usage: batchenum run palago ")
    assert done.stderr.endswith(
        "batchenum run palago: error: unrecognized arguments: --max-m 10 (did you mean --max-n?)\n"
    )
    done = cli("status", "--ot", "x", expect=2)
    assert done.stderr.startswith("usage: batchenum status ") and "(did you mean --out?)" in done.stderr


def test_an_unknown_job_names_the_closest_and_how_to_name_ones_own():
    done = cli("run", "palagos", expect=2)
    assert "invalid choice: 'palagos'" in done.stderr and "(did you mean palago?)" in done.stderr
    assert "MODULE:CLASS or path/to/file.py:CLASS (docs/jobs.md)" in done.stderr


def test_a_missing_input_is_a_usage_mistake(tmp_path):
    missing = tmp_path / "nope.jsonl"
    done = cli("run", "dungeons", "--input", str(missing), "--out", str(tmp_path), "--serial", expect=2)
    assert done.stderr == f"batchenum: error: input file {missing} does not exist\n"


def test_generate_refuses_a_folder_and_a_missing_parent_and_creates_nothing(tmp_path):
    (tmp_path / "adir").mkdir()
    done = cli("generate", "dungeons", "--count", "5", "--out", "adir", cwd=tmp_path, expect=2)
    assert "--out adir is a folder" in done.stderr
    assert os.listdir(tmp_path / "adir") == []
    missing = tmp_path / "no" / "such" / "x.jsonl"
    done = cli("generate", "dungeons", "--count", "5", "--out", str(missing), expect=2)
    assert f"the folder {missing.parent} does not exist" in done.stderr
    assert not (tmp_path / "no").exists()


def test_status_of_a_missing_folder_says_so(tmp_path):
    done = cli("status", "--out", str(tmp_path / "nowhere"), expect=1)
    assert f"no such folder: {tmp_path / 'nowhere'}" in done.stderr
    done = cli("status", "--out", str(tmp_path))
    assert "nothing has run there yet" in done.stdout


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "out"
    done = cli("run", "palago", "--max-n", "9", "--serial", "--out", str(out), "--json")
    return out, json.loads(done.stdout)


def test_run_json_shape(small_run):
    out, summary = small_run
    assert summary["job"] == "palago" and summary["location"] == str(out / "palago")
    assert summary["params"] == {"max_n": 9, "catalogue_max_n": 0}
    assert (summary["shards"], summary["reused"], summary["recomputed"]) == (4, 0, [])
    assert summary["tables"] == {
        "creature_counts": {"path": str(out / "palago" / "creature_counts.parquet"), "rows": 9}
    }
    assert summary["summary"].startswith("palago: n = 1..9, free(9) = ")


def test_status_and_table_json_shapes(small_run):
    out, _ = small_run
    status = json.loads(cli("status", "--out", str(out), "--json").stdout)
    [job] = status["jobs"]
    assert job["name"] == "palago" and job["shards"] == {"planned": 4, "committed": 4, "stale": 0, "damaged": 0}
    assert job["running"] is None and job["tables"][0]["params"] == {"max_n": 9, "catalogue_max_n": 0}
    table = json.loads(cli("table", "--out", str(out), "--json").stdout)
    parquet = out / "palago" / "creature_counts.parquet"
    assert table["location"] == str(parquet)
    assert table["rows"] == pd.read_parquet(parquet).to_dict("records")  # every row and column, as ints


@pytest.mark.parametrize("command", ["table", "status"])
def test_a_closed_pipe_ends_quietly(small_run, command):
    out, _ = small_run
    done = subprocess.run(
        f"{sys.executable} -m batchenum {command} --out {out} | head -1",
        shell=True,
        capture_output=True,
        text=True,
        timeout=300,
        executable="/bin/bash",
    )
    assert_exit(done, 0)
    assert done.stderr == "" and done.stdout.count("\n") == 1


def test_progress_goes_through_logging_off_a_terminal(tmp_path, caplog):
    """A script or notebook that configures logging gets the run's progress as records of the
    ``batchenum`` logger; the command itself writes them as timestamped lines."""
    import logging

    from batchenum.jobs.palago import PalagoJob
    from batchenum.pipeline.execute import RunOptions, run_job
    from batchenum.pipeline.progress import Progress

    with caplog.at_level(logging.INFO, logger="batchenum"):
        run_job(PalagoJob(8), RunOptions(out=str(tmp_path / "api"), serial=True), Progress("palago"))
    said = [record.getMessage() for record in caplog.records if record.name == "batchenum"]
    assert any("computing in this process (--serial)" in line for line in said)
    assert any(line.startswith("palago: 4/4 shards") for line in said)
    done = cli(
        "run",
        "dungeons",
        "--input",
        str(CASES / "dungeon_seed.jsonl"),
        "--records-per-shard",
        "3",
        "--serial",
        "--out",
        str(tmp_path / "cli"),
    )
    shards_line = next(line for line in done.stderr.splitlines() if "4/4 shards" in line)
    assert re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d batchenum dungeons: 4/4 shards, .* records/s$", shards_line)


def test_a_gallery_too_large_to_search_or_to_show_asks_for_what_to_change(tmp_path, monkeypatch, capsys):
    done = cli("palago", "gallery", "--n", "40", "--out", str(tmp_path), expect=2)
    assert "--from" in done.stderr and "--force" in done.stderr
    assert not (tmp_path / "palago").exists()
    from batchenum.jobs import palago_views
    from batchenum.jobs.cli import main

    monkeypatch.setattr(palago_views, "MAX_SHOWN", 50)  # n = 12 has 81 creatures
    assert main(["palago", "gallery", "--n", "12", "--per-page", "20", "--out", str(tmp_path)]) == 2
    said = capsys.readouterr().err
    assert "81 creatures would make 5 pages of 20; give --limit L" in said
    assert main(["palago", "gallery", "--n", "12", "--per-page", "20", "--limit", "50", "--out", str(tmp_path)]) == 0
    said = capsys.readouterr().err
    assert "palago gallery: writing 50 creatures on 3 pages" in said


def test_an_unreachable_cluster_fails_fast_naming_the_address(tmp_path):
    from helpers import free_port

    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    done = cli("run", "palago", "--max-n", "8", "--address", address, "--out", str(tmp_path), expect=None)
    assert time.monotonic() - started < 30  # the bound is about 15 s; Ray alone hung for minutes
    assert_exit(done, 1)
    assert f"could not reach the Ray cluster at {address}" in done.stderr


def test_warm_compiles_every_jobs_kernels_here_and_on_every_node(ray_session):
    done = cli("warm")
    timed = ", ".join(rf"{name} [\d.]+ s" for name in REGISTRY.names())
    assert re.fullmatch(rf"warm: \S+: {timed}\n", done.stdout)
    from batchenum.jobs.warm import warm_kernels
    from batchenum.pipeline.runner import on_every_node

    [(host, seconds)] = on_every_node(warm_kernels)  # the session's Ray has one node
    assert set(seconds) == {"palago", "dungeons", "nonary"}  # every registered job's warm


def test_input_given_twice_reads_both_files(tmp_path):
    for name, grid in (("a.jsonl", ["@$"]), ("b.jsonl", ["@$$"])):
        (tmp_path / name).write_text(json.dumps({"id": name, "grid": grid}) + "\n")
    done = cli(
        "run",
        "dungeons",
        "--input",
        str(tmp_path / "b.jsonl"),
        "--input",
        str(tmp_path / "a.jsonl"),
        "--out",
        str(tmp_path / "out"),
        "--serial",
    )
    assert "read 2, answered 2, rejected 0" in done.stdout, done.stderr
    answers = pd.read_parquet(tmp_path / "out" / "dungeons" / "answers")
    assert answers[["id", "gold"]].values.tolist() == [["a.jsonl", 1], ["b.jsonl", 2]]  # sorted by file


def test_show_says_when_it_prints_the_canonical_form_of_the_sum_given():
    given = cli("palago", "show", "4b+5c")
    line = next(line for line in given.stdout.splitlines() if line.startswith("sum:"))
    canonical = line.split()[1]
    assert line == (
        f"sum:        {canonical} (the canonical form of the sum given, 4b+5c: the same creature up to "
        "rotation and reflection)"
    )
    for as_canonical in (canonical, "1,0,1,1 0,1,0,1 1,1,2,1"):  # the canonical sum, or a key: nothing to say
        assert f"sum:        {canonical}\n" in cli("palago", "show", as_canonical).stdout
