"""`batchenum table --format bfile`: OEIS b-file lines 'n value' for the free or fixed column."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd

from conftest import REPO

# Published free counts (the puzzle's statement for n <= 12, then the literature's n = 13..20).
PUBLISHED_FREE = [0, 0, 1, 0, 1, 1, 2, 2, 9, 13, 37, 81, 205, 512, 1335, 3404, 8922, 23592, 62630, 167622]


def table(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "batchenum", "table", *args], capture_output=True, text=True,
                            timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr
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
        out / "creature_counts.parquet")
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
    expected = counts.free_stabiliser_1 * 6 + counts.free_stabiliser_2 * 3 + counts.free_stabiliser_3 * 2 \
        + counts.free_stabiliser_6
    assert [v for _, v in rows] == expected.tolist()
    assert rows[2] == (3, 1) and rows[4] == (5, 3)
