"""Parallelism follows the cluster: on a `ray start --head --num-cpus=16` cluster (16 logical CPUs
on this machine) the default Palago plan has at least 64 shards and at least 12 shard tasks run at
once, measured from the start and end times every shard records with its files."""

from __future__ import annotations

import json
import os
import subprocess

import clusters
import pyarrow.parquet as pq
import pytest
from helpers import PUBLISHED, assert_exit, cli_command

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sixteen_cpus():
    temp_dir, env = f"/tmp/bc{os.getpid()}", clusters.token_env()
    try:
        yield {
            "address": clusters.start_head(temp_dir, env, "--num-cpus", "16", "--include-dashboard", "false"),
            "env": env,
        }
    finally:
        clusters.stop(temp_dir)


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = best = 0
    for _, step in events:
        running += step
        best = max(best, running)
    return best


def test_default_plan_and_tasks_in_flight_follow_the_cluster(sixteen_cpus, tmp_path):
    result = subprocess.run(
        # n = 24: shards of 0.2-5.1 s (median 1.6), long against the 16 workers' staggered start on 2
        # cores; at n = 23 (0.1-3.4 s, median 0.6) the first shards could end before the last workers
        # were up: 13 at once here, 10 in one CI run
        cli_command("run", "palago", "--max-n", "24", "--out", str(tmp_path), "--address", sixteen_cpus["address"]),
        capture_output=True,
        text=True,
        timeout=900,
        env=sixteen_cpus["env"],
    )
    assert_exit(result, 0)
    shards = sorted((tmp_path / "palago" / "_shards" / "partial_counts").glob("*.parquet"))
    assert len(shards) == 64  # 4 per CPU
    intervals = []
    for path in shards:
        stats = json.loads(pq.read_schema(path).metadata[b"batchenum.stats"])
        intervals.append((stats["committed_at"] - stats["seconds"], stats["committed_at"]))
    assert most_at_once(intervals) >= 12
    counts = pq.read_table(tmp_path / "palago" / "creature_counts.parquet").to_pandas()
    assert counts.free.tolist() == PUBLISHED[PUBLISHED.n <= 24].free.tolist()
