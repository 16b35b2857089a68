"""The partitioned catalogue is replaced as a whole on a local disk: one atomic folder swap, and a
driver killed before it leaves the old catalogue complete for the next run to replace."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from batchenum.jobs.palago import PalagoJob
from batchenum.pipeline.execute import code_version
from batchenum.pipeline.storage import OLD_MARK, TMP_MARK, Storage, _exchange, _replace_by_renames
from batchenum.pipeline.store import Provenance, ShardStore
from test_faults import cli


def catalogue_files(out: Path) -> dict[str, bytes]:
    folder = out / "palago" / "creatures"
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def leftovers(out: Path) -> list[Path]:
    return [path for path in out.rglob("*") if TMP_MARK in path.name]


def run_palago(out: Path, catalogue_max_n: int, *extra: str, env: dict | None = None, check: bool = True):
    return cli("run", "palago", "--max-n", "12", "--catalogue-max-n", str(catalogue_max_n), "--shards", "3",
               "--serial", "--out", str(out), *extra, env=env, check=check)


def test_a_driver_killed_before_the_swap_leaves_the_old_catalogue_and_the_rerun_cleans_up(tmp_path):
    reference = tmp_path / "reference"
    run_palago(reference, 9)
    out = tmp_path / "run"
    run_palago(out, 8)
    old = catalogue_files(out)
    killed = run_palago(out, 9, "--overwrite", env={"BATCHENUM_TEST_KILL_BEFORE_SWAP": "1"}, check=False)
    assert killed.returncode == -9  # SIGKILL, with the new catalogue complete beside the old one
    assert catalogue_files(out) == old and "n=9" not in {name.split("/")[0] for name in old}
    staged = [path for path in leftovers(out) if path.is_dir()]
    assert [path.name.startswith("creatures" + TMP_MARK + "new-") for path in staged] == [True]
    assert (staged[0] / "n=9" / "part-0.parquet").is_file()

    rerun = run_palago(out, 9)
    assert "temporary files left by an interrupted run" in rerun.stderr
    assert catalogue_files(out) == catalogue_files(reference)
    assert leftovers(out) == []


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
    staging = out / "palago" / f"creatures{TMP_MARK}new-1-abcd"
    staging.mkdir()
    (staging / "n=1").mkdir()
    os.rename(final, out / "palago" / f"creatures{OLD_MARK}1-abcd")  # the first rename, then a crash

    job = PalagoJob(12, 8, shards=3)
    store = ShardStore(Storage.at(str(out)), job, Provenance(job.name, code_version(job), job.params()))
    store.remove_temporaries()
    assert catalogue_files(out) == before and leftovers(out) == []

    staging.mkdir()
    (staging / "n=1").mkdir()
    _replace_by_renames(str(staging), str(final))  # the fallback itself, uninterrupted
    assert [path.name for path in final.iterdir()] == ["n=1"] and leftovers(out) == []
