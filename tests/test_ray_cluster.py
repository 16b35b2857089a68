"""A real `ray start --head` cluster with token authentication: a client without the token gets one
clear message, and the README's cluster recipe (`ray job submit`) runs.  Split from test_faults.py
so that with `--dist loadfile` it runs beside it."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys

import clusters
import pandas as pd
import pytest
from helpers import REPO, assert_exit, cli, cli_command, free_ports, palago_args


@pytest.fixture(scope="module")
def token_cluster(tmp_path_factory, s3_server):
    """A head node started with `ray start --head` that requires token authentication; stopped by
    pid (every process whose command line names its private temp dir, and their children).  Its
    environment reaches the test S3 server, as a head node's would reach its cloud's store."""
    tempfile_dir = f"/tmp/bh{os.getpid()}"
    names = (
        "gcs",
        "dashboard",
        "agent_http",
        "agent_grpc",
        "runtime_env",
        "metrics",
        "node_manager",
        "object_manager",
        "client",
    )
    ports = dict(zip(names, free_ports(len(names))))
    # the job's entrypoint `python` must be this environment's, as it is with the venv activated
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    # the cluster's own token, so that nothing depends on ~/.ray/auth_token existing already
    env = {**os.environ, **s3_server, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), "PATH": path}
    command = [
        sys.executable,
        "-m",
        "ray.scripts.scripts",
        "start",
        "--head",
        "--num-cpus",
        "2",
        "--temp-dir",
        tempfile_dir,
        "--port",
        str(ports["gcs"]),
        "--include-dashboard",
        "true",
        "--dashboard-host",
        "127.0.0.1",
        "--dashboard-port",
        str(ports["dashboard"]),
        "--dashboard-agent-listen-port",
        str(ports["agent_http"]),
        "--dashboard-agent-grpc-port",
        str(ports["agent_grpc"]),
        "--runtime-env-agent-port",
        str(ports["runtime_env"]),
        "--metrics-export-port",
        str(ports["metrics"]),
        "--node-manager-port",
        str(ports["node_manager"]),
        "--object-manager-port",
        str(ports["object_manager"]),
        "--ray-client-server-port",
        str(ports["client"]),
        "--disable-usage-stats",
    ]
    started = subprocess.run(command, capture_output=True, text=True, timeout=180, env=env)
    assert_exit(started, 0)
    address = re.search(r"ray start --address='([^']+)'", started.stdout + started.stderr).group(1)
    try:
        yield {"address": address, "dashboard": f"http://127.0.0.1:{ports['dashboard']}", "env": env}
    finally:
        clusters.stop(tempfile_dir)


@pytest.mark.slow
def test_missing_token_gets_one_clear_message(token_cluster, tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    result = subprocess.run(
        cli_command(*palago_args(tmp_path, 8, 2, "--address", token_cluster["address"])),
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert_exit(result, 1)
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("batchenum: error:")
    assert "RAY_AUTH_MODE=token" in last and "RAY_AUTH_TOKEN" in last and "ray get-auth-token" in last


def job_submit(cluster: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ray.scripts.scripts",
            "job",
            "submit",
            "--address",
            cluster["dashboard"],
            "--working-dir",
            str(REPO),
            "--",
            "python",
            "-m",
            "batchenum",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=cluster["env"],
        cwd=REPO,
    )


@pytest.mark.slow
def test_cluster_recipe_ray_job_submit(token_cluster, new_bucket, tmp_path):
    """The README's cluster recipe: `ray job submit --working-dir . -- python -m batchenum run ...
    --out s3://...`, the head's environment reaching the store."""
    submit = job_submit(token_cluster, "run", "palago", "--max-n", "12", "--out", f"s3://{new_bucket}/runs")
    assert_exit(submit, 0)
    assert "computing on a local Ray" not in submit.stdout  # it used the cluster, not a private Ray
    assert f"tables in s3://{new_bucket}/runs/palago" in submit.stdout
    out = tmp_path / "copy"
    cli("run", "palago", "--max-n", "12", "--serial", "--out", str(out))
    with pytest.MonkeyPatch.context() as patch:
        for name, value in token_cluster["env"].items():
            if name.startswith("AWS_"):
                patch.setenv(name, value)
        found = pd.read_parquet(f"s3://{new_bucket}/runs/palago/creature_counts.parquet")
    pd.testing.assert_frame_equal(found, pd.read_parquet(out / "palago" / "creature_counts.parquet"))


@pytest.mark.slow
def test_relative_out_under_ray_job_submit_is_refused(token_cluster):
    submit = job_submit(token_cluster, "run", "palago", "--max-n", "6", "--out", "relout")
    assert submit.returncode != 0, submit.stdout + submit.stderr
    assert "--out relout is relative" in submit.stdout + submit.stderr
