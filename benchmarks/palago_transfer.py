"""Print time, states and growth of the transfer-matrix count, and compare it with another checkout.

    python benchmarks/palago_transfer.py --max-n 32 --direct-max-n 20
    python benchmarks/palago_transfer.py --min-n 32 --max-n 40 --step 2 --against ../main-checkout --rounds 2

For each n: the transfer sweep's CPU time (all heights, one process), states processed, the peak
number of live states, the process's peak resident memory, and the growth per tile (time ratio
between n and n - 2, square rooted, so odd/even effects cancel).  The direct search is timed up to
--direct-max-n for comparison (its growth is about 2.8 per tile).

With --against DIR (another checkout of the repository, e.g. main), each n is swept in a fresh
process by DIR's code and by this checkout's, alternately, --rounds times; the lines give the
median CPU seconds of each, their ratio, and both state counts (the machine is shared: CPU time,
alternation and medians keep the comparison fair).  Figures only: nothing is asserted, except
that both give the same fixed(n).

With --height H (and --n N), one height's sweep instead, in fresh processes (with --against, by
both checkouts in turn): CPU seconds, state-steps and CPU microseconds per state-step, the peak
number of live states, the process's peak resident memory beyond what it held before the sweep
and that per peak state, and the bytes per state of the largest saved generation (its checkpoint:
keys, ranges and coefficients, as the sweep holds them), from a second run that saves every column.

    python benchmarks/palago_transfer.py --height 9 --n 50 --against /path/to/main --rounds 2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

from batchenum.solvers.palago import count_creatures  # noqa: E402
from batchenum.solvers.palago.transfer import count_height, max_height  # noqa: E402

# One sweep of every height in a fresh process, by whichever checkout PYTHONPATH names.  The
# stats array is int64[3] for old kernels (peak, processed, largest coefficient), [2] for new ones.
_SWEEP = """
import json, sys, time
import numpy as np
from batchenum.solvers.palago.transfer import count_height, max_height
n = int(sys.argv[1])
count_height(2, 8)
start = time.process_time()
peak = processed = 0
total = 0
for height in range(1, max_height(n) + 1):
    stats = np.zeros(3, dtype=np.int64)
    total = total + int(count_height(height, n, stats=stats)[n])
    peak, processed = max(peak, int(stats[0])), processed + int(stats[1])
print(json.dumps({"cpu": time.process_time() - start, "states": processed, "peak": peak, "fixed": str(total)}))
"""


# One height's sweep in a fresh process: timed, or saved every column for the bytes per state.
_HEIGHT = """
import json, resource, sys, time
import numpy as np
from batchenum.solvers.palago.transfer import count_height
height, n, saving = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "save"
count_height(2, 8)
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
largest = [0, 0]
def save(data, progress):
    states = int(progress.split(", ")[1].split()[0].replace(",", ""))
    if states > largest[1]:
        largest[:] = [len(data), states]
stats = np.zeros(3, dtype=np.int64)
start = time.process_time()
counts = count_height(height, n, stats=stats, **({"save": save, "save_every": 0.0} if saving else {}))
cpu = time.process_time() - start
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss
print(json.dumps({"cpu": cpu, "states": int(stats[1]), "peak": int(stats[0]), "rss": grown,
                  "saved": largest, "fixed": str(int(counts[n]))}))
