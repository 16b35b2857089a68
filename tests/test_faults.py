"""Kill anything, lose nothing: real processes killed by pid, real files damaged, real clusters.

Every scenario ends by comparing the tables with an undisturbed run (byte for byte) and with the
published counts committed under results/.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from helpers import (
    assert_exit,
    assert_matches_published,
    cli,
    cli_command,
    committed,
    palago_args,
    reused,
    table_bytes,
    wait_for_commits,
    wait_until,
)


@pytest.fixture(scope="module")
def undisturbed_22(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("undisturbed22")
    cli(*palago_args(out, 22, 64, "--serial", "--quiet"))
    return out


@pytest.mark.slow
def test_worker_killed_mid_shard_is_retried(tmp_path):
    reference = tmp_path / "reference"
    cli(*palago_args(reference, 16, 8, "--serial", "--quiet"))
    out = tmp_path / "killed"
    cli(*palago_args(out, 16, 8, "--workers", "2", "--no-head-start"), env={"BATCHENUM_TEST_KILL_SHARD": "s0003"})
    # the hook leaves the pid of the worker it SIGKILLed: the retry ran in another process
    assert (out / "palago" / ".killed-s0003").read_text().isdigit()
    assert table_bytes(out) == table_bytes(reference)
    assert_matches_published(out, 16)


@pytest.mark.slow
def test_worker_killed_during_a_dungeon_batch_is_retried(tmp_path):
    batch = tmp_path / "dungeons.jsonl"
    cli(
        "generate", "dungeons", "--count", "3000", "--height", "12", "--width", "12", "--seed", "5", "--out", str(batch)
    )
    cli(
        "run",
        "dungeons",
        "--input",
        str(batch),
        "--records-per-shard",
        "500",
        "--serial",
        "--out",
        str(tmp_path / "reference"),
    )
    out = tmp_path / "killed"
    cli(
        "run",
        "dungeons",
        "--input",
        str(batch),
        "--records-per-shard",
        "500",
        "--workers",
        "2",
        "--no-head-start",
        "--out",
        str(out),
        env={"BATCHENUM_TEST_KILL_SHARD": "s00002"},
    )
    assert (out / "dungeons" / ".killed-s00002").exists()
    for name in ("answers/part-00000.parquet", "errors/part-00000.parquet"):
        assert (out / "dungeons" / name).read_bytes() == (tmp_path / "reference" / "dungeons" / name).read_bytes()
    assert len(pd.read_parquet(out / "dungeons" / "answers")) == 3000


@pytest.mark.slow
def test_driver_killed_then_rerun_reuses_committed_shards(tmp_path, undisturbed_22):
    out = tmp_path / "run"
    driver = subprocess.Popen(
        cli_command(*palago_args(out, 22, 64, "--workers", "2")), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_for_commits(out, 2, driver)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    done_at_kill = committed(out)  # a lower bound: its Ray workers may commit a shard or two yet
    rerun = cli(*palago_args(out, 22, 64, "--workers", "2"))
    assert done_at_kill <= reused(rerun) < 64
    assert table_bytes(out) == table_bytes(undisturbed_22)
    assert_matches_published(out, 22)
    assert not list(out.rglob("*.tmp-*"))


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_the_rerun_finishes(tmp_path, undisturbed_22):
    out = tmp_path / "run"
    driver = subprocess.Popen(
        cli_command(*palago_args(out, 22, 64, "--workers", "2")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    wait_for_commits(out, 2, driver)
    os.killpg(driver.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole foreground group (tests/test_interrupt.py)
    _, stderr = driver.communicate(timeout=120)
    assert_exit(driver, 130)
    assert re.search(r"interrupted; \d+ shards? committed (are|is) kept, a rerun reuses", stderr), stderr
    assert not (out / "palago" / "creature_counts.parquet").exists()
    rerun = cli(*palago_args(out, 22, 64, "--workers", "2"))
    assert reused(rerun) >= 2
    assert table_bytes(out) == table_bytes(undisturbed_22)


def test_damaged_truncated_and_stale_shards_are_recomputed(tmp_path):
    out, other = tmp_path / "run", tmp_path / "other"
    cli(*palago_args(out, 14, 6, "--serial", "--quiet"))
    reference = table_bytes(out)
    cli(*palago_args(other, 13, 6, "--serial", "--quiet"))
    shards = out / "palago" / "_shards" / "partial_counts"
    data = (shards / "s0000.parquet").read_bytes()
    (shards / "s0000.parquet").write_bytes(data[: len(data) // 3])  # truncated
    (shards / "s0001.parquet").write_bytes(data[:100] + b"\x00" * 200 + data[300:])  # damaged
    stale = other / "palago" / "_shards" / "partial_counts" / "s0002.parquet"
    (shards / "s0002.parquet").write_bytes(stale.read_bytes())  # another run's parameters
    rerun = cli(*palago_args(out, 14, 6, "--serial"))
    assert "(3 reused, 3 recomputed: parameters changed: max_n 13 -> 14; damaged or stale)" in rerun.stdout
    for shard in ("s0000", "s0001"):
        assert f"shard {shard} will be recomputed" in rerun.stderr
    assert (
        "1 shard was committed with other parameters (max_n 13 -> 14: a change of parameters, not damage)"
        in rerun.stderr
    )
    assert table_bytes(out) == reference


@pytest.mark.slow
def test_tables_do_not_depend_on_the_number_of_workers(tmp_path):
    outputs = {}
    for workers in ("1", "2", "4"):
        outputs[workers] = tmp_path / f"w{workers}"
        cli(*palago_args(outputs[workers], 15, 12, "--workers", workers, "--catalogue-max-n", "11", "--quiet"))
    serial = tmp_path / "serial"
    cli(*palago_args(serial, 15, 12, "--serial", "--catalogue-max-n", "11", "--quiet"))
    for out in outputs.values():
        assert table_bytes(out) == table_bytes(serial)
        for part in (serial / "palago" / "creatures").rglob("*.parquet"):
            assert (out / part.relative_to(serial)).read_bytes() == part.read_bytes()


# ------------------------------------------------------------------ failures named, shards kept


@pytest.mark.slow
def test_a_worker_killed_on_every_attempt_is_named_and_committed_shards_kept(tmp_path):
    out = tmp_path / "run"
    failed = cli(
        *palago_args(out, 16, 8, "--workers", "2", "--no-head-start"),
        env={"BATCHENUM_TEST_KILL_SHARD": "s0003:always"},
        expect=1,
    )
    message = failed.stderr.strip().splitlines()[-1]
    assert "shard s0003: its worker process died on every one of 4 attempts" in message
    assert "run the same command again to reuse them" in message
    assert not (out / "palago" / "creature_counts.parquet").exists()
    kept = committed(out)
    assert not (out / "palago" / "_shards" / "partial_counts" / "s0003.parquet").exists()
    rerun = cli(*palago_args(out, 16, 8, "--workers", "2"))
    assert reused(rerun) == kept
    assert_matches_published(out, 16)


@pytest.mark.slow
def test_retries_zero_names_the_only_attempt(tmp_path):
    """--retries 0: a worker killed once is not run again, and the message says so."""
    failed = cli(
        *palago_args(tmp_path, 16, 4, "--workers", "1", "--no-head-start", "--retries", "0"),
        env={"BATCHENUM_TEST_KILL_SHARD": "s0001"},
        expect=1,
    )
    assert "shard s0001: its worker process died on its only attempt (see --retries)" in failed.stderr


def test_negative_retries_is_a_usage_error(tmp_path):
    refused = cli(*palago_args(tmp_path, 5, 1, "--retries", "-1"), expect=2)
    assert "--retries must be at least 0, not -1" in refused.stderr


@pytest.mark.slow
def test_memory_monitor_kill_is_named(tmp_path):
    """Ray's memory monitor with a threshold below what the machine already uses kills every task."""
    env = {"RAY_memory_usage_threshold": "0.001", "RAY_memory_monitor_refresh_ms": "20", "RAY_task_oom_retries": "0"}
    args = palago_args(tmp_path, 16, 4, "--workers", "1", "--no-head-start")
    failed = cli(*args, env=env, expect=None)
    if "The current node timed out during startup" in failed.stderr:
        # Ray waits a fixed 30 s for its raylet to register; on a loaded 2-core CI machine, with the
        # monitor this eager, it once did not (seen in CI): one more try, held to the same asserts
        failed = cli(*args, env=env, expect=None)
    assert_exit(failed, 1)
    message = failed.stderr.strip().splitlines()[-1]
    assert re.search(r"shard s000\d: Ray's memory monitor killed its worker", message), message


