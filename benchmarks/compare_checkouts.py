"""Tables and run times of this checkout against another (main, say), side by side.

    python benchmarks/compare_checkouts.py --baseline ../main --scratch /tmp/compare [--repeats 3]

Each workload (palago --max-n 24, --method transfer --max-n 40, a 100,000-dungeon batch, a
nonary batch, both batches generated once by the baseline) runs alternately with the baseline's
code and this checkout's (PYTHONPATH points at the checkout, whose batchenum package then imports
its own pipeline, jobs and solvers), into fresh folders.  Prints the median wall time of each side
and whether every table file is byte-identical (cmp), or equal row for row where a footer differs.
"""

from __future__ import annotations

import argparse
import filecmp
import glob
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = {
    "palago 24": ["run", "palago", "--max-n", "24"],
    "transfer 40": ["run", "palago", "--method", "transfer", "--max-n", "40"],
    "dungeons 100k": ["run", "dungeons", "--input", "{scratch}/dungeons.jsonl"],
    "nonary 20k": ["run", "nonary", "--input", "{scratch}/nonary.jsonl"],
}


def batchenum(checkout: str, args: list[str], cwd: str) -> float:
    env = {**os.environ, "PYTHONPATH": checkout}
    started = time.perf_counter()
    quiet = ["--quiet"] if args[0] == "run" else []
    subprocess.run(
        [sys.executable, "-m", "batchenum", *args, *quiet], cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL
    )
    return time.perf_counter() - started


def tables(folder: str) -> list[str]:
    return sorted(
        os.path.relpath(p, folder)
        for p in glob.glob(f"{folder}/**/*.parquet", recursive=True)
        if "/_shards/" not in p and "/_" not in os.path.relpath(p, folder)
    )


def same_rows(a: str, b: str) -> bool:
    import pyarrow.parquet as pq

    return pq.read_table(a).replace_schema_metadata(None).equals(pq.read_table(b).replace_schema_metadata(None))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="the other checkout (its top folder)")
    parser.add_argument("--scratch", required=True, help="an empty folder for inputs and outputs")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=list(WORKLOADS))
    args = parser.parse_args()
    scratch = os.path.abspath(args.scratch)
    os.makedirs(scratch, exist_ok=True)
    base = os.path.abspath(args.baseline)
    if not os.path.exists(f"{scratch}/dungeons.jsonl"):
        batchenum(
            base,
            ["generate", "dungeons", "--count", "100000", "--seed", "1", "--out", f"{scratch}/dungeons.jsonl"],
            scratch,
        )
        batchenum(
            base, ["generate", "nonary", "--count", "20000", "--seed", "1", "--out", f"{scratch}/nonary.jsonl"], scratch
        )
    for name in args.only:
        command = [part.format(scratch=scratch) for part in WORKLOADS[name]]
        seconds: dict[str, list[float]] = {"baseline": [], "this": []}
        for repeat in range(args.repeats):
            for side, checkout in (("baseline", base), ("this", HERE)):
                out = f"{scratch}/{side}"
                shutil.rmtree(out, ignore_errors=True)
                seconds[side].append(batchenum(checkout, [*command, "--out", out], scratch))
        found = tables(f"{scratch}/baseline")
        identical = [t for t in found if filecmp.cmp(f"{scratch}/baseline/{t}", f"{scratch}/this/{t}", shallow=False)]
        equal = [
            t
            for t in found
            if t not in identical
            and os.path.exists(f"{scratch}/this/{t}")
            and same_rows(f"{scratch}/baseline/{t}", f"{scratch}/this/{t}")
        ]
        base_s, this_s = statistics.median(seconds["baseline"]), statistics.median(seconds["this"])
        print(
            f"{name}: baseline {base_s:.1f} s, this {this_s:.1f} s ({100 * (this_s / base_s - 1):+.1f}%); "
            f"{len(found)} table files: {len(identical)} byte-identical, {len(equal)} equal row for row, "
            f"{len(found) - len(identical) - len(equal)} different; runs {seconds}",
            flush=True,
        )


if __name__ == "__main__":
    main()
