"""The only module that writes Parquet: atomic shard files with provenance, reuse, merge, and the
final tables.

Layout under ``OUT/<job>/``:

    _shards/<table>/<shard_id>.parquet   one file per table per shard, committed atomically
    <table>.parquet                      a final table
    <table>/n=<v>/part-0.parquet         a final table hive-partitioned by an int64 column

A shard is committed when every table it produces has a file whose provenance (job, code version,
parameters, shard id and spec, row count) matches the run; the committed files themselves are the
record of finished work, not anything the driver remembers.  Each file is committed whole onto its
deterministic path (storage.py: rename on a disk, one upload on an object store), so a retried or
duplicate attempt merely replaces identical content and a killed writer leaves at most a temporary
file, which is never read as a result.  ``OUT`` is a local folder or any pyarrow.fs URI.
"""

from __future__ import annotations

import itertools
import json
import os
import posixpath
import queue
import shutil
import threading
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from batchenum.pipeline import faults
from batchenum.pipeline.arrow import NUMPY_DTYPES, from_numpy, to_numpy
from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.job import Job, Shard, ShardOutput, TableSpec
from batchenum.pipeline.storage import TMP_MARK, Storage, StorageUnavailableError

__all__ = ["DamagedFileError", "Provenance", "ShardStore", "StoreError", "arrow_type", "OTHER_PARAMETERS", "PLAN_FILE",
           "plan_problem", "read_metadata", "read_verified", "recorded_metadata", "table_schema"]

# How check_shard's answer starts when a shard was committed by a run with other parameters: not
# damage, just another run's work.
OTHER_PARAMETERS = "committed with other parameters"
PLAN_FILE = "_plan.json"

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
    return {"compression": compression, "write_page_checksum": True,
            "use_dictionary": [c.name for c in spec.columns if not c.distinct]}


def _schema(spec: TableSpec, drop: str | None = None) -> pa.Schema:
    return pa.schema([pa.field(c.name, arrow_type(c.type)) for c in spec.columns if c.name != drop])


def table_schema(spec: TableSpec, partitioned_file: bool = False) -> pa.Schema:
    """The columns a file of ``spec`` holds (a file of a hive-partitioned table lacks the partition
    column, which its folder name carries)."""
    return _schema(spec, drop=spec.partition if partitioned_file else None)


def read_verified(handle: Any, schema: pa.Schema | None = None, columns: list[str] | None = None,
                  row_groups: list[int] | None = None, where: str = "") -> pa.Table:
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


