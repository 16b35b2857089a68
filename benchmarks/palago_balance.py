"""Palago shards: work per shard, every K-th prefix against packing by estimated work (issue 10).

    python benchmarks/palago_balance.py                       # n = 24, 32 and 64 shards; 1,000 CPUs at n = 28
    python benchmarks/palago_balance.py --n 22 --shards 8 --cpus 0

Part one measures: it searches below every prefix of the frontier at n (the whole search, 14 s at
n = 24 on one core) and sums the real nodes per shard for both plans, printing the heaviest shard
against the mean (the makespan's excess over perfect balance), and the estimate's cost.  Part two
argues issue 10's "a 1,000-CPU cluster should stay busy at n = 28" from the estimate alone (the
real search would take CPU-days): the plan sized for C CPUs, its largest shard's estimated work
against the mean and against the ideal makespan total / C, and the size of its specs and of
_plan.json.  With dynamic scheduling (a free CPU takes the next shard) the run ends at most one
largest shard after total / C, so a largest shard well below total / C keeps every CPU busy.
Figures, not assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from batchenum.jobs.palago import ESTIMATE_DROP, SPLIT_DEPTHS, PalagoJob, estimated_work, packed_prefixes  # noqa: E402
from batchenum.pipeline.job import PlanContext  # noqa: E402
from batchenum.solvers.palago import frontier, prefix_nodes  # noqa: E402


def depth_for(count: int) -> int:
    return next((d for d, prefixes in SPLIT_DEPTHS if prefixes >= 20 * count), SPLIT_DEPTHS[-1][0])


def measured(n: int, counts: list[int]) -> None:
    print(f"n = {n}: real search nodes per shard, heaviest / mean (1.00 is perfect balance)")
    for count in counts:
        depth = depth_for(count)
        cut = frontier(n, depth)
        started = time.process_time()
        real = prefix_nodes(n, cut)
        real_s = time.process_time() - started
        started = time.process_time()
        packed = packed_prefixes(n, depth, count)
        plan_s = time.process_time() - started
        every_kth = np.array([real[k::count].sum() for k in range(count)])
        by_work = np.array([real[shard].sum() for shard in packed])
        print(
            f"  {count:>4} shards, depth {depth} ({len(cut):,} prefixes): every K-th prefix "
            f"{every_kth.max() / every_kth.mean():.3f}, packed by estimated work {by_work.max() / by_work.mean():.3f}; "
            f"plan {plan_s:.2f} CPU s, real search {real_s:.1f} CPU s"
        )


def cluster(n: int, cpus: int) -> None:
    job = PalagoJob(n)
    started = time.process_time()
    plan = job.plan(PlanContext(cpus=cpus))
    plan_s = time.process_time() - started
    spec = plan[0].spec
    cut = frontier(n, spec["depth"])
    work = np.array(estimated_work(n, cut, spec["depth"]))
    shards = np.array([work[shard.spec["prefixes"]].sum() for shard in plan])
    ideal = work.sum() / cpus
    specs = [len(json.dumps(dict(shard.spec), sort_keys=True)) for shard in plan]
    plan_file = len(json.dumps({"shards": [shard.id for shard in plan]}))
    print(
        f"\nn = {n} planned for {cpus:,} CPUs: {len(plan):,} shards over {len(cut):,} prefixes (depth "
        f"{spec['depth']}), work estimated at n = {n - ESTIMATE_DROP}; plan made in {plan_s:.1f} CPU s"
    )
    print(f"  largest shard / mean shard:            {shards.max() / shards.mean():.3f}")
    print(
        f"  largest shard / ideal makespan (total / {cpus:,}): {shards.max() / ideal:.3f}"
        f"  -> {'shorter' if shards.max() < ideal else 'LONGER'} than the ideal makespan"
    )
    print(f"  largest prefix / ideal makespan:       {work.max() / ideal:.4f}")
    print(
        f"  spec size: largest {max(specs):,} bytes, all {sum(specs) / 1e6:.1f} MB; "
        f"_plan.json shard list {plan_file / 1e3:.0f} kB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=24)
    parser.add_argument("--shards", type=int, nargs="+", default=[32, 64], help="32: the plan for 2 CPUs; 64: 16 CPUs")
    parser.add_argument("--cpus", type=int, default=1000, help="part two's cluster (0: skip)")
    parser.add_argument("--cluster-n", type=int, default=28)
    args = parser.parse_args()
    measured(args.n, args.shards)
    if args.cpus:
        cluster(args.cluster_n, args.cpus)


if __name__ == "__main__":
    main()
