"""Kill anything, lose nothing: real processes killed by pid, real files damaged, real clusters.

Every scenario ends by comparing the tables with an undisturbed run (byte for byte) and with the
published counts committed under results/.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import clusters
import pandas as pd
import pytest
from helpers import (
    PUBLISHED,
    REPO,
    assert_exit,
    assert_matches_published,
    cli,
    cli_command,
    committed,
    free_ports,
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
    assert "(3 reused, 3 recomputed: damaged, stale or made with other parameters)" in rerun.stdout
    for shard in ("s0000", "s0001"):
        assert f"shard {shard} will be recomputed" in rerun.stderr
    assert "1 shard was committed with other parameters (a change of parameters, not damage)" in rerun.stderr
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


def run_scenario(name: str, out: Path) -> dict:
    """Run tests/scenarios/NAME.py (it owns a simulated cluster) and return its RESULT report."""
    # the simulated cluster gets its own token, so that nothing depends on ~/.ray/auth_token
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    result = subprocess.run(
        [sys.executable, str(REPO / "tests" / "scenarios" / f"{name}.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert_exit(result, 0)
    # Ray's own processes may log to the same stdout; the report is the line marked RESULT
    return json.loads(next(line[len("RESULT ") :] for line in result.stdout.splitlines() if line.startswith("RESULT ")))


@pytest.mark.slow
def test_node_removed_from_a_cluster_mid_run(tmp_path):
    report = run_scenario("node_loss", tmp_path)
    assert report["removed_mid_run"]
    assert report["committed_before_removal"] < report["shards"]
    expected = PUBLISHED[PUBLISHED.n <= 21]
    assert report["free"] == expected.free.tolist()
    assert report["fixed"] == expected.fixed.tolist()


@pytest.mark.slow
def test_node_death_is_named_without_retries_and_waited_out_with_them(tmp_path):
    report = run_scenario("node_death", tmp_path)
    assert re.fullmatch(
        r"shard s000\d: the node running it died \(node \S+ [0-9a-f]{12}\) on its only attempt "
        r"\(see --retries\)\. Check the cluster's nodes .*run the same command again to reuse them\.",
        report["error"],
    ), report["error"]
    assert not report["final_table_written"]
    assert report["committed_after_failure"] >= 1
    assert report["reused"] == report["committed_after_failure"] < report["shards"]
    expected = PUBLISHED[PUBLISHED.n <= 22]
    assert report["free"] == expected.free.tolist()
    assert report["fixed"] == expected.fixed.tolist()
    # on a cluster left without CPUs a run says so once, waits, and finishes when a node joins
    said = report["waited"]["said"]
    assert report["waited"]["heard_before_a_node_joined"]
    assert sum("the cluster has no CPUs" in line for line in said) == 1, said
    assert all("has no CPUs" in line or "has 1 CPU now" in line for line in said), said  # "now" if seen in time
    assert report["waited"]["free"] == expected.free.tolist()


# ------------------------------------------------------------------ a real `ray start --head` cluster


@pytest.fixture(scope="module")
def token_cluster(tmp_path_factory, s3_server):
    """A head node started with `ray start --head` that requires token authentication; stopped by
    pid (every process whose command line names its private temp dir, and their children).  Its
    environment reaches the test S3 server, as a head node's would reach its cloud's store."""
    tempfile_dir = f"/tmp/bh{os.getpid()}"
    names = (
        "gcs",
        "dashboard",
        "agent_http",
        "agent_grpc",
        "runtime_env",
        "metrics",
        "node_manager",
        "object_manager",
        "client",
    )
    ports = dict(zip(names, free_ports(len(names))))
    # the job's entrypoint `python` must be this environment's, as it is with the venv activated
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    # the cluster's own token, so that nothing depends on ~/.ray/auth_token existing already
    env = {**os.environ, **s3_server, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), "PATH": path}
    command = [
        sys.executable,
        "-m",
        "ray.scripts.scripts",
        "start",
        "--head",
        "--num-cpus",
        "2",
        "--temp-dir",
        tempfile_dir,
        "--port",
        str(ports["gcs"]),
        "--include-dashboard",
        "true",
        "--dashboard-host",
        "127.0.0.1",
        "--dashboard-port",
        str(ports["dashboard"]),
        "--dashboard-agent-listen-port",
        str(ports["agent_http"]),
        "--dashboard-agent-grpc-port",
        str(ports["agent_grpc"]),
        "--runtime-env-agent-port",
        str(ports["runtime_env"]),
        "--metrics-export-port",
        str(ports["metrics"]),
        "--node-manager-port",
        str(ports["node_manager"]),
        "--object-manager-port",
        str(ports["object_manager"]),
        "--ray-client-server-port",
        str(ports["client"]),
        "--disable-usage-stats",
    ]
    started = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
    assert_exit(started, 0)
    address = re.search(r"ray start --address='([^']+)'", started.stdout + started.stderr).group(1)
    try:
        yield {"address": address, "dashboard": f"http://127.0.0.1:{ports['dashboard']}", "env": env}
    finally:
        clusters.stop(tempfile_dir)


@pytest.mark.slow
def test_missing_token_gets_one_clear_message(token_cluster, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    result = subprocess.run(
        cli_command(*palago_args(tmp_path, 8, 2, "--address", token_cluster["address"])),
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert_exit(result, 1)
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("batchenum: error:")
    assert "RAY_AUTH_MODE=token" in last and "RAY_AUTH_TOKEN" in last and "ray get-auth-token" in last


def job_submit(cluster: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "job",
            "submit",
            "--address",
            cluster["dashboard"],
            "--working-dir",
            str(REPO),
            "--",
            "python",
            "-m",
            "batchenum",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=cluster["env"],
        cwd=REPO,
    )


@pytest.mark.slow
def test_cluster_recipe_ray_job_submit(token_cluster, new_bucket, tmp_path):
    """The README's cluster recipe: `ray job submit --working-dir . -- python -m batchenum run ...
    --out s3://...`, the head's environment reaching the store."""
    submit = job_submit(token_cluster, "run", "palago", "--max-n", "12", "--out", f"s3://{new_bucket}/runs")
    assert_exit(submit, 0)
    assert "computing on a local Ray" not in submit.stdout  # it used the cluster, not a private Ray
    assert f"tables in s3://{new_bucket}/runs/palago" in submit.stdout
    out = tmp_path / "copy"
    cli("run", "palago", "--max-n", "12", "--serial", "--out", str(out))
    with pytest.MonkeyPatch.context() as patch:
        for name, value in token_cluster["env"].items():
            if name.startswith("AWS_"):
                patch.setenv(name, value)
        found = pd.read_parquet(f"s3://{new_bucket}/runs/palago/creature_counts.parquet")
    pd.testing.assert_frame_equal(found, pd.read_parquet(out / "palago" / "creature_counts.parquet"))


@pytest.mark.slow
def test_relative_out_under_ray_job_submit_is_refused(token_cluster):
    submit = job_submit(token_cluster, "run", "palago", "--max-n", "6", "--out", "relout")
    assert submit.returncode != 0
    assert "--out relout is relative" in submit.stdout + submit.stderr


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
    assert "--retries: must be at least 0, not -1" in refused.stderr


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
