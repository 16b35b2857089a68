"""Real Ray clusters for tests: `ray start` processes with their own temp dir and free ports,
stopped by pid (every process whose command line names the temp dir, and their children)."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys

from helpers import assert_exit, free_ports

from batchenum.pipeline.local_ray import process_tree

_NODE_PORT_OPTIONS = (
    "--node-manager-port",
    "--object-manager-port",
    "--metrics-export-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
)


def token_env(**extra: str) -> dict:
    """This environment with a fresh cluster token, so nothing depends on ~/.ray/auth_token."""
    return {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32), **extra}


def ray_start(*args: str) -> list[str]:
    return [sys.executable, "-m", "ray.scripts.scripts", "start", *args, "--disable-usage-stats"]


def node_ports(*extra_options: str) -> list[str]:
    """Distinct free ports for every port option of a node (and ``extra_options``), so that
    several nodes share one machine."""
    options = [*_NODE_PORT_OPTIONS, *extra_options]
    return [item for option, port in zip(options, free_ports(len(options))) for item in (option, str(port))]


def start_head(temp_dir: str, env: dict, *args: str) -> str:
    """Start a head node; returns its address."""
    head = subprocess.run(
        ray_start("--head", "--temp-dir", temp_dir, *node_ports("--port", "--ray-client-server-port"), *args),
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert_exit(head, 0)
    return re.search(r"ray start --address='([^']+)'", head.stdout + head.stderr).group(1)


def join_node(address: str, env: dict, cwd: str | None = None) -> None:
    """Start a node of one CPU that joins the cluster at ``address``."""
    joined = subprocess.run(
        ray_start("--address", address, "--num-cpus", "1", *node_ports()),
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
        cwd=cwd,
    )
    assert_exit(joined, 0)


def wait_for_nodes(address: str, env: dict, count: int) -> None:
    script = (
        "import ray, time\n"
        f"ray.init(address={address!r}, logging_level='ERROR')\n"
        "deadline = time.monotonic() + 120\n"
        f"while sum(n['Alive'] for n in ray.nodes()) < {count}:\n"
        "    assert time.monotonic() < deadline, 'a node never joined'\n"
        "    time.sleep(0.5)\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300, env=env, capture_output=True)


def stop(temp_dir: str) -> None:
    """Kill every process of the cluster that uses ``temp_dir`` (or, its client server, which
    ``ray start`` leaves to init, the cluster's address), and remove it."""
    pattern = re.escape(temp_dir)
    if os.path.exists(os.path.join(temp_dir, "ray_current_cluster")):
        with open(os.path.join(temp_dir, "ray_current_cluster")) as handle:
            pattern += f"|--address={re.escape(handle.read().strip())}"
    owned = {int(p) for p in subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()}
    for pid in process_tree(owned):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    shutil.rmtree(temp_dir, ignore_errors=True)
