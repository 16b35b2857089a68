"""The Palago job end to end: the real CLI, a real local Ray, real Parquet read back by pandas."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from helpers import REPO, cli

PUBLISHED_13_TO_20 = [205, 512, 1335, 3404, 8922, 23592, 62630, 167622]


@pytest.fixture(scope="module")
def ray_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ray")
    result = cli("run", "palago", "--max-n", "14", "--catalogue-max-n", "9", "--workers", "2", "--out", str(out))
    return out, result


def test_counts_match_published(ray_run, cases_dir):
    out, result = ray_run
    counts = pd.read_parquet(out / "palago" / "creature_counts.parquet")
    published = [json.loads(line)["free"] for line in (cases_dir / "palago_seed.jsonl").read_text().splitlines()]
    assert counts.n.tolist() == list(range(1, 15))
    assert counts.free.tolist() == published + PUBLISHED_13_TO_20[:2]
    assert all(str(dtype) == "int64" for dtype in counts.dtypes)
    assert "free(14) = 512" in result.stdout
    markdown = (out / "palago" / "creature_counts.md").read_text()
    assert "| 14 | 512 | 3,042 |" in markdown


def test_catalogue_reads_back_with_n_an_integer_column(ray_run):
    out, _ = ray_run
    creatures = pd.read_parquet(out / "palago" / "creatures")
    assert creatures.groupby("n").size().to_dict() == {3: 1, 5: 1, 6: 1, 7: 2, 8: 2, 9: 9}
    assert creatures.key.is_unique
    assert str(creatures.n.dtype) == "int64"
    eye = creatures[creatures.n == 3].iloc[0]
    assert eye.stabiliser == 6
    assert len(json.loads(eye.tiles)) == 3


def test_rerun_reuses_every_shard(ray_run):
    out, first = ray_run
    again = cli("run", "palago", "--max-n", "14", "--catalogue-max-n", "9", "--workers", "2", "--out", str(out))
    assert "4 shards (4 reused)" in again.stdout
    assert "0 to compute" in again.stderr


def test_serial_run_writes_identical_tables(ray_run, tmp_path):
    out, _ = ray_run
    cli("run", "palago", "--max-n", "14", "--catalogue-max-n", "9", "--serial", "--out", str(tmp_path))
    for name in ("creature_counts.parquet", "creatures/part-00000.parquet"):
        assert (tmp_path / "palago" / name).read_bytes() == (out / "palago" / name).read_bytes()


def test_table_command_prints_the_table(ray_run):
    out, _ = ray_run
    printed = cli("table", "--out", str(out)).stdout
    assert "167622" not in printed and "512" in printed


def test_bad_arguments_get_a_clear_message(tmp_path):
    result = cli("run", "palago", "--max-n", "50", "--out", str(tmp_path), expect=2)
    assert "--max-n must be between 1 and 40, not 50" in result.stderr
    result = cli(
        "run", "palago", "--max-n", "9", "--catalogue-max-n", "10", "--serial", "--out", str(tmp_path), expect=2
    )
    assert "--catalogue-max-n must be between 0 and --max-n (9), not 10" in result.stderr
    missing = cli("table", "--out", str(tmp_path / "nowhere"), expect=1)
    assert "run `batchenum run palago" in missing.stderr


def test_committed_table_is_the_published_one(cases_dir):
    counts = pd.read_parquet(REPO / "results" / "palago" / "creature_counts.parquet")
    published = [json.loads(line)["free"] for line in (cases_dir / "palago_seed.jsonl").read_text().splitlines()]
    assert counts.n.tolist() == list(range(1, 25))
    assert counts.free.tolist()[:20] == published + PUBLISHED_13_TO_20
    assert (counts.stabiliser_sum == 6 * counts.free).all()
