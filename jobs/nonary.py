"""The ``nonary`` job: the most players who can escape, with a plan, for every door graph of a batch.

Each shard is a slice of one input file (``pipeline.inputs``); a batch is one or more files.  A shard reads its records, checks
every door list, solves each distinct graph once (graphs equal up to door order and room names
share one search; the plan is mapped back to each record's own door order) and returns an
``answers`` row for every valid record and an ``errors`` row for every other one, so that
read = answered + rejected.

    batchenum run nonary --input doors.jsonl --out results/
    batchenum generate nonary --count 1000 --rooms 4 --doors 14 --seed 1 --out doors.jsonl
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import numpy as np
import pyarrow as pa

from batchenum.jobs import CODE_PACKAGES
from batchenum.pipeline.batch import ERRORS_TABLE, FILE_COLUMN, LINE_COLUMN, RECORD_KEY, BatchInputJob
from batchenum.pipeline.inputs import Records, read_records
from batchenum.pipeline.job import Column, Param, PlanContext, Shard, ShardContext, ShardResult, TableSpec
from batchenum.solvers.nonary import SolveTimeout, TooManyDoorsError, generate, parse, solve_parsed
from batchenum.solvers.nonary.canonical import canonical_form

__all__ = ["NonaryJob", "JOB"]

# A hard graph can take a good fraction of a second.  It shapes the plan:
# docs/design.md#constants-that-shape-a-plan.
RECORDS_PER_SHARD = 2_000
MAX_DOORS = 200
RECORD_TIMEOUT = 60.0  # seconds of preparation and search per distinct graph before it becomes an error row
DOORS_TYPE = pa.list_(pa.list_(pa.int64()))


class NonaryJob(BatchInputJob):
    """Find how many players can escape, with a plan, for every door graph of a batch.

    input:             a file, a folder, a glob or a list of them: JSONL (one object per line with
                       ``id`` and ``doors``; plain, ``.gz`` or ``.zst``) or Parquet (columns ``id``,
                       ``doors``).
    records_per_shard: input lines (or rows) per shard; None: chosen from the batch and the run's
                       CPUs, at least ``RECORDS_PER_SHARD`` (``BatchInputJob``).
    max_doors:         longer door lists are rejected as errors, not solved.
    record_timeout:    seconds allowed per distinct graph, for preparing it (its canonical form)
                       and searching it; past it the record (and any identical one in the shard)
                       gets an error row.  ``math.inf`` for no limit.
    """

    name = "nonary"
    least_per_shard = RECORDS_PER_SHARD
    field = "doors"
    version = "1"
    code_packages = CODE_PACKAGES
    tables = (
        TableSpec(
            "answers",
            columns=(
                Column("id", "string", distinct=True),
                Column("escaped", "int64"),  # the most players who can escape: the answer
                Column("plan", "string"),  # JSON [[door_index, [players...]], ...], door indices into the record
                Column("doors", "int64"),  # number of doors in the record
                FILE_COLUMN,  # the record's identity: its input file...
                LINE_COLUMN,  # ...and its line (JSONL) or row (Parquet) there
            ),
            key=RECORD_KEY,
            sort=RECORD_KEY,
        ),
        ERRORS_TABLE,
    )

    max_doors = Param(int, default=MAX_DOORS, low=1, metavar="N", help="reject door lists longer than this")
    # not recorded: a record that times out is retried by the next run, whatever budget it is given
    record_timeout = Param(
        float,
        default=RECORD_TIMEOUT,
        above=0,
        recorded=False,
        metavar="SECONDS",
        help=(
            "time allowed per distinct graph, preparation (its canonical form) and search together, before its "
            f"records become error rows (default {RECORD_TIMEOUT:g}; 'inf' for no limit)"
        ),
    )

    def run_shard(self, shard: Shard, context: ShardContext | None = None) -> ShardResult:
        """Read, check and solve one slice; every record gets exactly one row.  On a rerun that
        asks to retry records (``context.retry``: the lines of timed-out ones), only those are
        searched again and every other row is kept as committed (``context.previous``)."""
        records = self._read(shard)
        if context is None or not context.retry:
            answers, errors, timed_out = self._rows(records, range(len(records)))
            return self._outputs(answers, errors, records.read, timed_out, records.fingerprint)
        again = set(context.retry)
        retried = [i for i, p in enumerate(records.positions.tolist()) if p in again]
        answers, errors, timed_out = self._rows(records, retried, read_errors=False)
        for table, rows in (("answers", answers), ("errors", errors)):
            kept = context.previous[table].to_pydict()
            for name, values in kept.items():
                rows[name] = [v for v, line in zip(values, kept["line"]) if line not in again] + rows[name]
            order = sorted(range(len(rows["line"])), key=rows["line"].__getitem__)
            for name in rows:
                rows[name] = [rows[name][k] for k in order]
        return self._outputs(answers, errors, records.read, timed_out, records.fingerprint)

    @classmethod
    def warm(cls, scratch: str) -> None:
        from batchenum.pipeline.batch_writer import write_batch

        path = os.path.join(scratch, "nonary.jsonl")
        write_batch(path, "doors", [f"g{k}" for k in range(8)], generate(8, 4, 8, 0), None)
        job = cls(path)
        for shard in job.plan(PlanContext()):
            job.run_shard(shard)

    def _read(self, shard: Shard) -> Records:
        """The slice's records, each door list checked by ``_checked_doors``."""
        return read_records(
            dict(shard.spec), "doors", pa.string(), check=self._checked_doors, source=self.source(shard)
        )

    def _checked_doors(self, value: Any) -> str:
        """A record's door list, checked on its JSON values as read (the parser must see ``9.0``,
        ``"9"`` or ``true`` as they are, to reject them rather than have them coerced), as compact
        JSON text: rooms may be any integer, and Arrow has no type for Python's integers.  Raises
        a ValueError with the reason for a door list that breaks the contract."""
        try:
            return json.dumps(parse(value, max_doors=self.max_doors), separators=(",", ":"))
        except TooManyDoorsError as error:
            raise ValueError(
                f"{error.doors} doors is more than the limit of {error.limit} (raise it with --max-doors)"
            ) from None

    def _rows(self, records: Records, indices, read_errors: bool = True) -> tuple[dict, dict, list[int]]:
        """Answers rows for the accepted records at ``indices``, errors rows for those that have no
        answer (and for the records the reader rejected, with ``read_errors``), and the lines
        that timed out."""
        answers: dict[str, list] = {"id": [], "escaped": [], "plan": [], "doors": [], "file": [], "line": []}
        rejected, reasons = [], []
        solved: dict[tuple, tuple[int, list] | str] = {}  # canonical key -> (escaped, plan) or reason
        timed_out = []
        ids, positions, payloads = records.ids.to_pylist(), records.positions.tolist(), records.payloads.to_pylist()
        for i in indices:
            doors = tuple(tuple(door) for door in json.loads(payloads[i]))
            outcome = self._answer(doors, solved)
            if isinstance(outcome, str):
                rejected.append(i)
                reasons.append(outcome)
                if isinstance(outcome, _TimedOut):
                    timed_out.append(positions[i])
            else:
                escaped, plan = outcome
                answers["id"].append(ids[i])
                answers["escaped"].append(escaped)
                answers["plan"].append(json.dumps(plan, separators=(",", ":")))
                answers["doors"].append(len(doors))
                answers["file"].append(records.file)
                answers["line"].append(positions[i])
        return answers, records.error_rows(rejected, reasons, read_errors=read_errors), timed_out

    @staticmethod
    def _outputs(answers: dict, errors: dict, records: int, timed_out: list[int], fingerprint: str) -> ShardResult:
        """A timeout depends on the machine's load, not on the record: the shard asks a rerun to
        retry exactly those records (``retry``) rather than reuse their error rows.  ``fingerprint``
        is the checksum of the slice's bytes, recorded with the shard."""
        tables = {
            "answers": {
                **answers,
                "escaped": np.asarray(answers["escaped"], dtype=np.int64),
                "doors": np.asarray(answers["doors"], dtype=np.int64),
                "line": np.asarray(answers["line"], dtype=np.int64),
            },
            "errors": {**errors, "line": np.asarray(errors["line"], dtype=np.int64)},
        }
        return ShardResult(tables, {"records": records, "timeouts": len(timed_out)}, fingerprint, retry=timed_out)

    def _answer(self, doors: tuple, solved: dict) -> tuple[int, list] | str:
        """(escaped, plan) for one record's checked door list, or the reason it has no answer.

        solved: canonical key -> (escaped, plan over the canonical door list) or a reason, shared
        by the shard so that each distinct graph is searched once; a door list whose time ran
        out before its canonical form was known is remembered as itself.

        The record's time budget covers all the work on a new graph: its canonical form (the
        preparation, which grows with the square of the doors on a long chain of rooms) and the
        search.
        """
        deadline = time.monotonic() + self.record_timeout
        if doors in solved:
            return solved[doors]
        try:
            key, order = canonical_form(doors, deadline=deadline)
        except SolveTimeout as error:
            solved[doors] = self._timeout_reason(error)
            return solved[doors]
        if key not in solved:
            try:
                solved[key] = solve_parsed(key[1], timeout=max(0.0, deadline - time.monotonic()))
            except SolveTimeout as error:
                solved[key] = self._timeout_reason(error)
        outcome = solved[key]
        if isinstance(outcome, str):
            return outcome
        escaped, plan = outcome
        return escaped, [[order[j], players] for j, players in plan]

    def _timeout_reason(self, error: SolveTimeout) -> str:
        """The error row's reason for a graph whose time budget ran out."""
        if error.stage == "search":
            return _TimedOut(
                f"timed out: no optimal plan within the time budget of {self.record_timeout:g} s "
                f"({error.states:,} states searched); raise it with --record-timeout, or rerun "
                "into the same folder to retry only the timed-out records"
            )
        return _TimedOut(
            f"timed out: the time budget of {self.record_timeout:g} s ran out while preparing the "
            "graph, before the search; raise it with --record-timeout"
        )

    def summary(self, tables: dict, totals: dict) -> str:
        line = super().summary(tables, totals)
        timeouts = totals.get("timeouts", 0)
        return line + (f" ({timeouts} timed out: rerun into the same folder to retry only those)" if timeouts else "")


class _TimedOut(str):
    """A reason that is a timeout (it depends on the run, not on the record)."""


JOB = NonaryJob
