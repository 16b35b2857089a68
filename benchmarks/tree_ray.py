"""The search-tree skeleton on a private Ray against the Ray tasks a user would write instead:
self-avoiding walks (examples/walks.py), n steps, on ``--cpus`` CPUs, alternating

- ``batchenum.run(Walks, n=N, workers=CPUS, head_start=False)``: every shard a Ray task, each
  committed as Parquet, the tables merged;
- a fresh ``ray.init(num_cpus=CPUS)`` and one task per walk prefix of ``--prefix`` steps, each
  counting its subtree with a plain depth-first search (the job's two methods as functions of
  the script, which Ray ships by value), the counts summed.

Each in a fresh process; wall seconds from the start of the process, Ray's start included.
``python benchmarks/tree_ray.py --n 15 --rounds 2``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PLAIN = """
import ray

N = {n}


def children(walk):
    if len(walk) > N:
        return []
    x, y = walk[-1]
    return [walk + (p,) for p in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)) if p not in walk]


def is_leaf(walk):
    return len(walk) == N + 1


@ray.remote
def count(prefix):
    stack, leaves, nodes = [prefix], 0, 0
    while stack:
        node = stack.pop()
        nodes += 1
        if is_leaf(node):
            leaves += 1
        else:
            stack.extend(children(node))
    return leaves, nodes


level, above = [((0, 0),)], 0
for _ in range({prefix}):
    above += len(level)
    level = [child for node in level for child in children(node)]
ray.init(num_cpus={cpus}, include_dashboard=False, logging_level="ERROR")
counts = ray.get([count.remote(prefix) for prefix in level])
print(sum(c[0] for c in counts), above + sum(c[1] for c in counts))
"""

TREE = """
import sys
sys.path.insert(0, {examples!r})
import batchenum
from walks import Walks

result = batchenum.run(Walks, n={n}, out={out!r}, workers={cpus}, head_start=False)
words = result.summary.split()
print(words[1], words[3])
"""


def timed(code: str) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    return time.monotonic() - started, done.stdout.split("\n")[-2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=15)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--prefix", type=int, default=4, help="steps of the plain version's prefixes")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    examples, best = str(REPO / "examples"), {"plain": [], "tree": []}
    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for label, code in (
                ("plain", PLAIN.format(n=args.n, cpus=args.cpus, prefix=args.prefix)),
                ("tree", TREE.format(examples=examples, n=args.n, cpus=args.cpus, out=f"{scratch}/{round_}")),
            ):
                seconds, counts = timed(code)
                best[label].append(seconds)
                load = os.getloadavg()[0]  # the machine is shared: the figure means little at a high load
                print(f"round {round_ + 1} {label:5s} {seconds:6.1f} s  ({counts})  load average {load:.1f}")
    print(f"TreeJob on Ray / plain Ray tasks: {min(best['tree']) / min(best['plain']):.2f}x (best of {args.rounds})")


if __name__ == "__main__":
    main()
