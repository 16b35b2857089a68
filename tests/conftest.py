"""Shared fixtures.  Tests that need Ray share one private local instance per session, so the
suite stays fast on two cores."""

from __future__ import annotations

import os
import pathlib

import pytest
from helpers import (
    CASES,
    INTEGRATION_CODE,
    INTEGRATION_FIXTURES,
    INTEGRATION_MODULES,
    REPO,
    ServiceWatch,
    cli,
    free_port,
)

__all__ = ["REPO"]  # tests/test_palago_transfer.py still imports it from here; new tests use helpers

# Ray 2.60 enables token authentication on a fresh local instance; say so explicitly so that the
# CLI subprocesses that the tests start connect to ours the same way.
os.environ.setdefault("RAY_AUTH_MODE", "token")


def _is_integration(item: pytest.Item) -> bool:
    if item.get_closest_marker("slow") or INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    module = getattr(item, "module", None)
    if any(getattr(module, name, None) is not None for name in INTEGRATION_MODULES):
        return True
    return bool(INTEGRATION_CODE.search(_source(item)))


def _source(item: pytest.Item) -> str:
    """The code of a test and of the fixtures it uses (a module fixture may start the Ray)."""
    import inspect

    functions = [getattr(item, "obj", None)]
    fixtures = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    functions += [definition.func for definitions in fixtures.values() for definition in definitions]
    texts = []
    for function in functions:
        try:
            texts.append(inspect.getsource(function))
        except (OSError, TypeError):  # built-in fixtures, or none
            continue
    return "\n".join(texts)


@pytest.hookimpl(tryfirst=True)  # before `-m` selects, so the marks made here count
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the integration tier (a test using a real Ray, S3 server, cluster or the fault proxy, or
    whose code kills a process or starts a Ray: helpers.INTEGRATION_FIXTURES, INTEGRATION_MODULES
    and INTEGRATION_CODE; a test that is slow), so that a new test cannot slip into the fast tier
    (`pytest -m "not integration"`) by accident; tests that start a Ray some other way (a CLI run
    without --serial) are marked in their files.  Then put the files holding slow tests first, each file's tests
    kept together and in order: with ``pytest -n 2 --dist loadfile`` (the README's command) the
    longest files then start first instead of running alone at the end."""
    for item in items:
        if _is_integration(item):
            item.add_marker(pytest.mark.integration)
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # a stable sort keeps each file's order


def pytest_collection_finish(session: pytest.Session) -> None:
    """With BATCHENUM_TIER_REPORT set, write what each collected test uses to that file
    (tests/test_tiers.py checks the fast tier with it)."""
    report = os.environ.get("BATCHENUM_TIER_REPORT")
    if report:
        import json

        rows = [
            {
                "nodeid": item.nodeid,
                "fixtures": sorted(getattr(item, "fixturenames", ())),
                "source": _source(item),
            }
            for item in session.items
        ]
        pathlib.Path(report).write_text(json.dumps(rows))


@pytest.fixture(autouse=True)
def _fast_tier_starts_no_ray(request):
    """In the fast tier, fail a test that started a Ray or an S3 server in a process of its own
    (a CLI run's local Ray, say): such a test belongs to the integration tier."""
    if "not integration" not in (request.config.option.markexpr or ""):
        yield
        return
    with ServiceWatch() as watch:
        yield
    if watch.seen:
        pytest.fail(
            f"{request.node.nodeid} started {sorted(watch.seen)[0]} in the fast tier: mark it "
            "`pytest.mark.integration` (or run it with --serial)"
        )


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


@pytest.fixture(scope="module")
def palago_run(tmp_path_factory):
    """A real run of the Palago job (`--serial`): its folder, with four committed shards and the count
    table; test_store_damage.py and test_store_untrusted.py copy it before they damage it."""
    out = tmp_path_factory.mktemp("palago9")
    cli("run", "palago", "--max-n", "9", "--serial", "--out", str(out))
    return out
