"""Simulated clusters (ray.cluster_utils, each in a scenario script of its own under
tests/scenarios/): a node removed mid-run, and a node that dies under a shard that may not be
retried.  Split from test_faults.py so that with `--dist loadfile` they run beside it."""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import PUBLISHED, REPO, assert_exit


def run_scenario(name: str, out: Path) -> dict:
    """Run tests/scenarios/NAME.py (it owns a simulated cluster) and return its RESULT report."""
    # the simulated cluster gets its own token, so that nothing depends on ~/.ray/auth_token
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    result = subprocess.run(
        [sys.executable, str(REPO / "tests" / "scenarios" / f"{name}.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert_exit(result, 0)
    # Ray's own processes may log to the same stdout; the report is the line marked RESULT
    return json.loads(next(line[len("RESULT ") :] for line in result.stdout.splitlines() if line.startswith("RESULT ")))


@pytest.mark.slow
def test_node_removed_from_a_cluster_mid_run(tmp_path):
    report = run_scenario("node_loss", tmp_path)
    assert report["removed_mid_run"]
    assert report["committed_before_removal"] < report["shards"]
    expected = PUBLISHED[PUBLISHED.n <= 21]
    assert report["free"] == expected.free.tolist()
    assert report["fixed"] == expected.fixed.tolist()


@pytest.mark.slow
def test_node_death_is_named_without_retries_and_waited_out_with_them(tmp_path):
    report = run_scenario("node_death", tmp_path)
    assert re.fullmatch(
        r"shard s000\d: the node running it died \(node \S+ [0-9a-f]{12}\) on its only attempt "
        r"\(see --retries\)\. Check the cluster's nodes .*run the same command again to reuse them\.",
        report["error"],
    ), report["error"]
    assert not report["final_table_written"]
    assert report["committed_after_failure"] >= 1
    assert report["reused"] == report["committed_after_failure"] < report["shards"]
    expected = PUBLISHED[PUBLISHED.n <= 22]
    assert report["free"] == expected.free.tolist()
    assert report["fixed"] == expected.fixed.tolist()
    # on a cluster left without CPUs a run says so once, waits, and finishes when a node joins
    said = report["waited"]["said"]
    assert report["waited"]["heard_before_a_node_joined"]
    assert sum("the cluster has no CPUs" in line for line in said) == 1, said
    assert all("has no CPUs" in line or "has 1 CPU now" in line for line in said), said  # "now" if seen in time
    assert report["waited"]["free"] == expected.free.tolist()
