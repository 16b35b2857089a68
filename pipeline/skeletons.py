"""Two skeletons that cover most enumerations: write the puzzle, the pipeline does the rest
(shards, resume, provenance, status, progress, Parquet).  docs/jobs.md shows both at work.

``RecordJob``: a batch of records answered one by one (or a batch at a time).  The input handling
is a record batch's (``pipeline.batch.BatchInputJob``): files, folders, globs, URIs, DataFrames,
JSONL and Parquet; an ``answers`` table, an ``errors`` table with reasons, read = answered +
rejected.

``TreeJob``: the leaves of a search tree, given its root, a children function and a leaf test.
A shard is a node of the tree, named by its path of child indices from the root; it explores
about a budget of nodes, then hands its unexplored subtrees back as new shards (``ShardResult.
children``), so the split follows the tree, never the cluster.  Leaves are counted, and with a
canonical ``key`` also catalogued, deduplicated by key.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from batchenum.pipeline.arrow import from_list
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
# Nodes a shard explores before it hands its unexplored subtrees back, unless --budget says
# otherwise: a pure-Python shard of a few seconds, against its commit's tens of milliseconds
# (docs/jobs.md, "Choosing the budget").
DEFAULT_BUDGET = 1_000_000


def path_id(path: tuple[int, ...] | list[int]) -> str:
    """The id of the shard at ``path`` (child indices from the root): ``t``, then each index as its
    digit count (a letter: ``a`` for one digit) and its digits, so that ids sort in the tree's
    preorder: ``path_id((0, 3, 12)) == "t-a0-a3-b12"``."""
    return "-".join(["t", *(chr(ord("a") + len(str(i)) - 1) + str(i) for i in path)])


class TreeJob(Job):
    """The leaves of a search tree: count them, and with ``key`` catalogue them, one row per key.

    Write ``root()``, ``children(node)`` (the nodes below ``node``, a list in a fixed order) and
    ``is_leaf(node)`` (a node that counts; default: one without children).  Define ``key(leaf)``, a
    canonical form as a string (the same for leaves equal under the symmetry you quotient by), to
    have every distinct leaf written to the ``leaves`` table (key, and the leaf as ``repr``),
    deduplicated by key.  Define ``count_subtree(node)`` to count a whole subtree at once (a
    compiled kernel below some depth).  Nodes may be any Python values: a shard holds only its
    path, and every worker walks down to it itself, so ``root``, ``children`` and ``is_leaf`` must
    be deterministic.

    The plan cuts the tree at the first depth with at least ``PLAN_SUBTREES`` nodes (whatever the
    cluster; ``split_depth`` chooses the depth): one shard per node there, and shard ``t`` for the
    nodes above.  A shard explores its subtree depth first until it meets a node with children
    once it has explored ``budget`` nodes, then hands the subtrees it has not entered back as
    shards of their own (docs/jobs.md, "How the tree is split").  Tables: ``partial`` (leaves
    and nodes each shard explored), ``counts`` (one row: leaves, nodes, distinct keys, 0 without
    ``key``), ``leaves`` (with ``key``).
    """

    hands_back = True
    holds_gil = True  # Python callbacks on every node
    PLAN_SUBTREES = 16
    MAX_SPLIT_DEPTH = 12
    split_depth: Param[int | None] = Param(
        int,
        default=None,
        low=0,
        recorded=False,
        metavar="D",
        help=f"cut the tree at this depth (default: the first depth with at least {PLAN_SUBTREES} nodes)",
    )
    budget = Param(
        int,
        default=DEFAULT_BUDGET,
        low=0,
        recorded=False,
        metavar="NODES",
        help="nodes a shard explores before it hands its unexplored subtrees back as new shards "
        "(0: no budget, a shard explores its whole subtree)",
    )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        catalogue = cls.key is not TreeJob.key
        if catalogue and cls.count_subtree is not TreeJob.count_subtree:
            raise TypeError(f"{cls.__name__}: count_subtree counts without cataloguing; drop it or drop key")
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

    def count_subtree(self, node: Any) -> tuple[int, int] | None:
        """``(leaves, nodes)`` of the whole subtree under ``node`` (itself included), counted at
        once, or None to have the skeleton walk it.  Define it to put a compiled kernel under the
        nodes below some depth; the walk calls it on every node it enters (not for shard ``t``)."""
        return None

    def plan(self, context: PlanContext) -> list[Shard]:
        depth, paths = self._cut()
        top = [Shard(path_id(()), {"path": [], "above": depth})] if depth else []
        return top + [self._shard(path) for path in paths]

    def _shard(self, path: tuple[int, ...]) -> Shard:
        return Shard(path_id(path), {"path": list(path), "budget": self.budget})

    def _cut(self) -> tuple[int, list[tuple[int, ...]]]:
        """The depth of the cut and the paths of its nodes, in tree order: the tree walked once,
        level by level, from the root down to ``split_depth``, or to the first level with at
        least ``PLAN_SUBTREES`` nodes (a tree that has none: its widest level)."""
        level: list[tuple[tuple[int, ...], Any]] = [((), self.root())]
        depth, widest = 0, (0, level)
        while self._deeper(depth, len(level)):
            level = [
                ((*path, index), child)
                for path, node in level
                if not self.is_leaf(node)
                for index, child in enumerate(self.children(node))
            ]
            if not level:
                break
            depth += 1
            if len(level) > len(widest[1]) or self.split_depth is not None:
                widest = (depth, level)
        return widest[0], [path for path, _ in widest[1]]

    def _deeper(self, depth: int, nodes: int) -> bool:
        if self.split_depth is not None:
            return depth < self.split_depth
        return nodes < self.PLAN_SUBTREES and depth < self.MAX_SPLIT_DEPTH

    def run_shard(self, shard: Shard, context: ShardContext | None = None) -> ShardResult:
        """Shard ``t`` of a cut counts the nodes above it; any other explores the subtree at its
        path (from node ``from`` on, for the rest of a subtree a shard began), up to its budget,
        and hands back what it did not explore as children."""
        spec, started = shard.spec, time.process_time()
        found: dict[str, str] | None = {} if "leaves" in self.shard_tables else None
        children: list[Shard] = []
        if "above" in spec:
            leaves, nodes = self._above(spec["above"], found)
        else:
            path, budget = tuple(spec["path"]), spec["budget"]
            leaves, nodes, stopped = self._explore(self._stack(path, tuple(spec.get("from", ()))), budget, found)
            if stopped:
                children = _handed_back(stopped, path, budget)
        tables: dict[str, Any] = {"partial": {"shard": [shard.id], "leaves": [leaves], "nodes": [nodes]}}
        if found is not None:
            tables["leaves"] = {"key": list(found), "leaf": list(found.values())}
        # the CPU the walk took, beside the recorded wall seconds that a busy machine stretches
        cpu_ms = round(1000 * (time.process_time() - started))
        return ShardResult(tables, {"leaves": leaves, "nodes": nodes, "cpu_ms": cpu_ms}, children=children)

    def _stack(self, path: tuple[int, ...], start: tuple[int, ...]) -> list[Iterator[Any]]:
        """The walk's stack at the node at ``path``, or, given ``start`` (a path below it), where
        an earlier walk stopped: one iterator per level, each past the nodes already explored,
        the top one at ``start``'s node."""
        node = self._node_at(path)
        stack = [iter([node])]
        if not start:
            return stack
        next(stack[0])  # entered by the shard that stopped
        for depth, index in enumerate(start):
            below = _as_list(self.children(node))
            level = iter(below)
            level.__setstate__(index if depth == len(start) - 1 else index + 1)  # type: ignore[attr-defined]
            stack.append(level)
            node = below[index]
        return stack

    def _node_at(self, path: tuple[int, ...]) -> Any:
        node = self.root()
        for index in path:
            node = _as_list(self.children(node))[index]
        return node

    def _above(self, depth: int, found: dict[str, str] | None) -> tuple[int, int]:
        """Leaves and nodes above ``depth`` (the cut), level by level as the plan walked them."""
        level, leaves, nodes = [self.root()], 0, 0
        for _ in range(depth):
            below: list[Any] = []
            for node in level:
                nodes += 1
                if self.is_leaf(node):
                    leaves += 1
                    if found is not None:
                        found.setdefault(self.key(node), repr(node))
                else:
                    below.extend(self.children(node))
            level = below
        return leaves, nodes

    def _explore(
        self, stack: list[Iterator[Any]], budget: int, found: dict[str, str] | None
    ) -> tuple[int, int, list[Iterator[Any]]]:
        """Leaves and nodes the walk on ``stack`` explores, depth first, until it meets a node with
        children once it has explored ``budget`` nodes (0: no limit), and the stack where it
        stopped (empty when it finished).  One iterator per level holds O(depth) lists of
        children; a leaf is counted, or with ``found`` its key kept once, never listed.

        The budget is checked only before a node's children are entered: a leaf costs no check,
        and the top level's iterator lives in a local, not at ``stack[-1]`` (together 4% of the
        walk of SAW n = 14, docs/benchmarks.md)."""
        is_leaf, children, key = self.is_leaf, self.children, self.key
        whole = self.count_subtree if type(self).count_subtree is not TreeJob.count_subtree else None
        limit = budget or sys.maxsize
        leaves = inner = 0
        top = stack.pop()
        while True:
            for node in top:
                if whole is not None:
                    counted = whole(node)
                    if counted is not None:
                        leaves, inner = leaves + counted[0], inner + counted[1] - counted[0]
                        continue
                if is_leaf(node):
                    leaves += 1
                    if found is not None:
                        leaf_key = key(node)
                        if leaf_key not in found:
                            found[leaf_key] = repr(node)
                elif leaves + inner < limit:
                    inner += 1
                    stack.append(top)
                    below = children(node)
                    top = iter(below if below.__class__ is list else list(below))
                    break
                else:
                    stack.append(top)
                    return leaves, leaves + inner, stack
            else:
                if not stack:
                    return leaves, leaves + inner, []
                top = stack.pop()

    def finalize(self, tables: dict[str, Any], out: Any) -> dict[str, Any]:
        """``counts`` from the merged tables, read lazily: two columns of ``partial`` and the row
        count of ``leaves``; both are published as they are (folders of parts).  ``counts`` is an
        Arrow table, so that a count-only run never imports pandas (docs/design.md, "No pandas,
        no pyarrow.compute on the hot path": a row a shard, summed by Python, exactly)."""
        partial = tables["partial"]
        leaves, nodes = (sum(partial.column(name).to_pylist()) for name in ("leaves", "nodes"))
        distinct = len(tables["leaves"]) if "leaves" in tables else 0
        counts = pa.Table.from_pydict(
            {
                name: from_list([value], pa.int64())
                for name, value in (("leaves", leaves), ("nodes", nodes), ("distinct", distinct))
            }
        )
        return {**tables, "counts": counts}

    def summary(self, tables: dict[str, Any], totals: dict[str, int]) -> str:
        row = tables["counts"].to_pylist()[0]
        line = f"{self.name}: {row['leaves']} leaves, {row['nodes']} nodes"
        return line + (f", {row['distinct']} distinct by key" if "leaves" in tables else "")


