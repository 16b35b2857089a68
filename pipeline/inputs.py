"""Generic record input: split a JSONL or Parquet file into slices, read one slice as records.

A record is one JSON object per line (JSONL) or one row (Parquet) with an ``id`` and a payload
field.  Nothing here knows what the payload means: readable payloads are handed over as plain
Python values, and every record that cannot be read is still accounted for with a plain reason.
A job that can validate payloads in bulk may first ask ``read_slice_arrow`` for the whole slice
as Arrow buffers, and fall back to ``read_slice`` when it declines.

    >>> specs = plan_slices("batch.jsonl", "grid", records_per_slice=25_000)   # doctest: +SKIP
    >>> records = read_slice(specs[0], "grid")                                  # doctest: +SKIP
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field as dataclass_field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from pipeline.errors import InputError
from pipeline.storage import Storage, StorageError

__all__ = [
    "RecordSlice",
    "ArrowSlice",
    "plan_slices",
    "read_slice",
    "read_slice_arrow",
    "string_list_buffers",
    "describe_input",
    "input_storage",
    "InputError",
]

_PARQUET_MAGIC = b"PAR1"
_JSONL_SUFFIXES = (".jsonl", ".ndjson", ".jsonlines", ".json")
_SCAN_BLOCK = 1 << 24  # bytes read at a time when counting lines on the driver
_ARROW_BLOCK = 1 << 24  # pyarrow.json block size; a longer line makes the fast path fall back


@dataclass
class RecordSlice:
    """The records of one slice, in file order; the four lists have one entry per record.

    positions:      1-based line number (JSONL) or row number (Parquet) of each record.
    ids:            the record's id as a string (integer ids converted), None if missing/invalid.
    values:         the payload field as plain Python, None when the record is unreadable.
    errors:         None when the record is readable, else a plain reason naming its position.
    position_label: "line" or "row".
    """

    positions: list[int] = dataclass_field(default_factory=list)
    ids: list[str | None] = dataclass_field(default_factory=list)
    values: list[Any] = dataclass_field(default_factory=list)
    errors: list[str | None] = dataclass_field(default_factory=list)
    position_label: str = "line"

    def __len__(self) -> int:
        return len(self.positions)

    def where(self, i: int) -> str:
        """Record i's position as text: "line N" or "row N"."""
        return f"{self.position_label} {self.positions[i]}"

    def name(self, i: int) -> str:
        """Record i's id, or its position when it has none, so that every error row is named."""
        return self.ids[i] if self.ids[i] is not None else self.where(i)

    def _add(self, position: int, id_: str | None, value: Any, error: str | None) -> None:
        self.positions.append(position)
        self.ids.append(id_)
        self.values.append(value)
        self.errors.append(error)


@dataclass
class ArrowSlice:
    """A slice that pyarrow read whole and without doubt (``read_slice_arrow``): every record is
    readable, has an id, and its payload has exactly the expected type with no null at any depth.

    positions:      1-based line (JSONL) or row (Parquet) number of each record.
    ids:            each record's id as a string.
    values:         the payloads, one pyarrow Array of the expected type.
    position_label: "line" or "row".
    """

    positions: list[int]
    ids: list[str]
    values: Any
    position_label: str


# ---------------------------------------------------------------------------------------- planning


def plan_slices(path: str | Storage, field: str, records_per_slice: int) -> list[dict]:
    """Split the file at ``path`` into JSON-serialisable slice specs, in file order.

    path:              a JSONL or Parquet file (Parquet is recognised by its suffix or magic bytes):
                       a local path, a URI (``s3://bucket/batch.jsonl``) or a Storage for one.
    field:             the payload field every record should carry (checked up front for Parquet).
    records_per_slice: lines (JSONL, blank lines included) or rows (Parquet) per slice, at least 1.

    JSONL slices are byte ranges cut just after a newline, each with the number of its first line;
    the driver only counts newlines, it never parses.  Parquet slices are row ranges.  The specs
    cover the whole file exactly once; an empty file has none.  Raises InputError for a missing or
    unreadable file or one whose format cannot be told.
    """
    if not isinstance(records_per_slice, int) or records_per_slice < 1:
        raise ValueError(f"records_per_slice must be an integer of at least 1, not {records_per_slice!r}")
    source = input_storage(path)
    base = describe_input(source)
    if _detect_format(source) == "parquet":
        return [{**base, **rows} for rows in _plan_parquet(source, field, records_per_slice)]
    return [{**base, **cut} for cut in _plan_jsonl(source, records_per_slice)]


