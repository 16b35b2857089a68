"""The tables of a run are committed together: a finish killed between two tables leaves a manifest
saying so (status shows it), and the next run or `batchenum cleanup` completes the commit; a folder
table is swapped in whole on a local disk."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from helpers import assert_exit, cli

from batchenum.jobs.palago import PalagoJob
from batchenum.pipeline.execute import code_version
from batchenum.pipeline.faults import KILL_BEFORE_COMMIT, KILL_BETWEEN_TABLES
from batchenum.pipeline.parquet_format import Provenance
from batchenum.pipeline.shard_store import ShardStore
from batchenum.pipeline.storage import OLD_MARK, TMP_MARK, Storage, _exchange, _replace_by_renames
from batchenum.pipeline.table_commit import MANIFEST_FILE, StagedPart, StagedTables, part_groups


def catalogue_files(out: Path) -> dict[str, bytes]:
    folder = out / "palago" / "creatures"
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def leftovers(out: Path) -> list[Path]:
    return [path for path in out.rglob("*") if TMP_MARK in path.name]


def run_palago(out: Path, catalogue_max_n: int, *extra: str, env: dict | None = None, expect: int | None = 0):
    return cli(
        "run",
        "palago",
        "--max-n",
        "12",
        "--catalogue-max-n",
        str(catalogue_max_n),
        "--shards",
        "3",
        "--serial",
        "--out",
        str(out),
        *extra,
        env=env,
        expect=expect,
    )


def manifest(out: Path, job: str) -> dict:
    return json.loads((out / job / MANIFEST_FILE).read_text())


def test_a_finish_killed_between_two_tables_is_completed_by_the_next_run(tmp_path):
    reference = tmp_path / "reference"
    run_palago(reference, 9)
    out = tmp_path / "run"
    run_palago(out, 8)
    old_run = manifest(out, "palago")["run_id"]
    # SIGKILL after the counts were moved into place, before the catalogue
    run_palago(out, 9, "--overwrite", env={KILL_BETWEEN_TABLES: "1"}, expect=-9)
    record = manifest(out, "palago")
    assert record["state"] == "committing" and record["run_id"] != old_run
    assert record["params"] == {"max_n": 12, "catalogue_max_n": 9}
    shown = cli("status", "--out", str(out)).stdout
    assert f"UNFINISHED:  the tables are being replaced by run {record['run_id']}" in shown, shown

    rerun = run_palago(out, 9)
    assert f"completed the commit of run {record['run_id']}'s tables" in rerun.stderr
    assert catalogue_files(out) == catalogue_files(reference)
    assert manifest(out, "palago")["state"] == "committed" and not (out / "palago" / "_staged").exists()
    assert "UNFINISHED" not in cli("status", "--out", str(out)).stdout


def test_the_counts_markdown_and_plot_are_published_only_by_the_commit(tmp_path):
    out = tmp_path / "run"
    published = ("creature_counts.parquet", "creature_counts.md", "creature_counts.svg")
    cli("run", "palago", "--max-n", "10", "--serial", "--out", str(out))
    before = {name: (out / "palago" / name).read_bytes() for name in published}
    killed = cli(
        "run",
        "palago",
        "--max-n",
        "11",
        "--serial",
        "--overwrite",
        "--out",
        str(out),
        env={KILL_BEFORE_COMMIT: "1"},
        expect=None,
    )
    assert_exit(killed, -9)  # SIGKILL with the n = 11 tables and files staged, unnamed
    assert {name: (out / "palago" / name).read_bytes() for name in published} == before

    cli("run", "palago", "--max-n", "11", "--serial", "--overwrite", "--out", str(out))
    record = manifest(out, "palago")
    assert record["files"] == ["creature_counts.md", "creature_counts.svg"] and record["state"] == "committed"
    markdown = (out / "palago" / "creature_counts.md").read_text()
    assert "--max-n 11" in markdown and "| 11 |" in markdown and "| 11 |" not in before["creature_counts.md"].decode()
    assert (out / "palago" / "creature_counts.svg").read_bytes() != before["creature_counts.svg"]
    assert not (out / "palago" / "_staged").exists() and leftovers(out) == []


def test_answers_and_errors_of_a_changed_input_are_committed_together(tmp_path):
    batch = tmp_path / "batch.jsonl"
    cli("generate", "dungeons", "--count", "300", "--height", "8", "--width", "8", "--seed", "1", "--out", str(batch))
    lines = batch.read_text().splitlines(keepends=True)
    out = tmp_path / "run"
    run = ("run", "dungeons", "--input", str(batch), "--records-per-shard", "100", "--serial", "--out", str(out))
    cli(*run)
    old = {name: pd.read_parquet(out / "dungeons" / name) for name in ("answers", "errors")}
    old_input = manifest(out, "dungeons")["input"]
    batch.write_text("".join(lines[:100]) + "not json\n" * 5 + "".join(lines[105:]))  # 5 records now rejected
    cli(*run, env={KILL_BETWEEN_TABLES: "1"}, expect=-9)
    record = manifest(out, "dungeons")
    assert record["state"] == "committing" and record["tables"]["errors"]["rows"] == 5
    assert record["input"] and old_input and record["input"] != old_input  # the input is part of the identity
    assert "UNFINISHED" in cli("status", "--out", str(out)).stdout

    cleaned = cli("cleanup", "--out", str(out))  # completes the commit first, then frees the shards
    assert "dungeons: removed 6 shard files" in cleaned.stdout
    assert manifest(out, "dungeons")["state"] == "committed"
    answers, errors = (pd.read_parquet(out / "dungeons" / name) for name in ("answers", "errors"))
    assert len(answers) + len(errors) == 300 and len(errors) == 5 and len(old["errors"]) == 0
    fresh = tmp_path / "fresh"
    cli("run", "dungeons", "--input", str(batch), "--records-per-shard", "100", "--serial", "--out", str(fresh))
    for name, table in (("answers", answers), ("errors", errors)):
        pd.testing.assert_frame_equal(table, pd.read_parquet(fresh / "dungeons" / name))
    rerun = cli(*run)  # after cleanup: every shard computed again, the same tables
    assert "(0 reused)" in rerun.stdout
    pd.testing.assert_frame_equal(answers, pd.read_parquet(out / "dungeons" / "answers"))


def test_the_swap_exchanges_two_folders_at_once_on_this_file_system(tmp_path):
    old, new = tmp_path / "table", tmp_path / f"table{TMP_MARK}new"
    (old / "n=1").mkdir(parents=True)
    (old / "n=1" / "part-0.parquet").write_text("old")
    (new / "n=2").mkdir(parents=True)
    (new / "n=2" / "part-0.parquet").write_text("new")
    if not _exchange(str(new), str(old)):
        pytest.skip("this kernel or file system has no renameat2(RENAME_EXCHANGE)")
    assert (old / "n=2" / "part-0.parquet").read_text() == "new"
    assert (new / "n=1" / "part-0.parquet").read_text() == "old"

    Storage.at(str(tmp_path)).replace_folder(str(new), str(old))  # and back, deleting the other
    assert os.listdir(tmp_path) == ["table"] and (old / "n=1" / "part-0.parquet").read_text() == "old"


def test_the_two_rename_fallback_is_undone_after_a_crash_between_its_renames(tmp_path):
    out = tmp_path / "run"
    run_palago(out, 8)
    before = catalogue_files(out)
    final = out / "palago" / "creatures"
    staging = out / "palago" / f"creatures{TMP_MARK}1-abcdef12"  # names as the store gives them
    staging.mkdir()
    (staging / "n=1").mkdir()
    os.rename(final, out / "palago" / f"creatures{OLD_MARK}1-abcdef12")  # the first rename, then a crash

    job = PalagoJob(12, 8, shards=3)
    store = ShardStore(Storage.at(str(out)), job, Provenance(job.name, code_version(job), job.params()))
    store.remove_temporaries()
    assert catalogue_files(out) == before and leftovers(out) == []

    staging.mkdir()
    (staging / "n=1").mkdir()
    _replace_by_renames(str(staging), str(final))  # the fallback itself, uninterrupted
    assert [path.name for path in final.iterdir()] == ["n=1"] and leftovers(out) == []


def test_shards_are_grouped_into_parts_of_at_least_part_rows_in_plan_order():
    rows = {"s0": 5, "s1": 0, "s2": 7, "s3": 3, "s4": 0}
    assert part_groups(list(rows), rows, part_rows=8) == [["s0", "s1", "s2"], ["s3", "s4"]]
    assert part_groups(list(rows), rows, part_rows=3) == [["s0"], ["s1", "s2"], ["s3", "s4"]]
    assert part_groups(["s0", "s1"], {}, part_rows=8) == [["s0", "s1"]]  # no rows: one (empty) part


def test_parts_whose_keys_do_not_follow_one_another_are_an_error_not_a_table(tmp_path):
    from batchenum.pipeline.batch import ERRORS_TABLE
    from batchenum.pipeline.job import Job
    from batchenum.pipeline.parquet_format import StoreError

    class Errors(Job):
        name, tables, streamed_tables = "errs", (ERRORS_TABLE,), ("errors",)

    staged = StagedTables(ShardStore(Storage.at(str(tmp_path)), Errors(), Provenance("errs", "1", {})))
    a, b = "a.jsonl", "b.jsonl"  # the key is (file, line): lines restart in each file

    def part(first, last):
        return StagedPart("errors/part-00000.parquet", 3, 1, ["s0"], first, last)

    staged.add_parts("errors", [part((a, 1), (a, 3)), part((b, 1), (b, 9))])
    with pytest.raises(
        StoreError, match=r"'errors': file/line = \('a.jsonl', 3\) in shards s0..s0 repeats or comes out"
    ):
        staged.add_parts("errors", [part((a, 1), (a, 3)), part((a, 3), (b, 9))])


def test_on_s3_a_finish_killed_between_tables_is_completed_by_cleanup(s3_server, new_bucket, tmp_path):
    batch = tmp_path / "batch.jsonl"
    cli("generate", "dungeons", "--count", "300", "--height", "8", "--width", "8", "--seed", "2", "--out", str(batch))
    out = f"s3://{new_bucket}/run"
    run = ("run", "dungeons", "--input", str(batch), "--records-per-shard", "100", "--serial", "--out", out)
    cli(*run, env=s3_server)
    lines = batch.read_text().splitlines(keepends=True)
    batch.write_text("".join(lines[:10]) + "not json\n" * 3 + "".join(lines[13:]))
    cli(*run, env={**s3_server, KILL_BETWEEN_TABLES: "1"}, expect=-9)
    shown = cli("status", "--out", out, env=s3_server).stdout
    assert "UNFINISHED" in shown and "table:       answers/: 297 rows" in shown and "errors/: 0 rows" in shown
    cli("cleanup", "--out", out, env=s3_server)
    shown = cli("status", "--out", out, env=s3_server).stdout
    assert "UNFINISHED" not in shown and "errors/: 3 rows in 1 part" in shown and "shard store" not in shown