def lease_pid(out: Path) -> int | None:
    try:
        return json.loads((out / "palago" / "_lease.json").read_text())["pid"]
    except (OSError, ValueError, KeyError):
        return None


def ray_scratch(root: Path) -> list[Path]:
    return sorted(root.glob("batchenum-ray-*"))


@pytest.mark.slow
def test_sigterm_once_ray_runs_is_our_one_message_and_a_killed_runs_ray_folder_is_removed():
    """SIGTERM after ray.init (which installs Ray's own fatal-signal dump) still ends with our one
    message and exit 143; a driver killed with SIGKILL leaves no private Ray folder (its Ray's
    watchdog removes it; tests/test_local_ray.py covers a watchdog killed too)."""
    root = Path(tempfile.mkdtemp(prefix="f2", dir="/tmp"))  # short: Ray's socket paths live below it
    out = root / "out"
    env = {**os.environ, "RAY_TMPDIR": str(root)}
    args = cli_command(*palago_args(out, 21, 24, "--no-head-start", "--workers", "2"))
    try:
        killed = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        wait_for_commits(out, 2, killed)
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=60)
        wait_until(lambda: not ray_scratch(root), "the killed run's Ray folder was removed (by its watchdog)", 30)
        stopped = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        wait_until(lambda: lease_pid(out) == stopped.pid, "the second run held the lease", 300, stopped)
        before = committed(out)  # counted once the lease is the second run's: the killed run's commits are fenced
        wait_until(lambda: committed(out) >= before + 2, "the second run committed two shards", 300, stopped)
        stopped.send_signal(signal.SIGTERM)
        _, stderr = stopped.communicate(timeout=120)
    except BaseException:
        for process in (killed, locals().get("stopped")):
            if process is not None and process.poll() is None:
                process.kill()
        shutil.rmtree(root, ignore_errors=True)
        raise
    try:
        assert_exit(stopped, 143, stderr=stderr)
        assert "SIGTERM received" not in stderr and "Traceback" not in stderr, stderr
        assert re.fullmatch(
            r"batchenum: stopped \(SIGTERM\); \d+ shards committed are kept, a rerun reuses them",
            stderr.strip().splitlines()[-1],
        ), stderr
        assert not ray_scratch(root), "the stopped run left its Ray folder"
    finally:
        shutil.rmtree(root, ignore_errors=True)
