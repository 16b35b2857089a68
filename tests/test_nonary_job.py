"""jobs/nonary.py without Ray: shards of a mixed batch, every record accounted for, plans that
replay on each record's own doors, identical graphs solved once, limits."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from batch_cases import NONARY_ANSWERS, NONARY_HARD, NONARY_MIXED

from batchenum.jobs import nonary
from batchenum.jobs.nonary import NonaryJob
from batchenum.pipeline.job import PlanContext
from batchenum.solvers.nonary import brute_force, generate, verify_plan


def write_mixed(path, lines):
    path.write_text("\n".join(lines) + "\n\n", encoding="utf-8")  # a trailing blank line is no record
    return path


def run_all(job):
    outputs = [job.run_shard(shard).tables for shard in job.plan(PlanContext())]
    answers = {k: [v for out in outputs for v in out["answers"][k]] for k in job.table_spec("answers").column_names}
    errors = {k: [v for out in outputs for v in out["errors"][k]] for k in job.table_spec("errors").column_names}
    return answers, errors


@pytest.mark.parametrize("per_shard", [1, 4, 100])
def test_mixed_batch_every_record_accounted_for(tmp_path, per_shard):
    path = write_mixed(tmp_path / "mixed.jsonl", [line for line, _, _ in NONARY_MIXED])
    job = NonaryJob(str(path), records_per_shard=per_shard, max_doors=6)
    shards = job.plan(PlanContext())
    assert [s.id for s in shards] == [f"s{k:05d}" for k in range(len(shards))]
    answers, errors = run_all(job)
    assert len(answers["id"]) + len(errors["id"]) == len(NONARY_MIXED)
    assert dict(zip(answers["id"], answers["escaped"])) == NONARY_ANSWERS
    for record, line, plan, size in zip(answers["id"], answers["line"], answers["plan"], answers["doors"]):
        doors = json.loads(NONARY_MIXED[line - 1][0])["doors"]
        assert verify_plan(doors, json.loads(plan)) == NONARY_ANSWERS[record]
        assert size == len(doors)
    expected_errors = [(k + 1, name, reason) for k, (_, name, reason) in enumerate(NONARY_MIXED) if reason]
    assert errors["line"] == [line for line, _, _ in expected_errors]
    for (line, name, reason), got_id, got_error in zip(expected_errors, errors["id"], errors["error"]):
        assert got_id == (name if name is not None else f"line {line}")
        assert got_error.startswith(f"line {line}: ") and reason in got_error


def test_summary_counts(tmp_path):
    import pandas as pd

    path = write_mixed(tmp_path / "mixed.jsonl", [line for line, _, _ in NONARY_MIXED])
    job = NonaryJob(str(path), max_doors=6)
    answers, errors = run_all(job)
    tables = {"answers": pd.DataFrame(answers), "errors": pd.DataFrame(errors)}
    assert job.summary(tables, {}) == f"nonary: read {len(NONARY_MIXED)}, answered 4, rejected {len(NONARY_MIXED) - 4}"


def test_identical_graphs_are_solved_once_and_mapped_back(tmp_path, monkeypatch):
    base = [[8, 0, 1], [3, 1, 2], [9, 2, -1], [6, 1, 0], [9, 1, -1]]
    disguised = [[9, 55, -1], [6, 55, 0], [9, 31, -1], [8, 0, 55], [3, 55, 31]]  # 1 -> 55, 2 -> 31, shuffled
    lines = [json.dumps({"id": f"r{k}", "doors": doors}) for k, doors in enumerate([base, disguised, base])]
    path = write_mixed(tmp_path / "same.jsonl", lines)
    calls = []
    real = nonary.solve_parsed
    monkeypatch.setattr(nonary, "solve_parsed", lambda doors, timeout: calls.append(doors) or real(doors, timeout))
    answers, errors = run_all(NonaryJob(str(path)))
    assert len(calls) == 1 and not errors["id"]
    expected = brute_force(base)
    assert answers["escaped"] == [expected] * 3
    for doors, plan in zip([base, disguised, base], answers["plan"]):
        assert verify_plan(doors, json.loads(plan)) == expected


def test_record_timeout_becomes_an_error_row_naming_the_record(tmp_path, monkeypatch):

    lines = [json.dumps({"id": "easy", "doors": [[9, 0, -1]]}), json.dumps({"id": "hard", "doors": NONARY_HARD[1][0]})]
    path = write_mixed(tmp_path / "hard.jsonl", lines)
    answers, errors = run_all(NonaryJob(str(path), record_timeout=1e-6))
    assert answers["id"] == ["easy"]
    assert errors["id"] == ["hard"] and errors["line"] == [2]
    assert "time budget of 1e-06 s" in errors["error"][0] and "--record-timeout" in errors["error"][0]


def test_parquet_input(tmp_path):
    graphs = generate(30, rooms=3, doors=6, seed=9, cycles=0.4, parallel=0.3)
    ids = [f"p{k}" for k in range(30)]
    path = tmp_path / "doors.parquet"
    pq.write_table(pa.table({"id": ids, "doors": pa.array(graphs, type=pa.list_(pa.list_(pa.int64())))}), path)
    answers, errors = run_all(NonaryJob(str(path), records_per_shard=7))
    assert not errors["id"] and answers["id"] == ids and answers["line"] == list(range(1, 31))
    assert answers["escaped"] == [brute_force(g) for g in graphs]


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="records_per_shard"):
        NonaryJob("x.jsonl", records_per_shard=0)
    with pytest.raises(ValueError, match="max_doors"):
        NonaryJob("x.jsonl", max_doors=0)
    with pytest.raises(ValueError, match="record_timeout"):
        NonaryJob("x.jsonl", record_timeout=0)


def test_generate_command_writes_jsonl_and_parquet(tmp_path):
    from batchenum.jobs.generate import GenerateDoorGraphs

    for name in ("g.jsonl", "g.parquet"):
        out = tmp_path / name
        assert GenerateDoorGraphs(count=12, rooms=3, doors=7, seed=5, out=str(out)).run() == 0
        answers, errors = run_all(NonaryJob(str(out)))
        assert len(answers["id"]) == 12 and not errors["id"]
        assert answers["id"][0] == "g01"
    expected = generate(12, rooms=3, doors=7, seed=5, cycles=0.2, parallel=0.2, nines=0.25)
    rows = [json.loads(line) for line in (tmp_path / "g.jsonl").read_text().splitlines()]
    assert [row["doors"] for row in rows] == expected


def test_run_arguments_and_build_job(tmp_path):
    from batchenum.jobs import REGISTRY
    from batchenum.pipeline.cli import parse_job
    from batchenum.pipeline.errors import UsageError

    job = parse_job(REGISTRY, ["nonary", "--input", "x.jsonl", "--max-doors", "9", "--record-timeout", "2.5"])
    assert (job.max_doors, job.record_timeout, job.records_per_shard) == (9, 2.5, None)  # None: sized by the plan
    assert job.least_per_shard == nonary.RECORDS_PER_SHARD and job.params()["records_per_shard"] == "auto"
    with pytest.raises(UsageError, match="--record-timeout must be above 0, not 0"):
        parse_job(REGISTRY, ["nonary", "--input", "x.jsonl", "--record-timeout", "0"])


def test_timeouts_are_not_results_a_rerun_retries_only_them(tmp_path):
    """A timeout depends on the machine, not the record: the summary counts them and a rerun into
    the same folder searches only the timed-out records again (here with a budget that suffices)."""
    import io

    from batchenum.pipeline.execute import RunOptions, run_job
    from batchenum.pipeline.progress import Progress

    lines = [json.dumps({"id": f"easy{k}", "doors": [[9, 0, -1]]}) for k in range(3)]
    lines.insert(1, json.dumps({"id": "hard", "doors": NONARY_HARD[1][0]}))
    path = write_mixed(tmp_path / "hard.jsonl", lines)
    log = io.StringIO()

    def run(timeout):
        job = NonaryJob(str(path), records_per_shard=2, record_timeout=timeout)
        result = run_job(job, RunOptions(out=str(tmp_path / "out"), serial=True), Progress("nonary", stream=log))
        return job, result

    job, first = run(1e-6)
    assert job.summary(first.tables, first.totals).endswith(
        "(1 timed out: rerun into the same folder to retry only those)"
    )
    errors = pd.read_parquet(tmp_path / "out" / "nonary" / "errors")
    assert errors.id.tolist() == ["hard"] and "timed out" in errors.error[0]
    job, second = run(60)
    assert "shard s00000: 1 records whose outcome depended on the run (timeouts) computed again" in log.getvalue()
    assert second.reused == second.shards - 1  # all but the shard with the timeout
    answers = pd.read_parquet(tmp_path / "out" / "nonary" / "answers")
    assert answers.id.tolist() == ["easy0", "hard", "easy1", "easy2"]
    assert answers.escaped[1] == NONARY_HARD[1][1]
    assert len(pd.read_parquet(tmp_path / "out" / "nonary" / "errors")) == 0
    assert job.summary(second.tables, second.totals) == "nonary: read 4, answered 4, rejected 0"
