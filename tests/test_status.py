"""`batchenum status` reads a job folder's plan and file footers: during a run, after an
interrupted one, on a missing or empty folder, and with stale shards."""

from __future__ import annotations

import re
import signal
import subprocess

from test_faults import cli, cli_command, committed, palago_args, wait_for_commits


def status(out) -> subprocess.CompletedProcess:
    result = cli("status", "--out", str(out))
    assert result.returncode == 0
    return result


def test_status_during_and_after_an_interrupted_run(tmp_path):
    driver = subprocess.Popen(cli_command(*palago_args(tmp_path, 24, 64, "--serial")), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
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


def test_status_after_a_finished_run_and_with_stale_shards(tmp_path):
    cli(*palago_args(tmp_path, 12, 4, "--serial"))
    done = status(tmp_path).stdout
    assert "4/4 shards committed" in done
    assert "table:       creature_counts.parquet: 12 rows, version 2" in done
    cli(*palago_args(tmp_path, 11, 4, "--serial", "--overwrite"))
    cli(*palago_args(tmp_path, 12, 4, "--serial", "--overwrite", "--no-head-start"))  # back to 12
    assert "4/4 shards committed" in status(tmp_path).stdout


def test_status_says_what_it_does_not_find(tmp_path):
    missing = cli("status", "--out", str(tmp_path / "nothing-here"), check=False)
    assert missing.returncode == 1 and "no such folder" in missing.stderr and missing.stdout == ""
    (tmp_path / "empty").mkdir()
    assert status(tmp_path / "empty").stdout == f"no job folder under {tmp_path / 'empty'}: nothing has run there yet\n"
