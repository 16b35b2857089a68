"""The shard store of one job folder (``OUT/<job>/_shards/<table>/<shard_id>.parquet``): each shard's
tables committed as files, checked before they are reused, read back for the finish; and the run's
plan (``_plan.json``), which ``batchenum status`` reads.

A shard is committed when every table it produces has a file whose provenance (job, code version,
parameters, shard id and spec, row count) matches the run, and all of them carry the same commit id
(one per ``write_shard``): the shard's tables count together or not at all, whatever stopped a writer
between two of them.  The committed files themselves are the record of finished work, not anything
the driver remembers.  Each file is committed whole onto its deterministic path (storage.py: rename
on a disk, one upload on an object store), so a killed writer leaves at most a temporary file, which
is never read as a result.  ``OUT`` is a local folder or any pyarrow.fs URI.

Nothing is written, moved or deleted through a symbolic link in the job folder, and only entries the
store named are removed as leftovers (docs/faults.md, "What stays inside the job folder").
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from batchenum.pipeline import faults
from batchenum.pipeline.arrow import to_numpy
from batchenum.pipeline.checkpoint import CHECKPOINTS
from batchenum.pipeline.codeversion import code_change
from batchenum.pipeline.frames import frame_neutral
from batchenum.pipeline.job import Job, Shard, ShardOutput, TableSpec
from batchenum.pipeline.lease import LEASE_FILE
from batchenum.pipeline.names import file_name_problem
from batchenum.pipeline.parquet_format import (
    RANGE_GROUP_ROWS,
    SHARD_ROW_GROUP_ROWS,
    DamagedFileError,
    Provenance,
    StoreError,
    check_rising,
    decode_metadata,
    decode_stats,
    encode_metadata,
    key_columns,
    parquet_options,
    partition_order,
    range_column,
    read_verified,
    short_reason,
    table_schema,
    to_arrow,
)
from batchenum.pipeline.storage import TMP_MARK, Storage, StorageUnavailableError, is_temporary

__all__ = [
    "OTHER_PARAMETERS",
    "PLAN_FILE",
    "SHARDS_DIR",
    "ShardCheck",
    "ShardProblem",
    "ShardProblemKind",
    "ShardStore",
    "inspect_shard",
    "params_change",
    "plan_problem",
]

# How a problem of kind OTHER_PARAMETERS starts: not damage, just another run's work.
OTHER_PARAMETERS = "committed with other parameters"
# How a problem of kind NOT_TOGETHER starts: a writer stopped between two of a shard's tables
# (killed, a full or read-only folder); not damage, an unfinished commit.
NOT_TOGETHER = "its tables were not committed together"
PLAN_FILE = "_plan.json"
# The lease's own scratch file (lease.py, ``_create_exclusively``), left by a writer killed there.
_LEASE_SCRATCH = re.compile(re.escape(LEASE_FILE + TMP_MARK) + "[0-9a-f]{32}")
SHARDS_DIR = "_shards"  # the shard store: committed shard files, outside every table's folder


def is_file_name(name: Any) -> bool:
    """Whether ``name`` is a table's or shard's name as a job may declare it (pipeline/names.py):
    names read from a file in the folder are used only as these, so none leads outside."""
    return file_name_problem(name) is None


def plan_problem(plan: Any) -> str | None:
    """Why ``plan`` (the parsed ``_plan.json``) is not a plan a run of ours wrote, or None."""
    if not isinstance(plan, dict):
        return f"it holds a JSON {type(plan).__name__}, not an object"
    for key in ("shards", "tables"):
        value = plan.get(key, [])
        if not isinstance(value, list) or not all(is_file_name(item) for item in value):
            return f"its {key} are not a list of plain names"
    for key in ("started_at",):
        value = plan.get(key)
        if value is not None and (
            not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1e11
        ):
            return f"its {key} is {json.dumps(value)[:40]}"
    if "shards" not in plan:
        return "it has no shards"
    return None


class ShardStore:
    """Committed shard files of one job under ``<out>/<job>`` (any Storage); the final tables are
    ``table_commit.StagedTables``'s."""

    def __init__(self, out: Storage, job: Job, provenance: Provenance):
        self.storage = out.child(job.name)
        self.job = job
        self.provenance = provenance

    @property
    def where(self) -> str:
        """The job folder as people type it (a path or a URI)."""
        return self.storage.display_root

    def shard_path(self, table: str, shard_id: str) -> str:
        return self.storage.join(SHARDS_DIR, table, f"{shard_id}.parquet")

    def write_shard(self, shard: Shard, outputs: ShardOutput, stats: dict[str, Any] | None = None) -> dict[str, int]:
        """Commit one shard's outputs; returns rows per table.  ``stats`` (where and how long it ran,
        records read) is recorded beside the provenance, not checked by it.  Every table's file
        records the same new commit id: until the last of them is in place the shard's files carry two
        ids and the shard counts as not committed (``check_shard``), so a failure between two tables
        never leaves a shard that is half old, half new."""
        rows = {}
        # one id in every table's footer: the shard counts only when all of them carry the same one
        extra = {"stats": json.dumps(stats or {}, sort_keys=True), "commit": uuid.uuid4().hex}
        for number, (name, columns) in enumerate(outputs.items()):
            if number:
                faults.between_shard_tables(shard.id)
            spec = self.job.table_spec(name)
            table = to_arrow(spec, columns)
            keys = self._key_range(spec, table, shard.id) if name in self.job.streamed_tables else {}
            meta = encode_metadata({**self.provenance.shard_metadata(shard, name, table.num_rows), **extra, **keys})
            table = table.replace_schema_metadata(meta)
            if spec.partition is None:
                merged_by = range_column(spec) if name not in self.job.streamed_tables else None
                self._write_parquet(table, spec, self.shard_path(name, shard.id), merged_by)
            else:
                self._write_grouped(table, spec, self.shard_path(name, shard.id))
            rows[name] = table.num_rows
        return rows

    @staticmethod
    def _key_range(spec: TableSpec, table: pa.Table, shard_id: str) -> dict[str, str]:
        """A streamed table's first and last keys, recorded in the shard's footer after checking that
        the key rises strictly through the shard (so that the finish can take the file over as a
        part, checking the order across parts from footers alone); nothing for a grouped table or
        one without rows."""
        key = key_columns(spec)
        if spec.partition is not None or not key or not table.num_rows:
            return {}
        last = check_rising([table.column(k) for k in key], None, spec.name, key, shard_id)
        first = tuple(table.column(k)[0].as_py() for k in key)
        return {"first_key": json.dumps(first), "last_key": json.dumps(last)}

    def check_shard(self, shard: Shard, tables: Iterable[str], full: bool = True) -> ShardProblem | None:
        """None when every table of the shard is committed with matching provenance; otherwise
        why not (``ShardProblemKind.MISSING`` when it simply was never written).  ``full`` reads every
        page and checks its checksum (before reusing a shard); otherwise only the footer is read (a
        shard this run has just committed, whose pages the merge reads, and checks, anyway)."""
        return self._inspect(shard, tables, full).problem

    def committed_footers(self, shard: Shard, tables: Iterable[str]) -> ShardCheck:
        """``check_shard(shard, tables, full=False)`` with what the same footer reads also tell: the
        rows of each table and the stats the shard recorded (one read per file, not three)."""
        return self._inspect(shard, tables, full=False)

    def _inspect(self, shard: Shard, tables: Iterable[str], full: bool) -> ShardCheck:
        return inspect_shard(
            self.storage,
            shard.id,
            tables,
            lambda table: self.provenance.shard_metadata(shard, table, 0),
            self.job.table_spec,
            full,
        )

    def write_plan(self, shards: list[Shard], run: dict[str, Any]) -> None:
        """Record the plan when a run starts (``_plan.json``), so that ``batchenum status`` knows the
        total while the run is in progress, from anywhere that reaches the folder."""
        record = {
            "job": self.provenance.job,
            "version": self.provenance.version,
            "params": self.provenance.params,
            "shards": [shard.id for shard in shards],
            "tables": list(self.job.shard_tables or [t.name for t in self.job.tables]),
            **run,
        }
        path = self.storage.join(PLAN_FILE)
        if self.storage.exists(path) and not self.storage.is_file(path):
            raise StoreError(
                f"{self.storage.uri(path)} is a folder where the run's plan belongs (batchenum never "
                "makes one there): move it away and run the same command again"
            )
        self.storage.write_text(path, json.dumps(record, sort_keys=True) + "\n")

    def shard_stats(self, table: str, shard_id: str) -> dict[str, Any]:
        """What a committed shard recorded about its run (node, seconds, records read)."""
        metadata = pq.read_schema(self.shard_path(table, shard_id), filesystem=self.storage.fs).metadata
        return decode_stats(decode_metadata(metadata)) or {}

    def read_shard_tables(self, shard: Shard) -> dict[str, pa.Table]:
        """Every committed table of one shard (for a job that redoes only some of its records)."""
        tables = self.job.shard_tables or [spec.name for spec in self.job.tables]
        return {
            name: self.read_shard_file(self.shard_path(name, shard.id), name).replace_schema_metadata(None)
            for name in tables
        }

    def recorded_stats(self, shard: Shard) -> dict[str, Any]:
        """The stats of a committed shard's first table ({} when it cannot be read)."""
        try:
            return self.shard_stats(
                self.job.shard_tables[0] if self.job.shard_tables else self.job.tables[0].name, shard.id
            )
        except Exception:  # damaged or gone since it was checked: it is then computed again
            return {}

    def read_shard_file(self, path: str, name: str, row_groups: list[int] | None = None) -> pa.Table:
        """A committed shard file read for the finish, every check of ``read_verified`` made; a
        damaged or vanished file is one StoreError naming it, raised before any table is written."""
        try:
            self.storage.refuse_links(path)
            with self.storage.open_input(path) as handle:
                return read_verified(
                    handle, table_schema(self.job.table_spec(name)), row_groups=row_groups, where=self.storage.uri(path)
                )
        except DamagedFileError as error:
            raise self.damaged_error(path, str(error).removeprefix(f"{self.storage.uri(path)} ")) from None
        except (OSError, pa.ArrowException) as error:  # gone or unreachable since it was checked
            raise self.damaged_error(path, f"cannot be read: {short_reason(error)}") from None

    def damaged_error(self, path: str, why: str) -> StoreError:
        return DamagedFileError(
            f"shard file {self.storage.uri(path)} {why}; no table was written. Run the same command "
            "again: it checks every committed shard, recomputes this one and reuses the rest"
        )

    def remove_temporaries(self) -> int:
        """Put back a folder table that a crash left moved aside (``Storage.restore_folder``), then
        delete the temporary files and folders of killed writers; returns how many.  Only entries
        named as the store names its temporaries (``is_temporary``), in the folders where it writes
        them (the job folder, ``_shards/<table>/``, ``_checkpoints/``), each checked to be a regular
        file (a real folder for one moved aside) reached without a link: never a pattern over a whole
        path, never anything through a link (LinkRefusedError naming it)."""
        for spec in self.job.tables:  # streamed and merged tables are folders
            self.storage.restore_folder(self.storage.join(spec.name))
        leftovers = [
            path
            for folder in self._writing_folders()
            for path in self._entries(folder)
            if self._is_leftover(folder, posixpath.basename(path.replace(os.sep, "/")))
        ]
        for path in leftovers:
            if self.storage.kind(path) == "folder":
                self.storage.delete_dir(path)  # a folder table moved aside, its successor in place
            else:
                self.storage.delete_file(path)
        return len(leftovers)

    def _writing_folders(self) -> list[str]:
        """The folders where the store writes files under temporary names (``_staged`` is removed
        whole by ``complete_commit``)."""
        shards = self.storage.join(SHARDS_DIR)
        tables = [self.storage.join(SHARDS_DIR, name) for name in self._entries(shards, folders=True)]
        return [self.storage.root, shards, *tables, self.storage.join(CHECKPOINTS)]

    def _entries(self, folder: str, folders: bool = False) -> list[str]:
        """The paths directly in ``folder`` (only its subfolders' names with ``folders``), [] when
        it does not exist; LinkRefusedError when ``folder`` is a link or reached through one."""
        self.storage.refuse_links(folder)
        if self.storage.local:
            if self.storage.kind(folder) != "folder":
                return []
            with os.scandir(folder) as found:
                return sorted(
                    entry.name if folders else entry.path
                    for entry in found
                    if not folders or entry.is_dir(follow_symlinks=False)
                )
        if folders:
            return [posixpath.basename(path) for path in self.storage.list_dirs(folder)]
        return self.storage.list_files(folder, recursive=False)

    def _is_leftover(self, folder: str, name: str) -> bool:
        """Whether entry ``name`` of ``folder`` is a temporary the store or the lease names so."""
        return is_temporary(name) or (folder == self.storage.root and _LEASE_SCRATCH.fullmatch(name) is not None)

    def read_shards(self, name: str, shard_ids: list[str]) -> pa.Table:
        """Concatenate one table's committed shard files, in the given shard order.  Every file must
        be there: a missing one is an error, never skipped."""
        spec = self.job.table_spec(name)
        parts = [
            self.read_shard_file(self.shard_path(name, shard_id), name).replace_schema_metadata(None)
            for shard_id in shard_ids
        ]
        if not parts:
            return table_schema(spec).empty_table()
        return pa.concat_tables(parts)

    def _write_grouped(self, table: pa.Table, spec: TableSpec, path: str) -> None:
        """A shard of a partitioned table: one row group per value of the partition column, its rows
        in ``sort`` order, so that the finish reads each shard's rows once (row-group statistics
        point at them) and merges sorted runs instead of sorting."""
        table = table.sort_by([(column, "ascending") for column in partition_order(spec)])
        values = table.column(spec.partition).to_numpy()
        bounds = [0, *(int(i) + 1 for i in (values[1:] != values[:-1]).nonzero()[0]), len(values)]

        def write(local: str) -> None:
            # lz4: these files are read once, by the finish, which reads them faster than zstd files
            # for more bytes (docs/design.md, "The finish reads ahead")
            with pq.ParquetWriter(local, table.schema, **parquet_options(spec, compression="lz4")) as writer:
                for start, stop in zip(bounds, bounds[1:]):
                    writer.write_table(table.slice(start, stop - start))
                if not len(values):
                    writer.write_table(table)

        self.storage.write_atomic(path, write)

    def _write_parquet(self, table: pa.Table, spec: TableSpec, path: str, merged_by: str | None = None) -> None:
        """A shard's table; a merged table's of more than one row group sorted (stably) by
        ``merged_by`` in row groups of ``RANGE_GROUP_ROWS``, so that the merge reads each range from
        the row groups that hold it.  The sort keeps the order of rows with equal values, the only
        order the merge's rule sees."""
        groups = SHARD_ROW_GROUP_ROWS
        if merged_by is not None and table.num_rows > RANGE_GROUP_ROWS:  # one row group needs no order
            import pyarrow.compute as pc  # only here: docs/design.md, "No pandas ..."

            table = table.take(pc.sort_indices(table, [(merged_by, "ascending")]))
            groups = RANGE_GROUP_ROWS
        self.storage.write_atomic(
            path, lambda local: pq.write_table(table, local, row_group_size=groups, **parquet_options(spec))
        )


