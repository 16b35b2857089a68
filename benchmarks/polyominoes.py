"""A real overlapping job: free polyominoes of n cells by overlapping seeds (tests/polyomino_job.py).

    python benchmarks/polyominoes.py --n 12            # 63,600 free 12-ominoes (OEIS A000105)

One shard per free polyomino of ``--seed`` cells, grown to n cells; each form is emitted by every
seed it holds, so the shards overlap and the merge deduplicates (pipeline/table_merge.py).  Prints
the rows emitted and the distinct rows written (checked against A000105), the run's seconds and the
driver's peak RSS.  Figures, not assertions.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from polyomino_job import FREE, Polyominoes

from batchenum.pipeline.execute import RunOptions, run_job
from batchenum.pipeline.progress import Progress


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=12)
    parser.add_argument("--seed", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="polyominoes-") as out:
        started = time.monotonic()
        options = RunOptions(out=out, workers=args.workers, head_start=False)
        result = run_job(Polyominoes(n=args.n, seed=args.seed), options, Progress("polyominoes", stream=io.StringIO()))
        figures = {
            "n": args.n,
            "seed_cells": args.seed,
            "shards": result.shards,
            "emitted": result.totals["emitted"],
            "distinct": len(result.tables["forms"]),
            "published": FREE[args.n],
            "exact": len(result.tables["forms"]) == FREE[args.n],
            "seconds": round(time.monotonic() - started, 1),
            "driver_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10,
        }
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
