"""`batchenum table --format bfile`: OEIS b-file lines 'n value' for the free, fixed or a stabiliser column,
exact past int64."""

from __future__ import annotations

import decimal
import re
import shutil
import subprocess
import sys

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import REPO, assert_exit

from batchenum.jobs.palago import BFILE_COLUMNS, WIDE_CREATURE_COUNTS
from batchenum.jobs.palago_table import bfile, exact_column
from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.parquet_format import table_schema

# Published free counts (the puzzle's statement for n <= 12, then the literature's n = 13..20).
PUBLISHED_FREE = [0, 0, 1, 0, 1, 1, 2, 2, 9, 13, 37, 81, 205, 512, 1335, 3404, 8922, 23592, 62630, 167622]


def table(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "batchenum", "table", *args], capture_output=True, text=True, timeout=120, cwd=REPO
    )
    assert_exit(result, 0)
    return result.stdout


def parse(text: str) -> list[tuple[int, int]]:
    rows = []
    for line in text.splitlines():
        n, value = line.split(" ")
        rows.append((int(n), int(value)))
    return rows


def test_bfile_free_is_the_default_and_matches_published(tmp_path):
    out = tmp_path / "palago"
    out.mkdir()
    pd.read_parquet(REPO / "results" / "palago" / "creature_counts.parquet").head(20).to_parquet(
        out / "creature_counts.parquet"
    )
    text = table("--out", str(tmp_path), "--format", "bfile")
    assert text.endswith("\n") and not text.startswith("n")
    assert parse(text) == list(enumerate(PUBLISHED_FREE, start=1))


def test_bfile_fixed_column(tmp_path):
    out = tmp_path / "palago"
    out.mkdir()
    counts = pd.read_parquet(REPO / "results" / "palago" / "creature_counts.parquet")
    counts.iloc[::-1].to_parquet(out / "creature_counts.parquet")  # written out of order on purpose
    rows = parse(table("--out", str(tmp_path), "--format", "bfile", "--column", "fixed"))
    assert [n for n, _ in rows] == list(range(1, len(counts) + 1))
    # Orbit counting: fixed = sum over free creatures of 6 / stabiliser, from the published table.
    expected = (
        counts.free_stabiliser_1 * 6
        + counts.free_stabiliser_2 * 3
        + counts.free_stabiliser_3 * 2
        + counts.free_stabiliser_6
    )
    assert [v for _, v in rows] == expected.tolist()
    assert rows[2] == (3, 1) and rows[4] == (5, 3)


