"""Shared fixtures.  Tests that need Ray share one private local instance per session, so the
suite stays fast on two cores."""

from __future__ import annotations

import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
CASES = REPO / "tests" / "data"  # the seed reference cases (docs/rules.md explains them)

# Ray 2.60 enables token authentication on a fresh local instance; say so explicitly so that the
# CLI subprocesses that the tests start connect to ours the same way.
os.environ.setdefault("RAY_AUTH_MODE", "token")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files holding slow tests first, each file's tests kept together and in order: with
    ``pytest -n 2 --dist loadfile`` (the README's command) the longest files then start first
    instead of running alone at the end."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # a stable sort keeps each file's order


@pytest.fixture(scope="session")
def cases_dir() -> pathlib.Path:
    if not CASES.is_dir():
        pytest.fail(f"reference cases not found at {CASES}")
    return CASES


@pytest.fixture(scope="session")
def ray_session():
    """One private local Ray instance for the whole test session (2 CPUs), started and stopped the
    way a run starts its own (pipeline.runner.RaySession, through pipeline.local_ray.LocalRay)."""
    import ray

    from batchenum.pipeline.runner import RaySession

    session = RaySession(None, 2)
    if not ray.is_initialized():
        session.connect()
    yield ray
    session.close()


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports: all sockets stay open until every port is chosen, so the
    system cannot hand out the same port twice."""
    import socket

    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@pytest.fixture(scope="session")
def s3_server():
    """A real S3-compatible server (moto's standalone server) over HTTP on 127.0.0.1, started as a
    subprocess and stopped by pid.  Yields the AWS environment that reaches it; ``new_bucket``
    below makes a fresh bucket per test."""
    import shutil
    import subprocess
    import sys
    import time
    import urllib.request

    server = shutil.which("moto_server", path=os.path.dirname(sys.executable)) or shutil.which("moto_server")
    if server is None:
        pytest.fail("moto_server not found: install the test extra (pip install -e '.[test]')")
    port = free_port()
    process = subprocess.Popen(
        [server, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(endpoint, timeout=2).close()
            break
        except Exception:
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"moto_server did not start on {endpoint}")
            time.sleep(0.2)
    env = {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "batchenum-test-key",
        "AWS_SECRET_ACCESS_KEY": "s3cr3t-" + os.urandom(8).hex(),
        "AWS_REGION": "us-east-1",
    }
    try:
        yield env
    finally:
        process.kill()
        process.wait(timeout=30)


@pytest.fixture
def new_bucket(s3_server, request):
    """A fresh bucket on the test S3 server; returns its name."""
    import re
    import uuid

    import pyarrow.fs as pafs

    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-") + "-" + uuid.uuid4().hex[:6]
    pafs.S3FileSystem(
        endpoint_override=s3_server["AWS_ENDPOINT_URL"],
        access_key=s3_server["AWS_ACCESS_KEY_ID"],
        secret_key=s3_server["AWS_SECRET_ACCESS_KEY"],
        region="us-east-1",
        allow_bucket_creation=True,
    ).create_dir(name)
    return name
