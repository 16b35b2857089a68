"""Arrow arrays from and to numpy arrays without ``pa.array``, and the buffers of a list<string> array.

The first call of ``pa.array`` in a process imports pandas, holding the GIL, in the driver and in
every Ray worker, as do ``pa.table`` and ``pq.read_table``.  A shard whose columns are numpy or
Arrow arrays, and a finish that reads with ``pq.ParquetFile``, never pay it (docs/design.md, "No
pandas, no pyarrow.compute on the hot path").
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["from_numpy", "from_list", "to_numpy", "bools_to_numpy", "NUMPY_DTYPES", "string_list_buffers", "has_nulls"]

# the Arrow types whose buffer is a numpy array's, as it is
NUMPY_DTYPES: dict[pa.DataType, np.dtype] = {
    pa.int64(): np.dtype(np.int64),
    pa.float64(): np.dtype(np.float64),
    pa.int32(): np.dtype(np.int32),
}


def from_numpy(values: np.ndarray, arrow_type: pa.DataType = pa.int64()) -> pa.Array:
    """A 1-D numpy array as an Arrow array of ``arrow_type`` (int64, float64, int32), sharing its buffer
    when it is contiguous and of that dtype, else a converted copy."""
    values = np.ascontiguousarray(values, dtype=NUMPY_DTYPES[arrow_type])
    if values.ndim != 1:
        raise ValueError(f"a column must be one-dimensional, not of shape {values.shape}")
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])


def from_list(values: list, arrow_type: pa.DataType) -> pa.Array | None:
    """A list of Python ``int`` as an int64 array, or of ``str`` as a string array, built from
    buffers (a shard's small columns: a tree shard's id and counts); None for any other list (a
    bool, a None, an int past int64, 2 GiB of text), which ``pa.array`` then converts or refuses."""
    if arrow_type == pa.int64() and all(type(value) is int for value in values):
        try:
            return from_numpy(np.array(values, dtype=np.int64))
        except OverflowError:
            return None
    if arrow_type == pa.string() and all(type(value) is str for value in values):
        try:
            encoded = [value.encode() for value in values]
        except UnicodeEncodeError:  # a lone surrogate
            return None
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
        if offsets[-1] > np.iinfo(np.int32).max:
            return None
        buffers = [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(encoded))]
        return pa.Array.from_buffers(pa.string(), len(encoded), buffers)
    return None


def to_numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of an int64, float64 or int32 column without nulls, read from its buffers
    (other columns: ``to_numpy``, which imports pandas)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    dtype = NUMPY_DTYPES.get(column.type)
    if dtype is None or column.null_count:
        return column.to_numpy()
    parts = [
        np.frombuffer(chunk.buffers()[1], dtype=dtype)[chunk.offset : chunk.offset + len(chunk)] for chunk in chunks
    ]
    return np.concatenate([np.zeros(0, dtype=dtype), *parts]) if len(parts) != 1 else parts[0]


def bools_to_numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of a boolean column without nulls as a numpy bool array, unpacked from its bitmaps
    (``to_numpy`` imports pandas)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    if column.null_count:
        raise ValueError("a boolean column with nulls has no numpy bool array")
    parts = [
        np.unpackbits(np.frombuffer(chunk.buffers()[1], dtype=np.uint8), bitorder="little")[
            chunk.offset : chunk.offset + len(chunk)
        ].view(np.bool_)
        for chunk in chunks
        if len(chunk)
    ]
    return np.concatenate([np.zeros(0, dtype=np.bool_), *parts])


def string_list_buffers(values) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(chars, string_offsets, list_offsets) of a pyarrow list<string> array without copying:
    list i holds strings ``list_offsets[i] .. list_offsets[i + 1] - 1``, and string j is the UTF-8
    bytes ``chars[string_offsets[j] : string_offsets[j + 1]]``.  Offsets are int64."""
    strings = values.values
    _, offset_buffer, chars = strings.buffers()
    string_offsets: np.ndarray
    if offset_buffer is None:  # no strings at all
        string_offsets = np.zeros(1, dtype=np.int64)
    else:
        width = np.int64 if pa.types.is_large_string(strings.type) else np.int32
        string_offsets = np.frombuffer(offset_buffer, dtype=width)[strings.offset : strings.offset + len(strings) + 1]
    return (
        np.frombuffer(chars, dtype=np.uint8) if chars is not None else np.zeros(0, dtype=np.uint8),
        string_offsets.astype(np.int64),
        to_numpy(values.offsets).astype(np.int64),  # (not np.asarray, which imports pandas)
    )


def has_nulls(array: pa.Array) -> bool:
    """Whether a pyarrow array has a null at any list depth."""
    if array.null_count:
        return True
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        # all the child values (a slice's and others'), when none of them is null; else exactly the
        # slice's (flatten imports pyarrow.compute, a cost on the first shard in each process:
        # docs/benchmarks.md#record-batches-and-first-shards)
        return not _null_free(array.values) and has_nulls(array.flatten())
    return False


def _null_free(array: pa.Array) -> bool:
    """Whether a pyarrow array has no null at any list depth, looking at whole child arrays."""
    if array.null_count:
        return False
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        return _null_free(array.values)
    return True
