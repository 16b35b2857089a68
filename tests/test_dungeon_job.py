"""jobs/dungeons.py: shards account for every record, answers match the solver, errors name records."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from batch_cases import DUNGEON_ANSWERS, DUNGEON_MIXED
from helpers import run_dungeon_shards

import batchenum.jobs.dungeons
from batchenum.jobs import REGISTRY
from batchenum.jobs.dungeons import DungeonJob
from batchenum.jobs.generate import GenerateDungeons
from batchenum.pipeline.cli import parse_job
from batchenum.pipeline.errors import InputError, UsageError
from batchenum.pipeline.job import PlanContext
from batchenum.pipeline.params import ParamError
from batchenum.solvers.dungeon import generate, oracle_gold


@pytest.fixture
def mixed_file(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text("\n".join(line for line, _, _ in DUNGEON_MIXED) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("per_shard", [1, 4, 25_000])
def test_mixed_batch_accounts_for_every_record(mixed_file, per_shard):
    job = DungeonJob(str(mixed_file), records_per_shard=per_shard, max_cells=100)
    out = run_dungeon_shards(job)
    answers, errors = out["answers"], out["errors"]
    valid = [(i, ident) for i, (_, ident, error) in enumerate(DUNGEON_MIXED, 1) if ident and error is None]
    invalid = [(i, ident, error) for i, (_, ident, error) in enumerate(DUNGEON_MIXED, 1) if error]
    assert answers["id"] == [ident for _, ident in valid]
    assert answers["line"] == [i for i, _ in valid]
    assert answers["gold"] == [DUNGEON_ANSWERS[ident] for _, ident in valid]
    assert errors["id"] == [ident for _, ident, _ in invalid]
    assert errors["line"] == [i for i, _, _ in invalid]
    for (_, _, fragment), message in zip(invalid, errors["error"]):
        assert fragment in message
    assert len(answers["id"]) + len(errors["id"]) == sum(1 for line, _, _ in DUNGEON_MIXED if line)


def test_answer_columns(mixed_file):
    answers = run_dungeon_shards(DungeonJob(str(mixed_file), max_cells=100))["answers"]
    row = answers["id"].index("42")
    columns = ("gold", "height", "width", "monsters", "gold_total", "line")
    assert [answers[c][row] for c in columns] == [1, 3, 5, 1, 1, 5]
    spec = {t.name: t for t in DungeonJob.tables}
    assert set(answers) == set(spec["answers"].column_names)


def test_duplicates_are_solved_once_and_answered_for_every_record(tmp_path, monkeypatch):
    grids = generate(10, (2, 9), (2, 9), seed=4, wall=0.2, gold=0.2, monster=0.1)
    records = [{"id": f"r{k}", "grid": grids[k % 10]} for k in range(40)]
    records.append({"id": "respelled", "grid": [row.replace(".", " ") for row in grids[0]]})
    path = tmp_path / "dups.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    solved = []
    real_solve_batch = batchenum.jobs.dungeons.solve_batch
    monkeypatch.setattr(batchenum.jobs.dungeons, "solve_batch", lambda b: solved.append(len(b)) or real_solve_batch(b))
    answers = run_dungeon_shards(DungeonJob(str(path)))["answers"]
    assert answers["id"] == [r["id"] for r in records]
    assert answers["gold"] == [oracle_gold(r["grid"]) for r in records]
    assert solved == [len({tuple(g) for g in grids})]


def test_parquet_input(tmp_path):
    path = tmp_path / "batch.parquet"
    grids = generate(30, (1, 8), (1, 8), seed=9, wall=0.2, gold=0.2, monster=0.1)
    ids = [f"p{k}" if k != 7 else None for k in range(30)]
    pq.write_table(pa.table({"id": ids, "grid": grids}), path, row_group_size=8)
    out = run_dungeon_shards(DungeonJob(str(path), records_per_shard=11))
    assert out["errors"] == {"id": ["row 8"], "error": ["row 8: no 'id'"], "file": [str(path)], "line": [8]}
    assert out["answers"]["gold"] == [oracle_gold(g) for k, g in enumerate(grids) if k != 7]


def test_plan_ids_params_and_summary(mixed_file):
    job = DungeonJob(str(mixed_file), records_per_shard=5)
    assert [s.id for s in job.plan(PlanContext())] == ["s00000", "s00001", "s00002", "s00003", "s00004"]
    assert job.params()["input"] == str(mixed_file) and job.params()["max_cells"] == 1_000_000
    json.dumps(job.params())
    import pandas as pd

    tables = {"answers": pd.DataFrame({"id": ["a"] * 990}), "errors": pd.DataFrame({"id": ["b"] * 10})}
    assert job.summary(tables, {}) == "dungeons: read 1000, answered 990, rejected 10"


def test_missing_input_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        DungeonJob(str(tmp_path / "nope.jsonl")).plan(PlanContext())


def test_run_arguments():
    job = parse_job(REGISTRY, ["dungeons", "--input", "x.jsonl", "--max-cells", "5000", "--records-per-shard", "7"])
    assert (job.max_cells, job.records_per_shard) == (5000, 7)
    assert parse_job(REGISTRY, ["dungeons", "--input", "x.jsonl"]).max_cells == 1_000_000
    with pytest.raises(UsageError, match="--max-cells must be at least 1, not 0"):
        parse_job(REGISTRY, ["dungeons", "--input", "x.jsonl", "--max-cells", "0"])


@pytest.mark.parametrize("name", ["gen.jsonl", "gen.parquet"])
def test_generate_command_round_trips(tmp_path, name, capsys):
    out = tmp_path / name
    assert GenerateDungeons(count=25, height="1-6", width="4", seed=3, out=str(out)).run() == 0
    assert "wrote 25 dungeons" in capsys.readouterr().out
    answers = run_dungeon_shards(DungeonJob(str(out)))["answers"]
    expected = generate(25, (1, 6), 4, seed=3)
    assert answers["id"][:2] == ["d01", "d02"]
    assert answers["gold"] == [oracle_gold(g) for g in expected]
    with pytest.raises(ParamError, match="height must be at least 1, a range low-high with low <= high, not '6-1'"):
        GenerateDungeons(count=5, height="6-1", out="x")


def test_arrow_path_and_record_path_agree(tmp_path, monkeypatch):
    """Readable records (valid or not) take the Arrow-buffer path; its rows equal the per-record path's."""
    readable = [(line, ident, error) for line, ident, error in DUNGEON_MIXED if _strings_grid(line)]
    grids = generate(60, (1, 9), (1, 9), seed=8, wall=0.2, gold=0.2, monster=0.1)
    lines = [json.dumps({"id": f"g{k}", "grid": g}) for k, g in enumerate(grids)] + [line for line, _, _ in readable]
    path = tmp_path / "readable.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    job = DungeonJob(str(path), records_per_shard=25, max_cells=100)
    monkeypatch.setattr(
        "batchenum.pipeline.inputs.jsonl._read_lines", lambda *a, **k: pytest.fail("left the Arrow path")
    )
    fast = run_dungeon_shards(job)
    monkeypatch.undo()
    monkeypatch.setattr("batchenum.pipeline.inputs.jsonl._fast_records", lambda *a, **k: None)
    assert run_dungeon_shards(job) == fast
    assert len(fast["errors"]["id"]) == sum(1 for _, _, error in readable if error) > 5
    assert fast["answers"]["gold"][:60] == [oracle_gold(g) for g in grids]


def _strings_grid(line: str) -> bool:
    """Whether a line is a JSON object with a string id and a list of strings as grid."""
    try:
        record = json.loads(line)
    except ValueError:
        return False
    if not isinstance(record, dict):
        return False
    grid = record.get("grid")
    return isinstance(record.get("id"), str) and isinstance(grid, list) and all(isinstance(r, str) for r in grid)