class ShardProblemKind(Enum):
    """Why a shard is not committed as a run would reuse it."""

    MISSING = "missing"  # a table's file is not there: never written, or not yet
    DAMAGED = "damaged"  # a file that cannot be read or fails a check
    STALE = "stale"  # committed by another job, code version or shard, or with other columns
    OTHER_PARAMETERS = "other parameters"  # committed by a run with other parameters: not damage
    NOT_TOGETHER = "not together"  # its tables carry different commits: a writer stopped between them


@dataclass(frozen=True)
class ShardProblem:
    """Why a shard is not current, as a kind and in words (``str``)."""

    kind: ShardProblemKind
    detail: str  # what a person reads: the file and what is wrong with it
    field: str | None = None  # STALE and OTHER_PARAMETERS: the provenance field that differs
    change: str = ""  # what differs: STALE code, which part of the code version; OTHER_PARAMETERS, which values

    def __str__(self) -> str:
        return self.detail


@dataclass(frozen=True)
class ShardCheck:
    """What the committed files of one shard say: why it is not current, or (when it is) each
    table's rows and the stats recorded with the first table."""

    problem: ShardProblem | None
    rows: dict[str, int] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)


# The provenance fields a committed shard file records and a current one matches (Provenance.shard_metadata)
_PROVENANCE_FIELDS = ("job", "code", "params", "table", "shard", "shard_spec")


