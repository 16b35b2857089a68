"""``batchenum status``: what every job folder under an output location holds, read from the files
alone, so it works while a run is in progress (from another terminal, for a ``ray job submit`` job)
and after an interrupted one.  It reads the plan a run records when it starts and the footers of
the committed files, never their rows.
"""

from __future__ import annotations

import json
import os
import posixpath
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

from batchenum.pipeline.attempt import CHILDREN
from batchenum.pipeline.checkpoint import done_before_run, saved_checkpoints
from batchenum.pipeline.codeversion import code_change, installed_part
from batchenum.pipeline.lease import LEASE_FILE, dead_reason, lease_problem, stale_after
from batchenum.pipeline.parquet_format import DamagedFileError, decode_metadata, read_metadata, read_verified
from batchenum.pipeline.progress import (
    UNEVEN_FROM_SECONDS,
    WEIGHED_FROM,
    counted_down,
    uneven,
    weighed_time_left,
    work_share_done,
)
from batchenum.pipeline.shard_store import (
    PLAN_FILE,
    SHARDS_DIR,
    ShardCheck,
    ShardProblem,
    ShardProblemKind,
    inspect_shard,
    is_file_name,
    plan_problem,
)
from batchenum.pipeline.storage import TMP_MARK, Storage
from batchenum.pipeline.table_commit import GUARD_FILE, MANIFEST_FILE, STAGED_DIR, manifest_problem
from batchenum.pipeline.table_merge import MERGE_DIR

# A final table file up to this size has every page checked against its checksum; a larger one only
# its footer (status must stay quick on a catalogue of many GB; readers check the pages they read).
VERIFY_BYTES = 64 << 20

__all__ = ["JobStatus", "Survey", "job_statuses", "render", "survey", "to_json"]


@dataclass
class JobStatus:
    """What one job folder holds."""

    name: str
    where: str
    plan: dict[str, Any] | None  # the plan the last run recorded (None: no run recorded one)
    committed: list[str] = field(default_factory=list)  # shards committed for every table of the plan
    stale: list[str] = field(default_factory=list)  # committed by another code version or parameters
    damaged: list[str] = field(default_factory=list)  # files whose footer cannot be read
    seconds: list[float] = field(default_factory=list)  # compute seconds of the shards the last run committed
    checkpoints: list[dict] = field(default_factory=list)  # saved states of unfinished shards (checkpoint.py)
    commit_times: list[float] = field(default_factory=list)  # when the last run committed them
    last_commit: float | None = None  # the latest commit of any shard
    tables: list[dict[str, Any]] = field(default_factory=list)  # final tables: name, rows, params, version
    lease: dict[str, Any] | None = None  # the lease of a run writing there now (or of a dead one)
    dead: str | None = None  # why the lease's run is dead (None while it may be alive)
    unplanned: list[str] = field(default_factory=list)  # shard files the plan does not name
    handed_back: list[str] = field(default_factory=list)  # shards committed ones handed back, not in the plan yet
    problems: list[str] = field(default_factory=list)  # damaged _plan.json or _lease.json, what to do
    manifest: dict[str, Any] | None = None  # the run that wrote the tables (_manifest.json)
    shard_bytes: int = 0  # what the shard store holds on disk: every file under _shards/
    shared_bytes: int = 0  # of which also held by a table (a part taken over by a hard link)
    shard_files: int = 0
    merges: list[dict[str, Any]] = field(default_factory=list)  # merges under way: table, round, ranges, written
    # the installed part of the code version this machine's job of the plan's name has (the CLI sets
    # it; the status of a folder knows the plan, not the job): None when not known here
    installed_code: str | None = None
    # {shard id: expected work} of the plan's shards (Job.shard_work, set by the CLI from the job
    # installed here), for an estimate weighed by it; None: shards are counted
    expected_work: dict[str, float] | None = None
    last_run_shards: list[str] = field(default_factory=list)  # the shards the last run committed

    @property
    def planned(self) -> int | None:
        return len(self.plan["shards"]) + len(self.handed_back) if self.plan else None


@dataclass
class Survey:
    """What ``batchenum status`` found under a location."""

    jobs: list[JobStatus]  # the job folders, the location itself or one or two levels below it
    others: list[str] = field(default_factory=list)  # folders below it that no batchenum run wrote


