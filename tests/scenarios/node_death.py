"""A node dies under a shard that may not be retried: the run must fail with one message naming
the shard, keep what was committed, and a rerun on a new node must finish from there.  The shard it
dies under is held at a gate (a shard that starts once another is committed waits for a file), so
it is still running when the node is removed.  Then, on a cluster left without CPUs, a run must say
so and wait, and finish once a node joins (as an autoscaler would add one).  (Removing the node mid-run for that second part is a race: a worker
whose raylet died can still finish the tasks already pushed to it.)

Usage: python node_death.py OUT_DIR.  Prints one line, "RESULT " and JSON.  Runs in its own process
because it owns its simulated Ray cluster (a head without CPUs, so shards run on the doomed node).
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import threading
import time

import ray
from ray.cluster_utils import Cluster

from batchenum.jobs.palago import PalagoJob
from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.execute import RunOptions, run_job
from batchenum.pipeline.progress import Progress

SHARDS = 8


def committed(shard_dir: pathlib.Path) -> int:
    return len(list(shard_dir.glob("*.parquet")))


class GatedPalagoJob(PalagoJob):
    """The Palago job, but a shard that starts once another shard is committed says so (a file
    ``held-<shard>`` in ``gate``) and waits until ``gate/open`` exists.  Defined in __main__, it
    reaches the workers pickled by value."""

    gate = ""
    shard_dir = ""

    def run_shard(self, shard, context=None):
        gate = pathlib.Path(self.gate)
        if not (gate / "open").exists() and committed(pathlib.Path(self.shard_dir)) >= 1:
            (gate / f"held-{shard.id}").touch()
            while not (gate / "open").exists():
                time.sleep(0.05)
        return super().run_shard(shard, context)


def gated_job(out: str) -> GatedPalagoJob:
    job = GatedPalagoJob(max_n=22, shards=SHARDS)
    job.gate = os.path.join(out, "gate")
    job.shard_dir = os.path.join(out, "palago", "_shards", "partial_counts")
    os.makedirs(job.gate, exist_ok=True)
    return job


def main(out: str) -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    doomed = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address)
    shard_dir = pathlib.Path(out) / "palago" / "_shards" / "partial_counts"
    events: dict = {}

    job = gated_job(out)

    def run_without_retries() -> None:
        try:
            run_job(job, RunOptions(out=out, retries=0), Progress("palago", quiet=True))
            events["error"] = None
        except PipelineError as error:
            events["error"] = str(error)

    running = threading.Thread(target=run_without_retries, daemon=True)
    running.start()
    gate = pathlib.Path(job.gate)
    while not any(gate.glob("held-*")):  # the only node with CPUs is the doomed one: the shard runs there
        if not running.is_alive():
            raise SystemExit(f"the run ended before a shard was held at the gate: {events}")
        time.sleep(0.02)
    cluster.remove_node(doomed, allow_graceful=False)
    events["committed_at_removal"] = committed(shard_dir)
    running.join(timeout=240)
    if running.is_alive():  # no failure seen: let the run end rather than hang the test
        events["error"] = "the run neither failed nor ended within 240 s of the node's removal"
        (gate / "open").touch()
        cluster.add_node(num_cpus=1)
        running.join()
    events["committed_after_failure"] = committed(shard_dir)
    events["final_table_written"] = (pathlib.Path(out) / "palago" / "creature_counts.parquet").exists()

    (gate / "open").touch()
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    rerun = run_job(job, RunOptions(out=out), Progress("palago", quiet=True))
    events["waited"] = wait_for_a_new_node(cluster, pathlib.Path(out) / "waits")
    counts = rerun.tables["creature_counts"]
    print(
        "RESULT "
        + json.dumps(
            {
                **events,
                "reused": rerun.reused,
                "shards": rerun.shards,
                "free": counts.free.tolist(),
                "fixed": counts.fixed.tolist(),
            }
        ),
        flush=True,
    )
    ray.shutdown()
    cluster.shutdown()


class _Heard:
    """A progress stream that remembers what it was told and signals one phrase."""

    def __init__(self, phrase: str):
        self.phrase, self.text, self.heard = phrase, [], threading.Event()

    def write(self, text: str) -> None:
        self.text.append(text)
        if self.phrase in text:
            self.heard.set()

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def wait_for_a_new_node(cluster: Cluster, out: pathlib.Path) -> dict:
    """With no node left that has CPUs, start a run; add a node once the run says it is waiting.
    Returns what the run said and its counts.  The run goes in a thread: Ray adds nodes only from
    the main thread."""
    for node in list(cluster.worker_nodes):
        cluster.remove_node(node)
    heard = _Heard("the cluster has no CPUs")
    outcome: dict = {}

    def run() -> None:
        result = run_job(PalagoJob(max_n=22, shards=4), RunOptions(out=str(out)), Progress("palago", stream=heard))
        outcome["free"] = result.tables["creature_counts"].free.tolist()

    running = threading.Thread(target=run, daemon=True)
    running.start()
    outcome["heard_before_a_node_joined"] = heard.heard.wait(timeout=120)
    cluster.add_node(num_cpus=1)  # even if nothing was heard: the scenario must not hang
    running.join(timeout=300)
    return {**outcome, "said": [line.strip() for line in "".join(heard.text).splitlines() if "CPU" in line]}


if __name__ == "__main__":
    main(sys.argv[1])
