"""Upload scratch folders across PID namespaces: a sweep run in a container sharing /tmp (its own PID
namespace, where the live run's pid does not exist) never removes a live run's scratch folder, and
still removes those of killed runs.

The namespace is real (``unshare --pid --fork --mount-proc``, as root); the holders are real
processes, one killed by its pid."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare(1) for a PID namespace"
)

HOLD = """
import sys
from batchenum.pipeline.storage import scratch
with scratch("upload", sys.argv[1]) as path:
    print(path, flush=True)
    sys.stdin.readline()  # in use until told
"""
SWEEP = """
import sys
from batchenum.pipeline.storage import scratch
with scratch("upload", sys.argv[1]):
    pass
"""


def hold(root) -> tuple[subprocess.Popen, str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    return holder, holder.stdout.readline().strip()


def age(path: str, seconds: float) -> None:
    then = time.time() - seconds
    os.utime(path, (then, then))


def test_a_sweep_in_another_pid_namespace_keeps_live_scratch_and_removes_dead(tmp_path):
    live, live_path = hold(tmp_path)
    killed, killed_path = hold(tmp_path)
    os.kill(killed.pid, signal.SIGKILL)  # its lock goes with it; its folder stays
    killed.wait(timeout=60)
    old_layout = tmp_path / "batchenum-upload-999999-abcd1234"  # a killed run of an older batchenum
    old_layout.mkdir()
    young = tmp_path / "batchenum-upload-999998-young123"  # just made: its maker may not hold its lock yet
    young.mkdir()
    for path in (live_path, killed_path, str(old_layout)):
        age(path, 600)
    try:
        subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", SWEEP, str(tmp_path)],
            check=True,
            timeout=120,
        )
        assert os.path.isdir(live_path), "the sweep removed a live run's scratch folder"
        assert not os.path.exists(killed_path) and not old_layout.exists()
        assert young.is_dir()
    finally:
        assert live.stdin is not None
        live.stdin.write("\n")
        live.stdin.close()
        live.wait(timeout=60)
    assert not os.path.exists(live_path)  # its holder removed it on the way out
    assert sorted(p.name for p in tmp_path.iterdir()) == [young.name]  # the sweep's own folder is gone too