def survey(location: str) -> Survey:
    """The job folders at ``location``: the location itself when a run wrote it, else the folders
    directly below it that a run wrote, and below each other folder the job folders one level deeper
    (``extended/palago`` under ``results``).  A folder is a job folder by batchenum's own marker
    files (``job_markers``), never by holding Parquet files."""
    out = Storage.at(location)
    if _is_job_folder(out):
        return Survey(_present([_job_status(out, _basename(out.root))]))
    found = Survey([])
    for name in _subfolders(out):
        folder = out.child(name)
        if _is_job_folder(folder):
            found.jobs += _present([_job_status(folder, name)])
            continue
        nested = [inner for inner in _subfolders(folder) if _is_job_folder(folder.child(inner))]
        found.jobs += _present([_job_status(folder.child(inner), f"{name}/{inner}") for inner in nested])
        if not nested:
            found.others.append(name)
    return found


def job_statuses(location: str) -> list[JobStatus]:
    """The status of every job folder ``survey`` finds at ``location``."""
    return survey(location).jobs


def _subfolders(out: Storage) -> list[str]:
    """The names of the folders directly below ``out`` but ours (``_inputs/`` holds batches given as
    data, ``_shards/`` and the like belong to a job folder)."""
    names = [_basename(path) for path in out.list_dirs(out.root)]
    return [name for name in names if not name.startswith(("_", "."))]


def _present(statuses: list[JobStatus | None]) -> list[JobStatus]:
    return [status for status in statuses if status is not None]


def _is_job_folder(folder: Storage) -> bool:
    """Whether a batchenum run wrote ``folder``: it holds a plan, lease, manifest, guard file or
    shard store, or a top-level Parquet file whose footer names a batchenum job (a committed table
    copied without its side files, as in a fresh clone's ``results/palago``)."""
    if any(folder.exists(folder.join(name)) for name in (PLAN_FILE, MANIFEST_FILE, LEASE_FILE, GUARD_FILE, SHARDS_DIR)):
        return True
    for path in folder.list_files(recursive=False):
        if path.endswith(".parquet") and TMP_MARK not in path:
            try:
                if "job" in read_metadata(path, folder.fs):
                    return True
            except Exception:  # not a Parquet file of ours, or damaged: no evidence either way
                continue
    return False


def _job_status(folder: Storage, name: str) -> JobStatus | None:
    sizes = _file_sizes(folder)
    files = sorted(sizes)
    plan, plan_error = _read_json(folder, PLAN_FILE)
    if plan is not None and plan_problem(plan):
        plan, plan_error = None, plan_problem(plan)
    shard_files = [path for path in files if _top(folder, path) == SHARDS_DIR]
    finals = [
        path
        for path in files
        if path.endswith(".parquet") and not _top(folder, path).startswith("_") and _top(folder, path) != GUARD_FILE
    ]
    if plan is None and not shard_files and not finals:
        return None
    status = JobStatus(name, folder.display_root, plan)
    status.shard_files, status.shard_bytes = len(shard_files), sum(sizes[path] for path in shard_files)
    status.shared_bytes = _linked_bytes(folder, shard_files, sizes)
    status.merges = _merges(folder, [path for path in files if _top(folder, path) == MERGE_DIR])
    if plan_error:
        status.problems.append(f"{PLAN_FILE} is damaged ({plan_error}); the next run writes it anew")
    manifest, manifest_error = _read_json(folder, MANIFEST_FILE)
    manifest_error = manifest_error or (manifest_problem(manifest) if manifest is not None else None)
    if manifest_error:
        status.problems.append(
            f"{MANIFEST_FILE} is damaged ({manifest_error}); delete it and run the same "
            "command again to write the tables anew"
        )
    else:
        status.manifest = manifest
    lease, lease_error = _read_json(folder, LEASE_FILE)
    lease_error = lease_error or (lease_problem(lease) if lease is not None else None)
    if lease_error:
        status.problems.append(
            f"{LEASE_FILE} is damaged ({lease_error}); if no run is writing to {folder.display_root}, remove it"
        )
    elif lease is not None:
        status.lease, status.dead = lease, dead_reason(lease)
    _read_shards(status, folder, shard_files)
    status.checkpoints = [c for c in saved_checkpoints(folder) if c["shard"] not in status.committed]
    status.tables = _group_parts([_final_table(folder, path) for path in finals])
    if status.manifest is not None:
        status.problems.extend(_tables_not_in_manifest(folder, status.manifest, status.tables))
    status.problems.extend(
        f"{folder.join(name)} is a symbolic link, where batchenum keeps its own folder: what is "
        "counted there is not the run's. Remove the link and run the same command again"
        for name in (SHARDS_DIR, STAGED_DIR)
        if folder.kind(folder.join(name)) == "link"
    )
    return status


