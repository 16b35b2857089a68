"""Fault injection for the test suite: the one production module that reads the tests' hooks.

Each hook is an environment variable that is never set in normal use.  Keeping them here (instead
of beside the code they interrupt) means a reader of ``runner.py``, ``shard_store.py``, ``table_commit.py`` or
``inputs/plan.py`` meets one named call, and a grep for ``BATCHENUM_TEST_`` finds every way a test can bend a run.

- ``BATCHENUM_TEST_KILL_SHARD=sXXXX``: the first attempt at that shard kills its own Ray worker
  with SIGKILL (``sXXXX:always``: every attempt), so tests prove a real worker death is retried or
  named.
- ``BATCHENUM_TEST_KILL_BETWEEN_TABLES=1``: the process kills itself after moving the first of a
  run's tables into place and before the next, so tests prove that the tables of a run are
  committed together (table_commit.py: the manifest, then the moves, completed by the next run).
- ``BATCHENUM_TEST_KILL_BEFORE_COMMIT=1``: the process kills itself once a run's tables and side
  files are staged, before the manifest names them, so tests prove nothing of the run is published.
- ``BATCHENUM_TEST_KILL_BETWEEN_SHARD_TABLES=sXXXX``: the process writing that shard kills itself
  after committing its first table and before the next; ``BATCHENUM_TEST_PAUSE_BETWEEN_SHARD_TABLES=S``:
  every shard's writer sleeps S seconds there, so that a soak's random kills land in that window.
  Tests prove that a shard's tables are committed together (shard_store.py, ``write_shard``).
- ``BATCHENUM_TEST_KILL_IN_MERGE=P``: the process merging a table kills itself once it has written
  partition P of a round (pipeline/table_merge.py), so tests prove that a rerun keeps the partitions
  written before and the tables come out the same bytes; ``BATCHENUM_TEST_PAUSE_IN_MERGE=S``: every
  merge task sleeps S seconds once it has written its partition, so that a kill from outside (the
  run's process group, its merge tasks on Ray's workers) lands while partitions are being written.
- ``BATCHENUM_TEST_PLAN=BLOCK,TASK_BLOCKS,DRIVER_BYTES``: planning sizes small enough that a small
  test input has its lines counted by Ray tasks.
- ``BATCHENUM_TEST_LEASE=HEARTBEAT,MARGIN``: the lease's heartbeat and takeover margin in seconds,
  short enough that a test sees a stopped run give its folder up and another take it over.
"""

from __future__ import annotations

import os
import signal
import time

__all__ = [
    "KILL_SHARD",
    "KILL_BETWEEN_TABLES",
    "KILL_BEFORE_COMMIT",
    "KILL_BETWEEN_SHARD_TABLES",
    "KILL_IN_MERGE",
    "PAUSE_IN_MERGE",
    "PAUSE_BETWEEN_SHARD_TABLES",
    "PLAN_SIZES",
    "LEASE_TIMES",
    "maybe_kill_worker",
    "maybe_kill_between_tables",
    "maybe_kill_before_commit",
    "between_shard_tables",
    "after_merge_partition",
    "plan_sizes",
    "lease_times",
]

KILL_SHARD = "BATCHENUM_TEST_KILL_SHARD"
KILL_BETWEEN_TABLES = "BATCHENUM_TEST_KILL_BETWEEN_TABLES"
KILL_BEFORE_COMMIT = "BATCHENUM_TEST_KILL_BEFORE_COMMIT"
KILL_BETWEEN_SHARD_TABLES = "BATCHENUM_TEST_KILL_BETWEEN_SHARD_TABLES"
KILL_IN_MERGE = "BATCHENUM_TEST_KILL_IN_MERGE"
PAUSE_IN_MERGE = "BATCHENUM_TEST_PAUSE_IN_MERGE"
PAUSE_BETWEEN_SHARD_TABLES = "BATCHENUM_TEST_PAUSE_BETWEEN_SHARD_TABLES"
PLAN_SIZES = "BATCHENUM_TEST_PLAN"
LEASE_TIMES = "BATCHENUM_TEST_LEASE"


def maybe_kill_worker(shard_id: str, folder: str) -> None:
    """Kill this worker process if ``KILL_SHARD`` names ``shard_id``: the first attempt only (a
    marker file in ``folder``, the job's local folder, remembers it), or every one with ``:always``."""
    target, _, mode = os.environ.get(KILL_SHARD, "").partition(":")
    if target != shard_id:
        return
    marker = os.path.join(folder, f".killed-{shard_id}")
    if os.path.exists(marker) and mode != "always":
        return
    os.makedirs(folder, exist_ok=True)
    with open(marker, "w") as handle:
        handle.write(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGKILL)


def maybe_kill_between_tables() -> None:
    """Kill this process if ``KILL_BETWEEN_TABLES`` is set."""
    _kill_if_set(KILL_BETWEEN_TABLES)


def maybe_kill_before_commit() -> None:
    """Kill this process if ``KILL_BEFORE_COMMIT`` is set."""
    _kill_if_set(KILL_BEFORE_COMMIT)


def between_shard_tables(shard_id: str) -> None:
    """Between two tables of shard ``shard_id``: kill this process if ``KILL_BETWEEN_SHARD_TABLES``
    names the shard; sleep if ``PAUSE_BETWEEN_SHARD_TABLES`` is set."""
    if os.environ.get(KILL_BETWEEN_SHARD_TABLES) == shard_id:
        os.kill(os.getpid(), signal.SIGKILL)
    pause = os.environ.get(PAUSE_BETWEEN_SHARD_TABLES)
    if pause:
        time.sleep(float(pause))


def after_merge_partition(partition: int) -> None:
    """Kill this process if ``KILL_IN_MERGE`` names ``partition`` (just written); sleep if
    ``PAUSE_IN_MERGE`` is set."""
    if os.environ.get(KILL_IN_MERGE) == str(partition):
        os.kill(os.getpid(), signal.SIGKILL)
    pause = os.environ.get(PAUSE_IN_MERGE)
    if pause:
        time.sleep(float(pause))


def _kill_if_set(hook: str) -> None:
    if os.environ.get(hook):
        os.kill(os.getpid(), signal.SIGKILL)


def plan_sizes() -> list[int] | None:
    """``[block, task_blocks, driver_bytes]`` from ``PLAN_SIZES``, or None when it is not set."""
    hook = os.environ.get(PLAN_SIZES)
    return [int(value) for value in hook.split(",")] if hook else None


def lease_times() -> tuple[float, float] | None:
    """``(heartbeat, margin)`` from ``LEASE_TIMES``, or None when it is not set."""
    hook = os.environ.get(LEASE_TIMES)
    if not hook:
        return None
    heartbeat, margin = (float(value) for value in hook.split(","))
    return heartbeat, margin
