"""The merge of a table the shards write in no particular order (every table but the streamed ones):
its rows split into partitions by ranges of one column, each partition deduplicated on the key and
sorted by a task of its own, the partitions written as the parts of one table in its sort order, so
that no process holds the whole table (docs/design.md, "Tables merged by partition").

The rule is the one the driver's in-memory merge had: every row carries its place in the run
(``ORDER_COLUMN``: its shard's index in the plan, then its row in the shard); the row kept for a key
is the first by (``sort`` columns, place), and the table's rows come in that order.

Layout under ``OUT/<job>/_merge/<table>/<merge id>/`` (the merge id is a checksum of the job's
provenance, the table, its shards and their commit ids, so that a rerun reuses only what these
exact shards made):

    split-R/<input>.parquet   an input's rows (a shard's, or round 1's deduplicated partition),
                              one row group per partition of round R, their places kept
    dedup-PPPPP.parquet       round 1 of two: partition P deduplicated (by ranges of the key)
    part-PPPPP.parquet        a part of the final table, which the commit shares into the table

Every file is written whole under its final name (``Storage.write_atomic``) and checked before it is
reused: its footer records the merge id and the table's provenance, and its pages are verified when
read.  One round suffices when the first sort column is a key column (every row of a key then falls
in one range of it); otherwise round 1 deduplicates by ranges of the first key column and round 2
sorts by ranges of the first sort column.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from batchenum.pipeline import faults
from batchenum.pipeline.job import TableSpec
from batchenum.pipeline.parquet_format import (
    ROW_GROUP_ROWS,
    StoreError,
    decode_metadata,
    encode_metadata,
    parquet_options,
    partition_order,
    read_verified,
    table_schema,
)
from batchenum.pipeline.shard_store import ShardStore
from batchenum.pipeline.storage import is_temporary

__all__ = [
    "MERGE_DIR",
    "MERGE_ROWS",
    "ORDER_COLUMN",
    "MergePlan",
    "MergeTask",
    "merge_id",
    "merge_table",
    "run_merge_task",
    "table_order",
]

MERGE_DIR = "_merge"
# Rows (as the shards emitted them, duplicates included) per partition: what one task holds at once.
# About 2M rows of an int64 and a 20-character string took 0.5 GB of a worker's memory at its peak
# (docs/design.md, "Tables merged by partition").
MERGE_ROWS = 1 << 21
# A row's place in the run: its shard's index in the plan times 2**40, plus its row in the shard.
ORDER_COLUMN = "__order"
_ROW_BITS = 40
_SAMPLES = 256  # values each input contributes to the choice of the ranges


def table_order(spec: TableSpec) -> list[str]:
    """The columns a merged table's rows are sorted by: its partition column first, if it has one."""
    return partition_order(spec) if spec.partition is not None else list(spec.sort)


@dataclass(frozen=True)
class Round:
    """One pass over the rows: inputs split by ranges of ``column`` into ``len(splitters) + 1``
    partitions, each partition then deduplicated (``dedup``) and/or written as a final part (``final``)."""

    number: int
    column: str
    splitters: tuple
    dedup: bool
    final: bool

    @property
    def partitions(self) -> int:
        return len(self.splitters) + 1


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

    def split_path(self, number: int, name: str) -> str:
        return posixpath.join(self.folder, f"split-{number}", f"{name}.parquet")

    def output_path(self, round_: Round, partition: int) -> str:
        return posixpath.join(self.folder, f"{'part' if round_.final else 'dedup'}-{partition:05d}.parquet")

    def inputs(self, round_: Round, previous: Round | None) -> list[tuple[str, str, int | None]]:
        """(name, path, shard index or None) of each input of ``round_``: the shard files, or the
        previous round's outputs (whose rows carry their places already)."""
        if previous is None:
            return [
                (shard_id, self.store.shard_path(self.table, shard_id), index)
                for index, shard_id in enumerate(self.shard_ids)
            ]
        return [(f"dedup-{p:05d}", self.output_path(previous, p), None) for p in range(previous.partitions)]

    def metadata(self, **extra: str) -> dict[bytes, bytes]:
        """What every intermediate file of the merge records: the table's provenance and the merge id."""
        return encode_metadata({**self.store.provenance.final_metadata(self.table), "merge": self.merge_id, **extra})


@dataclass(frozen=True)
class MergeTask:
    """One task of a merge: ``kind`` "sample", "split" or "partition", on the inputs (or partition) named."""

    plan: MergePlan
    kind: str
    round: Round | None = None
    previous: Round | None = None
    column: str = ""
    inputs: tuple[tuple[str, str, int | None], ...] = ()
    partition: int = 0

    def __str__(self) -> str:
        what = f"partition {self.partition}" if self.kind == "partition" else ", ".join(i[0] for i in self.inputs[:3])
        return f"{self.plan.table} merge {self.kind} ({what})"


