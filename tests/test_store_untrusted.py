"""The store's own files as untrusted input (issue 25, items 6 and 7): whatever bytes or JSON shapes
``_lease.json`` and ``_plan.json`` hold, a run and ``status`` answer with one message (or recover),
never another exception; ``status`` tells a dead run from a live one and counts only planned
shards; SIGTERM stops a run as Ctrl-C does."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
from helpers import REPO, assert_exit, cli, wait_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.lease import LEASE_FILE, Lease, process_identity
from batchenum.pipeline.status import job_statuses, render, to_json
from batchenum.pipeline.storage import Storage

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
LEASE_KEYS = st.fixed_dictionaries(
    {},
    optional={
        "run": JSON,
        "host": JSON,
        "pid": JSON | st.integers(-(2**70), 2**70),
        "started_at": JSON,
        "heartbeat_at": JSON,
    },
)
PLAN_KEYS = st.fixed_dictionaries(
    {},
    optional={
        "shards": JSON | st.lists(st.text(max_size=6), max_size=5),
        "tables": JSON,
        "started_at": JSON,
        "params": JSON,
        "version": JSON,
        "host": JSON,
        "pid": JSON,
    },
)
CONTENT = (
    st.binary(max_size=64)
    | JSON.map(lambda value: json.dumps(value).encode())
    | LEASE_KEYS.map(lambda value: json.dumps(value).encode())
    | PLAN_KEYS.map(lambda value: json.dumps(value).encode())
)


@pytest.fixture(scope="module")
def folder(palago_run, tmp_path_factory):  # noqa: F811
    out = tmp_path_factory.mktemp("untrusted") / "out"
    shutil.copytree(palago_run, out)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lease=CONTENT, plan=CONTENT)
def test_any_lease_and_plan_bytes_give_a_clean_answer(folder, lease, plan):
    job = folder / "palago"
    (job / LEASE_FILE).write_bytes(lease)
    (job / "_plan.json").write_bytes(plan)
    statuses = job_statuses(str(folder))  # never raises
    render(statuses), json.dumps(to_json(statuses))
    try:
        with Lease(Storage.at(str(job)), say=lambda line: None):
            pass
    except PipelineError as error:
        assert LEASE_FILE in str(error) or "another run" in str(error)


def test_a_foreign_lease_says_what_to_do_and_status_reports_it(palago_run, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    shutil.copytree(palago_run, out)
    for content in (
        b"",
        b"\x00\xff garbage",
        b"[1, 2]",
        b'{"run": "x", "host": "h", "pid": 1, "started_at": 1, "heartbeat_at": "soon"}',
    ):
        (out / "palago" / LEASE_FILE).write_bytes(content)
        run = cli("run", "palago", "--max-n", "9", "--serial", "--out", str(out), expect=1)
        assert "Traceback" not in run.stderr, run.stderr
        assert run.stderr.count("\n") == 1 and "remove that file" in run.stderr, run.stderr
        status = cli("status", "--out", str(out))
        assert "_lease.json is damaged" in status.stdout, status.stdout
    (out / "palago" / LEASE_FILE).unlink()
    (out / "palago" / LEASE_FILE).mkdir()
    run = cli("run", "palago", "--max-n", "9", "--serial", "--out", str(out), expect=1)
    assert "not a file" in run.stderr and "Traceback" not in run.stderr


def test_a_folder_where_a_shard_file_belongs_is_one_message(palago_run, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    shutil.copytree(palago_run, out)
    shard = out / "palago" / "_shards" / "partial_counts" / "s0002.parquet"
    shard.unlink()
    shard.mkdir()
    run = cli("run", "palago", "--max-n", "9", "--serial", "--out", str(out), expect=1)
    assert "Traceback" not in run.stderr
    assert f"{shard} is a folder where a shard file belongs" in run.stderr
    shard.rmdir()
    cli("run", "palago", "--max-n", "9", "--serial", "--out", str(out))


def test_status_tells_a_dead_run_and_counts_only_planned_shards(palago_run, tmp_path):  # noqa: F811
    out = tmp_path / "out"
    shutil.copytree(palago_run, out)
    job = out / "palago"
    shutil.copy(
        job / "_shards" / "partial_counts" / "s0000.parquet", job / "_shards" / "partial_counts" / "s99999.parquet"
    )
    plan = json.loads((job / "_plan.json").read_text())
    plan["shards"] = plan["shards"][:3] + ["s0009"]  # one planned shard not yet committed
    (job / "_plan.json").write_text(json.dumps(plan))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid that was alive once on this host and is not now
    now = time.time()
    identity = {**process_identity(os.getpid()), "pid_started": 1}  # this namespace, a process gone
    (job / LEASE_FILE).write_text(
        json.dumps(
            {
                "run": "r",
                "host": os.uname().nodename,
                "pid": gone.pid,
                "started_at": now - 5,
                "heartbeat_at": now - 2,
                **identity,
            }
        )
    )
    text = cli("status", "--out", str(out), expect=None).stdout
    assert "3/4 shards committed; 2 not in the plan, ignored (s0003, s99999)" in text, text
    assert "running:" not in text and "stopped:" in text and "its process is gone" in text
    assert "left at the rate" not in text and "for a rerun at the rate of the last run" in text  # none runs now
    [status] = json.loads(cli("status", "--out", str(out), "--json").stdout)["jobs"]
    assert status["running"]["alive"] is False and status["seconds_left_for"] == "a rerun"
    assert status["shards"]["committed"] == 3 and status["unplanned_shards"] == 2
    (job / LEASE_FILE).write_text(
        json.dumps({"run": "r", "host": "elsewhere", "pid": 1, "started_at": now - 500, "heartbeat_at": now - 300})
    )
    assert "no heartbeat for" in cli("status", "--out", str(out)).stdout


def test_sigterm_stops_a_run_as_ctrl_c_does(tmp_path):
    out = tmp_path / "out"
    driver = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "batchenum",
            "run",
            "palago",
            "--max-n",
            "19",
            "--shards",
            "24",
            "--serial",
            "--out",
            str(out),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_until(
        lambda: len(list(out.glob("palago/_shards/*/*.parquet"))) >= 2, "2 shard files were written", 120, driver
    )
    driver.send_signal(signal.SIGTERM)
    _, stderr = driver.communicate(timeout=120)
    assert_exit(driver, 143, stderr=stderr)
    assert re.search(r"stopped \(SIGTERM\); \d+ shards? committed (are|is) kept", stderr) and "Traceback" not in stderr
    assert len(list(out.glob("palago/_shards/*/*.parquet"))) >= 2
    assert not (out / "palago" / LEASE_FILE).exists()  # the lease is given back