def _as_list(items: Iterable[Any]) -> list[Any]:
    return items if isinstance(items, list) else list(items)


def _handed_back(stack: list[Iterator[Any]], path: tuple[int, ...], budget: int) -> list[Shard]:
    """The shards for what a walk stopped on ``stack`` (started at ``path``) did not explore, the
    largest pieces first named (YewPar's budget skeleton): on the shallowest level with nodes not
    yet entered, each of them a shard of its own; the rest, below the node that level is inside,
    one shard going on from the node the walk stopped at (``from``), named after that node.  The
    top level's last node was taken, then put back.  A list iterator tells its list and position
    (``__reduce__``), so the walk keeps no path per node."""
    levels: list[tuple[int, int]] = []  # (children on the level, first one not entered)
    for depth, level in enumerate(stack[1:], start=1):
        reduced: Any = level.__reduce__()
        size, position = (len(reduced[1][0]), int(reduced[2])) if len(reduced) > 2 else (0, 0)
        levels.append((size, position - 1 if depth == len(stack) - 1 else position))
    shallowest = next(depth for depth, (size, first) in enumerate(levels) if first < size)
    inside = tuple(first - 1 for _, first in levels)  # the node each level is inside
    prefix = path + inside[:shallowest]
    size, first = levels[shallowest]
    shards = [
        Shard(path_id((*prefix, index)), {"path": [*prefix, index], "budget": budget}) for index in range(first, size)
    ]
    if shallowest < len(levels) - 1:
        rest = (*prefix, first - 1)
        start = [*inside[shallowest + 1 : -1], levels[-1][1]]
        shards.append(Shard(path_id(rest), {"path": list(rest), "from": start, "budget": budget}))
    return sorted(shards, key=lambda shard: shard.id)
