"""Print the cost of counting the creatures a reflection fixes (A_ref): the orbit-closed search of
solvers/palago/symmetric.py against the half-plane sweep of solvers/palago/mirror.py.

    python benchmarks/palago_mirror.py --min-n 30 --max-n 40 --step 2 --search-max-n 40

For each n: the sweep's CPU seconds, states processed and peak live states; the search's CPU
seconds (up to --search-max-n: it grows about 1.7x per tile) and their ratio.  Both run in this
process, one after the other; figures only, except that both must give the same counts.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from batchenum.solvers.palago.mirror import reflection_counts  # noqa: E402
from batchenum.solvers.palago.symmetric import SymmetricPart, count_symmetric_part  # noqa: E402


def timed(fn, *args):
    start = time.process_time()
    result = fn(*args)
    return result, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min-n", type=int, default=30)
    parser.add_argument("--max-n", type=int, default=40)
    parser.add_argument("--step", type=int, default=2)
    parser.add_argument("--search-max-n", type=int, default=36)
    args = parser.parse_args()
    reflection_counts(8)  # compile (or load the cache) outside the timings
    count_symmetric_part(8, SymmetricPart("reflection", 0, 0, 1))
    print(f"{'n':>3} {'sweep s':>9} {'states':>12} {'peak':>9} {'search s':>9} {'search/sweep':>12}  A_ref(n)")
    for n in range(args.min_n, args.max_n + 1, args.step):
        stats = np.zeros(2, dtype=np.int64)
        swept, sweep_s = timed(reflection_counts, n, stats)
        search = ""
        if n <= args.search_max_n:
            (searched, _), search_s = timed(count_symmetric_part, n, SymmetricPart("reflection", 0, 0, 1))
            if searched.tolist() != swept.tolist():
                sys.exit(f"n = {n}: the sweep and the search disagree")
            search = f"{search_s:9.2f} {search_s / sweep_s:12.1f}"
        else:
            search = f"{'':9} {'':12}"
        print(f"{n:3d} {sweep_s:9.2f} {int(stats[1]):12,d} {int(stats[0]):9,d} {search}  {int(swept[n]):,}", flush=True)


if __name__ == "__main__":
    main()
