"""Reading a Parquet slice: rows ``[start_row, end_row)`` of an ``id`` column and a payload column.

Like JSONL, two readers return the same ``Records``: the slice as Arrow columns, as they are, when
the payload column has exactly the payload type ``FAST_TYPE`` and every row has an id, no null at
any depth and valid UTF-8 (Parquet does not check it); else row by row, each row's payload as
Python values through the job's ``check``, and every row that cannot be read rejected with its
reason.  Only the row groups that overlap the slice are read.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from batchenum.pipeline.arrow import has_nulls
from batchenum.pipeline.errors import InputError
from batchenum.pipeline.inputs.jsonl import FAST_TYPE
from batchenum.pipeline.inputs.plan import check_unchanged, open_parquet, overlapping_row_groups
from batchenum.pipeline.inputs.records import Check, Records, RecordsBuilder, Rejected, record_id
from batchenum.pipeline.storage import Storage

__all__ = ["read_parquet"]


def read_parquet(
    spec: dict, source: Storage, field: str, payload_type: pa.DataType, check: Check | None, fingerprint: str
) -> Records:
    """The records of a Parquet slice: as Arrow columns when they are clean, else row by row."""
    table = _parquet_rows(spec, field, source)
    first = spec["start_row"] + 1
    if (
        payload_type.equals(FAST_TYPE)
        and "id" in table.column_names
        and table.schema.field(field).type.equals(payload_type)
    ):
        ids, payloads = table.column("id").combine_chunks(), table.column(field).combine_chunks()
        is_id_type = pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type) or pa.types.is_integer(ids.type)
        if not ids.null_count and not has_nulls(payloads) and is_id_type and _valid(ids) and _valid(payloads):
            return Records(
                ids=ids if ids.type.equals(pa.string()) else ids.cast(pa.string()),  # as str() writes
                positions=np.arange(first, first + table.num_rows, dtype=np.int64),  # integers
                payloads=payloads,
                position_label="row",
                rejected=Rejected(),
                fingerprint=fingerprint,
            )
    return _read_rows(table, first, field, payload_type, check, fingerprint)


def _parquet_rows(spec: dict, field: str, source: Storage) -> pa.Table:
    """The rows ``[start_row, end_row)`` as a pyarrow Table of the id (if any) and payload columns,
    reading only the row groups that overlap them."""
    check_unchanged(spec, source)
    parquet_file = open_parquet(source)
    start, end = spec["start_row"], spec["end_row"]
    groups, first = overlapping_row_groups(parquet_file.metadata, start, end)
    columns = [name for name in ("id", field) if name in parquet_file.schema_arrow.names]
    try:
        table = parquet_file.read_row_groups(groups, columns=columns)
    except Exception as exc:  # a damaged page or an unsupported encoding: pyarrow raises several types
        raise InputError(f"cannot read rows {start + 1}..{end} of Parquet input {spec['path']}: {exc}") from None
    return table.slice(start - (first or 0), end - start)


def _read_rows(
    table: pa.Table, first: int, field: str, payload_type: pa.DataType, check: Check | None, fingerprint: str
) -> Records:
    """Every row of a Parquet slice as a record; a missing or invalid id, or a string that is not
    valid UTF-8, is the row's reason."""
    values, bad_values = _column_values(table.column(field))
    if "id" in table.column_names:
        raw_ids, bad_ids = _column_values(table.column("id"))
    else:
        raw_ids, bad_ids = [None] * len(values), set()
    records = RecordsBuilder(field, payload_type, check, "row")
    for offset, (raw_id, value) in enumerate(zip(raw_ids, values)):
        row = first + offset
        if offset in bad_ids or offset in bad_values:
            column = "id" if offset in bad_ids else field
            records.add(row, None, None, f"row {row}: {column!r} holds text that is not valid UTF-8")
            continue
        id_, error = record_id(raw_id, True, f"row {row}")
        records.add(row, id_, value, error)
    return records.records(fingerprint)


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
