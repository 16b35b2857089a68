"""`batchenum status` reads a job folder's plan and file footers: during a run, after an
interrupted one, on a missing or empty folder, and with stale shards."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import REPO, cli, cli_command, committed, palago_args, reused, wait_for_commits


def status(out) -> subprocess.CompletedProcess:
    result = cli("status", "--out", str(out))
    return result


def test_status_during_and_after_an_interrupted_run(tmp_path):
    driver = subprocess.Popen(
        cli_command(*palago_args(tmp_path, 24, 64, "--serial")), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        wait_for_commits(tmp_path, 3, driver)
        during = status(tmp_path).stdout
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=60)
    shown = int(re.search(r"(\d+)/64 shards committed", during).group(1))
    assert 3 <= shown < 64
    assert '"max_n": 24' in during and "last commit:" in during and "estimate:    about" in during
    assert "running:     host" in during and f"pid {driver.pid}" in during
    after = status(tmp_path).stdout
    assert f"{committed(tmp_path)}/64 shards committed" in after
    assert "table:" not in after  # an interrupted run wrote no table
    assert re.search(r"estimate:    about \S+ for a rerun at the rate of the last run", after), after
    document = json.loads(cli("status", "--out", str(tmp_path), "--json").stdout)["jobs"][0]
    assert document["seconds_left_for"] == "a rerun" and document["seconds_left"] > 0


@pytest.mark.slow  # minutes of CPU on a loaded machine: an end-to-end run
def test_status_after_a_finished_run_and_with_stale_shards(tmp_path):
    cli(*palago_args(tmp_path, 12, 4, "--serial"))
    done = status(tmp_path).stdout
    assert "4/4 shards committed" in done
    assert "table:       creature_counts.parquet: 12 rows, version 2" in done
    cli(*palago_args(tmp_path, 11, 4, "--serial", "--overwrite"))
    cli(*palago_args(tmp_path, 12, 4, "--serial", "--overwrite", "--no-head-start"))  # back to 12
    assert "4/4 shards committed" in status(tmp_path).stdout


def test_status_says_what_it_does_not_find(tmp_path):
    missing = cli("status", "--out", str(tmp_path / "nothing-here"), expect=1)
    assert "no such folder" in missing.stderr and missing.stdout == ""
    (tmp_path / "empty").mkdir()
    assert status(tmp_path / "empty").stdout == f"no job folder under {tmp_path / 'empty'}: nothing has run there yet\n"


@pytest.mark.slow  # minutes of CPU on a loaded machine: an end-to-end run
def test_status_lists_only_folders_a_run_wrote_and_the_job_folders_one_level_below(tmp_path):
    """A parent folder of job folders (``int/nonary``, ``cat/palago``) shows those job folders by
    their paths; a folder of another kind is named as such, never called damaged."""
    cli(*palago_args(tmp_path / "cat", 9, 4, "--serial"))
    (tmp_path / "int" / "nonary").mkdir(parents=True)
    (tmp_path / "notes").mkdir()
    pq.write_table(pa.table({"x": [1]}), tmp_path / "notes" / "other.parquet")  # Parquet, but not ours
    (tmp_path / "int" / "nonary" / "_plan.json").write_text('{"shards": ["a"], "tables": ["answers"]}')
    shown = status(tmp_path).stdout
    assert re.findall(r"^(\S+)  \(", shown, re.M) == ["cat/palago", "int/nonary"]
    assert "damaged" not in shown and "0/1 shard committed" in shown
    assert shown.rstrip().endswith("not job folders (no batchenum run wrote them): notes")
    found = json.loads(cli("status", "--out", str(tmp_path), "--json").stdout)
    assert [job["name"] for job in found["jobs"]] == ["cat/palago", "int/nonary"]
    assert found["other_folders"] == ["notes"]
    assert status(tmp_path / "cat" / "palago").stdout.startswith("palago  (")  # a job folder itself


def test_status_of_a_fresh_clones_results_shows_the_committed_tables_only(tmp_path):
    """``results/`` as git holds it: the tables without plan, manifest or shards, in
    ``results/palago`` and one level deeper in ``results/extended/palago`` and ``results/transfer/palago``."""
    shutil.copytree(
        REPO / "results",
        tmp_path / "results",
        ignore=shutil.ignore_patterns("_*", "NOT_A_TABLE.parquet", "creatures", "gallery_*"),
    )
    shown = status(tmp_path / "results").stdout
    assert re.findall(r"^(\S+)  \(", shown, re.M) == ["extended/palago", "palago", "transfer/palago"]
    assert "table:       creature_counts.parquet: 24 rows" in shown and "not job folders" not in shown


def test_status_tells_wall_time_from_the_compute_summed_over_shards(tmp_path):
    cli(*palago_args(tmp_path, 1, 1, "--serial"))
    shown = status(tmp_path).stdout
    wall, summed = re.search(
        r"the last run computed 1 shard in ([\d.]+) s of wall time "
        r"\(([\d.]+) s of compute summed over its shards\)",
        shown,
    ).groups()
    assert float(summed) <= float(wall)  # one shard, run after the plan was written
    assert "1 row," in shown and "1 rows" not in shown and "1/1 shard committed" in shown
    [job] = json.loads(cli("status", "--out", str(tmp_path), "--json").stdout)["jobs"]
    assert job["last_run"]["computed_shards"] == 1
    assert job["last_run"]["wall_seconds"] == pytest.approx(float(wall), abs=0.06)
    assert job["last_run"]["shard_seconds"] == pytest.approx(float(summed), abs=0.06)


def test_the_estimate_warns_when_committed_shards_differ_widely_in_cost():
    from batchenum.pipeline.status import JobStatus, _spread_note

    def note(seconds):
        return _spread_note(JobStatus("palago", "/x", None, seconds=seconds))

    assert note([20.5, 88.0, 341.0, 950.0, 3692.0]) == (
        "; but its shards took 20s to 62min each, so the shards left may take much longer or shorter"
    )
    assert note([30.0, 31.0, 29.0, 33.0]) == ""  # even shards: the rate holds
    assert note([0.1, 0.2, 5.0]) == ""  # short runs: nothing worth a warning
    assert note([1647.6]) == (
        "; but it rests on 1 shard only (27min), so the shards left may take much longer or shorter"
    )
    assert note([10.0, 4000.0]) == (
        "; but it rests on 2 shards only (10s and 67min), so the shards left may take much longer or shorter"
    )
    assert note([0.5, 2.0]) == ""  # two quick shards: a rerun soon tells


def test_status_says_when_the_code_installed_here_would_compute_every_shard_again(tmp_path):
    # A folder written by another installation (here: a copy of this checkout with one solver file
    # edited, as after an upgrade): status says so before a rerun computes every shard again.
    copy = tmp_path / "other_code"
    for package in ("batchenum", "jobs", "pipeline", "solvers"):  # a checkout: batchenum/ finds the rest
        shutil.copytree(REPO / package, copy / package, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
    with open(copy / "solvers" / "palago" / "canonical.py", "a") as handle:
        handle.write("\n# an edit of another installation\n")
    out = tmp_path / "out"
    cli(*palago_args(out, 9, 4, "--serial"), env={"PYTHONPATH": str(copy)}, cwd=tmp_path)
    other = status(out).stdout
    said = re.search(r"code:        version (\S+)\n +installed here: (\S+), so a run from here computes every", other)
    assert said and said[1] != said[2], other
    assert "the installed code it runs" in other
    shown = json.loads(cli("status", "--out", str(out), "--json").stdout)["jobs"][0]["code"]
    assert shown == {"version": said[1], "installed_here": said[2], "matches_installed": False}

    rerun = cli(*palago_args(out, 9, 4, "--serial"))
    assert reused(rerun) == 0  # as status said: every shard computed again
    assert f"code:        version {said[2]} (the code installed here)" in status(out).stdout


def test_status_weighs_its_estimate_by_the_shards_expected_work_during_a_transfer_run(tmp_path):
    # the transfer job gives each height's expected work (PalagoTransferJob.shard_work): status
    # plans the recorded parameters again with the job installed here and weighs the shards left,
    # once the last run did 5% of that work (h001-h008 hold 1.0% of it at n = 44, h001-h010 12.6%)
    args = ("run", "palago", "--method", "transfer", "--max-n", "44", "--serial", "--out", str(tmp_path))
    driver = subprocess.Popen(cli_command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for_commits(tmp_path, 8, driver)
        early = status(tmp_path).stdout
        wait_for_commits(tmp_path, 10, driver)
        text = status(tmp_path).stdout
        document = json.loads(cli("status", "--out", str(tmp_path), "--json").stdout)["jobs"][0]
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=60)
    none_yet = (
        r"estimate:    none yet: the last run did (\d\.\d)% of the shards' expected work, and one is given from 5%"
    )
    said = re.search(none_yet, early)
    assert said and 0.5 < float(said[1]) < 5.0, early
    assert re.search(r"estimate:    about .+ left at the rate of the last run, by the shards' expected work", text), (
        text
    )
    assert document["estimate_by"] == "expected work" and document["seconds_left"] > 0
    assert 0.05 <= document["expected_work_done"] < 1.0, document


def test_the_last_commit_line_tells_a_run_under_way_from_one_that_reused_everything():
    # an hour into a height, the n = 60 run's status said "the last run reused every shard it has"
    from batchenum.pipeline.status import JobStatus, render

    now = 1_800_000_000.0
    plan = {"job": "palago", "params": {}, "version": "2+0", "started_at": now - 3300, "shards": ["h1", "h2"]}
    lease = {"host": "vm", "pid": 1, "heartbeat_at": now - 5}
    running = JobStatus("palago", "out/palago", plan, committed=["h1"], last_commit=now - 5000, lease=lease)
    assert "(83min ago); the run under way (for 55min) has committed no shard yet" in render([running], now)
    finished = JobStatus("palago", "out/palago", plan, committed=["h1", "h2"], last_commit=now - 5000)
    assert "; the last run reused every shard it has" in render([finished], now)


def test_a_stopped_run_gets_an_estimate_for_a_rerun_unless_the_code_here_would_start_over():
    from batchenum.pipeline.status import JobStatus, render

    now = 1_800_000_000.0
    plan = {"job": "palago", "params": {}, "version": "2+0", "started_at": now - 400, "shards": ["h1", "h2", "h3"]}

    def stopped(installed_code):
        return JobStatus(
            "palago", "out/palago", plan, committed=["h1"], seconds=[100.0], commit_times=[now - 300],
            last_commit=now - 300, installed_code=installed_code,
        )  # fmt: skip

    # one shard committed 100 s after the start: two left, about 200 s (3min) at that rate
    assert "estimate:    about 3min for a rerun at the rate of the last run" in render([stopped("2+0")], now)
    assert "estimate:" not in render([stopped("2+1")], now)  # a run from here computes every shard again


def test_status_counts_a_shard_in_flight_as_far_as_its_save_says():
    # an hour-long height is most of a run: its saves say how far it is (Checkpoint.save's done),
    # less what an earlier run did of it (done_before)
    from batchenum.pipeline.status import JobStatus, render, to_json

    now = 1_800_000_000.0
    plan = {"job": "palago", "params": {}, "version": "2+0", "started_at": now - 1000, "shards": ["h1", "h2"]}
    lease = {"host": "vm", "pid": 1, "heartbeat_at": now - 5}
    saved = {"shard": "h2", "saved_at": now - 500, "progress": "column 9", "bytes": 10, "done": 0.5, "done_before": 0.2}
    running = JobStatus(
        "palago", "out/palago", plan, checkpoints=[saved], lease=lease, expected_work={"h1": 10.0, "h2": 90.0},
    )  # fmt: skip
    # this run did 0.3 of h2 (27 units) in 500 s; 100 - 27 - 18 (h2's earlier 0.2) = 55 left: about
    # 1,019 s at that save, 519 s now (the run went on since)
    assert "estimate:    about 9min left at the rate of the last run, by the shards' expected work" in render(
        [running], now
    )
    assert "checkpoint:  h2: column 9 (about 50% of its expected work), " in render([running], now)
    [document] = to_json([running], now)["jobs"]
    assert document["seconds_left"] == pytest.approx(500 * 55 / 27 - 500, rel=1e-6)
    assert document["checkpoints"][0]["done"] == 0.5
