"""The private Ray's watchdog (pipeline/ray_watchdog.py) on its own, without Ray: what it gives the
command it starts in its session of its own.  The rest of its duties (killing every process below
it, removing the folder) are tested with a real Ray in tests/test_local_ray.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from batchenum.pipeline import ray_watchdog

pytestmark = pytest.mark.skipif(
    not os.path.exists("/proc/self/autogroup"), reason="this kernel has no scheduling autogroups"
)

# A driver in a session of its own, its autogroup at nice DRIVER_GROUP, starts the watchdog as
# LocalRay does (a new session) with NICE; the command reports the scheduling it was given.
DRIVER = """
import os, subprocess, sys
from batchenum.pipeline.ray_watchdog import _set_group_nice
_set_group_nice(int(sys.argv[1]))
read_end, write_end = os.pipe()
report = "import json, os; print(json.dumps([os.nice(0), open('/proc/self/autogroup').read().split()[-1]]))"
watchdog = subprocess.run(
    [sys.executable, "-I", sys.argv[3], str(read_end), sys.argv[2], sys.argv[4], "--", sys.executable, "-c", report],
    pass_fds=(read_end,), start_new_session=True, capture_output=True, text=True,
)
print(watchdog.stdout, end="")
sys.exit(watchdog.returncode)
"""


def scheduling_given(driver_group_nice: int, nice: int, folder: Path) -> tuple[int, int]:
    """(process nice, autogroup nice) of a command the watchdog started for such a driver."""
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(driver_group_nice), str(nice), ray_watchdog.__file__, str(folder)],
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
    )
    assert done.returncode == 0, done.stderr
    process_nice, group_nice = json.loads(done.stdout)
    return process_nice, int(group_nice)


def test_ray_for_the_head_start_yields_as_a_whole_group(tmp_path):
    # nice 19 alone would rank Ray's processes only inside their new session's autogroup, which
    # competes with the driver's threads as an equal
    assert scheduling_given(driver_group_nice=0, nice=19, folder=tmp_path) == (19, 19)


def test_ray_of_a_run_made_to_yield_yields_with_it(tmp_path):
    assert scheduling_given(driver_group_nice=7, nice=0, folder=tmp_path) == (0, 7)
    assert scheduling_given(driver_group_nice=7, nice=19, folder=tmp_path) == (19, 19)


def test_a_group_nice_is_read_as_the_kernel_writes_it(tmp_path):
    (tmp_path / "autogroup").write_text("/autogroup-4242 nice 13\n")
    assert ray_watchdog.group_nice(str(tmp_path / "autogroup")) == 13
    assert ray_watchdog.group_nice(str(tmp_path / "none")) == 0
