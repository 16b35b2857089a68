"""A direct Palago run the machine cannot finish in a day is refused at once with its projected
time and a pointer to --method transfer, unless --force (issue 35 item 5)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import assert_exit, cpu_seconds, wait_until

from batchenum.jobs.palago import PalagoJob
from batchenum.jobs.palago_counts import DIRECT_GROWTH, DIRECT_MEASURED, direct_seconds
from batchenum.pipeline.errors import UsageError

DAY = 86_400


def first_refused_n() -> int:
    cpus = os.cpu_count() or 1
    return next(n for n in range(1, 100) if direct_seconds(n, cpus) > DAY)


def test_the_projection_grows_from_the_measured_run():
    n, cpu_seconds = DIRECT_MEASURED
    assert (n, cpu_seconds) == (28, 33 * 60 * 2)  # docs/palago.md: n = 28 took 33 minutes on 2 cores
    assert direct_seconds(n, 2) == pytest.approx(33 * 60)
    assert direct_seconds(n + 3, 4) == pytest.approx(33 * 60 / 2 * DIRECT_GROWTH**3)


def test_a_run_past_a_day_is_refused_unless_forced():
    refused = first_refused_n()
    assert 29 <= refused <= 40  # any machine of 1 to 2,000 CPUs refuses n = 40
    with pytest.raises(UsageError, match=f"max_n {refused} by the direct search would take about") as caught:
        PalagoJob.create(max_n=refused)
    assert "Use method transfer" in str(caught.value) and "give force" in str(caught.value)
    assert f"this machine's {os.cpu_count() or 1} CPUs" in str(caught.value)
    assert "before the run connects to any cluster" in str(caught.value)  # so --address needs force
    assert PalagoJob.create(max_n=refused, force=True).max_n == refused
    assert PalagoJob.create(max_n=refused - 1).max_n == refused - 1
    assert PalagoJob.create(max_n=40, method="transfer").max_n == 40  # the transfer method is never refused


def test_the_cli_refuses_max_n_40_at_once_and_writes_nothing(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "batchenum", "run", "palago", "--max-n", "40", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert_exit(run, 2)
    assert "--max-n 40 by the direct search would take about" in run.stderr and "years" in run.stderr
    assert "Use --method transfer" in run.stderr and "Traceback" not in run.stderr
    assert list(tmp_path.iterdir()) == []


def test_sigterm_during_planning_stops_the_run_at_once(tmp_path):
    """Planning --max-n 40 estimates work in the tree of n = 34, one compiled call of tens of
    seconds per prefix: the signal must not wait for the call to return."""
    import signal

    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "batchenum",
            "run",
            "palago",
            "--max-n",
            "40",
            "--force",
            "--serial",
            "--out",
            str(tmp_path),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    # imports and the frontier take about 2 CPU seconds: past twice that, the estimate's kernel runs
    wait_until(lambda: cpu_seconds(run.pid) >= 4, "the run was estimating", 300, run)
    run.send_signal(signal.SIGTERM)
    try:
        _, stderr = run.communicate(timeout=10)  # measured: 0.1 s (benchmarks/hostile_input.py); main: over 50 s
    except subprocess.TimeoutExpired:
        run.kill()
        run.communicate()
        raise AssertionError("SIGTERM during planning was not honoured within 10 s") from None
    assert_exit(run, 143)
    assert "stopped (SIGTERM)" in stderr
