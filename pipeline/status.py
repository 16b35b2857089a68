"""``batchenum status``: what every job folder under an output location holds, read from the files
alone, so it works while a run is in progress (from another terminal, for a ``ray job submit`` job)
and after an interrupted one.  It reads the plan a run records when it starts and the footers of
the committed files, never their rows.
"""

from __future__ import annotations

import json
import posixpath
import time
from dataclasses import dataclass, field
from typing import Any

from pipeline.lease import LEASE_FILE, STALE_AFTER
from pipeline.storage import TMP_MARK, Storage
from pipeline.store import PLAN_FILE, read_metadata

__all__ = ["JobStatus", "job_statuses", "render", "to_json"]


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
    commit_times: list[float] = field(default_factory=list)  # when the last run committed them
    last_commit: float | None = None  # the latest commit of any shard
    tables: list[dict[str, Any]] = field(default_factory=list)  # final tables: name, rows, params, version
    lease: dict[str, Any] | None = None  # the lease of a run writing there now (or of a dead one)

    @property
    def planned(self) -> int | None:
        return len(self.plan["shards"]) if self.plan else None


def job_statuses(location: str) -> list[JobStatus]:
    """The status of every job folder under ``location`` that holds a plan, shards or tables."""
    out = Storage.at(location)
    found = []
    for folder in out.list_dirs(out.root):
        if _basename(folder).startswith("_"):  # not a job folder: _inputs/ holds batches given as data
            continue
        status = _job_status(out.child(_basename(folder)))
        if status is not None:
            found.append(status)
    return found


def _job_status(folder: Storage) -> JobStatus | None:
    files = [path for path in folder.list_files() if TMP_MARK not in path]
    plan = _read_json(folder, PLAN_FILE)
    shard_files = [path for path in files if "/_shards/" in path.replace("\\", "/")]
    finals = [path for path in files if path.endswith(".parquet") and path not in shard_files]
    if plan is None and not shard_files and not finals:
        return None
    status = JobStatus(_basename(folder.root), folder.display_root, plan)
    status.lease = _read_json(folder, LEASE_FILE)
    _read_shards(status, folder, shard_files)
    status.tables = _group_partitions([_final_table(folder, path) for path in finals])
    return status


