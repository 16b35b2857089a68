"""Nothing outside the job folder is written, moved or deleted, and nothing through a link (issue 35,
item 1): real runs against real symbolic links and crafted store files, each checking that the
folder the link points at is byte for byte as it was, and that the message names the link."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest
from helpers import assert_exit, cli

from batchenum.pipeline.table_commit import MANIFEST_FILE

pytestmark = pytest.mark.skipif(os.name != "posix", reason="symbolic links as Linux makes them")


def tree(root: Path) -> dict[str, object]:
    """Every entry below ``root`` without following links: a file's bytes, a link's target, a
    folder's mode; the snapshot a victim folder must keep."""
    found: dict[str, object] = {}
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = Path(folder, name)
            key = str(path.relative_to(root))
            if path.is_symlink():
                found[key] = ("link", os.readlink(path))
            elif path.is_dir():
                found[key] = ("folder", path.stat().st_mode)
            else:
                found[key] = ("file", path.read_bytes())
    return found


def victim_folder(where: Path) -> Path:
    """A user's folder with files, one named like a temporary, and a subfolder."""
    victim = where / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "keep.txt").write_text("a user's file\n")
    (victim / "notes.tmp-1").write_text("named like a temporary, and not ours\n")
    (victim / "sub" / "deep.parquet").write_bytes(b"PAR1 not really\n")
    return victim


