"""A shard's numpy and Arrow columns of the wrong type: one error naming the shard, table, column
and first bad value (as for Python lists), never Arrow's own message, never a silent cast."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import batchenum
from batchenum.pipeline.contract import ContractError, completed_tables
from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.job import Column, Job, Shard, ShardResult, TableSpec

TABLE = TableSpec(
    "t",
    (Column("k", "int64"), Column("x", "float64"), Column("name", "string"), Column("cells", "list<int64>")),
)
GOOD = {"k": [1, 2], "x": [0.5, 1.5], "name": ["a", "b"], "cells": [[1], [2, 3]]}


class ArrayJob(Job):
    """Writes the columns it is given, in one shard."""

    name = "arrays"
    tables = (TABLE,)

    def __init__(self, columns=None):
        self.columns = columns

    def plan(self, context):
        return [Shard("s0")]

    def run_shard(self, shard, context=None):
        return ShardResult({"t": self.columns})


def check(**columns):
    return completed_tables(ArrayJob(), Shard("s0"), {"t": {**GOOD, **columns}})


@pytest.mark.parametrize(
    "column, values, says",
    [
        (
            "k",
            np.array([1.0, 2.0]),
            "column 'k' is declared int64 but is a numpy float64 array; row 1 holds 1.0: a float is not converted, even a whole one",
        ),
        ("k", np.array([1.0, 2.5]), "column 'k' is declared int64 but is a numpy float64 array; row 1 holds 1.0"),
        ("k", pa.array([None, 2.5]), "column 'k' is declared int64 but is an Arrow double array; row 2 holds 2.5"),
        ("k", pa.chunked_array([[1.5]]), "column 'k' is declared int64 but is an Arrow double array; row 1 holds 1.5"),
        ("k", pa.array(["1", "2"]), "column 'k' is declared int64 but is an Arrow string array; row 1 holds '1'"),
        ("k", np.array([True, False]), "column 'k' is declared int64 but is a numpy bool array; row 1 holds True"),
        (
            "k",
            np.array([1, 2**63], dtype=np.uint64),
            "column 'k' is declared int64 but row 2 holds 9223372036854775808 (numpy uint64), past int64's range",
        ),
        (
            "k",
            pa.array([None, 1, 2**64 - 1], type=pa.uint64()),
            "column 'k' is declared int64 but row 3 holds 18446744073709551615 (Arrow uint64), past int64's range",
        ),
        ("x", pa.array(["0.5", "1"]), "column 'x' is declared float64 but is an Arrow string array; row 1 holds '0.5'"),
        ("name", np.array([1, 2]), "column 'name' is declared string but is a numpy int64 array; row 1 holds 1"),
        (
            "cells",
            pa.array(["12", "3"]),
            "column 'cells' is declared list<int64> but is an Arrow string array; row 1 holds '12': give each row a list",
        ),
        (
            "cells",
            np.array(["12", [3]], dtype=object),
            "column 'cells' is declared list<int64> but row 1 holds '12' (str)",
        ),
        (
            "cells",
            np.array([[1, 2], [3, 4]]),
            "column 'cells' is a numpy array of shape (2, 2): a column is one-dimensional",
        ),
    ],
)
def test_a_wrong_array_is_one_error_naming_shard_table_column_and_value(column, values, says):
    with pytest.raises(ContractError) as raised:
        check(**{column: values})
    assert str(raised.value).startswith(f"shard s0: table 't', {says.split('column', 1)[0]}column")
    assert says in str(raised.value)


def test_arrays_of_a_type_the_column_takes_are_accepted_as_they_are():
    check(
        k=np.array([1, 2], dtype=np.int32),
        x=pa.array([1, 2], pa.int64()),
        name=np.array(["a", "b"]),
        cells=pa.array([[1], [2, 3]], pa.list_(pa.int32())),
    )
    check(k=pa.chunked_array([[1], [2]]), x=np.array([0.5, np.nan]), name=pa.array(["a", None], pa.large_string()))


def test_a_run_reports_the_error_and_writes_nothing(tmp_path):
    with pytest.raises(PipelineError, match="shard s0: table 't', column 'k' is declared int64 but is a numpy float64"):
        batchenum.run(ArrayJob({**GOOD, "k": np.array([1.0, 2.0])}), out=str(tmp_path), serial=True)
    assert not (tmp_path / "arrays" / "t.parquet").exists()
    good = batchenum.run(ArrayJob({**GOOD, "k": np.array([7, 8], dtype=np.int32)}), out=str(tmp_path), serial=True)
    assert pd.read_parquet(good.tables["t"].path).k.tolist() == [7, 8]


@pytest.mark.parametrize(
    "column, values, holds",
    [
        ("k", [1, None], "a null"),
        ("k", pa.array([1, None]), "a null"),
        ("k", np.array([1, None], dtype=object), "a null"),
        ("cells", [[1], [2, None]], "[2, None], a null in the list"),
        ("cells", pa.array([[1], [2, None]]), "[2, None], a null in the list"),
    ],
)
def test_a_null_in_an_integer_column_is_caught_at_the_shard(column, values, holds):
    """It once committed, and then every finish failed with "Float value nan was truncated
    converting to int64", naming neither shard nor row (issue 48)."""
    with pytest.raises(ContractError) as raised:
        check(**{column: values})
    kind = "int64" if column == "k" else "list<int64>"
    assert str(raised.value).startswith(
        f"shard s0: table 't', column {column!r} is declared {kind} but row 2 holds {holds}: a column of {kind} "
        "takes no nulls"
    )


def test_a_null_integer_commits_nothing_and_a_null_list_row_is_kept(tmp_path):
    with pytest.raises(PipelineError, match="column 'k' is declared int64 but row 2 holds a null"):
        batchenum.run(ArrayJob({**GOOD, "k": [1, None]}), out=str(tmp_path), serial=True)
    assert not list((tmp_path / "arrays").glob("_shards/**/*.parquet"))
    good = batchenum.run(ArrayJob({**GOOD, "cells": [[1], None]}), out=str(tmp_path), serial=True)
    assert good.tables["t"].to_pandas().cells[1] is None
