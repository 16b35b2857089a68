"""Jobs over a batch of records in one JSONL or Parquet file: the part every such job shares.

A record batch job has one shard per slice of the input, two tables (``answers`` for records it
could answer, ``errors`` for the rest, both keyed and ordered by the record's line) and the
accounting rule read = answered + rejected.  Subclasses say which payload field records carry,
which limits apply, how the answers table looks and how a shard is run.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from batchenum.pipeline.cli import positive_int
from batchenum.pipeline.inputs import accounting_summary, input_storage, plan_slices, slice_fingerprint
from batchenum.pipeline.errors import PipelineError, UsageError
from batchenum.pipeline.storage import is_uri
from batchenum.pipeline.job import Column, Job, PlanContext, Shard, TableSpec
from batchenum.pipeline.store import write_batch

__all__ = ["RecordBatchJob", "ERRORS_TABLE", "add_batch_arguments", "add_generate_arguments", "write_generated"]

ERRORS_TABLE = TableSpec(
    "errors",
    columns=(
        Column("id", "string", distinct=True),  # the record's id, or "line N" / "row N" when it has none
        Column("error", "string", distinct=True),  # a plain reason, starting with the record's position
        Column("line", "int64", distinct=True),  # the record's line (JSONL) or row (Parquet), 1-based
    ),
    key=("line",),
    sort=("line",),
)


class RecordBatchJob(Job):
    """Base of jobs that answer every record of ``input_path``.

    input_path:        JSONL (one object per line with ``id`` and the payload field) or Parquet; a
                       local path or a URI (``s3://bucket/batch.jsonl``).
    records_per_shard: input lines (or rows) per shard, at least 1.
    """

    field: str = ""  # the payload field every record carries ("grid", "doors")
    streamed_tables = ("answers", "errors")  # in input order already: never all in driver memory

    def __init__(self, input_path: str, records_per_shard: int):
        if records_per_shard < 1:
            raise ValueError(f"records_per_shard must be at least 1, not {records_per_shard}")
        self.input = input_storage(input_path)  # pickled to workers with what reaches the store
        self.input_path = self.input.display_root
        self.records_per_shard = records_per_shard

    def limits(self) -> dict[str, Any]:
        """The job's own parameters that change answers (recorded with the input in params)."""
        return {}

    def params(self) -> dict[str, Any]:
        """The input, the slicing and the limits.  The input's size and modification time are in
        each shard's spec, and each shard records a checksum of the bytes it read
        (``input_fingerprint``), so a changed file is never taken for the one already processed."""
        return {"input": self.input_path, "records_per_shard": self.records_per_shard, **self.limits()}

    def shard_label(self, shard: Shard) -> str:
        """``s00003 lines 75001-100000`` (JSONL; the last slice ``lines 975001-end``) or
        ``s00003 rows 1-25000`` (Parquet)."""
        spec = shard.spec
        if "first_line" in spec:
            last = spec["first_line"] + spec["lines"] - 1 if spec["lines"] else "end"
            return f"{shard.id} lines {spec['first_line']}-{last}"
        return f"{shard.id} rows {spec['start_row'] + 1}-{spec['end_row']}"

    def inputs(self) -> tuple:
        return (self.input,)

    def input_fingerprint(self, shard: Shard) -> str:
        """A checksum of the bytes the shard reads from the input (computed where the shard runs).
        A shard's ``run_shard`` records the same checksum from the bytes it read (``load_slice``), so
        this reads the input only to check a committed shard."""
        return slice_fingerprint(dict(shard.spec), self.input)

    def plan(self, context: PlanContext) -> list[Shard]:
        """One shard per slice of ``records_per_shard`` lines or rows, ids ``s00000``, ``s00001``...
        A large JSONL input has its lines counted by the context's task map."""
        slices = plan_slices(self.input, self.field, self.records_per_shard, context)
        return [Shard(id=f"s{k:05d}", spec=spec) for k, spec in enumerate(slices)]

    def check_totals(self, tables: dict[str, Any], totals: dict[str, int]) -> None:
        """Every record the workers read (``records`` summed over shards) is in exactly one table."""
        read, answered, rejected = totals.get("records", 0), len(tables["answers"]), len(tables["errors"])
        if read != answered + rejected:
            raise PipelineError(f"{self.name}: the workers read {read} records but the tables hold {answered} answers "
                                f"and {rejected} errors; no table was written (a bug: please report it)")

    def summary(self, tables: dict[str, Any], totals: dict[str, int]) -> str:
        """``NAME: read N, answered A, rejected R`` (N = A + R, checked by ``check_totals``)."""
        return accounting_summary(self.name, len(tables["answers"]), len(tables["errors"]))


def add_batch_arguments(parser: argparse.ArgumentParser, field: str, records_per_shard: int) -> None:
    """``--input FILE`` and ``--records-per-shard N`` for a record batch job's ``run`` command."""
    parser.add_argument("--input", required=True, metavar="FILE", action=_Once,
                        help=f'JSONL (one {{"id", "{field}"}} object per line) or Parquet (columns id, {field})')
    parser.add_argument("--records-per-shard", type=positive_int, default=records_per_shard, metavar="N",
                        help=f"input lines or rows per shard (default {records_per_shard:,})")


class _Once(argparse.Action):
    """An option that may be given once: a second ``--input`` is refused rather than silently
    replacing the first (a run reads one file today)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, self.dest, None) is not None:
            parser.error(f"{option_string} given twice ({getattr(namespace, self.dest)} and {values}): a run reads "
                         "one file; concatenate the files into one (cat a.jsonl b.jsonl > batch.jsonl)")
        setattr(namespace, self.dest, values)


def add_generate_arguments(parser: argparse.ArgumentParser, noun: str) -> None:
    """``--count``, ``--seed`` and ``--out`` for a ``generate`` command writing a batch of ``noun``."""
    parser.add_argument("--count", type=positive_int, required=True, help=f"how many {noun}")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--out", required=True, metavar="FILE",
                        help="output file: Parquet if it ends in .parquet, else JSONL")


def _check_generate_target(path: str) -> None:
    """``generate --out`` names a file whose folder exists: it never replaces a folder, and never
    creates folders it was not asked for."""
    if is_uri(path):
        return
    if os.path.isdir(path):
        raise UsageError(f"--out {path} is a folder: give a file name (for example {os.path.join(path, 'batch.jsonl')})")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise UsageError(f"--out {path}: the folder {parent} does not exist; create it first, or give another path")


def write_generated(path: str, field: str, id_prefix: str, values: list[Any], value_type: Any, noun: str) -> int:
    """Write generated records with ids ``<prefix>1``, ``<prefix>2``... (zero-padded) atomically,
    say so, and return the exit status."""
    _check_generate_target(path)
    digits = len(str(len(values)))
    ids = [f"{id_prefix}{k:0{digits}d}" for k in range(1, len(values) + 1)]
    write_batch(path, field, ids, values, value_type)
    print(f"wrote {len(values)} {noun} to {path}")
    return 0