def _footer_problem(metadata: Any, table: pa.Table, schema: pa.Schema | None, columns: list[str] | None,
                    row_groups: list[int] | None) -> str | None:
    groups = [metadata.row_group(k).num_rows for k in range(metadata.num_row_groups)]
    if metadata.num_rows != sum(groups):
        return f"its footer says {metadata.num_rows} rows and its row groups {sum(groups)}"
    expected_rows = sum(groups) if row_groups is None else sum(groups[k] for k in row_groups)
    if table.num_rows != expected_rows:
        return f"{table.num_rows} rows read where its footer says {expected_rows}"
    if schema is not None:
        wanted = schema if columns is None else pa.schema([schema.field(name) for name in columns])
        if table.schema.remove_metadata() != wanted.remove_metadata():
            return f"its columns {_columns(table.schema)} are not the table's {_columns(wanted)}"
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
        return {
            **self.final_metadata(table),
            "version": self.version,
            "shard": shard.id,
            "shard_spec": json.dumps(dict(shard.spec), sort_keys=True),
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
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            return f"its {key} are not a list of names"
    for key in ("started_at",):
        value = plan.get(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)
                                  or not 0 <= value < 1e11):
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
            out[key[len(_META_PREFIX):]] = v.decode(errors="replace")
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
        return self.storage.join("_shards", table, f"{shard_id}.parquet")

    def write_shard(self, shard: Shard, outputs: ShardOutput, stats: dict[str, Any] | None = None) -> dict[str, int]:
        """Commit one shard's outputs; returns rows per table.  ``stats`` (where and how long it ran,
        records read) is recorded beside the provenance, not checked by it."""
        rows = {}
        extra = {"stats": json.dumps(stats or {}, sort_keys=True)}
        for name, columns in outputs.items():
            spec = self.job.table_spec(name)
            table = to_arrow(spec, columns)
            meta = _encode_metadata({**self.provenance.shard_metadata(shard, name, table.num_rows), **extra})
            table = table.replace_schema_metadata(meta)
            if spec.partition is None:
                self._write_parquet(table, spec, self.shard_path(name, shard.id))
            else:
                self._write_grouped(table, spec, self.shard_path(name, shard.id))
            rows[name] = table.num_rows
        return rows

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
        for name in tables:
            path = self.shard_path(name, shard.id)
            if not self.storage.exists(path):
                return "missing", {}, {}
            if not self.storage.is_file(path):  # not ours to delete: it may hold someone's files
                raise StoreError(f"{self.storage.uri(path)} is a folder where a shard file belongs (batchenum never "
                                 "makes one there): move it away and run the same command again")
            problem, rows[name], found = self._check_file(path, shard, name, full)
            if problem:
                problem = problem if problem.startswith(OTHER_PARAMETERS) else f"{self.storage.relative(path)}: {problem}"
                return problem, {}, {}
            if stats is None:
                stats = _stats(found)
                if stats is None:
                    return f"{self.storage.relative(path)}: its recorded stats are unreadable", {}, {}
        return None, rows, stats or {}

    def write_plan(self, shards: list[Shard], run: dict[str, Any]) -> None:
        """Record the plan when a run starts (``_plan.json``), so that ``batchenum status`` knows the
        total while the run is in progress, from anywhere that reaches the folder."""
        record = {"job": self.provenance.job, "version": self.provenance.version, "params": self.provenance.params,
                  "shards": [shard.id for shard in shards], "tables": list(self.job.shard_tables
                                                                          or [t.name for t in self.job.tables]),
                  **run}
        path = self.storage.join(PLAN_FILE)
        if self.storage.exists(path) and not self.storage.is_file(path):
            raise StoreError(f"{self.storage.uri(path)} is a folder where the run's plan belongs (batchenum never "
                             "makes one there): move it away and run the same command again")
        self.storage.write_text(path, json.dumps(record, sort_keys=True) + "\n")

    def final_params(self) -> str | None:
        """The parameters (JSON) recorded in the job's final tables already in place, if any."""
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
        for key in ("job", "version", "params", "table", "shard", "shard_spec"):
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
        return {name: self._read_shard_file(self.shard_path(name, shard.id), name).replace_schema_metadata(None)
                for name in tables}

    def recorded_stats(self, shard: Shard) -> dict[str, Any]:
        """The stats of a committed shard's first table ({} when it cannot be read)."""
        try:
            return self.shard_stats(self.job.shard_tables[0] if self.job.shard_tables else self.job.tables[0].name,
                                    shard.id)
        except Exception:  # damaged or gone since it was checked: it is then computed again
            return {}

    def _read_shard_file(self, path: str, name: str, row_groups: list[int] | None = None) -> pa.Table:
        """A committed shard file read for the finish, every check of ``read_verified`` made; a
        damaged or vanished file is one StoreError naming it, raised before any table is written."""
        try:
            with self.storage.open_input(path) as handle:
                return read_verified(handle, _schema(self.job.table_spec(name)), row_groups=row_groups,
                                     where=self.storage.uri(path))
        except DamagedFileError as error:
            raise self._damaged(path, str(error).removeprefix(f"{self.storage.uri(path)} ")) from None
        except (OSError, pa.ArrowException) as error:  # gone or unreachable since it was checked
            raise self._damaged(path, f"cannot be read: {_reason(error)}") from None

    def _damaged(self, path: str, why: str) -> StoreError:
        return DamagedFileError(
            f"shard file {self.storage.uri(path)} {why}; no table was written. Run the same command "
            "again: it checks every committed shard, recomputes this one and reuses the rest")

    def remove_temporaries(self) -> int:
        """Put back a partitioned table that a crash left moved aside (``Storage.restore_folder``),
        then delete the temporary files and folders of killed writers; returns how many files."""
        for spec in self.job.tables:
            if spec.partition is not None:
                self.storage.restore_folder(self.storage.join(spec.name))
        leftovers = [path for path in self.storage.list_files() if TMP_MARK in path]
        for path in leftovers:
            self.storage.delete_file(path)
        for folder in self.storage.list_dirs(self.storage.root):  # staging folders, now empty
            if TMP_MARK in posixpath.basename(folder.replace(os.sep, "/")):
                self.storage.delete_dir(folder)
        return len(leftovers)

    def read_shards(self, name: str, shard_ids: list[str]) -> pa.Table:
        """Concatenate one table's committed shard files, in the given shard order.  Every file must
        be there: a missing one is an error, never skipped."""
        spec = self.job.table_spec(name)
        parts = [self._read_shard_file(self.shard_path(name, shard_id), name).replace_schema_metadata(None)
                 for shard_id in shard_ids]
        if not parts:
            return _schema(spec).empty_table()
        return pa.concat_tables(parts)

    # ------------------------------------------------------------------------------ final tables

    def write_final(self, name: str, frame: Any) -> str:
        """Write a final table (a pandas DataFrame) atomically; returns where (path or URI)."""
        spec = self.job.table_spec(name)
        table = to_arrow(spec, {c: frame[c].tolist() if frame[c].dtype == object else frame[c].to_numpy()
                                for c in frame.columns})
        meta = _encode_metadata(self.provenance.final_metadata(name))
        if spec.partition is None:
            path = self.storage.join(f"{name}.parquet")
            self._write_parquet(table.replace_schema_metadata(meta), spec, path)
            return self.storage.uri(path)
        return self._write_partitioned(spec, table, meta)

    def write_streamed(self, name: str, shard_ids: list[str]) -> str:
        """Write a final table from its shard files without holding all its rows: a plain table one
        shard at a time (``_write_in_shard_order``), a partitioned one one partition at a time."""
        spec = self.job.table_spec(name)
        if spec.partition is not None:
            return self._write_partitions_streamed(spec, shard_ids)
        return self._write_in_shard_order(spec, shard_ids)

    def _write_partitions_streamed(self, spec: TableSpec, shard_ids: list[str]) -> str:
        """Each partition read from every shard (its row group, found by statistics), merged in
        ``sort`` order, checked for a repeated key (an error naming it, never a dropped row) and
        written; the driver holds one partition at a time."""
        paths = [self.shard_path(spec.name, shard_id) for shard_id in shard_ids]
        groups = _row_groups_by_value(paths, spec.partition, self.storage)
        schema = _schema(spec, drop=spec.partition).with_metadata(
            _encode_metadata(self.provenance.final_metadata(spec.name)))

        def merged() -> Iterator[tuple[Any, pa.Table]]:
            for value in sorted(groups):
                for batch in _merged_batches(self._read_partition(paths, groups[value], spec), spec, value):
                    yield value, batch

        def write_into(folder: str) -> set[str]:
            for value, batches in itertools.groupby(_prefetched(merged()), key=lambda item: item[0]):
                self._write_batches((batch for _, batch in batches), schema, spec,
                                    self._join(folder, f"{spec.partition}={value}", "part-0.parquet"))
            return {f"{spec.partition}={value}" for value in groups}

        return self._replace_partitioned(spec, write_into)

    def _read_partition(self, paths: list[str], groups: list[list[int]], spec: TableSpec) -> pa.Table:
        """One partition's rows from every shard, one chunk per shard, each in ``sort`` order."""
        parts = []
        for path, indices in zip(paths, groups):
            if indices:
                part = self._read_shard_file(path, spec.name, row_groups=indices)
                values = to_numpy(part.column(spec.partition))
                if len(values) and not (values == values[0]).all():  # the footer's statistics pointed elsewhere
                    raise self._damaged(path, f"is damaged (row groups {indices} do not hold one {spec.partition} value)")
                parts.append(part)
        return pa.concat_tables(parts).replace_schema_metadata(None) if parts else _schema(spec).empty_table()

    def _write_in_shard_order(self, spec: TableSpec, shard_ids: list[str]) -> str:
        """Shard files appended in plan order, checking that the int64 key rises strictly across
        the whole table: a duplicate or an out-of-order key is an error naming it and the shard."""
        name = spec.name
        key = spec.key[0] if spec.key else (spec.sort[0] if spec.sort else None)
        schema = _schema(spec).with_metadata(_encode_metadata(self.provenance.final_metadata(name)))
        path = self.storage.join(f"{name}.parquet")

        def read(shard_id: str) -> pa.Table:
            # not pq.read_table, which imports pandas (docs/design.md, "No pandas ...")
            return self._read_shard_file(self.shard_path(name, shard_id), name)

        def write(local: str) -> None:
            last = None
            with pq.ParquetWriter(local, schema, **_parquet_options(spec)) as writer:
                # the next shard files are read while this one is compressed and written
                for shard_id, part in _prefetched((shard_id, read(shard_id)) for shard_id in shard_ids):
                    part = part.replace_schema_metadata(schema.metadata)
                    if key is not None and part.num_rows:
                        last = _check_rising(part.column(key), last, name, key, shard_id)
                    writer.write_table(part)

        self.storage.write_atomic(path, write)
        return self.storage.uri(path)

    def _write_partitioned(self, spec: TableSpec, table: pa.Table, meta: dict[bytes, bytes]) -> str:
        """Write ``name/<col>=<v>/part-0.parquet`` for each value of the partition column."""
        column = table.column(spec.partition).to_pylist()
        body = table.drop_columns([spec.partition]).replace_schema_metadata(meta)

        def write_into(folder: str) -> set[str]:
            for value in sorted(set(column)):
                mask = pa.array([v == value for v in column])
                part = self._join(folder, f"{spec.partition}={value}", "part-0.parquet")
                self._write_parquet(body.filter(mask), spec, part)
            return {f"{spec.partition}={value}" for value in column}

        return self._replace_partitioned(spec, write_into)

    def _replace_partitioned(self, spec: TableSpec, write_into: Callable[[str], set[str]]) -> str:
        """Replace the folder of a partitioned table with what ``write_into(folder)`` writes (it
        returns the partition folders it wrote).  On a local disk the new folder is built beside
        the old one under a temporary name and swapped in at once (``Storage.replace_folder``), so
        readers and crashes see the whole old table or the whole new one.  An object store has no
        folders to swap: each file is replaced in place (whole, one upload each), then partitions
        the new table lacks are deleted; a reader may meanwhile see old and new partitions mixed."""
        final = self.storage.join(spec.name)
        if not self.storage.local:
            self._remove_other_partitions(final, write_into(final))
            return self.storage.uri(final)
        staging = self.storage.join(f"{spec.name}{TMP_MARK}new-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            write_into(staging)
            os.makedirs(staging, exist_ok=True)  # an empty table is an empty folder
            faults.maybe_kill_before_swap()
            self.storage.replace_folder(staging, final)
        finally:
            if os.path.exists(staging):  # a failed write (replace_folder removes the former folder)
                shutil.rmtree(staging, ignore_errors=True)
        return self.storage.uri(final)

    def _remove_other_partitions(self, final: str, wanted: set[str]) -> None:
        """Partitions an earlier table had and this one has not."""
        for folder in self.storage.list_dirs(final):
            if posixpath.basename(folder) not in wanted:
                self.storage.delete_dir(folder)

    def _join(self, folder: str, *parts: str) -> str:
        return (os.path.join if self.storage.local else posixpath.join)(folder, *parts)

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

    def _write_batches(self, batches: Iterable[pa.Table], schema: pa.Schema, spec: TableSpec, path: str) -> None:
        """A file written a batch (one row group) at a time, so that no second copy of it is held."""
        def write(local: str) -> None:
            with pq.ParquetWriter(local, schema, **_parquet_options(spec)) as writer:
                for batch in batches:
                    writer.write_table(batch.replace_schema_metadata(schema.metadata))

        self.storage.write_atomic(path, write)

    def _write_parquet(self, table: pa.Table, spec: TableSpec, path: str) -> None:
        self.storage.write_atomic(path, lambda local: pq.write_table(table, local, **_parquet_options(spec)))


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
        mine = values[start:start + rows]
        start += rows
        if not rows:
            continue
        stats = metadata.row_group(group).column(index).statistics
        if stats is None or not stats.has_min_max or not (stats.min == stats.max and (mine == stats.min).all()):
            return f"damaged (row group {group}'s statistics do not match its {spec.partition} values)"
    return None


def _row_groups_by_value(paths: list[str], column: str, storage: Storage) -> dict[Any, list[list[int]]]:
    """{value of ``column``: for each shard file, the indices of its row groups holding that value},
    from the footers' statistics (``_write_grouped`` writes one row group per value)."""
    found: dict[Any, list[list[int]]] = {}
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
    return found


def _partition_order(spec: TableSpec) -> list[str]:
    """The partition column, then the sort columns within a partition."""
    return [spec.partition, *(column for column in spec.sort if column != spec.partition)]


# Rows gathered and written at a time, one row group each: the sorted partition is never held twice.
_BATCH_ROWS = 1 << 17


def _merged_batches(table: pa.Table, spec: TableSpec, value: Any) -> Iterable[pa.Table]:
    """One partition's rows (one chunk per shard, each in ``sort`` order) in ``sort`` order, without
    the partition column, ``_BATCH_ROWS`` at a time; keys checked unique as they go."""
    import pyarrow.compute as pc

    order = _partition_order(spec)[1:]
    body = table.drop_columns([spec.partition])
    del table
    by_key = len(spec.key) == 1 and tuple(order[:1]) == spec.key
    if spec.key and not by_key:
        _check_unique(body, spec, value)
    if not body.num_rows:
        yield body
        return
    indices = pc.sort_indices(body, [(column, "ascending") for column in order]).to_numpy() if order else None
    last = None
    for start in range(0, body.num_rows, _BATCH_ROWS):
        if order:
            batch = _gather(body, indices[start:start + _BATCH_ROWS])
        else:
            batch = body.slice(start, _BATCH_ROWS)
        if by_key:
            last = _check_sorted_unique(batch.column(spec.key[0]), last, spec, value)
        yield batch


def _prefetched(items: Iterator, depth: int = 2) -> Iterator:
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

    counts = pc.value_counts(table.column(spec.key[0]) if len(spec.key) == 1 else pc.binary_join_element_wise(
        *[pc.cast(table.column(k), pa.string()) for k in spec.key], "\x1f"))
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
    return StoreError(f"table {spec.name!r}, {spec.partition} = {partition_value}: {'/'.join(spec.key)} "
                      f"{key!r} appears more than once; no row is dropped silently, so no table was "
                      "written (a bug: please report it)")


def _check_rising(column: pa.ChunkedArray, last: int | None, table: str, key: str, shard_id: str) -> int:
    """The column's last value, after checking that it rises strictly from ``last``."""
    values = to_numpy(column)
    steps = values[1:] <= values[:-1]
    if last is not None and values[0] <= last:
        bad = int(values[0])
    elif steps.any():
        bad = int(values[1:][steps][0])
    else:
        return int(values[-1])
    raise StoreError(f"table {table!r}: {key} = {bad} in shard {shard_id} repeats or comes out of order; "
                     "its rows would be lost or misplaced, so no table was written (a bug: please report it)")


def write_batch(location: str, field: str, ids: list[str], values: list[Any], value_type: pa.DataType) -> None:
    """Write an input batch (records with ``id`` and ``field``) atomically to a local path or a URI:
    Parquet when it ends in .parquet, else JSONL, one compact object per line."""
    target = Storage.at(location)

    def write(local: str) -> None:
        if location.lower().endswith(".parquet"):
            pq.write_table(pa.table({"id": pa.array(ids, pa.string()), field: pa.array(values, type=value_type)}), local)
            return
        with open(local, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps({"id": i, field: v}, separators=(",", ":")) + "\n"
                              for i, v in zip(ids, values))

    target.write_atomic(target.root, write)
