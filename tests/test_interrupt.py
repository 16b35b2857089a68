"""Ctrl-C and SIGTERM as a terminal sends them: to the whole foreground process group, in every mode
(the head start, --no-head-start, --serial, --address).  One batchenum line, exit 130 (143), no
line of Ray's after the signal, no process of the run left, and the rerun reuses what was committed.

Every process the run starts (its private Ray's included) inherits a mark in its environment, so
the scan after the signal finds them wherever they run: in the run's group, in Ray's own session,
or reparented."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import uuid
from pathlib import Path

import clusters
import pytest
from helpers import MARK, cli, cli_command, committed, marked_processes, palago_args, reused, wait_until

# The progress lines (a timestamp, then "batchenum"), and the final line; nothing else may follow
# the signal (Ray's C++ errors, "(raylet)" lines, a traceback).
OURS = re.compile(r"^(\S+ batchenum .*|batchenum: .*|)$")


def interrupt_at_a_terminal(
    tmp_path: Path, mode: tuple[str, ...], signum: int, ready: str, env: dict | None = None
) -> tuple[int, str, list[int], str]:
    """Run palago in a session of its own (as a shell runs a foreground job), wait until ``ready`` is
    in its output and two more shards are committed, then send ``signum`` to its whole process
    group.  Returns the exit status, the output after the signal, the marked processes left 10 s
    later, and the whole output."""
    mark = uuid.uuid4().hex
    log = tmp_path / "stderr.log"
    out = tmp_path / "run"
    with open(log, "w") as stderr:
        driver = subprocess.Popen(
            cli_command(*palago_args(out, 24, 64, *mode)),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
            env={**os.environ, **(env or {}), MARK: mark},
        )
    try:
        wait_until(lambda: ready in log.read_text(), f"the run said {ready!r}", 300, driver)
        seen = committed(out)
        wait_until(lambda: committed(out) >= seen + 2, "two more shards were committed", 300, driver)
        said = len(log.read_text())
        os.killpg(driver.pid, signum)  # the terminal's Ctrl-C: every process of the foreground group
        driver.wait(timeout=120)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
    with contextlib.suppress(AssertionError):  # the test asserts on those left
        wait_until(lambda: not marked_processes(mark), "every process of the run ended", 10)
    text = log.read_text()
    return driver.returncode, text[said:], marked_processes(mark), text


def assert_one_line_and_reused(
    tmp_path: Path, status: int, after: str, left: list[int], expected: int, how: str = "interrupted"
) -> None:
    assert status == expected, after
    assert left == [], [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in left]
    lines = after.strip().splitlines()
    assert all(OURS.match(line) for line in lines), after
    kept = committed(tmp_path / "run")
    assert lines[-1] == f"batchenum: {how}; {kept} shards committed are kept, a rerun reuses them"
    assert not (tmp_path / "run" / "palago" / "creature_counts.parquet").exists()
    rerun = cli(*palago_args(tmp_path / "run", 24, 64, "--workers", "2"))
    assert reused(rerun) >= kept >= 2


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, ready",
    [
        (("--workers", "2"), "computing shards here"),  # Ray is not worth starting for these shards
        (("--workers", "2", "--no-head-start"), "computing on a local Ray with 2 CPUs"),
        (("--serial",), "computing in this process (--serial)"),
    ],
    ids=["head-start", "no-head-start", "serial"],
)
def test_ctrl_c_to_the_process_group_is_one_line_and_exit_130(tmp_path, mode, ready):
    status, after, left, _ = interrupt_at_a_terminal(tmp_path, mode, signal.SIGINT, ready)
    assert_one_line_and_reused(tmp_path, status, after, left, 130)


@pytest.mark.slow
def test_sigterm_to_the_process_group_is_one_line_and_exit_143(tmp_path):
    status, after, left, _ = interrupt_at_a_terminal(
        tmp_path, ("--workers", "2", "--no-head-start"), signal.SIGTERM, "computing on a local Ray with 2 CPUs"
    )
    assert_one_line_and_reused(tmp_path, status, after, left, 143, "stopped (SIGTERM)")


@pytest.mark.slow
def test_ctrl_c_with_address_leaves_the_cluster_up_and_nothing_of_the_run(tmp_path):
    temp_dir = f"/tmp/rc{uuid.uuid4().hex[:6]}"  # short: Ray's socket paths live below it
    env = clusters.token_env()
    try:
        address = clusters.start_head(temp_dir, env, "--num-cpus", "2")
        status, after, left, _ = interrupt_at_a_terminal(
            tmp_path, ("--address", address), signal.SIGINT, f"computing on the Ray cluster at {address}", env
        )
        assert_one_line_and_reused(tmp_path, status, after, left, 130)
    finally:
        clusters.stop(temp_dir)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_the_command_still_imports_is_the_same_one_line(tmp_path, signum):
    """Sent as soon as pyarrow's library is mapped, long before the command line is parsed (issue
    48: a raw KeyboardInterrupt traceback, and a SIGTERM that exited 143 without a word)."""
    driver = subprocess.Popen(
        cli_command("run", "palago", "--max-n", "3", "--serial", "--out", str(tmp_path)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        text=True,
    )
    maps = Path(f"/proc/{driver.pid}/maps")
    wait_until(lambda: "libarrow" in maps.read_text(), "pyarrow imported", 60, driver, interval=0.002)
    os.kill(driver.pid, signum)
    _, stderr = driver.communicate(timeout=60)
    how = "stopped (SIGTERM)" if signum == signal.SIGTERM else "interrupted"
    assert driver.returncode == 128 + signum, stderr
    assert stderr == f"\nbatchenum: {how}; committed shards are kept, a rerun reuses them\n"