def inspect_shard(
    storage: Storage,
    shard_id: str,
    tables: Iterable[str],
    expected: Callable[[str], dict[str, str]],
    spec: Callable[[str], TableSpec] | None = None,
    full: bool = False,
) -> ShardCheck:
    """Whether shard ``shard_id``'s committed files in ``storage`` make a current shard: each of
    ``tables`` has its file, readable, recording the provenance fields ``expected(table)`` holds, its
    row count and readable stats, and all of them one commit id.  With ``spec`` (the job's table
    declarations) each file's columns are checked too, and with ``full`` every page and a grouped
    table's row-group statistics (before reusing a shard); otherwise only the footers are read.
    ``ShardStore`` checks its shards here, and ``batchenum status``, which knows the plan but not the
    job, the shards it counts.  StoreError when something other than a file is where a file belongs."""
    rows: dict[str, int] = {}
    stats = None
    commits: dict[str, str | None] = {}
    for name in tables:
        path = storage.join(SHARDS_DIR, name, f"{shard_id}.parquet")
        storage.refuse_links(path)
        # On a disk one lstat says what is there before any read; on an object store that costs a
        # request per file, so it is asked only when the read finds no file.
        if storage.local and not _is_a_file(storage, path):
            return ShardCheck(ShardProblem(ShardProblemKind.MISSING, "missing"))
        try:
            problem, rows[name], found = _check_file(storage, path, name, expected(name), spec, full)
        except FileNotFoundError:  # missing when read (one committed since is read next time)
            _is_a_file(storage, path)  # but a folder where the file belongs is refused by name
            return ShardCheck(ShardProblem(ShardProblemKind.MISSING, "missing"))
        if problem:
            if problem.kind is not ShardProblemKind.OTHER_PARAMETERS:
                problem = replace(problem, detail=f"{storage.relative(path)}: {problem.detail}")
            return ShardCheck(problem)
        if stats is None:
            stats = decode_stats(found)
            if stats is None:
                detail = f"{storage.relative(path)}: its recorded stats are unreadable"
                return ShardCheck(ShardProblem(ShardProblemKind.DAMAGED, detail))
        commits[name] = found.get("commit")
    if len(set(commits.values())) > 1 or None in commits.values():
        shown = ", ".join(f"{name} {commit or 'none'}" for name, commit in commits.items())
        detail = f"{NOT_TOGETHER} (commits {shown}): a writer stopped between them"
        return ShardCheck(ShardProblem(ShardProblemKind.NOT_TOGETHER, detail))
    return ShardCheck(None, rows, stats or {})


