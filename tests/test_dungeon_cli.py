"""``batchenum run dungeons`` end to end: a real subprocess, a real local Ray, Parquet read back."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from batch_cases import DUNGEON_MIXED
from helpers import assert_exit

from batchenum.solvers.dungeon import generate, oracle_gold


def batchenum(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "batchenum", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def mixed_batch(tmp_path_factory):
    """400 valid generated dungeons with the malformed lines of DUNGEON_MIXED spread among them."""
    grids = generate(400, (1, 10), (1, 10), seed=21, wall=0.25, gold=0.15, monster=0.08)
    lines = [json.dumps({"id": f"v{k}", "grid": g}) for k, g in enumerate(grids)]
    for k, (line, _, _) in enumerate(DUNGEON_MIXED):
        lines.insert(17 * k + 3, line)
    path = tmp_path_factory.mktemp("cli") / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected = {f"v{k}": oracle_gold(g) for k, g in enumerate(grids)}
    expected.update({"ok-1": 1, "42": 1, "text": 0, "dup-a": 1, "dup-b": 1})
    rejected = sum(1 for _, _, error in DUNGEON_MIXED if error)
    return path, expected, rejected


@pytest.mark.integration  # a CLI run that starts a private local Ray
def test_mixed_batch_through_the_cli_on_ray(mixed_batch, tmp_path):
    path, expected, rejected = mixed_batch
    done = batchenum(
        "run",
        "dungeons",
        "--input",
        str(path),
        "--out",
        str(tmp_path),
        "--workers",
        "2",
        "--records-per-shard",
        "90",
        "--max-cells",
        "100",
        "--quiet",
    )
    assert_exit(done, 0)
    read = len(expected) + rejected
    assert f"dungeons: read {read}, answered {len(expected)}, rejected {rejected}" in done.stdout
    answers = pd.read_parquet(tmp_path / "dungeons" / "answers")
    errors = pd.read_parquet(tmp_path / "dungeons" / "errors")
    assert len(answers) + len(errors) == read
    assert dict(zip(answers["id"], answers["gold"])) == expected
    assert answers["line"].is_monotonic_increasing and errors["line"].is_monotonic_increasing
    assert set(answers["line"]).isdisjoint(errors["line"])
    named = errors[~errors["id"].str.startswith("line ")]
    assert sorted(named["id"]) == sorted(i for _, i, error in DUNGEON_MIXED if error and not i.startswith("line "))
    unnamed = errors[errors["id"].str.startswith("line ")]
    assert unnamed["id"].tolist() == [f"line {line}" for line in unnamed["line"]] and len(unnamed) == 4
    assert all(error.startswith(f"line {line}: ") for error, line in zip(errors["error"], errors["line"]))
    assert "raise it with --max-cells" in errors.set_index("id").loc["big", "error"]

    serial = batchenum(
        "run",
        "dungeons",
        "--input",
        str(path),
        "--out",
        str(tmp_path / "serial"),
        "--records-per-shard",
        "90",
        "--max-cells",
        "100",
        "--serial",
        "--quiet",
    )
    assert_exit(serial, 0)
    assert pd.read_parquet(tmp_path / "serial" / "dungeons" / "answers").equals(answers)
    assert pd.read_parquet(tmp_path / "serial" / "dungeons" / "errors").equals(errors)


def test_generate_then_run(tmp_path):
    out = tmp_path / "gen.parquet"
    made = batchenum(
        "generate", "dungeons", "--count", "50", "--height", "5", "--width", "1-9", "--seed", "4", "--out", str(out)
    )
    assert_exit(made, 0)
    done = batchenum("run", "dungeons", "--input", str(out), "--out", str(tmp_path), "--serial", "--quiet")
    assert_exit(done, 0)
    assert "dungeons: read 50, answered 50, rejected 0" in done.stdout
    answers = pd.read_parquet(tmp_path / "dungeons" / "answers")
    assert answers["gold"].tolist() == [oracle_gold(g) for g in generate(50, 5, (1, 9), seed=4)]


def test_missing_input_fails_with_a_clear_message(tmp_path):
    done = batchenum("run", "dungeons", "--input", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path), "--serial")
    assert_exit(done, 2)  # a usage mistake, as every other (issue 48)
    assert "does not exist" in done.stderr


# Reports imports of pandas and pyarrow.compute (with where they came from), then runs the CLI.
# pyarrow imports pandas on its first pa.array, pa.table, to_numpy or pq.read_table (0.2 to 0.3 s
# holding the GIL, in the driver and in every Ray worker; pipeline/arrow.py), and pyarrow.compute on
# its first take or flatten (0.1 s).  (Refusing the imports would not do: pyarrow carries on.)
REPORT_IMPORTS = """
import sys, traceback
class Report:
    def find_spec(self, name, path=None, target=None):
        if name in ("pandas", "pyarrow.compute"):
            print(name, "imported from:", "".join(traceback.format_stack(limit=8)), file=sys.stderr)
sys.meta_path.insert(0, Report())
from batchenum.jobs.cli import console
console()
"""


@pytest.mark.integration  # a CLI run that starts a private local Ray
def test_a_clean_batch_is_answered_without_importing_pandas_or_pyarrow_compute(tmp_path):
    batch = tmp_path / "clean.jsonl"
    grids = generate(300, 6, 7, seed=5)
    batch.write_text("".join(json.dumps({"id": f"d{k}", "grid": g}) + "\n" for k, g in enumerate(grids)))
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            REPORT_IMPORTS,
            "run",
            "dungeons",
            "--input",
            str(batch),
            "--records-per-shard",
            "100",
            "--out",
            str(tmp_path),
            "--workers",
            "2",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert_exit(done, 0)
    assert "imported from" not in done.stderr, done.stderr
    answers = pd.read_parquet(tmp_path / "dungeons" / "answers")
    assert answers["gold"].tolist() == [oracle_gold(g) for g in grids]


def test_rejected_records_are_named_after_the_summary_with_how_to_read_them_all(tmp_path):
    """Issue 48: ``read 9, answered 4, rejected 5`` said nothing of which or why."""
    lines = []
    for k in range(9):
        good = k % 2 == 0 and k != 8
        lines.append(json.dumps({"id": f"r{k}", "grid": ["@.$"] if good else ["@7"]}) if k != 3 else "{not json")
    batch = tmp_path / "batch.jsonl"
    batch.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    done = batchenum(
        "run", "dungeons", "--input", str(batch), "--out", str(out), "--serial", "--quiet", "--records-per-shard", "2"
    )
    assert_exit(done, 0)
    printed = done.stdout.splitlines()
    assert printed[0] == "dungeons: read 9, answered 4, rejected 5"
    assert printed[1] == "dungeons: the first 3 of 5 rejected records:"
    assert printed[2].startswith(f"  {batch}: line 2: row 1, column 2: character '7'")
    assert (
        printed[3]
        == f"  {batch}: line 4: not valid JSON: Expecting property name enclosed in double quotes at column 2"
    )
    assert printed[4].startswith(f"  {batch}: line 6: row 1, column 2: character '7'")
    command = printed[5].removeprefix("  every one, with its id: ")
    shown = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True).stdout
    assert [int(line.split()[2]) for line in shown.splitlines()[1:]] == [2, 4, 6, 8, 9]
    assert printed[6].startswith("dungeons: 5 shards")
