"""``LazyTable``: a merged table as ``finalize``, ``check_totals`` and ``summary`` see it, read only
as far as they ask (its row count, a column, a scan one row group at a time), so that the driver
never holds a table it does not need whole (docs/jobs.md, "Tables a job reads").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.parquet_format import read_verified
from batchenum.pipeline.storage import Storage

__all__ = ["IN_MEMORY_BYTES", "LazyTable", "TableTooLargeError"]

# The most a table (or a column) may take in memory, as its Parquet footers count its bytes
# uncompressed, for ``to_pandas``, ``to_arrow`` and ``column`` to read it whole.
IN_MEMORY_BYTES = 256 << 20


class TableTooLargeError(PipelineError):
    """A whole table (or column) asked for in memory, larger than its caller allowed."""


class LazyTable:
    """A final table's parts, in order, read on demand: ``len(table)``, ``table.rows``,
    ``table.column(name)``, ``table.scan(columns)`` and, for a small table, ``to_pandas()`` and
    ``to_arrow()``; ``max_bytes=None`` lifts their size limit."""

    def __init__(self, name: str, storage: Storage, paths: list[str], rows: list[int], location: str = ""):
        self.name = name
        self.storage = storage
        self.paths = list(paths)
        self.part_rows = list(rows)
        self.location = location  # where the table is once committed ("" before)

    @property
    def rows(self) -> int:
        return sum(self.part_rows)

    def __len__(self) -> int:
        return self.rows

    def __repr__(self) -> str:
        return f"LazyTable({self.name!r}, {self.rows} rows in {len(self.paths)} parts)"

    def nbytes(self, columns: list[str] | None = None) -> int:
        """The bytes ``columns`` (default: all) take uncompressed, from the parts' footers."""
        total = 0
        for path in self.paths:
            with self.storage.open_input(path) as handle:
                footer = pq.ParquetFile(handle).metadata
            names = [footer.schema.column(k).path.split(".")[0] for k in range(footer.num_columns)]
            for group in range(footer.num_row_groups):
                row_group = footer.row_group(group)
                for k, name in enumerate(names):
                    if columns is None or name in columns:
                        total += row_group.column(k).total_uncompressed_size
        return total

    def scan(self, columns: list[str] | None = None) -> Iterator[pa.Table]:
        """The table's rows in order, one row group at a time, every page verified."""
        for path in self.paths:
            with self.storage.open_input(path) as handle:
                groups = pq.ParquetFile(handle).metadata.num_row_groups
                for group in range(groups):
                    yield read_verified(handle, columns=columns, row_groups=[group], where=self.storage.uri(path))

    def column(self, name: str, max_bytes: int | None = IN_MEMORY_BYTES) -> pa.ChunkedArray:
        """One column, whole (a ``pyarrow.ChunkedArray``: ``pyarrow.compute.sum(table.column("leaves"))``)."""
        self._refuse_above(max_bytes, [name])
        return pa.chunked_array(
            [chunk for table in self.scan([name]) for chunk in table.column(0).chunks],
            type=self._schema().field(name).type,
        )

    def to_arrow(self, max_bytes: int | None = IN_MEMORY_BYTES) -> pa.Table:
        """The whole table as one ``pyarrow.Table`` (refused above ``max_bytes``)."""
        self._refuse_above(max_bytes)
        tables = [table.replace_schema_metadata(None) for table in self.scan()]
        return pa.concat_tables(tables) if tables else self._schema().empty_table()

    def to_pandas(self, max_bytes: int | None = IN_MEMORY_BYTES) -> Any:
        """The whole table as a pandas DataFrame (refused above ``max_bytes``)."""
        return self.to_arrow(max_bytes).to_pandas()

    def _schema(self) -> pa.Schema:
        with self.storage.open_input(self.paths[0]) as handle:
            return pq.ParquetFile(handle).schema_arrow.remove_metadata()

    def _refuse_above(self, max_bytes: int | None, columns: list[str] | None = None) -> None:
        if max_bytes is None:
            return
        size = self.nbytes(columns)
        if size > max_bytes:
            what = f"column {columns[0]!r} of table {self.name!r}" if columns else f"table {self.name!r}"
            raise TableTooLargeError(
                f"{what} takes {size / 2**20:,.0f} MiB in memory ({self.rows:,} rows), more than the "
                f"{max_bytes / 2**20:,.0f} MiB allowed: read it lazily instead (len(table), "
                "table.scan(columns) one row group at a time), or pass max_bytes=None to load it whole"
            )
