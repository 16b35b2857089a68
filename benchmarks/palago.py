"""Palago search benchmark: per n, the counts, search nodes, seconds and nodes per second, for the
kernel in one process and for the whole Ray job (CLI, start-up included).

    python benchmarks/palago.py                 # n = 16..22, Ray job at 22 with 2 workers
    python benchmarks/palago.py --max-n 24 --min-n 20

Figures, not assertions: on a shared machine compare ratios measured in one run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time

import pandas as pd

from batchenum.solvers.palago import count_creatures


def kernel_rows(min_n: int, max_n: int) -> list[dict]:
    count_creatures(8)  # compile (or load the numba cache) outside the timings
    rows = []
    for n in range(min_n, max_n + 1):
        started = time.perf_counter()
        counts, _ = count_creatures(n)
        seconds = time.perf_counter() - started
        nodes = int(counts.nodes.sum())
        fixed_total = int(counts.fixed.sum())
        rows.append(
            {
                "n": n,
                "free": int(counts.free[n]),
                "fixed": int(counts.fixed[n]),
                "nodes": nodes,
                "seconds": seconds,
                "Mnodes/s": nodes / seconds / 1e6,
                "nodes/fixed": nodes / max(fixed_total, 1),
            }
        )
    return rows


def ray_job(max_n: int, workers: int) -> dict:
    with tempfile.TemporaryDirectory() as out:
        command = [
            sys.executable,
            "-m",
            "batchenum",
            "run",
            "palago",
            "--max-n",
            str(max_n),
            "--workers",
            str(workers),
            "--out",
            out,
            "--quiet",
        ]
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        seconds = time.perf_counter() - started
        counts = pd.read_parquet(f"{out}/palago/creature_counts.parquet")
    nodes = int(counts.nodes.sum())
    return {
        "n": max_n,
        "workers": workers,
        "free": int(counts.free.iloc[-1]),
        "nodes": nodes,
        "wall seconds": seconds,
        "Mnodes/s": nodes / seconds / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--min-n", type=int, default=16)
    parser.add_argument("--max-n", type=int, default=22)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--skip-ray", action="store_true", help="only the in-process kernel")
    args = parser.parse_args()

    rows = kernel_rows(args.min_n, args.max_n)
    print("kernel, one process (each n is a separate search to n):")
    print(pd.DataFrame(rows).to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    if args.skip_ray:
        return
    job = ray_job(args.max_n, args.workers)
    print(
        f"\nRay job, `batchenum run palago --max-n {args.max_n} --workers {args.workers}` (wall clock, start-up included):"
    )
    print(pd.DataFrame([job]).to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    single = rows[-1]["seconds"]
    print(f"\nspeed-up of the Ray job over one process at n = {args.max_n}: {single / job['wall seconds']:.2f}x")


if __name__ == "__main__":
    main()
