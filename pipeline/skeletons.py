"""Two skeletons that cover most enumerations: write the puzzle, the pipeline does the rest
(shards, resume, provenance, status, progress, Parquet).  docs/jobs.md shows both at work.

``RecordJob``: a batch of records answered one by one (or a batch at a time).  The input handling
is a record batch's (``pipeline.batch.BatchInputJob``): files, folders, globs, URIs, DataFrames,
JSONL and Parquet; an ``answers`` table, an ``errors`` table with reasons, read = answered +
rejected.

``TreeJob``: the leaves of a search tree, given its root, a children function and a leaf test.
The tree is cut into subtrees by prefix at a depth sized from the run's CPUs (each worker
recomputes the frontier, so a shard is just an index); leaves are counted, and with a canonical
``key`` also catalogued, deduplicated by key.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from batchenum.pipeline.batch import ERRORS_TABLE, FILE_COLUMN, LINE_COLUMN, RECORD_KEY, BatchInputJob
from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.inputs import read_records
from batchenum.pipeline.job import Column, Job, Param, PlanContext, Shard, ShardContext, ShardResult, TableSpec

__all__ = ["RecordJob", "TreeJob"]


class RecordJob(BatchInputJob):
    """A record batch answered by a function of one record.

    Set ``name``, ``version``, ``field`` (the payload field of every record: ``{"id": ..., FIELD:
    ...}`` per JSONL line, or a Parquet column) and ``answer_columns`` (the columns an answer has,
    besides the record's ``id``, ``file`` and ``line``), and write ``answer(value)``: the answer's
    row for one payload (a dict by column, or a tuple in column order), or raise ValueError with
    the reason the record has no answer (it becomes a row of ``errors``).  ``answer_batch(values)``
    answers a shard's payloads at once instead (a list of rows or ValueErrors, one per value).

    Parameters: ``input`` and ``records_per_shard``, and those the subclass declares.
    """

    answer_columns: tuple[Column, ...] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.answer_columns:
            columns = (Column("id", "string", distinct=True), *cls.answer_columns, FILE_COLUMN, LINE_COLUMN)
            cls.tables = (TableSpec("answers", columns, key=RECORD_KEY, sort=RECORD_KEY), ERRORS_TABLE)

    def answer(self, value: Any) -> dict[str, Any] | tuple:
        raise NotImplementedError(f"{type(self).__name__} must define answer(value) or answer_batch(values)")

    def answer_batch(self, values: list[Any]) -> list[Any]:
        """One row (or ValueError) per value; default: ``answer`` for each."""
        return [self._answer_one(value) for value in values]

    def _answer_one(self, value: Any) -> Any:
        try:
            return self.answer(value)
        except ValueError as error:
            return error

    def run_shard(self, shard: Shard, context: ShardContext | None = None) -> ShardResult:
        records = read_records(dict(shard.spec), self.field, pa.string(), check=_json_text, source=self.source(shard))
        values = [json.loads(text) for text in records.payloads.to_pylist()]
        outcomes = self.answer_batch(values)
        if len(outcomes) != len(values):
            raise PipelineError(
                f"{type(self).__name__}.answer_batch returned {len(outcomes)} rows for "
                f"{len(values)} values: return one row (or ValueError) per value"
            )
        names = [column.name for column in self.answer_columns]
        answers: dict[str, list] = {name: [] for name in ("id", *names, "file", "line")}
        rejected, reasons = [], []
        ids, positions = records.ids.to_pylist(), records.positions.tolist()
        for i, outcome in enumerate(outcomes):
            if isinstance(outcome, Exception):
                rejected.append(i)
                reasons.append(str(outcome))
                continue
            row = self._row(outcome, names)
            answers["id"].append(ids[i])
            for name in names:
                answers[name].append(row[name])
            answers["file"].append(records.file)
            answers["line"].append(positions[i])
        return ShardResult(
            {"answers": answers, "errors": records.error_rows(rejected, reasons)},
            {"records": records.read},
            records.fingerprint,
        )

    def _row(self, outcome: Any, names: list[str]) -> dict[str, Any]:
        row = dict(zip(names, outcome)) if isinstance(outcome, (tuple, list)) else outcome
        if not isinstance(row, dict) or set(row) != set(names):
            raise PipelineError(
                f"{type(self).__name__}.answer returned {outcome!r}: return a dict with the columns "
                f"{names} (or a tuple in that order), or raise ValueError(reason)"
            )
        return row


def _json_text(value: Any) -> str:
    """A payload as compact JSON text (any JSON value travels as an Arrow string)."""
    return json.dumps(value, separators=(",", ":"))


PARTIAL = TableSpec(
    "partial",
    (Column("shard", "string"), Column("leaves", "int64"), Column("nodes", "int64")),
    key=("shard",),
    sort=("shard",),
)
COUNTS = TableSpec("counts", (Column("leaves", "int64"), Column("nodes", "int64"), Column("distinct", "int64")))
LEAVES = TableSpec(
    "leaves",
    (Column("key", "string", distinct=True), Column("leaf", "string", distinct=True)),
    key=("key",),
    sort=("key",),
)


class TreeJob(Job):
    """The leaves of a search tree: count them, and with ``key`` catalogue them, one row per key.

    Write ``root()``, ``children(node)`` (the nodes below ``node``) and ``is_leaf(node)`` (a node
    that counts; default: one without children).  Define ``key(leaf)``, a canonical form as a
    string (the same for leaves equal under the symmetry you quotient by), to have every distinct
    leaf written to the ``leaves`` table (key, and the leaf as ``repr``), deduplicated by key.
    Nodes may be any Python values: shards hold only an index, and every worker walks the tree
    down to the cut itself, so ``root``, ``children`` and ``is_leaf`` must be deterministic.

    Tables: ``partial`` (leaves and nodes below each shard), ``counts`` (one row: leaves, nodes,
    distinct keys, 0 without ``key``), ``leaves`` (with ``key``).  ``split_depth`` cuts the tree
    at that depth; default: the first depth with at least ``SUBTREES_PER_CPU`` subtrees per CPU.
    """

    SUBTREES_PER_CPU = 16
    MAX_SPLIT_DEPTH = 12
    split_depth: Param[int | None] = Param(
        int,
        default=None,
        low=0,
        recorded=False,
        metavar="D",
        help="cut the tree into subtrees at this depth (default: the first depth with at least 16 "
        "subtrees per CPU of the run)",
    )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        catalogue = cls.key is not TreeJob.key
        cls.tables = (PARTIAL, COUNTS, LEAVES) if catalogue else (PARTIAL, COUNTS)
        cls.shard_tables = ("partial", "leaves") if catalogue else ("partial",)

    def root(self) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must define root()")

    def children(self, node: Any) -> Iterable[Any]:
        raise NotImplementedError(f"{type(self).__name__} must define children(node)")

    def is_leaf(self, node: Any) -> bool:
        return not any(True for _ in self.children(node))

    def key(self, leaf: Any) -> str:
        """A canonical key for a leaf (define it to catalogue the leaves)."""
        raise NotImplementedError

    def _cut(self, depth: int) -> tuple[list[Any], int, int, list[Any]]:
        """The frontier at ``depth`` (nodes at that depth, in children order), and the leaves,
        nodes and catalogued leaves above it."""
        frontier, leaves, nodes, found = [self.root()], 0, 0, []
        for _ in range(depth):
            below: list[Any] = []
            for node in frontier:
                nodes += 1
                if self.is_leaf(node):
                    leaves += 1
                    found.append(node)
                else:
                    below.extend(self.children(node))
            frontier = below
        return frontier, leaves, nodes, found

    def plan(self, context: PlanContext) -> list[Shard]:
        depth = self.split_depth
        if depth is None:
            wanted = self.SUBTREES_PER_CPU * (context.cpus or os.cpu_count() or 1)
            depth = 0
            while depth < self.MAX_SPLIT_DEPTH and len(self._cut(depth)[0]) < wanted:
                depth += 1
        count = max(1, min(len(self._cut(depth)[0]), self.SUBTREES_PER_CPU * (context.cpus or os.cpu_count() or 1)))
        return [
            Shard(f"d{depth:02d}-s{index:04d}", {"depth": depth, "index": index, "count": count})
            for index in range(count)
        ]

    def run_shard(self, shard: Shard, context: ShardContext | None = None) -> ShardResult:
        """Every ``count``-th subtree of the cut from ``index`` on; shard 0 also counts the nodes
        and leaves above the cut."""
        spec = shard.spec
        frontier, leaves, nodes, found = self._cut(spec["depth"])
        if spec["index"]:
            leaves, nodes, found = 0, 0, []
        for start in frontier[spec["index"] :: spec["count"]]:
            stack = [start]
            while stack:
                node = stack.pop()
                nodes += 1
                if self.is_leaf(node):
                    leaves += 1
                    found.append(node)
                else:
                    stack.extend(self.children(node))
        tables: dict[str, Any] = {"partial": {"shard": [shard.id], "leaves": [leaves], "nodes": [nodes]}}
        if "leaves" in self.shard_tables:
            keyed: dict[Any, Any] = {}
            for leaf in found:
                keyed.setdefault(self.key(leaf), repr(leaf))
            tables["leaves"] = {"key": list(keyed), "leaf": list(keyed.values())}
        return ShardResult(tables)

    def finalize(self, tables: dict[str, Any], out: Any) -> dict[str, Any]:
        """``counts`` from the merged tables, read lazily: two columns of ``partial`` and the row
        count of ``leaves``; both are published as they are (folders of parts)."""
        import pandas as pd
        import pyarrow.compute as pc

        partial = tables["partial"]
        leaves, nodes = (pc.sum(partial.column(name)).as_py() or 0 for name in ("leaves", "nodes"))
        distinct = len(tables["leaves"]) if "leaves" in tables else 0
        counts = pd.DataFrame({"leaves": [leaves], "nodes": [nodes], "distinct": [distinct]}, dtype="int64")
        return {**tables, "counts": counts}

    def summary(self, tables: dict[str, Any], totals: dict[str, int]) -> str:
        row = tables["counts"].iloc[0]
        line = f"{self.name}: {int(row.leaves)} leaves, {int(row.nodes)} nodes"
        return line + (f", {int(row.distinct)} distinct by key" if "leaves" in tables else "")
