"""One CLI command, old code against new, alternating in one session: wall seconds and their ratio.

    python benchmarks/end_to_end.py -- run palago --max-n 24 --workers 2
    python benchmarks/end_to_end.py --base HEAD~3 --rounds 3 -- run dungeons --input d.jsonl --workers 2

The base (a git ref, default ``main``) is extracted with ``git archive`` into a temporary folder;
"new" is this working tree.  Each runs ``batchenum ARGS --out TMP --quiet`` in a fresh process with
its own code first on PYTHONPATH (Ray's workers inherit it), once untimed to fill its numba cache,
then alternately ``--rounds`` times.  The machines these run on are shared and noisy: compare the
ratios of one run, not times across runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def extract(ref: str, folder: Path) -> None:
    """The tree of ``ref`` under ``folder``."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)


def entry_module(code: Path) -> str:
    """``batchenum``, or ``jobs`` for code from before the one installed namespace (55248b8)."""
    return "batchenum" if (code / "batchenum" / "__main__.py").is_file() else "jobs"


def timed_run(code: Path, args: list[str], scratch: Path) -> float:
    """Wall seconds of ``batchenum ARGS`` run from ``code``, into a fresh output folder."""
    out = scratch / "out"
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")]))}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", entry_module(code), *args, "--out", str(out), "--quiet"],
        cwd=scratch,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{code}: batchenum {' '.join(args)} exited {done.returncode}:\n{done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="main", help="git ref of the old code (default main)")
    parser.add_argument("--rounds", type=int, default=2, help="timed runs of each (default 2)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="-- then the batchenum arguments (without --out)")
    options = parser.parse_args()
    args = options.args[1:] if options.args[:1] == ["--"] else options.args
    if not args:
        parser.error("give the batchenum arguments after --")
    with tempfile.TemporaryDirectory(prefix="bench-e2e-") as folder:
        old, scratch = Path(folder, "old"), Path(folder, "scratch")
        old.mkdir()
        scratch.mkdir()
        extract(options.base, old)
        sides = {options.base: old, "new": REPO}
        for code in sides.values():
            timed_run(code, args, scratch)  # fills the numba cache of that copy
        print(f"batchenum {' '.join(args)}: wall seconds, {options.base} against this tree, alternating")
        print(f"{'round':>5} {options.base:>12} {'new':>8} {'new/' + options.base:>12}")
        for round_number in range(1, options.rounds + 1):
            old_s, new_s = (timed_run(code, args, scratch) for code in sides.values())
            print(f"{round_number:>5} {old_s:>12.2f} {new_s:>8.2f} {new_s / old_s:>12.2f}", flush=True)


if __name__ == "__main__":
    main()
