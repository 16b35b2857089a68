"""The only module that writes Parquet: atomic shard files with provenance, reuse, merge, and the
final tables.

Layout under ``OUT/<job>/``:

    <table>/part-NNNNN.parquet           a table streamed from the shards: a folder of parts
    <table>.parquet                      a table the driver builds whole (the Palago counts)
    _manifest.json                       the run that wrote the tables, and every part: written last
    NOT_A_TABLE.parquet                  makes a read of the whole folder fail, not mix tables
    _shards/<table>/<shard_id>.parquet   the shard store: one file per table per shard
    _staged/<run id>/...                 a run's tables before they are moved into place

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
import queue
import re
import stat
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from batchenum.pipeline import faults
from batchenum.pipeline.arrow import NUMPY_DTYPES, from_numpy, to_numpy
from batchenum.pipeline.checkpoint import CHECKPOINTS
from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.job import Job, Shard, ShardOutput, TableSpec
from batchenum.pipeline.lease import LEASE_FILE
from batchenum.pipeline.storage import TMP_MARK, Storage, StorageUnavailableError, is_temporary, link_refused

__all__ = [
    "DamagedFileError",
    "NOT_TOGETHER",
    "Provenance",
    "ShardStore",
    "StoreError",
    "arrow_type",
    "OTHER_PARAMETERS",
    "PLAN_FILE",
    "MANIFEST_FILE",
    "GUARD_FILE",
    "SHARDS_DIR",
    "STAGED_DIR",
    "complete_commit",
    "manifest_problem",
    "read_manifest",
    "remove_shards",
    "PartTask",
    "write_part",
    "part_groups",
    "part_plan",
    "plan_problem",
    "read_metadata",
    "read_verified",
    "recorded_metadata",
    "table_schema",
]

# How check_shard's answer starts when a shard was committed by a run with other parameters: not
# damage, just another run's work.
OTHER_PARAMETERS = "committed with other parameters"
# How check_shard's answer starts when a shard's tables carry different commits: a writer stopped
# between two of them (killed, a full or read-only folder); not damage, an unfinished commit.
NOT_TOGETHER = "its tables were not committed together"
PLAN_FILE = "_plan.json"
# The record of the tables in place, written last (docs/design.md, "The tables"); underscored, so
# that no reader of a folder takes it for data.
MANIFEST_FILE = "_manifest.json"
MANIFEST_FORMAT = 1
# A run id (``start_tables``), a table's or shard's name and a part's name as the store's own files
# may give them: names read from a file in the folder are used only as these, so none leads outside.
_RUN_ID = re.compile(r"\d{8}T\d{6}-[0-9a-f]{8}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_PART_NAME = re.compile(r"part-\d{5}\.parquet")
# The lease's own scratch file (lease.py, ``_create_exclusively``), left by a writer killed there.
_LEASE_SCRATCH = re.compile(re.escape(LEASE_FILE + TMP_MARK) + "[0-9a-f]{32}")
SHARDS_DIR = "_shards"  # the shard store: committed shard files, outside every table's folder
STAGED_DIR = "_staged"  # a run's final tables before they are moved into place
# Not Parquet, though named so: every reader that globs or walks the whole job folder (pandas,
# pyarrow.dataset, DuckDB, polars, Ray Data) opens it and fails, where it would otherwise mix the
# job's tables into one (a folder of answers and errors read as one table: rows with null columns).
GUARD_FILE = "NOT_A_TABLE.parquet"
GUARD_TEXT = (
    "This file is not a table. It is here so that reading this whole folder as one dataset fails "
    "instead of mixing several tables. Read one table: <folder>/<table>/ (a folder of parts) or "
    "<folder>/<table>.parquet; the tables and their parts are listed in _manifest.json.\n"
)
# Final tables are written in row groups of at least this many rows (the last may be smaller) and
# parts of about PART_ROWS rows: sizes that suit readers, whatever the shards' sizes.  A shard of a
# streamed table holding TAKEOVER_ROWS rows or more is already such a part (its rows in one row
# group of up to SHARD_ROW_GROUP_ROWS): the finish takes its file over instead of rewriting it.
ROW_GROUP_ROWS = 1 << 17
PART_ROWS = 1 << 22
TAKEOVER_ROWS = 1 << 16
SHARD_ROW_GROUP_ROWS = 1 << 20

_META_PREFIX = "batchenum."
_ARROW_TYPES = {
    "int64": pa.int64(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "string": pa.string(),
    "list<int64>": pa.list_(pa.int64()),
}


class StoreError(PipelineError):
    """A shard output that does not fit its table's declared columns."""


class DamagedFileError(StoreError):
    """A Parquet file this project wrote that fails its checks (page checksums, footer, columns): its
    contents are never served.  The message names the file and why."""


def arrow_type(type_name: str) -> pa.DataType:
    return _ARROW_TYPES[type_name]


def _parquet_options(spec: TableSpec, compression: str = "zstd") -> dict[str, Any]:
    """How every Parquet file of ``spec`` is written: with page checksums (a reader tells a damaged
    file from a good one), and a dictionary for every column but the distinct ones."""
    return {
        "compression": compression,
        "write_page_checksum": True,
        "use_dictionary": [c.name for c in spec.columns if not c.distinct],
    }


def _schema(spec: TableSpec, drop: str | None = None) -> pa.Schema:
    return pa.schema([pa.field(c.name, arrow_type(c.type)) for c in spec.columns if c.name != drop])


def table_schema(spec: TableSpec) -> pa.Schema:
    """The columns every file of ``spec`` holds, with their Arrow types."""
    return _schema(spec)


def read_verified(
    handle: Any,
    schema: pa.Schema | None = None,
    columns: list[str] | None = None,
    row_groups: list[int] | None = None,
    where: str = "",
) -> pa.Table:
    """Read a Parquet file this project wrote, trusting nothing in it: every page read is checked
    against its checksum, the footer's row counts against one another and against the rows read,
    and the columns against ``schema`` (names and types; the file's own metadata is kept on the
    table).  Page checksums do not cover the footer or the page headers: these checks catch the
    footer damage that would otherwise be read as other numbers (a row group's row count, a column's
    name or type in the Arrow schema).  DamagedFileError naming ``where`` otherwise."""
    try:
        parquet = pq.ParquetFile(handle, page_checksum_verification=True)
        metadata = parquet.metadata
        if row_groups is None:
            table = parquet.read(columns=columns)
        else:
            table = parquet.read_row_groups(row_groups, columns=columns)
    except StorageUnavailableError:  # the store, not the file: never reported as damage
        raise
    except Exception as error:  # whatever the reader trips on, the file cannot be trusted
        raise DamagedFileError(f"{where or 'a Parquet file'} is damaged ({_reason(error)})") from None
    problem = _footer_problem(metadata, table, schema, columns, row_groups)
    if problem:
        raise DamagedFileError(f"{where or 'a Parquet file'} is damaged ({problem})")
    return table


