"""Hostile input: peak memory and time of runs given crafted batches (issue 35).

    python benchmarks/hostile_input.py [--only bomb,tiny,loop,maximal,palago,sigterm] [--limit-gb 8]

Each case runs ``batchenum`` in a child process (``--serial`` but for ``sigterm``, so that every
byte is read in that one process) under an address-space limit of ``--limit-gb`` and a time limit, and prints its exit
status, wall seconds, peak resident memory (``os.wait4``) and its last line of standard error:

- ``bomb``:    a gzip of 256 MiB of newlines (about 260 KB compressed);
- ``tiny``:    a gzip of 400 MB of tiny records (about 1 MB compressed);
- ``loop``:    a folder holding one JSONL file and two symlinks ``self -> .``, ``again -> .``;
- ``maximal``: 400 dungeons of 1,000,000 cells (about 401 MB): the shards the plan cuts, and the
               peak memory of reading the largest one;
- ``palago``:  ``run palago --max-n 40``: seconds until it answers;
- ``sigterm``: seconds from a SIGTERM sent during planning (``run palago --max-n 40 --force`` on a
               private local Ray, ten seconds in) to the process's exit.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GIB = 1 << 30


def run(argv: list[str], limit_gb: float, timeout: float, term_after: float | None = None) -> dict:
    """Run ``python -m batchenum ARGV`` under the limits: {status, seconds, peak_mb, last}; with
    ``term_after``, SIGTERM it that many seconds in and time from the signal to its exit."""
    limit = int(limit_gb * GIB)

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        os.setsid()  # its own group: a timeout ends it and anything it started, nothing else

    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "batchenum", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=limited,
    )
    signalled = None
    if term_after is not None:
        time.sleep(term_after)
        signalled = time.perf_counter()
        child.send_signal(signal.SIGTERM)
    try:
        _, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        _, stderr = child.communicate()
    ended = time.perf_counter()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # max over the children so far: one per case, below
    lines = [line for line in stderr.decode(errors="replace").splitlines() if line.strip()]
    return {
        "status": child.returncode,
        "seconds": ended - (signalled or started),
        "peak_mb": usage.ru_maxrss / 1024,
        "last": lines[-1][:160] if lines else "",
    }


def in_child(case: str, args: argparse.Namespace) -> None:
    """Run one case in a fresh process, so that RUSAGE_CHILDREN's peak is that case's alone."""
    subprocess.run([sys.executable, __file__, "--case", case, "--limit-gb", str(args.limit_gb)], check=False)


def bomb(folder: Path) -> list[str]:
    path = folder / "bomb.jsonl.gz"
    with gzip.open(path, "wb", compresslevel=9) as handle:
        block = b"\n" * (16 << 20)
        for _ in range(16):
            handle.write(block)
    print(f"  {path.stat().st_size:,} bytes of gzip, 268,435,456 newlines")
    return ["run", "dungeons", "--input", str(path)]


def tiny(folder: Path) -> list[str]:
    path = folder / "tiny.jsonl.gz"
    record = b'{"id":"t","grid":["."]}\n'
    with gzip.open(path, "wb", compresslevel=9) as handle:
        block = record * ((16 << 20) // len(record))
        for _ in range(400 * 10**6 // len(block)):
            handle.write(block)
    print(f"  {path.stat().st_size:,} bytes of gzip, about 400 MB of {len(record)}-byte records")
    return ["run", "dungeons", "--input", str(path)]


def loop(folder: Path) -> list[str]:
    batch = folder / "batch"
    batch.mkdir()
    (batch / "a.jsonl").write_text("".join(json.dumps({"id": f"r{k}", "grid": ["@.$"]}) + "\n" for k in range(497)))
    (batch / "self").symlink_to(".")
    (batch / "again").symlink_to(".")  # two loops: 2^k paths at depth k, where one loop stops at ELOOP
    print("  497 records, self -> . and again -> .")
    return ["run", "dungeons", "--input", str(batch)]


def maximal(folder: Path) -> list[str]:
    path = folder / "maximal.jsonl"
    grid = ["." * 1000] * 1000
    grid[0] = "@" + grid[0][1:]
    with open(path, "w") as handle:
        for k in range(400):
            handle.write(json.dumps({"id": f"m{k}", "grid": grid}) + "\n")
    from batchenum.pipeline.inputs.plan import SliceSize, plan_slices

    specs = plan_slices(str(path), "grid", SliceSize(25_000, 2))
    sizes = [spec["to"] - spec["from"] for spec in specs]
    print(f"  {path.stat().st_size:,} bytes: {len(specs)} shards, the largest {max(sizes):,} bytes")
    largest = specs[sizes.index(max(sizes))]
    return [
        "-c",
        "import json, sys, pyarrow as pa; from batchenum.pipeline.inputs import read_records; "
        f"read_records(json.loads({json.dumps(json.dumps(largest))}), 'grid', pa.list_(pa.string()))",
    ]


CASES = {"bomb": bomb, "tiny": tiny, "loop": loop, "maximal": maximal}


def one_case(case: str, limit_gb: float) -> None:
    with tempfile.TemporaryDirectory(prefix="hostile-") as scratch:
        folder = Path(scratch)
        out = str(folder / "out")
        if case in CASES:
            argv = CASES[case](folder)
            if argv[0] == "-c":  # a plain Python snippet, not the CLI
                result = run_python(argv, limit_gb, 300)
            else:
                result = run([*argv, "--out", out, "--serial", "--quiet"], limit_gb, 300)
        elif case == "palago":
            result = run(["run", "palago", "--max-n", "40", "--out", out, "--serial", "--quiet"], limit_gb, 60)
        else:
            force = ["--force"] if _knows_force() else []  # the code before issue 35 had no --force
            result = run(
                ["run", "palago", "--max-n", "40", *force, "--out", out, "--quiet"], limit_gb, 60, term_after=10.0
            )
        print(
            f"  {case}: exit {result['status']}, {result['seconds']:.1f} s, peak {result['peak_mb']:,.0f} MB"
            f"\n    {result['last']}"
        )


def _knows_force() -> bool:
    helped = subprocess.run(
        [sys.executable, "-m", "batchenum", "run", "palago", "--help"], capture_output=True, text=True
    )
    return "--force" in helped.stdout


def run_python(argv: list[str], limit_gb: float, timeout: float) -> dict:
    """Like ``run``, for ``python -c SNIPPET``."""
    limit = int(limit_gb * GIB)
    started = time.perf_counter()
    child = subprocess.run(
        [sys.executable, *argv],
        capture_output=True,
        timeout=timeout,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = [line for line in child.stderr.decode(errors="replace").splitlines() if line.strip()]
    return {
        "status": child.returncode,
        "seconds": time.perf_counter() - started,
        "peak_mb": usage.ru_maxrss / 1024,
        "last": lines[-1][:160] if lines else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="bomb,tiny,loop,maximal,palago,sigterm")
    parser.add_argument("--limit-gb", type=float, default=8.0, help="address-space limit of each run")
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        one_case(args.case, args.limit_gb)
        return
    for case in args.only.split(","):
        print(f"{case}:", flush=True)
        in_child(case, args)


if __name__ == "__main__":
    main()