"""


def height_by(checkout: str, height: int, n: int, mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": checkout}
    result = subprocess.run(
        [sys.executable, "-c", _HEIGHT, str(height), str(n), mode],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    return json.loads(result.stdout)


def one_height(args) -> None:
    checkouts = {"before": args.against, "after": HERE} if args.against else {"this": HERE}
    runs: dict[str, list] = {name: [] for name in checkouts}
    for _ in range(args.rounds):
        for name, checkout in checkouts.items():
            runs[name].append(height_by(checkout, args.height, args.n, "time"))
    print(f"h{args.height:03d} at n = {args.n}")
    print(
        f"{'':>7} {'CPU s':>8} {'state-steps':>13} {'us/step':>8} {'peak states':>12} {'RSS MB':>8} "
        f"{'RSS B/state':>12} {'saved B/state':>14}"
    )
    for name, checkout in checkouts.items():
        saved = height_by(checkout, args.height, args.n, "save")["saved"]
        cpu = statistics.median(r["cpu"] for r in runs[name])
        first = runs[name][0]
        assert all(r["fixed"] == first["fixed"] for r in runs[name] + [r for rs in runs.values() for r in rs])
        rss = statistics.median(r["rss"] for r in runs[name])
        print(
            f"{name:>7} {cpu:>8.2f} {first['states']:>13,} {1e6 * cpu / first['states']:>8.3f} {first['peak']:>12,} "
            f"{rss / 2**20:>8.0f} {rss / first['peak']:>12.0f} {saved[0] / max(saved[1], 1):>14.0f}",
            flush=True,
        )
    print("runs, CPU s: " + "; ".join(f"{name} " + ", ".join(f"{r['cpu']:.2f}" for r in runs[name]) for name in runs))


def transfer(n: int):
    start = time.process_time()
    peak = processed = 0
    total = 0
    for height in range(1, max_height(n) + 1):
        stats = np.zeros(2, dtype=np.int64)
        total += int(count_height(height, n, stats=stats)[n])
        peak = max(peak, int(stats[0]))
        processed += int(stats[1])
    return time.process_time() - start, processed, peak, total


def swept_by(checkout: str, n: int) -> dict:
    env = {**os.environ, "PYTHONPATH": checkout}
    result = subprocess.run(
        [sys.executable, "-c", _SWEEP, str(n)], env=env, capture_output=True, text=True, check=True, cwd="/"
    )
    return json.loads(result.stdout)


def compare(args) -> None:
    print(
        f"{'n':>3} {'fixed(n)':>22} {'before s':>9} {'after s':>9} {'ratio':>6} {'states before':>14} "
        f"{'states after':>13} {'peak before':>12} {'peak after':>11}"
    )
    for n in range(args.min_n, args.max_n + 1, args.step):
        runs: dict[str, list] = {"before": [], "after": []}
        for _ in range(args.rounds):
            runs["before"].append(swept_by(args.against, n))
            runs["after"].append(swept_by(HERE, n))
        before, after = runs["before"][0], runs["after"][0]
        assert before["fixed"] == after["fixed"], f"n = {n}: the checkouts disagree"
        b = statistics.median(r["cpu"] for r in runs["before"])
        a = statistics.median(r["cpu"] for r in runs["after"])
        print(
            f"{n:>3} {int(after['fixed']):>22,} {b:>9.2f} {a:>9.2f} {b / a:>6.2f} {before['states']:>14,} "
            f"{after['states']:>13,} {before['peak']:>12,} {after['peak']:>11,}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-n", type=int, default=12)
    parser.add_argument("--max-n", type=int, default=32)
    parser.add_argument("--step", type=int, default=1)
    parser.add_argument("--direct-max-n", type=int, default=20)
    parser.add_argument("--against", metavar="DIR", help="another checkout to compare with, n by n")
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs per n with --against")
    parser.add_argument("--height", type=int, help="one height's sweep (at --n) instead of every height")
    parser.add_argument("--n", type=int, default=50, help="max_n of the --height sweep")
    args = parser.parse_args()
    if args.height:
        one_height(args)
        return
    if args.against:
        compare(args)
        return

    count_height(2, 8)  # compile (or load the cache) outside the timings
    count_creatures(6)
    times, direct_times = {}, {}
    print(
        f"{'n':>3} {'fixed(n)':>24} {'CPU s':>9} {'growth':>7} {'states':>13} {'peak':>9} "
        f"{'RSS MB':>7} {'direct s':>9} {'growth':>7}"
    )
    for n in range(args.min_n, args.max_n + 1, args.step):
        seconds, processed, peak, fixed = transfer(n)
        times[n] = seconds
        growth = math.sqrt(seconds / times[n - 2]) if times.get(n - 2) else float("nan")
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        direct = d_growth = ""
        if n <= args.direct_max_n:
            start = time.process_time()
            counts, _ = count_creatures(n)
            direct_times[n] = time.process_time() - start
            assert int(counts.fixed[n]) == fixed, f"n = {n}: the methods disagree"
            direct = f"{direct_times[n]:9.3f}"
            if direct_times.get(n - 2):
                d_growth = f"{math.sqrt(direct_times[n] / direct_times[n - 2]):7.2f}"
        print(
            f"{n:>3} {fixed:>24,} {seconds:>9.3f} {growth:>7.2f} {processed:>13,} {peak:>9,} "
            f"{rss_mb:>7.0f} {direct:>9} {d_growth:>7}",
            flush=True,
        )


if __name__ == "__main__":
    main()