def input_storage(path: str | Storage) -> Storage:
    """The Storage of one input file; InputError for a location that cannot be used."""
    if isinstance(path, Storage):
        return path
    try:
        return Storage.at(path)
    except StorageError as error:
        raise InputError(f"input: {error}") from None


def describe_input(path: str | Storage) -> dict:
    """{"path": path or URI, "size": bytes, "mtime_ns": modification time} of an input file, for
    provenance (a changed file is not mistaken for the one already processed).  Raises InputError
    for a missing or unreadable file."""
    source = input_storage(path)
    size, mtime_ns = _stat_input(source)
    return {"path": source.display_root, "size": size, "mtime_ns": mtime_ns}


def _stat_input(source: Storage) -> tuple[int, int]:
    """(size, mtime_ns) of the input file, or an InputError saying why it cannot be used."""
    where = source.display_root
    try:
        size, mtime_ns = source.stat(source.root)
        if source.local:
            with open(source.root, "rb"):
                pass
    except FileNotFoundError:
        raise InputError(f"input file {where} does not exist") from None
    except StorageError as error:
        raise InputError(f"input {error}") from None
    except PermissionError:
        raise InputError(f"cannot read input file {where}: permission denied") from None
    except OSError as exc:
        raise InputError(f"cannot read input file {where}: {exc.strerror or exc}") from None
    return size, mtime_ns


def _detect_format(source: Storage) -> str:
    """"parquet" or "jsonl", from the suffix, else from the first bytes."""
    path = source.display_root
    lower = path.lower()
    if lower.endswith(".parquet"):
        return "parquet"
    head = source.read_bytes(source.root, 0, 4)
    if head == _PARQUET_MAGIC:
        return "parquet"
    if lower.endswith(_JSONL_SUFFIXES) or head.lstrip()[:1] in (b"{", b""):
        return "jsonl"
    raise InputError(
        f"cannot tell the format of {path}: name it .jsonl (one JSON object per line) "
        "or .parquet"
    )


def _plan_jsonl(source: Storage, lines_per_slice: int) -> list[dict]:
    """Byte ranges of ``lines_per_slice`` lines each, found by counting newlines in blocks."""
    cuts = [0]
    lines_seen = 0
    offset = 0
    with source.open_input(source.root) as handle:
        while block := handle.read(_SCAN_BLOCK):
            newlines = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 0x0A)
            # Cut after every newline that ends a multiple of lines_per_slice lines.
            first = (lines_per_slice - 1 - lines_seen) % lines_per_slice
            cuts.extend(int(offset + pos + 1) for pos in newlines[first::lines_per_slice])
            lines_seen += len(newlines)
            offset += len(block)
    if cuts[-1] != offset:
        cuts.append(offset)  # the tail, possibly a last line without a newline
    return [
        {"format": "jsonl", "start": start, "end": end, "first_line": 1 + k * lines_per_slice}
        for k, (start, end) in enumerate(zip(cuts, cuts[1:]))
    ]


def _plan_parquet(source: Storage, field: str, rows_per_slice: int) -> list[dict]:
    """Row ranges of ``rows_per_slice`` rows each; checks that the payload column exists."""
    path = source.display_root
    parquet_file = _open_parquet(source)
    names = parquet_file.schema_arrow.names
    if field not in names:
        raise InputError(f"Parquet input {path} has no column {field!r} (its columns: {', '.join(names)})")
    total = parquet_file.metadata.num_rows
    return [
        {"format": "parquet", "start_row": start, "end_row": min(start + rows_per_slice, total)}
        for start in range(0, total, rows_per_slice)
    ]


def _open_parquet(source: Storage):
    """A pyarrow ParquetFile, or an InputError if the file is not readable Parquet."""
    try:
        return pq.ParquetFile(source.open_input(source.root))
    except Exception as exc:  # pyarrow raises several types for a damaged or foreign file
        raise InputError(f"cannot read {source.display_root} as Parquet: {exc}") from None


# ----------------------------------------------------------------------------------------- reading


