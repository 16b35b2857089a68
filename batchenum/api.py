"""``batchenum.run``: one function for every job, one result type for every job."""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import io
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from batchenum.jobs import REGISTRY
from batchenum.pipeline.errors import UsageError
from batchenum.pipeline.execute import run_job
from batchenum.pipeline.frames import INPUTS_DIR, frame_row_group
from batchenum.pipeline.job import Job
from batchenum.pipeline.params import INPUTS
from batchenum.pipeline.progress import Progress
from batchenum.pipeline.run_options import PYTHON, RunOptions, run_params
from batchenum.pipeline.storage import Storage

__all__ = ["run", "Result", "Table", "job_names"]


@dataclass(frozen=True)
class Table:
    """One table a run wrote: where it is, how many rows it has, and how to read it.

    path:      a Parquet file, or a folder of parts (``answers/part-00000.parquet``...), as a local
               path or a URI.
    rows:      its row count.
    partition: the int64 column whose values group the rows (the catalogue's ``n``), or None.
    """

    name: str
    path: str
    rows: int
    partition: str | None = None

    def to_arrow(self):
        """The table as a ``pyarrow.Table``, page checksums verified."""
        import pyarrow.dataset as ds

        storage = Storage.at(self.path)
        scan = ds.ParquetFileFormat(
            default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True)
        )
        return ds.dataset(storage.root, filesystem=storage.fs, format=scan).to_table()

    def to_pandas(self):
        """The table as a pandas DataFrame (``to_arrow().to_pandas()``)."""
        return self.to_arrow().to_pandas()


@dataclass(frozen=True)
class Result:
    """What a run did and wrote.

    tables:     every table it wrote, by name.
    location:   the job folder (``OUT/JOB``), as a path or URI.
    shards:     shards planned; ``reused``: of those, committed by an earlier run and kept;
                ``recomputed``: ids of those recomputed (damaged, stale, or made with other parameters).
    totals:     counts the shards recorded, summed (``records`` read; ``timeouts`` for nonary).
    summary:    the job's one-line summary, as the CLI prints it.
    """

    job: str
    location: str
    tables: dict[str, Table]
    shards: int
    reused: int
    recomputed: list[str] = field(default_factory=list)
    seconds: float = 0.0
    totals: dict[str, int] = field(default_factory=dict)
    summary: str = ""


def job_names() -> list[str]:
    """The jobs ``run`` knows by name: this package's and installed packages' (entry-point group
    ``batchenum.jobs``), in the registry's order."""
    return REGISTRY.names()


def run(job: str | type[Job] | Job, **keywords: Any) -> Result:
    """Run ``job`` and return its ``Result``.

    job:      a name from ``job_names()``, ``"MODULE:CLASS"`` or ``"path/to/file.py:CLASS"``, a job
              class (defined anywhere: a script, a notebook cell, a module), or a job object.
    params:   the job's own parameters, as declared on its class (the CLI's options with
              underscores: ``batchenum run JOB --help`` lists them), checked by the declaration as
              the CLI checks them.
              A record batch's ``input`` is a file, a folder or a glob (local or a URI such as ``s3://b/parts/``),
              a list of them (their files make one batch, in sorted path order), or a pandas
              DataFrame or Arrow table with the columns ``id`` and the payload (``grid``,
              ``doors``), which is first written to ``OUT/_inputs/`` as Parquet, named by its
              content (so a rerun reuses its shards).
    options:  the run's own, as the CLI's options of the same names, declared once in
              ``pipeline/run_options.py``: ``out``, ``workers``, ``address``, ``serial``,
              ``head_start`` (``head_start=False`` is ``--no-head-start``), ``retries``,
              ``storage_timeout``, ``overwrite`` (replaces the job's tables that a run with other
              input or parameters left in ``out``: a new DataFrame into the same ``out``, say) and
              ``quiet`` (True by default here: no progress; progress goes to the ``batchenum``
              logger otherwise).

    >>> import batchenum
    >>> batchenum.run("palago", max_n=99)
    Traceback (most recent call last):
    ...
    batchenum.pipeline.params.ParamError: max_n must be between 1 and 40, not 99
    >>> batchenum.run("sudoku")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    batchenum.pipeline.errors.UsageError: no job 'sudoku': the jobs are ... (or give MODULE:CLASS or path/to/file.py:CLASS)
    """
    options = RunOptions.given({name: keywords.pop(name) for name in run_params(PYTHON) if name in keywords}, PYTHON)
    instance = _job(job, keywords, options.out)
    with _environment_kept():
        done = run_job(instance, options, Progress(instance.name, quiet=options.quiet))
    tables = {
        name: Table(name, done.paths[name], len(table), instance.table_spec(name).partition)
        for name, table in done.tables.items()
    }
    return Result(
        instance.name,
        done.location,
        tables,
        done.shards,
        done.reused,
        list(done.recomputed),
        done.seconds,
        done.totals,
        instance.summary(done.tables, done.totals),
    )


