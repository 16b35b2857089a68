"""A DataFrame input rerun with a few rows changed: shards reused, and seconds, against a fresh run.

    python benchmarks/frame_rerun.py --count 100000 --changed 1 --rounds 2

Generates ``--count`` 32x32 dungeons once (``batchenum generate dungeons``) into a DataFrame, runs
``batchenum.run("dungeons", input=frame, serial=True)`` into a fresh folder (after one untimed run
that fills the numba cache), then, with ``--changed`` rows given other grids, ``overwrite=True`` into
the same folder; ``--rounds`` times, alternating.  Prints each run's seconds, its shards and how many
were reused, and the rerun's ratio to the fresh run.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

import batchenum


def generated(folder: Path, count: int) -> pd.DataFrame:
    path = folder / "dungeons.jsonl"
    command = [sys.executable, "-m", "batchenum", "generate", "dungeons", "--count", str(count), "--seed", "1"]
    subprocess.run([*command, "--out", str(path)], check=True, capture_output=True)
    return pd.read_json(path, lines=True)[["id", "grid"]]


def with_changes(frame: pd.DataFrame, changed: int) -> pd.DataFrame:
    """``changed`` rows spread over the frame, each given a one-row grid of its own."""
    edited = frame.copy()
    for k in range(changed):
        edited.at[(k * 7919) % len(frame), "grid"] = ["@" + "." * (k % 20) + "$"]
    return edited


def timed(frame: pd.DataFrame, out: Path, overwrite: bool) -> tuple[float, int, int]:
    started = time.perf_counter()
    result = batchenum.run("dungeons", input=frame, out=str(out), serial=True, overwrite=overwrite)
    return time.perf_counter() - started, result.shards, result.reused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--changed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="frame-rerun-") as scratch:
        folder = Path(scratch)
        frame = generated(folder, args.count)
        edited = with_changes(frame, args.changed)
        timed(frame, folder / "warm", False)  # fills the numba cache
        for round_ in range(1, args.rounds + 1):
            out = folder / f"out{round_}"
            shutil.rmtree(out, ignore_errors=True)
            fresh = timed(frame, out, False)
            rerun = timed(edited, out, True)
            print(
                f"round {round_}: fresh {fresh[0]:.2f} s ({fresh[1]} shards); "
                f"{args.changed} rows changed: {rerun[0]:.2f} s, {rerun[2]} of {rerun[1]} shards reused, "
                f"{rerun[0] / fresh[0]:.2f}x"
            )


if __name__ == "__main__":
    main()
