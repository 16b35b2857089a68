"""What fresh memory costs a split height's tasks: the same tasks run in one process under two
settings of glibc's malloc, alternating, each in a fresh process.

    python benchmarks/palago_task_pages.py                       # h013 at n = 52, 2 pieces
    python benchmarks/palago_task_pages.py --height 12 --n 48 --pieces 8 --rounds 2

A process sweeps the height whole to column --columns, cuts that generation into --pieces pieces
by the next phase's signature (split_generation) and then advances every piece over that phase
(advance_piece: merge, sweep, cut into buckets), --reps times over, as Ray tasks in one worker
would one after another.  It prints the user and system CPU of those tasks only, their page
faults and the process's peak resident memory (VmHWM, which includes the sweep to the column).

The two settings:
- ``release``: the private Ray's default (pipeline/local_ray.py): arrays of 1 MB or more are
  mapped on their own and go back to the system when freed, so every task's arrays are fresh
  pages, which the kernel zeroes as they are first touched;
- ``reuse``: malloc never maps and never trims (``MALLOC_MMAP_MAX_=0``,
  ``MALLOC_TRIM_THRESHOLD_`` past any heap), so a task reuses the memory the last one freed.

Both with the private Ray's ``GLIBC_TUNABLES=glibc.malloc.hugetlb=1``; other ``MALLOC_`` variables
of the environment are dropped.
Figures only; nothing is asserted.  The machine is shared: quote ratios of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from batchenum.pipeline.local_ray import _MALLOC_ENV  # the private Ray's own settings: "release"

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SETTINGS = {
    "release": _MALLOC_ENV,
    "reuse": {
        "GLIBC_TUNABLES": _MALLOC_ENV["GLIBC_TUNABLES"],
        "MALLOC_MMAP_MAX_": "0",
        "MALLOC_TRIM_THRESHOLD_": str(1 << 40),
    },
}

_TASKS = """
import json, resource, sys
import numpy as np
from batchenum.solvers.palago.transfer import (
    SweepState, advance_column, advance_piece, count_height, next_phase, split_generation)
height, n, columns, parts, reps = map(int, sys.argv[1:6])
count_height(3, 10)  # the kernels compiled or loaded
sweep = (height, n, True, 3)
state, stats, spare = SweepState.start(n), np.zeros(2, np.int64), None
for _ in range(columns):
    state, spare = advance_column(sweep, state, stats, spare)
live = state.generation_rows()
del state, spare
steps = next_phase(height, height, live.rows, parts)
following = next_phase(height, steps[1], live.rows, parts)
pieces = split_generation(live, parts, height, steps)
before = resource.getrusage(resource.RUSAGE_SELF)
for _ in range(reps):
    for piece in pieces:  # its rows stay in `pieces`: what is measured is a task's own arrays
        advance_piece(sweep, columns, steps, following, 2 * parts, piece)
after = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({
    "states": live.rows, "steps": list(steps),
    "user": after.ru_utime - before.ru_utime, "system": after.ru_stime - before.ru_stime,
    "faults": after.ru_minflt - before.ru_minflt, "peak_gib": after.ru_maxrss / 2**20,
}))
"""


def run(setting: str, args) -> dict:
    env = {name: value for name, value in os.environ.items() if not name.startswith("MALLOC_")}
    env.update(SETTINGS[setting])
    argv = [str(a) for a in (args.height, args.n, args.columns, args.pieces, args.reps)]
    done = subprocess.run(
        [sys.executable, "-c", _TASKS, *argv], env=env, cwd=HERE, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--height", type=int, default=13)
    parser.add_argument("--n", type=int, default=52)
    parser.add_argument("--columns", type=int, default=5, help="columns swept whole first (default 5)")
    parser.add_argument("--pieces", type=int, default=2, help="pieces, each a task (default 2)")
    parser.add_argument("--reps", type=int, default=2, help="times every piece is advanced (default 2)")
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds of both settings")
    args = parser.parse_args()
    print(f"h{args.height:03d} at n = {args.n}, column {args.columns}, {args.pieces} pieces, {args.reps} times each")
    for r in range(args.rounds):
        for setting in ("release", "reuse"):
            f = run(setting, args)
            cpu = f["user"] + f["system"]
            print(
                f"  round {r + 1} {setting:8s} {f['states']:,} states, rows {f['steps'][0]}-{f['steps'][1] - 1}: "
                f"CPU {cpu:.2f} s (user {f['user']:.2f}, system {f['system']:.2f}), "
                f"{f['faults']:,} page faults, peak {f['peak_gib']:.2f} GiB",
                flush=True,
            )


if __name__ == "__main__":
    main()
