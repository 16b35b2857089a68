"""One batch as one file, as a folder of part files, and as a folder of gzip parts: wall seconds.

    python benchmarks/batch_files.py --count 200000 --parts 40 --rounds 2

Generates ``--count`` 16x16 dungeons once (``batchenum generate dungeons``), writes them as one
JSONL file, as ``--parts`` plain JSONL parts and as as many ``.jsonl.gz`` parts, then runs
``batchenum run dungeons --input X --workers 2 --quiet`` on each in a fresh output folder,
alternating, ``--rounds`` times (after one untimed run that fills the numba cache).  Prints the
seconds and each layout's ratio to the one file.  Each gzip part is one shard, whatever its size.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def layouts(folder: Path, count: int, parts: int) -> dict[str, Path]:
    """{name: --input value} for the three layouts of one generated batch."""
    one = folder / "one.jsonl"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "batchenum",
            "generate",
            "dungeons",
            "--count",
            str(count),
            "--height",
            "16",
            "--width",
            "16",
            "--seed",
            "1",
            "--out",
            str(one),
        ],
        check=True,
        capture_output=True,
    )
    lines = one.read_bytes().splitlines(keepends=True)
    (folder / "plain").mkdir()
    (folder / "gzip").mkdir()
    for k in range(parts):
        data = b"".join(lines[k * len(lines) // parts : (k + 1) * len(lines) // parts])
        (folder / "plain" / f"part-{k:05d}.jsonl").write_bytes(data)
        (folder / "gzip" / f"part-{k:05d}.jsonl.gz").write_bytes(gzip.compress(data, compresslevel=6))
    return {"one file": one, f"{parts} parts": folder / "plain", f"{parts} gzip parts": folder / "gzip"}


def timed(value: Path, out: Path) -> float:
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "batchenum",
            "run",
            "dungeons",
            "--input",
            str(value),
            "--workers",
            "2",
            "--quiet",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200_000)
    parser.add_argument("--parts", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="batch-files-") as scratch:
        folder = Path(scratch)
        values = layouts(folder, args.count, args.parts)
        timed(values["one file"], folder / "out")  # fills the numba cache
        print(f"{args.count:,} 16x16 dungeons, --workers 2: wall seconds (ratio to one file)")
        print("round  " + "  ".join(f"{name:>22}" for name in values))
        for round_ in range(1, args.rounds + 1):
            seconds = {name: timed(value, folder / "out") for name, value in values.items()}
            base = seconds["one file"]
            print(f"{round_:>5}  " + "  ".join(f"{s:>14.2f} ({s / base:4.2f}x)" for s in seconds.values()))


if __name__ == "__main__":
    main()