def read_slice(spec: dict, field: str, fast_type: pa.DataType | None = None,
               source: Storage | None = None) -> RecordSlice:
    """Read the records of one slice planned by ``plan_slices``.

    spec:      one slice spec.
    field:     the payload field.
    fast_type: for JSONL, the pyarrow type the payload has when a record is well formed (for
               example ``pa.list_(pa.string())``).  When given, the slice is first read with
               pyarrow.json against the schema {id: string, field: fast_type}; on any doubt (a
               parse or type error, blank lines, a missing or null id or payload) the slice is
               read again line by line with ``json.loads`` so that every line is accounted for and
               payloads keep their JSON types.  None reads line by line directly.
    source:    the input's Storage (carries object-store credentials to workers); default: the
               one ``spec["path"]`` names, reached with this process's environment.

    Every non-blank line becomes exactly one record; blank lines are skipped.  Raises InputError
    if the file changed size since it was planned.
    """
    source = source or input_storage(spec["path"])
    if spec["format"] == "parquet":
        return _read_parquet_slice(spec, field, source)
    data = _slice_bytes(spec, source)
    if fast_type is not None:
        table = _jsonl_table(data, field, fast_type)
        if table is not None:
            return RecordSlice(
                positions=list(range(spec["first_line"], spec["first_line"] + table.num_rows)),
                ids=table.column("id").to_pylist(),
                values=table.column(field).to_pylist(),
                errors=[None] * table.num_rows,
                position_label="line",
            )
    return _read_jsonl_lines(data, spec["first_line"], field)


def read_slice_arrow(spec: dict, field: str, fast_type: pa.DataType,
                     source: Storage | None = None) -> ArrowSlice | None:
    """The slice as one Arrow array of payloads when pyarrow reads every record without doubt;
    None otherwise (then ``read_slice`` accounts for every record, line by line).

    spec:      one slice spec from ``plan_slices``.
    field:     the payload field.
    fast_type: the pyarrow type a well-formed payload has; for JSONL the same strict reading as
               ``read_slice``'s fast path, for Parquet the column must have exactly this type.

    Lets a job validate payloads in bulk from Arrow buffers instead of Python objects.
    """
    source = source or input_storage(spec["path"])
    if spec["format"] == "parquet":
        table = _parquet_rows(spec, field, source)
        label, first = "row", spec["start_row"] + 1
        if "id" not in table.column_names or not table.schema.field(field).type.equals(fast_type):
            return None
    else:
        table = _jsonl_table(_slice_bytes(spec, source), field, fast_type)
        label, first = "line", spec["first_line"]
        if table is None:
            return None
    ids, values = table.column("id").combine_chunks(), table.column(field).combine_chunks()
    if ids.null_count or _has_nulls(values) or not _is_id_type(ids.type):
        return None
    return ArrowSlice(
        positions=list(range(first, first + table.num_rows)),
        ids=[str(i) for i in ids.to_pylist()] if not _is_string(ids.type) else ids.to_pylist(),
        values=values,
        position_label=label,
    )


