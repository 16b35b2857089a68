"""The contract between a job and the pipeline.

A job says *what* to compute: its parameters, how the work splits into shards, how to run one
shard, which tables come out and how shard outputs combine.  The pipeline owns *how*: Ray, retries,
atomic Parquet, reuse of committed shards, merging, deduplication and progress.

Shard outputs are plain data: ``{table_name: {column_name: list_or_ndarray}}``.  Nothing here knows
about any puzzle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

__all__ = ["Column", "TableSpec", "Shard", "Job", "ShardOutput", "ShardResult", "PlanContext", "TaskMap",
           "COLUMN_TYPES", "StreamedTable"]

# Column types a table may declare; store.py maps each onto an Arrow type.
COLUMN_TYPES = ("int64", "float64", "bool", "string", "list<int64>")

# {table name: {column name: the column's values}}: a list, a numpy array or an Arrow array each.
ShardOutput = dict[str, dict[str, Any]]
# ``task_map(fn, items)`` returns ``[fn(item) for item in items]``, each call a Ray task.
TaskMap = Callable[[Callable, list], list]


@dataclass(frozen=True)
class PlanContext:
    """What the pipeline tells a job's ``plan`` about the run.

    cpus:      the CPUs the run will have (None when unknown, as with --serial): a job may cut its
               work finer for a bigger cluster.
    task_map:  a parallel map for work of the plan's own (counting the lines of a large input), or
               None: plan in this process.
    map_ready: whether ``task_map`` runs at once (Ray is connected); False when its first call must
               start Ray first (seconds), which only a large piece of work wins back.
    """

    cpus: int | None = None
    task_map: TaskMap | None = None
    map_ready: bool = True


@dataclass
class ShardResult:
    """What ``Job.run_shard`` returns: the shard's tables, and what the pipeline records beside them.

    tables:            ``{table: {column: values}}`` for every table the shard writes.
    stats:             counts the worker measured (``{"records": 25000}``), recorded with the shard's
                       files and summed over all shards for ``Job.check_totals``.
    input_fingerprint: the checksum of the input bytes the shard read (``Job.input_fingerprint``'s
                       value), or None: the pipeline then computes it when the job reads input.
    retry:             records whose outcome depended on the run (a timeout): a rerun recomputes
                       only them, through ``Job.retry_shard``.
    """

    tables: ShardOutput
    stats: dict[str, int] = field(default_factory=dict)
    input_fingerprint: str | None = None
    retry: list = field(default_factory=list)


@dataclass(frozen=True)
class Column:
    """One column of a table.  ``distinct``: nearly every row has its own value (ids, line numbers,
    keys), so the Parquet files store it plainly, without a dictionary that would only cost time and
    space (docs/design.md, "Columns without a Parquet dictionary")."""

    name: str
    type: str  # one of COLUMN_TYPES
    distinct: bool = False

    def __post_init__(self) -> None:
        if self.type not in COLUMN_TYPES:
            raise ValueError(f"column {self.name!r}: type must be one of {COLUMN_TYPES}, not {self.type!r}")


@dataclass(frozen=True)
class TableSpec:
    """One output table.

    key:       columns whose values identify a row; the merge keeps the first row per key (after
               sorting by ``sort``) and drops the rest.  Empty means no deduplication.
    sort:      the final row order (deterministic whatever order shards finished in).
    partition: an int64 column the rows are grouped by: shards write one row group per value, the
               finish merges one value at a time, and the final table's rows are in (partition,
               sort) order, the column kept in the files (no hive folders, whose inferred types
               differ from reader to reader), so readers skip other values by row-group statistics.
    """

    name: str
    columns: tuple[Column, ...]
    key: tuple[str, ...] = ()
    sort: tuple[str, ...] = ()
    partition: str | None = None

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        for col in (*self.key, *self.sort, *([self.partition] if self.partition else [])):
            if col not in names:
                raise ValueError(f"table {self.name!r}: {col!r} is not one of its columns {names}")

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


@dataclass(frozen=True)
class Shard:
    """A small, JSON-serialisable description of one piece of work (never the data itself).

    id:   deterministic and filesystem-safe; the shard's committed files are named after it.
    spec: whatever the job needs to run the piece (a search-tree slice, a byte range of a file).
    """

    id: str
    spec: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StreamedTable:
    """A final table written straight from the shard files: its row count and where it is."""

    rows: int
    path: str = ""

    def __len__(self) -> int:
        return self.rows


class Job:
    """Base class for a job.  Subclasses set ``name``, ``version`` and ``tables`` and implement
    ``params``, ``plan`` and ``run_shard``; ``finalize`` and ``summary`` are optional.

    A job object is pickled to Ray workers, so keep it small: parameters, not data.
    """

    name: str = ""
    version: str = "0"  # bump when a change alters results, so committed shards are not reused
    tables: tuple[TableSpec, ...] = ()
    # Packages whose every source file is hashed, with the numba, numpy and pyarrow versions, into
    # the code version recorded with every shard (pipeline/codeversion.py): a change to any of them
    # invalidates committed shards.  Default: the job module's top-level package and pipeline.
    code_packages: tuple[str, ...] = ()
    # Tables written straight from the shard files, one shard at a time in plan order, so the driver
    # never holds all their rows: each shard's rows come in ``sort`` order, shards follow one
    # another in that order, and ``key`` (int64 or string columns) rises strictly, which the writer checks.
    # ``finalize`` does not see them; ``check_totals`` and ``summary`` get a ``StreamedTable``.
    streamed_tables: tuple[str, ...] = ()
    # Tables every shard writes (and the merge reads); default: all declared tables.  Tables that
    # only finalize produces are declared too, so that they are written with their types.
    shard_tables: tuple[str, ...] = ()
    # Seconds of work between saves of a running shard's state (pipeline/checkpoint.py), or None.
    # A job that sets it has a ``run_shard(shard, checkpoint=...)``: the successor of a killed
    # attempt continues from the last save.  Not a parameter: it never changes the results.
    checkpoint_interval: float | None = None
    # True: ``run_shard`` takes a ``tasks`` keyword (pipeline/tasks.py), to run pieces of a shard as
    # tasks of their own while it runs (nested Ray tasks on Ray, at once in this process without).
    nested_tasks: bool = False

    def params(self) -> dict[str, Any]:
        """JSON-serialisable parameters that determine the results (recorded as provenance)."""
        raise NotImplementedError

    def plan(self, context: PlanContext) -> list[Shard]:
        """The shards, in a deterministic order."""
        raise NotImplementedError

    def run_shard(self, shard: Shard) -> ShardResult:
        """Compute one shard.  Runs in a Ray worker, or in the driver's own threads."""
        raise NotImplementedError

    def shard_label(self, shard: Shard) -> str:
        """How an operator sees the shard's task (Ray's Dashboard, ``ray list tasks``), after the
        job's name: its id, and what it covers when that helps."""
        return shard.id

    def inputs(self) -> tuple[Any, ...]:
        """The input files the shards read (``pipeline.storage.Storage`` each); empty when none.
        Committed shards of a job with inputs are reused only while ``input_fingerprint`` still
        matches, and on a cluster every node must see the local ones."""
        return ()

    def finalize(self, tables: dict[str, Any], out: Any) -> dict[str, Any]:
        """Turn merged, deduplicated tables (pandas DataFrames) into the published ones.

        Runs once on the driver.  May aggregate (sum per-shard partial counts) or add tables;
        ``out`` is the job folder's ``pipeline.storage.Storage``.  Returns the tables to write;
        default: unchanged.  Files beside the tables come from ``side_files``.
        """
        return tables

    def side_files(self, tables: dict[str, Any], out: Any) -> dict[str, str]:
        """Text files published beside the tables (a Markdown rendering), by name in the job
        folder, from the tables ``finalize`` returned; ``out`` is the job folder's Storage (to name
        it, not to write to).  They are staged and committed with the tables: a run that stops
        before its commit leaves the former ones.  Default: none."""
        return {}

    def input_fingerprint(self, shard: Shard) -> str | None:
        """A checksum of the input the shard reads, or None when the shard reads no input file.
        Recorded with the shard; a committed shard is reused only while it still matches, and the
        check runs where the shard would run (the driver never reads the whole input).  A run_shard
        that returns the checksum of what it read (``ShardResult.input_fingerprint``) saves the
        pipeline from calling this after it."""
        return None

    def retry_shard(self, shard: Shard, previous: dict[str, Any], retry: list) -> ShardResult:
        """A committed shard's outputs with only some records computed again.  A shard asks for
        this through ``ShardResult.retry`` (records whose outcome depended on the run, such as a
        timeout); a rerun then calls this with its committed tables (pyarrow) instead of
        ``run_shard``."""
        return self.run_shard(shard)

    def check_totals(self, tables: dict[str, Any], totals: dict[str, int]) -> None:
        """Check the merged tables against the stats every shard recorded, summed (``totals``);
        raise PipelineError when they disagree.  Runs before any final table is written."""

    def summary(self, tables: dict[str, Any], totals: dict[str, int]) -> str:
        """One or a few human lines describing the final tables (``totals``: as for ``check_totals``)."""
        return ", ".join(f"{name}: {len(df)} rows" for name, df in tables.items())

    def table_spec(self, name: str) -> TableSpec:
        for spec in self.tables:
            if spec.name == name:
                return spec
        raise KeyError(f"job {self.name!r} has no table {name!r}")
