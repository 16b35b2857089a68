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

import json
import os
import posixpath
from dataclasses import dataclass
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from pipeline.errors import PipelineError
from pipeline.job import Job, Shard, ShardOutput, TableSpec
from pipeline.storage import TMP_MARK, Storage

__all__ = ["Provenance", "ShardStore", "StoreError", "arrow_type", "OTHER_PARAMETERS", "PLAN_FILE", "read_metadata"]

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


def arrow_type(type_name: str) -> pa.DataType:
    return _ARROW_TYPES[type_name]


def _schema(spec: TableSpec, drop: str | None = None) -> pa.Schema:
    return pa.schema([pa.field(c.name, arrow_type(c.type)) for c in spec.columns if c.name != drop])


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
            arrays.append(pa.array(columns[column.name], type=arrow_type(column.type)))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as error:
            raise StoreError(f"table {spec.name!r}, column {column.name!r}: {error}") from error
    return pa.Table.from_arrays(arrays, schema=_schema(spec))


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
                self._write_parquet(table, self.shard_path(name, shard.id))
            else:
                self._write_grouped(table, spec.partition, self.shard_path(name, shard.id))
            rows[name] = table.num_rows
        return rows

    def check_shard(self, shard: Shard, tables: Iterable[str], full: bool = True) -> str | None:
        """None when every table of the shard is committed with matching provenance; otherwise
        why not ("missing" when it simply was never written).  ``full`` reads every page and checks
        its checksum (before reusing a shard); otherwise only the footer is read (a shard this run
        has just committed, whose pages the merge reads, and checks, anyway)."""
        for name in tables:
            path = self.shard_path(name, shard.id)
            if not self.storage.exists(path):
                return "missing"
            problem = self._check_file(path, shard, name, full)
            if problem:
                return problem if problem.startswith(OTHER_PARAMETERS) else f"{self.storage.relative(path)}: {problem}"
        return None

    def write_plan(self, shards: list[Shard], run: dict[str, Any]) -> None:
        """Record the plan when a run starts (``_plan.json``), so that ``batchenum status`` knows the
        total while the run is in progress, from anywhere that reaches the folder."""
        record = {"job": self.provenance.job, "version": self.provenance.version, "params": self.provenance.params,
                  "shards": [shard.id for shard in shards], "tables": list(self.job.shard_tables
                                                                          or [t.name for t in self.job.tables]),
                  **run}
        self.storage.write_text(self.storage.join(PLAN_FILE), json.dumps(record, sort_keys=True) + "\n")

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

    def _check_file(self, path: str, shard: Shard, name: str, full: bool = True) -> str | None:
        try:
            if full:
                table = pq.read_table(path, filesystem=self.storage.fs, page_checksum_verification=True)
                schema, rows = table.schema, table.num_rows
            else:
                with self.storage.open_input(path) as handle:
                    footer = pq.ParquetFile(handle)
                    schema, rows = footer.schema_arrow, footer.metadata.num_rows
        except Exception as error:  # any failure to read means the file cannot be trusted
            return f"unreadable ({type(error).__name__}: {error})"
        found = _decode_metadata(schema.metadata)
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
        return json.loads(_decode_metadata(metadata).get("stats") or "{}")

    def read_shard_tables(self, shard: Shard) -> dict[str, pa.Table]:
        """Every committed table of one shard (for a job that redoes only some of its records)."""
        tables = self.job.shard_tables or [spec.name for spec in self.job.tables]
        return {name: pq.read_table(self.shard_path(name, shard.id), filesystem=self.storage.fs)
                .replace_schema_metadata(None) for name in tables}

    def shard_rows(self, table: str, shard_id: str) -> int:
        """Rows of a committed shard table, from its footer."""
        with self.storage.open_input(self.shard_path(table, shard_id)) as handle:
            return pq.ParquetFile(handle).metadata.num_rows

    def recorded_stats(self, shard: Shard) -> dict[str, Any]:
        """The stats of a committed shard's first table ({} when it cannot be read)."""
        try:
            return self.shard_stats(self.job.shard_tables[0] if self.job.shard_tables else self.job.tables[0].name,
                                    shard.id)
        except Exception:  # damaged or gone since it was checked: it is then computed again
            return {}

    def remove_temporaries(self) -> int:
        """Delete temporary files left by killed writers; returns how many."""
        leftovers = [path for path in self.storage.list_files() if TMP_MARK in path]
        for path in leftovers:
            self.storage.delete_file(path)
        return len(leftovers)

    def read_shards(self, name: str, shard_ids: list[str]) -> pa.Table:
        """Concatenate one table's committed shard files, in the given shard order.  Every file must
        be there: a missing one is an error, never skipped."""
        spec = self.job.table_spec(name)
        parts = [pq.read_table(self.shard_path(name, shard_id), filesystem=self.storage.fs,
                               page_checksum_verification=True).replace_schema_metadata(None) for shard_id in shard_ids]
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
            self._write_parquet(table.replace_schema_metadata(meta), path)
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
        """Each partition read from every shard (a filter on the partition column), sorted, checked
        for a repeated key (an error naming it, never a dropped row) and written; the driver holds
        one partition at a time."""
        paths = [self.shard_path(spec.name, shard_id) for shard_id in shard_ids]
        values = sorted({v for path in paths for v in _row_group_values(path, spec.partition, self.storage.fs)})
        meta = _encode_metadata(self.provenance.final_metadata(spec.name))
        for value in values:
            parts = [pq.read_table(path, filesystem=self.storage.fs, filters=[(spec.partition, "==", value)],
                                   page_checksum_verification=True).replace_schema_metadata(None) for path in paths]
            table = pa.concat_tables(parts)
            order = [column for column in spec.sort if column != spec.partition]  # constant within
            if order:
                table = table.sort_by([(column, "ascending") for column in order])
            if spec.key:
                _check_unique(table, spec, value, sorted_by_key=tuple(order) == spec.key)
            body = table.drop_columns([spec.partition]).replace_schema_metadata(meta)
            self._write_parquet(body, self.storage.join(spec.name, f"{spec.partition}={value}", "part-0.parquet"))
        self._remove_other_partitions(spec, {f"{spec.partition}={value}" for value in values})
        return self.storage.uri(self.storage.join(spec.name))

    def _write_in_shard_order(self, spec: TableSpec, shard_ids: list[str]) -> str:
        """Shard files appended in plan order, checking that the int64 key rises strictly across
        the whole table: a duplicate or an out-of-order key is an error naming it and the shard."""
        name = spec.name
        key = spec.key[0] if spec.key else (spec.sort[0] if spec.sort else None)
        schema = _schema(spec).with_metadata(_encode_metadata(self.provenance.final_metadata(name)))
        path = self.storage.join(f"{name}.parquet")

        def write(local: str) -> None:
            last = None
            with pq.ParquetWriter(local, schema, compression="zstd", write_page_checksum=True) as writer:
                for shard_id in shard_ids:
                    part = pq.read_table(self.shard_path(name, shard_id), filesystem=self.storage.fs,
                                         page_checksum_verification=True)
                    part = part.replace_schema_metadata(schema.metadata)
                    if key is not None and part.num_rows:
                        last = _check_rising(part.column(key), last, name, key, shard_id)
                    writer.write_table(part)

        self.storage.write_atomic(path, write)
        return self.storage.uri(path)

    def _write_partitioned(self, spec: TableSpec, table: pa.Table, meta: dict[bytes, bytes]) -> str:
        """Write ``name/<col>=<v>/part-0.parquet``, each file committed atomically in place, then
        remove partitions the new table does not have.  The folder is never absent, and each of its
        files is whole at every moment."""
        final = self.storage.join(spec.name)
        column = table.column(spec.partition).to_pylist()
        body = table.drop_columns([spec.partition]).replace_schema_metadata(meta)
        wanted = set()
        for value in sorted(set(column)):
            mask = pa.array([v == value for v in column])
            folder = f"{spec.partition}={value}"
            wanted.add(folder)
            self._write_parquet(body.filter(mask), self.storage.join(spec.name, folder, "part-0.parquet"))
        self._remove_other_partitions(spec, wanted)
        return self.storage.uri(final)

    def _remove_other_partitions(self, spec: TableSpec, wanted: set[str]) -> None:
        """Partitions an earlier table had and this one has not, and older staging folders."""
        final = self.storage.join(spec.name)
        for folder in self.storage.list_dirs(final):
            if posixpath.basename(folder.replace(os.sep, "/")) not in wanted:
                self.storage.delete_dir(folder)
        for leftover in self.storage.list_dirs(self.storage.root):  # staging folders of older versions
            if posixpath.basename(leftover.replace(os.sep, "/")).startswith(spec.name + TMP_MARK):
                self.storage.delete_dir(leftover)

    def _write_grouped(self, table: pa.Table, column: str, path: str) -> None:
        """A shard of a partitioned table: one row group per value of ``column``, so that writing
        the final table one partition at a time reads each shard's rows once (row-group statistics
        let a filtered read skip the other values)."""
        table = table.sort_by(column)
        values = table.column(column).to_numpy()
        bounds = [0, *(int(i) + 1 for i in (values[1:] != values[:-1]).nonzero()[0]), len(values)]

        def write(local: str) -> None:
            with pq.ParquetWriter(local, table.schema, compression="zstd", write_page_checksum=True) as writer:
                for start, stop in zip(bounds, bounds[1:]):
                    writer.write_table(table.slice(start, stop - start))
                if not len(values):
                    writer.write_table(table)

        self.storage.write_atomic(path, write)

    def _write_parquet(self, table: pa.Table, path: str) -> None:
        # page checksums let a reader tell a damaged file from a good one
        self.storage.write_atomic(
            path, lambda local: pq.write_table(table, local, write_page_checksum=True, compression="zstd"))



