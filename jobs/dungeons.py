"""The ``dungeons`` job: answer a batch of roguelike-gold dungeons read from JSONL or Parquet.

Each shard is a slice of one input file (``pipeline.inputs``); a batch is one or more files.  A shard reads its records, parses
all grids in bulk, solves each distinct grid once in one kernel call, and returns an ``answers``
row for every valid record and an ``errors`` row for every other one, so that
read = answered + rejected.

    batchenum run dungeons --input batch.jsonl --out results/
    batchenum generate dungeons --count 100000 --height 32 --width 32 --seed 1 --out batch.jsonl
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa

from batchenum.jobs import CODE_PACKAGES
from batchenum.pipeline.arrow import from_numpy, string_list_buffers
from batchenum.pipeline.batch import ERRORS_TABLE, FILE_COLUMN, LINE_COLUMN, RECORD_KEY, BatchInputJob
from batchenum.pipeline.inputs import read_records
from batchenum.pipeline.job import Column, Param, PlanContext, Shard, ShardContext, ShardResult, TableSpec
from batchenum.solvers.dungeon import DungeonError, GridTooLargeError, ParsedBatch, generate, parse_flat, solve_batch
from batchenum.solvers.dungeon.parse import grid_rows

__all__ = ["DungeonJob", "JOB"]

# Enough work per task to amortise Ray's per-task cost (docs/benchmarks.md#record-batches-and-first-shards).
# It shapes the plan: docs/design.md#constants-that-shape-a-plan.
RECORDS_PER_SHARD = 25_000
MAX_CELLS = 1_000_000
GRID_TYPE = pa.list_(pa.string())  # a well-formed record's grid, read straight into Arrow buffers


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
        records = read_records(dict(shard.spec), "grid", GRID_TYPE, check=grid_rows, source=self.source(shard))
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


JOB = DungeonJob
