"""The search-tree skeleton against the search a user would write instead (docs/jobs.md, "How the
tree is split"): self-avoiding walks on the square lattice (examples/walks.py), counted

- by a plain depth-first search in one process (the same children and leaf test, a list as stack),
  importing the job's module (numba, pyarrow), and the same importing nothing ("bare");
- by ``batchenum run walks --serial`` (plan, every shard, its commit and the finish);
- by the same with the compiled hook (``CompiledWalks``: a numba kernel below depth 4);

each in a fresh process, alternating, printing wall seconds and peak RSS (ru_maxrss of the child),
and the ratios.  ``python benchmarks/tree_speed.py --n 15 --rounds 2``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PLAIN = """
import sys, time
sys.path.insert(0, {examples!r})
from walks import Walks

walks = Walks(n={n})
children, is_leaf = walks.children, walks.is_leaf
started = time.monotonic()
stack, leaves, nodes = [walks.root()], 0, 0
while stack:
    node = stack.pop()
    nodes += 1
    if is_leaf(node):
        leaves += 1
    else:
        stack.extend(children(node))
print(leaves, nodes, time.monotonic() - started)
"""

# The same search with the job's two methods copied in, importing nothing (numba, pyarrow): the
# memory of a search alone
BARE = """
import time
N = {n}

def children(walk):
    if len(walk) > N:
        return []
    x, y = walk[-1]
    return [walk + (p,) for p in ((x + 1, y), (x - 1, y), (x, y + 1), (x, y - 1)) if p not in walk]

def is_leaf(walk):
    return len(walk) == N + 1

started = time.monotonic()
stack, leaves, nodes = [((0, 0),)], 0, 0
while stack:
    node = stack.pop()
    nodes += 1
    if is_leaf(node):
        leaves += 1
    else:
        stack.extend(children(node))
print(leaves, nodes, time.monotonic() - started)
"""

TREE = """
import sys, time
sys.path.insert(0, {examples!r})
import batchenum
from {module} import {job}

started = time.monotonic()
result = batchenum.run({job}, n={n}, out={out!r}, serial=True, quiet=True{options})
words = result.summary.split()  # "walks: L leaves, N nodes"
print(words[1], words[3], time.monotonic() - started)
"""


def measure(code: str) -> tuple[int, int, float, float]:
    """(leaves, nodes, seconds, peak RSS in MiB) of ``code`` run in a fresh process."""
    process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(process.pid, 0)
    out = process.stdout.read() if process.stdout else ""
    if status:
        raise SystemExit(f"a run failed ({status}): {out}")
    leaves, nodes, seconds = out.split()[-3:]
    return int(leaves), int(nodes), float(seconds), usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--budget", type=int, default=None, help="the TreeJob's budget (default: its own)")
    args = parser.parse_args()
    examples = str(REPO / "examples")
    options = "" if args.budget is None else f", budget={args.budget}"
    results: dict[str, list[tuple[float, float]]] = {"bare": [], "plain": [], "tree": [], "compiled": []}
    counts = set()

    def tree(job: str, out: str) -> str:
        module, name = job.split(".")
        return TREE.format(examples=examples, n=args.n, module=module, job=name, out=out, options=options)

    with tempfile.TemporaryDirectory() as scratch:
        for round_ in range(args.rounds):
            for label, code in (
                ("bare", BARE.format(n=args.n)),
                ("plain", PLAIN.format(examples=examples, n=args.n)),
                ("tree", tree("walks.Walks", f"{scratch}/t{round_}")),
                ("compiled", tree("compiled_walks.CompiledWalks", f"{scratch}/c{round_}")),
            ):
                leaves, nodes, seconds, rss = measure(code)
                counts.add((leaves, nodes))
                results[label].append((seconds, rss))
                print(
                    f"round {round_ + 1} {label:9s} {seconds:7.2f} s {rss:7.0f} MiB  ({leaves} leaves, {nodes} nodes)"
                )
    if len(counts) != 1:
        raise SystemExit(f"the counts differ: {counts}")
    best = {label: (min(s for s, _ in runs), max(r for _, r in runs)) for label, runs in results.items()}
    print(f"n = {args.n}: walks {counts.pop()[0]}")
    print(
        f"serial TreeJob / plain search: time {best['tree'][0] / best['plain'][0]:.2f}x, peak RSS {best['tree'][1] / best['plain'][1]:.2f}x"
    )
    print(
        f"serial TreeJob / bare search: time {best['tree'][0] / best['bare'][0]:.2f}x, peak RSS {best['tree'][1] / best['bare'][1]:.2f}x"
    )
    print(f"pure-Python TreeJob / compiled hook: {best['tree'][0] / best['compiled'][0]:.1f}x faster with the hook")


if __name__ == "__main__":
    main()
