"""Where the seconds of a small local run go: Ray's processes, imports, numba cache loads.

Runs ``batchenum run palago --max-n N --workers 2`` in a fresh folder while sampling /proc every
50 ms, and prints every process the run started (grouped by kind: driver, Ray's own services,
workers) with its CPU seconds and lifetime, then the wall clock of the run's stages from its
progress lines.  Then, in a fresh interpreter, the import and numba-cache cost a worker pays before
its first shard.  Also the search alone (``--serial``, one process) for comparison.

    python benchmarks/startup.py             # n = 24
    python benchmarks/startup.py --max-n 22 --repeat 3

Figures, not assertions: on a shared machine compare what one run prints.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

from batchenum.pipeline.local_ray import process_tree

TICKS = os.sysconf("SC_CLK_TCK")
WORKER_COST = """
import time
t0 = time.perf_counter()
import numpy, pyarrow
t1 = time.perf_counter()
import ray
t2 = time.perf_counter()
import batchenum.jobs.palago, batchenum.pipeline.runner
t3 = time.perf_counter()
from batchenum.solvers.palago import count_creatures
t4 = time.perf_counter()
count_creatures(5)
t5 = time.perf_counter()
print(f"{t1-t0:.2f} {t2-t1:.2f} {t3-t2:.2f} {t4-t3:.2f} {t5-t4:.2f} {time.process_time():.2f}")
"""


def sample(pid: int) -> tuple[str, float] | None:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            command = handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    return command, (int(fields[11]) + int(fields[12])) / TICKS


def kind(command: str, root_command: str) -> str:
    if command == root_command:
        return "driver (batchenum, head start included)"
    for pattern, name in (
        ("ray.scripts.scripts start", "ray start (the background Ray, nice 19)"),
        ("default_worker", "Ray worker"),
        ("gcs_server", "Ray gcs_server"),
        ("raylet", "Ray raylet"),
        ("dashboard", "Ray dashboard/agent"),
        ("runtime_env", "Ray runtime_env agent"),
        ("log_monitor", "Ray log_monitor"),
        ("monitor.py", "Ray monitor"),
    ):
        if pattern in command:
            return name
    return "other: " + command[:60]


def profile_run(max_n: int, workers: int) -> None:
    out = tempfile.mkdtemp(prefix="startup-")
    command = [
        sys.executable,
        "-m",
        "batchenum",
        "run",
        "palago",
        "--max-n",
        str(max_n),
        "--workers",
        str(workers),
        "--out",
        out,
    ]
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: dict[int, dict] = {}
    busy: list[tuple[float, float]] = []  # (time, CPU seconds of all the run's processes so far)
    while process.poll() is None:
        now = time.monotonic() - started
        for pid in process_tree([process.pid]):
            found = sample(pid)
            if found:
                entry = seen.setdefault(pid, {"command": found[0], "first": now, "cpu": 0.0})
                entry["cpu"], entry["last"] = found[1], now
        busy.append((now, sum(entry["cpu"] for entry in seen.values())))
        time.sleep(0.05)
    wall = time.monotonic() - started
    output = process.stdout.read()
    shutil.rmtree(out, ignore_errors=True)
    root = seen.get(process.pid, {}).get("command", "")
    groups: dict[str, list] = defaultdict(list)
    for entry in seen.values():
        groups[kind(entry["command"], root)].append(entry)
    print(
        f"\nbatchenum run palago --max-n {max_n} --workers {workers}: {wall:.1f} s wall, "
        f"{len(seen)} processes, {sum(e['cpu'] for e in seen.values()):.1f} CPU s in all (sampled every 50 ms)"
    )
    print(f"  {'process':44} {'count':>5} {'CPU s':>7} {'first seen s':>13}")
    for name, entries in sorted(groups.items(), key=lambda item: -sum(e["cpu"] for e in item[1])):
        print(
            f"  {name:44} {len(entries):5d} {sum(e['cpu'] for e in entries):7.2f} "
            f"{min(e['first'] for e in entries):13.1f}"
        )
    for line in output.splitlines():
        if re.search(r"\[\d+\.\d+s\]$", line):
            print("   ", line)
    print("  CPUs busy, per second of the run: " + " ".join(f"{used:.1f}" for used in per_second(busy)))


def per_second(busy: list[tuple[float, float]]) -> list[float]:
    """CPU seconds used in each whole second of the run, from cumulative samples."""
    used, second, last = [], 1.0, (0.0, 0.0)
    for when, cpu in busy:
        while when >= second:
            used.append(cpu - last[1])
            last, second = (when, cpu), second + 1.0
    return used


def worker_cost(repeat: int) -> None:
    print("\nA fresh interpreter before its first shard (what each Ray worker pays), seconds:")
    print(
        f"  {'numpy+pyarrow':>13} {'import ray':>10} {'jobs+pipeline':>13} {'kernel import':>13} "
        f"{'cache load':>10} {'CPU':>5}"
    )
    for _ in range(repeat):
        figures = subprocess.run(
            [sys.executable, "-c", WORKER_COST], capture_output=True, text=True, check=True
        ).stdout.split()
        print("  " + " ".join(f"{float(v):>{w}.2f}" for v, w in zip(figures, (13, 10, 13, 13, 10, 5))))


def serial(max_n: int) -> None:
    out = tempfile.mkdtemp(prefix="startup-serial-")
    started = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "batchenum",
            "run",
            "palago",
            "--max-n",
            str(max_n),
            "--serial",
            "--quiet",
            "--out",
            out,
        ],
        check=True,
        capture_output=True,
    )
    print(f"\n--serial (one process, no Ray): {time.monotonic() - started:.1f} s wall")
    shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-n", type=int, default=24)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for _ in range(args.repeat):
        profile_run(args.max_n, args.workers)
    worker_cost(args.repeat)
    serial(args.max_n)


if __name__ == "__main__":
    main()
