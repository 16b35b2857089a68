"""The merge of a table the shards write in no particular order (every table but the streamed ones):
its rows cut into partitions by ranges of one column, each partition deduplicated on the key and
sorted by a task of its own, the partitions written as the parts of one table in its sort order, so
that no process holds the whole table (docs/design.md, "Tables merged by partition").

The rule is the one the driver's in-memory merge had: the rows in their places (plan order of the
shards, then order within a shard), sorted stably by the table's order (``merged_order``), the
first row per key kept.  A task reads its rows in place order and sorts them stably, so ties are
decided by place without a column saying so, except where rows leave place order (round 2 below):
there they carry ``ORDER_COLUMN`` (shard index times 2**40 plus the row in the shard).

**One round** when the first order column is a key column (``range_column``; the common case: key
and sort the same).  Every row of a key then falls in one range of it.  Shards write such a table
sorted by that column in row groups of ``RANGE_GROUP_ROWS`` (shard_store.py), so the driver cuts
the ranges from the shard files' footers alone (row-group statistics), and the task of a range reads
only the row groups whose statistics reach it: every row is read about once, by one task.

**Two rounds** otherwise: round 1 cuts the rows by ranges of the first key column (sampled from the
shard files), each shard's rows first split into one row group per range (``split-1/``), and keeps
the first row per key; round 2 cuts those rows by ranges of the first order column (or of their
places, without a sort) and sorts each range.

Layout under ``OUT/<job>/_merge/<table>/<merge id>/`` (the merge id is a checksum of the job's
provenance, the table, its shards and their commit ids, so that a rerun reuses only what these
exact shards made):

    round-R.json              round R's ranges, for ``batchenum status``
    split-R/<input>.parquet   round R of two: an input's rows, one row group per range, places kept
    dedup-PPPPP.parquet       round 1 of two: range P deduplicated, places kept
    part-PPPPP.parquet        a part of the final table, which the commit shares into the table

Every file is written whole under its final name (``Storage.write_atomic``) and checked before it is
reused: its metadata (the table's provenance, and the merge id in the intermediate files) and every
page's checksum.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from batchenum.pipeline import faults
from batchenum.pipeline.arrow import bools_to_numpy, from_numpy, to_numpy
from batchenum.pipeline.job import TableSpec
from batchenum.pipeline.parquet_format import (
    ROW_GROUP_ROWS,
    StoreError,
    decode_metadata,
    encode_metadata,
    merged_order,
    parquet_options,
    range_column,
    read_verified,
    table_schema,
)
from batchenum.pipeline.shard_store import ShardStore
from batchenum.pipeline.storage import is_temporary

__all__ = ["MERGE_DIR", "MERGE_ROWS", "ORDER_COLUMN", "MergeTask", "merge_table", "run_merge_task"]

MERGE_DIR = "_merge"
# Rows (as the shards emitted them, duplicates included) per range: what one task holds at once.
# docs/design.md, "Tables merged by partition", has what a task of 2M rows took.
MERGE_ROWS = 1 << 21
# A row's place in the run, where rows leave place order: shard index * 2**40 + its row in the shard.
ORDER_COLUMN = "__order"
_ROW_BITS = 40
_SAMPLES = 1024  # values each shard file contributes to the ranges of a two-round merge
_TASKS = 16  # sample and split tasks per merge at most (a task costs ~0.5 ms on Ray, a file less)


@dataclass(frozen=True)
class Input:
    """One file a step reads: its name, path, and the index of its shard (None for a merge file,
    whose rows carry their places)."""

    name: str
    path: str
    shard: int | None


@dataclass(frozen=True)
class MergePlan:
    """A table's merge: the shard store, the table, the merge id and the shards in plan order."""

    store: ShardStore
    table: str
    merge_id: str
    shard_ids: tuple[str, ...]

    @property
    def spec(self) -> TableSpec:
        return self.store.job.table_spec(self.table)

    @property
    def folder(self) -> str:
        return self.store.storage.join(MERGE_DIR, self.table, self.merge_id)

    def shards(self) -> list[Input]:
        return [Input(s, self.store.shard_path(self.table, s), k) for k, s in enumerate(self.shard_ids)]

    def split_path(self, number: int, name: str) -> str:
        return posixpath.join(self.folder, f"split-{number}", f"{name}.parquet")

    def output_path(self, final: bool, partition: int) -> str:
        return posixpath.join(self.folder, f"{'part' if final else 'dedup'}-{partition:05d}.parquet")

    def intermediate_metadata(self, **extra: str) -> dict[bytes, bytes]:
        """What an intermediate file records: the table's provenance and the merge id."""
        return encode_metadata({**self.store.provenance.final_metadata(self.table), "merge": self.merge_id, **extra})