def _group_partitions(tables: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per final table: a hive-partitioned one (``name/col=v/part-0.parquet``) summed."""
    grouped: dict[str, dict[str, Any]] = {}
    for table in tables:
        top, _, rest = table["name"].replace("\\", "/").partition("/")
        if not rest:
            grouped[top] = table
            continue
        entry = grouped.setdefault(top, {**table, "name": f"{top}/", "rows": 0, "partitions": 0})
        entry["partitions"] += 1
        entry["rows"] = None if entry["rows"] is None or table["rows"] is None else entry["rows"] + table["rows"]
    return list(grouped.values())


def _read_json(folder: Storage, name: str) -> dict[str, Any] | None:
    path = folder.join(name)
    if not folder.is_file(path):
        return None
    try:
        return json.loads(folder.read_bytes(path))
    except ValueError:
        return None


def _read_shards(status: JobStatus, folder: Storage, shard_files: list[str]) -> None:
    """Sort committed shard files into committed (every planned table there and current), stale
    and damaged, and collect their compute times."""
    plan = status.plan or {}
    tables = plan.get("tables") or sorted({_relative_parts(folder, path)[1] for path in shard_files})
    by_shard: dict[str, dict[str, str]] = {}
    for path in shard_files:
        _, table, name = _relative_parts(folder, path)
        by_shard.setdefault(name.removesuffix(".parquet"), {})[table] = path
    started = plan.get("started_at", 0.0)
    for shard_id in sorted(by_shard):
        paths = by_shard[shard_id]
        if any(table not in paths for table in tables):
            continue
        try:
            meta = read_metadata(paths[tables[0]], folder.fs)
        except Exception:  # unreadable footer
            status.damaged.append(shard_id)
            continue
        if plan and (meta.get("version") != plan.get("version")
                     or meta.get("params") != json.dumps(plan.get("params"), sort_keys=True)):
            status.stale.append(shard_id)
            continue
        status.committed.append(shard_id)
        stats = json.loads(meta.get("stats") or "{}")
        if "committed_at" in stats:
            status.last_commit = max(status.last_commit or 0.0, float(stats["committed_at"]))
        if stats.get("committed_at", 0) >= started:
            status.seconds.append(float(stats.get("seconds", 0.0)))
            status.commit_times.append(float(stats["committed_at"]))


def _final_table(folder: Storage, path: str) -> dict[str, Any]:
    name = folder.relative(path)
    try:
        meta = read_metadata(path, folder.fs)
        import pyarrow.parquet as pq

        rows = pq.ParquetFile(folder.open_input(path)).metadata.num_rows
    except Exception:
        return {"name": name, "rows": None}
    return {"name": name, "rows": rows, "params": meta.get("params"), "version": meta.get("version")}


def _relative_parts(folder: Storage, path: str) -> tuple[str, str, str]:
    parts = folder.relative(path).replace("\\", "/").split("/")
    return parts[0], parts[1] if len(parts) > 2 else "", parts[-1]


def _basename(path: str) -> str:
    return posixpath.basename(path.replace("\\", "/").rstrip("/"))


# ------------------------------------------------------------------------------------ rendering


def render(statuses: list[JobStatus], now: float | None = None) -> str:
    """Plain text, a few lines per job."""
    now = time.time() if now is None else now
    return "\n\n".join(_render_one(status, now) for status in statuses)


def _render_one(status: JobStatus, now: float) -> str:
    lines = [f"{status.name}  ({status.where})"]
    plan = status.plan
    if plan:
        lines.append(f"  parameters:  {json.dumps(plan.get('params'), sort_keys=True)}")
        lines.append(f"  code:        version {plan.get('version')}")
        lines.append(f"  last run:    started {_clock(plan.get('started_at'))} on {plan.get('host')} "
                     f"(pid {plan.get('pid')})")
    if status.lease:
        beat = now - float(status.lease.get("heartbeat_at", 0))
        lines.append(f"  running:     host {status.lease.get('host')}, pid {status.lease.get('pid')}, "
                     f"last heartbeat {_ago(beat)} ago" + (" (stale: the run looks dead)" if beat > STALE_AFTER else ""))
    total = status.planned
    shard_line = f"{len(status.committed)}" + (f"/{total}" if total is not None else "") + " shards committed"
    if status.stale or status.damaged:
        shard_line += f", {len(status.stale)} stale (other code or parameters), {len(status.damaged)} damaged"
    lines.append(f"  shards:      {shard_line}")
    if status.last_commit:
        lines.append(f"  last commit: {_clock(status.last_commit)} ({_ago(now - status.last_commit)} ago)"
                     + (f"; the last run computed {len(status.seconds)} shards in {sum(status.seconds):.1f} s"
                        if status.seconds else "; the last run reused every shard it has"))
    if status.commit_times:
        left = _time_left(status)
        if left is not None:
            lines.append(f"  estimate:    about {_ago(left)} left at the rate of the last run")
    for table in status.tables:
        rows = "unreadable" if table["rows"] is None else f"{table['rows']:,} rows"
        extra = f", version {table.get('version')}, parameters {table.get('params')}" if table["rows"] is not None else ""
        parts = f" in {table['partitions']} partitions" if table.get("partitions") else ""
        lines.append(f"  table:       {table['name']}: {rows}{parts}{extra}")
    return "\n".join(lines)


def to_json(statuses: list[JobStatus], now: float | None = None) -> dict[str, Any]:
    """``status --json``: one object per job folder, in the stable shape docs/cli.md describes."""
    now = time.time() if now is None else now
    return {"jobs": [_job_json(status, now) for status in statuses]}


def _job_json(status: JobStatus, now: float) -> dict[str, Any]:
    lease = status.lease
    running = None
    if lease:
        beat = now - float(lease.get("heartbeat_at", 0))
        running = {"host": lease.get("host"), "pid": lease.get("pid"), "heartbeat_seconds_ago": round(beat, 1),
                   "stale": beat > STALE_AFTER}
    plan = status.plan or {}
    return {
        "name": status.name,
        "location": status.where,
        "last_run": {"started_at": plan.get("started_at"), "host": plan.get("host"), "pid": plan.get("pid")}
        if status.plan else None,
        "running": running,
        "shards": {"planned": status.planned, "committed": len(status.committed), "stale": len(status.stale),
                   "damaged": len(status.damaged)},
        "last_commit_at": status.last_commit,
        "seconds_left": _time_left(status) if status.commit_times else None,
        "tables": [{"name": table["name"], "rows": table["rows"], "partitions": table.get("partitions"),
                    "version": table.get("version"), "params": _params(table.get("params"))} for table in status.tables],
    }


def _params(recorded: Any) -> Any:
    """A table's recorded parameters as an object (they are stored as JSON text)."""
    try:
        return json.loads(recorded) if isinstance(recorded, str) else recorded
    except ValueError:
        return recorded


def _time_left(status: JobStatus) -> float | None:
    """Shards still to commit over the rate at which the last run committed them."""
    if status.planned is None or not status.plan:
        return None
    remaining = status.planned - len(status.committed)
    started = status.plan.get("started_at")
    if remaining <= 0 or not started or not status.commit_times:
        return None
    elapsed = max(status.commit_times) - started
    rate = len(status.commit_times) / elapsed if elapsed > 0 else None
    return remaining / rate if rate else None


def _clock(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp)) if stamp else "?"


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}min"
    return f"{seconds / 3600:.1f}h"