def _footer_problem(
    metadata: Any, table: pa.Table, schema: pa.Schema | None, columns: list[str] | None, row_groups: list[int] | None
) -> str | None:
    groups = [metadata.row_group(k).num_rows for k in range(metadata.num_row_groups)]
    if metadata.num_rows != sum(groups):
        return f"its footer says {metadata.num_rows} rows and its row groups {sum(groups)}"
    expected_rows = sum(groups) if row_groups is None else sum(groups[k] for k in row_groups)
    if table.num_rows != expected_rows:
        return f"{table.num_rows} rows read where its footer says {expected_rows}"
    if schema is not None:
        wanted = schema if columns is None else pa.schema([schema.field(name) for name in columns])
        return columns_problem(table.schema, wanted)
    return None


def columns_problem(found: pa.Schema, wanted: pa.Schema) -> str | None:
    """Why columns ``found`` are not ``wanted`` (names and types, metadata aside), or None."""
    if found.remove_metadata() != wanted.remove_metadata():
        return f"its columns {_columns(found)} are not the table's {_columns(wanted)}"
    return None


def _columns(schema: pa.Schema) -> str:
    return "(" + ", ".join(f"{field.name}: {field.type}" for field in schema) + ")"


def _reason(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= 200 else text[:200] + "..."


@dataclass(frozen=True)
class Provenance:
    """What a committed file must say about itself to be reused."""

    job: str
    version: str
    params: dict[str, Any]

    def final_metadata(self, table: str) -> dict[str, str]:
        """Final tables record the job's declared version, not the source hash, so that the same
        results are the same bytes whatever edits left them unchanged."""
        return {
            "job": self.job,
            "version": self.version.split("+")[0],
            "params": json.dumps(self.params, sort_keys=True),
            "table": table,
        }

    def shard_metadata(self, shard: Shard, table: str, rows: int) -> dict[str, str]:
        """A final table's metadata (a large shard's file may become a part of the table as it is)
        with what a shard must match to be reused: the code version in full, and the shard."""
        return {
            **self.final_metadata(table),
            "code": self.version,
            "shard": shard.id,
            "shard_spec": json.dumps(dict(shard.recorded_identity), sort_keys=True),
            "rows": str(rows),
        }


def _encode_metadata(meta: dict[str, str]) -> dict[bytes, bytes]:
    return {(_META_PREFIX + k).encode(): v.encode() for k, v in meta.items()}


def read_metadata(path: str, filesystem: Any) -> dict[str, str]:
    """The batchenum metadata of a Parquet file (provenance, stats) from its footer alone."""
    return _decode_metadata(pq.read_schema(path, filesystem=filesystem).metadata)


def plan_problem(plan: Any) -> str | None:
    """Why ``plan`` (the parsed ``_plan.json``) is not a plan a run of ours wrote, or None."""
    if not isinstance(plan, dict):
        return f"it holds a JSON {type(plan).__name__}, not an object"
    for key in ("shards", "tables"):
        value = plan.get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) and _NAME.fullmatch(item) for item in value):
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


def recorded_metadata(schema: pa.Schema) -> dict[str, str]:
    """The batchenum metadata (provenance, stats) a table read from a file carries on its schema."""
    return _decode_metadata(schema.metadata)


def _decode_metadata(raw: dict[bytes, bytes] | None) -> dict[str, str]:
    out = {}
    for k, v in (raw or {}).items():
        key = k.decode(errors="replace")
        if key.startswith(_META_PREFIX):
            out[key[len(_META_PREFIX) :]] = v.decode(errors="replace")
    return out


def to_arrow(spec: TableSpec, columns: dict[str, Any]) -> pa.Table:
    """Build an Arrow table with exactly the declared columns and types."""
    missing = [c for c in spec.column_names if c not in columns]
    extra = [c for c in columns if c not in spec.column_names]
    if missing or extra:
        raise StoreError(f"table {spec.name!r}: missing columns {missing}, unexpected columns {extra}")
    arrays = []
    for column in spec.columns:
        try:
            arrays.append(_column_array(columns[column.name], arrow_type(column.type)))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as error:
            raise StoreError(f"table {spec.name!r}, column {column.name!r}: {error}") from error
    return pa.Table.from_arrays(arrays, schema=_schema(spec))


def _column_array(values: Any, arrow_type: pa.DataType) -> pa.Array:
    """One column as an Arrow array: an Arrow array of the type as it is, a numpy array of the
    type's dtype by sharing its buffer, an empty list as an empty array (none of them imports
    pandas, pipeline/arrow.py), anything else through ``pa.array``."""
    if isinstance(values, pa.Array) and values.type.equals(arrow_type):
        return values
    if isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype == NUMPY_DTYPES.get(arrow_type):
        return from_numpy(values, arrow_type)
    if isinstance(values, (list, tuple)) and not values:  # a shard's errors, usually
        return pa.nulls(0, arrow_type)
    return pa.array(values, type=arrow_type)