@dataclass(frozen=True)
class MergeTask:
    """One task of a merge.

    kind "range":  range ``partition`` of a one-round merge, from the row groups ``groups`` names in
                   each shard file (in plan order), rows with ``column`` in [``low``, ``high``).
    kind "sample": sample ``column`` in each of ``inputs``.
    kind "split":  split each of ``inputs`` into ``round``'s ranges of ``column`` (``splitters``).
    kind "partition": range ``partition`` of ``round`` (1 or 2) from its split files.
    """

    plan: MergePlan
    kind: str
    round: int = 1
    column: str = ""
    splitters: tuple = ()
    inputs: tuple[Input, ...] = ()
    partition: int = 0
    low: Any = None
    high: Any = None
    groups: tuple[tuple[int, ...], ...] = field(default=())

    def __str__(self) -> str:
        what = f"range {self.partition}" if self.kind in ("range", "partition") else self.inputs[0].name + ".."
        return f"{self.plan.table} merge {self.kind} ({what})"


def run_merge_task(task: MergeTask) -> Any:
    """Run one ``MergeTask`` (a module-level function, for Ray's workers)."""
    if task.kind == "range":
        return _merge_range(task)
    if task.kind == "sample":
        return [_sample(task.plan, source, task.column) for source in task.inputs]
    if task.kind == "split":
        return [_split(task, source) for source in task.inputs]
    return _merge_split_partition(task)


# ------------------------------------------------------------------------------------- the driver


