"""Print time, memory and growth of the transfer-matrix count against the direct search.

    python benchmarks/palago_transfer.py --max-n 32 --direct-max-n 20

For each n: the transfer sweep's wall time (all heights, one process), states processed, the
peak number of live states, an estimate of the peak state memory (keys + size polynomials), the
process's peak resident memory, and the growth per tile (time ratio between n and n - 2, square
rooted, so odd/even effects cancel).  The direct search is timed up to --direct-max-n for
comparison (its growth is about 2.8 per tile).  Figures only: nothing is asserted.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from batchenum.solvers.palago import count_creatures  # noqa: E402
from batchenum.solvers.palago.transfer import count_height, max_height  # noqa: E402


def transfer(n: int):
    start = time.perf_counter()
    peak = processed = 0
    total = np.zeros(n + 1, dtype=np.int64)
    for height in range(1, max_height(n) + 1):
        stats = np.zeros(3, dtype=np.int64)
        total += count_height(height, n, stats=stats)
        peak = max(peak, int(stats[0]))
        processed += int(stats[1])
    return time.perf_counter() - start, processed, peak, int(total[n])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-n", type=int, default=12)
    parser.add_argument("--max-n", type=int, default=32)
    parser.add_argument("--direct-max-n", type=int, default=20)
    args = parser.parse_args()

    count_height(2, 8)  # compile (or load the cache) outside the timings
    count_creatures(6)
    times, direct_times = {}, {}
    print(f"{'n':>3} {'fixed(n)':>22} {'transfer s':>11} {'growth':>7} {'states':>13} {'peak':>9} "
          f"{'state MB':>9} {'RSS MB':>7} {'direct s':>9} {'growth':>7}")
    for n in range(args.min_n, args.max_n + 1):
        seconds, processed, peak, fixed = transfer(n)
        times[n] = seconds
        growth = math.sqrt(seconds / times[n - 2]) if times.get(n - 2) else float("nan")
        state_mb = peak * (2 + n + 1) * 8 * 2 / 2**20  # two generations of (key, polynomial) rows
        rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        direct = d_growth = ""
        if n <= args.direct_max_n:
            start = time.perf_counter()
            counts, _ = count_creatures(n)
            direct_times[n] = time.perf_counter() - start
            assert int(counts.fixed[n]) == fixed, f"n = {n}: the methods disagree"
            direct = f"{direct_times[n]:9.3f}"
            if direct_times.get(n - 2):
                d_growth = f"{math.sqrt(direct_times[n] / direct_times[n - 2]):7.2f}"
        print(f"{n:>3} {fixed:>22,} {seconds:>11.3f} {growth:>7.2f} {processed:>13,} {peak:>9,} "
              f"{state_mb:>9.2f} {rss_mb:>7.0f} {direct:>9} {d_growth:>7}", flush=True)


if __name__ == "__main__":
    main()
