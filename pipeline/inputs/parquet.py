"""Reading a Parquet slice: rows ``[start_row, end_row)`` of an ``id`` column and a payload column.

Like JSONL, two readers return the same ``Records``: the slice as Arrow columns, as they are, when
the payload column has exactly the payload type ``FAST_TYPE`` and every row has an id, no null at
any depth and valid UTF-8 (Parquet does not check it); else row by row, each row's payload as
Python values through the job's ``check``, and every row that cannot be read rejected with its
reason.  Only the row groups that overlap the slice are read.

Like JSONL, memory is bounded by the file's footer, before any page is read: a row group of
several rows decompressing to more than ``MAX_ROW_GROUP_BYTES`` refuses the file, and a record
decoding to more than ``MAX_RECORD_BYTES`` (32 MiB, a JSONL line's limit) is rejected, unread when
it is alone in its row group (a "bomb" of huge values in a small compressed file is one record per
row group, as a writer makes it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from batchenum.pipeline.arrow import has_nulls
from batchenum.pipeline.errors import InputError
from batchenum.pipeline.inputs.plan import (
    MAX_RECORD_BYTES,
    check_row_groups,
    check_unchanged,
    decoded_bytes,
    open_parquet,
    overlapping_row_groups,
)
from batchenum.pipeline.inputs.records import FAST_TYPE, Check, Records, RecordsBuilder, Rejected, record_id
from batchenum.pipeline.storage import Storage

__all__ = ["read_parquet"]


def read_parquet(
    spec: dict, source: Storage, field: str, payload_type: pa.DataType, check: Check | None, fingerprint: str
) -> Records:
    """The records of a Parquet slice: as Arrow columns when they are clean, else row by row."""
    rows = _parquet_rows(spec, field, source)
    table = rows.table
    if (
        not rows.oversized
        and payload_type.equals(FAST_TYPE)
        and "id" in table.column_names
        and table.schema.field(field).type.equals(payload_type)
    ):
        ids, payloads = table.column("id").combine_chunks(), table.column(field).combine_chunks()
        is_id_type = pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type) or pa.types.is_integer(ids.type)
        if not ids.null_count and not has_nulls(payloads) and is_id_type and _valid(ids) and _valid(payloads):
            return Records(
                ids=ids if ids.type.equals(pa.string()) else ids.cast(pa.string()),  # as str() writes
                positions=rows.numbers,
                payloads=payloads,
                position_label="row",
                rejected=Rejected(),
                fingerprint=fingerprint,
            )
    return _read_rows(rows, field, payload_type, check, fingerprint)


@dataclass
class _SliceRows:
    """The rows of a slice that were read, and those refused for their size.

    table:     the rows read, in order, as the id (if any) and payload columns;
    numbers:   int64, the 1-based row number of each row of ``table``;
    oversized: {row number: bytes decoded}, records over ``MAX_RECORD_BYTES``, not in ``table``.
    """

    table: pa.Table
    numbers: np.ndarray
    oversized: dict[int, int]


def _parquet_rows(spec: dict, field: str, source: Storage) -> _SliceRows:
    """The rows ``[start_row, end_row)``, reading only the row groups that overlap them.  A row group
    holding one record over ``MAX_RECORD_BYTES`` (by the footer) is not read; a record over it in a
    larger row group is dropped once read.  InputError for a row group of several rows over
    ``MAX_ROW_GROUP_BYTES``, checked before any is read."""
    check_unchanged(spec, source)
    parquet_file = open_parquet(source)
    metadata = parquet_file.metadata
    columns = [name for name in ("id", field) if name in parquet_file.schema_arrow.names]
    check_row_groups(metadata, spec["path"], columns)
    start, end = spec["start_row"], spec["end_row"]
    groups, first = overlapping_row_groups(metadata, start, end)
    oversized: dict[int, int] = {}
    read, pieces = [], []  # the row groups read, and their pieces of the slice (_slice_pieces)
    group_start = first or 0
    for group in groups:
        group_rows = metadata.row_group(group).num_rows
        size = decoded_bytes(metadata, group, columns)
        if group_rows == 1 and size > MAX_RECORD_BYTES:
            oversized[group_start + 1] = size  # its one record, refused unread
        else:
            read.append(group)
            pieces.append((group_start, group_rows, max(start, group_start), min(end, group_start + group_rows)))
        group_start += group_rows
    try:
        table = parquet_file.read_row_groups(read, columns=columns)
    except Exception as exc:  # a damaged page or an unsupported encoding: pyarrow raises several types
        raise InputError(f"cannot read rows {start + 1}..{end} of Parquet input {spec['path']}: {exc}") from None
    table, numbers = _slice_pieces(table, pieces)
    return _without_oversized(table, numbers, oversized)


def _slice_pieces(table: pa.Table, pieces: list[tuple[int, int, int, int]]) -> tuple[pa.Table, np.ndarray]:
    """(the slice's rows of the row groups read, their 1-based row numbers); ``table`` holds those
    row groups whole, and ``pieces`` gives each one's (first row, rows, and the slice's first and
    end rows in it)."""
    kept, numbers, at = [], [], 0
    for group_start, group_rows, first, end in pieces:
        kept.append(table.slice(at + first - group_start, end - first))
        numbers.append(np.arange(first + 1, end + 1, dtype=np.int64))
        at += group_rows
    if not kept:
        return table.slice(0, 0), np.zeros(0, dtype=np.int64)
    return (pa.concat_tables(kept) if len(kept) > 1 else kept[0]), np.concatenate(numbers)


def _without_oversized(table: pa.Table, numbers: np.ndarray, oversized: dict[int, int]) -> _SliceRows:
    """The rows read, less those over ``MAX_RECORD_BYTES`` decoded (added to ``oversized``).  Only a
    table over that size in all can hold one, so an ordinary slice is not measured row by row."""
    if table.nbytes <= MAX_RECORD_BYTES:
        return _SliceRows(table, numbers, oversized)
    sizes = sum((_row_bytes(table.column(name)) for name in table.column_names), np.zeros(len(numbers), np.int64))
    over = sizes > MAX_RECORD_BYTES
    if not over.any():
        return _SliceRows(table, numbers, oversized)
    oversized = {**oversized, **dict(zip(numbers[over].tolist(), sizes[over].tolist()))}
    keep = np.flatnonzero(~over)
    return _SliceRows(table.take(pa.array(keep)), numbers[keep], oversized)


def _row_bytes(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """int64, the bytes each row of ``column`` takes decoded: its values, and the offsets of its
    strings and lists."""
    if isinstance(column, pa.ChunkedArray):
        return np.concatenate([_row_bytes(chunk) for chunk in column.chunks] or [np.zeros(0, np.int64)])
    return np.diff(_boundaries(column))


def _boundaries(array: pa.Array) -> np.ndarray:
    """int64, ``len(array) + 1`` positions: element k takes ``[k + 1] - [k]`` bytes decoded.  Found
    from offsets alone, level by level, so it costs a few numpy passes, not one per value."""
    kind, count = array.type, len(array)
    steps = np.arange(count + 1, dtype=np.int64)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        offsets = array.offsets.to_numpy()
        return _boundaries(array.values)[offsets] + offsets.itemsize * steps
    large = pa.types.is_large_string(kind) or pa.types.is_large_binary(kind)
    if large or pa.types.is_string(kind) or pa.types.is_binary(kind):
        width = np.int64 if large else np.int32
        offsets = np.frombuffer(array.buffers()[1], dtype=width)[array.offset : array.offset + count + 1]
        return offsets.astype(np.int64) + np.dtype(width).itemsize * steps
    if pa.types.is_primitive(kind) and kind.bit_width >= 8:
        return kind.bit_width // 8 * steps
    sizes = np.fromiter((array.slice(k, 1).nbytes for k in range(count)), dtype=np.int64, count=count)
    return np.concatenate(([0], np.cumsum(sizes)))


def _read_rows(
    rows: _SliceRows, field: str, payload_type: pa.DataType, check: Check | None, fingerprint: str
) -> Records:
    """Every row of a Parquet slice as a record; a missing or invalid id, a string that is not
    valid UTF-8, or a record over ``MAX_RECORD_BYTES`` decoded is the row's reason."""
    table = rows.table
    values, bad_values = _column_values(table.column(field))
    if "id" in table.column_names:
        raw_ids, bad_ids = _column_values(table.column("id"))
    else:
        raw_ids, bad_ids = [None] * len(values), set()
    records = RecordsBuilder(field, payload_type, check, "row")
    oversized = sorted(rows.oversized.items())
    for offset, (raw_id, value) in enumerate(zip(raw_ids, values)):
        row = int(rows.numbers[offset])
        while oversized and oversized[0][0] < row:
            _add_oversized(records, *oversized.pop(0))
        if offset in bad_ids or offset in bad_values:
            column = "id" if offset in bad_ids else field
            records.add(row, None, None, f"row {row}: {column!r} holds text that is not valid UTF-8")
            continue
        id_, error = record_id(raw_id, True, f"row {row}")
        records.add(row, id_, value, error)
    for row, size in oversized:
        _add_oversized(records, row, size)
    return records.records(fingerprint)


def _add_oversized(records: RecordsBuilder, row: int, size: int) -> None:
    records.add(
        row,
        None,
        None,
        f"row {row}: the record decodes to {size:,} bytes, more than the {MAX_RECORD_BYTES:,} "
        f"({MAX_RECORD_BYTES >> 20} MiB) a record may take",
    )


def _column_values(column) -> tuple[list, set[int]]:
    """(the column as Python values, indices of the rows holding a string that is not valid UTF-8;
    their values are None)."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    try:
        column.validate(full=True)
        return column.to_pylist(), set()
    except (pa.ArrowInvalid, UnicodeDecodeError):
        pass
    values, bad = [], set()
    for row in range(len(column)):  # the rare damaged slice: row by row, whatever the type
        try:
            values.append(column[row].as_py())
        except UnicodeDecodeError:
            values.append(None)
            bad.add(row)
    return values, bad


def _valid(array) -> bool:
    """Whether an Arrow array passes full validation (for strings: valid UTF-8, which Parquet
    does not guarantee)."""
    try:
        array.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True