def merge_table(
    store: ShardStore,
    table: str,
    shard_ids: list[str],
    rows: int,
    run: Callable[[list[MergeTask]], list],
    say: Callable[[str], None],
) -> tuple[list[str], list[int]]:
    """Merge table ``table`` of the shards ``shard_ids`` (``rows`` rows in all), each step's tasks
    run by ``run`` (Ray tasks, or this process); returns its final parts' paths and rows, in order."""
    spec = store.job.table_spec(table)
    ranges = max(1, -(-rows // MERGE_ROWS))
    probe = MergePlan(store, table, "", tuple(shard_ids))
    footers = [_footer(store, source.path, range_column(spec)) for source in probe.shards()]
    plan = MergePlan(store, table, merge_id(store, table, shard_ids, [f.commit for f in footers]), tuple(shard_ids))
    _clear_other_merges(plan)
    column = range_column(spec)
    if column is not None or not spec.key:
        return _one_round(plan, column, footers, ranges, run, say)
    return _two_rounds(plan, ranges, run, say)


def merge_id(store: ShardStore, table: str, shard_ids: list[str], commits: list[str]) -> str:
    """A checksum of everything a merge's files depend on: provenance (code version in full), the
    table, the shards in plan order with their commit ids, and the range size."""
    provenance = store.provenance
    identity = [provenance.job, provenance.version, provenance.params, table, shard_ids, commits, MERGE_ROWS]
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


@dataclass(frozen=True)
class _Footer:
    """What a shard file's footer says: its commit id, and for each row group its rows, the
    smallest and largest value of the range column (None when unknown), and whether it holds a null
    there (True when unknown)."""

    commit: str
    groups: list[tuple[int, Any, Any, bool]]


def _footer(store: ShardStore, path: str, column: str | None) -> _Footer:
    with store.storage.open_input(path) as handle:
        metadata = pq.ParquetFile(handle).metadata
    commit = decode_metadata(metadata.schema.to_arrow_schema().metadata).get("commit", "")
    index = metadata.schema.to_arrow_schema().get_field_index(column) if column else -1
    groups = []
    for k in range(metadata.num_row_groups):
        group = metadata.row_group(k)
        stats = group.column(index).statistics if index >= 0 else None
        if stats is not None and stats.has_min_max:
            nulls = not stats.has_null_count or stats.null_count > 0
            groups.append((group.num_rows, stats.min, stats.max, nulls))
        else:
            groups.append((group.num_rows, None, None, True))
    return _Footer(commit, groups)


def _one_round(
    plan: MergePlan, column: str | None, footers: list[_Footer], ranges: int, run, say
) -> tuple[list[str], list[int]]:
    """Ranges of ``column`` cut from the footers' row-group statistics; one task per range reads the
    row groups that reach it (a row group without statistics: every task)."""
    splitters = _splitters_from_footers(footers, ranges) if column else ()
    bounds = [None, *splitters, None]
    tasks = []
    for p in range(len(splitters) + 1):
        low, high = bounds[p], bounds[p + 1]
        groups = tuple(
            tuple(k for k, (_, least, most, nulls) in enumerate(f.groups) if _reaches(least, most, nulls, low, high))
            for f in footers
        )
        tasks.append(MergeTask(plan, "range", column=column or "", partition=p, low=low, high=high, groups=groups))
    return _run_partitions(plan, tasks, True, 1, say, run)


def _reaches(least: Any, most: Any, nulls: bool, low: Any, high: Any) -> bool:
    """Whether a row group with values in [least, most] (None: unknown), and nulls or not, may hold
    rows of the range [low, high) (the last range, ``high`` None, holds the nulls)."""
    if least is None or most is None or (nulls and high is None):
        return True
    return (low is None or most >= low) and (high is None or least < high)


def _splitters_from_footers(footers: list[_Footer], ranges: int) -> tuple:
    """Cut points from the row groups' statistics: each row group's rows counted at its smallest value."""
    weighted: list[tuple[Any, float]] = [
        (least, rows) for f in footers for rows, least, _, _ in f.groups if least is not None and rows
    ]
    return _cut(weighted, ranges)


def _two_rounds(plan: MergePlan, ranges: int, run, say) -> tuple[list[str], list[int]]:
    spec = plan.spec
    key_column = spec.key[0]
    samples = run(_batched(plan, "sample", plan.shards(), column=key_column))
    splitters = _cut([item for batch in samples for sample in batch for item in sample], ranges)
    dedup = _run_split_round(plan, 1, key_column, splitters, plan.shards(), final=False, run=run, say=say)[1]
    order = merged_order(spec)
    column = order[0] if order else ORDER_COLUMN
    inputs = [Input(f"dedup-{p:05d}", plan.output_path(False, p), None) for p in range(len(dedup))]
    samples = run(_batched(plan, "sample", inputs, column=column))
    splitters = _cut([item for batch in samples for sample in batch for item in sample], ranges)
    return _run_split_round(plan, 2, column, splitters, inputs, final=True, run=run, say=say)


def _run_split_round(
    plan: MergePlan, number: int, column: str, splitters: tuple, inputs: list[Input], final: bool, run, say
) -> tuple[list[str], list[int]]:
    """Round ``number`` of two: each input split into the ranges (unless every range's output is
    written already), then each range merged from the split files."""
    tasks = [
        MergeTask(plan, "partition", number, column, splitters, tuple(inputs), partition=p)
        for p in range(len(splitters) + 1)
    ]
    if any(_kept_rows(plan, plan.output_path(final, p), final) is None for p in range(len(tasks))):
        if len(tasks) > 1:
            run(_batched(plan, "split", inputs, column=column, round=number, splitters=splitters))
    return _run_partitions(plan, tasks, final, number, say, run)


def _run_partitions(
    plan: MergePlan, tasks: list[MergeTask], final: bool, number: int, say, run
) -> tuple[list[str], list[int]]:
    """Run the tasks whose output is not written yet (an interrupted run's are kept); returns the
    outputs that hold rows, and their rows (one output, possibly empty, when none does)."""
    # what `batchenum status` counts the written ranges against
    progress = json.dumps({"round": number, "ranges": len(tasks), "final": final})
    plan.store.storage.write_text(posixpath.join(plan.folder, f"round-{number}.json"), progress + "\n")
    rows = {task.partition: _kept_rows(plan, plan.output_path(final, task.partition), final) for task in tasks}
    todo = [task for task in tasks if rows[task.partition] is None]
    if len(todo) < len(tasks):
        say(
            f"{plan.table}: {len(tasks) - len(todo)} of {len(tasks)} merged ranges (round {number}) "
            f"kept from an interrupted run, {len(todo)} to write"
        )
    rows.update(zip((task.partition for task in todo), run(todo)))
    kept = [p for p in sorted(rows) if rows[p]] or [0]
    return [plan.output_path(final, p) for p in kept], [int(rows[p] or 0) for p in kept]


def _batched(plan: MergePlan, kind: str, inputs: list[Input], **fields: Any) -> list[MergeTask]:
    """Tasks of ``kind`` over ``inputs``, at most ``_TASKS`` of them, each a run of inputs."""
    per_task = max(1, -(-len(inputs) // _TASKS))
    return [
        MergeTask(plan, kind, inputs=tuple(inputs[k : k + per_task]), **fields) for k in range(0, len(inputs), per_task)
    ]


def _cut(weighted: list[tuple[Any, float]], ranges: int) -> tuple:
    """``ranges - 1`` values cutting weighted values into ranges of about equal weight, distinct and
    rising; fewer when there are fewer distinct values."""
    if ranges <= 1 or not weighted:
        return ()
    weighted = sorted(weighted, key=lambda item: item[0])
    total = sum(weight for _, weight in weighted)
    cuts: list[Any] = []
    seen = 0.0
    for value, weight in weighted:
        if seen >= total * (len(cuts) + 1) / ranges and len(cuts) < ranges - 1 and (not cuts or value > cuts[-1]):
            cuts.append(value)
        seen += weight
    return tuple(cuts)


def _clear_other_merges(plan: MergePlan) -> None:
    """Delete the merge files of other shards or code (a stale merge id) and temporaries a killed
    writer left in this merge's folder (the caller holds the folder's lease)."""
    storage = plan.store.storage
    table_folder = storage.join(MERGE_DIR, plan.table)
    for folder in storage.list_dirs(table_folder) if storage.exists(table_folder) else []:
        if posixpath.basename(folder) != plan.merge_id:
            storage.delete_dir(folder)
    if storage.exists(plan.folder):
        for path in storage.list_files(plan.folder):
            if is_temporary(posixpath.basename(path)):
                storage.delete_file(path)


def _kept_rows(plan: MergePlan, path: str, final: bool) -> int | None:
    """The rows of a merge output an interrupted run wrote for this merge id, or None (none, or one
    whose metadata or any page fails its check: written again)."""
    storage = plan.store.storage
    if not storage.is_file(path):
        return None
    try:
        with storage.open_input(path) as handle:
            table = read_verified(handle)
    except StoreError:
        return None
    expected = plan.store.provenance.final_metadata(plan.table)
    if not final:
        expected = {**expected, "merge": plan.merge_id}
    return table.num_rows if decode_metadata(table.schema.metadata) == expected else None


# ------------------------------------------------------------------------------------ the workers


def _merge_range(task: MergeTask) -> int:
    """A range of a one-round merge: from each shard file (plan order) the row groups that reach the
    range, its rows in [low, high), deduplicated and sorted; written as a final part."""

    plan = task.plan
    pieces = []
    for source, groups in zip(plan.shards(), task.groups):
        if not groups:
            continue
        piece = plan.store.read_shard_file(source.path, plan.table, row_groups=list(groups))
        if task.low is not None or task.high is not None:
            piece = piece.filter(_inside(piece.column(task.column), task.low, task.high))
        pieces.append(piece.replace_schema_metadata(None))
    table = pa.concat_tables(pieces) if pieces else table_schema(plan.spec).empty_table()
    table = _arranged(table, plan.spec, dedup=bool(plan.spec.key), final=True, in_place_order=True)
    return _write_output(task, plan.output_path(True, task.partition), table, final=True)


def _inside(values: pa.ChunkedArray, low: Any, high: Any) -> pa.ChunkedArray:
    """Whether each value is in [low, high) (None: unbounded); a null sorts last, so the last range
    holds it."""
    import pyarrow.compute as pc

    above = pc.greater_equal(values, low) if low is not None else pa.scalar(True)
    below = pc.less(values, high) if high is not None else pc.invert(pc.is_null(values))
    inside = pc.fill_null(pc.and_kleene(above, below), False)
    return pc.or_(inside, pc.is_null(values)) if high is None else inside


def _sample(plan: MergePlan, source: Input, column: str) -> list[tuple[Any, float]]:
    """Up to ``_SAMPLES`` values of ``column`` in a file, evenly spaced by row, each with the rows it
    stands for (a shard's places are computed, not read)."""
    storage = plan.store.storage
    with storage.open_input(source.path) as handle:
        parquet = pq.ParquetFile(handle)
        rows = parquet.metadata.num_rows
        if not rows:
            return []
        picked = np.linspace(0, rows - 1, num=min(_SAMPLES, rows)).astype(np.int64)
        if column == ORDER_COLUMN and source.shard is not None:
            values = ((np.int64(source.shard) << _ROW_BITS) + picked).tolist()
        else:
            values = parquet.read(columns=[column]).column(0).take(from_numpy(picked)).to_pylist()
    return [(value, rows / len(picked)) for value in values if value is not None]


def _read_input(plan: MergePlan, source: Input, row_groups: list[int] | None = None) -> pa.Table:
    """An input's rows with their places: a shard file (places made from its index) or a merge file
    (places kept), every page verified."""
    if source.shard is not None:
        table = plan.store.read_shard_file(source.path, plan.table).replace_schema_metadata(None)
        places = (np.int64(source.shard) << _ROW_BITS) + np.arange(table.num_rows, dtype=np.int64)
        return table.append_column(ORDER_COLUMN, from_numpy(places))
    storage = plan.store.storage
    with storage.open_input(source.path) as handle:
        table = read_verified(handle, _merge_schema(plan.spec), row_groups=row_groups, where=storage.uri(source.path))
    return table.replace_schema_metadata(None)


def _split(task: MergeTask, source: Input) -> list[int]:
    """Write an input's rows to ``split-R/<name>.parquet``, one row group per range of the round (in
    place order within each), places kept; returns the rows per range."""
    plan = task.plan
    target = plan.split_path(task.round, source.name)
    kept = _split_rows(plan, target, len(task.splitters) + 1)
    if kept is not None:
        return kept
    table = _read_input(plan, source)
    ranges = len(task.splitters) + 1
    which = _range_of(table.column(task.column), task.splitters)
    by_range = np.argsort(which, kind="stable")
    bounds = np.searchsorted(which[by_range], np.arange(ranges + 1))
    table = table.take(pa.array(by_range))
    counts = np.diff(bounds).tolist()
    schema = _merge_schema(plan.spec).with_metadata(plan.intermediate_metadata(range_rows=json.dumps(counts)))

    def write(local: str) -> None:
        with pq.ParquetWriter(local, schema, **_split_options(plan.spec)) as writer:
            for p in range(ranges):
                part = table.slice(int(bounds[p]), int(counts[p])).replace_schema_metadata(schema.metadata)
                writer.write_table(part, row_group_size=max(1, len(part)))

    plan.store.storage.write_atomic(target, write)
    return counts


def _split_rows(plan: MergePlan, path: str, ranges: int) -> list[int] | None:
    """The rows per range of a split file this merge already wrote, or None."""
    storage = plan.store.storage
    if not storage.is_file(path):
        return None
    try:
        with storage.open_input(path) as handle:
            footer = pq.ParquetFile(handle).metadata
        found = decode_metadata(footer.schema.to_arrow_schema().metadata)
        counts = json.loads(found["range_rows"])
    except Exception:  # unreadable, or not ours: written again
        return None
    if found.get("merge") != plan.merge_id or len(counts) != ranges or footer.num_row_groups != ranges:
        return None
    return counts


def _range_of(values: pa.ChunkedArray, splitters: tuple) -> np.ndarray:
    """Each value's range: how many splitters it reaches (a value equal to one goes above it)."""
    import pyarrow.compute as pc

    which = np.zeros(len(values), dtype=np.int32)
    for cut in splitters:
        above = pc.fill_null(pc.greater_equal(values, pa.scalar(cut, values.type)), True)  # a null sorts last
        which += above.to_numpy(zero_copy_only=False)
    return which


def _merge_split_partition(task: MergeTask) -> int:
    """Range ``partition`` of round 1 or 2 of a two-round merge: the row group each split file holds
    for it (every input whole when the round has one range); round 1 keeps the first row per key,
    round 2 sorts and writes a final part."""
    plan = task.plan
    if task.splitters:
        sources = [Input(s.name, plan.split_path(task.round, s.name), None) for s in task.inputs]
        pieces = [_read_input(plan, source, row_groups=[task.partition]) for source in sources]
    else:
        pieces = [_read_input(plan, source) for source in task.inputs]
    table = pa.concat_tables(pieces) if pieces else _merge_schema(plan.spec).empty_table()
    final = task.round == 2
    table = _arranged(table, plan.spec, dedup=not final, final=final, in_place_order=not final)
    return _write_output(task, plan.output_path(final, task.partition), table, final)


def _arranged(table: pa.Table, spec: TableSpec, dedup: bool, final: bool, in_place_order: bool) -> pa.Table:
    """``table`` with the first row per key kept (``dedup``) and/or in the table's order (``final``:
    ties by place, the helper columns dropped).  ``in_place_order``: its rows come in place order,
    so a stable sort decides ties by place; otherwise they carry ``ORDER_COLUMN``."""
    order, key = merged_order(spec), list(spec.key)
    ties = [] if in_place_order else [ORDER_COLUMN]
    places = np.arange(table.num_rows, dtype=np.int64)
    sorted_by: list[str] | None = None
    if dedup and table.num_rows:
        sorted_by = [*key, *(c for c in order if c not in key)]
        indices = _sort_indices(table, sorted_by + ties)
        table = _taken(table, indices)
        first = _first_of_runs(table, key)
        table, places = _taken(table, np.flatnonzero(first)), indices[first]
    if final and sorted_by != order and table.num_rows:
        helper = "__place" if in_place_order else ORDER_COLUMN
        if in_place_order:
            table = table.append_column(helper, from_numpy(places))
        table = _taken(table, _sort_indices(table, [*order, helper]))
    if final:
        table = table.select(spec.column_names)
    return table


def _first_of_runs(table: pa.Table, key: list[str]) -> np.ndarray:
    """Whether each row (sorted by ``key``) is the first of its run of equal keys."""
    if _small(table, key):
        columns = [table.column(column).to_pylist() for column in key]
        return np.array(
            [True] + [any(c[row] != c[row - 1] for c in columns) for row in range(1, table.num_rows)], dtype=bool
        )  # two nulls are equal, two NaNs differ: as below
    import pyarrow.compute as pc

    first = np.zeros(table.num_rows, dtype=bool)
    first[0] = True
    for column in key:
        values = table.column(column)
        later, earlier = values.slice(1), values.slice(0, len(values) - 1)
        unequal = pc.not_equal(later, earlier)  # null where either is: counted as differing
        differs = bools_to_numpy(pc.or_kleene(unequal, pc.is_null(unequal)))  # (pa.scalar imports pandas)
        both_null = bools_to_numpy(pc.and_(pc.is_null(later), pc.is_null(earlier)))
        first[1:] |= differs & ~both_null
    return first


def _sort_indices(table: pa.Table, columns: list[str]) -> np.ndarray:
    """Indices of a stable sort by ``columns`` (Arrow's sort is stable), as int64 (read from the
    buffer: ``to_numpy`` imports pandas, pipeline/arrow.py)."""
    if _small(table, columns):
        return _python_sort_indices(table, columns)
    import pyarrow.compute as pc

    return to_numpy(pc.sort_indices(table, [(column, "ascending") for column in columns]).cast(pa.int64()))


# A table this small is sorted and reordered by Python, not Arrow: importing pyarrow.compute costs
# a process 0.1 s and 6 MiB, far more than the sort of a count table's few rows
SMALL_TABLE_ROWS = 1024


def _small(table: pa.Table, columns: list[str]) -> bool:
    """Whether ``table`` is sorted by Python: few rows, and ``columns`` of types Python orders as Arrow."""
    return table.num_rows <= SMALL_TABLE_ROWS and all(_python_sortable(table.schema.field(c).type) for c in columns)


def _python_sortable(arrow_type: pa.DataType) -> bool:
    """Types whose Python values order as Arrow orders them (UTF-8 bytes order as code points)."""
    return (
        pa.types.is_integer(arrow_type)
        or pa.types.is_boolean(arrow_type)
        or arrow_type in (pa.float32(), pa.float64(), pa.string(), pa.large_string(), pa.binary(), pa.large_binary())
    )


def _python_sort_indices(table: pa.Table, columns: list[str]) -> np.ndarray:
    """Arrow's stable ascending sort (nulls last, NaN just before them) by Python's stable sort."""
    keys = [[_sort_key(value) for value in table.column(column).to_pylist()] for column in columns]
    rows = sorted(range(table.num_rows), key=lambda row: tuple(column[row] for column in keys))
    return np.array(rows, dtype=np.int64)


def _sort_key(value: Any) -> tuple:
    if value is None:
        return (2,)
    if value != value:  # NaN
        return (1,)
    return (0, value)


def _taken(table: pa.Table, indices: np.ndarray) -> pa.Table:
    """``table.take(indices)``; a small table by slices of its runs of consecutive rows, which
    spares importing pyarrow.compute (``Table.take`` calls it)."""
    if len(indices) > SMALL_TABLE_ROWS:
        return table.take(from_numpy(indices))
    if not len(indices):
        return table.slice(0, 0)
    starts = np.flatnonzero(np.diff(indices, prepend=indices[0] - 2) != 1)
    ends = [*starts[1:], len(indices)]
    pieces = [table.slice(int(indices[start]), int(end - start)) for start, end in zip(starts, ends)]
    return pa.concat_tables(pieces).combine_chunks()


def _write_output(task: MergeTask, path: str, table: pa.Table, final: bool) -> int:
    """A range's output, then its rows.  A final part records the table's provenance alone, as every
    final table does (the same bytes whatever run wrote it: its folder names the merge); round 1's
    output keeps the places and records the merge id."""
    plan, spec = task.plan, task.plan.spec
    if final:
        metadata = encode_metadata(plan.store.provenance.final_metadata(plan.table))
        schema = table_schema(spec).with_metadata(metadata)
    else:
        schema = _merge_schema(spec).with_metadata(plan.intermediate_metadata())
    table = table.replace_schema_metadata(schema.metadata)

    def write(local: str) -> None:
        pq.write_table(table, local, row_group_size=ROW_GROUP_ROWS, **parquet_options(spec))

    plan.store.storage.write_atomic(path, write)
    faults.after_merge_partition(task.partition)
    return table.num_rows


def _merge_schema(spec: TableSpec) -> pa.Schema:
    return table_schema(spec).append(pa.field(ORDER_COLUMN, pa.int64()))


def _split_options(spec: TableSpec) -> dict[str, Any]:
    """Split files are read once, by the next step: lz4, like shard files, without dictionaries."""
    return {**parquet_options(spec, compression="lz4"), "use_dictionary": False}
