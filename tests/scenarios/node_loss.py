"""Run a Palago job on a simulated three-node Ray cluster and remove a worker node mid-run.

Usage: python node_loss.py OUT_DIR.  Prints one line, "RESULT " and JSON: what was removed and when, and the
resulting counts.  Runs in its own process because it owns its Ray cluster.
"""

from __future__ import annotations

import json
import pathlib
import sys
import threading
import time

import ray
from ray.cluster_utils import Cluster

from batchenum.jobs.palago import PalagoJob
from batchenum.pipeline.execute import RunOptions, run_job
from batchenum.pipeline.progress import Progress


def main(out: str) -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    doomed = cluster.add_node(num_cpus=1)
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    shard_dir = pathlib.Path(out) / "palago" / "_shards" / "partial_counts"
    events: dict = {}

    def remove_node_mid_run() -> None:
        while len(list(shard_dir.glob("*.parquet"))) < 3:
            time.sleep(0.05)
        events["committed_before_removal"] = len(list(shard_dir.glob("*.parquet")))
        cluster.remove_node(doomed, allow_graceful=False)
        events["removed_at"] = time.monotonic()

    threading.Thread(target=remove_node_mid_run, daemon=True).start()
    result = run_job(PalagoJob(max_n=21, shards=48), RunOptions(out=out), Progress("palago"))
    events["finished_at"] = time.monotonic()
    counts = result.tables["creature_counts"]
    print(
        "RESULT "
        + json.dumps(
            {
                "removed_mid_run": "removed_at" in events and events["removed_at"] < events["finished_at"],
                "committed_before_removal": events.get("committed_before_removal"),
                "shards": result.shards,
                "free": counts.free.tolist(),
                "fixed": counts.fixed.tolist(),
            }
        ),
        flush=True,
    )
    ray.shutdown()
    cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
