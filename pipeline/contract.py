"""Checks of what a job hands the pipeline, each failure one message that names the job's mistake
and how to fix it: parameters that are not JSON, shard ids planned twice, shard tables the job does
not declare, and values of the wrong type for their column, as Python lists, numpy arrays or Arrow
arrays (a float into an int64 column would otherwise be truncated silently by Arrow or fail without
the shard's name, a string into a list split into characters).
"""

from __future__ import annotations

import json
import numbers
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa

from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.job import Job, Shard, ShardOutput, TableSpec
from batchenum.pipeline.names import file_name_problem

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
    """Every shard id once, each a ``Shard`` whose id can name its files in the job folder."""
    seen: set[str] = set()
    for shard in shards:
        if not isinstance(shard, Shard):
            raise ContractError(f"job {job.name!r}: plan() must return Shard objects, not {type(shard).__name__}")
        problem = file_name_problem(shard.id)
        if problem is not None:
            raise ContractError(f"job {job.name!r}: plan() gives a shard id that cannot name its files: {problem}")
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
        elif isinstance(values, np.ndarray):
            _check_numpy(spec.name, column.name, column.type, shard, values)
        elif isinstance(values, (pa.Array, pa.ChunkedArray)):
            _check_arrow(spec.name, column.name, column.type, shard, values)


_SCALAR = {"int64": (int,), "float64": (float, int), "bool": (bool,), "string": (str,)}


def _check_values(table: str, name: str, kind: str, shard: Shard, values: list | tuple) -> None:
    """Python values of the column's type; the first that is not is the error (None is a null)."""
    fast = _SCALAR.get(kind)
    if fast and all(type(v) in fast for v in values):  # the usual case, at C speed
        return
    for row, value in enumerate(values):
        if kind in _NOT_NULL and _holds_null(kind, value):
            _refuse_null(table, name, kind, shard, row, value)
        if value is not None and not _fits(kind, value):
            raise ContractError(
                f"shard {shard.id}: table {table!r}, column {name!r} is declared {kind} but row {row + 1} holds "
                f"{value!r} ({type(value).__name__}): {_advice(kind, value)}"
            )


# The numpy dtype kinds and Arrow types each column takes as they are, without losing a value (an
# unsigned 64-bit value past int64's range is checked apart).  Anything else is refused, never cast:
# a float64 array of whole numbers included (astype or cast it first, where the job knows it may).
_NUMPY_KINDS = {"int64": "iu", "float64": "fiu", "bool": "b", "string": "U"}
_ARROW_TYPES = {
    "int64": pa.types.is_integer,
    "float64": lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
    "bool": pa.types.is_boolean,
    "string": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t),
    "list<int64>": lambda t: (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_integer(t.value_type),
}
_INT64_MAX = np.iinfo(np.int64).max


def _check_numpy(table: str, name: str, kind: str, shard: Shard, values: np.ndarray) -> None:
    """A numpy array of a dtype the column takes (an object array: value by value, as a list)."""
    if values.ndim != 1:
        raise ContractError(
            f"shard {shard.id}: table {table!r}, column {name!r} is a numpy array of shape {values.shape}: "
            "a column is one-dimensional (for a list<int64> column give a list of arrays, one per row)"
        )
    if values.dtype.kind == "O":
        _check_values(table, name, kind, shard, values.tolist())
    elif values.dtype.kind not in _NUMPY_KINDS.get(kind, ""):
        _refuse_array(table, name, kind, shard, f"a numpy {values.dtype} array", values.tolist(), 0)
    elif kind == "int64" and values.dtype == np.uint64 and len(values) and values.max() > _INT64_MAX:
        row = int(np.argmax(values > _INT64_MAX))
        _refuse_past_int64(table, name, shard, row, int(values[row]), "numpy uint64")


def _check_arrow(table: str, name: str, kind: str, shard: Shard, values: pa.Array | pa.ChunkedArray) -> None:
    """An Arrow array of a type the column takes as it is."""
    fits = _ARROW_TYPES.get(kind)
    if fits is not None and not fits(values.type):
        rows = values.to_pylist()
        _refuse_array(table, name, kind, shard, f"an Arrow {values.type} array", rows, _first_valid(rows))
    elif kind == "int64" and pa.types.is_uint64(values.type):
        rows = values.to_pylist()
        row = next((row for row, value in enumerate(rows) if value is not None and value > _INT64_MAX), None)
        if row is not None:
            _refuse_past_int64(table, name, shard, row, rows[row], "Arrow uint64")
    if kind in _NOT_NULL and (values.null_count or (kind == "list<int64>" and values.flatten().null_count)):
        found = values.to_pylist()
        first = next(row for row, value in enumerate(found) if _holds_null(kind, value))
        _refuse_null(table, name, kind, shard, first, found[first])


# Columns that take no null: the finish reads shard tables with pandas, which holds a null of an
# integer as a float NaN and then cannot write it back as int64 ("Float value nan was truncated");
# the shard is refused instead, so nothing is committed that no rerun could finish.  A list<int64>
# row may be null, an integer in it may not.
_NOT_NULL = ("int64", "list<int64>")


def _holds_null(kind: str, value: Any) -> bool:
    if kind == "int64":
        return value is None
    return isinstance(value, (list, tuple, np.ndarray)) and any(item is None for item in value)


def _refuse_null(table: str, name: str, kind: str, shard: Shard, row: int, value: Any) -> NoReturn:
    where = "a null" if value is None else f"{value!r}, a null in the list"
    raise ContractError(
        f"shard {shard.id}: table {table!r}, column {name!r} is declared {kind} but row {row + 1} holds "
        f"{where}: a column of {kind} takes no nulls (pandas would turn them into floats); give every row "
        "whole numbers, or declare the column float64 and write NaN for a missing value"
    )


def _refuse_past_int64(table: str, name: str, shard: Shard, row: int, value: int, holds: str) -> None:
    raise ContractError(
        f"shard {shard.id}: table {table!r}, column {name!r} is declared int64 but row {row + 1} holds "
        f"{value} ({holds}), past int64's range: declare the column float64, or keep the values below 2**63"
    )


def _first_valid(rows: list) -> int:
    return next((row for row, value in enumerate(rows) if value is not None), 0)


def _refuse_array(table: str, name: str, kind: str, shard: Shard, holds: str, rows: list, row: int) -> None:
    shown = f"; row {row + 1} holds {rows[row]!r}" if rows else ""
    raise ContractError(
        f"shard {shard.id}: table {table!r}, column {name!r} is declared {kind} but is {holds}{shown}: "
        f"{_array_advice(kind, holds)}"
    )


def _array_advice(kind: str, holds: str) -> str:
    if kind == "int64" and ("float" in holds or "double" in holds):
        return (
            "a float is not converted, even a whole one; convert the array where you know every value is "
            "whole (values.astype(np.int64), or .cast(pa.int64()) for Arrow), or declare the column float64"
        )
    if kind == "list<int64>":
        return "give each row a list of whole numbers (a string is not a list)"
    return f"convert the values to {kind}, or declare the column with the type it holds"


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
