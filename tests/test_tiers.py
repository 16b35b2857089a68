"""The fast tier (`pytest -m "not integration"`, docs/development.md) holds no test that uses a real
Ray or S3 server, starts a cluster or kills a process.  conftest.py marks the tests that use the
Ray and S3 fixtures or the cluster helpers or whose code kills or starts one, the files mark the
rest, and while the fast tier runs conftest.py fails a test that starts a Ray or an S3 server
anyway.  These tests check the fast tier's collection and that runtime watch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers import INTEGRATION_CODE, INTEGRATION_FIXTURES, REPO, ServiceWatch, assert_exit, cli_env


def fast_tier(report: Path) -> list[dict]:
    """What each test of the fast tier uses (conftest.py writes it to ``report`` while collecting)."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", "not integration"],
        cwd=REPO,
        env=cli_env({"BATCHENUM_TIER_REPORT": str(report)}),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert_exit(done, 0)
    return json.loads(report.read_text())


def test_the_fast_tier_uses_no_ray_no_s3_server_and_kills_nothing(tmp_path):
    tests = fast_tier(tmp_path / "tiers.json")
    assert len(tests) > 300, f"only {len(tests)} tests in the fast tier"
    using = [test["nodeid"] for test in tests if INTEGRATION_FIXTURES & set(test["fixtures"])]
    assert using == [], f"fast-tier tests using a Ray or S3 fixture: {using}"
    checked = [test for test in tests if not test["nodeid"].startswith("tests/test_tiers.py")]  # not these checks
    doing = [(test["nodeid"], found.group()) for test in checked if (found := INTEGRATION_CODE.search(test["source"]))]
    assert doing == [], f"fast-tier tests that kill a process or start a Ray (mark them integration): {doing}"


def test_the_service_watch_sees_a_service_started_below_this_process():
    """The fast tier's runtime check (conftest.py) sees a service started in a process of the test's
    (a stand-in here, so that the check around this very test stays quiet)."""
    sleeper = [sys.executable, "-c", "import time; time.sleep(1.5)"]
    service = {"the stand-in": "time.sleep(1.5)"}
    with ServiceWatch(interval=0.05, services=service) as watch:
        subprocess.run(["sh", "-c", '"$@"; true', "sh", *sleeper], timeout=60, check=True)  # a grandchild
    assert watch.seen == {"the stand-in"}
    with ServiceWatch(interval=0.05, services=service) as quiet:
        subprocess.run([sys.executable, "-c", "import time; time.sleep(1)"], timeout=60, check=True)
    assert quiet.seen == set()