def _is_a_file(storage: Storage, path: str) -> bool:
    """Whether a file is at ``path`` (False: nothing); StoreError when something else is there."""
    kind = storage.kind(path)
    if kind not in ("file", "missing"):  # not ours to delete: it may hold someone's files
        raise StoreError(
            f"{storage.uri(path)} is a {kind} where a shard file belongs (batchenum never "
            "makes one there): move it away and run the same command again"
        )
    return kind == "file"


def _check_file(
    storage: Storage,
    path: str,
    name: str,
    expected: dict[str, str],
    spec: Callable[[str], TableSpec] | None,
    full: bool,
) -> tuple[ShardProblem | None, int, dict]:
    """(problem or None, rows, the decoded metadata) of one committed shard file."""
    damaged = ShardProblemKind.DAMAGED
    try:
        with storage.open_input(path) as handle:
            if full and spec is not None:
                table = read_verified(handle)
                schema, rows = table.schema, table.num_rows
                problem = _grouping_problem(handle, table, spec(name))
                if problem:
                    return ShardProblem(damaged, problem), 0, {}
            else:
                footer = pq.ParquetFile(handle).metadata
                schema, rows = footer.schema.to_arrow_schema(), footer.num_rows
                if rows != sum(footer.row_group(k).num_rows for k in range(footer.num_row_groups)):
                    return ShardProblem(damaged, "damaged (its footer's row counts disagree)"), 0, {}
    except DamagedFileError as error:
        return ShardProblem(damaged, str(error).removeprefix("a Parquet file is ")), 0, {}
    except (StorageUnavailableError, FileNotFoundError):  # the store, or no file: not damage
        raise
    except Exception as error:  # any failure to read means the file cannot be trusted
        return ShardProblem(damaged, f"unreadable ({type(error).__name__}: {short_reason(error)})"), 0, {}
    found = decode_metadata(schema.metadata)
    columns = table_schema(spec(name)) if spec is not None else None
    return _provenance_problem(found, expected, schema, rows, columns), rows, found


