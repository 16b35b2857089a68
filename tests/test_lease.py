"""One run per job folder: a second run refuses, naming the first; a dead run's lease is taken over."""

from __future__ import annotations

import signal
import subprocess

from test_faults import cli, cli_command, committed, palago_args, reused, wait_for_commits


def test_a_second_run_refuses_and_a_dead_runs_folder_is_taken_over(tmp_path):
    first = subprocess.Popen(cli_command(*palago_args(tmp_path, 24, 64, "--serial")), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    try:
        wait_for_commits(tmp_path, 2, first)
        second = cli(*palago_args(tmp_path, 24, 64, "--serial"), check=False)
        assert (tmp_path / "palago" / "_lease.json").exists()
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    assert second.returncode == 1
    message = second.stderr.strip().splitlines()[-1]
    assert "another run is writing to" in message and f"pid {first.pid}" in message and "started" in message
    kept = committed(tmp_path)
    third = cli(*palago_args(tmp_path, 18, 64, "--serial", "--overwrite"))  # the first is dead: taken over
    assert "taking over the folder from a dead run" in third.stderr and "its process is gone" in third.stderr
    assert kept >= 2 and reused(third) == 0  # other parameters: nothing reused, nothing refused
    assert not (tmp_path / "palago" / "_lease.json").exists()  # released at the end