@pytest.fixture(scope="module")
def batch(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("batch") / "batch.jsonl"
    cli("generate", "dungeons", "--count", "300", "--height", "8", "--width", "8", "--seed", "1", "--out", str(path))
    return path


def run_args(batch: Path, out: Path) -> tuple[str, ...]:
    return ("run", "dungeons", "--input", str(batch), "--records-per-shard", "100", "--serial", "--out", str(out))


def tables(out: Path) -> dict[str, pd.DataFrame]:
    return {name: pd.read_parquet(out / "dungeons" / name) for name in ("answers", "errors")}


def test_a_temporary_mark_in_the_out_path_deletes_nothing(batch, tmp_path):
    out = tmp_path / "proj.tmp-2024" / "results"
    first = cli(*run_args(batch, out))
    kept = tree(out)
    rerun = cli(*run_args(batch, out))
    assert "temporary files" not in rerun.stderr and "(3 reused)" in rerun.stdout, rerun.stdout + rerun.stderr
    assert {key for key in tree(out)} == {key for key in kept}
    assert len(tables(out)["answers"]) == 300 and "dungeons" in first.stdout


def test_links_in_the_job_folder_are_not_followed_by_the_removal_of_temporaries(batch, tmp_path):
    out = tmp_path / "out"
    cli(*run_args(batch, out))
    victim, other = victim_folder(tmp_path / "a"), victim_folder(tmp_path / "b")
    before = tree(victim), tree(other)
    (out / "dungeons" / "archive.tmp-link").symlink_to(victim)
    (out / "dungeons" / "linked_folder").symlink_to(other)
    cli(*run_args(batch, out))
    assert (tree(victim), tree(other)) == before
    assert (out / "dungeons" / "archive.tmp-link").is_symlink() and (out / "dungeons" / "linked_folder").is_symlink()


def test_a_staging_folder_that_is_a_link_is_refused_by_name(batch, tmp_path):
    out = tmp_path / "out"
    cli(*run_args(batch, out))
    victim = victim_folder(tmp_path)
    before = tree(victim)
    (out / "dungeons" / "_staged").symlink_to(victim)
    rerun = cli(*run_args(batch, out), expect=None)
    assert_exit(rerun, 1)
    assert f"{out / 'dungeons' / '_staged'} is a symbolic link" in rerun.stderr, rerun.stderr
    assert tree(victim) == before


def test_a_table_that_is_a_link_is_refused_and_never_served(batch, tmp_path):
    out = tmp_path / "out"
    cli(*run_args(batch, out))
    committed = json.loads((out / "dungeons" / MANIFEST_FILE).read_text())
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    pd.DataFrame({"id": ["x", "y", "z"]}).to_parquet(foreign / "part-00000.parquet")
    before = tree(foreign)
    answers = out / "dungeons" / "answers"
    os.rename(answers, tmp_path / "moved-answers")
    answers.symlink_to(foreign)

    shown = cli("status", "--out", str(out))
    assert f"{answers} is a symbolic link" in shown.stdout and "not the table the manifest names" in shown.stdout, (
        shown.stdout
    )
    listed = json.loads(cli("status", "--out", str(out), "--json").stdout)["jobs"][0]
    assert any("answers" in problem and "symbolic link" in problem for problem in listed["problems"]), listed

    rerun = cli(*run_args(batch, out), expect=None)
    assert_exit(rerun, 1)
    assert f"{answers} is a symbolic link" in rerun.stderr and "Cannot call rmtree" not in rerun.stderr, rerun.stderr
    assert tree(foreign) == before
    assert json.loads((out / "dungeons" / MANIFEST_FILE).read_text()) == committed  # still the last good commit


def test_a_table_whose_parts_differ_from_the_manifest_is_reported_by_status(batch, tmp_path):
    out = tmp_path / "out"
    cli(*run_args(batch, out))
    part = out / "dungeons" / "answers" / "part-00000.parquet"
    pd.read_parquet(part).head(3).to_parquet(part)  # a real file, replaced behind the manifest's back
    shown = cli("status", "--out", str(out)).stdout
    assert "answers/: 3 rows" in shown and "the manifest says 300" in shown, shown


def test_cleanup_refuses_a_shard_store_that_is_a_link(batch, tmp_path):
    out = tmp_path / "out"
    cli(*run_args(batch, out))
    victim = victim_folder(tmp_path)
    before = tree(victim)
    shards = out / "dungeons" / "_shards"
    os.rename(shards, tmp_path / "real-shards")
    shards.symlink_to(victim)
    shown = cli("status", "--out", str(out)).stdout
    assert f"{shards} is a symbolic link" in shown, shown
    cleaned = cli("cleanup", "--out", str(out), expect=None)
    assert_exit(cleaned, 1)
    assert f"{shards} is a symbolic link" in cleaned.stderr and "removed" not in cleaned.stdout, (
        cleaned.stdout + cleaned.stderr
    )
    assert tree(victim) == before and shards.is_symlink()


def test_cleanup_reports_the_files_it_removed(batch, tmp_path):
    out = tmp_path / "out"
    cli(*run_args(batch, out))
    shards = out / "dungeons" / "_shards"
    size = sum(path.stat().st_size for path in shards.rglob("*") if path.is_file() and path.stat().st_nlink == 1)
    cleaned = cli("cleanup", "--out", str(out))
    assert f"dungeons: removed 6 shard files ({size:,} bytes freed)" in cleaned.stdout, cleaned.stdout
    assert not shards.exists()


def test_a_link_inside_the_shard_store_is_refused_by_name(batch, tmp_path):
    out = tmp_path / "out"
    cli(*run_args(batch, out))
    victim = victim_folder(tmp_path)
    before = tree(victim)
    table = out / "dungeons" / "_shards" / "errors"
    os.rename(table, tmp_path / "real-errors")
    table.symlink_to(victim)
    rerun = cli(*run_args(batch, out), expect=1)
    assert f"{table} is a symbolic link" in rerun.stderr, rerun.stdout + rerun.stderr
    cleaned = cli("cleanup", "--out", str(out), expect=1)
    assert f"{table} is a symbolic link" in cleaned.stderr, cleaned.stdout + cleaned.stderr
    assert tree(victim) == before


def test_a_shard_file_that_is_a_link_is_refused_by_name(batch, tmp_path):
    out = tmp_path / "out"
    cli(*run_args(batch, out))
    victim = victim_folder(tmp_path)
    target = victim / "sub" / "deep.parquet"
    shard = out / "dungeons" / "_shards" / "answers" / "s00001.parquet"
    os.replace(shard, target)  # a real shard file, now in the user's folder
    before = tree(victim)
    shard.symlink_to(target)
    rerun = cli(*run_args(batch, out), expect=1)
    assert f"{shard} is a symbolic link" in rerun.stderr, rerun.stdout + rerun.stderr
    assert tree(victim) == before


def test_a_crafted_manifest_cannot_move_a_folder_from_outside(batch, tmp_path):
    out = tmp_path / "deep" / "er" / "out"
    cli(*run_args(batch, out))
    victim = tmp_path / "victim8"
    (victim / "secret_stuff").mkdir(parents=True)
    (victim / "secret_stuff" / "key.txt").write_text("secret\n")
    before = tree(victim)
    path = out / "dungeons" / MANIFEST_FILE
    crafted = json.loads(path.read_text())
    crafted.update(run_id="../../../../victim8", state="committing")
    crafted["tables"]["secret_stuff"] = {"path": "secret_stuff/", "rows": 0, "bytes": 0, "parts": []}
    path.write_text(json.dumps(crafted))
    for command in (("cleanup", "--out", str(out)), run_args(batch, out)):
        result = cli(*command, expect=None)
        assert_exit(result, 1)
        assert f"{path} is damaged" in result.stderr and "run id" in result.stderr, result.stderr
        assert tree(victim) == before and not (out / "dungeons" / "secret_stuff").exists()


@pytest.mark.slow  # minutes of CPU on a loaded machine: an end-to-end run
def test_a_manifest_naming_a_table_outside_the_job_folder_is_damaged(batch, tmp_path):
    out = tmp_path / "out"
    cli(*run_args(batch, out))
    manifest = out / "dungeons" / MANIFEST_FILE
    good = json.loads(manifest.read_text())
    for path in ("../../escape/", "/etc/", "answers/../../x/", "_shards/", "answers.tmp-1-abcdef12/", "errors/"):
        crafted = json.loads(json.dumps(good))
        crafted["tables"]["answers"]["path"] = path
        manifest.write_text(json.dumps(crafted))
        cleaned = cli("cleanup", "--out", str(out), expect=1)
        assert f"{manifest} is damaged" in cleaned.stderr, (path, cleaned.stderr)
    assert (out / "dungeons" / "_shards").is_dir()
