"""Jobs over a batch of records in JSONL or Parquet files: the part every such job shares.

A record batch job has one shard per slice of an input file, two tables (``answers`` for records it
could answer, ``errors`` for the rest, both keyed and ordered by the record's identity: its file and
its line or row) and the accounting rule read = answered + rejected.  Subclasses say which payload field records carry,
which limits apply, how the answers table looks and how a shard is run.
"""

from __future__ import annotations

import functools
import os
from typing import Any

from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.inputs import accounting_summary, plan_slices, resolve_inputs, slice_fingerprint, slice_identity
from batchenum.pipeline.inputs.dataset import input_values
from batchenum.pipeline.inputs.plan import MAX_SLICE_BYTES, SLICES_PER_CPU, SliceSize
from batchenum.pipeline.job import Column, Job, PlanContext, Shard, TableSpec
from batchenum.pipeline.params import INPUTS, Param
from batchenum.pipeline.parquet_format import TAKEOVER_ROWS
from batchenum.pipeline.storage import Storage, is_uri, redact

__all__ = ["BatchInputJob", "rejection_lines", "ERRORS_TABLE", "RECORD_KEY", "FILE_COLUMN", "LINE_COLUMN"]

# A record's identity, the key and order of both tables: its file (files are planned in sorted path
# order, so the key rises from shard to shard) and its line (JSONL) or row (Parquet) in that file.
RECORD_KEY = ("file", "line")
FILE_COLUMN = Column("file", "string")  # the input file (path or URI); few values, so dictionary-encoded
LINE_COLUMN = Column("line", "int64", distinct=True)  # the record's line (JSONL) or row (Parquet), 1-based

ERRORS_TABLE = TableSpec(
    "errors",
    columns=(
        Column("id", "string", distinct=True),  # the record's id, or "line N" / "row N" when it has none
        Column("error", "string", distinct=True),  # a plain reason, starting with the record's position
        FILE_COLUMN,
        LINE_COLUMN,
    ),
    key=RECORD_KEY,
    sort=RECORD_KEY,
)


