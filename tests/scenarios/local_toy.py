"""The toy job on the default local path (threads here while a private Ray starts), for tests that
need their own process: the private Ray is a child of this one.

Usage: python local_toy.py OUT_DIR SHARDS SECONDS_PER_SHARD WORKERS [RAY_AFTER [SECONDS_ON_RAY]].  RAY_AFTER
(default 0: at once) is the work left, in seconds, above which the head start starts the private Ray;
SECONDS_ON_RAY (default SECONDS_PER_SHARD) is a shard's time on Ray's workers.  Progress goes to stderr; the
last stdout line is "RESULT " and JSON: where each shard ran ("driver" or "ray") and the rows.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

import pyarrow.parquet as pq

TESTS = str(pathlib.Path(__file__).resolve().parents[1])  # for toy_job, here and in Ray's workers
sys.path.insert(0, TESTS)
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")]))

from toy_job import ToyJob  # noqa: E402

from batchenum.pipeline.execute import RunOptions, run_job  # noqa: E402
from batchenum.pipeline.progress import Progress  # noqa: E402


def main(out: str, shards: str, seconds: str, workers: str, ray_after: str = "0", on_ray: str = "") -> None:
    job = ToyJob(shards=int(shards), seconds=float(seconds), seconds_elsewhere=float(on_ray) if on_ray else None)
    options = RunOptions(out=out, workers=int(workers), ray_after=float(ray_after))
    result = run_job(job, options, Progress("toy"))
    ran = {}
    for path in sorted(pathlib.Path(result.location, "_shards", "items").glob("*.parquet")):
        node = json.loads(pq.read_metadata(path).metadata[b"batchenum.stats"])["node"]
        ran[path.stem] = "driver" if node.endswith("(the driver)") else "ray"
    print("RESULT " + json.dumps({"ran": ran, "values": sorted(result.tables["items"].column("value").to_pylist())}))


if __name__ == "__main__":
    main(*sys.argv[1:])
