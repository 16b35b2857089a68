"""The private Ray on a shared machine, measured: what a terminal's Ctrl-C does in each mode, and
what a SIGKILL of the run's process group leaves running.

    python benchmarks/ray_private.py interrupt [--max-n 24]
    python benchmarks/ray_private.py soak [--kills 16] [--max-n 24] [--at raylet|workers]

interrupt: for each mode (head start, --no-head-start, --serial) runs `batchenum run palago` in a
  session of its own, sends SIGINT to its whole process group once Ray computes (as a terminal's
  Ctrl-C does), and prints the exit status, the lines after the signal that are not batchenum's,
  the last line, and the run's processes left 10 s later.
soak: kills the run's whole process group with SIGKILL at a random moment of the private Ray's
  start-up (0 to 4 s after its raylet appears; with --at workers, 0 to 1 s after its first worker
  process appears, while workers start), and prints how many of the run's processes are alive 2 s
  and 10 s later, and how long the last one lived.

Every process of a run carries a mark in its environment, so the count finds Ray's processes
wherever they are (their own process groups or session included).  Run it with the interpreter of
the checkout to measure (its `-m batchenum`).
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

MARK = "BATCHENUM_BENCH_RUN_MARK"
OURS = re.compile(r"^(\S+ batchenum .*|batchenum: .*|)$")


def marked(mark: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if f"{MARK}={mark}".encode() in environ and state not in ("Z", "X"):
                found.append(int(entry.name))
    return found


def start(out: str, max_n: int, mode: list[str], log: Path, mark: str) -> subprocess.Popen:
    with open(log, "w") as stderr:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "batchenum",
                "run",
                "palago",
                "--max-n",
                str(max_n),
                "--shards",
                "64",
                "--out",
                out,
                *mode,
            ],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            start_new_session=True,
            env={**os.environ, MARK: mark},
        )


def wait_for(predicate, process: subprocess.Popen, timeout: float = 300) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if process.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def interrupt(max_n: int) -> None:
    modes = {
        "head start": (["--workers", "2"], "computing on a local Ray"),
        "--no-head-start": (["--workers", "2", "--no-head-start"], "computing on a local Ray"),
        "--serial": (["--serial"], "computing in this process"),
    }
    for name, (mode, ready) in modes.items():
        with tempfile.TemporaryDirectory(prefix="bi", dir="/tmp") as folder:
            mark, log = uuid.uuid4().hex, Path(folder, "stderr.log")
            driver = start(os.path.join(folder, "out"), max_n, mode, log, mark)
            if not wait_for(lambda: ready in log.read_text(), driver):
                print(f"{name}: the run ended before it computed ({driver.returncode})")
                continue
            time.sleep(3)
            said = len(log.read_text())
            os.killpg(driver.pid, signal.SIGINT)
            driver.wait(timeout=120)
            time.sleep(10)
            after = log.read_text()[said:].strip().splitlines()
            noise = [line for line in after if not OURS.match(line)]
            left = marked(mark)
            for pid in left:
                os.kill(pid, signal.SIGKILL)
            print(
                f"{name}: exit {driver.returncode}; {len(noise)} lines not ours after the signal "
                f"{noise[:1]}; last line {after[-1] if after else ''!r}; {len(left)} processes left after 10 s"
            )


def soak(kills: int, max_n: int, at: str) -> None:
    sign, window = (b"default_worker.py", 1.0) if at == "workers" else (b"raylet", 4.0)
    alive_2, alive_10, lasted = [], [], []
    for _ in range(kills):
        with tempfile.TemporaryDirectory(prefix="bs", dir="/tmp") as folder:
            mark, log = uuid.uuid4().hex, Path(folder, "stderr.log")
            driver = start(os.path.join(folder, "out"), max_n, ["--workers", "2"], log, mark)
            starting = lambda: any(_named(pid, sign) for pid in marked(mark))  # noqa: E731
            if not wait_for(starting, driver):
                print(f"the run ended before a process named {sign.decode()} started")
                continue
            time.sleep(random.uniform(0, window))
            os.killpg(driver.pid, signal.SIGKILL)
            killed = time.monotonic()
            driver.wait()
            counts = {}
            while (left := marked(mark)) and time.monotonic() - killed < 60:
                for at in (2, 10):
                    if at not in counts and time.monotonic() - killed >= at:
                        counts[at] = len(left)
                time.sleep(0.1)
            for pid in left:
                os.kill(pid, signal.SIGKILL)
            alive_2.append(counts.get(2, 0))
            alive_10.append(counts.get(10, 0))
            lasted.append(time.monotonic() - killed)
            print(
                f"kill {len(lasted)}: {alive_2[-1]} alive at 2 s, {alive_10[-1]} at 10 s, the last lived "
                f"{lasted[-1]:.1f} s",
                flush=True,
            )
    survived = sum(1 for count in alive_2 if count)
    print(
        f"{kills} kills: processes alive 2 s after the kill in {survived}; at 10 s in "
        f"{sum(1 for count in alive_10 if count)}; the longest lived {max(lasted):.1f} s"
    )


def _named(pid: int, name: bytes) -> bool:
    try:
        return name in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["interrupt", "soak"])
    parser.add_argument("--kills", type=int, default=16)
    parser.add_argument("--max-n", type=int, default=24)
    parser.add_argument("--at", choices=["raylet", "workers"], default="raylet")
    args = parser.parse_args()
    interrupt(args.max_n) if args.what == "interrupt" else soak(args.kills, args.max_n, args.at)
