"""A catalogue's memory in a worker: self-avoiding walks of n steps, each leaf its own key (the
walk's moves), so n = 11, 12, 13, 14 give 120,292 to 2,374,444 distinct leaves.  A fresh process
computes and commits every shard as a worker does (``attempt.run_attempt`` into a real shard
store), one after another, and prints its peak RSS (ru_maxrss): with a budget, a shard holds at
most that many leaves, whatever n; without one (``--budget 0``), the subtrees of the cut hold
them all (``--budget 0 --split-depth 0``: one shard).  ``python benchmarks/tree_memory.py``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

WORKER = """
import collections, resource, sys
sys.path.insert(0, {examples!r})
from batchenum.pipeline.attempt import run_attempt
from batchenum.pipeline.codeversion import code_version
from batchenum.pipeline.job import PlanContext
from batchenum.pipeline.parquet_format import Provenance
from batchenum.pipeline.shard_store import ShardStore
from batchenum.pipeline.storage import Storage
from walks import Walks


class Catalogue(Walks):
    name = "walk_catalogue"

    def key(self, walk):
        return "".join("RLUD"[(b[0] - a[0] + 1) // 2 if b[0] != a[0] else 2 + (b[1] - a[1] + 1) // 2] for a, b in zip(walk, walk[1:]))


job = Catalogue(n={n}, budget={budget}, split_depth={split_depth})
store = ShardStore(Storage.at({out!r}), job, Provenance(job.name, code_version(job), job.params()))
todo, shards = collections.deque(job.plan(PlanContext())), 0
while todo:
    attempt = run_attempt(job, todo.popleft(), store, "benchmark")
    todo.extend(attempt.children)
    shards += 1
print(shards, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=100_000)
    parser.add_argument("--n", default="11,12,13,14")
    parser.add_argument("--split-depth", type=int, default=None, help="0: one shard at the root")
    args = parser.parse_args()
    distinct = {11: 120292, 12: 324932, 13: 881500, 14: 2374444, 15: 6416596}
    for n in map(int, args.n.split(",")):
        with tempfile.TemporaryDirectory() as out:
            script = Path(out) / "worker.py"  # a file: the code version hashes the job's source
            script.write_text(
                WORKER.format(
                    examples=str(REPO / "examples"), n=n, budget=args.budget, out=out, split_depth=args.split_depth
                )
            )
            done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
            shards, rss = done.stdout.split()
            rows = sum(
                __import__("pyarrow.parquet")
                .parquet.read_metadata(os.path.join(out, "walk_catalogue", "_shards", "leaves", name))
                .num_rows
                for name in os.listdir(os.path.join(out, "walk_catalogue", "_shards", "leaves"))
            )
            assert rows == distinct[n], (rows, distinct[n])
            print(
                f"n = {n}: {rows:>9,} distinct leaves in {shards:>4} shards, budget {args.budget:,}, split depth {args.split_depth}: worker peak RSS {float(rss):6.0f} MiB"
            )


if __name__ == "__main__":
    main()
