"""Palago kernel, old against new, side by side in one process on one core.

The old kernel is ``solvers/palago`` as committed on a git ref (default ``main``), extracted with
``git archive`` into a temporary folder and imported under another package name; the new one is
this checkout's.  For each n, the two run alternately (``--repeat`` rounds, old first then new
first), each keeps its best CPU time (``time.process_time``: time lost to other processes on the
shared core does not count) and its best wall time, and the ratio old / new of CPU times is
printed, with nodes per CPU second.  Counts must agree exactly (fixed, free, stabiliser columns);
nodes are compared and reported.

    python benchmarks/palago_compare.py                     # n = 22 and 24, 3 rounds, against main
    python benchmarks/palago_compare.py --n 20 22 --repeat 5 --base HEAD~1

Figures, not assertions: the machine is shared, so only the ratio measured in one run means much.
"""

from __future__ import annotations

import argparse
import importlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)


def load_old(ref: str, folder: str):
    """Import ``solvers/palago`` at git ref ``ref`` as package ``palago_<ref>``; returns its search module."""
    archive = subprocess.run(
        ["git", "-C", REPO, "archive", ref, "solvers/palago"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    name = "palago_old"
    os.rename(os.path.join(folder, "solvers", "palago"), os.path.join(folder, name))
    sys.path.insert(0, folder)
    importlib.import_module(name)
    return importlib.import_module(f"{name}.search")


def same_counts(a, b) -> bool:
    return all((getattr(a, f) == getattr(b, f)).all() for f in ("fixed", "free", "by_stabiliser", "stabiliser_sum"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, nargs="+", default=[22, 24])
    parser.add_argument("--repeat", type=int, default=3, help="rounds per n (default: 3)")
    parser.add_argument("--base", default="main", help="git ref of the old kernel (default: main)")
    parser.add_argument("--cpu", type=int, default=None, help="pin to this core (default: the first allowed)")
    args = parser.parse_args()

    cpu = args.cpu if args.cpu is not None else min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    from batchenum.solvers.palago import search as new

    with tempfile.TemporaryDirectory() as folder:
        old = load_old(args.base, folder)
        kernels = {"old": old, "new": new}
        for kernel in kernels.values():
            kernel.count_creatures(8)  # compile outside the timings
        print(
            f"old = solvers/palago at {args.base!r}, new = this checkout; pinned to core {cpu}; "
            f"best of {args.repeat} alternating rounds"
        )
        print(
            f"{'n':>3} {'old cpu s':>9} {'new cpu s':>9} {'old/new':>8} {'old wall':>9} {'new wall':>9} "
            f"{'old Mnodes/s':>13} {'new Mnodes/s':>13} {'old nodes/fixed':>16} {'new nodes/fixed':>16}"
        )
        for n in args.n:
            best = {"old": float("inf"), "new": float("inf")}
            wall = {"old": float("inf"), "new": float("inf")}
            result = {}
            for round_ in range(args.repeat):
                order = ("old", "new") if round_ % 2 == 0 else ("new", "old")
                for which in order:
                    started, cpu = time.perf_counter(), time.process_time()
                    counts, _ = kernels[which].count_creatures(n)
                    best[which] = min(best[which], time.process_time() - cpu)
                    wall[which] = min(wall[which], time.perf_counter() - started)
                    result[which] = counts
            if not same_counts(result["old"], result["new"]):
                raise SystemExit(f"n = {n}: the kernels disagree on the counts")
            nodes = {w: int(c.nodes.sum()) for w, c in result.items()}
            fixed = int(result["old"].fixed.sum())
            print(
                f"{n:>3} {best['old']:>9.2f} {best['new']:>9.2f} {best['old'] / best['new']:>7.2f}x "
                f"{wall['old']:>9.2f} {wall['new']:>9.2f} "
                f"{nodes['old'] / best['old'] / 1e6:>13.1f} {nodes['new'] / best['new'] / 1e6:>13.1f} "
                f"{nodes['old'] / fixed:>16.2f} {nodes['new'] / fixed:>16.2f}"
                + ("" if nodes["old"] == nodes["new"] else "   (node counts differ)")
            )


if __name__ == "__main__":
    main()