class ShardStore:
    """Committed shard files and final tables of one job under ``<out>/<job>`` (any Storage)."""

    def __init__(self, out: Storage, job: Job, provenance: Provenance):
        self.storage = out.child(job.name)
        self.job = job
        self.provenance = provenance

    @property
    def where(self) -> str:
        """The job folder as people type it (a path or a URI)."""
        return self.storage.display_root

    # ------------------------------------------------------------------------------------ shards

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
            meta = _encode_metadata({**self.provenance.shard_metadata(shard, name, table.num_rows), **extra, **keys})
            table = table.replace_schema_metadata(meta)
            if spec.partition is None:
                self._write_parquet(table, spec, self.shard_path(name, shard.id))
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
        key = _key_columns(spec)
        if spec.partition is not None or not key or not table.num_rows:
            return {}
        last = _check_rising([table.column(k) for k in key], None, spec.name, key, shard_id)
        first = tuple(table.column(k)[0].as_py() for k in key)
        return {"first_key": json.dumps(first), "last_key": json.dumps(last)}

    def check_shard(self, shard: Shard, tables: Iterable[str], full: bool = True) -> str | None:
        """None when every table of the shard is committed with matching provenance; otherwise
        why not ("missing" when it simply was never written).  ``full`` reads every page and checks
        its checksum (before reusing a shard); otherwise only the footer is read (a shard this run
        has just committed, whose pages the merge reads, and checks, anyway)."""
        return self._inspect(shard, tables, full)[0]

    def committed_footers(self, shard: Shard, tables: Iterable[str]) -> tuple[str | None, dict[str, int], dict]:
        """``check_shard(shard, tables, full=False)`` with what the same footer reads also tell: the
        rows of each table and the stats the shard recorded (one read per file, not three)."""
        return self._inspect(shard, tables, full=False)

    def _inspect(self, shard: Shard, tables: Iterable[str], full: bool) -> tuple[str | None, dict[str, int], dict]:
        """(problem or None, {table: rows}, the stats recorded with the first table)."""
        rows: dict[str, int] = {}
        stats = None
        commits: dict[str, str | None] = {}
        for name in tables:
            path = self.shard_path(name, shard.id)
            self.storage.refuse_links(path)
            kind = self.storage.kind(path)
            if kind == "missing":
                return "missing", {}, {}
            if kind != "file":  # not ours to delete: it may hold someone's files
                raise StoreError(
                    f"{self.storage.uri(path)} is a {kind} where a shard file belongs (batchenum never "
                    "makes one there): move it away and run the same command again"
                )
            problem, rows[name], found = self._check_file(path, shard, name, full)
            if problem:
                problem = (
                    problem if problem.startswith(OTHER_PARAMETERS) else f"{self.storage.relative(path)}: {problem}"
                )
                return problem, {}, {}
            if stats is None:
                stats = _stats(found)
                if stats is None:
                    return f"{self.storage.relative(path)}: its recorded stats are unreadable", {}, {}
            commits[name] = found.get("commit")
        if len(set(commits.values())) > 1 or None in commits.values():
            shown = ", ".join(f"{name} {commit or 'none'}" for name, commit in commits.items())
            return f"{NOT_TOGETHER} (commits {shown}): a writer stopped between them", {}, {}
        return None, rows, stats or {}

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

    def final_params(self) -> str | None:
        """The parameters (JSON) recorded in the job's final tables already in place, if any: from the
        manifest, else (tables of an older batchenum) from a table file's footer."""
        manifest = read_manifest(self.storage)
        if manifest is not None and "params" in manifest:
            return json.dumps(manifest["params"], sort_keys=True)
        for spec in self.job.tables:
            path = self.storage.join(f"{spec.name}.parquet")
            if spec.partition is None and self.storage.is_file(path):
                try:
                    metadata = pq.read_schema(path, filesystem=self.storage.fs).metadata
                except Exception:  # an unreadable table is replaced, whatever made it
                    continue
                return _decode_metadata(metadata).get("params")
        return None

    def _check_file(self, path: str, shard: Shard, name: str, full: bool = True) -> tuple[str | None, int, dict]:
        """(problem or None, rows, the decoded metadata) of one committed shard file."""
        spec = self.job.table_spec(name)
        try:
            with self.storage.open_input(path) as handle:
                if full:
                    table = read_verified(handle)
                    schema, rows = table.schema, table.num_rows
                    problem = _grouping_problem(handle, table, spec)
                    if problem:
                        return problem, 0, {}
                else:
                    footer = pq.ParquetFile(handle).metadata
                    schema, rows = footer.schema.to_arrow_schema(), footer.num_rows
                    if rows != sum(footer.row_group(k).num_rows for k in range(footer.num_row_groups)):
                        return "damaged (its footer's row counts disagree)", 0, {}
        except DamagedFileError as error:
            return str(error).removeprefix("a Parquet file is "), 0, {}
        except StorageUnavailableError:  # the store, not the file
            raise
        except Exception as error:  # any failure to read means the file cannot be trusted
            return f"unreadable ({type(error).__name__}: {_reason(error)})", 0, {}
        found = _decode_metadata(schema.metadata)
        return self._provenance_problem(found, schema, rows, shard, name), rows, found

    def _provenance_problem(self, found: dict, schema: pa.Schema, rows: int, shard: Shard, name: str) -> str | None:
        expected = self.provenance.shard_metadata(shard, name, rows)
        if found.get("job") == expected["job"] and found.get("params") != expected["params"]:
            return f"{OTHER_PARAMETERS} ({found.get('params')})"
        for key in ("job", "code", "params", "table", "shard", "shard_spec"):
            if found.get(key) != expected[key]:
                return f"provenance does not match ({key}: found {found.get(key)!r}, expected {expected[key]!r})"
        if found.get("rows") != str(rows):
            return f"row count {rows} does not match the {found.get('rows')} recorded"
        spec = self.job.table_spec(name)
        if schema.remove_metadata() != _schema(spec):
            return "columns do not match the table's declaration"
        return None

    def shard_stats(self, table: str, shard_id: str) -> dict[str, Any]:
        """What a committed shard recorded about its run (node, seconds, records read)."""
        metadata = pq.read_schema(self.shard_path(table, shard_id), filesystem=self.storage.fs).metadata
        return _stats(_decode_metadata(metadata)) or {}

    def read_shard_tables(self, shard: Shard) -> dict[str, pa.Table]:
        """Every committed table of one shard (for a job that redoes only some of its records)."""
        tables = self.job.shard_tables or [spec.name for spec in self.job.tables]
        return {
            name: self._read_shard_file(self.shard_path(name, shard.id), name).replace_schema_metadata(None)
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

    def _read_shard_file(self, path: str, name: str, row_groups: list[int] | None = None) -> pa.Table:
        """A committed shard file read for the finish, every check of ``read_verified`` made; a
        damaged or vanished file is one StoreError naming it, raised before any table is written."""
        try:
            self.storage.refuse_links(path)
            with self.storage.open_input(path) as handle:
                return read_verified(
                    handle, _schema(self.job.table_spec(name)), row_groups=row_groups, where=self.storage.uri(path)
                )
        except DamagedFileError as error:
            raise self._damaged(path, str(error).removeprefix(f"{self.storage.uri(path)} ")) from None
        except (OSError, pa.ArrowException) as error:  # gone or unreachable since it was checked
            raise self._damaged(path, f"cannot be read: {_reason(error)}") from None

    def _damaged(self, path: str, why: str) -> StoreError:
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
        for name in self.job.streamed_tables:
            self.storage.restore_folder(self.storage.join(name))
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
            self._read_shard_file(self.shard_path(name, shard_id), name).replace_schema_metadata(None)
            for shard_id in shard_ids
        ]
        if not parts:
            return _schema(spec).empty_table()
        return pa.concat_tables(parts)

    # ------------------------------------------------------------------------------ final tables
    #
    # A run's final tables are written under _staged/<run id>/ (no reader looks there), then the
    # manifest naming every part of every table, with the run's identity, is written with state
    # "committing", each table is moved into place, and the manifest is marked "committed".  A
    # finish killed before the manifest leaves the old tables; one killed after it is completed by
    # the next run (or `batchenum cleanup`) before anything else: the new tables then, never a mix
    # that a reader going through the manifest could see (docs/design.md, "The tables").

    def table_location(self, name: str) -> str:
        """Where table ``name`` lives in the job folder: a streamed table is a folder of parts
        (``answers/part-00000.parquet``...), a table the driver builds whole one file (``creature_counts.parquet``)."""
        return f"{name}/" if name in self.job.streamed_tables else f"{name}.parquet"

    def start_tables(self) -> str:
        """Begin writing a run's final tables; returns the run id the manifest will carry."""
        self.run_id = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{uuid.uuid4().hex[:8]}"
        self._parts: dict[str, list[dict[str, Any]]] = {}
        self._side_files: list[str] = []
        return self.run_id

    def _staged(self, relative: str = "") -> str:
        return _staged_path(self.storage, self.run_id, relative)

    def write_final(self, name: str, frame: Any) -> str:
        """Stage a final table built by the driver (a pandas DataFrame); returns where it will be."""
        spec = self.job.table_spec(name)
        table = to_arrow(
            spec, {c: frame[c].tolist() if frame[c].dtype == object else frame[c].to_numpy() for c in frame.columns}
        )
        if spec.partition is not None:  # one file, its rows grouped by the partition column's values
            table = table.sort_by([(column, "ascending") for column in _partition_order(spec)])
        table = table.replace_schema_metadata(_encode_metadata(self.provenance.final_metadata(name)))
        location = self.table_location(name)
        path = self._staged(location)
        sizes = {}

        def write(local: str) -> None:
            pq.write_table(table, local, **_parquet_options(spec))
            sizes["bytes"] = os.path.getsize(local)

        self.storage.write_atomic(path, write)
        self._parts[name] = [{"path": location, "rows": table.num_rows, "bytes": sizes["bytes"]}]
        return self.storage.uri(self.storage.join(location))

    def write_side_file(self, name: str, text: str) -> None:
        """Stage a text file that is published beside the tables (``Job.side_files``); it is
        moved into place with them, after the manifest names it."""
        if not _plain_name(name):
            raise StoreError(f"internal error: a side file must be a plain name in the job folder, not {name!r}")
        self.storage.write_text(self._staged(name), text)
        self._side_files.append(name)

    def value_groups(self, name: str, shard_ids: list[str]) -> list[dict[Any, list[list[int]]]]:
        """The parts of grouped table ``name``, from its shards' footers alone: consecutive values of
        the partition column (in order) grouped into parts of at least ``PART_ROWS`` rows, each as
        {value: for each shard, its row groups holding that value} (``write_values`` writes one)."""
        spec = self.job.table_spec(name)
        paths = [self.shard_path(name, shard_id) for shard_id in shard_ids]
        found, rows = _row_groups_by_value(paths, _partition_column(spec), self.storage)
        groups: list[dict[Any, list[list[int]]]] = [{}]
        size = 0
        for value in sorted(found):
            if size >= PART_ROWS:
                groups.append({})
                size = 0
            groups[-1][value] = found[value]
            size += rows[value]
        return groups

    def write_part(self, name: str, index: int, shard_ids: list[str]) -> dict[str, Any]:
        """Part ``index`` of streamed table ``name`` from a run of consecutive shards, their keys
        checked to rise strictly (``PartTask``: where Ray runs it, so that the driver never reads
        the rows); returns its path, rows, bytes and first and last keys (the driver checks that the
        parts follow one another)."""
        spec = self.job.table_spec(name)
        key = _key_columns(spec)
        seen: dict[str, Any] = {}

        def batches() -> Iterator[pa.Table]:
            for part in self._in_shard_order(spec, shard_ids):
                if key and part.num_rows:
                    seen.setdefault("first", tuple(part.column(k)[0].as_py() for k in key))
                    seen["last"] = tuple(part.column(k)[-1].as_py() for k in key)
                yield part

        return {
            **self._write_part_file(spec, index, batches()),
            "first": seen.get("first"),
            "last": seen.get("last"),
            "shards": shard_ids,
        }

    def write_values(
        self, name: str, index: int, shard_ids: list[str], values: dict[Any, list[list[int]]]
    ) -> dict[str, Any]:
        """Part ``index`` of grouped table ``name``: each of ``values`` (from ``value_groups``) read
        from every shard's row groups holding it, merged in ``sort`` order and checked for a
        repeated key (an error naming it, never a dropped row), in row groups of ``ROW_GROUP_ROWS``
        rows or more (``PartTask``: where Ray runs it, so that the driver reads no row); holds one
        value's rows at a time."""
        spec = self.job.table_spec(name)
        paths = [self.shard_path(name, shard_id) for shard_id in shard_ids]
        batches = (
            batch
            for value in sorted(values)
            for batch in _merged_batches(self._read_partition(paths, values[value], spec), spec, value)
        )
        return {**self._write_part_file(spec, index, batches), "first": None, "last": None, "shards": shard_ids}

    def _write_part_file(self, spec: TableSpec, index: int, tables: Iterable[pa.Table]) -> dict[str, Any]:
        """``tables`` staged as part ``index`` of ``spec``'s table in row groups of ``ROW_GROUP_ROWS``
        rows or more (a part without rows is a footer alone, the columns still declared); returns
        its path, rows and bytes."""
        schema = _schema(spec).with_metadata(_encode_metadata(self.provenance.final_metadata(spec.name)))
        location = f"{spec.name}/part-{index:05d}.parquet"
        written = {"path": location, "rows": 0}

        def write(local: str) -> None:
            with pq.ParquetWriter(local, schema, **_parquet_options(spec)) as writer:
                for group in _row_groups(_prefetched(tables), ROW_GROUP_ROWS):
                    writer.write_table(group.replace_schema_metadata(schema.metadata), row_group_size=group.num_rows)
                    written["rows"] += group.num_rows
            written["bytes"] = os.path.getsize(local)

        self.storage.write_atomic(self._staged(location), write)
        return written

    def take_over(self, name: str, index: int, shard_id: str) -> dict[str, Any]:
        """Part ``index`` of streamed table ``name``: the committed file of shard ``shard_id`` itself,
        shared into the staged table (``Storage.share``: a hard link, or a server-side copy) without a
        row read here; returns what ``write_part`` returns, its keys from the shard's footer."""
        source = self.shard_path(name, shard_id)
        with self.storage.open_input(source) as handle:
            footer = pq.ParquetFile(handle).metadata
        found = _decode_metadata(footer.schema.to_arrow_schema().metadata)
        if footer.num_rows and ("first_key" not in found or "last_key" not in found):
            raise self._damaged(source, "records no key range (first_key, last_key) for its rows")
        location = f"{name}/part-{index:05d}.parquet"
        self.storage.share(source, self._staged(location))
        first, last = (tuple(json.loads(found[k])) if k in found else None for k in ("first_key", "last_key"))
        return {
            "path": location,
            "rows": footer.num_rows,
            "bytes": self.storage.stat(source)[0],
            "first": first,
            "last": last,
            "shards": [shard_id],
        }

    def add_parts(self, name: str, parts: list[dict[str, Any]]) -> str:
        """Record the parts that ``write_part`` wrote for table ``name``, after checking that each
        part's keys come after the previous part's (together with ``write_part``'s own check: the
        key rises strictly across the whole table, no row repeated or lost); returns where it will be."""
        spec = self.job.table_spec(name)
        key = _key_columns(spec)
        last = None
        for part in parts:
            if key and part["first"] is not None:
                if last is not None and part["first"] <= last:
                    shown = part["first"][0] if len(key) == 1 else part["first"]
                    raise StoreError(
                        f"table {name!r}: {'/'.join(key)} = {shown!r} in shards {part['shards'][0]}.."
                        f"{part['shards'][-1]} repeats or comes out of order; no table was written "
                        "(a bug: please report it)"
                    )
                last = part["last"]
        self._parts[name] = [{k: part[k] for k in ("path", "rows", "bytes")} for part in parts]
        return self.storage.uri(self.storage.join(self.table_location(name)))

    def commit_tables(self, identity: dict[str, Any]) -> dict[str, Any]:
        """Make the staged tables (and side files) the job's, all of them or (killed before the
        manifest) none; returns the manifest.  ``identity``: the run's job, parameters, code version and input."""
        manifest = {
            "format": MANIFEST_FORMAT,
            "run_id": self.run_id,
            **identity,
            "state": "committing",
            "tables": {
                name: {
                    "path": self.table_location(name),
                    "rows": sum(p["rows"] for p in parts),
                    "bytes": sum(p["bytes"] for p in parts),
                    "parts": parts,
                }
                for name, parts in self._parts.items()
            },
        }
        if self._side_files:
            manifest["files"] = sorted(self._side_files)
        _refuse_linked_targets(self.storage, manifest)  # before the manifest names this run
        faults.maybe_kill_before_commit()
        _write_guard(self.storage)
        _write_manifest(self.storage, manifest)
        return _install(self.storage, manifest)

    def _read_partition(self, paths: list[str], groups: list[list[int]], spec: TableSpec) -> pa.Table:
        """One partition's rows from every shard, one chunk per shard, each in ``sort`` order."""
        parts = []
        for path, indices in zip(paths, groups):
            if indices:
                part = self._read_shard_file(path, spec.name, row_groups=indices)
                values = to_numpy(part.column(spec.partition))
                if len(values) and not (values == values[0]).all():  # the footer's statistics pointed elsewhere
                    raise self._damaged(
                        path, f"is damaged (row groups {indices} do not hold one {spec.partition} value)"
                    )
                parts.append(part)
        return pa.concat_tables(parts).replace_schema_metadata(None) if parts else _schema(spec).empty_table()

    def _in_shard_order(self, spec: TableSpec, shard_ids: list[str]) -> Iterator[pa.Table]:
        """Shard files in plan order, checking that the key rises strictly across the whole table: a
        duplicate or an out-of-order key is an error naming it and the shard."""
        key = _key_columns(spec)
        last = None
        for shard_id in shard_ids:
            # not pq.read_table, which imports pandas (docs/design.md, "No pandas ...")
            part = self._read_shard_file(self.shard_path(spec.name, shard_id), spec.name).replace_schema_metadata(None)
            if key and part.num_rows:
                last = _check_rising([part.column(k) for k in key], last, spec.name, key, shard_id)
            yield part

    def _write_grouped(self, table: pa.Table, spec: TableSpec, path: str) -> None:
        """A shard of a partitioned table: one row group per value of the partition column, its rows
        in ``sort`` order, so that the finish reads each shard's rows once (row-group statistics
        point at them) and merges sorted runs instead of sorting."""
        table = table.sort_by([(column, "ascending") for column in _partition_order(spec)])
        values = table.column(spec.partition).to_numpy()
        bounds = [0, *(int(i) + 1 for i in (values[1:] != values[:-1]).nonzero()[0]), len(values)]

        def write(local: str) -> None:
            # lz4: these files are read once, by the finish, which reads them faster than zstd files
            # for more bytes (docs/design.md, "The finish reads ahead")
            with pq.ParquetWriter(local, table.schema, **_parquet_options(spec, compression="lz4")) as writer:
                for start, stop in zip(bounds, bounds[1:]):
                    writer.write_table(table.slice(start, stop - start))
                if not len(values):
                    writer.write_table(table)

        self.storage.write_atomic(path, write)

    def _write_parquet(self, table: pa.Table, spec: TableSpec, path: str) -> None:
        self.storage.write_atomic(
            path,
            lambda local: pq.write_table(table, local, row_group_size=SHARD_ROW_GROUP_ROWS, **_parquet_options(spec)),
        )


