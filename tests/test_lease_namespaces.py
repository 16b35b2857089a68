"""The lease across PID namespaces: a run in a container of the same host (same host name, its own
PID namespace, where pids are reused and the run may be pid 1) never takes a live run's folder, and
the lease of one killed there is taken over once its heartbeat is stale, with one line saying so.

The namespaces are real (``unshare --pid --fork --mount-proc``, as root); the runs are real CLI
processes, killed by their pid."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time

import pytest
from helpers import assert_exit, cli, cli_command, palago_args, wait_for_commits, wait_until_stale

from batchenum.pipeline.local_ray import process_tree

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare(1) for a PID namespace"
)

LEASE_HOOK = {"BATCHENUM_TEST_LEASE": "0.5,1"}  # heartbeat 0.5 s; with --storage-timeout 1: stale after 3 s
SLOW_STALE_HOOK = {"BATCHENUM_TEST_LEASE": "0.5,10"}  # the same, stale after 12 s


def in_pid_namespace(*args: str, env: dict | None = None) -> subprocess.Popen:
    """The CLI as pid 1 of a new PID namespace (its own /proc), same host name and file systems."""
    return subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", *cli_command(*args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def lease(out) -> dict:
    return json.loads((out / "palago" / "_lease.json").read_text())


def kill_tree(process: subprocess.Popen) -> None:
    for pid in process_tree([process.pid]):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(timeout=60)


def test_a_run_in_another_pid_namespace_never_takes_a_live_runs_folder(tmp_path):
    args = palago_args(tmp_path, 24, 64, "--serial")
    live = subprocess.Popen(cli_command(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_commits(tmp_path, 2, live)
        holder = lease(tmp_path)
        contender = in_pid_namespace(*args)
        _, stderr = contender.communicate(timeout=300)
        assert_exit(contender, 1, stderr=stderr)
        message = stderr.strip().splitlines()[-1]
        assert f"another run is writing to {tmp_path / 'palago'}: host " in message
        assert "its process cannot be checked from here: another host, container or PID namespace" in message
        assert "taking over" not in stderr
        assert live.poll() is None and lease(tmp_path)["run"] == holder["run"]  # the live run goes on
    finally:
        kill_tree(live)


def test_the_lease_of_a_run_killed_in_a_container_is_taken_over_once_stale(tmp_path):
    args = palago_args(tmp_path, 21, 24, "--serial", "--storage-timeout", "1")
    # stale 12 s after its last heartbeat: long enough for a contender to start and find it fresh
    contained = in_pid_namespace(*args, env=SLOW_STALE_HOOK)
    try:
        wait_for_commits(tmp_path, 2, contained)
    finally:
        kill_tree(contained)  # the namespace's pid 1 and everything in it
    left = lease(tmp_path)
    assert left["pid"] == 1 and left["pid_namespace"] != os.stat("/proc/self/ns/pid").st_ino
    refused = cli(*args, env=LEASE_HOOK, expect=None)  # its heartbeat is still fresh
    assert_exit(refused, 1)
    assert "cannot be checked from here" in refused.stderr
    wait_until_stale(tmp_path)
    taken = cli(*args, env=LEASE_HOOK)
    lines = [line for line in taken.stderr.splitlines() if "taking over the folder from a dead run" in line]
    assert len(lines) == 1, taken.stderr
    assert "pid 1," in lines[0] and "and its process cannot be checked from here" in lines[0]
    assert not (tmp_path / "palago" / "_lease.json").exists()


def test_a_lease_naming_a_reused_pid_of_this_namespace_is_taken_over_at_once(tmp_path):
    """The pid lives (it is this test's), but the lease's process started at another time: gone."""
    args = palago_args(tmp_path, 18, 8, "--serial")
    cli(*args)
    with open("/proc/sys/kernel/random/boot_id") as handle:
        boot_id = handle.read().strip()
    stale = {
        "run": "f" * 32,
        "host": "anywhere",
        "pid": os.getpid(),
        "started_at": time.time(),
        "heartbeat_at": time.time(),
        "stale_after": 3600.0,
        "boot_id": boot_id,
        "pid_namespace": os.stat("/proc/self/ns/pid").st_ino,
        "pid_started": 1,
    }
    (tmp_path / "palago" / "_lease.json").write_text(json.dumps(stale))
    rerun = cli(*args)
    assert f"taking over the folder from a dead run (host anywhere, pid {os.getpid()}" in rerun.stderr
    assert "its process is gone" in rerun.stderr