def _row_group_values(path: str, column: str, filesystem: Any) -> set:
    """The values of ``column`` in a shard file, from its row-group statistics (one value per row
    group in the files ``_write_grouped`` writes); read from the column when a group has no stats."""
    metadata = pq.read_metadata(path, filesystem=filesystem)
    index = metadata.schema.to_arrow_schema().get_field_index(column)
    values = set()
    for group in range(metadata.num_row_groups):
        stats = metadata.row_group(group).column(index).statistics
        if stats is None or not stats.has_min_max or stats.min != stats.max:
            return set(pq.read_table(path, columns=[column], filesystem=filesystem).column(0).to_pylist())
        values.add(stats.min)
    return values


def _check_unique(table: pa.Table, spec: TableSpec, partition_value: Any, sorted_by_key: bool) -> None:
    """StoreError naming a key that appears twice in a partition (neighbours compared when the
    partition is sorted by its one-column key, 20x cheaper than counting values)."""
    import pyarrow.compute as pc

    if sorted_by_key and len(spec.key) == 1:
        keys = table.column(spec.key[0]).combine_chunks()
        same = pc.equal(keys.slice(1), keys.slice(0, max(len(keys) - 1, 0)))
        repeated = [keys[int(pc.index(same, True).as_py()) + 1].as_py()] if pc.any(same).as_py() else []
    else:
        counts = pc.value_counts(table.column(spec.key[0]) if len(spec.key) == 1 else pc.binary_join_element_wise(
            *[pc.cast(table.column(k), pa.string()) for k in spec.key], "\x1f"))
        repeated = [row["values"] for row in counts.filter(pc.greater(counts.field("counts"), 1)).to_pylist()]
    if repeated:
        raise StoreError(f"table {spec.name!r}, {spec.partition} = {partition_value}: {'/'.join(spec.key)} "
                         f"{repeated[0]!r} appears more than once; no row is dropped silently, so no table was "
                         "written (a bug: please report it)")


def _check_rising(column: pa.ChunkedArray, last: int | None, table: str, key: str, shard_id: str) -> int:
    """The column's last value, after checking that it rises strictly from ``last``."""
    values = column.to_numpy()
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