@dataclass(frozen=True)
class PartTask:
    """One task of the finish: part ``index`` of ``table`` from ``shard_ids``; of a grouped table,
    from the row groups ``values`` names (``value_groups``)."""

    store: ShardStore
    table: str
    index: int
    shard_ids: tuple[str, ...]
    values: dict[Any, list[list[int]]] | None = None

    def __str__(self) -> str:
        if self.values is not None:
            shown = f"{min(self.values)}..{max(self.values)}" if self.values else "none"
            return f"{self.table} part {self.index} ({self.store.job.table_spec(self.table).partition} {shown})"
        return f"{self.table} part {self.index} (shards {self.shard_ids[0]}..{self.shard_ids[-1]})"


def write_part(task: PartTask) -> dict[str, Any]:
    """Run one ``PartTask`` (a module-level function, for Ray's workers)."""
    if task.values is not None:
        return task.store.write_values(task.table, task.index, list(task.shard_ids), task.values)
    return task.store.write_part(task.table, task.index, list(task.shard_ids))


def part_groups(shard_ids: list[str], rows: dict[str, int], part_rows: int | None = None) -> list[list[str]]:
    """Consecutive shards grouped into parts of at least ``part_rows`` rows (the last may have
    fewer; a table without rows is one part)."""
    part_rows = PART_ROWS if part_rows is None else part_rows
    groups, current, size = [], [], 0
    for shard_id in shard_ids:
        current.append(shard_id)
        size += rows.get(shard_id, 0)
        if size >= part_rows:
            groups.append(current)
            current, size = [], 0
    if current or not groups:
        if groups and not size:  # trailing empty shards join the last part
            groups[-1].extend(current)
        else:
            groups.append(current)
    return groups


