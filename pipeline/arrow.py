"""Arrow arrays from numpy arrays without ``pa.array``.

The first call of ``pa.array`` in a process imports pandas, holding the GIL, in the driver and in
every Ray worker, as do ``pa.table`` and ``pq.read_table``.  A shard whose columns are numpy or
Arrow arrays, and a finish that reads with ``pq.ParquetFile``, never pay it (docs/design.md, "No
pandas, no pyarrow.compute on the hot path").
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["from_numpy", "to_numpy", "NUMPY_DTYPES"]

# the Arrow types whose buffer is a numpy array's, as it is
NUMPY_DTYPES = {pa.int64(): np.dtype(np.int64), pa.float64(): np.dtype(np.float64), pa.int32(): np.dtype(np.int32)}


def from_numpy(values: np.ndarray, arrow_type: pa.DataType = pa.int64()) -> pa.Array:
    """A 1-D numpy array as an Arrow array of ``arrow_type`` (int64, float64, int32), sharing its buffer
    when it is contiguous and of that dtype, else a converted copy."""
    values = np.ascontiguousarray(values, dtype=NUMPY_DTYPES[arrow_type])
    if values.ndim != 1:
        raise ValueError(f"a column must be one-dimensional, not of shape {values.shape}")
    return pa.Array.from_buffers(arrow_type, len(values), [None, pa.py_buffer(values)])


def to_numpy(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The values of an int64, float64 or int32 column without nulls, read from its buffers
    (other columns: ``to_numpy``, which imports pandas)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    dtype = NUMPY_DTYPES.get(column.type)
    if dtype is None or column.null_count:
        return column.to_numpy()
    parts = [np.frombuffer(chunk.buffers()[1], dtype=dtype)[chunk.offset : chunk.offset + len(chunk)]
             for chunk in chunks]
    return np.concatenate([np.zeros(0, dtype=dtype), *parts]) if len(parts) != 1 else parts[0]
