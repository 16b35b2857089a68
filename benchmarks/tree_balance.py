"""How evenly the search-tree skeleton splits a skewed tree (docs/jobs.md, "How the tree is split").

Two trees: a deliberately skewed one (one child of the root holds 90% of the nodes, and inside it
one child 90% again), and the self-avoiding walks of examples/walks.py.  Each is run with
``--serial`` and a budget; from the shards' own records (the nodes in ``partial``, the seconds in
each shard file's stats, CPU and wall) the largest shard's share of the total is printed: the bound on the
speedup, whatever the cluster.  Beside it, the share the cut before issue 46 gave (the first depth
with 16 subtrees per CPU, dealt round-robin into 16 x CPUs shards), from the same subtrees' node
counts.  ``python benchmarks/tree_balance.py --walks 14``.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))

from walks import Walks  # noqa: E402

import batchenum  # noqa: E402
from batchenum.pipeline.job import Param  # noqa: E402
from batchenum.pipeline.skeletons import TreeJob  # noqa: E402


class Skewed(TreeJob):
    """A node is (weight, depth): on the two top levels, child 0 takes 90% of the weight and nine
    others share the rest; below, four children share it evenly; weight < 4 is a leaf.  Each
    node's children cost about what a walk's do (a few microseconds), so that seconds mean
    something."""

    name = "skewed"
    version = "1"
    weight = Param(int, default=3_000_000, low=1, help="about 3/4 of the nodes")

    def root(self):
        return (self.weight, 0)

    def children(self, node):
        weight, depth = node
        sum(range(40))  # a node's own work
        if weight < 4:
            return []
        if depth < 2:
            return [(weight * 9 // 10, depth + 1)] + [(weight // 90, depth + 1)] * 9
        return [(weight // 4, depth + 1)] * 4

    def is_leaf(self, node):
        return node[0] < 4


def subtree_nodes(job: TreeJob, node) -> int:
    stack, nodes = [node], 0
    while stack:
        node = stack.pop()
        nodes += 1
        if not job.is_leaf(node):
            stack.extend(job.children(node))
    return nodes


def former_cut_share(job: TreeJob, cpus: int) -> float:
    """The largest shard's share of the nodes under the cut before issue 46."""
    wanted, depth = 16 * cpus, 0
    level = [job.root()]
    above = 0
    while depth < 12 and len(level) < wanted:
        above += len(level)
        level = [child for node in level if not job.is_leaf(node) for child in job.children(node)]
        depth += 1
    count = max(1, min(len(level), wanted))
    shards = [0] * count
    for index, node in enumerate(level):
        shards[index % count] += subtree_nodes(job, node)
    shards[0] += above
    return max(shards) / sum(shards)


def shares(folder: Path) -> tuple[int, float, float, float, int]:
    """(shards, largest node share, largest CPU share, largest wall share, total nodes) from a job
    folder: nodes from ``partial``, CPU and wall seconds from each shard file's stats."""
    partial = pd.read_parquet(folder / "partial")
    stats = [
        json.loads(pq.read_schema(path).metadata[b"batchenum.stats"])
        for path in glob.glob(str(folder / "_shards" / "partial" / "*.parquet"))
    ]
    cpu, wall = [s["cpu_ms"] for s in stats], [s["seconds"] for s in stats]
    total = int(partial.nodes.sum())
    return len(partial), partial.nodes.max() / total, max(cpu) / sum(cpu), max(wall) / sum(wall), total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--walks", type=int, default=14, help="steps of the self-avoiding walks")
    parser.add_argument("--weight", type=int, default=3_000_000)
    parser.add_argument("--per-budget", type=int, default=200, help="budget = nodes / this")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs the former cut was sized for")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        for job, params in ((Skewed, {"weight": args.weight}), (Walks, {"n": args.walks})):
            probe = job(**params, budget=0)
            total = subtree_nodes(probe, probe.root())
            budget = max(1, total // args.per_budget)
            result = batchenum.run(job, **params, budget=budget, out=f"{scratch}/{job.name}", serial=True)
            count, node_share, cpu_share, wall_share, nodes = shares(Path(result.location))
            assert nodes == total, (nodes, total)
            print(
                f"{job.name} {params}: {total} nodes, budget {budget}: {count} shards, largest "
                f"{node_share:.4f} of the nodes, {cpu_share:.4f} of the CPU, {wall_share:.4f} of the wall "
                "seconds (1/64 = 0.0156); "
                f"the former cut ({args.cpus} CPUs): {former_cut_share(probe, args.cpus):.4f}"
            )
            print(f"  {result.summary}; load average {os.getloadavg()[0]:.1f} (seconds are noisy on a busy machine)")


if __name__ == "__main__":
    main()
