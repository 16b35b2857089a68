"""One attempt at one shard, wherever it runs (a Ray worker or a thread of the driver): check that
this node runs the driver's code, reuse the committed shard if its input is unchanged, else compute
it and commit its tables.  No Ray here: runner.py calls this from its tasks and threads alike.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from batchenum.pipeline.checkpoint import CHECKPOINTS, Checkpoint
from batchenum.pipeline.codeversion import installed_part
from batchenum.pipeline.contract import completed_tables
from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.job import Job, Shard, ShardContext, ShardResult
from batchenum.pipeline.shard_store import ShardStore
from batchenum.pipeline.tasks import ShardTasks

__all__ = ["Attempt", "CodeMismatchError", "run_attempt", "recorded_children", "INPUT_FINGERPRINT", "RETRY", "CHILDREN"]

# The names under which a shard's recorded stats keep its input's checksum, its records to retry
# and the shards it handed back (``ShardResult.children``, as ``[id, spec]`` pairs).
INPUT_FINGERPRINT = "input_fingerprint"
RETRY = "retry"
CHILDREN = "children"


class CodeMismatchError(PipelineError):
    """A worker's installed code differs from the driver's."""


@dataclass(frozen=True)
class Attempt:
    """What one attempt at a shard did, as the driver hears of it.

    node:          where it ran, as an operator can find it.
    reused:        the committed shard was checked against its input and kept, nothing computed.
    input_changed: the committed shard was checked and its input had changed: it was computed again.
    retried:       how many of the committed shard's records were computed again (``ShardResult.retry``).
    records:       the input records it read (its ``records`` stat), for progress; None when it read none.
    seconds:       how long it computed (its ``seconds`` stat), for progress; None when reused.
    children:      the shards it handed back (``ShardResult.children``), for the run to compute.
    """

    node: str
    reused: bool = False
    input_changed: bool = False
    retried: int = 0
    records: int | None = None
    seconds: float | None = None
    children: tuple[Shard, ...] = ()


def run_attempt(
    job: Job,
    shard: Shard,
    store: ShardStore,
    node: str,
    verify: bool = False,
    tasks: Callable[[], ShardTasks] | None = None,
) -> Attempt:
    """Run one shard and commit its tables (with its stats, node, compute time and input checksum).

    verify: the shard is committed with matching provenance; reuse it when the fingerprint of its
            input is still the one recorded, else compute it again.
    tasks:  makes where the shard runs its own tasks (``ShardContext.tasks``), if it asks for them;
            default: at once, in this process.
    """
    _refuse_other_code(job, store, node)
    fingerprint = job.input_fingerprint(shard) if verify else None  # reading the input just for this check
    retry: list = []
    if verify:
        recorded = store.recorded_stats(shard)
        if recorded.get(INPUT_FINGERPRINT) == fingerprint:
            retry = recorded.get(RETRY) or []
            if not retry:
                return Attempt(node, reused=True)
    started = time.monotonic()
    context = ShardContext(
        make_checkpoint=lambda: Checkpoint(
            store.storage, shard, store.provenance.shard_metadata(shard, CHECKPOINTS, 0)
        ),
        make_tasks=tasks,
        # the committed shard is right but for these records (timeouts, say): redo only them
        retry=retry,
        previous=store.read_shard_tables(shard) if retry else {},
    )
    result = _run_shard(job, shard, context)
    if not isinstance(result, ShardResult):
        raise PipelineError(
            f"shard {shard.id}: run_shard returned {type(result).__name__}, not a ShardResult: "
            "return ShardResult({table: {column: values}})"
        )
    stats = _recorded_stats(job, shard, result, fingerprint, node, started)
    store.write_shard(shard, completed_tables(job, shard, result.tables), stats)
    if context.used_checkpoint is not None:
        context.used_checkpoint.clear()  # the committed shard supersedes it
    return Attempt(
        node,
        input_changed=verify and not retry,
        retried=len(retry),
        records=result.stats.get("records"),
        seconds=stats["seconds"],
        children=tuple(result.children),
    )


def recorded_children(stats: dict) -> list[Shard]:
    """The shards a committed shard handed back, from its recorded stats."""
    return [Shard(shard_id, spec) for shard_id, spec in stats.get(CHILDREN) or []]


def _run_shard(job: Job, shard: Shard, context: ShardContext) -> ShardResult:
    """``job.run_shard``, with a ``sys.exit`` in the job's code made an error naming the shard: it
    would otherwise end the driver (or a worker) with that exit code and no word."""
    try:
        return job.run_shard(shard, context)
    except SystemExit as stop:
        raise PipelineError(
            f"the job's code called sys.exit({stop.code!r}): a shard must return its tables or raise an "
            "error. The committed shards are kept"
        ) from None


def _recorded_stats(
    job: Job, shard: Shard, result: ShardResult, fingerprint: str | None, node: str, started: float
) -> dict:
    """The stats a shard's files record: the job's counts, its records to retry and its input's
    checksum (computed here when the job did not return it), then where and when it ran."""
    stats: dict = {**result.stats, RETRY: result.retry} if result.retry else dict(result.stats)
    if result.children:
        stats[CHILDREN] = [[child.id, dict(child.spec)] for child in result.children]
    fingerprint = result.input_fingerprint or fingerprint
    if fingerprint is None and job.inputs():
        fingerprint = job.input_fingerprint(shard)
    if fingerprint is not None:
        stats[INPUT_FINGERPRINT] = fingerprint
    return {
        **stats,
        "node": node,
        "seconds": round(time.monotonic() - started, 3),
        "committed_at": round(time.time(), 3),
    }


def _refuse_other_code(job: Job, store: ShardStore, node: str) -> None:
    """A worker whose installed code differs from the driver's must not commit under its name.
    Only the installed part is compared: code that is not installed (a script, a notebook cell)
    came with the job, pickled by value, and was hashed on the driver."""
    here, drivers = installed_part(job), installed_part(store.provenance.version)
    if here != drivers:
        raise CodeMismatchError(
            f"node {node} runs other code than the driver (code version {here}, the driver's "
            f"{drivers}): install the same batchenum (and numba, numpy, pyarrow) on every "
            "node, or let the code travel with the job (ray job submit --working-dir .)"
        )