def part_plan(
    shard_ids: list[str], rows: dict[str, int], part_rows: int | None = None, takeover_rows: int | None = None
) -> list[tuple[bool, list[str]]]:
    """A streamed table's parts from its consecutive shards, as (taken over, shards): a shard of at
    least ``takeover_rows`` rows is a part by itself, its file taken over; each run of smaller shards
    between them is grouped into parts of ``part_rows`` rows or more (``part_groups``), written anew,
    and dropped if it holds no row.  A table without rows is one part written anew."""
    takeover_rows = TAKEOVER_ROWS if takeover_rows is None else takeover_rows
    plan: list[tuple[bool, list[str]]] = []
    run: list[str] = []
    for shard_id in [*shard_ids, None]:
        if shard_id is not None and rows.get(shard_id, 0) < takeover_rows:
            run.append(shard_id)
            continue
        if sum(rows.get(s, 0) for s in run):
            plan += [(False, group) for group in part_groups(run, rows, part_rows)]
        run = []
        if shard_id is not None:
            plan.append((True, [shard_id]))
    return plan or [(False, list(shard_ids))]


def complete_commit(storage: Storage) -> str | None:
    """Finish the commit of a run killed while moving its tables into place, then delete staged
    tables no manifest names; returns the run id whose commit was completed, or None."""
    manifest = read_manifest(storage)
    completed = None
    storage.refuse_links(storage.join(STAGED_DIR))
    if manifest is not None and manifest.get("state") == "committing":
        _refuse_linked_targets(storage, manifest)
        _install(storage, manifest)
        completed = manifest["run_id"]
    storage.delete_dir(storage.join(STAGED_DIR))  # every run's staging: one run at a time holds the folder
    return completed


