"""The Parquet files batchenum writes: their columns and types, how they are written (sizes,
compression, page checksums), the provenance and stats their footers record, the order a streamed
table's key keeps, and reads that trust nothing in a file (``read_verified``).

Everything that writes or reads the store's files (shard_store.py, table_commit.py) goes through
here, so that one place says what a file of ours is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from batchenum.pipeline.arrow import NUMPY_DTYPES, from_list, from_numpy, to_numpy
from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.job import Shard, TableSpec
from batchenum.pipeline.storage import StorageUnavailableError

__all__ = [
    "DamagedFileError",
    "PART_ROWS",
    "Provenance",
    "ROW_GROUP_ROWS",
    "RANGE_GROUP_ROWS",
    "SHARD_ROW_GROUP_ROWS",
    "StoreError",
    "TAKEOVER_ROWS",
    "arrow_type",
    "columns_problem",
    "read_metadata",
    "read_verified",
    "recorded_metadata",
    "table_schema",
    "to_arrow",
]

# Final tables are written in row groups of at least this many rows (the last may be smaller) and
# parts of about PART_ROWS rows: sizes that suit readers, whatever the shards' sizes.  A shard of a
# streamed table holding TAKEOVER_ROWS rows or more is already such a part (its rows in one row
# group of up to SHARD_ROW_GROUP_ROWS): the finish takes its file over instead of rewriting it.
ROW_GROUP_ROWS = 1 << 17
PART_ROWS = 1 << 22
TAKEOVER_ROWS = 1 << 16
SHARD_ROW_GROUP_ROWS = 1 << 20
# A shard of a merged table is written sorted by its range column (``range_column``) in row groups of
# this many rows, so that each task of the merge reads only the row groups its range reaches, by their
# statistics (pipeline/table_merge.py).
RANGE_GROUP_ROWS = 1 << 16


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


def parquet_options(spec: TableSpec, compression: str = "zstd") -> dict[str, Any]:
    """How every Parquet file of ``spec`` is written: with page checksums (a reader tells a damaged
    file from a good one), and a dictionary for every column but the distinct ones."""
    return {
        "compression": compression,
        "write_page_checksum": True,
        "use_dictionary": [c.name for c in spec.columns if not c.distinct],
    }


def table_schema(spec: TableSpec) -> pa.Schema:
    """The columns every file of ``spec`` holds, with their Arrow types."""
    return pa.schema([pa.field(c.name, arrow_type(c.type)) for c in spec.columns])


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
        raise DamagedFileError(f"{where or 'a Parquet file'} is damaged ({short_reason(error)})") from None
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


def short_reason(error: BaseException) -> str:
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


def encode_metadata(meta: dict[str, str]) -> dict[bytes, bytes]:
    return {(_META_PREFIX + k).encode(): v.encode() for k, v in meta.items()}


def read_metadata(path: str, filesystem: Any) -> dict[str, str]:
    """The batchenum metadata of a Parquet file (provenance, stats) from its footer alone."""
    return decode_metadata(pq.read_schema(path, filesystem=filesystem).metadata)


def recorded_metadata(schema: pa.Schema) -> dict[str, str]:
    """The batchenum metadata (provenance, stats) a table read from a file carries on its schema."""
    return decode_metadata(schema.metadata)


def decode_metadata(raw: dict[bytes, bytes] | None) -> dict[str, str]:
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
    return pa.Table.from_arrays(arrays, schema=table_schema(spec))


def _column_array(values: Any, arrow_type: pa.DataType) -> pa.Array:
    """One column as an Arrow array: an Arrow array of the type as it is, a numpy array of the
    type's dtype by sharing its buffer, an empty list as an empty array, a list of ints or strings
    from its buffers (none of them imports pandas, pipeline/arrow.py), anything else through
    ``pa.array``."""
    if isinstance(values, pa.Array) and values.type.equals(arrow_type):
        return values
    if isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype == NUMPY_DTYPES.get(arrow_type):
        return from_numpy(values, arrow_type)
    if isinstance(values, (list, tuple)) and not values:  # a shard's errors, usually
        return pa.nulls(0, arrow_type)
    built = from_list(values, arrow_type) if isinstance(values, list) else None
    return built if built is not None else pa.array(values, type=arrow_type)


def decode_stats(found: dict[str, str]) -> dict | None:
    """The stats a shard recorded (``{}`` when none), or None when they are not a JSON object."""
    try:
        stats = json.loads(found.get("stats") or "{}")
    except ValueError:
        return None
    return stats if isinstance(stats, dict) else None


def partition_column(spec: TableSpec) -> str:
    """The partition column of grouped table ``spec``; StoreError if the table is not grouped."""
    if spec.partition is None:
        raise StoreError(f"internal error: table {spec.name} has no partition column, so it cannot be read by value")
    return spec.partition


def partition_order(spec: TableSpec) -> list[str]:
    """The partition column, then the sort columns within a partition."""
    partition = partition_column(spec)
    return [partition, *(column for column in spec.sort if column != partition)]


def merged_order(spec: TableSpec) -> list[str]:
    """The columns a merged table's rows are sorted by: its partition column first, if it has one."""
    return partition_order(spec) if spec.partition is not None else list(spec.sort)


def range_column(spec: TableSpec) -> str | None:
    """The column whose ranges split a merged table in one round (pipeline/table_merge.py): its first
    sort column when that is a key column (all rows of a key then fall in one range), or its first
    sort column when it has no key; None when the table needs two rounds or has no sort."""
    order = merged_order(spec)
    if order and (not spec.key or order[0] in spec.key):
        return order[0]
    return None


def key_columns(spec: TableSpec) -> tuple[str, ...]:
    """The columns whose values rise strictly through a streamed table: its key, else its first sort column."""
    return tuple(spec.key) or tuple(spec.sort[:1])


def check_rising(
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
        f"its rows would be lost or misplaced, so no table was written{STREAMED_ORDER}"
    )


# What a job that streams a table must do (pipeline/job.py, Job.streamed_tables)
STREAMED_ORDER = (
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
    equal the previous row's: one contiguous comparison, faster than comparing bytes objects;
    docs/benchmarks.md#the-finish-merging-and-checking-keys)."""
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