def run_merge_task(task: MergeTask) -> Any:
    """Run one ``MergeTask`` (a module-level function, for Ray's workers)."""
    if task.kind == "sample":
        return [_sample(task.plan, path, index, task.column) for _, path, index in task.inputs]
    if task.kind == "split":
        assert task.round is not None
        return [_split(task.plan, task.round, name, path, index) for name, path, index in task.inputs]
    assert task.round is not None
    return _merge_partition(task.plan, task.round, task.previous, task.partition)


# ------------------------------------------------------------------------------------- the driver


def merge_id(store: ShardStore, table: str, shard_ids: list[str], commits: list[str]) -> str:
    """A checksum of everything a merge's files depend on: provenance (code version in full), the
    table, the shards in plan order with their commit ids, and the partition size."""
    text = json.dumps(
        [
            store.provenance.job,
            store.provenance.version,
            store.provenance.params,
            table,
            shard_ids,
            commits,
            MERGE_ROWS,
        ],
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def merge_table(
    store: ShardStore, table: str, shard_ids: list[str], rows: int, run: Callable[[list[MergeTask]], list], say
) -> tuple[list[str], list[int]]:
    """Merge table ``table`` of the shards ``shard_ids`` (``rows`` rows in all), each step's tasks
    run by ``run`` (Ray tasks, or this process); returns its final parts' paths and rows, in order."""
    spec = store.job.table_spec(table)
    order, key = table_order(spec), list(spec.key)
    one_round = not key or (bool(order) and order[0] in key)
    column = (order[0] if order else ORDER_COLUMN) if one_round else key[0]
    partitions = max(1, -(-rows // MERGE_ROWS))
    probe = MergePlan(store, table, "", tuple(shard_ids))
    samples = run(_batched(probe, "sample", probe.inputs(Round(1, column, (), False, False), None), column=column))
    found = [item for batch in samples for item in batch]
    plan = MergePlan(store, table, merge_id(store, table, shard_ids, [commit for commit, _ in found]), tuple(shard_ids))
    _clear_other_merges(plan)
    round_1 = Round(1, column, _splitters([sample for _, sample in found], partitions), bool(key), one_round)
    written = _run_round(plan, round_1, None, run, say)
    if one_round:
        return _parts(plan, round_1, written)
    second_column = order[0] if order else ORDER_COLUMN
    inputs = plan.inputs(round_1, round_1)
    samples = run(_batched(plan, "sample", inputs, column=second_column))
    round_2 = Round(2, second_column, _splitters([s for b in samples for _, s in b], partitions), False, True)
    return _parts(plan, round_2, _run_round(plan, round_2, round_1, run, say))


def _run_round(plan: MergePlan, round_: Round, previous: Round | None, run, say) -> list[int]:
    """Split the round's inputs (unless it has one partition), then write each partition; returns
    the rows of each partition's output.  Outputs already written by an interrupted run with the
    same merge id are kept."""
    done = {p: _committed_rows(plan, plan.output_path(round_, p)) for p in range(round_.partitions)}
    todo = [p for p, rows in done.items() if rows is None]
    if len(todo) < round_.partitions:
        say(
            f"{plan.table}: {round_.partitions - len(todo)} of {round_.partitions} merged partitions "
            f"(round {round_.number}) kept from an interrupted run, {len(todo)} to write"
        )
    if todo and round_.partitions > 1:
        run(_batched(plan, "split", plan.inputs(round_, previous), round_=round_))
    written = run([MergeTask(plan, "partition", round_, previous, partition=p) for p in todo])
    done.update(zip(todo, written))
    return [int(done[p] or 0) for p in range(round_.partitions)]


def _parts(plan: MergePlan, round_: Round, rows: list[int]) -> tuple[list[str], list[int]]:
    """The final parts that hold rows (one, possibly empty, when none does)."""
    kept = [p for p in range(round_.partitions) if rows[p]] or [0]
    return [plan.output_path(round_, p) for p in kept], [rows[p] for p in kept]


def _batched(plan: MergePlan, kind: str, inputs: list, column: str = "", round_: Round | None = None) -> list:
    """Tasks of ``kind`` over ``inputs``, a few inputs per task (a task costs about 0.5 ms on Ray,
    reading a small file less): at least ~1M rows a task, never fewer than one input."""
    per_task = max(1, len(inputs) // 64)
    return [
        MergeTask(plan, kind, round_, column=column, inputs=tuple(inputs[k : k + per_task]))
        for k in range(0, len(inputs), per_task)
    ]


def _splitters(samples: list[list], partitions: int) -> tuple:
    """``partitions - 1`` values cutting the sampled values into ranges of about equal weight
    (each input's sample stands for its rows equally), distinct and rising; fewer when the column
    has fewer distinct values."""
    if partitions <= 1:
        return ()
    weighted = sorted((value, weight) for sample in samples if sample for value, weight in sample if value is not None)
    if not weighted:
        return ()
    total = sum(weight for _, weight in weighted)
    cuts: list[Any] = []
    seen, goal = 0.0, total / partitions
    for value, weight in weighted:
        seen += weight
        if seen >= goal * (len(cuts) + 1) and len(cuts) < partitions - 1 and (not cuts or value > cuts[-1]):
            cuts.append(value)
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


def _committed_rows(plan: MergePlan, path: str) -> int | None:
    """The rows of a merge output already written for this merge id, or None (none, or another's)."""
    storage = plan.store.storage
    if not storage.is_file(path):
        return None
    try:
        with storage.open_input(path) as handle:
            table = read_verified(handle)  # every page checked: a damaged part is written again
    except StoreError:
        return None
    found = decode_metadata(table.schema.metadata)
    expected = plan.store.provenance.final_metadata(plan.table)
    if posixpath.basename(path).startswith("dedup-"):  # round 1 of two: its own file
        expected = {**expected, "merge": plan.merge_id}
    if found != expected:
        return None
    return table.num_rows


# ------------------------------------------------------------------------------------ the workers


def _sample(plan: MergePlan, path: str, index: int | None, column: str) -> tuple[str, list]:
    """(the file's commit id, ``_SAMPLES`` evenly spaced values of ``column`` in it with the rows
    each stands for): the ranges' cut points come from these.  A shard's places are its index and
    row numbers, not a column of its file."""
    storage = plan.store.storage
    with storage.open_input(path) as handle:
        parquet = pq.ParquetFile(handle)
        commit = decode_metadata(parquet.schema_arrow.metadata).get("commit", "")
        rows = parquet.metadata.num_rows
        if not rows:
            return commit, []
        if column == ORDER_COLUMN and index is not None:
            values = pa.chunked_array([(np.int64(index) << _ROW_BITS) + np.arange(rows, dtype=np.int64)])
        else:
            values = parquet.read(columns=[column]).column(0)
    picked = np.linspace(0, len(values) - 1, num=min(_SAMPLES, len(values))).astype(np.int64)
    ordered = values.take(_sort_indices(pa.table({column: values}), [column])).take(pa.array(picked))
    return commit, [(value, len(values) / len(picked)) for value in ordered.to_pylist()]


def _read_input(plan: MergePlan, path: str, index: int | None, row_groups: list[int] | None = None) -> pa.Table:
    """An input's rows with their places: a shard file (its places made from ``index``) or a merge
    file (its places kept), every page verified."""
    if index is not None:
        table = plan.store.read_shard_file(path, plan.table).replace_schema_metadata(None)
        places = (np.int64(index) << _ROW_BITS) + np.arange(table.num_rows, dtype=np.int64)
        return table.append_column(ORDER_COLUMN, pa.array(places))
    storage = plan.store.storage
    with storage.open_input(path) as handle:
        table = read_verified(handle, _merge_schema(plan.spec), row_groups=row_groups, where=storage.uri(path))
    return table.replace_schema_metadata(None)


def _split(plan: MergePlan, round_: Round, name: str, path: str, index: int | None) -> list[int]:
    """Write input ``name``'s rows to ``split-R/<name>.parquet``, one row group per partition of
    the round (by ranges of its column), their places kept; returns the rows per partition."""
    target = plan.split_path(round_.number, name)
    kept = _split_rows(plan, target)
    if kept is not None:
        return kept
    table = _read_input(plan, path, index)
    partition = _partition_of(table.column(round_.column), round_.splitters)
    by_partition = np.argsort(partition, kind="stable")
    bounds = np.searchsorted(partition[by_partition], np.arange(round_.partitions + 1))
    table = table.take(pa.array(by_partition))
    counts = np.diff(bounds).tolist()
    schema = _merge_schema(plan.spec).with_metadata(plan.metadata(partition_rows=json.dumps(counts)))

    def write(local: str) -> None:
        with pq.ParquetWriter(local, schema, **_split_options(plan.spec)) as writer:
            for p in range(round_.partitions):
                part = table.slice(int(bounds[p]), int(counts[p]))
                writer.write_table(part.replace_schema_metadata(schema.metadata), row_group_size=max(1, len(part)))

    plan.store.storage.write_atomic(target, write)
    return counts


def _split_rows(plan: MergePlan, path: str) -> list[int] | None:
    """The rows per partition of a split file this merge already wrote, or None."""
    storage = plan.store.storage
    if not storage.is_file(path):
        return None
    try:
        with storage.open_input(path) as handle:
            footer = pq.ParquetFile(handle).metadata
    except Exception:  # unreadable: written again
        return None
    found = decode_metadata(footer.schema.to_arrow_schema().metadata)
    if found.get("merge") != plan.merge_id or footer.num_row_groups != len(json.loads(found["partition_rows"])):
        return None
    return json.loads(found["partition_rows"])


def _partition_of(values: pa.ChunkedArray, splitters: tuple) -> np.ndarray:
    """Each value's range: how many splitters it reaches (a value equal to one goes above it)."""
    import pyarrow.compute as pc

    partition = np.zeros(len(values), dtype=np.int32)
    for cut in splitters:
        partition += pc.greater_equal(values, pa.scalar(cut, values.type)).to_numpy(zero_copy_only=False)
    return partition


def _merge_partition(plan: MergePlan, round_: Round, previous: Round | None, partition: int) -> int:
    """Partition ``partition`` of the round: its rows from every input (the row group each split
    file holds for it, or every input whole when the round has one partition), deduplicated and
    sorted, written as a final part or round 1's output; returns its rows."""
    spec = plan.spec
    if round_.partitions == 1:
        pieces = [_read_input(plan, path, index) for _, path, index in plan.inputs(round_, previous)]
    else:
        pieces = [
            _read_input(plan, plan.split_path(round_.number, name), None, row_groups=[partition])
            for name, _, _ in plan.inputs(round_, previous)
        ]
    table = pa.concat_tables(pieces) if pieces else _merge_schema(spec).empty_table()
    if round_.dedup:
        table = _first_per_key(table, list(spec.key), table_order(spec))
    if round_.final:
        table = table.take(_sort_indices(table, [*table_order(spec), ORDER_COLUMN]))
        table = table.drop_columns([ORDER_COLUMN])
    _write_output(plan, plan.output_path(round_, partition), table, final=round_.final)
    faults.after_merge_partition(partition)
    return table.num_rows


def _first_per_key(table: pa.Table, key: list[str], order: list[str]) -> pa.Table:
    """The first row of each key by (``order``, place): sorted by key, then the rest of ``order``,
    then place, the first of each run of equal keys."""
    by = [*key, *(c for c in order if c not in key), ORDER_COLUMN]
    ordered = table.take(_sort_indices(table, by))
    if not ordered.num_rows:
        return ordered
    first = np.zeros(ordered.num_rows, dtype=bool)
    first[0] = True
    for column in key:
        values = ordered.column(column)
        first[1:] |= _differs(values.slice(1), values.slice(0, len(values) - 1))
    return ordered.filter(pa.array(first))


def _differs(a: pa.ChunkedArray, b: pa.ChunkedArray) -> np.ndarray:
    import pyarrow.compute as pc

    return pc.fill_null(pc.not_equal(a, b), True).to_numpy(zero_copy_only=False) & ~(
        pc.and_(pc.is_null(a), pc.is_null(b)).to_numpy(zero_copy_only=False)
    )


def _sort_indices(table: pa.Table, columns: list[str]) -> pa.Array:
    import pyarrow.compute as pc

    return pc.sort_indices(table, [(column, "ascending") for column in columns])


def _write_output(plan: MergePlan, path: str, table: pa.Table, final: bool) -> None:
    """A partition's output: a final part records the table's provenance alone, as every final
    table does (the same bytes whatever run wrote it: its folder names the merge); round 1's output
    keeps the places and records the merge id."""
    spec = plan.spec
    if final:
        schema = table_schema(spec).with_metadata(encode_metadata(plan.store.provenance.final_metadata(plan.table)))
    else:
        schema = _merge_schema(spec).with_metadata(plan.metadata())
    table = table.replace_schema_metadata(schema.metadata)

    def write(local: str) -> None:
        pq.write_table(table, local, row_group_size=ROW_GROUP_ROWS, **parquet_options(spec))

    plan.store.storage.write_atomic(path, write)


def _merge_schema(spec: TableSpec) -> pa.Schema:
    return table_schema(spec).append(pa.field(ORDER_COLUMN, pa.int64()))


def _split_options(spec: TableSpec) -> dict[str, Any]:
    """Split files are read once, by the next step: lz4, like shard files."""
    return {**parquet_options(spec, compression="lz4"), "use_dictionary": False}
