"""Checks of what a job hands the pipeline, each failure one message that names the job's mistake
and how to fix it: parameters that are not JSON, shard ids planned twice, shard tables the job does
not declare, and values of the wrong type for their column (a float into an int64 column would
otherwise be truncated silently by Arrow, a string into a list split into characters).
"""

from __future__ import annotations

import json
import numbers
from typing import Any

import numpy as np

from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.job import Job, Shard, ShardOutput, TableSpec

__all__ = ["ContractError", "checked_params", "check_plan", "completed_tables"]


class ContractError(PipelineError):
    """A job broke its contract with the pipeline (pipeline/job.py)."""


def checked_params(job: Job) -> dict[str, Any]:
    """``job.params()``, which is recorded as JSON in every file: refused naming the parameter
    when a value is not JSON (a numpy number, a set, a path object)."""
    params = job.params()
    if not isinstance(params, dict):
        raise ContractError(f"job {job.name!r}: params() must return a dict, not {type(params).__name__}")
    for name, value in params.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise ContractError(
                f"job {job.name!r}: params() gives {name} = {value!r} ({type(value).__name__}), "
                "which is not JSON: return plain str, int, float, bool, None, lists and dicts "
                "(int(x) for a numpy integer, str(path) for a path)"
            ) from None
    return params


def check_plan(job: Job, shards: list[Shard]) -> None:
    """Every shard id once, each a ``Shard``."""
    seen: set[str] = set()
    for shard in shards:
        if not isinstance(shard, Shard):
            raise ContractError(f"job {job.name!r}: plan() must return Shard objects, not {type(shard).__name__}")
        if shard.id in seen:
            raise ContractError(
                f"job {job.name!r}: plan() gives the shard id {shard.id!r} twice; ids name the "
                "committed files, so each shard needs its own (derive it from what the shard "
                "covers, the same on every run: s0000, s0001...)"
            )
        seen.add(shard.id)


def completed_tables(job: Job, shard: Shard, tables: ShardOutput) -> ShardOutput:
    """A shard's tables checked against their declarations, with the shard tables it did not
    return added empty (a shard returns only the tables it writes)."""
    shard_tables = list(job.shard_tables or [spec.name for spec in job.tables])
    for name in tables:
        if name not in shard_tables:
            raise ContractError(
                f"shard {shard.id}: run_shard returned a table {name!r}, which is not one of the "
                f"tables shards write ({', '.join(shard_tables)}): declare it in the job's "
                "tables (and shard_tables)"
            )
    for name, columns in tables.items():
        _check_columns(job.table_spec(name), shard, columns)
    return {name: tables[name] if name in tables else _empty(job.table_spec(name)) for name in shard_tables}


def _empty(spec: TableSpec) -> dict[str, list]:
    return {column.name: [] for column in spec.columns}


def _check_columns(spec: TableSpec, shard: Shard, columns: Any) -> None:
    if not isinstance(columns, dict):
        raise ContractError(
            f"shard {shard.id}: table {spec.name!r} must be a dict of columns "
            f"({{column: values}}), not {type(columns).__name__}"
        )
    for column in spec.columns:
        values = columns.get(column.name)
        if isinstance(values, (list, tuple)):
            _check_values(spec.name, column.name, column.type, shard, values)


_SCALAR = {"int64": (int,), "float64": (float, int), "bool": (bool,), "string": (str,)}


def _check_values(table: str, name: str, kind: str, shard: Shard, values: list | tuple) -> None:
    """Python values of the column's type; the first that is not is the error (None is a null)."""
    fast = _SCALAR.get(kind)
    if fast and all(type(v) in fast for v in values):  # the usual case, at C speed
        return
    for row, value in enumerate(values):
        if value is not None and not _fits(kind, value):
            raise ContractError(
                f"shard {shard.id}: table {table!r}, column {name!r} is declared {kind} but row {row + 1} holds "
                f"{value!r} ({type(value).__name__}): {_advice(kind, value)}"
            )


def _fits(kind: str, value: Any) -> bool:
    if kind == "int64":
        return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
    if kind == "float64":
        return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    if kind == "bool":
        return isinstance(value, (bool, np.bool_))
    if kind == "string":
        return isinstance(value, str)
    if kind == "list<int64>":
        return value is None or (
            isinstance(value, (list, tuple, np.ndarray)) and all(v is None or _fits("int64", v) for v in value)
        )
    return True


def _advice(kind: str, value: Any) -> str:
    if kind == "int64" and isinstance(value, float):
        return "Arrow would truncate it; return whole numbers (int(x) when it is one), or declare the column float64"
    if kind == "list<int64>":
        return "give each row a list of whole numbers (a string is not a list)"
    return f"convert the values to {kind}, or declare the column with the type it holds"
