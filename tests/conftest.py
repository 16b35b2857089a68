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


@pytest.fixture(scope="session")
def cases_dir() -> pathlib.Path:
    if not CASES.is_dir():
        pytest.fail(f"reference cases not found at {CASES}")
    return CASES


@pytest.fixture(scope="session")
def ray_session():
    """One private local Ray instance for the whole test session (2 CPUs)."""
    import ray

    if not ray.is_initialized():
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
