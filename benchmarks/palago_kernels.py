"""Time the Palago kernels of this checkout against another one, alternately in fresh processes.

    python benchmarks/palago_kernels.py --against /tmp/oldmain
    python benchmarks/palago_kernels.py --against ../main-checkout --max-n 23 --symmetric-max-n 32 --rounds 7

Each round runs, for each checkout in turn (the order swaps every round), one fresh process that
loads (or compiles) the kernels on small sizes first and then times the direct search
``count_creatures(--max-n)`` and the symmetric counts ``symmetric_counts(--symmetric-max-n)``,
each --repeat times, keeping the least.
The lines give the minimum and median CPU seconds of each, the ratio of the minimums (this
checkout / the other) and whether both gave the same counts.  Figures only: the machine is shared,
so compare ratios from one run, not seconds across runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# One timing of each kernel, by whichever checkout PYTHONPATH names.  CPU time: other processes on
# the machine slow the wall clock more than they slow this process's own CPU time.
_TIMING = """
import json, sys, time
from batchenum.solvers.palago import count_creatures
from batchenum.solvers.palago.symmetric import symmetric_counts
max_n, symmetric_max_n, repeat = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
count_creatures(8, catalogue_max_n=8)
symmetric_counts(8)
direct = symmetric = float("inf")
for _ in range(repeat):
    start = time.process_time()
    counts, _ = count_creatures(max_n)
    direct = min(direct, time.process_time() - start)
    start = time.process_time()
    sym = symmetric_counts(symmetric_max_n)
    symmetric = min(symmetric, time.process_time() - start)
answer = [counts.free.tolist(), counts.nodes.tolist(), sym.reflection.tolist(), sym.rotation.tolist(),
          sym.full.tolist(), sym.nodes]
print(json.dumps({"direct": direct, "symmetric": symmetric, "answer": answer}))
"""


def time_once(checkout: str, max_n: int, symmetric_max_n: int, repeat: int) -> dict:
    env = dict(os.environ, PYTHONPATH=checkout)
    done = subprocess.run(
        [sys.executable, "-c", _TIMING, str(max_n), str(symmetric_max_n), str(repeat)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--against", required=True, help="another checkout of the repository (e.g. main)")
    parser.add_argument("--max-n", type=int, default=22, help="size of the direct search (default 22)")
    parser.add_argument("--symmetric-max-n", type=int, default=30, help="size of the symmetric counts (default 30)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3, help="timings per process, the least kept (default 3)")
    args = parser.parse_args()

    checkouts = {"this": HERE, "other": os.path.abspath(args.against)}
    runs = {name: [] for name in checkouts}
    for round_ in range(args.rounds):
        order = list(checkouts) if round_ % 2 == 0 else list(reversed(checkouts))
        for name in order:
            runs[name].append(time_once(checkouts[name], args.max_n, args.symmetric_max_n, args.repeat))
            print(
                f"round {round_ + 1} {name:5s} direct {runs[name][-1]['direct']:7.3f}s"
                f"  symmetric {runs[name][-1]['symmetric']:7.3f}s",
                flush=True,
            )
    same = all(run["answer"] == runs["this"][0]["answer"] for name in runs for run in runs[name])
    print(f"\nCPU seconds over {args.rounds} rounds (this = {HERE}, other = {checkouts['other']}); same counts: {same}")
    for kernel, size in (("direct", args.max_n), ("symmetric", args.symmetric_max_n)):
        this = [run[kernel] for run in runs["this"]]
        other = [run[kernel] for run in runs["other"]]
        print(
            f"{kernel:9s} n = {size}: this min {min(this):.3f} median {statistics.median(this):.3f}; "
            f"other min {min(other):.3f} median {statistics.median(other):.3f}; "
            f"ratio of minimums {min(this) / min(other):.3f}, of medians "
            f"{statistics.median(this) / statistics.median(other):.3f}"
        )


if __name__ == "__main__":
    main()
