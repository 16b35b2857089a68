"""The contract between a job and the pipeline.

A job says *what* to compute: its parameters, how the work splits into shards, how to run one
shard, which tables come out and how shard outputs combine.  The pipeline owns *how*: Ray, retries,
atomic Parquet, reuse of committed shards, merging, deduplication and progress.

Shard outputs are plain data: ``{table_name: {column_name: list_or_ndarray}}``.  Nothing here knows
about any puzzle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from batchenum.pipeline.names import check_file_name, check_job_class, check_plain_name, check_unique
from batchenum.pipeline.params import Param, declared_params, keep_for_fast_reads, recorded_params, resolve_params

if TYPE_CHECKING:  # both import this module
    from batchenum.pipeline.checkpoint import Checkpoint
    from batchenum.pipeline.tasks import ShardTasks

__all__ = [
    "Column",
    "TableSpec",
    "Shard",
    "Job",
    "ShardOutput",
    "ShardResult",
    "PlanContext",
    "ShardContext",
    "TaskMap",
    "COLUMN_TYPES",
    "StreamedTable",
    "Param",
]

# Column types a table may declare; parquet_format.py maps each onto an Arrow type.
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
class ShardContext:
    """What a running shard may use besides its spec: ``run_shard(shard, context)``.

    checkpoint: the shard's ``pipeline.checkpoint.Checkpoint``: ``load()`` the state a killed
                attempt saved (None when there is none), ``save(data, progress)`` now and then.
                Made on first use; a shard that used it has it removed once committed.
    tasks:      a ``pipeline.tasks.ShardTasks`` to run pieces of the shard as tasks of their own
                (nested Ray tasks on Ray; at once, here, without), made on first use.
    retry:      records a rerun asks to compute again (those a committed attempt listed in
                ``ShardResult.retry``), with ``previous``, the committed shard's tables (pyarrow):
                the shard recomputes only those and keeps the other rows.  Empty otherwise.
    """

    make_checkpoint: Callable[[], Checkpoint] | None = field(default=None, repr=False)
    make_tasks: Callable[[], ShardTasks] | None = field(default=None, repr=False)
    retry: list = field(default_factory=list)
    previous: dict[str, Any] = field(default_factory=dict)
    _made: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def checkpoint(self) -> Checkpoint:
        if "checkpoint" not in self._made:
            if self.make_checkpoint is None:
                raise RuntimeError(
                    "this shard runs without a checkpoint store (called by hand): give the "
                    "ShardContext a make_checkpoint"
                )
            self._made["checkpoint"] = self.make_checkpoint()
        return self._made["checkpoint"]

    @property
    def used_checkpoint(self) -> Checkpoint | None:
        """The checkpoint if the shard asked for it, else None."""
        return self._made.get("checkpoint")

    @property
    def tasks(self) -> ShardTasks:
        if "tasks" not in self._made:
            from batchenum.pipeline.tasks import InProcessTasks

            self._made["tasks"] = self.make_tasks() if self.make_tasks else InProcessTasks()
        return self._made["tasks"]


@dataclass
class ShardResult:
    """What ``Job.run_shard`` returns: the shard's tables, and what the pipeline records beside them.

    tables:            ``{table: {column: values}}`` for the tables the shard writes (any of
                       ``Job.shard_tables``; the store writes the others empty).
    stats:             counts the worker measured (``{"records": 25000}``), recorded with the shard's
                       files and summed over all shards for ``Job.check_totals``.
    input_fingerprint: the checksum of the input bytes the shard read (``Job.input_fingerprint``'s
                       value), or None: the pipeline then computes it when the job reads input.
    retry:             records whose outcome depended on the run (a timeout): a rerun recomputes
                       only them (``ShardContext.retry``).
    children:          shards this one hands back, the work it left undone (a search tree's
                       unexplored subtrees): the run computes them too, and a rerun finds them in
                       the shard's recorded stats, so that they need no plan of their own.
    """

    tables: ShardOutput
    stats: dict[str, int] = field(default_factory=dict)
    input_fingerprint: str | None = None
    retry: list = field(default_factory=list)
    children: list[Shard] = field(default_factory=list)


@dataclass(frozen=True)
class Column:
    """One column of a table.  ``distinct``: nearly every row has its own value (ids, line numbers,
    keys), so the Parquet files store it plainly, without a dictionary that would only cost time and
    space (docs/design.md, "Columns without a Parquet dictionary")."""

    name: str
    type: str  # one of COLUMN_TYPES
    distinct: bool = False

    def __post_init__(self) -> None:
        check_plain_name(self.name, "column")
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
        check_file_name(self.name, "table")  # its file or folder in the job folder
        names = [c.name for c in self.columns]
        check_unique(names, f"table {self.name!r}", "columns")
        for col in (*self.key, *self.sort, *([self.partition] if self.partition else [])):
            if col not in names:
                raise ValueError(f"table {self.name!r}: {col!r} is not one of its columns {names}")

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


@dataclass(frozen=True)
class Shard:
    """A small, JSON-serialisable description of one piece of work (never the data itself).

    id:       deterministic and filesystem-safe; the shard's committed files are named after it.
    spec:     whatever the job needs to run the piece (a search-tree slice, a byte range of a file).
    identity: what a committed shard must have been made for to be reused (None: the whole spec).
              A slice of an input names its place only (file and first line), not the file's size,
              time or byte range: its input checksum then decides whether its bytes changed.
    """

    id: str
    spec: Mapping[str, Any] = field(default_factory=dict)
    identity: Mapping[str, Any] | None = None

    @property
    def recorded_identity(self) -> Mapping[str, Any]:
        """The identity its files record: ``identity``, or the whole spec."""
        return self.spec if self.identity is None else self.identity


@dataclass(frozen=True)
class StreamedTable:
    """A final table written straight from the shard files: its row count and where it is."""

    rows: int
    path: str = ""

    def __len__(self) -> int:
        return self.rows


class Job:
    """Base class for a job.  Subclasses set ``name``, ``version`` and ``tables``, declare their
    parameters as ``Param`` fields and implement ``plan`` and ``run_shard``; the rest is optional.

    ``Job(*args, **params)`` takes the declared parameters (positionally in declaration order, or
    by name), checks them (``Param`` bounds and choices, then ``check_params``) and sets each as an
    attribute.  A job object is pickled to Ray workers, so keep it small: parameters, not data.
    """

    name: str = ""
    version: str = "0"  # bump when a change alters results, so committed shards are not reused
    tables: tuple[TableSpec, ...] = ()
    # Installed packages whose every source file is hashed, with the numba, numpy and pyarrow
    # versions, into the code version recorded with every shard (pipeline/codeversion.py).
    # Default: the job module's top-level package if installed, and pipeline.  Code that is not
    # installed (a script, a notebook cell, a module on sys.path) is hashed from its source anyway.
    code_packages: tuple[str, ...] = ()
    # Tables written straight from the shard files, one shard at a time in plan order, so the driver
    # never holds all their rows: each shard's rows come in ``sort`` order, shards follow one
    # another in that order, and ``key`` (int64 or string columns) rises strictly, which the writer checks.
    # ``finalize`` does not see them; ``check_totals`` and ``summary`` get a ``StreamedTable``.
    streamed_tables: tuple[str, ...] = ()
    # Tables shards write (and the merge reads); default: all declared tables.  Tables that only
    # finalize produces are declared too, so that they are written with their types.
    shard_tables: tuple[str, ...] = ()
    # Whether a shard may hand back shards of its own (``ShardResult.children``): a rerun then reads
    # each committed shard's recorded children to check them too (one more footer read a shard).
    hands_back: bool = False
    # Whether run_shard holds the GIL (pure Python): the head start then computes shards in forked
    # processes of the driver, not threads that would share one core (docs/design.md, the head start).
    holds_gil: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_job_class(cls)  # a bad name fails where it is declared (pipeline/names.py)
        keep_for_fast_reads(cls)
        if "params" in vars(cls):
            raise TypeError(
                f"job class {cls.__name__}: params() is derived from the declared parameters (every Param "
                "with recorded=True) and cannot be overridden; define extra_params() to add to it"
            )

    def __init__(self, *args: Any, **params: Any):
        for name, value in resolve_params(type(self), args, params, type(self).check_params).items():
            setattr(self, name, value)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled (a job reaches each Ray task so) attribute by attribute, as ``__init__`` sets
        them: pickle's own ``__dict__.update`` leaves the instance a plain dict, which Python 3.11
        reads ``self.n`` from more slowly (a tree job's walk of SAW n = 14: 3-5% more CPU)."""
        for name, value in state.items():
            setattr(self, name, value)

    @classmethod
    def create(cls, **params: Any) -> Job:
        """The job ``batchenum run NAME`` runs for these parameters: ``cls(**params)``, or another
        job class of the same name that the parameters choose (palago's ``method``)."""
        return cls(**params)

    @classmethod
    def check_params(cls, values: dict[str, Any]) -> None:
        """Rules between parameters, after each was checked on its own: raise
        ``pipeline.params.ParamError`` naming parameters as ``{name}``."""

    @classmethod
    def declared_params(cls) -> dict[str, Param]:
        return declared_params(cls)

    @classmethod
    def warm(cls, scratch: str) -> None:
        """Compile (or load from numba's cache) the kernels a shard calls, on a few tiny inputs;
        ``scratch``: a folder for input files.  ``batchenum warm`` calls this on every node."""

    @classmethod
    def commands(cls) -> list:
        """Other commands the job brings (``pipeline.cli.Command``: ``generate dungeons``...)."""
        return []

    def params(self) -> dict[str, Any]:
        """The parameters that determine the results, recorded as provenance in every file: every
        declared parameter with ``recorded=True``, then ``extra_params()``.  A committed shard is
        reused only while they match, so no job can leave a recorded parameter out."""
        declared = recorded_params(self)
        extra = self.extra_params()
        clash = sorted(set(declared) & set(extra))
        if clash:
            raise TypeError(
                f"job class {type(self).__name__}: extra_params() names declared parameters ({', '.join(clash)}), "
                "which params() records already"
            )
        return {**declared, **extra}

    def extra_params(self) -> dict[str, Any]:
        """What else determines the results besides the declared parameters (JSON-serialisable),
        added to ``params()``: a setting that is not a ``Param``.  Default: nothing."""
        return {}

    def plan(self, context: PlanContext) -> list[Shard]:
        """The shards, in a deterministic order."""
        raise NotImplementedError

    def splits_on_ray(self, shard: Shard) -> bool:
        """Whether ``shard`` is too large for one process and must fan out across tasks of its own
        (``ShardContext.tasks``), which only a Ray can give.  The driver's threads (the head start)
        would compute it whole, so a run with such a shard pending starts Ray at once and skips
        the head start (docs/design.md, the head start).  Default: no shard."""
        return False

    def shard_work(self, shard: Shard) -> float | None:
        """The shard's expected work, in a unit every shard of the plan shares (CPU seconds on some
        machine, say), or None (the default) when the shards are alike.  Only the run's estimate
        of the time left reads it: given for every shard, the estimate weighs the shards left by
        it, not by their count (a transfer-matrix height costs a thousand times the one five below)."""
        return None

    def run_shard(self, shard: Shard, context: ShardContext | None = None) -> ShardResult:
        """Compute one shard.  Runs in a Ray worker, or in the driver's own threads; ``context``
        carries what else it may use (checkpoint, nested tasks, records to retry).  The pipeline
        always gives one; None when the shard is computed by hand (a test, a warm-up), without a
        checkpoint store or tasks.  Every built-in job overrides it with this very signature."""
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
        """Turn merged, deduplicated tables into the published ones.

        Runs once on the driver.  Each table is a ``pipeline.lazy_table.LazyTable`` (``len``,
        ``column``, ``scan``; ``to_pandas`` for a small one), merged by partition so that no process
        holds it whole.  May aggregate (sum per-shard partial counts) or add tables; ``out`` is the
        job folder's ``pipeline.storage.Storage``.  Returns the tables to write: a LazyTable as it is
        (a folder of parts, no row read here), or a pandas DataFrame or a pyarrow Table (one file);
        default: unchanged.
        Files beside the tables come from ``side_files``.
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

    def check_totals(self, tables: dict[str, Any], totals: dict[str, int]) -> None:
        """Check the merged tables (``LazyTable``s, and ``StreamedTable``s) against the stats every
        shard recorded, summed (``totals``); raise PipelineError when they disagree.  Runs before any
        final table is written."""

    def summary(self, tables: dict[str, Any], totals: dict[str, int]) -> str:
        """One or a few human lines describing the final tables (``totals``: as for ``check_totals``)."""
        return ", ".join(f"{name}: {len(df)} rows" for name, df in tables.items())

    def table_spec(self, name: str) -> TableSpec:
        for spec in self.tables:
            if spec.name == name:
                return spec
        raise KeyError(f"job {self.name!r} has no table {name!r}")
