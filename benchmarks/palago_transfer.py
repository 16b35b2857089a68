"""Print time, states and growth of the transfer-matrix count, and compare it with another checkout.

    python benchmarks/palago_transfer.py --max-n 32 --direct-max-n 20
    python benchmarks/palago_transfer.py --min-n 32 --max-n 40 --step 2 --against /work/main --rounds 2

For each n: the transfer sweep's CPU time (all heights, one process), states processed, the peak
number of live states, the process's peak resident memory, and the growth per tile (time ratio
between n and n - 2, square rooted, so odd/even effects cancel).  The direct search is timed up to
--direct-max-n for comparison (its growth is about 2.8 per tile).

With --against DIR (another checkout of the repository, e.g. main), each n is swept in a fresh
process by DIR's code and by this checkout's, alternately, --rounds times; the lines give the
median CPU seconds of each, their ratio, and both state counts (the machine is shared: CPU time,
alternation and medians keep the comparison fair).  Figures only: nothing is asserted, except
that both give the same fixed(n).
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
    result = subprocess.run([sys.executable, "-c", _SWEEP, str(n)], env=env, capture_output=True, text=True,
                            check=True, cwd="/")
    return json.loads(result.stdout)


def compare(args) -> None:
    print(f"{'n':>3} {'fixed(n)':>22} {'before s':>9} {'after s':>9} {'ratio':>6} {'states before':>14} "
          f"{'states after':>13} {'peak before':>12} {'peak after':>11}")
    for n in range(args.min_n, args.max_n + 1, args.step):
        runs: dict[str, list] = {"before": [], "after": []}
        for _ in range(args.rounds):
            runs["before"].append(swept_by(args.against, n))
            runs["after"].append(swept_by(HERE, n))
        before, after = runs["before"][0], runs["after"][0]
        assert before["fixed"] == after["fixed"], f"n = {n}: the checkouts disagree"
        b = statistics.median(r["cpu"] for r in runs["before"])
        a = statistics.median(r["cpu"] for r in runs["after"])
        print(f"{n:>3} {int(after['fixed']):>22,} {b:>9.2f} {a:>9.2f} {b / a:>6.2f} {before['states']:>14,} "
              f"{after['states']:>13,} {before['peak']:>12,} {after['peak']:>11,}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-n", type=int, default=12)
    parser.add_argument("--max-n", type=int, default=32)
    parser.add_argument("--step", type=int, default=1)
    parser.add_argument("--direct-max-n", type=int, default=20)
    parser.add_argument("--against", metavar="DIR", help="another checkout to compare with, n by n")
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs per n with --against")
    args = parser.parse_args()
    if args.against:
        compare(args)
        return

    count_height(2, 8)  # compile (or load the cache) outside the timings
    count_creatures(6)
    times, direct_times = {}, {}
    print(f"{'n':>3} {'fixed(n)':>24} {'CPU s':>9} {'growth':>7} {'states':>13} {'peak':>9} "
          f"{'RSS MB':>7} {'direct s':>9} {'growth':>7}")
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
        print(f"{n:>3} {fixed:>24,} {seconds:>9.3f} {growth:>7.2f} {processed:>13,} {peak:>9,} "
              f"{rss_mb:>7.0f} {direct:>9} {d_growth:>7}", flush=True)


if __name__ == "__main__":
    main()