def _provenance_problem(
    found: dict[str, str], expected: dict[str, str], schema: pa.Schema, rows: int, columns: pa.Schema | None
) -> ShardProblem | None:
    """Why a file recording ``found`` is not current: a provenance field ``expected`` holds that
    differs, a row count other than the recorded one, or (``columns`` given) other columns."""
    differing = [key for key in _PROVENANCE_FIELDS if key in expected and _differs(key, found.get(key), expected[key])]
    if "params" in differing and found.get("job") == expected.get("job"):
        change = params_change(found.get("params"), expected["params"])
        return ShardProblem(ShardProblemKind.OTHER_PARAMETERS, f"{OTHER_PARAMETERS} ({change})", "params", change)
    if differing:
        key = differing[0]
        detail = f"provenance does not match ({key}: found {found.get(key)!r}, expected {expected[key]!r})"
        change = code_change(found.get(key), expected[key]) if key == "code" else ""
        return ShardProblem(ShardProblemKind.STALE, detail, key, change)
    if found.get("rows") != str(rows):
        return ShardProblem(
            ShardProblemKind.DAMAGED, f"row count {rows} does not match the {found.get('rows')} recorded"
        )
    if columns is not None and schema.remove_metadata() != columns:
        return ShardProblem(ShardProblemKind.STALE, "columns do not match the table's declaration", "columns")
    return None