def string_list_buffers(values) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(chars, string_offsets, list_offsets) of a pyarrow list<string> array without copying:
    list i holds strings ``list_offsets[i] .. list_offsets[i + 1] - 1``, and string j is the UTF-8
    bytes ``chars[string_offsets[j] : string_offsets[j + 1]]``.  Offsets are int64."""
    strings = values.values
    _, offset_buffer, chars = strings.buffers()
    if offset_buffer is None:  # no strings at all
        string_offsets = np.zeros(1, dtype=np.int64)
    else:
        width = np.int64 if pa.types.is_large_string(strings.type) else np.int32
        string_offsets = np.frombuffer(offset_buffer, dtype=width)[strings.offset : strings.offset + len(strings) + 1]
    return (
        np.frombuffer(chars, dtype=np.uint8) if chars is not None else np.zeros(0, dtype=np.uint8),
        string_offsets.astype(np.int64),
        np.asarray(values.offsets, dtype=np.int64),
    )


def _has_nulls(array) -> bool:
    """Whether a pyarrow array has a null at any list depth."""
    if array.null_count:
        return True
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        return _has_nulls(array.flatten())
    return False


def _is_string(arrow_type) -> bool:
    """Whether an Arrow type is a (large) string."""
    return pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)


def _is_id_type(arrow_type) -> bool:
    """Ids a record may carry: strings, or integers (converted to strings)."""
    return _is_string(arrow_type) or pa.types.is_integer(arrow_type)


def _slice_bytes(spec: dict, source: Storage) -> bytes:
    """The bytes of a JSONL slice; InputError if the file changed size since planning."""
    _check_unchanged(spec, source)
    return source.read_bytes(source.root, spec["start"], spec["end"])


def _check_unchanged(spec: dict, source: Storage) -> None:
    if _stat_input(source)[0] != spec["size"]:
        raise InputError(f"input file {spec['path']} changed since the batch was planned; run it again")


def _jsonl_table(data: bytes, field: str, fast_type: pa.DataType) -> pa.Table | None:
    """The slice as a pyarrow Table {id, field}, or None when it could differ from ``json.loads``."""
    line_count = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    schema = pa.schema([("id", pa.string()), (field, fast_type)])
    try:
        table = pa_json.read_json(
            io.BytesIO(data),
            read_options=pa_json.ReadOptions(block_size=_ARROW_BLOCK),
            parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
    except Exception:  # any parse or type problem: the line-by-line reader explains it per line
        return None
    # A row count that differs from the line count means blank lines or several objects on a line;
    # a null means "missing" and "null" cannot be told apart.  Either way, read line by line.
    if table.num_rows != line_count or table.column("id").null_count or table.column(field).null_count:
        return None
    return table


def _read_jsonl_lines(data: bytes, first_line: int, field: str) -> RecordSlice:
    """The slice line by line with ``json.loads``: every non-blank line becomes one record."""
    records = RecordSlice(position_label="line")
    for offset, raw in enumerate(data.split(b"\n")):
        if raw.strip():
            line = first_line + offset
            records._add(line, *_parse_json_line(raw, line, field))
    return records


def _parse_json_line(raw: bytes, line: int, field: str) -> tuple[str | None, Any, str | None]:
    """(id, value, error) for one non-blank line."""
    where = f"line {line}"
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return None, None, f"{where}: not valid UTF-8 (byte {exc.start})"
    except json.JSONDecodeError as exc:
        return None, None, f"{where}: not valid JSON: {exc.msg} at column {exc.colno}"
    except (ValueError, RecursionError) as exc:  # e.g. an integer too long, nesting too deep
        return None, None, f"{where}: not valid JSON: {exc}"
    if not isinstance(obj, dict):
        return None, None, f"{where}: not a JSON object but {_json_type_name(obj)}"
    id_, id_error = _record_id(obj.get("id"), "id" in obj, where)
    if id_error:
        return id_, None, id_error
    if field not in obj:
        return id_, None, f"{where}: no {field!r}"
    return id_, obj[field], None


def _record_id(value: Any, present: bool, where: str) -> tuple[str | None, str | None]:
    """(id string, error) for an id value; integer ids become strings."""
    if not present or value is None:
        return None, f"{where}: no 'id'"
    if isinstance(value, str):
        return value, None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value), None
    return None, f"{where}: 'id' must be a string or an integer, not {_json_type_name(value)}"


def _json_type_name(value: Any) -> str:
    """The JSON name of a decoded value's type, for messages."""
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
                       (list, "an array"), (dict, "an object")):
        if isinstance(value, kind):
            return name
    return "null" if value is None else type(value).__name__


def _parquet_rows(spec: dict, field: str, source: Storage):
    """The rows ``[start_row, end_row)`` as a pyarrow Table of the id (if any) and payload columns,
    reading only the row groups that overlap them."""
    _check_unchanged(spec, source)
    parquet_file = _open_parquet(source)
    start, end = spec["start_row"], spec["end_row"]
    groups, group_start, first = [], 0, None
    for index in range(parquet_file.metadata.num_row_groups):
        group_end = group_start + parquet_file.metadata.row_group(index).num_rows
        if group_start < end and group_end > start:
            groups.append(index)
            first = group_start if first is None else first
        group_start = group_end
    columns = [name for name in ("id", field) if name in parquet_file.schema_arrow.names]
    return parquet_file.read_row_groups(groups, columns=columns).slice(start - (first or 0), end - start)


def _read_parquet_slice(spec: dict, field: str, source: Storage) -> RecordSlice:
    """Every row of a Parquet slice as a record; a missing or invalid id is the row's error."""
    table = _parquet_rows(spec, field, source)
    values = table.column(field).to_pylist()
    raw_ids = table.column("id").to_pylist() if "id" in table.column_names else [None] * len(values)
    records = RecordSlice(position_label="row")
    for offset, (raw_id, value) in enumerate(zip(raw_ids, values)):
        row = spec["start_row"] + 1 + offset
        id_, error = _record_id(raw_id, True, f"row {row}")
        records._add(row, id_, None if error else value, error)
    return records


def accounting_summary(job: str, answered: int, rejected: int) -> str:
    """The summary line of a record batch: every record read was answered or rejected."""
    return f"{job}: read {answered + rejected}, answered {answered}, rejected {rejected}"
