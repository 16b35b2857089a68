"""A node dies under a shard that may not be retried: the run must fail with one message naming
the shard, keep what was committed, and a rerun on a new node must finish from there.

Usage: python node_death.py OUT_DIR.  Prints one line, "RESULT " and JSON.  Runs in its own process
because it owns its simulated Ray cluster (a head without CPUs, so shards run on the doomed node).
"""

from __future__ import annotations

import json
import pathlib
import sys
import threading
import time

import ray
from ray.cluster_utils import Cluster

from jobs.palago import PalagoJob
from pipeline.errors import PipelineError
from pipeline.execute import RunOptions, run_job
from pipeline.progress import Progress


def committed(shard_dir: pathlib.Path) -> int:
    return len(list(shard_dir.glob("*.parquet")))


def main(out: str) -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    doomed = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    shard_dir = pathlib.Path(out) / "palago" / "_shards" / "partial_counts"
    events: dict = {}

    def remove_node_after_first_commit() -> None:
        while committed(shard_dir) < 1:
            time.sleep(0.02)
        cluster.remove_node(doomed, allow_graceful=False)
        events["committed_at_removal"] = committed(shard_dir)

    threading.Thread(target=remove_node_after_first_commit, daemon=True).start()
    try:
        run_job(PalagoJob(max_n=23, shards=4), RunOptions(out_dir=out, retries=0), Progress("palago", quiet=True))
        events["error"] = None
    except PipelineError as error:
        events["error"] = str(error)
    events["committed_after_failure"] = committed(shard_dir)
    events["final_table_written"] = (pathlib.Path(out) / "palago" / "creature_counts.parquet").exists()

    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    rerun = run_job(PalagoJob(max_n=23, shards=4), RunOptions(out_dir=out), Progress("palago", quiet=True))
    counts = rerun.tables["creature_counts"]
    print("RESULT " + json.dumps({**events, "reused": rerun.reused, "shards": rerun.shards,
                                  "free": counts.free.tolist(), "fixed": counts.fixed.tolist()}), flush=True)
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
