"""A search-tree run killed half way and finished on another cluster size (docs/jobs.md, "How the
tree is split"): self-avoiding walks (examples/walks.py) on a private Ray of ``--first`` CPUs,
the driver's whole process group killed (SIGKILL) once ``--kill-at`` of the shards are committed,
then the same run on ``--then`` CPUs.  Prints what was committed at the kill, what the rerun
reused and computed, the work lost (nodes of shards started but not committed, at most the shards
in flight times the budget), and checks the tables against a ``--serial`` run.
``python benchmarks/tree_resume.py --n 14 --budget 50000``.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "examples"))

from walks import Walks  # noqa: E402

import batchenum  # noqa: E402
from batchenum.pipeline.storage import TMP_MARK  # noqa: E402

RUN = """
import sys, time
sys.path.insert(0, {examples!r})
import batchenum
from walks import Walks

started = time.monotonic()
result = batchenum.run(Walks, n={n}, budget={budget}, out={out!r}, workers={workers}, head_start=False)
print(result.shards, result.reused, round(time.monotonic() - started, 1))
"""


def committed(folder: Path) -> set[str]:
    shards = folder / "_shards" / "partial"
    return (
        {name.removesuffix(".parquet") for name in os.listdir(shards) if TMP_MARK not in name}
        if shards.is_dir()
        else set()
    )


def run(args, out: str, workers: int) -> subprocess.Popen:
    code = RUN.format(examples=str(REPO / "examples"), n=args.n, budget=args.budget, out=out, workers=workers)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, start_new_session=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=14)
    parser.add_argument("--budget", type=int, default=50_000)
    parser.add_argument("--first", type=int, default=2)
    parser.add_argument("--then", type=int, default=3)
    parser.add_argument("--kill-at", type=int, default=60, help="shards committed when the first run is killed")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        out, job_folder = f"{scratch}/out", Path(scratch) / "out" / "walks"
        first = run(args, out, args.first)
        started = time.monotonic()
        while first.poll() is None and len(committed(job_folder)) < args.kill_at:
            time.sleep(0.1)
        if first.poll() is not None:
            raise SystemExit("the first run finished before the kill: raise --n or lower --kill-at")
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        at_kill = committed(job_folder)
        print(f"killed after {time.monotonic() - started:.1f} s with {len(at_kill)} shards committed")
        second = run(args, out, args.then)
        shards, reused, seconds = (second.stdout.read() if second.stdout else "").split()
        if second.wait():
            raise SystemExit("the rerun failed")
        partial = pd.read_parquet(job_folder / "partial")
        computed = partial[~partial.shard.isin(at_kill)]
        print(
            f"rerun on {args.then} CPUs: {shards} shards, {reused} reused (of {len(at_kill)} committed), "
            f"{len(computed)} computed in {seconds} s"
        )
        serial = batchenum.run(Walks, n=args.n, budget=args.budget, out=f"{scratch}/serial", serial=True)
        for name in ("counts", "partial"):
            pd.testing.assert_frame_equal(
                pd.read_parquet(job_folder / f"{name}.parquet"), pd.read_parquet(f"{serial.location}/{name}.parquet")
            )
        print(
            f"tables equal the serial run's ({serial.summary}); a kill loses at most the shards in flight, "
            f"each at most {args.budget:,} nodes"
        )


if __name__ == "__main__":
    main()