def remove_shards(storage: Storage) -> tuple[int, int]:
    """Delete the shard store of a job folder whose tables are committed (completing an interrupted
    commit first); returns (files removed, bytes freed: on a disk, not those a table's part still
    holds by a hard link), counted as each file is removed.  The caller holds the folder's lease.
    A link anywhere in the shard store (LinkRefusedError naming it) removes nothing.  A rerun then
    finds no committed shard and computes every one again: never a stale table."""
    complete_commit(storage)
    manifest = read_manifest(storage)
    if manifest is None:
        raise StoreError(
            f"{storage.display_root} has no committed tables ({MANIFEST_FILE}): its shards are the only "
            "record of the work done, so they are kept. Run the job to the end first"
        )
    shards = storage.join(SHARDS_DIR)
    storage.refuse_links(shards)
    if not storage.local:
        files = storage.list_files(shards)
        sizes = [storage.stat(path)[0] for path in files]
        for path in files:
            storage.delete_file(path)
        storage.delete_dir(shards)
        return len(files), sum(sizes)
    return _remove_local_tree(shards)


def _remove_local_tree(root: str) -> tuple[int, int]:
    """Delete a local folder of files and folders; refuses before removing anything when an entry is
    a link or neither a file nor a folder.  Returns (files removed, bytes freed): a file another name
    still holds by a hard link frees nothing."""
    if not os.path.lexists(root):
        return 0, 0
    files, folders = [], []
    for folder, dirs, names in os.walk(root, followlinks=False):
        folders.append(folder)
        for name in dirs + names:
            path = os.path.join(folder, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                raise link_refused(path)
            if stat.S_ISREG(mode):
                files.append(path)
            elif not stat.S_ISDIR(mode):
                raise StoreError(
                    f"{path} is neither a file nor a folder, in the shard store: move it away and run "
                    "the same command again"
                )
    removed = freed = 0
    for path in files:
        found = os.lstat(path)
        os.unlink(path)
        removed += 1
        freed += found.st_size if found.st_nlink == 1 else 0
    for folder in reversed(folders):
        os.rmdir(folder)
    return removed, freed


def read_manifest(storage: Storage) -> dict[str, Any] | None:
    """The job folder's manifest (None when no run committed tables here); StoreError when damaged."""
    path = storage.join(MANIFEST_FILE)
    if not storage.exists(path):
        return None
    try:
        manifest = json.loads(storage.read_bytes(path))
    except (ValueError, UnicodeDecodeError, OSError) as error:
        raise StoreError(
            f"{storage.uri(path)} is damaged ({_reason(error)}): delete it and run the same "
            "command again to write the tables anew"
        ) from None
    problem = manifest_problem(manifest)
    if problem:
        raise StoreError(
            f"{storage.uri(path)} is damaged ({problem}): delete it and run the same "
            "command again to write the tables anew"
        )
    return manifest


def _staged_path(storage: Storage, run_id: str, relative: str = "") -> str:
    """Where run ``run_id`` stages ``relative`` (a table's file or folder, a side file), or its whole
    staging folder."""
    return storage.join(STAGED_DIR, run_id, *([relative.rstrip("/")] if relative else []))


def _install(storage: Storage, manifest: dict[str, Any]) -> dict[str, Any]:
    """Move each staged table into place (a table already moved is skipped: this also finishes an
    interrupted commit), then mark the manifest committed."""
    for number, (name, table) in enumerate(sorted(manifest["tables"].items())):
        if number:
            faults.maybe_kill_between_tables()
        location = table["path"]
        staged = _staged_path(storage, manifest["run_id"], location)
        if not storage.exists(staged):  # moved into place before an interruption
            continue
        if location.endswith("/"):
            _install_folder(
                storage,
                staged,
                storage.join(location.rstrip("/")),
                {posixpath.basename(part["path"]) for part in table["parts"]},
            )
            storage.delete_file(storage.join(f"{name}.parquet"))  # the table as an older batchenum wrote it
        else:
            storage.move(staged, storage.join(location))
    for name in manifest.get("files", []):  # the side files (a Markdown rendering), after the tables
        staged = _staged_path(storage, manifest["run_id"], name)
        if storage.exists(staged):
            storage.move(staged, storage.join(name))
    storage.delete_dir(storage.join(STAGED_DIR))  # (one run at a time holds the folder)
    manifest = {**manifest, "state": "committed", "committed_at": round(time.time(), 3)}
    _write_manifest(storage, manifest)
    return manifest


def _install_folder(storage: Storage, staged: str, final: str, names: set[str]) -> None:
    """A folder table put in place: on a local disk by one atomic swap of folders; on an object
    store part by part (a server-side copy each), then the former parts the table lacks deleted."""
    if storage.local:
        storage.replace_folder(staged, final)
        return
    for path in storage.list_files(staged):
        storage.move(path, posixpath.join(final, posixpath.basename(path)))
    for path in storage.list_files(final):
        if posixpath.basename(path) not in names:
            storage.delete_file(path)
    storage.delete_dir(staged)


def _write_manifest(storage: Storage, manifest: dict[str, Any]) -> None:
    storage.write_text(storage.join(MANIFEST_FILE), json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def _write_guard(storage: Storage) -> None:
    """The file that makes a read of the whole job folder fail loudly instead of mixing tables."""
    path = storage.join(GUARD_FILE)
    if not storage.is_file(path):
        storage.write_text(path, GUARD_TEXT)


def _stats(found: dict[str, str]) -> dict | None:
    """The stats a shard recorded (``{}`` when none), or None when they are not a JSON object."""
    try:
        stats = json.loads(found.get("stats") or "{}")
    except ValueError:
        return None
    return stats if isinstance(stats, dict) else None


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


def _row_groups_by_value(paths: list[str], column: str, storage: Storage) -> tuple[dict[Any, list[list[int]]], dict]:
    """{value of ``column``: for each shard file, the indices of its row groups holding that value},
    and {value: rows}, from the footers' statistics (``_write_grouped`` writes one row group per value)."""
    found: dict[Any, list[list[int]]] = {}
    rows: dict[Any, int] = {}
    for k, path in enumerate(paths):
        with storage.open_input(path) as handle:
            metadata = pq.ParquetFile(handle).metadata
        index = metadata.schema.to_arrow_schema().get_field_index(column)
        for group in range(metadata.num_row_groups):
            stats = metadata.row_group(group).column(index).statistics
            if metadata.row_group(group).num_rows == 0:
                continue
            if stats is None or not stats.has_min_max or stats.min != stats.max:
                raise StoreError(f"{storage.uri(path)}: row group {group} does not hold one {column} value")
            found.setdefault(stats.min, [[] for _ in paths])[k].append(group)
            rows[stats.min] = rows.get(stats.min, 0) + metadata.row_group(group).num_rows
    return found, rows


def _partition_column(spec: TableSpec) -> str:
    """The partition column of grouped table ``spec``; StoreError if the table is not grouped."""
    if spec.partition is None:
        raise StoreError(f"internal error: table {spec.name} has no partition column, so it cannot be read by value")
    return spec.partition


def _partition_order(spec: TableSpec) -> list[str]:
    """The partition column, then the sort columns within a partition."""
    partition = _partition_column(spec)
    return [partition, *(column for column in spec.sort if column != partition)]


# Rows gathered and written at a time, one row group each: the sorted partition is never held twice.
_BATCH_ROWS = 1 << 17


def _merged_batches(body: pa.Table, spec: TableSpec, value: Any) -> Iterable[pa.Table]:
    """One partition's rows (one chunk per shard, each in ``sort`` order) in ``sort`` order, the
    partition column kept (a real column of the final table, the same type in every reader),
    ``_BATCH_ROWS`` at a time; keys checked unique as they go."""
    import pyarrow.compute as pc

    order = _partition_order(spec)[1:]
    by_key = len(spec.key) == 1 and tuple(order[:1]) == spec.key
    if spec.key and not by_key:
        _check_unique(body, spec, value)
    if not body.num_rows:
        yield body
        return
    indices = pc.sort_indices(body, [(column, "ascending") for column in order]).to_numpy() if order else None
    last = None
    for start in range(0, body.num_rows, _BATCH_ROWS):
        if indices is not None:
            batch = _gather(body, indices[start : start + _BATCH_ROWS])
        else:
            batch = body.slice(start, _BATCH_ROWS)
        if by_key:
            last = _check_sorted_unique(batch.column(spec.key[0]), last, spec, value)
        yield batch


def _row_groups(tables: Iterable[pa.Table], rows: int) -> Iterator[pa.Table]:
    """``tables`` regrouped into tables of at least ``rows`` rows (the last may have fewer), each
    written as one row group: small shards make no small row groups."""
    pending, size = [], 0
    for table in tables:
        if not table.num_rows:
            continue
        pending.append(table)
        size += table.num_rows
        if size >= rows:
            yield pa.concat_tables(pending)
            pending, size = [], 0
    if pending:
        yield pa.concat_tables(pending)


def manifest_problem(manifest: Any) -> str | None:
    """Why ``manifest`` (the parsed ``_manifest.json``) is not one a run of ours wrote, or None."""
    if not isinstance(manifest, dict):
        return f"it holds a JSON {type(manifest).__name__}, not an object"
    if manifest.get("state") not in ("committing", "committed") or not isinstance(manifest.get("run_id"), str):
        return "it has no state or run id"
    if not _RUN_ID.fullmatch(manifest["run_id"]):
        return f"its run id {json.dumps(manifest['run_id'])[:60]} is not one batchenum makes"
    tables = manifest.get("tables")
    if not isinstance(tables, dict):
        return "its tables are not an object"
    for name, table in tables.items():
        problem = _table_entry_problem(name, table)
        if problem:
            return f"table {json.dumps(name)[:60]}: {problem}"
    files = manifest.get("files", [])
    if not (isinstance(files, list) and all(isinstance(name, str) and _plain_name(name) for name in files)):
        return "its side files are not a list of plain file names"
    return None


def _table_entry_problem(name: str, table: Any) -> str | None:
    """Why a manifest's entry for table ``name`` is not one a run of ours wrote: its path must be the
    table's own (``name/`` or ``name.parquet``) and its parts ``name/part-NNNNN.parquet`` (or the
    file itself), so that no name read from the manifest leads outside the table."""
    if not (
        isinstance(table, dict)
        and isinstance(table.get("path"), str)
        and isinstance(table.get("parts"), list)
        and all(isinstance(p, dict) and isinstance(p.get("path"), str) for p in table["parts"])
    ):
        return "not described by a path and its parts"
    if not _NAME.fullmatch(name) or table["path"] not in (f"{name}/", f"{name}.parquet"):
        return f"its path {json.dumps(table['path'])[:60]} is not the table's own ({name}/ or {name}.parquet)"
    for part in table["parts"]:
        folder, _, file = part["path"].partition("/")
        own = (
            (folder == name and _PART_NAME.fullmatch(file))
            if table["path"].endswith("/")
            else part["path"] == table["path"]
        )
        if not own:
            return f"its part {json.dumps(part['path'])[:60]} is not in the table"
    return None


def _refuse_linked_targets(storage: Storage, manifest: dict[str, Any]) -> None:
    """LinkRefusedError naming the first place the commit of ``manifest`` would move into that is a
    link or reached through one: its staged tables and files, and the tables and files they replace."""
    names = [table["path"].rstrip("/") for table in manifest["tables"].values()] + list(manifest.get("files", []))
    for name in names:
        storage.refuse_links(_staged_path(storage, manifest["run_id"], name))
        storage.refuse_links(storage.join(name))


def _plain_name(name: str) -> bool:
    """Whether ``name`` can be a side file: a file directly in the job folder, none of ours."""
    return (
        bool(name)
        and posixpath.basename(name) == name
        and name not in (".", "..")
        and TMP_MARK not in name
        and not name.startswith("_")
    )


def _prefetched(items: Iterable, depth: int = 2) -> Iterator:
    """``items`` computed in a background thread, at most ``depth`` ahead of the consumer.  Arrow
    releases the GIL, so reading and merging the next batches overlaps compressing and writing this
    one (docs/design.md, "The finish reads ahead").  An exception in ``items``
    reaches the consumer; a consumer that stops early stops the thread."""
    ahead: queue.Queue = queue.Queue(depth)
    stop = threading.Event()
    end = object()

    def put(item: Any) -> None:
        while not stop.is_set():
            try:
                ahead.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def produce() -> None:
        try:
            for item in items:
                put((item, None))
                if stop.is_set():
                    return
            put((end, None))
        except BaseException as error:  # handed to the consumer
            put((end, error))

    threading.Thread(target=produce, name="batchenum-merge", daemon=True).start()
    try:
        while True:
            item, error = ahead.get()
            if item is end:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()


def _gather(table: pa.Table, indices: np.ndarray) -> pa.Table:
    """``table.take(indices)`` that copies only the rows the indices reach: from each chunk, the
    range between the smallest and largest index in it (a few rows per chunk when the chunks are
    sorted runs being merged).  A take over the whole chunked table concatenates all of it first:
    4x slower at n = 22 for a partition of 1 GB."""
    starts = np.cumsum([0, *(len(chunk) for chunk in table.column(0).chunks)])
    chunk = np.searchsorted(starts, indices, side="right") - 1
    pieces, local, size = [], np.empty_like(indices), 0
    for k in np.unique(chunk):
        mine = chunk == k
        low, high = int(indices[mine].min()), int(indices[mine].max())
        pieces.append(table.slice(low, high - low + 1))
        local[mine] = indices[mine] - low + size
        size += high - low + 1
    return pa.concat_tables(pieces).take(local)


def _check_unique(table: pa.Table, spec: TableSpec, partition_value: Any) -> None:
    """StoreError naming a key that appears twice in a partition (by counting values)."""
    import pyarrow.compute as pc

    counts = pc.value_counts(
        table.column(spec.key[0])
        if len(spec.key) == 1
        else pc.binary_join_element_wise(*[pc.cast(table.column(k), pa.string()) for k in spec.key], "\x1f")
    )
    repeated = counts.filter(pc.greater(counts.field("counts"), 1)).to_pylist()
    if repeated:
        raise _repeated(spec, partition_value, repeated[0]["values"])


def _check_sorted_unique(keys: pa.ChunkedArray, last: Any, spec: TableSpec, partition_value: Any) -> Any:
    """The last of a run of sorted keys, after checking that none equals its neighbour or ``last``
    (the previous run's last): 20x cheaper than counting values."""
    import pyarrow.compute as pc

    keys = keys.combine_chunks()
    if not len(keys):
        return last
    if last is not None and keys[0].as_py() == last:
        raise _repeated(spec, partition_value, last)
    same = pc.equal(keys.slice(1), keys.slice(0, len(keys) - 1))
    if pc.any(same).as_py():
        raise _repeated(spec, partition_value, keys[int(pc.index(same, True).as_py()) + 1].as_py())
    return keys[-1].as_py()


def _repeated(spec: TableSpec, partition_value: Any, key: Any) -> StoreError:
    return StoreError(
        f"table {spec.name!r}, {spec.partition} = {partition_value}: {'/'.join(spec.key)} "
        f"{key!r} appears more than once; no row is dropped silently, so no table was "
        f"written{_STREAMED_ORDER}"
    )


def _key_columns(spec: TableSpec) -> tuple[str, ...]:
    """The columns whose values rise strictly through a streamed table: its key, else its first sort column."""
    return tuple(spec.key) or tuple(spec.sort[:1])


def _check_rising(
    columns: list[pa.ChunkedArray], last: tuple | None, table: str, key: tuple[str, ...], shard_id: str
) -> tuple:
    """The last row's key (a tuple), after checking that the key rises strictly from ``last``, row
    by row, compared column by column (the first column that differs decides)."""
    values = [_comparable(column) for column in columns]
    first = tuple(column[0].as_py() for column in columns)
    rising = np.zeros(len(values[0]) - 1, dtype=np.bool_)
    tied = np.ones(len(values[0]) - 1, dtype=np.bool_)
    for column in values:
        rising |= tied & (column[1:] > column[:-1])
        tied &= column[1:] == column[:-1]
    if last is not None and not first > last:
        bad = first
    elif not rising.all():
        row = int(np.flatnonzero(~rising)[0]) + 1
        bad = tuple(column[row].as_py() for column in columns)
    else:
        return tuple(column[-1].as_py() for column in columns)
    shown = bad[0] if len(bad) == 1 else bad
    raise StoreError(
        f"table {table!r}: {'/'.join(key)} = {shown!r} in shard {shard_id} repeats or comes out of order; "
        f"its rows would be lost or misplaced, so no table was written{_STREAMED_ORDER}"
    )


# What a job that streams a table must do (pipeline/job.py, Job.streamed_tables)
_STREAMED_ORDER = (
    ": a streamed table's rows must come from each shard in its sort order, shards following one "
    "another in plan order, its key rising strictly throughout; have run_shard sort its rows and plan "
    "the shards in key order, or leave the table out of streamed_tables (it is then merged and "
    "deduplicated)"
)


def _comparable(column: pa.ChunkedArray) -> np.ndarray:
    """A key column as numpy values that compare as the column's do: numbers from their buffers; a
    string column holding one value (a record batch's file column) as zeros, all tied; any other
    through Python strings (neither imports pandas)."""
    if column.type in NUMPY_DTYPES:
        return to_numpy(column)
    if pa.types.is_string(column.type) and _one_string(column):
        return np.zeros(len(column), dtype=np.int8)
    return np.array(column.to_pylist(), dtype=object)


def _one_string(column: pa.ChunkedArray) -> bool:
    """Whether a string column without nulls holds one value in every row, checked on its buffers:
    every row as long as the first, and the characters that value repeated (each row's characters
    equal the previous row's: one contiguous comparison, 10x faster than comparing bytes objects)."""
    value = column[0].as_py()
    if value is None:
        return False
    pattern = np.frombuffer(value.encode(), dtype=np.uint8)
    for chunk in column.chunks:
        if not len(chunk):
            continue
        if chunk.null_count:
            return False
        _, offsets, data = chunk.buffers()
        offsets = np.frombuffer(offsets, dtype=np.int32)[chunk.offset : chunk.offset + len(chunk) + 1]
        if (np.diff(offsets) != len(pattern)).any():
            return False
        if not len(pattern):
            continue  # every row is "" (the lengths say so)
        chars = np.frombuffer(data, dtype=np.uint8)[offsets[0] : offsets[-1]]
        width = len(pattern)
        if not (np.array_equal(chars[:width], pattern) and np.array_equal(chars[width:], chars[:-width])):
            return False
    return True


def write_batch(location: str, field: str, ids: list[str], values: list[Any], value_type: pa.DataType) -> None:
    """Write an input batch (records with ``id`` and ``field``) atomically to a local path or a URI:
    Parquet when it ends in .parquet, else JSONL, one compact object per line."""
    target = Storage.at(location)

    def write(local: str) -> None:
        if location.lower().endswith(".parquet"):
            pq.write_table(
                pa.table({"id": pa.array(ids, pa.string()), field: pa.array(values, type=value_type)}), local
            )
            return
        with open(local, "w", encoding="utf-8") as handle:
            handle.writelines(
                json.dumps({"id": i, field: v}, separators=(",", ":")) + "\n" for i, v in zip(ids, values)
            )

    target.write_atomic(target.root, write)
