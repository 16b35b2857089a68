"""The commonest JSONL shape, read by compiled code: every line ``{"id": "...", "FIELD": ["...", ...]}``.

Batches written by a program (``json.dumps``, with or without spaces after ``:`` and ``,``) look
exactly like this, and for them pyarrow's general JSON reader is most of a shard's reading time.
This reader accepts only that shape: the two keys in that order, strings of printable ASCII without
escapes, spaces (no other whitespace) between tokens, ``\\n`` line ends.  Anything else, anywhere in
the slice, returns None and the caller reads the slice the general way, so this path never has to
explain a record: it only ever sees well-formed ones.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from numba import njit

__all__ = ["read_id_and_strings"]

_QUOTE, _BACKSLASH, _SPACE = 0x22, 0x5C, 0x20


def read_id_and_strings(data: bytes, field: str) -> pa.Table | None:
    """{id: string, field: list<string>} with one row per line of ``data``, or None unless every
    line has exactly the shape above (an empty slice is None too)."""
    if not data or len(data) >= 1 << 31:  # Arrow's string offsets are 32-bit
        return None
    raw = np.frombuffer(data, dtype=np.uint8)
    # bounds, not counts (counting would cost a quarter of the scan): a line takes at least
    # 15 bytes, {"id":"","":[]}, and a string in a list at least 3 with its comma (the last one
    # has none, but its line has more than 3 bytes besides)
    # (empty, not zeroed: _scan writes every entry up to the counts it returns, after the first)
    id_offsets = np.empty(len(data) // 15 + 2, dtype=np.int32)
    list_offsets = np.empty(len(data) // 15 + 2, dtype=np.int32)
    row_offsets = np.empty(len(data) // 3 + 1, dtype=np.int32)
    id_offsets[0] = list_offsets[0] = row_offsets[0] = 0
    id_chars = np.empty(len(data), dtype=np.uint8)
    row_chars = np.empty(len(data), dtype=np.uint8)
    key = np.frombuffer(b'"' + field.encode() + b'"', dtype=np.uint8)
    lines, rows = _scan(raw, key, id_offsets, id_chars, list_offsets, row_offsets, row_chars)
    if lines < 0:
        return None
    ids = pa.StringArray.from_buffers(
        lines, pa.py_buffer(id_offsets[: lines + 1]), pa.py_buffer(id_chars[: id_offsets[lines]])
    )
    strings = pa.StringArray.from_buffers(
        rows, pa.py_buffer(row_offsets[: rows + 1]), pa.py_buffer(row_chars[: row_offsets[rows]])
    )
    offsets = pa.Array.from_buffers(pa.int32(), lines + 1, [None, pa.py_buffer(list_offsets[: lines + 1])])
    # (from_buffers and from_arrays: pa.array and pa.table would import pandas, pipeline/arrow.py)
    return pa.Table.from_arrays([ids, pa.ListArray.from_arrays(offsets, strings)], names=["id", field])


@njit(cache=True, nogil=True)
def _skip_spaces(data, at):
    while at < data.shape[0] and data[at] == _SPACE:
        at += 1
    return at


@njit(cache=True, nogil=True)
def _after(data, at, text):
    """The position after the bytes of ``text`` at ``at`` (spaces skipped first), or -1."""
    at = _skip_spaces(data, at)
    if at + text.shape[0] > data.shape[0]:
        return -1
    for k in range(text.shape[0]):
        if data[at + k] != text[k]:
            return -1
    return at + text.shape[0]


def _byte_kinds() -> np.ndarray:
    """uint8[256]: 0 for a byte a string may hold as it is (printable ASCII but the quote and the
    backslash), 1 for the quote that ends it, 2 for any other byte (this reader declines it)."""
    kinds = np.full(256, 2, dtype=np.uint8)
    kinds[0x20:0x7F] = 0
    kinds[_QUOTE], kinds[_BACKSLASH] = 1, 2
    return kinds


_KIND = _byte_kinds()


@njit(cache=True, nogil=True)
def _copy_string(data, at, chars, fill):
    """Copy the characters of the string whose opening quote is at ``at`` (spaces skipped first) to
    chars[fill:]; returns (the position after its closing quote, the new fill), or (-1, fill) if
    it is not a string of printable ASCII without escapes."""
    end = data.shape[0]
    at = _skip_spaces(data, at)
    if at >= end or data[at] != _QUOTE:
        return -1, fill
    kinds = _KIND
    here, out = np.uint64(at + 1), np.uint64(fill)  # unsigned: no negative-index wraparound checks
    while here < end:
        byte = data[here]
        kind = kinds[byte]
        if kind != 0:
            return (np.int64(here) + 1, np.int64(out)) if kind == 1 else (-1, fill)
        chars[out] = byte
        out += np.uint64(1)
        here += np.uint64(1)
    return -1, fill


@njit(cache=True, nogil=True)
def _expect(data, at, byte):
    """The position after ``byte`` at ``at`` (spaces skipped first), or -1."""
    at = _skip_spaces(data, at)
    return at + 1 if at < data.shape[0] and data[at] == byte else -1


@njit(cache=True, nogil=True)
def _member(data, at, key):
    """The position after ``KEY :`` at ``at`` (``key`` with its quotes; spaces allowed before the
    key and around the colon, not inside the key), or -1."""
    at = _after(data, at, key)
    return _expect(data, at, 0x3A) if at >= 0 else -1


@njit(cache=True, nogil=True)
def _scan(data, key, id_offsets, id_chars, list_offsets, row_offsets, row_chars):  # noqa: C901 -- a compiled kernel: one body keeps its loops and locals in one frame
    """Fill the offsets and characters line by line; returns (lines, strings in the lists), or
    (-1, -1) as soon as a line has another shape.  ``key`` is the field's name with its quotes."""
    end = data.shape[0]
    id_key = np.array([0x22, 0x69, 0x64, 0x22], np.uint8)  # "id"
    at, line, rows, id_fill, row_fill = 0, 0, 0, 0, 0
    while at < end:
        at = _expect(data, at, 0x7B)  # {
        at = _member(data, at, id_key) if at >= 0 else -1
        if at < 0:
            return -1, -1
        at, id_fill = _copy_string(data, at, id_chars, id_fill)
        at = _expect(data, at, 0x2C) if at >= 0 else -1  # ,
        at = _member(data, at, key) if at >= 0 else -1
        at = _expect(data, at, 0x5B) if at >= 0 else -1  # [
        if at < 0:
            return -1, -1
        at = _skip_spaces(data, at)
        if at < end and data[at] == 0x5D:  # ]: an empty list
            at += 1
        else:
            while True:
                at, row_fill = _copy_string(data, at, row_chars, row_fill)
                if at < 0:
                    return -1, -1
                rows += 1
                row_offsets[rows] = row_fill
                at = _skip_spaces(data, at)
                if at >= end:
                    return -1, -1
                if data[at] == 0x5D:  # ]
                    at += 1
                    break
                if data[at] != 0x2C:  # ,
                    return -1, -1
                at += 1
        at = _expect(data, at, 0x7D)  # }
        if at < 0:
            return -1, -1
        at = _skip_spaces(data, at)
        if at < end:
            if data[at] != 0x0A:
                return -1, -1
            at += 1
        line += 1
        id_offsets[line] = id_fill
        list_offsets[line] = rows
    return line, rows