def _differs(key: str, found: str | None, expected: str) -> bool:
    """Whether a provenance field a file records is not the run's (parameters: ``_other_params``)."""
    return _other_params(found, expected) if key == "params" else found != expected


def _other_params(found: str | None, expected: str) -> bool:
    """Whether parameters (JSON) a shard file records are not a run's, a frame input's file name
    aside (``frames.frame_neutral``: its slices' checksums tell whether their rows changed)."""
    if found == expected:
        return False
    try:
        return frame_neutral(json.loads(found or "")) != frame_neutral(json.loads(expected))
    except ValueError:
        return True


def params_change(found: str | None, expected: str) -> str:
    """How the parameters a file records (JSON) differ from a run's: ``max_steps 10000 -> 5``, one
    entry a parameter; ``not recorded`` for one the file does not record (an older job, or a
    batchenum before the parameter was recorded) or the run no longer records."""
    try:
        before = json.loads(found or "")
    except ValueError:
        before = None
    after = json.loads(expected)
    if not isinstance(before, dict):
        return f"unreadable before: {str(found)[:60]!r}"
    changes = []
    for name in sorted(set(before) | set(after), key=lambda name: (name not in after, name)):
        if before.get(name, _ABSENT) != after.get(name, _ABSENT):
            changes.append(f"{name} {_recorded(before, name)} -> {_recorded(after, name)}")
    return ", ".join(changes)


_ABSENT = object()


def _recorded(params: dict, name: str) -> str:
    return json.dumps(params[name])[:60] if name in params else "not recorded"


def _grouping_problem(handle: Any, table: pa.Table, spec: TableSpec) -> str | None:
    """For a shard of a partitioned table: whether each row group's statistics (which the finish
    follows, and which no checksum covers) name the one partition value its rows hold."""
    if spec.partition is None:
        return None
    metadata = pq.ParquetFile(handle).metadata
    index = table.schema.get_field_index(spec.partition)
    values = to_numpy(table.column(spec.partition))
    start = 0
    for group in range(metadata.num_row_groups):
        rows = metadata.row_group(group).num_rows
        mine = values[start : start + rows]
        start += rows
        if not rows:
            continue
        stats = metadata.row_group(group).column(index).statistics
        if stats is None or not stats.has_min_max or not (stats.min == stats.max and (mine == stats.min).all()):
            return f"damaged (row group {group}'s statistics do not match its {spec.partition} values)"
    return None
