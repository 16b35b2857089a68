"""``batchenum.run``: one function for every job, one result type for every job."""

from __future__ import annotations

import hashlib
import inspect
import io
import os
from dataclasses import dataclass, field
from typing import Any, Callable

from batchenum.pipeline.errors import UsageError
from batchenum.pipeline.execute import RunOptions, run_job
from batchenum.pipeline.job import Job
from batchenum.pipeline.progress import Progress
from batchenum.pipeline.runner import TASK_MAX_RETRIES
from batchenum.pipeline.storage import STORAGE_TIMEOUT, Storage

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
        scan = ds.ParquetFileFormat(default_fragment_scan_options=ds.ParquetFragmentScanOptions(
            page_checksum_verification=True))
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


def _palago(max_n: int = 24, catalogue_max_n: int = 0, shards: int | None = None, method: str = "direct",
            checkpoint_interval: float | None = None, force: bool = False) -> Job:
    from batchenum.jobs.palago import palago_job

    return palago_job(max_n, catalogue_max_n, shards, method, checkpoint_interval, force)


def _dungeons(input: Any, records_per_shard: int | None = None, max_cells: int | None = None, *,
              out: str) -> Job:
    from batchenum.jobs.dungeons import MAX_CELLS, DungeonJob

    return DungeonJob(_input_location(input, "grid", out), records_per_shard,
                      max_cells or MAX_CELLS)


def _nonary(input: Any, records_per_shard: int | None = None, max_doors: int | None = None,
            record_timeout: float | None = None, *, out: str) -> Job:
    from batchenum.jobs.nonary import MAX_DOORS, RECORD_TIMEOUT, NonaryJob

    return NonaryJob(_input_location(input, "doors", out), records_per_shard,
                     max_doors or MAX_DOORS, record_timeout or RECORD_TIMEOUT)


# job name -> (builder from keyword parameters, whether it reads a batch and so needs ``out``)
_JOBS: dict[str, tuple[Callable[..., Job], bool]] = {"palago": (_palago, False), "dungeons": (_dungeons, True),
                                                     "nonary": (_nonary, True)}


def job_names() -> list[str]:
    """The jobs ``run`` knows: ``['palago', 'dungeons', 'nonary']``."""
    return list(_JOBS)


def run(job: str | Job, *, out: str = "results", workers: int | None = None, address: str | None = None,
        serial: bool = False, overwrite: bool = False, retries: int = TASK_MAX_RETRIES, quiet: bool = True,
        storage_timeout: float = STORAGE_TIMEOUT, **params: Any) -> Result:
    """Run ``job`` (a name from ``job_names()``, or a ``pipeline.job.Job``) and return its ``Result``.

    params:   the job's own parameters, as the CLI's options with underscores: palago ``max_n``,
              ``catalogue_max_n``, ``shards``, ``method``, ``checkpoint_interval``; dungeons ``input``,
              ``records_per_shard``, ``max_cells``; nonary ``input``, ``records_per_shard``, ``max_doors``,
              ``record_timeout``.
              ``input`` is a file, a folder or a glob (local or a URI such as ``s3://b/parts/``),
              a list of them (their files make one batch, in sorted path order), or a pandas
              DataFrame or Arrow table with the columns ``id`` and the payload (``grid``,
              ``doors``), which is first written to ``OUT/_inputs/`` as Parquet, named by its
              content (so a rerun reuses its shards).
    out, workers, address, serial, overwrite, retries, storage_timeout: as the CLI's options of the
              same names.
    quiet:    no progress (progress goes to the ``batchenum`` logger otherwise).

    >>> import batchenum
    >>> batchenum.run("palago", max_n=99)
    Traceback (most recent call last):
    ...
    batchenum.pipeline.errors.UsageError: --max-n must be between 1 and 40, not 99
    >>> batchenum.run("sudoku")
    Traceback (most recent call last):
    ...
    batchenum.pipeline.errors.UsageError: no job 'sudoku': the jobs are palago, dungeons, nonary
    """
    instance = _job(job, params, out)
    options = RunOptions(out_dir=out, workers=workers, address=address, serial=serial, overwrite=overwrite,
                         retries=retries, storage_timeout=storage_timeout)
    done = run_job(instance, options, Progress(instance.name, quiet=quiet))
    tables = {name: Table(name, done.paths[name], len(table), instance.table_spec(name).partition)
              for name, table in done.tables.items()}
    return Result(instance.name, done.location, tables, done.shards, done.reused, list(done.recomputed),
                  done.seconds, done.totals, instance.summary(done.tables, done.totals))


def _job(job: str | Job, params: dict[str, Any], out: str) -> Job:
    if isinstance(job, Job):
        if params:
            raise UsageError(f"parameters {sorted(params)} go to the job's constructor, not to run()")
        return job
    if job not in _JOBS:
        raise UsageError(f"no job {job!r}: the jobs are {', '.join(_JOBS)}")
    build, reads_batch = _JOBS[job]
    arguments = {**params, "out": out} if reads_batch else params
    try:
        inspect.signature(build).bind(**arguments)
    except TypeError as error:  # a parameter the job does not take, or one it needs
        raise UsageError(f"{job}: {error}") from None
    return build(**arguments)


def _input_location(data: Any, field: str, out: str) -> str | list[str]:
    """A path or URI as it is, a list or tuple of them as a list; a pandas DataFrame or Arrow table
    written once, as Parquet, to ``OUT/_inputs/<sha256 of its bytes>.parquet`` (beside the job
    folders, so that every node of a cluster that sees ``out`` sees it too)."""
    if isinstance(data, (str, os.PathLike)):
        return os.fspath(data)
    if isinstance(data, (list, tuple)):
        if not all(isinstance(value, (str, os.PathLike)) for value in data):
            raise UsageError("input must be a path, a URI, a pandas DataFrame or an Arrow table, or a list of "
                             "paths and URIs (files, folders, globs), not a list holding other things")
        return [os.fspath(value) for value in data]
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not isinstance(data, pa.Table):
        if not hasattr(data, "columns"):
            raise UsageError(f"input must be a path, a URI, a list of them, a pandas DataFrame or an Arrow table, not "
                             f"{type(data).__name__}")
        data = pa.Table.from_pandas(data, preserve_index=False)
    missing = {"id", field} - set(data.column_names)
    if missing:
        raise UsageError(f"input has no column {', '.join(sorted(missing))}: it needs 'id' and '{field}'")
    buffer = io.BytesIO()
    pq.write_table(data.select(["id", field]).replace_schema_metadata(None), buffer)
    content = buffer.getvalue()
    storage = Storage.at(out)
    path = storage.join("_inputs", f"{hashlib.sha256(content).hexdigest()[:32]}.parquet")
    if not storage.is_file(path):
        storage.write_atomic(path, lambda local: _write_bytes(local, content))
    return storage.uri(path)


def _write_bytes(path: str, content: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(content)