class BatchInputJob(Job):
    """Base of jobs that answer every record of a batch of input files.

    input:             a file, a folder, a glob, or a list of them (``pipeline.inputs.dataset``),
                       local paths or URIs (``s3://bucket/parts/``): JSONL (one object per line with
                       ``id`` and the payload field; plain, ``.gz`` or ``.zst``) or Parquet, one
                       format for all.  Resolved to files (``files``) on first use, in the driver
                       (checking that the cluster sees them, or planning), and carried to workers.
    records_per_shard: input lines (or rows) per shard, at least 1; None (the default): chosen
                       from the batch and the run's CPUs (``SliceSize``), at least ``least_per_shard``.
    """

    field: str = ""  # the payload field every record carries ("grid", "doors")
    streamed_tables = ("answers", "errors")  # in input order already: never all in driver memory

    least_per_shard = 1  # the fewest records an automatic shard holds (enough work for a task)

    # Recorded with every declared parameter of the job (params()): the input values (one string, or
    # a sorted list) and the slicing.  A shard is its slice's place in its file (slice_identity) and
    # records a checksum of the bytes it read (input_fingerprint), so a changed file is never taken
    # for the one already processed, and only the shards whose bytes changed are computed again.
    input: Param[Any] = Param(
        INPUTS,
        metavar="PATH",
        recorded_as=lambda job, _: job.input_param,
        help=(
            'the batch: JSONL files (one {{"id", "{job.field}"}} object per line; plain, .jsonl.gz or .jsonl.zst) '
            "or Parquet files (columns id, {job.field}); each PATH a file, a folder, or a glob in quotes "
            "('parts/*.jsonl', '**' spans folders), on a disk or a URI (s3://bucket/parts/); several PATHs, or "
            "--input again, add files"
        ),
    )
    records_per_shard: Param[int | None] = Param(
        int,
        default=None,
        low=1,
        metavar="N",
        recorded_as=lambda _, value: value or "auto",
        help=(
            f"input lines or rows per shard (default: from the batch, {SLICES_PER_CPU} to {2 * SLICES_PER_CPU} shards "
            "per CPU of the run, "
            f"at least {{job.least_per_shard:,}} records and at most about {MAX_SLICE_BYTES >> 20} MB of input each; "
            f"shards of {TAKEOVER_ROWS:,} rows or more become the table's files as they are)"
        ),
    )

    def __init__(self, *args: Any, **params: Any):
        super().__init__(*args, **params)
        self.input_values = input_values(self.input)
        shown = sorted(
            value.display_root if isinstance(value, Storage) else _shown(value) for value in self.input_values
        )
        self.input_param = shown[0] if len(shown) == 1 else shown  # as params record it

    @functools.cached_property
    def files(self) -> tuple[Storage, ...]:
        """The input files, in sorted path order (pickled to workers with what reaches them)."""
        return tuple(resolve_inputs(self.input_values))

    @functools.cached_property
    def _by_path(self) -> dict[str, Storage]:
        return {source.display_root: source for source in self.files}

    def shard_label(self, shard: Shard) -> str:
        """``s00003 lines 75001-100000`` (JSONL; the last slice ``lines 975001-end``) or
        ``s00003 rows 1-25000`` (Parquet); with several files, the shard's file name follows the id
        (``f0002-s00000 part-2.jsonl lines 1-25000``)."""
        spec = shard.spec
        name = shard.id if len(self.files) == 1 else f"{shard.id} {spec['path'].rsplit('/', 1)[-1]}"
        if "first_line" in spec:
            last = spec["first_line"] + spec["lines"] - 1 if spec["lines"] else "end"
            return f"{name} lines {spec['first_line']}-{last}"
        return f"{name} rows {spec['start_row'] + 1}-{spec['end_row']}"

    def inputs(self) -> tuple:
        return self.files

    def source(self, shard: Shard) -> Storage:
        """The Storage of the file a shard reads (it carries object-store credentials to workers)."""
        return self._by_path[shard.spec["path"]]

    def input_fingerprint(self, shard: Shard) -> str:
        """A checksum of the bytes the shard reads from its file (computed where the shard runs).
        A shard's ``run_shard`` records the same checksum from the bytes it read (``load_slice``), so
        this reads the input only to check a committed shard."""
        return slice_fingerprint(dict(shard.spec), self.source(shard))

    def plan(self, context: PlanContext) -> list[Shard]:
        """One shard per slice of ``records_per_shard`` lines or rows of a file (without it, as many
        as ``SliceSize`` picks for the batch and the context's CPUs, or this machine's).  Ids are
        ``s00000``, ``s00001``... for one file and ``f0000-s00000``... for several (the file's place
        in sorted path order, then the slice's in the file), so that a file's shards keep their ids
        when another file changes.  Large JSONL inputs have their lines counted by the context's
        task map."""
        size = self.records_per_shard or SliceSize(self.least_per_shard, context.cpus or os.cpu_count() or 1)
        slices = plan_slices(list(self.files), self.field, size, context)
        width = max(4, len(str(len(self.files) - 1)))
        place = {source.display_root: k for k, source in enumerate(self.files)}
        shards: list[Shard] = []
        counts: dict[str, int] = {}
        for spec in slices:
            k = counts[spec["path"]] = counts.get(spec["path"], -1) + 1
            prefix = "" if len(self.files) == 1 else f"f{place[spec['path']]:0{width}d}-"
            shards.append(Shard(id=f"{prefix}s{k:05d}", spec=spec, identity=slice_identity(spec)))
        return shards

    def check_totals(self, tables: dict[str, Any], totals: dict[str, int]) -> None:
        """Every record the workers read (``records`` summed over shards) is in exactly one table."""
        read, answered, rejected = totals.get("records", 0), len(tables["answers"]), len(tables["errors"])
        if read != answered + rejected:
            raise PipelineError(
                f"{self.name}: the workers read {read} records but the tables hold {answered} answers "
                f"and {rejected} errors; no table was written (a bug: please report it)"
            )

    def summary(self, tables: dict[str, Any], totals: dict[str, int]) -> str:
        """``NAME: read N, answered A, rejected R`` (N = A + R, checked by ``check_totals``)."""
        return accounting_summary(self.name, len(tables["answers"]), len(tables["errors"]))


SHOWN_REJECTIONS = 3  # rejected records the command line names after a batch's summary


def rejection_lines(job: str, errors_path: str, rejected: int, shown: int = SHOWN_REJECTIONS) -> list[str]:
    """What a person reads after ``read N, answered A, rejected R``: the first ``shown`` reasons,
    each with its file (the reason starts with its line), then how to read them all.  Nothing when
    no record was rejected, or the errors table cannot be read back."""
    if not rejected:
        return []
    import pyarrow.dataset as ds

    try:
        first = ds.dataset(errors_path, format="parquet").head(shown, columns=["file", "error"]).to_pylist()
    except (OSError, ValueError):  # (pyarrow's errors are both) the summary stands without them
        return []
    if rejected > len(first):
        which = f"the first {len(first)} of {rejected:,} rejected records"
    else:
        which = "the rejected record" if rejected == 1 else f"the {rejected} rejected records"
    lines = [f"{job}: {which}:"]
    lines += [f"  {row['file']}: {row['error']}" for row in first]
    reading = f"pd.read_parquet({errors_path!r})[['file', 'line', 'error']].to_string()"
    lines.append(f'  every one, with its id: python -c "import pandas as pd; print({reading})"')
    return lines


def _shown(value: str) -> str:
    """An input value as params record it: a local path made absolute, a URI without credentials."""
    return redact(value).rstrip("/") if is_uri(value) else os.path.abspath(os.path.expanduser(value))
