"""Palago catalogue cost against count-only cost, per n.

In one process on one core, over the prefixes of a small run (the tree cut at depth 10, the first of
jobs.palago.SPLIT_DEPTHS): the search alone, the search collecting the catalogue, and the compiled
text encoding (``catalogue_text``: key, tiles, sum), with the ratio of catalogue to count.  Then the whole job
through the CLI, ``batchenum run palago --max-n N`` with and without ``--catalogue-max-n N``
(wall clock: Ray start-up, merge and Parquet included).  ``--python-max-n M`` also times the former
pure-Python text path (key_of, json.dumps, encode) on the catalogue up to M, per creature.

    python benchmarks/palago_catalogue.py                  # n = 18, 20, 22; jobs with 2 workers
    python benchmarks/palago_catalogue.py --n 18 --python-max-n 16 --skip-jobs

Figures, not assertions: on a shared machine compare ratios measured in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from batchenum.jobs.palago import SPLIT_DEPTHS  # noqa: E402
from batchenum.solvers.palago import count_creatures, decode_codes, frontier, key_of  # noqa: E402
from batchenum.solvers.palago.catalogue import catalogue_text  # noqa: E402
from batchenum.solvers.palago.sums import encode  # noqa: E402


def cpu_seconds(function):
    started = time.process_time()
    result = function()
    return time.process_time() - started, result


def in_process(n: int) -> dict:
    prefixes = frontier(n, SPLIT_DEPTHS[0][0])  # as the shards of a small run search them, all here
    count_s, _ = cpu_seconds(lambda: count_creatures(n, prefixes))
    search_s, (_, catalogue) = cpu_seconds(lambda: count_creatures(n, prefixes, n))
    text_s, text = cpu_seconds(lambda: catalogue_text(catalogue))
    return {
        "n": n,
        "creatures": len(catalogue),
        "count s": count_s,
        "search+cat s": search_s,
        "text s": text_s,
        "text us/creature": 1e6 * text_s / max(len(catalogue), 1),
        "cat/count": (search_s + text_s) / count_s,
        "text MB": (len(text.key_data) + len(text.tiles_data) + len(text.sum_data)) / 1e6,
    }


def python_text(max_n: int) -> dict:
    _, catalogue = count_creatures(max_n, catalogue_max_n=max_n)

    def run():
        for k in range(len(catalogue)):
            tiles = decode_codes(catalogue.tile_codes(k))
            key_of(tiles), json.dumps([list(t) for t in tiles]), encode(tiles)

    python_s, _ = cpu_seconds(run)
    compiled_s, _ = cpu_seconds(lambda: catalogue_text(catalogue))
    return {
        "n <=": max_n,
        "creatures": len(catalogue),
        "python us/creature": 1e6 * python_s / len(catalogue),
        "compiled us/creature": 1e6 * compiled_s / len(catalogue),
        "python/compiled": python_s / compiled_s,
    }


def job(n: int, catalogue: bool, workers: int) -> tuple[float, float]:
    """Wall seconds of the whole run, and of the part before merging (from the progress lines)."""
    with tempfile.TemporaryDirectory() as out:
        command = [
            sys.executable,
            "-m",
            "batchenum",
            "run",
            "palago",
            "--max-n",
            str(n),
            "--workers",
            str(workers),
            "--out",
            out,
        ] + (["--catalogue-max-n", str(n)] if catalogue else [])
        started = time.perf_counter()
        result = subprocess.run(command, check=True, capture_output=True, text=True)
        seconds = time.perf_counter() - started
    found = re.search(r"merging shard outputs \[(?:([0-9]+)m)?([0-9.]+)s\]", result.stderr)  # [12.3s], [1m05s]
    return seconds, (60 * int(found.group(1) or 0) + float(found.group(2))) if found else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[18, 20, 22])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--python-max-n", type=int, default=0, help="also time the pure-Python text up to this n")
    parser.add_argument("--skip-jobs", action="store_true", help="only the in-process figures")
    args = parser.parse_args()

    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})  # one core for the in-process part
    catalogue_text(count_creatures(8, catalogue_max_n=8)[1])  # compile outside the timings
    print("in process, one core, CPU seconds:")
    print(
        f"{'n':>3} {'creatures':>10} {'count s':>8} {'search+cat s':>13} {'text s':>7} "
        f"{'text us/creature':>17} {'cat/count':>9} {'text MB':>8}"
    )
    for n in args.n:
        row = in_process(n)
        print(
            f"{row['n']:>3} {row['creatures']:>10,} {row['count s']:>8.2f} {row['search+cat s']:>13.2f} "
            f"{row['text s']:>7.2f} {row['text us/creature']:>17.2f} {row['cat/count']:>8.2f}x "
            f"{row['text MB']:>8.1f}"
        )
    if args.python_max_n:
        row = python_text(args.python_max_n)
        print(
            f"\ntext for the {row['creatures']:,} creatures up to n = {row['n <=']}: pure Python "
            f"{row['python us/creature']:.1f} us/creature, compiled {row['compiled us/creature']:.2f} us/creature "
            f"({row['python/compiled']:.0f}x)"
        )
    if args.skip_jobs:
        return
    os.sched_setaffinity(0, cores)
    print(f"\nwhole job through the CLI, {args.workers} workers, wall seconds:")
    print("(shards: start-up and shards, up to the merge; merge: merging and writing the final tables)")
    print(
        f"{'n':>3} {'count-only s':>13} {'catalogue s':>12} {'cat/count':>9} {'count shards':>13} "
        f"{'cat shards':>11} {'count merge':>12} {'cat merge':>10}"
    )
    for n in args.n:
        count_s, count_shards = job(n, False, args.workers)
        catalogue_s, catalogue_shards = job(n, True, args.workers)
        print(
            f"{n:>3} {count_s:>13.1f} {catalogue_s:>12.1f} {catalogue_s / count_s:>8.2f}x {count_shards:>13.1f} "
            f"{catalogue_shards:>11.1f} {count_s - count_shards:>12.1f} {catalogue_s - catalogue_shards:>10.1f}"
        )


if __name__ == "__main__":
    main()
