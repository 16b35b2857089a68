"""Nonary benchmark: per-graph solve times on generated batches, the hardest generated graphs, and
the serial CLI on a file of hard graphs.

    python benchmarks/nonary.py            # about a minute
    python benchmarks/nonary.py --quick    # a few seconds

Graphs come from ``solvers.nonary.generate`` with fixed seeds, so runs are comparable.  The first
solve of a process loads (or compiles) the numba kernel; it is done before any timing.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time

from batchenum.solvers.nonary import generate, solve, verify_plan

# name: generator parameters (rooms, doors, cycles, parallel, nines)
BATCHES = {
    "dag-6x10": dict(rooms=6, doors=10, cycles=0.0, parallel=0.2, nines=0.25),
    "cycles-4x12": dict(rooms=4, doors=12, cycles=0.4, parallel=0.3, nines=0.2),
    "dense-3x16": dict(rooms=3, doors=16, cycles=0.5, parallel=0.5, nines=0.15),
    "wide-8x30": dict(rooms=8, doors=30, cycles=0.3, parallel=0.2, nines=0.2),
}
# Hard ones: few rooms, many doors, cycles back to room 0, parallel doors, few doors 9.
HARD_POOL = dict(rooms=4, doors=20, cycles=0.6, parallel=0.4, nines=0.12)


def timed_solves(graphs: list) -> list[tuple[float, list, int]]:
    """(seconds, graph, escaped) for each graph, each plan checked by replaying it.  The garbage
    collector is held off while timing, so that its pauses are not charged to a graph."""
    out = []
    gc.collect()
    gc.disable()
    try:
        for doors in graphs:
            start = time.perf_counter()
            escaped, plan = solve(doors)
            seconds = time.perf_counter() - start
            if verify_plan(doors, plan) != escaped:
                raise AssertionError(f"plan does not replay to {escaped} on {doors}")
            out.append((seconds, doors, escaped))
    finally:
        gc.enable()
    return out


def distribution(seconds: list[float]) -> str:
    """median, p99 and max of ``seconds``, in milliseconds."""
    ordered = sorted(seconds)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return f"median {pick(0.5) * 1e3:8.3f} ms  p99 {pick(0.99) * 1e3:8.2f} ms  max {ordered[-1] * 1e3:8.1f} ms"


def cli_seconds(graphs: list, workdir: str) -> float:
    """Wall time of ``batchenum run nonary --serial`` on ``graphs``, after one warm-up run."""
    path = os.path.join(workdir, "hard.jsonl")
    with open(path, "w", encoding="ascii") as handle:
        handle.writelines(json.dumps({"id": f"h{k}", "doors": g}) + "\n" for k, g in enumerate(graphs))
    command = [sys.executable, "-m", "batchenum", "run", "nonary", "--input", path, "--serial", "--quiet"]
    for attempt in range(2):
        out = os.path.join(workdir, f"out{attempt}")
        start = time.perf_counter()
        done = subprocess.run([*command, "--out", out], capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"the CLI failed: {done.stderr}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300, help="graphs per generated batch (default 300)")
    parser.add_argument("--pool", type=int, default=3000, help="graphs searched for the hardest (default 3000)")
    parser.add_argument("--hardest", type=int, default=8, help="how many hardest graphs to report (default 8)")
    parser.add_argument("--quick", action="store_true", help="small batches and pool")
    args = parser.parse_args(argv)
    if args.quick:
        args.count, args.pool = 50, 300
    solve([[9, 0, -1]])  # load the kernel before timing

    for name, params in BATCHES.items():
        results = timed_solves(generate(args.count, seed=1, **params))
        answers = sorted({e for _, _, e in results})
        print(f"{name:12s} {len(results):5d} graphs  {distribution([s for s, _, _ in results])}  answers {answers}")

    pool = timed_solves(generate(args.pool, seed=2, **HARD_POOL))
    print(f"{'hard-pool':12s} {len(pool):5d} graphs  {distribution([s for s, _, _ in pool])}")
    hardest = sorted(pool, key=lambda r: -r[0])[: args.hardest]
    graphs = [g for _, g, _ in hardest]
    again = timed_solves(graphs)  # timed again on their own, away from the pool's noise
    print(
        f"hardest {len(graphs)}: "
        + ", ".join(f"{s * 1e3:.0f} ms (escaped {e})" for s, _, e in again)
        + f"; total {sum(s for s, _, _ in again):.2f} s"
    )

    with tempfile.TemporaryDirectory() as workdir:
        print(
            f"serial CLI on the hardest {len(graphs)} (start-up included, after a warm-up run): "
            f"{cli_seconds(graphs, workdir):.2f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
