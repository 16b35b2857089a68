"""The writer of generated input batches (``batchenum generate``)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from batchenum.pipeline.storage import Storage

__all__ = ["write_batch"]


def write_batch(location: str, field: str, ids: list[str], values: list[Any], value_type: pa.DataType) -> None:
    """Write an input batch (records with ``id`` and ``field``) atomically to a local path or a URI:
    Parquet when it ends in .parquet, else JSONL, one compact object per line."""
    target = Storage.at(location)

    def write(local: str) -> None:
        if location.lower().endswith(".parquet"):
            pq.write_table(
                pa.table({"id": pa.array(ids, pa.string()), field: pa.array(values, type=value_type)}), local
            )
            return
        with open(local, "w", encoding="utf-8") as handle:
            handle.writelines(
                json.dumps({"id": i, field: v}, separators=(",", ":")) + "\n" for i, v in zip(ids, values)
            )

    target.write_atomic(target.root, write)
