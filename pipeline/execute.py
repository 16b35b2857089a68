"""Run a job end to end: plan, reuse committed shards, compute the rest, merge, write tables."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from batchenum.pipeline.attempt import INPUT_FINGERPRINT, Attempt, recorded_children
from batchenum.pipeline.checkpoint import SaveWatch
from batchenum.pipeline.codeversion import code_version
from batchenum.pipeline.contract import check_plan, checked_params
from batchenum.pipeline.job import Job, Shard, StreamedTable
from batchenum.pipeline.lazy_table import LazyTable
from batchenum.pipeline.lease import Lease
from batchenum.pipeline.names import check_job_names
from batchenum.pipeline.params import SpokenError, literal
from batchenum.pipeline.parquet_format import Provenance
from batchenum.pipeline.progress import Progress
from batchenum.pipeline.run_options import RunOptions
from batchenum.pipeline.runner import Executor
from batchenum.pipeline.shard_store import SHARDS_DIR, ShardProblemKind, ShardStore, params_change
from batchenum.pipeline.storage import STORAGE_TIMEOUT, TMP_MARK, NotWritableError, Storage, StorageError
from batchenum.pipeline.table_commit import (
    PartTask,
    PlannedPart,
    StagedTables,
    complete_commit,
    final_params,
    part_plan,
    write_part,
)
from batchenum.pipeline.table_merge import MERGE_DIR, MergeTask, merge_table, run_merge_task

__all__ = ["RunOptions", "RunResult", "run_job", "code_version", "expected_work"]

_DAMAGE_LINES = 5  # damaged or stale shards reported one by one; the rest are counted
_SHARE_THREADS = 8  # parts taken over or written at once by the driver: links and copies wait on the store
# A merged table of at most this many rows is merged by the driver's threads (each holding one range
# of it) unless Ray is up anyway; a larger one by Ray tasks, the private Ray kept for them: about
# 100 MB of driver memory at most, against the seconds a Ray costs to start (docs/design.md, "Tables
# merged by partition").
DRIVER_MERGE_ROWS = 1 << 18


@dataclass
class RunResult:
    tables: dict[str, Any]  # final tables: LazyTable (merged), StreamedTable, or the DataFrames finalize made
    paths: dict[str, str]  # where each was written
    shards: int
    reused: int
    recomputed: list[str] = field(default_factory=list)  # shards whose committed files were not reused
    seconds: float = 0.0
    totals: dict[str, int] = field(default_factory=dict)  # stats the shards recorded, summed
    location: str = ""  # the job folder, as a path or URI
    input_changed: list[str] = field(default_factory=list)  # recomputed since their input bytes changed
    code_changed: list[str] = field(default_factory=list)  # recomputed since the job's code changed
    params_changed: list[str] = field(default_factory=list)  # recomputed since the parameters changed
    params_change: str = ""  # how: "max_steps 10000 -> 5"
    code_change: str = ""  # what: "the job's file or a module it imports" (codeversion.code_change)


def run_job(job: Job, options: RunOptions, progress: Progress | None = None) -> RunResult:
    check_job_names(job)  # a name set after the class's definition (on the object, say): nothing written yet
    progress = progress or Progress(job.name)
    progress.ray = not options.serial
    progress.kernels = any("warm" in vars(cls) for cls in type(job).__mro__ if cls is not Job)  # kernels to warm
    started = time.monotonic()
    params = checked_params(job)  # provenance must be JSON: fail early, not in a worker
    store = ShardStore(
        _output_storage(options.out, options.storage_timeout), job, Provenance(job.name, code_version(job), params)
    )
    store.storage.refuse_links(store.storage.root)  # the job folder itself, before its lease is written
    try:
        return _run_leased(job, store, options, progress, started)
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM (pipeline/cli.py): say what a rerun reuses
        # the same exception goes on up (it may be a real Ctrl-C), so it carries the count as an extra
        # attribute, which pipeline/cli.py reads with getattr
        stop.committed_shards = _committed_shards(store, _shard_tables(job))  # type: ignore[attr-defined]
        raise


def _run_leased(job: Job, store: ShardStore, options: RunOptions, progress: Progress, started: float) -> RunResult:
    with Lease(store.storage, say=progress.stage):  # one run per job folder; cleanup is then safe
        _refuse_to_replace_other_results(store, options.overwrite)
        removed = store.remove_temporaries()
        if removed:
            progress.stage(f"removed {removed} temporary files left by an interrupted run")
        completed = complete_commit(store.storage)
        if completed:
            progress.stage(f"completed the commit of run {completed}'s tables, which an interruption had stopped")
        with Executor(options.execution(), progress.stage) as executor:
            return _run_holding_the_folder(job, store, executor, progress, started)


def _run_holding_the_folder(
    job: Job, store: ShardStore, executor: Executor, progress: Progress, started: float
) -> RunResult:
    planned = _plan(job, store, executor, progress)
    run = {"started_at": round(time.time(), 3), "host": socket.gethostname(), "pid": os.getpid()}
    store.write_plan(planned, run)
    children: dict[str, tuple[Shard, ...]] = {}  # shards handed back, by the id of the shard that did
    pending, reused, damaged, (code_changed, code_change), (params_changed, params_change) = _partition_committed(
        job, store, planned, progress, children
    )
    shards = _tree_order(planned, children)
    verify = frozenset(shard.id for shard in reused if job.inputs())
    pending += [shard for shard in reused if shard.id in verify]
    reused = len(reused) - len(verify)
    progress.stage(
        f"{len(shards)} shard{'' if len(shards) == 1 else 's'}: {reused + len(verify)} committed"
        + (f" ({len(verify)} to check against their input where they would run)" if verify else "")
        + f", {len(pending) - len(verify)} to compute"
        + (f" ({len(damaged)} damaged or stale, recomputed)" if damaged else "")
    )
    nodes, still_current, changed = _compute(
        job, store, pending, len(shards), reused, executor, progress, verify, children
    )
    reused += still_current
    if children:
        shards = _tree_order(planned, children)
        store.write_plan(shards, run)  # so that status counts the handed-back shards too

    totals, rows, shard_rows, fingerprints = _check_complete(job, store, shards, nodes)
    if not _merge_wants_ray(job, rows):
        executor.ray.release()  # in the background: the driver writes its tables meanwhile
    progress.stage("merging shard outputs")
    ids = [shard.id for shard in shards]
    merged = _merge(job, store, executor, ids, shard_rows, progress)
    streamed = {name: StreamedTable(rows[name]) for name in job.streamed_tables}
    job.check_totals({**merged, **streamed}, totals)
    staged = StagedTables(store)
    final = job.finalize(dict(merged), store.storage)
    paths = {name: _stage_final(staged, name, table) for name, table in final.items()}
    for name, text in job.side_files(final, store.storage).items():
        staged.write_side_file(name, text)
    for name in job.streamed_tables:
        paths[name] = _stage_streamed(staged, executor, name, ids, shard_rows[name])
        final[name] = StreamedTable(rows[name], paths[name])
    executor.ray.release()
    staged.commit(_run_identity(store, staged.run_id, shards, fingerprints, totals))
    store.storage.delete_dir(store.storage.join(MERGE_DIR))  # its parts are the tables' now
    final.update({name: staged.committed(name, table) for name, table in final.items() if isinstance(table, LazyTable)})
    progress.stage("wrote " + ", ".join(sorted(paths.values())))
    return RunResult(
        tables=final,
        paths=paths,
        shards=len(shards),
        reused=reused,
        recomputed=damaged + changed,
        seconds=time.monotonic() - started,
        totals=totals,
        location=store.where,
        input_changed=changed,
        code_changed=code_changed,
        code_change=code_change,
        params_changed=params_changed,
        params_change=params_change,
    )


def _stage_final(staged: StagedTables, name: str, table: Any) -> str:
    """Stage a table ``finalize`` returned: a merged table as it is (its parts shared, no row read
    here), one the job built (a pandas DataFrame) written whole."""
    if isinstance(table, LazyTable):
        return staged.share_parts(name, table.paths, table.part_rows)
    return staged.write_final(name, table)


def _stage_streamed(staged: StagedTables, executor: Executor, name: str, ids: list[str], rows: dict[str, int]) -> str:
    """Stage streamed table ``name`` (``part_plan``): a shard large enough to be a part is taken over
    by the driver's threads (a link or server-side copy: no row read); runs of smaller shards are
    grouped into parts of ``PART_ROWS`` rows, each written by a task where the run's Ray runs, else by
    the driver's threads.  A grouped table's parts are runs of its values (``value_groups``), each
    merged by such a task.  The driver then checks that the parts follow one another (docs/design.md,
    "The tables")."""
    if staged.job.table_spec(name).partition is not None:  # the catalogue: merged one n at a time by tasks
        groups = staged.value_groups(name, ids)
        plan = [PlannedPart(False, ids)] * len(groups)
        written = [PartTask(staged, name, index, tuple(ids), values) for index, values in enumerate(groups)]
    else:
        plan = part_plan(ids, rows)
        written = [
            PartTask(staged, name, index, tuple(part.shards)) for index, part in enumerate(plan) if not part.taken_over
        ]
    taken = [(index, part.shards[0]) for index, part in enumerate(plan) if part.taken_over]
    threads = max(1, min(len(written) + len(taken), _SHARE_THREADS))
    with ThreadPoolExecutor(threads, "batchenum-part") as pool:
        shared = [pool.submit(staged.take_over, name, index, shard_id) for index, shard_id in taken]
        if written and not executor.options.serial and (executor.ray.connected or executor.on_cluster):
            parts = executor.ray.map(write_part, written)
        else:
            parts = list(pool.map(write_part, written))
        by_index = {task.index: part for task, part in zip(written, parts)}
        by_index.update({index: future.result() for (index, _), future in zip(taken, shared)})
    return staged.add_parts(name, [by_index[index] for index in range(len(plan))])


def _run_identity(
    store: ShardStore, run_id: str, shards: list[Shard], fingerprints: list[str], totals: dict[str, int]
) -> dict[str, Any]:
    """What the manifest says about the run that wrote the tables: job, parameters, code version,
    the input (one checksum over the shards' input checksums, in plan order; None without input),
    the shards and the totals they recorded, and where and when it ran."""
    input_checksum = hashlib.sha256("\n".join(fingerprints).encode()).hexdigest()[:32] if fingerprints else None
    return {
        "job": store.provenance.job,
        "params": store.provenance.params,
        "code_version": store.provenance.version,
        "input": input_checksum,
        "shards": len(shards),
        "totals": totals,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "run_id": run_id,
    }


def _plan(job: Job, store: ShardStore, executor: Executor, progress: Progress) -> list[Shard]:
    """The job's shards.  On a cluster the executor connects first, so that the plan follows the
    cluster's size, and every node must see the run's local files before any task reads them."""
    context = executor.plan_context(job)
    if executor.on_cluster:
        _check_cluster_sees_files(job, store, executor, progress)
    shards = job.plan(context)
    check_plan(job, shards)
    if executor.ray.tasks_mapped:
        progress.stage(f"planned with {executor.ray.tasks_mapped} tasks on {executor.ray.where}")
    return shards


def _refuse_to_replace_other_results(store: ShardStore, overwrite: bool) -> None:
    """Final tables made with other input or parameters are replaced only with ``overwrite``; the
    message names the options in the caller's words (pipeline/cli.py re-spells it for the CLI)."""
    found = final_params(store.storage, store.job)
    expected = store.provenance.final_metadata("")["params"]
    if found is None or found == expected or overwrite or _recorded_fewer(found, expected):
        return
    raise SpokenError(
        literal(f"{store.where} holds the tables of another run (parameters {params_change(found, expected)}). ")
        + "Give {out=} another folder to keep both, or {overwrite=True} to replace this job's tables."
    )


def _recorded_fewer(found: str, expected: str) -> bool:
    """Whether tables recording ``found`` were written by an older spelling of the job that recorded
    fewer of its parameters, the others equal: their values are unknown, so every shard is
    computed again (``_partition_committed`` says why), neither reused nor refused."""
    try:
        before, after = json.loads(found), json.loads(expected)
    except ValueError:
        return False
    return isinstance(before, dict) and before.keys() < after.keys() and all(after[k] == v for k, v in before.items())


def _output_storage(location: str, timeout: float = STORAGE_TIMEOUT) -> Storage:
    """The ``out`` location, checked writable before anything is computed."""
    try:
        out = Storage.at(location, timeout)
        out.check_writable()
    except StorageError as error:
        advice = ", or give {out=} another place" if isinstance(error, NotWritableError) else ""
        raise SpokenError("{out}: " + literal(str(error)) + advice) from None
    return out


def _check_complete(
    job: Job, store: ShardStore, shards: list[Shard], nodes: dict[str, str]
) -> tuple[dict, dict, dict, list[str]]:
    """Every planned shard must be committed and readable from here before any final table is
    written; returns the shards' recorded stats, summed, the rows of each shard table, the rows of
    each table in each shard ({table: {shard id: rows}}), and the input checksums the shards
    recorded, in plan order.
    Otherwise PipelineError names each missing shard and the node it ran on."""
    tables = _shard_tables(job)
    missing: list[str] = []
    totals: dict[str, int] = {}
    rows, fingerprints = dict.fromkeys(tables, 0), []
    by_shard: dict[str, dict[str, int]] = {name: {} for name in tables}
    for shard in shards:
        found = store.committed_footers(shard, tables)  # the merge checks the pages
        if found.problem is not None:
            missing.append(f"{shard.id} (ran on {nodes.get(shard.id, 'an unknown node')}: {found.problem})")
            continue
        stats = found.stats
        for name, value in stats.items():
            if isinstance(value, int):
                totals[name] = totals.get(name, 0) + value
        if isinstance(stats.get(INPUT_FINGERPRINT), str):
            fingerprints.append(stats[INPUT_FINGERPRINT])
        for name in tables:
            rows[name] += found.rows[name]
            by_shard[name][shard.id] = found.rows[name]
    if missing:
        listed = "; ".join(missing[:_DAMAGE_LINES]) + (
            f"; and {len(missing) - _DAMAGE_LINES} more" if len(missing) > _DAMAGE_LINES else ""
        )
        raise SpokenError(
            literal(
                f"{len(missing)} of {len(shards)} shards are not committed where this driver can read them "
                f"({store.where}): {listed}. No table was written. The nodes named wrote somewhere this "
                "driver does not see: use a folder every node mounts at the same path, or object storage ("
            )
            + "{out=s3://bucket/prefix}); then run the same command again to reuse what is committed."
        )
    return totals, rows, by_shard, fingerprints


def _partition_committed(
    job: Job, store: ShardStore, shards: list[Shard], progress: Progress, children: dict[str, tuple[Shard, ...]]
):
    """Split shards into those to compute and those committed with matching provenance; also the
    ids of the committed shards not reused, and of those among them that other code computed.  The
    shards a committed one handed back (``Job.hands_back``) are checked in turn and recorded in
    ``children``."""
    tables = _shard_tables(job)
    pending, damaged, other_runs, code_changed = [], [], [], []
    changes: dict[str, None] = {}  # how the parameters changed, each way once, in shard order
    code_changes: dict[str, None] = {}  # which part of the code version, likewise
    shards = list(shards)
    for shard in shards:  # grows with the shards committed ones handed back
        problem = store.check_shard(shard, tables)
        if problem is None:
            if job.hands_back:
                children[shard.id] = tuple(recorded_children(store.recorded_stats(shard)))
                shards += children[shard.id]
            continue
        pending.append(shard)
        if problem.kind is ShardProblemKind.OTHER_PARAMETERS:
            other_runs.append(shard.id)
            changes[problem.change] = None
        elif problem.kind is ShardProblemKind.STALE and problem.field == "code":
            code_changed.append(shard.id)
            code_changes[problem.change or "the job's code"] = None
        elif problem.kind is not ShardProblemKind.MISSING:
            damaged.append(shard.id)
            if len(damaged) <= _DAMAGE_LINES:
                progress.stage(f"shard {shard.id} will be recomputed: {problem}")
    params_change, code_change = "; ".join(changes), "; ".join(code_changes)
    _say_why_recomputed(progress, len(damaged), (len(other_runs), params_change), (len(code_changed), code_change))
    pending_ids = {shard.id for shard in pending}
    committed = [shard for shard in shards if shard.id not in pending_ids]
    code = (code_changed, code_change)
    return pending, committed, damaged + other_runs + code_changed, code, (other_runs, params_change)


def _say_why_recomputed(progress: Progress, damaged: int, params: tuple[int, str], code: tuple[int, str]) -> None:
    """The lines that say why committed shards are computed again (the first damaged ones were
    named one by one already): ``params`` and ``code`` are how many shards their change concerns
    and what changed."""
    (other_runs, params_change), (code_changed, code_change) = params, code
    if damaged > _DAMAGE_LINES:
        progress.stage(f"... and {damaged - _DAMAGE_LINES} more damaged or stale shards")
    if other_runs:
        counted = "1 shard was" if other_runs == 1 else f"{other_runs} shards were"
        progress.stage(
            f"{counted} committed with other parameters ({params_change}: a change of parameters, not damage); "
            "computing them anew"
        )
    if code_changed:
        counted = "1 shard was" if code_changed == 1 else f"{code_changed} shards were"
        progress.stage(f"{counted} computed by other code ({code_change} changed since); computing them anew")


def _tree_order(planned: list[Shard], children: dict[str, tuple[Shard, ...]]) -> list[Shard]:
    """The planned shards, each followed by the shards it handed back (and theirs), whatever order
    they finished in."""
    ordered: list[Shard] = []
    stack = list(reversed(planned))
    while stack:
        shard = stack.pop()
        ordered.append(shard)
        stack += reversed(children.get(shard.id, ()))
    return ordered


def _committed_shards(store: ShardStore, tables: list[str]) -> int | None:
    """How many shards have every table committed in ``store`` (None when the store does not answer
    within a few seconds)."""
    quick = store.storage.copy(timeout=5.0)
    try:
        ids = None
        for table in tables:
            folder = quick.join(SHARDS_DIR, table)
            names = {path[len(folder) + 1 :].split("/", 1)[0] for path in quick.list_files(folder)}
            found = {name[: -len(".parquet")] for name in names if name.endswith(".parquet") and TMP_MARK not in name}
            ids = found if ids is None else ids & found
        return len(ids or ())
    except (StorageError, OSError):
        return None


def _shard_tables(job: Job) -> list[str]:
    """The tables every shard writes."""
    return list(job.shard_tables or [spec.name for spec in job.tables])


def _compute(
    job: Job,
    store: ShardStore,
    pending: list[Shard],
    total: int,
    reused: int,
    executor: Executor,
    progress: Progress,
    verify: frozenset,
    children: dict[str, tuple[Shard, ...]],
) -> tuple[dict[str, str], int, list[str]]:
    """Compute the pending shards (checking those in ``verify`` against their input first), and
    those they hand back (recorded in ``children``); returns {shard id: the node it ran on}, how
    many checked shards were reused, and the ids of those whose input had changed."""
    nodes: dict[str, str] = {}
    still_current = [0]  # checked against their input and reused
    changed: list[str] = []
    if not pending:
        return nodes, 0, changed
    lock = threading.Lock()

    work = expected_work(job, pending)
    watch = SaveWatch(store.storage, time.time())

    def on_done(shard: Shard, attempt: Attempt) -> None:  # called from the driver's threads too
        with lock:
            nodes[shard.id] = attempt.node
            if attempt.children:
                children[shard.id] = attempt.children
                progress.add_shards(len(attempt.children), _more_work(work, job, attempt.children))
            if attempt.retried:
                progress.stage(
                    f"shard {shard.id}: {attempt.retried} records whose outcome depended on the run "
                    "(timeouts) computed again"
                )
            if attempt.reused:
                still_current[0] += 1
            elif attempt.input_changed:
                changed.append(shard.id)
            expected = work.get(shard.id) if work else None
            before = (expected or 0.0) * watch.done_before.get(shard.id, 0.0)
            progress.shard_done(attempt.records, attempt.seconds, expected, shard.id, before)

    progress.watch_saves(partial(_saves_with_work, watch, work))
    progress.start_shards(total, reused, sum(work.values()) if work else None)
    try:
        executor.run(job, pending, store, on_done, verify, release=False)  # the merge may want Ray
    finally:
        progress.finish_shards()
    if changed:  # one line for the run: an append or an edit changes many shards' bytes at once
        listed = ", ".join(sorted(changed)[:_DAMAGE_LINES]) + (", ..." if len(changed) > _DAMAGE_LINES else "")
        progress.stage(f"input changed: {_plural(len(changed), 'shard')} recomputed ({listed})")
    return nodes, still_current[0], changed


def _saves_with_work(watch: SaveWatch, work: dict[str, float] | None) -> list[dict]:
    """The watch's new saves; those that say how far their shard is (``done``) with the expected
    work of it done by this run (``work_done``) and by earlier ones (``work_before``)."""
    saves = watch.new_saves()
    for save in saves:
        expected = work.get(save["shard"]) if work else None
        if expected is not None and save.get("done") is not None:
            before = watch.done_before.get(save["shard"], 0.0)
            save["work_done"] = max(0.0, save["done"] - before) * expected
            save["work_before"] = before * expected
    return saves


def expected_work(job: Job, shards: Iterable[Shard]) -> dict[str, float] | None:
    """{shard id: the job's expected work} (Job.shard_work) when it gives one for every shard and
    they add up to more than nothing; None: progress counts shards."""
    work: dict[str, float] = {}
    for shard in shards:
        value = job.shard_work(shard)
        if value is None or not value >= 0:  # (not >= 0: NaN too)
            return None
        work[shard.id] = float(value)
    return work if sum(work.values()) > 0 else None


def _more_work(work: dict[str, float] | None, job: Job, shards: Iterable[Shard]) -> float | None:
    """Adds handed-back shards' expected work to ``work``; returns its sum, or None (progress then
    counts shards)."""
    more = expected_work(job, shards) if work is not None else None
    if work is None or more is None:
        return None
    work.update(more)
    return sum(more.values())


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _check_cluster_sees_files(job: Job, store: ShardStore, executor: Executor, progress: Progress) -> None:
    """On a cluster, every node must see the local folders and files this run uses."""
    folders = {"out": store.storage.root} if store.storage.local else {}
    files = {source.root: source.stat(source.root) for source in job.inputs() if source.local}
    if folders or files:
        seen = [*(["the output folder"] if folders else []), *(["the input files"] if files else [])]
        progress.stage("checking that every node sees " + " and ".join(seen))
        executor.ray.check_shared_folders(folders, files)


def _merge(
    job: Job, store: ShardStore, executor: Executor, ids: list[str], rows: dict[str, dict[str, int]], progress: Progress
) -> dict[str, LazyTable]:
    """Each shard table that is not streamed merged by partition (pipeline/table_merge.py):
    deduplicated on its key, sorted, written as parts; returned as ``LazyTable``s for ``finalize``."""
    merged = {}
    for name in _shard_tables(job):
        if name in job.streamed_tables:
            continue
        total = sum(rows[name].values())
        paths, part_rows = merge_table(store, name, ids, total, _merge_runner(executor, job, total), progress.stage)
        merged[name] = LazyTable(name, store.storage, paths, part_rows)
    return merged


def _merge_wants_ray(job: Job, rows: dict[str, int]) -> bool:
    """Whether a merged table has more than ``DRIVER_MERGE_ROWS`` rows: it is then merged by Ray
    tasks, so the private Ray the shards used is kept for them."""
    return any(rows[name] > DRIVER_MERGE_ROWS for name in _shard_tables(job) if name not in job.streamed_tables)


def _merge_runner(executor: Executor, job: Job, rows: int) -> Callable[[list[MergeTask]], list]:
    """How a merge's tasks run: as Ray tasks when Ray is up or the table has more than
    ``DRIVER_MERGE_ROWS`` rows (so that the driver holds none of it); else in this process, by the
    driver's threads (by this thread with --serial)."""

    def run(tasks: list[MergeTask]) -> list:
        if not tasks:
            return []
        serial = executor.options.serial
        if not serial and (executor.ray.connected or executor.on_cluster or rows > DRIVER_MERGE_ROWS):
            return executor.ray.map(run_merge_task, tasks, job)
        if serial:
            return [run_merge_task(task) for task in tasks]
        with ThreadPoolExecutor(min(len(tasks), os.cpu_count() or 1), "batchenum-merge") as pool:
            return list(pool.map(run_merge_task, tasks))

    return run
