"""The default local run: shards computed in the driver while a private Ray starts in the background
(``ray start`` in a child process).  Ray must take over when it comes up in time, never be waited for
when it does not, and leave no process or folder behind, even when the driver is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

SCENARIO = Path(__file__).resolve().parent / "scenarios" / "local_toy.py"


@pytest.fixture
def ray_tmpdir():
    """A short private RAY_TMPDIR (Ray's socket paths must stay under about 107 bytes)."""
    folder = tempfile.mkdtemp(prefix="rt", dir="/tmp")
    yield folder
    os.rmdir(folder)  # fails the test if the run left Ray's folder behind


def toy_command(out: Path, shards: int, seconds: float, workers: int) -> list[str]:
    return [sys.executable, str(SCENARIO), str(out), str(shards), str(seconds), str(workers)]


def run_toy(out: Path, ray_tmpdir: str, *args) -> tuple[dict, str]:
    done = subprocess.run(toy_command(out, *args), capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RAY_TMPDIR": ray_tmpdir})
    assert done.returncode == 0, done.stderr
    report = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(report[len("RESULT "):]), done.stderr


def processes_naming(text: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", text], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found]


def test_ray_takes_shards_from_the_front_once_it_is_up(tmp_path, ray_tmpdir):
    # one thread computes here, so Ray starts on the other core: 120 shards of 0.25 s give it 30 s
    # (it needs 5 to 7 s on a quiet machine, 16 s and more under load); tests/test_executor.py
    # checks the same hand-over deterministically, with a fake Ray
    report, log = run_toy(tmp_path, ray_tmpdir, 120, 0.25, 1)
    assert "computing on a local Ray with 1 CPUs" in log
    ran = report["ran"]
    assert len(ran) == 120 and set(ran.values()) == {"ray", "driver"}
    on_ray = [shard for shard, where in ran.items() if where == "ray"]
    assert on_ray == sorted(ran)[:len(on_ray)]  # the front of the plan; the driver took the end
    assert report["values"] == list(range(605))
    assert os.listdir(ray_tmpdir) == [] and processes_naming(ray_tmpdir) == []


def test_a_run_finished_before_ray_is_up_never_connects(tmp_path, ray_tmpdir):
    started = time.monotonic()
    report, log = run_toy(tmp_path, ray_tmpdir, 4, 0.0, 2)
    assert "the local Ray is not needed: every shard was taken here before it was up" in log
    assert "computing on a local Ray" not in log
    assert set(report["ran"].values()) == {"driver"} and report["values"] == list(range(25))
    assert os.listdir(ray_tmpdir) == [] and processes_naming(ray_tmpdir) == []
    assert time.monotonic() - started < 60  # generous: it must not wait for Ray's start (seconds)


def test_a_killed_driver_leaves_no_ray_process(tmp_path, ray_tmpdir):
    driver = subprocess.Popen(toy_command(tmp_path, 100, 1.0, 1), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**os.environ, "RAY_TMPDIR": ray_tmpdir})
    try:
        deadline = time.monotonic() + 120
        while not any("raylet" in _command_line(pid) for pid in processes_naming(ray_tmpdir)):
            assert driver.poll() is None and time.monotonic() < deadline, "Ray never started"
            time.sleep(0.2)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    deadline = time.monotonic() + 30
    while processes_naming(ray_tmpdir) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = processes_naming(ray_tmpdir)
    assert left == [], [_command_line(pid) for pid in left]
    for folder in os.listdir(ray_tmpdir):  # the killed driver could not remove Ray's folder itself
        subprocess.run(["rm", "-rf", os.path.join(ray_tmpdir, folder)], check=True)


def _command_line(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_a_local_ray_that_cannot_start_leaves_the_work_to_the_driver(tmp_path):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    done = subprocess.run(toy_command(tmp_path / "out", 6, 0.2, 2), capture_output=True, text=True, timeout=300,
                          env={**os.environ, "RAY_TMPDIR": str(not_a_folder)})
    assert done.returncode == 0, done.stderr
    assert "the local Ray did not start, so every shard is computed here: NotADirectoryError" in done.stderr
    assert '"values": ' + json.dumps(list(range(35))) in done.stdout
