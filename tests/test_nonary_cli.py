"""``batchenum run nonary`` end to end: a real subprocess, a real local Ray, Parquet read back."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from batch_cases import NONARY_ANSWERS, NONARY_MIXED
from helpers import assert_exit

from batchenum.solvers.nonary import brute_force, generate, verify_plan


def batchenum(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "batchenum", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def mixed_batch(tmp_path_factory):
    """120 valid generated graphs with the records of NONARY_MIXED (valid, each invalid kind, malformed
    JSON, no id) spread among them."""
    graphs = generate(120, rooms=3, doors=6, seed=31, cycles=0.4, parallel=0.4, nines=0.3)
    lines = [json.dumps({"id": f"v{k}", "doors": g}) for k, g in enumerate(graphs)]
    for k, (line, _, _) in enumerate(NONARY_MIXED):
        lines.insert(5 * k + 2, line)
    path = tmp_path_factory.mktemp("cli") / "mixed.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected = {f"v{k}": brute_force(g) for k, g in enumerate(graphs)}
    expected.update(NONARY_ANSWERS)
    doors = {f"v{k}": g for k, g in enumerate(graphs)}
    doors.update({name: json.loads(line)["doors"] for line, name, reason in NONARY_MIXED if reason is None})
    rejected = sum(1 for _, _, reason in NONARY_MIXED if reason)
    return path, expected, doors, rejected


@pytest.mark.integration  # a CLI run that starts a private local Ray
def test_mixed_batch_through_the_cli_on_ray(mixed_batch, tmp_path):
    path, expected, doors, rejected = mixed_batch
    done = batchenum(
        "run",
        "nonary",
        "--input",
        str(path),
        "--out",
        str(tmp_path),
        "--workers",
        "2",
        "--records-per-shard",
        "40",
        "--max-doors",
        "6",
        "--quiet",
    )
    assert_exit(done, 0)
    read = len(expected) + rejected
    assert f"nonary: read {read}, answered {len(expected)}, rejected {rejected}" in done.stdout
    answers = pd.read_parquet(tmp_path / "nonary" / "answers")
    errors = pd.read_parquet(tmp_path / "nonary" / "errors")
    assert len(answers) + len(errors) == read
    assert dict(zip(answers["id"], answers["escaped"])) == expected
    for record, escaped, plan in zip(answers["id"], answers["escaped"], answers["plan"]):
        assert verify_plan(doors[record], json.loads(plan)) == escaped
    assert answers["line"].is_monotonic_increasing and errors["line"].is_monotonic_increasing
    assert set(answers["line"]).isdisjoint(errors["line"])
    assert sorted(errors["id"]) == sorted(
        name if name is not None else f"line {line}" for name, line in _error_names(path)
    )
    assert all(error.startswith(f"line {line}: ") for error, line in zip(errors["error"], errors["line"]))
    assert "raise it with --max-doors" in errors.set_index("id").loc["big", "error"]

    serial = batchenum(
        "run",
        "nonary",
        "--input",
        str(path),
        "--out",
        str(tmp_path / "serial"),
        "--records-per-shard",
        "40",
        "--max-doors",
        "6",
        "--serial",
        "--quiet",
    )
    assert_exit(serial, 0)
    assert pd.read_parquet(tmp_path / "serial" / "nonary" / "answers").equals(answers)
    assert pd.read_parquet(tmp_path / "serial" / "nonary" / "errors").equals(errors)


def _error_names(path):
    """(id or None, line) of every record of NONARY_MIXED with a reason, found by its text in the file."""
    bad = {line: name for line, name, reason in NONARY_MIXED if reason}
    with open(path, encoding="utf-8") as handle:
        for number, text in enumerate(handle, start=1):
            if text.rstrip("\n") in bad:
                yield bad[text.rstrip("\n")], number


def test_generate_then_run(tmp_path):
    out = tmp_path / "gen.parquet"
    made = batchenum(
        "generate", "nonary", "--count", "40", "--rooms", "3", "--doors", "6", "--seed", "4", "--out", str(out)
    )
    assert_exit(made, 0)
    done = batchenum("run", "nonary", "--input", str(out), "--out", str(tmp_path), "--serial", "--quiet")
    assert_exit(done, 0)
    assert "nonary: read 40, answered 40, rejected 0" in done.stdout
    answers = pd.read_parquet(tmp_path / "nonary" / "answers")
    graphs = generate(40, rooms=3, doors=6, seed=4)
    assert answers["escaped"].tolist() == [brute_force(g) for g in graphs]
