"""The search-tree skeleton on a private Ray against the Ray tasks a user would write instead:
self-avoiding walks (examples/walks.py), n steps, on ``--cpus`` CPUs, alternating

- ``batchenum.run(Walks, n=N, workers=CPUS, head_start=False)``: every shard a Ray task, each
  committed as Parquet, the tables merged;
- a fresh ``ray.init(num_cpus=CPUS)`` and one task per walk prefix of ``--prefix`` steps, each
  counting its subtree with a plain depth-first search (the job's two methods as functions of
  the script, which Ray ships by value), the counts summed.

Each in a fresh process; wall seconds from the start of the process, Ray's start included.
With ``--cluster``, one Ray cluster (``ray start --head`` with ``--cpus`` CPUs) is started first
and both sides connect to it through ``RAY_ADDRESS``, as a user on a running cluster would: the
figure is then the skeleton's cost without the two ways of starting Ray.
``python benchmarks/tree_ray.py --n 15 --rounds 2 [--cluster]``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cluster_parallelism import start_cluster, stop_cluster

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
{init}
counts = ray.get([count.remote(prefix) for prefix in level])
print(sum(c[0] for c in counts), above + sum(c[1] for c in counts))
"""

TREE = """
import sys
sys.path.insert(0, {examples!r})
import batchenum
from walks import Walks

result = batchenum.run(Walks, n={n}, out={out!r}, {workers}head_start=False)
words = result.summary.split()
print(words[1], words[3])
"""


PRIVATE_INIT = 'ray.init(num_cpus={cpus}, include_dashboard=False, logging_level="ERROR")'


def timed(code: str, env: dict[str, str] | None) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if done.returncode:
        raise SystemExit(done.stderr[-2000:])
    return time.monotonic() - started, done.stdout.split("\n")[-2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=15)
    parser.add_argument("--cpus", type=int, default=2)
    parser.add_argument("--prefix", type=int, default=4, help="steps of the plain version's prefixes")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--cluster", action="store_true", help="both sides on one running Ray cluster")
    args = parser.parse_args()
    env = None
    if args.cluster:
        env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
        env["RAY_ADDRESS"] = start_cluster(args.cpus, f"/tmp/tr{os.getpid()}", env)
    init = "ray.init(logging_level='ERROR')" if args.cluster else PRIVATE_INIT.format(cpus=args.cpus)
    workers = "" if args.cluster else f"workers={args.cpus}, "
    examples, best = str(REPO / "examples"), {"plain": [], "tree": []}
    try:
        with tempfile.TemporaryDirectory() as scratch:
            for round_ in range(args.rounds):
                for label, code in (
                    ("plain", PLAIN.format(n=args.n, init=init, prefix=args.prefix)),
                    ("tree", TREE.format(examples=examples, n=args.n, workers=workers, out=f"{scratch}/{round_}")),
                ):
                    seconds, counts = timed(code, env)
                    best[label].append(seconds)
                    load = os.getloadavg()[0]  # the machine is shared: the figure means little at a high load
                    print(f"round {round_ + 1} {label:5s} {seconds:6.1f} s  ({counts})  load average {load:.1f}")
    finally:
        if args.cluster:
            stop_cluster(f"/tmp/tr{os.getpid()}")
    where = "one running cluster" if args.cluster else "a Ray each"
    ratio = min(best["tree"]) / min(best["plain"])
    pairs = sorted(tree / plain for plain, tree in zip(best["plain"], best["tree"]))
    print(f"TreeJob on Ray / plain Ray tasks, {where}: {ratio:.2f}x (best of {args.rounds})")
    # each round's own ratio: on a shared machine a slow moment moves one pair, not the best of each
    print("each round: " + " ".join(f"{r:.2f}x" for r in pairs) + f" (median {pairs[len(pairs) // 2]:.2f}x)")


if __name__ == "__main__":
    main()