def _tables_not_in_manifest(folder: Storage, manifest: dict[str, Any], tables: list[dict[str, Any]]) -> list[str]:
    """Each table in place that is not the one the manifest names: a link (its rows are someone
    else's, and were never the run's), or rows other than the manifest's."""
    found = {table["name"]: table for table in tables}
    problems = []
    for _name, entry in sorted(manifest["tables"].items()):
        path = folder.join(entry["path"].rstrip("/"))
        kind = folder.kind(path)
        if kind == "link":
            problems.append(
                f"{path} is a symbolic link, not the table the manifest names: its rows are not the "
                "run's. Remove the link and run the same command again to rebuild the table"
            )
            continue
        rows = found.get(entry["path"], {}).get("rows")
        if kind != "missing" and rows is not None and rows != entry.get("rows"):
            problems.append(
                f"{entry['path']}: {rows:,} rows where the manifest says {entry.get('rows'):,}: not the "
                f"table run {manifest['run_id']} committed. Run the same command again to rebuild it"
            )
    return problems


def _file_sizes(folder: Storage) -> dict[str, int]:
    """{path: bytes} of every file below the job folder but temporaries."""
    import pyarrow.fs as pafs

    selector = pafs.FileSelector(folder.root, recursive=True, allow_not_found=True)
    return {
        info.path: info.size or 0
        for info in folder.fs.get_file_info(selector)
        if info.type == pafs.FileType.File and TMP_MARK not in info.path
    }


def _merges(folder: Storage, files: list[str]) -> list[dict[str, Any]]:
    """The merges under way (or stopped) in ``_merge/<table>/<merge id>/``: each round's ranges, as
    its ``round-R.json`` says, and how many of them are written (pipeline/table_merge.py)."""
    found = []
    for path in files:
        parts = folder.relative(path).replace("\\", "/").split("/")
        if len(parts) != 4 or not (parts[3].startswith("round-") and parts[3].endswith(".json")):
            continue
        try:
            record = json.loads(folder.read_bytes(path))
            prefix = "part-" if record["final"] else "dedup-"
            written = sum(
                1
                for other in files
                if posixpath.dirname(other) == posixpath.dirname(path) and posixpath.basename(other).startswith(prefix)
            )
            found.append({"table": parts[1], "round": record["round"], "ranges": record["ranges"], "written": written})
        except (OSError, ValueError, KeyError, TypeError):  # being written, or not ours: nothing to show
            continue
    return sorted(found, key=lambda merge: (merge["table"], merge["round"]))


def _top(folder: Storage, path: str) -> str:
    """The first name of ``path`` below the job folder (a table's folder, ``_shards``, a file)."""
    return folder.relative(path).replace("\\", "/").split("/")[0]


