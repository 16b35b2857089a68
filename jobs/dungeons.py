"""The ``dungeons`` job: answer a batch of roguelike-gold dungeons read from JSONL or Parquet.

Each shard is a slice of one input file (``pipeline.inputs``); a batch is one or more files.  A shard reads its records, parses
all grids in bulk, solves each distinct grid once in one kernel call, and returns an ``answers``
row for every valid record and an ``errors`` row for every other one, so that
read = answered + rejected.

    batchenum run dungeons --input batch.jsonl --out results/
    batchenum generate dungeons --count 100000 --height 32 --width 32 --seed 1 --out batch.jsonl
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np
import pyarrow as pa

from batchenum.jobs import CODE_PACKAGES
from batchenum.pipeline.arrow import from_numpy, string_list_buffers
from batchenum.pipeline.batch import ERRORS_TABLE, FILE_COLUMN, LINE_COLUMN, RECORD_KEY, BatchInputJob
from batchenum.pipeline.cli import (
    Command,
    positive_int,
    probability,
    write_generated,
)
from batchenum.pipeline.cli import (
    add_generate_arguments as add_batch_generate_arguments,
)
from batchenum.pipeline.inputs import read_records
from batchenum.pipeline.job import Column, Param, PlanContext, Shard, ShardContext, ShardResult, TableSpec
from batchenum.solvers.dungeon import DungeonError, GridTooLargeError, ParsedBatch, generate, parse_flat, solve_batch
from batchenum.solvers.dungeon.parse import grid_rows

__all__ = ["DungeonJob", "JOB", "add_generate_arguments", "run_generate", "COMMANDS"]

# Enough work per task to amortise Ray's per-task cost (docs/benchmarks.md#record-batches-and-first-shards).
# It shapes the plan: docs/design.md#constants-that-shape-a-plan.
RECORDS_PER_SHARD = 25_000
MAX_CELLS = 1_000_000
_GRID_TYPE = pa.list_(pa.string())  # a well-formed record's grid, read straight into Arrow buffers


class DungeonJob(BatchInputJob):
    """Count the gold a rogue can reach in every dungeon of a JSONL or Parquet batch.

    input:             a file, a folder, a glob or a list of them: JSONL (one object per line with
                       ``id`` and ``grid``; plain, ``.gz`` or ``.zst``) or Parquet (columns ``id``,
                       ``grid``).
    records_per_shard: input lines (or rows) per shard; None: chosen from the batch and the run's
                       CPUs, at least ``RECORDS_PER_SHARD`` (``BatchInputJob``).
    max_cells:         larger grids are rejected as errors, not solved.
    """

    name = "dungeons"
    least_per_shard = RECORDS_PER_SHARD
    field = "grid"
    version = "1"
    code_packages = CODE_PACKAGES
    tables = (
        TableSpec(
            "answers",
            columns=(
                Column("id", "string", distinct=True),
                Column("gold", "int64"),  # reachable gold cells: the answer
                Column("height", "int64"),
                Column("width", "int64"),
                Column("monsters", "int64"),
                Column("gold_total", "int64"),  # all gold cells, reachable or not
                FILE_COLUMN,  # the record's identity: its input file...
                LINE_COLUMN,  # ...and its line (JSONL) or row (Parquet) there
            ),
            key=RECORD_KEY,
            sort=RECORD_KEY,
        ),
        ERRORS_TABLE,
    )

    max_cells = Param(
        int,
        default=MAX_CELLS,
        low=1,
        metavar="N",
        help=f"reject dungeons with more cells than this (default {MAX_CELLS:,})",
    )

    def run_shard(self, shard: Shard, context: ShardContext | None = None) -> ShardResult:
        """Read, parse, deduplicate and solve one slice; every record gets exactly one row.

        Grids arrive as one Arrow list<string> array, whichever reader read the slice (a grid
        given as one string is split into its rows), and are validated straight from its buffers,
        with no Python object per record.  Records the reader rejected, and rejected grids, are
        the errors.
        """
        records = read_records(dict(shard.spec), "grid", _GRID_TYPE, check=grid_rows, source=self.source(shard))
        batch = parse_flat(*string_list_buffers(records.payloads), max_cells=self.max_cells)
        is_rejected = np.ones(len(records), dtype=np.bool_)
        is_rejected[batch.index] = False
        rejected = np.flatnonzero(is_rejected)  # (numpy: no Python loop over the slice's records)
        clean = not len(rejected)  # then no take, which imports pyarrow.compute (a first-shard cost)
        outputs = {
            "answers": self._answers(
                records.ids if clean else records.ids.take(from_numpy(batch.index)),
                records.files(len(batch.index)),
                records.positions[batch.index],
                batch,
            ),
            "errors": records.error_rows(rejected, [self._reason(batch.errors[i]) for i in rejected]),
        }
        return ShardResult(outputs, {"records": records.read}, records.fingerprint)

    @staticmethod
    def _answers(ids: Any, files: Any, lines: np.ndarray, batch: ParsedBatch) -> dict[str, Any]:
        """The answers columns for the valid grids of ``batch``: each distinct grid is solved once."""
        distinct, inverse = batch.unique()
        return {
            "id": ids,
            "gold": solve_batch(distinct)[inverse],
            "height": batch.heights,
            "width": batch.widths,
            "monsters": batch.monsters,
            "gold_total": batch.gold_total,
            "file": files,
            "line": lines,
        }

    @staticmethod
    def _reason(error: DungeonError | None) -> str:
        """The plain reason for a grid ``parse_flat`` rejected; the size limit says how to raise it."""
        if isinstance(error, GridTooLargeError):
            return f"grid has {error.cells} cells, more than the limit of {error.limit} (raise it with --max-cells)"
        return str(error)

    @classmethod
    def warm(cls, scratch: str) -> None:
        from batchenum.pipeline.batch_writer import write_batch

        path = os.path.join(scratch, "dungeons.jsonl")
        write_batch(path, "grid", [f"d{k}" for k in range(8)], generate(8, 6, 6, 0), None)
        job = cls(path)
        for shard in job.plan(PlanContext()):
            job.run_shard(shard)


# --------------------------------------------------------------------------------------------- CLI


def _size(text: str) -> int | tuple[int, int]:
    """argparse type: ``32`` or a range ``1-60`` drawn per dungeon."""
    low, _, high = text.partition("-")
    values = (positive_int(low), positive_int(high)) if high else positive_int(low)
    if isinstance(values, tuple) and values[0] > values[1]:
        raise argparse.ArgumentTypeError(f"range {text!r} must be low-high with low <= high")
    return values


def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``batchenum generate dungeons``."""
    add_batch_generate_arguments(parser, "dungeons")
    parser.add_argument("--height", type=_size, default=32, help="rows, or a range like 1-60 (default 32)")
    parser.add_argument("--width", type=_size, default=32, help="columns, or a range like 1-60 (default 32)")
    parser.add_argument("--wall", type=probability, default=0.25, help="wall density (default 0.25)")
    parser.add_argument("--gold", type=probability, default=0.05, help="gold density (default 0.05)")
    parser.add_argument("--monster", type=probability, default=0.03, help="monster density (default 0.03)")


def run_generate(args: argparse.Namespace) -> int:
    """Write the generated dungeons to ``args.out`` (atomically); returns the exit status."""
    grids = generate(
        args.count, args.height, args.width, args.seed, wall=args.wall, gold=args.gold, monster=args.monster
    )
    return write_generated(args.out, "grid", "d", grids, _GRID_TYPE, "dungeons")


JOB = DungeonJob
COMMANDS = [
    Command(
        ("generate", "dungeons"),
        "write a batch of seeded random dungeons (JSONL or Parquet)",
        add_generate_arguments,
        run_generate,
    )
]