# help(batchenum.run) and notebooks' completion show the run's options with their defaults
run.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [inspect.Parameter("job", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    + [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=param.default)
        for name, param in run_params(PYTHON).items()
    ]
    + [inspect.Parameter("params", inspect.Parameter.VAR_KEYWORD)]
)


@contextlib.contextmanager
def _environment_kept() -> Iterator[None]:
    """A run sets what a private Ray needs (RAY_AUTH_MODE, a fresh RAY_AUTH_TOKEN...) in this
    process's environment, for the processes it starts; a notebook's environment is put back as it
    was afterwards."""
    before = dict(os.environ)
    try:
        yield
    finally:
        for name in set(os.environ) - set(before):
            del os.environ[name]
        for name, value in before.items():
            if os.environ.get(name) != value:
                os.environ[name] = value


def _job(job: str | type[Job] | Job, params: dict[str, Any], out: str) -> Job:
    """The job object: as given, or made by its class from ``params`` (a DataFrame or Arrow table
    given as a record batch's input first written to ``OUT/_inputs/``)."""
    if isinstance(job, Job):
        if params:
            raise UsageError(f"parameters {sorted(params)} go to the job's constructor, not to run()")
        return job
    job_class = job if isinstance(job, type) else REGISTRY.job_class(job)
    if not issubclass(job_class, Job):
        raise UsageError(f"{job_class.__qualname__} is not a job class (a subclass of batchenum.pipeline.job.Job)")
    for name, param in job_class.declared_params().items():
        if param.type is INPUTS and name in params and not isinstance(params[name], (str, os.PathLike, list, tuple)):
            slicing = _frame_slicing(job_class, params)
            params = {**params, name: _input_location(params[name], getattr(job_class, "field", ""), out, slicing)}
    return job_class.create(**params)


def _frame_slicing(job_class: type[Job], params: dict[str, Any]) -> tuple[int, bool]:
    """(rows, fixed) the job cuts a frame's slices in: ``records_per_shard`` when given (fixed),
    else its least automatic size, of which every automatic size is a power-of-two multiple."""
    given = params.get("records_per_shard")
    if isinstance(given, int) and not isinstance(given, bool) and given >= 1:
        return given, True
    return int(getattr(job_class, "least_per_shard", 1)), False


def _input_location(data: Any, field: str, out: str, slicing: tuple[int, bool] = (1, False)) -> str:
    """A pandas DataFrame or Arrow table written once, as Parquet, to ``OUT/_inputs/<sha256 of its bytes>.parquet`` (beside the job
    folders, so that every node of a cluster that sees ``out`` sees it too), in row groups of the
    rows its slices are cut in (``frames.frame_row_group``), so that a rerun with some rows changed
    recomputes only their slices."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not isinstance(data, pa.Table):
        if not hasattr(data, "columns"):
            raise UsageError(
                f"input must be a path, a URI, a list of them, a pandas DataFrame or an Arrow table, not "
                f"{type(data).__name__}"
            )
        try:
            data = pa.Table.from_pandas(data, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError) as error:
            raise UsageError(_malformed_column(data, error)) from None
    missing = {"id", field} - set(data.column_names)
    if missing:
        raise UsageError(f"input has no column {', '.join(sorted(missing))}: it needs 'id' and '{field}'")
    data = data.select(["id", field]).replace_schema_metadata(None)
    rows, fixed = slicing
    group = frame_row_group(rows, fixed, data.nbytes / max(1, data.num_rows))
    buffer = io.BytesIO()
    pq.write_table(data, buffer, row_group_size=group)
    content = buffer.getvalue()
    storage = Storage.at(out)
    path = storage.join(INPUTS_DIR, f"{hashlib.sha256(content).hexdigest()[:32]}.parquet")
    if not storage.is_file(path):
        storage.write_atomic(path, lambda local: _write_bytes(local, content))
    return storage.uri(path)


def _malformed_column(frame: Any, error: Exception) -> str:
    """Which column of a DataFrame Arrow could not convert, and its first row whose kind of value
    differs from the first row's (a string among lists, say)."""
    for name in frame.columns:
        values = list(frame[name])
        kinds = [type(value) for value in values]
        for row, kind in enumerate(kinds):
            if kind is not kinds[0]:
                return (
                    f"input column {name!r} mixes kinds of values: row {row} holds {values[row]!r} "
                    f"({kind.__name__}) where row 0 holds a {kinds[0].__name__}; give every row the same kind"
                )
    return f"input cannot be converted to an Arrow table: {error}"


def _write_bytes(path: str, content: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(content)
