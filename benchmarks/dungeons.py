"""Dungeons per second: the kernel alone, one shard in-process, and the whole CLI job.

    python benchmarks/dungeons.py                         # ~1 minute: 20k 32x32 and 5k 60x60
    python benchmarks/dungeons.py --count 100000 --sizes 32 # the judged setting (100k 32x32)
    python benchmarks/dungeons.py --no-cli                  # in-process numbers only
    python benchmarks/dungeons.py --count 1000000 --sizes 16 --steady 3   # issue 12's batch, per record too

For every size it prints: bulk validation from Python lists (the path for doubtful slices) and
from Arrow buffers (the path for clean ones), the kernel (best of three calls over the whole batch,
compile excluded), one shard's ``run_shard`` (JSONL read + parse + dedupe + kernel), and the wall
time of ``batchenum run dungeons --workers K`` in a subprocess (Ray start-up included; at most
25,000 records per shard and at least one shard per worker).  The kernel also runs on K threads,
and the last line is the CLI's throughput over that kernel-only throughput of the same K cores.
``--steady`` also times the CLI on twice the records: the difference is what a record costs, the
fixed start-up excluded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa

from batchenum.jobs.dungeons import RECORDS_PER_SHARD, DungeonJob
from batchenum.pipeline.arrow import string_list_buffers
from batchenum.pipeline.job import PlanContext
from batchenum.solvers.dungeon import generate, parse_flat, parse_many, solve_batch


def best_of(repeats: int, action) -> float:
    """The fastest of ``repeats`` timings of ``action()``, in seconds."""
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        timings.append(time.perf_counter() - started)
    return min(timings)


def write_jsonl(grids: list[list[str]], path: str) -> None:
    """The batch as JSONL with ids d0, d1, ..."""
    with open(path, "w", encoding="ascii") as handle:
        handle.writelines(
            json.dumps({"id": f"d{k}", "grid": g}, separators=(",", ":")) + "\n" for k, g in enumerate(grids)
        )


def solve_in_threads(batch, threads: int) -> None:
    """The kernel alone on ``threads`` threads (it releases the GIL), each on a contiguous part:
    what the same cores could do without reading, parsing or writing anything."""
    bounds = [len(batch) * k // threads for k in range(threads + 1)]
    parts = [batch.take(range(bounds[k], bounds[k + 1])) for k in range(threads)]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(solve_batch, parts))


def report(label: str, count: int, seconds: float) -> None:
    print(f"  {label:<34} {seconds:8.3f} s  {count / seconds:>12,.0f} dungeons/s", flush=True)


def bench_size(size: int, count: int, workers: int, cli: bool, steady: int, folder: str) -> None:
    """All measurements for ``count`` dungeons of ``size`` x ``size``."""
    print(f"{count:,} dungeons of {size}x{size} (walls 0.25, gold 0.05, monsters 0.03)", flush=True)
    grids = generate(count, size, size, seed=size)
    batch = parse_many(grids)
    solve_batch(batch.take(range(min(10, len(batch)))))  # compile or load the cached kernel
    report("parse_many (from Python lists)", count, best_of(3, lambda: parse_many(grids)))
    buffers = string_list_buffers(pa.array(grids, type=pa.list_(pa.string())))
    report("parse_flat (from Arrow buffers)", count, best_of(3, lambda: parse_flat(*buffers)))
    report("kernel (solve_batch)", count, best_of(3, lambda: solve_batch(batch)))
    kernel_k = best_of(3, lambda: solve_in_threads(batch, workers))
    report(f"kernel on {workers} threads", count, kernel_k)
    path = os.path.join(folder, f"dungeons-{size}.jsonl")
    write_jsonl(grids, path)
    job = DungeonJob(path, records_per_shard=count)
    shard = job.plan(PlanContext())[0]
    report("one shard: read+parse+dedupe+solve", count, best_of(2, lambda: job.run_shard(shard)))
    if cli:
        per_shard = min(RECORDS_PER_SHARD, -(-count // workers))  # at least one shard per worker
        seconds, output = cli_run(path, workers, per_shard, os.path.join(folder, f"out-{size}"))
        report(f"CLI run, {workers} workers", count, seconds)
        print(f"  CLI throughput / kernel-only throughput on {workers} threads: {kernel_k / seconds:.2f}")
        print("   ", output.replace("\n", "\n    "))
        if steady:
            double = os.path.join(folder, f"dungeons-{size}-twice.jsonl")
            write_jsonl(grids + generate(count, size, size, seed=size + 1), double)
            extra = []
            for _ in range(steady):  # alternating, so that both sizes see the same load
                extra.append(
                    cli_run(double, workers, per_shard, os.path.join(folder, f"out-{size}"))[0]
                    - cli_run(path, workers, per_shard, os.path.join(folder, f"out-{size}"))[0]
                )
            print(
                f"  the second {count:,} of {2 * count:,} records took "
                + ", ".join(f"{e:.2f}" for e in extra)
                + " s more: per record, "
                + ", ".join(f"{kernel_k / e:.2f}" for e in extra)
                + f" of the kernel-only throughput on {workers} threads"
            )


def cli_run(path: str, workers: int, per_shard: int, out: str) -> tuple[float, str]:
    """Wall seconds and output of ``batchenum run dungeons`` on ``path`` in a fresh process, into an
    emptied ``out`` (so that no shard of an earlier run is reused)."""
    shutil.rmtree(out, ignore_errors=True)
    command = [
        sys.executable,
        "-m",
        "batchenum",
        "run",
        "dungeons",
        "--input",
        path,
        "--workers",
        str(workers),
        "--records-per-shard",
        str(per_shard),
        "--out",
        out,
        "--quiet",
    ]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"CLI failed ({done.returncode}): {done.stderr}")
    return seconds, done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, help="dungeons per size (default 20,000 for 32x32, 5,000 for 60x60)")
    parser.add_argument("--sizes", default="32,60", help="comma-separated square sizes (default 32,60)")
    parser.add_argument("--workers", type=int, default=2, help="Ray workers for the CLI run (default 2)")
    parser.add_argument("--no-cli", action="store_true", help="skip the CLI subprocess runs")
    parser.add_argument(
        "--steady",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="also run the CLI on twice the records, alternating ROUNDS times, and print what "
        "the second half costs against the kernel alone (the per-record throughput)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-dungeons-") as folder:
        for size in (int(s) for s in args.sizes.split(",")):
            count = args.count or (20_000 if size <= 32 else 5_000)
            bench_size(size, count, args.workers, not args.no_cli, args.steady, folder)


if __name__ == "__main__":
    main()