@pytest.mark.slow  # minutes of CPU on a loaded machine: an end-to-end run
def test_bfile_stabiliser_columns_add_up_to_free_and_fixed(tmp_path):
    out = tmp_path / "palago"
    out.mkdir()
    shutil.copy(REPO / "results" / "transfer" / "palago" / "creature_counts.parquet", out)
    columns = {
        column: parse(table("--out", str(tmp_path), "--format", "bfile", "--column", column))
        for column in BFILE_COLUMNS
    }
    counts = pd.read_parquet(out / "creature_counts.parquet")
    sizes = list(range(1, len(counts) + 1))
    for column, rows in columns.items():
        assert [n for n, _ in rows] == sizes
        assert [v for _, v in rows] == [int(v) for v in counts[column]]
    # orbit counting between the b-files: the stabiliser classes partition the free creatures, and a
    # free creature of stabiliser order s has 6 / s fixed images
    values = {column: [v for _, v in rows] for column, rows in columns.items()}
    for k in range(len(sizes)):
        assert sum(values[f"free_stabiliser_{s}"][k] for s in (1, 2, 3, 6)) == values["free"][k]
        assert sum(6 // s * values[f"free_stabiliser_{s}"][k] for s in (1, 2, 3, 6)) == values["fixed"][k]


def test_the_committed_table_past_int64_lists_exactly_and_its_columns_must_match_its_parameters(tmp_path):
    """results/transfer counts past int64 (fixed(50) needs 65 bits) as decimal strings; the table's
    recorded parameters say so, and int64 columns under those parameters are damage, not numbers."""
    committed = pq.read_table(REPO / "results" / "transfer" / "palago" / "creature_counts.parquet")
    assert int(committed.column("fixed")[-1].as_py()) > 2**64
    out = tmp_path / "palago"
    out.mkdir()
    shutil.copy(REPO / "results" / "transfer" / "palago" / "creature_counts.parquet", out)
    rows = parse(table("--out", str(tmp_path), "--format", "bfile", "--column", "fixed"))
    assert rows == [
        (n, int(v)) for n, v in zip(committed.column("n").to_pylist(), committed.column("fixed").to_pylist())
    ]
    narrow = committed.slice(0, 44)
    narrow = pa.table(
        {name: pa.array([int(v) for v in narrow.column(name).to_pylist()], pa.int64()) for name in narrow.column_names}
    ).replace_schema_metadata(committed.schema.metadata)
    pq.write_table(narrow, out / "creature_counts.parquet")
    result = subprocess.run(
        [sys.executable, "-m", "batchenum", "table", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert_exit(result, 1)
    assert "is damaged (its columns (n: int64, free: int64" in result.stderr
    assert "are not the table's (n: int64, free: string" in result.stderr


def test_bfile_column_must_be_a_count_column(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "batchenum", "table", "--format", "bfile", "--column", "nodes"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert_exit(result, 2)
    assert "invalid choice: 'nodes'" in result.stderr


# Counts past int64 (fixed(n) needs about 64.5 bits at n = 50): every form a count table may hold them in.
BIG = [2**63 - 1, 2**63, 2**64 + 12345, 10**25 + 7, 68557762666345165410168738]


@pytest.mark.parametrize("form", ["decimal128", "decimal256", "string", "python"])
def test_bfile_exact_past_int64(form):
    arrays = {
        "decimal128": lambda values: pa.array([decimal.Decimal(v) for v in values], pa.decimal128(38, 0)),
        "decimal256": lambda values: pa.array([decimal.Decimal(v) for v in values], pa.decimal256(76, 0)),
        "string": lambda values: pa.array([str(v) for v in values], pa.string()),
        "python": lambda values: pa.array([decimal.Decimal(v) for v in values]),  # inferred: decimal128(26, 0)
    }
    counts = pa.table({"n": pa.array([5, 1, 2, 3, 4], pa.int64()), "fixed": arrays[form](BIG)})
    assert bfile(counts, "fixed") == "".join(f"{n} {v}\n" for n, v in zip([1, 2, 3, 4, 5], [*BIG[1:], BIG[0]]))
    assert exact_column(counts, "fixed") == BIG


@pytest.mark.parametrize(
    "array, shown",
    [
        (pa.array([1, None, 3], pa.int64()), "None in row 2"),
        (pa.array([1.0, 2.0, 3.0]), "1.0 in row 1"),
        (pa.array([decimal.Decimal("1"), decimal.Decimal("2.5"), decimal.Decimal("3")]), "Decimal('2.5') in row 2"),
        (pa.array(["1", "2", "3e5"]), "'3e5' in row 3"),
    ],
)
def test_exact_column_refuses_what_is_not_a_whole_number(array, shown):
    with pytest.raises(PipelineError, match=re.escape(f"fixed column holds {shown}")):
        exact_column(pa.table({"n": pa.array([1, 2, 3]), "fixed": array}), "fixed")


def test_bfile_cli_past_int64(tmp_path):
    """Through the CLI, from a table in the wide count table's declared schema (decimal strings, what
    a run past n = 44 writes) holding values past int64, written by another tool (no provenance)."""
    schema = table_schema(WIDE_CREATURE_COUNTS)
    rows = len(BIG)
    values = {name: [0] * rows for name in schema.names}
    values["n"] = list(range(1, rows + 1))
    values["fixed"] = BIG
    columns = {name: _column(values[name], schema.field(name).type) for name in schema.names}
    out = tmp_path / "palago"
    out.mkdir()
    pq.write_table(pa.table(columns, schema=schema), out / "creature_counts.parquet")
    assert parse(table("--out", str(tmp_path), "--format", "bfile", "--column", "fixed")) == list(
        enumerate(BIG, start=1)
    )


def _column(values: list[int], type_: pa.DataType) -> pa.Array:
    if pa.types.is_decimal(type_):
        return pa.array([decimal.Decimal(v) for v in values], type_)
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return pa.array([str(v) for v in values], type_)
    return pa.array(values, type_)
