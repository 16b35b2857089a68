"""Reading a JSONL slice: one JSON object per line, with an ``id`` and a payload field.

Three readers, tried in this order, all returning ``Records``:

1. ``jsonl_strict`` (compiled): the commonest shape, ``{"id": "...", "FIELD": ["...", ...]}`` as a
   program writes it; anything else and it declines;
2. ``pyarrow.json`` against the schema {id: string, FIELD: payload type}, used only when it reads the
   slice exactly as the reference does (``_arrow_table`` says when); every record is then accepted;
3. the reference, line by line with ``json.loads`` (``_read_lines``): every non-blank line becomes
   one record, accepted or rejected with its reason; payloads go through the job's ``check``.

The first two (the fast path) are tried only for payloads of type ``FAST_TYPE``, list<string>: the
one shape they are shown to read exactly as ``json.loads`` does (tests/test_inputs_property.py), and
one a job's check leaves as it is.  Any other payload type is read by the reference alone, so its
check sees every payload with its JSON types (the Nonary job relies on it).  A record's verdict
thus depends neither on the reader nor on the records sharing its slice.

JSONL must be UTF-8 without unpaired surrogate escapes; a byte order mark is skipped at the very
start of the file only; lines nested deeper than ``MAX_DEPTH`` or with a number longer than
``MAX_NUMBER_DIGITS`` digits are rejected, and so are lines longer than ``MAX_LINE_BYTES``, which the
slice's reader drops unread (``lines.py``).  A slice made mostly of blank lines is read without
them (``_Numbered``), each other line under its own number, so blank lines cost no memory per line.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.json as pa_json
from numba import njit

import batchenum.numba_cache  # noqa: F401  (kernels cached per user, by source: batchenum/numba_cache.py)
from batchenum.pipeline.arrow import has_nulls
from batchenum.pipeline.inputs.jsonl_strict import read_id_and_strings
from batchenum.pipeline.inputs.lines import MAX_LINE_BYTES
from batchenum.pipeline.inputs.records import (
    FAST_TYPE,
    Check,
    Records,
    RecordsBuilder,
    Rejected,
    json_type_name,
    record_id,
)

__all__ = ["read_jsonl", "MAX_DEPTH", "MAX_NUMBER_DIGITS", "MAX_LINE_BYTES"]

_ARROW_BLOCK = 1 << 24  # pyarrow.json block size; a longer line makes the fast path fall back
_BOM = b"\xef\xbb\xbf"  # UTF-8 byte order mark: skipped at the very start of a JSONL file only
# A JSONL line is rejected when it nests arrays and objects deeper than MAX_DEPTH or holds a number
# of more than MAX_NUMBER_DIGITS digits: records never need either, and json.loads could not read
# them the same way everywhere (its recursion limit depends on the caller's stack, its integer
# limit on PYTHONINTMAXSTRDIGITS, which cannot be set below 640), while pyarrow reads both; so both
# readers refuse them up front.
MAX_DEPTH = 64
MAX_NUMBER_DIGITS = 640
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def read_jsonl(
    data: bytes,
    first_line: int,
    field: str,
    payload_type: pa.DataType,
    check: Check | None,
    fingerprint: str,
    oversized: dict[int, int] | None = None,
) -> Records:
    """The records of a JSONL slice (its exact bytes, its first line's number): by the fast path
    when it reads the slice without doubt, else line by line (see the module's docstring).
    ``oversized`` ({offset in the slice: length}) are lines dropped as longer than
    ``MAX_LINE_BYTES`` (empty lines in ``data``), each rejected with its length."""
    fast = payload_type.equals(FAST_TYPE)
    if fast and not oversized:
        # The commonest slice, every line a record of the compiled reader's shape, has no blank line
        # to look for: read it as it is.
        records = _fast_records(_Numbered(data, first_line, {}), field, fingerprint, general=False)
        if records is not None:
            return records
    numbered = _Numbered.of(data, first_line, oversized or {})
    if numbered.oversized:
        return _read_lines(numbered, field, payload_type, check, fingerprint)
    if fast:  # (the compiled reader again only if blank lines were taken out)
        records = _fast_records(numbered, field, fingerprint, strict=numbered.data is not data)
        if records is not None:
            return records
    return _read_lines(numbered, field, payload_type, check, fingerprint)


class _Numbered:
    """A slice's lines and their numbers in the file: the slice as it is (line k is number
    ``first_line + k``), or, when many of its lines are blank, only its other lines, numbered by
    ``numbers`` (int64, one per line), so that blank lines cost the readers no memory per line.

    data:      the lines (``\n``-separated);
    oversized: {index of a line in ``data``: its length}, lines dropped as too long (empty here).
    """

    def __init__(self, data: bytes, first_line: int, oversized: dict[int, int], numbers: np.ndarray | None = None):
        self.data, self.first_line, self.oversized, self.numbers = data, first_line, oversized, numbers

    @classmethod
    def of(cls, data: bytes, first_line: int, oversized: dict[int, int]) -> _Numbered:
        """The slice, without its blank lines when they are at least ``_BLANK_SHARE`` of its lines
        (and more than ``_BLANK_LEAST``): removing them copies the rest once."""
        raw = np.frombuffer(data, dtype=np.uint8)
        keep = np.fromiter(sorted(oversized), dtype=np.int64, count=len(oversized))  # dropped lines stay: rejected
        kept, kept_bytes, lines = _content_lines(raw, keep)
        if lines - kept <= max(_BLANK_LEAST, lines // _BLANK_SHARE):
            return cls(data, first_line, oversized)
        out, numbers = np.empty(kept_bytes, dtype=np.uint8), np.empty(kept, dtype=np.int64)
        _copy_content_lines(raw, keep, out, numbers)
        moved = {int(index): oversized[int(line)] for line, index in zip(keep, np.searchsorted(numbers, keep))}
        return cls(out.tobytes(), first_line, moved, numbers + first_line)

    @property
    def first(self) -> int:
        """The line number of the first line (``first_line`` when there is none)."""
        return self.number(0) if self.numbers is None or len(self.numbers) else self.first_line

    def number(self, index: int) -> int:
        """The line number in the file of line ``index`` of ``data``."""
        return self.first_line + index if self.numbers is None else int(self.numbers[index])

    def numbers_of(self, count: int) -> np.ndarray:
        """The line numbers of the first ``count`` lines."""
        if self.numbers is None:
            return np.arange(self.first_line, self.first_line + count, dtype=np.int64)
        return self.numbers[:count]


# Blank lines are removed from a slice before it is read when they are more than _BLANK_LEAST and at
# least one in _BLANK_SHARE of its lines: then they cost less than the copy of the rest.
_BLANK_LEAST = 4096
_BLANK_SHARE = 16


def _fast_records(
    numbered: _Numbered, field: str, fingerprint: str, strict: bool = True, general: bool = True
) -> Records | None:
    """Every record of the slice, accepted, when a fast reader reads all of them without doubt:
    each has an id and a list of strings with no null; None otherwise.  strict, general: which
    readers to try (``_arrow_table``)."""
    table = _arrow_table(numbered.data, numbered.first, field, strict, general)
    if table is None:
        return None
    ids, payloads = table.column("id").combine_chunks(), table.column(field).combine_chunks()
    if ids.null_count or has_nulls(payloads) or not pa.types.is_string(ids.type):
        return None
    return Records(
        ids=ids,
        positions=numbered.numbers_of(table.num_rows),
        payloads=payloads,
        position_label="line",
        rejected=Rejected(),
        fingerprint=fingerprint,
    )


def _arrow_table(
    data: bytes, first_line: int, field: str, strict: bool = True, general: bool = True
) -> pa.Table | None:
    """The slice as a pyarrow Table {id, field: list<string>}, or None when it could differ from
    the line-by-line reading (``_read_lines``), which is the reference.  Two readers, each tried
    when asked: strict, the compiled one of the commonest shape; general, pyarrow.json."""
    # pyarrow.json does not check UTF-8 outside the columns it keeps, skips a BOM at the start of
    # any block, and reads deep nesting and huge numbers that the line reader refuses: decline all.
    if not data.isascii() and not _is_utf8(data):
        return None
    if data.startswith(_BOM):
        if first_line != 1:
            return None
        data = data[len(_BOM) :]
    table = read_id_and_strings(data, field) if strict else None  # the commonest shape; None: as below
    if table is not None or not general:
        return table
    line_count = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
    depth, digits, opening = _scan_lines(data)
    # Every line must open an object: pyarrow 26 crashes (SIGSEGV) on a block whose first line is
    # ``null``, and a line without content could hide a second object on another line.
    if line_count and (
        (opening[:line_count] != ord("{")).any() or depth.max() > MAX_DEPTH or digits.max() > MAX_NUMBER_DIGITS
    ):
        return None
    schema = pa.schema([("id", pa.string()), (field, FAST_TYPE)])
    try:
        table = pa_json.read_json(
            io.BytesIO(data),
            read_options=pa_json.ReadOptions(block_size=_ARROW_BLOCK),
            parse_options=pa_json.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore"),
        )
    except Exception:  # any parse or type problem: the line-by-line reader explains it per line
        return None
    # With every line opening an object, as many rows as lines means one object per line (pyarrow
    # also splits objects at a space or a carriage return, so a line can hold two, and skips blank
    # lines, which could make up for it); a null means "missing" and "null" cannot be told apart.
    # Either way, read line by line.
    if table.num_rows != line_count or table.column("id").null_count or table.column(field).null_count:
        return None
    return table


def _is_utf8(data: bytes) -> bool:
    """Whether ``data`` is valid UTF-8 (Python's strict decoder: no surrogates, no overlong forms)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _scan_lines(data: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(depth, digits, opening), one entry per ``\\n``-separated line of ``data`` (as ``data.split``):
    the deepest nesting of arrays and objects, the longest run of digits outside strings, and
    the first byte that is not JSON whitespace (space, tab, carriage return), -1 for none."""
    lines = data.count(b"\n") + 1
    depth = np.zeros(lines, dtype=np.int64)
    digits = np.zeros(lines, dtype=np.int64)
    opening = np.full(lines, -1, dtype=np.int16)
    _scan_kernel(np.frombuffer(data, dtype=np.uint8), depth, digits, opening)
    return depth, digits, opening


@njit(cache=True, nogil=True)
def _scan_kernel(data, depth, digits, opening):  # pragma: no cover # noqa: C901 -- a compiled kernel: one body keeps its loops and locals in one frame
    """Fill depth[k], digits[k] (int64) and opening[k] (int16) for line k of data (uint8[n]);
    strings (between unescaped double quotes) are skipped.  Outputs have one entry per line and
    start at 0, 0 and -1."""
    n = len(data)
    line = 0
    level = 0
    run = 0
    i = 0
    while i < n:
        byte = data[i]
        i += 1
        if byte == 10:
            line += 1
            level = 0
            run = 0
            continue
        if byte == 32 or byte == 9 or byte == 13:  # JSON whitespace (not \v or \f, which bytes.strip removes)
            run = 0
            continue
        if opening[line] < 0:
            opening[line] = byte
        if byte == 34:  # a string: skip to its closing quote (or the end of the line)
            run = 0
            while i < n:
                byte = data[i]
                if byte == 34 or byte == 10:
                    break
                i += 2 if byte == 92 and data[i + 1 if i + 1 < n else i] != 10 else 1
            if i < n and data[i] == 34:
                i += 1
        elif 48 <= byte <= 57:
            run += 1
            if run > digits[line]:
                digits[line] = run
        else:
            run = 0
            if byte == 91 or byte == 123:
                level += 1
                if level > depth[line]:
                    depth[line] = level
            elif byte == 93 or byte == 125:
                level -= 1


def _read_lines(
    numbered: _Numbered, field: str, payload_type: pa.DataType, check: Check | None, fingerprint: str
) -> Records:
    """The slice line by line with ``json.loads``: every non-blank line becomes one record.  This is
    the reference reading; the fast path is used only where it gives the same records."""
    records = RecordsBuilder(field, payload_type, check, "line")
    data, oversized = numbered.data, numbered.oversized
    depth, digits, _ = _scan_lines(data)
    for offset, raw in enumerate(data.split(b"\n")):
        if offset == 0 and numbered.first == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]  # a byte order mark at the very start of the file is allowed
        if oversized and offset in oversized:
            line = numbered.number(offset)
            records.add(
                line,
                None,
                None,
                f"line {line}: {oversized[offset]:,} bytes long; lines of more than "
                f"{MAX_LINE_BYTES:,} bytes are not read",
            )
        elif raw.strip():
            line = numbered.number(offset)
            records.add(line, *_parse_json_line(raw, line, field, int(depth[offset]), int(digits[offset])))
    return records.records(fingerprint)


@njit(cache=True, nogil=True)
def _line_end(data, start):  # pragma: no cover - compiled
    """(end, content) for the line of data (uint8[n]) that starts at start: the index of its newline
    (n for the last line), and whether it has a byte other than ASCII whitespace (as ``bytes.strip``
    removes).  Past its first such byte, the rest of the line is only searched for the newline."""
    n = len(data)
    i = start
    while i < n and data[i] != 10:
        if not (data[i] == 32 or 9 <= data[i] <= 13):
            while i < n and data[i] != 10:
                i += 1
            return i, True
        i += 1
    return i, False


@njit(cache=True, nogil=True)
def _content_lines(data, keep):  # pragma: no cover - compiled
    """(lines, bytes) of data (uint8[n]) that are not blank, newlines included: a line with a byte
    other than ASCII whitespace, or one whose index is in keep (int64, sorted); and all its lines."""
    return _kept_lines(data, keep, np.empty(0, np.uint8), np.empty(0, np.int64), False)


@njit(cache=True, nogil=True)
def _copy_content_lines(data, keep, out, numbers):  # pragma: no cover - compiled
    """Copy the lines ``_content_lines`` counts into out (uint8, their bytes), each with its
    newline, and their indices in data into numbers (int64)."""
    _kept_lines(data, keep, out, numbers, True)


@njit(cache=True, nogil=True)
def _kept_lines(data, keep, out, numbers, copy):  # pragma: no cover - compiled
    """(lines, bytes, all lines) as ``_content_lines`` says; with copy, the lines also copied as there."""
    n = len(data)
    lines = 0
    size = 0
    line = 0
    start = 0
    k = 0
    while True:
        end, content = _line_end(data, start)
        while k < len(keep) and keep[k] < line:
            k += 1
        if content or (k < len(keep) and keep[k] == line):
            stop = end + 1 if end < n else n
            if copy:
                out[size : size + stop - start] = data[start:stop]
                numbers[lines] = line
            lines += 1
            size += stop - start
        if end >= n:
            return lines, size, line + 1
        line += 1
        start = end + 1


def _parse_json_line(raw: bytes, line: int, field: str, depth: int, digits: int) -> tuple[str | None, Any, str | None]:
    """(id, value, error) for one non-blank line; depth and digits as ``_scan_lines`` found them."""
    where = f"line {line}"
    obj, error = _decoded_json(raw, where, depth, digits)
    if error:
        return None, None, error
    if not isinstance(obj, dict):
        return None, None, f"{where}: not a JSON object but {json_type_name(obj)}"
    id_, id_error = record_id(obj.get("id"), "id" in obj, where)
    if id_error:
        return id_, None, id_error
    if field not in obj:
        return id_, None, f"{where}: no {field!r}"
    return id_, obj[field], None


def _decoded_json(raw: bytes, where: str, depth: int, digits: int) -> tuple[Any, str | None]:
    """(the line's JSON value, None), or (None, why the line is not JSON this reader takes)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, f"{where}: not valid UTF-8 (byte {exc.start + 1} of the line)"
    if text.lstrip().startswith("\ufeff"):
        return None, f"{where}: a byte order mark (U+FEFF) is allowed only at the very start of the file"
    if depth > MAX_DEPTH:
        return None, f"{where}: arrays and objects nested more than {MAX_DEPTH} deep"
    if digits > MAX_NUMBER_DIGITS:
        return None, f"{where}: a number of {digits:,} digits (at most {MAX_NUMBER_DIGITS:,} are read)"
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        message = exc.msg.removesuffix(" at")  # "Invalid control character at": the column follows
        return None, f"{where}: not valid JSON: {message} at column {exc.colno}"
    except (ValueError, RecursionError):  # a lower PYTHONINTMAXSTRDIGITS, a very deep stack
        return None, f"{where}: not valid JSON: a number too long or nesting too deep to read"
    surrogate = _lone_surrogate(obj) if _SURROGATE_ESCAPE.search(raw) else None
    if surrogate is not None:
        return None, (
            f"{where}: a string holds the escape \\u{surrogate:04x}, half of a "
            "surrogate pair without its other half (not a character)"
        )
    return obj, None


def _lone_surrogate(value: Any) -> int | None:
    """The code point of the first unpaired surrogate in any string (or key) of a decoded JSON
    value, or None.  Paired escapes such as ``\\ud83d\\ude00`` are decoded to one character."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                for char in item:
                    if 0xD800 <= ord(char) <= 0xDFFF:
                        return ord(char)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return None