def _group_parts(tables: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per final table: a folder of parts (``name/part-00000.parquet``...) summed."""
    grouped: dict[str, dict[str, Any]] = {}
    for table in tables:
        top, _, rest = table["name"].replace("\\", "/").partition("/")
        if not rest:
            grouped[top] = table
            continue
        entry = grouped.setdefault(top, {**table, "name": f"{top}/", "rows": 0, "parts": 0})
        entry["parts"] += 1
        entry["rows"] = None if entry["rows"] is None or table["rows"] is None else entry["rows"] + table["rows"]
        if table.get("damaged") and not entry.get("damaged"):
            entry["damaged"] = f"{rest}: {table['damaged']}"
    return list(grouped.values())


def _read_json(folder: Storage, name: str) -> tuple[Any, str | None]:
    """(the JSON in ``name``, None) or (None, why it cannot be read); (None, None) when absent."""
    path = folder.join(name)
    try:
        if not folder.exists(path):
            return None, None
        if not folder.is_file(path):
            return None, "not a file"
        return json.loads(folder.read_bytes(path)), None
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None, "not JSON"
    except OSError as error:
        return None, f"unreadable: {error}"


def _read_shards(status: JobStatus, folder: Storage, shard_files: list[str]) -> None:
    """Sort committed shard files into committed (every planned table there and current), stale
    and damaged, and collect their compute times.  A shard that a committed one handed back
    (``Job.hands_back``) is planned too: its parent's footer names it from the parent's commit on,
    while ``_plan.json`` gains it only when the run ends."""
    plan = status.plan or {}
    tables = plan.get("tables") or sorted({_relative_parts(folder, path)[1] for path in shard_files})
    by_shard: dict[str, dict[str, str]] = {}
    for path in shard_files:
        _, table, name = _relative_parts(folder, path)
        by_shard.setdefault(name.removesuffix(".parquet"), {})[table] = path
    # only the planned shards count: a file the plan does not name is no part of the run
    planned = set(plan["shards"]) if plan else set(by_shard)
    todo = sorted((shard_id for shard_id in by_shard if shard_id in planned), reverse=True)
    while todo:
        for child in _sort_shard(status, folder, todo.pop(), tables):
            if plan and child not in planned:  # without a plan every shard file counts already
                planned.add(child)
                status.handed_back.append(child)
                if child in by_shard:
                    todo.append(child)
    status.unplanned = sorted(shard_id for shard_id in by_shard if shard_id not in planned)
    for found in (status.committed, status.stale, status.damaged, status.handed_back):
        found.sort()


def _sort_shard(status: JobStatus, folder: Storage, shard_id: str, tables: list[str]) -> list[str]:
    """File shard ``shard_id`` under committed, stale or damaged (or nowhere, when it is not
    committed whole), note its compute time, and return the ids of the shards it handed back."""
    plan = status.plan or {}
    try:  # the store's own check, from the footers alone (status knows the plan, not the job)
        check = inspect_shard(folder, shard_id, tables, partial(_expected, plan, shard_id))
    except Exception:  # a link or a folder where a shard file belongs
        check = ShardCheck(ShardProblem(ShardProblemKind.DAMAGED, "not a shard file"))
    kind = check.problem.kind if check.problem is not None else None
    if kind in (ShardProblemKind.MISSING, ShardProblemKind.NOT_TOGETHER):  # not (yet) committed whole
        return []
    if kind in (ShardProblemKind.STALE, ShardProblemKind.OTHER_PARAMETERS):
        status.stale.append(shard_id)
        return []
    if kind is ShardProblemKind.DAMAGED:
        status.damaged.append(shard_id)
        return []
    status.committed.append(shard_id)
    stats = check.stats
    started = _as_number(plan.get("started_at", 0.0))
    committed_at, seconds = _as_number(stats.get("committed_at")), _as_number(stats.get("seconds", 0.0))
    if committed_at is not None:
        status.last_commit = max(status.last_commit or 0.0, committed_at)
        if started is not None and committed_at >= started and seconds is not None:
            status.seconds.append(seconds)
            status.commit_times.append(committed_at)
            status.last_run_shards.append(shard_id)
    return _children_named(stats.get(CHILDREN))


def _children_named(recorded: Any) -> list[str]:
    """The ids of the shards a committed shard recorded it handed back (``[id, spec]`` pairs, as
    pipeline/attempt.py writes them); any other value names none (a footer is not trusted)."""
    if not isinstance(recorded, list):
        return []
    return [pair[0] for pair in recorded if isinstance(pair, list) and pair and is_file_name(pair[0])]


def _expected(plan: dict[str, Any], shard_id: str, table: str) -> dict[str, str]:
    """The provenance a current file of table ``table`` of shard ``shard_id`` records, as far as the
    plan (``_plan.json``, written by the run) tells it: the job, code version and parameters of the
    last run; without a plan only the table and shard its path names."""
    expected = {"table": table, "shard": shard_id}
    if plan:
        expected.update(code=str(plan.get("version")), params=json.dumps(plan.get("params"), sort_keys=True))
        if "job" in plan:
            expected["job"] = plan["job"]
    return expected


def _as_number(value: object) -> float | None:
    """``value`` (parsed JSON) as a float when it is a number, None when it is anything else (a bool, NaN)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
        return float(value)
    return None


def _final_table(folder: Storage, path: str) -> dict[str, Any]:
    """A final table file's rows and provenance; its pages checked too when it is small enough
    (``VERIFY_BYTES``), its footer's row counts always."""
    name = folder.relative(path)
    try:
        import pyarrow.parquet as pq

        with folder.open_input(path) as handle:
            if handle.size() <= VERIFY_BYTES:
                table = read_verified(handle)
                rows, meta = table.num_rows, table.schema.metadata
            else:
                metadata = pq.ParquetFile(handle).metadata
                rows, meta = metadata.num_rows, metadata.metadata
                if rows != sum(metadata.row_group(k).num_rows for k in range(metadata.num_row_groups)):
                    raise DamagedFileError("its footer's row counts disagree")
    except Exception as error:  # damaged: never a row count read from it
        return {"name": name, "rows": None, "damaged": str(error).removeprefix("a Parquet file is ")}
    meta = decode_metadata(meta)
    return {"name": name, "rows": rows, "params": meta.get("params"), "version": meta.get("version")}


def _relative_parts(folder: Storage, path: str) -> tuple[str, str, str]:
    parts = folder.relative(path).replace("\\", "/").split("/")
    return parts[0], parts[1] if len(parts) > 2 else "", parts[-1]


def _basename(path: str) -> str:
    return posixpath.basename(path.replace("\\", "/").rstrip("/"))


# ------------------------------------------------------------------------------------ rendering


def render(statuses: list[JobStatus], now: float | None = None, others: Sequence[str] = ()) -> str:
    """Plain text, a few lines per job, then the folders that are not job folders (``others``)."""
    now = time.time() if now is None else now
    blocks = [_render_one(status, now) for status in statuses]
    if others:
        blocks.append(f"not job folders (no batchenum run wrote them): {', '.join(others)}")
    return "\n\n".join(blocks)


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _wall_seconds(status: JobStatus) -> float | None:
    """Seconds from the start of the last run to its last commit (None: no commit of that run)."""
    started = _as_number((status.plan or {}).get("started_at"))
    if not status.commit_times or started is None:
        return None
    return max(status.commit_times) - started


def _nothing_computed(status: JobStatus, now: float) -> str:
    """Why the last run committed no shard: it is still on its first ones, or it reused them all."""
    started = _as_number((status.plan or {}).get("started_at"))
    if _alive(status) and started:
        return f"the run under way (for {_ago(now - started)}) has committed no shard yet"
    return "the last run reused every shard it has"


def _last_run_work(status: JobStatus) -> str:
    """The shards the last run computed, the wall time they took and their compute time: the sum over
    shards that ran side by side, so larger than the wall time on several CPUs."""
    wall = _wall_seconds(status)
    said = f"the last run computed {_plural(len(status.seconds), 'shard')}"
    if wall is not None:
        said += f" in {wall:.1f} s of wall time"
    return said + f" ({sum(status.seconds):.1f} s of compute summed over its shards)"


def _plan_lines(status: JobStatus) -> list[str]:
    plan = status.plan
    if not plan:
        return []
    return [
        f"  parameters:  {json.dumps(plan.get('params'), sort_keys=True)}",
        f"  code:        version {plan.get('version')}{_installed_note(status)}",
        *_installed_lines(status),
        f"  last run:    started {_clock(plan.get('started_at'))} on {plan.get('host')} (pid {plan.get('pid')})",
    ]


def _matches_installed(status: JobStatus) -> bool | None:
    """Whether the last run's code is the code installed here (its installed part: a job's own file
    is not compared); None when either is unknown."""
    recorded = (status.plan or {}).get("version")
    if status.installed_code is None or not isinstance(recorded, str):
        return None
    return installed_part(recorded) == status.installed_code


def _installed_note(status: JobStatus) -> str:
    return " (the code installed here)" if _matches_installed(status) else ""


def _installed_lines(status: JobStatus) -> list[str]:
    """Whether a run with the code installed here reuses the shards: after an upgrade it computes
    every one again (the n = 60 count's 8 CPU-hours, say), which nothing else shows beforehand."""
    if _matches_installed(status) is not False:
        return []
    change = code_change(str((status.plan or {}).get("version")), status.installed_code or "")
    return [
        f"               installed here: {status.installed_code}, so a run from here computes every shard "
        f"again: {change} changed"
    ]


def _lease_lines(status: JobStatus, now: float) -> list[str]:
    if status.lease and status.dead is None:
        beat = now - float(status.lease["heartbeat_at"])
        return [
            f"  running:     host {status.lease.get('host')}, pid {status.lease.get('pid')}, "
            f"last heartbeat {_ago(beat)} ago"
        ]
    if status.lease:
        return [
            f"  stopped:     the run of host {status.lease.get('host')}, pid {status.lease.get('pid')} is dead "
            f"({status.dead}); the next run takes the folder over and reuses what is committed"
        ]
    return []


def _shard_line(status: JobStatus) -> str:
    total = status.planned
    if total is None and not status.shard_files:
        return "none here (no run recorded a plan in this folder: its tables alone were kept)"
    line = (
        f"{len(status.committed)}"
        + (f"/{total}" if total is not None else "")
        + f" shard{'' if (total if total is not None else len(status.committed)) == 1 else 's'} committed"
    )
    if status.plan and status.handed_back:
        line += f" ({len(status.handed_back)} of them handed back by committed shards, not yet in {PLAN_FILE})"
    if status.stale or status.damaged:
        line += f", {len(status.stale)} stale (other code, parameters or shard), {len(status.damaged)} damaged"
    if status.unplanned:
        line += (
            f"; {len(status.unplanned)} not in the plan, ignored ({', '.join(status.unplanned[:3])}"
            + (", ..." if len(status.unplanned) > 3 else "")
            + ")"
        )
    return line


def _progress_lines(status: JobStatus, now: float) -> list[str]:
    """The last commit, and the time left while a run is alive."""
    lines = []
    if status.last_commit:
        lines.append(
            f"  last commit: {_clock(status.last_commit)} ({_ago(now - status.last_commit)} ago)"
            + (f"; {_last_run_work(status)}" if status.seconds else f"; {_nothing_computed(status, now)}")
        )
    estimate = _estimate(status, now)
    if estimate is not None:
        lines.append(f"  estimate:    {_estimate_text(estimate, status)}")
    return lines


def _estimate_text(estimate: _Estimate, status: JobStatus) -> str:
    if estimate.seconds is None:
        return (
            f"none yet: the last run did {estimate.work_done or 0:.1%} of the shards' expected work, "
            f"and one is given from {WEIGHED_FROM:.0%}"
        )
    left = f"about {_ago(estimate.seconds)} " + ("for a rerun" if estimate.rerun else "left")
    return f"{left} at the rate of the last run" + (
        ", by the shards' expected work" if estimate.by == "expected work" else _spread_note(status)
    )


def _checkpoint_line(saved: dict, now: float) -> str:
    return f"  checkpoint:  {saved['shard']}: " + (
        "damaged; the next attempt starts the shard afresh"
        if saved.get("damaged")
        else f"{saved.get('progress') or 'saved'}"
        + (f" (about {saved['done']:.0%} of its expected work)" if saved.get("done") is not None else "")
        + f", {_clock(saved.get('saved_at'))} ({_ago(now - float(saved.get('saved_at') or now))} ago), "
        f"{int(saved.get('bytes') or 0):,} bytes"
    )


def _render_one(status: JobStatus, now: float) -> str:
    lines = [f"{status.name}  ({status.where})", *_plan_lines(status)]
    lines += [f"  damaged:     {problem}" for problem in status.problems]
    lines.extend(_manifest_lines(status))
    lines += _lease_lines(status, now)
    lines.append(f"  shards:      {_shard_line(status)}")
    lines += _progress_lines(status, now)
    lines += [_checkpoint_line(saved, now) for saved in status.checkpoints]
    for table in status.tables:
        rows = (
            (
                f"damaged ({table['damaged']}); run the command that wrote it again to rebuild it"
                if table.get("damaged")
                else "unreadable"
            )
            if table["rows"] is None
            else _plural(table["rows"], "row")
        )
        extra = (
            f", version {table.get('version')}, parameters {table.get('params')}" if table["rows"] is not None else ""
        )
        parts = f" in {_plural(table['parts'], 'part')}" if table.get("parts") else ""
        lines.append(f"  table:       {table['name']}: {rows}{parts}{extra}")
    for merge in status.merges:
        lines.append(
            f"  merge:       {merge['table']}: {merge['written']} of {_plural(merge['ranges'], 'range')} "
            f"written (round {merge['round']}); a rerun keeps them"
        )
    if status.shard_files:
        shared = (
            f" ({_bytes(status.shared_bytes)} of them also the tables' parts, by hard links: removing the "
            f"shards frees {_bytes(status.shard_bytes - status.shared_bytes)})"
            if status.shared_bytes
            else ""
        )
        lines.append(
            f"  shard store: {_bytes(status.shard_bytes)} in {_plural(status.shard_files, 'file')} ({SHARDS_DIR}/){shared}; "
            + (
                "`batchenum cleanup` removes them once the tables are committed"
                if _committed(status)
                else "kept: the next run reuses them"
            )
        )
    return "\n".join(lines)


def _linked_bytes(folder: Storage, paths: list[str], sizes: dict[str, int]) -> int:
    """The bytes of those files that another name (a table's part) also holds: a hard link on a
    disk.  On an object store a part taken over is a copy of its own (0)."""
    if not folder.local:
        return 0
    linked = 0
    for path in paths:
        try:
            linked += sizes[path] if os.stat(path).st_nlink > 1 else 0
        except OSError:  # deleted meanwhile
            continue
    return linked


def _committed(status: JobStatus) -> bool:
    return status.manifest is not None and status.manifest.get("state") == "committed"


def _manifest_lines(status: JobStatus) -> list[str]:
    """The run the tables belong to, or that they are unfinished and what to do."""
    manifest = status.manifest
    if not manifest:
        return []
    run = (
        f"run {manifest.get('run_id')}: parameters {json.dumps(manifest.get('params'), sort_keys=True)}, "
        f"code {manifest.get('code_version')}, input {manifest.get('input') or 'none'}"
    )
    if manifest.get("state") == "committed":
        return [f"  tables of:   {run}; committed {_clock(manifest.get('committed_at'))}"]
    return [
        f"  UNFINISHED:  the tables are being replaced by {run}; until it ends a reader may find some "
        "tables of that run beside others of the run before. The next run in this folder (or "
        "`batchenum cleanup`) completes the replacement first"
    ]


def _bytes(size: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1000
    return f"{size:,.1f} TB"


def to_json(statuses: list[JobStatus], now: float | None = None, others: Sequence[str] = ()) -> dict[str, Any]:
    """``status --json``: one object per job folder, in the stable shape docs/cli.md describes, and
    the folders no batchenum run wrote."""
    now = time.time() if now is None else now
    return {"jobs": [_job_json(status, now) for status in statuses], "other_folders": list(others)}


def _job_json(status: JobStatus, now: float) -> dict[str, Any]:
    lease = status.lease
    running = None
    if lease:
        beat = now - float(lease["heartbeat_at"])
        running = {
            "host": lease.get("host"),
            "pid": lease.get("pid"),
            "heartbeat_seconds_ago": round(beat, 1),
            "stale": beat > stale_after(lease),
            "alive": status.dead is None,
            "dead": status.dead,
        }
    plan = status.plan or {}
    estimate = _estimate(status, now)
    return {
        "name": status.name,
        "location": status.where,
        "code": {
            "version": plan.get("version"),
            "installed_here": status.installed_code,
            "matches_installed": _matches_installed(status),
        },
        "last_run": {
            "started_at": plan.get("started_at"),
            "host": plan.get("host"),
            "pid": plan.get("pid"),
            "computed_shards": len(status.seconds),
            "wall_seconds": _rounded(_wall_seconds(status)),
            "shard_seconds": round(sum(status.seconds), 3),
        }
        if status.plan
        else None,
        "running": running,
        "shards": {
            "planned": status.planned,
            "committed": len(status.committed),
            "stale": len(status.stale),
            "damaged": len(status.damaged),
        },
        "unplanned_shards": len(status.unplanned),  # shard files the plan does not name, not counted
        "handed_back_shards": len(status.handed_back),  # planned ones named by committed shards, not _plan.json
        "problems": status.problems,  # a damaged _plan.json or _lease.json, and what to do
        "last_commit_at": status.last_commit,
        "seconds_left": estimate.seconds if estimate else None,
        "seconds_left_for": ("a rerun" if estimate.rerun else "the run under way") if estimate else None,
        "estimate_by": estimate.by if estimate else None,
        "expected_work_done": estimate.work_done if estimate else None,
        "manifest": _manifest_json(status.manifest),
        "shard_store": {
            "files": status.shard_files,
            "bytes": status.shard_bytes,
            "shared_with_tables_bytes": status.shared_bytes,
        },
        "merges": status.merges,  # merges under way or stopped: table, round, ranges, written
        "checkpoints": status.checkpoints,  # saved states of unfinished shards: shard, saved_at, progress, bytes, done, done_before
        "tables": [
            {
                "name": table["name"],
                "rows": table["rows"],
                "parts": table.get("parts"),
                "version": table.get("version"),
                "params": _params(table.get("params")),
                "damaged": table.get("damaged"),
            }
            for table in status.tables
        ],
    }


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 3)


def _manifest_json(manifest: dict[str, Any] | None) -> dict[str, Any] | None:
    """The run the tables belong to, and whether it finished committing them."""
    if not manifest:
        return None
    keys = ("run_id", "state", "job", "params", "code_version", "input", "committed_at")
    return {
        **{key: manifest.get(key) for key in keys},
        "tables": {
            name: {
                "path": table.get("path"),
                "rows": table.get("rows"),
                "bytes": table.get("bytes"),
                "parts": len(table.get("parts", [])),
            }
            for name, table in manifest["tables"].items()
        },
    }


def _params(recorded: Any) -> Any:
    """A table's recorded parameters as an object (they are stored as JSON text)."""
    try:
        return json.loads(recorded) if isinstance(recorded, str) else recorded
    except ValueError:
        return recorded


def _alive(status: JobStatus) -> bool:
    """Whether a run holds the folder now: an estimate of the time left means nothing otherwise."""
    return status.lease is not None and status.dead is None


def _spread_note(status: JobStatus) -> str:
    """A warning for the estimate when the shards the last run committed differ widely in cost (a
    transfer-matrix height, say, costs a thousand times the one five below it), or are one or two
    long ones: their rate then says little about the rest."""
    computed = sorted(seconds for seconds in status.seconds if seconds >= 0)
    if not computed or computed[-1] < UNEVEN_FROM_SECONDS:
        return ""
    if len(computed) < 3:
        took = " and ".join(_ago(seconds) for seconds in computed)
        shards = "1 shard" if len(computed) == 1 else f"{len(computed)} shards"
        return f"; but it rests on {shards} only ({took}){_SO_UNSURE}"
    spread = uneven(computed)
    return f"; but its shards took {_ago(spread[0])} to {_ago(spread[1])} each{_SO_UNSURE}" if spread else ""


_SO_UNSURE = ", so the shards left may take much longer or shorter"


class _Estimate(NamedTuple):
    seconds: float | None  # the time left; None: too little of the expected work done to say
    by: str  # what it weighs: "expected work" or "shards"
    work_done: float | None = None  # the share of the expected work the last run did (weighed only)
    rerun: bool = False  # no run holds the folder: the time a rerun would take at the same rate


def _estimate(status: JobStatus, now: float) -> _Estimate | None:
    """The expected work still to do over the rate at which the last run did it, when the job gives
    each shard's (by "expected work"; no time until the last run did WEIGHED_FROM of it; for the
    run under way, counted down since its last report, progress.counted_down); else the shards
    still to commit over the rate at which it committed them.  For the run under way, or, when
    none is, for a rerun (unless the code installed here would compute every shard again)."""
    rerun = not _alive(status)
    if not (status.commit_times or status.checkpoints) or (rerun and _matches_installed(status) is False):
        return None
    estimate = _weighed_time_left(status, None if rerun else now)
    if estimate is None:
        counted = _time_left(status)
        estimate = _Estimate(counted, "shards") if counted is not None else None
    return estimate._replace(rerun=rerun) if estimate is not None else None


def _time_left(status: JobStatus) -> float | None:
    """Shards still to commit over the rate at which the last run committed them."""
    if status.planned is None or not status.plan:
        return None
    remaining = status.planned - len(status.committed)
    started = _as_number(status.plan.get("started_at"))
    if remaining <= 0 or not started or not status.commit_times:
        return None
    elapsed = max(status.commit_times) - started
    rate = len(status.commit_times) / elapsed if elapsed > 0 else None
    return remaining / rate if rate else None


def _weighed_time_left(status: JobStatus, now: float | None) -> _Estimate | None:
    """The expected work left over the rate at which the last run did it, up to its last commit or
    save: the shards it committed, and those in flight as far as their saves say (less what earlier
    runs did of them); counted down to ``now`` for a run under way (None: a rerun's)."""
    work, plan = status.expected_work, status.plan
    started = _as_number((plan or {}).get("started_at"))
    if not work or not plan or not started:
        return None
    planned = [*plan["shards"], *status.handed_back]
    if any(shard not in work for shard in planned):
        return None
    flying = [
        saved
        for saved in status.checkpoints
        if saved.get("done") is not None and saved["shard"] in work and float(saved.get("saved_at") or 0) >= started
    ]
    before = sum(done_before_run(saved, started) * work[saved["shard"]] for saved in flying)
    this_run = sum(work[saved["shard"]] * saved["done"] for saved in flying) - before
    committed = set(status.committed)
    left = sum(work[shard] for shard in planned if shard not in committed) - this_run - before
    done = sum(work[shard] for shard in status.last_run_shards if shard in work) + this_run
    moments = [*status.commit_times, *(float(saved["saved_at"]) for saved in flying)]
    reported = max(moments) if moments else started
    if done <= 0 or reported <= started or left <= 0:
        return None
    seconds = (
        weighed_time_left(reported - started, done, left)
        if now is None
        else counted_down(started, reported, max(now, reported), done, left)
    )
    return _Estimate(seconds, "expected work", work_share_done(done, left))


def _clock(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp)) if stamp else "?"


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}min"
    return f"{seconds / 3600:.1f}h"
