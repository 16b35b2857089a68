"""A job folder that is a link is refused (issue 45, item 2): another local user who can write to a
shared ``--out`` puts, in place of the job folder, a link to a folder of the user who runs the job.
Real runs and real links: a run, a run with ``--overwrite`` and ``cleanup`` each refuse, naming the
link, and the folder it points at is byte for byte as it was.  ``--out`` itself may be a link: it
is the user's own choice."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
from helpers import cli
from test_store_links import run_args, tree, victim_folder

import batchenum
from batchenum.pipeline.storage import LinkRefusedError

pytestmark = pytest.mark.skipif(os.name != "posix", reason="symbolic links as Linux makes them")


@pytest.fixture(scope="module")
def batch(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("batch") / "batch.jsonl"
    cli("generate", "dungeons", "--count", "200", "--height", "8", "--width", "8", "--seed", "3", "--out", str(path))
    return path


def linked_in_place(out: Path, name: str, target: Path) -> Path:
    """``out/name`` made a link to ``target``, as the other user does (the real folder moved away)."""
    folder = out / name
    if folder.exists():
        os.rename(folder, out / f"moved-{name}")
    folder.symlink_to(target)
    return folder


def refused(result, link: Path) -> bool:
    return result.returncode == 1 and f"{link} is a symbolic link" in result.stderr


def test_a_job_folder_linked_to_the_owner_s_other_results_is_refused_by_run_overwrite_and_cleanup(batch, tmp_path):
    shared, mine = tmp_path / "shared", tmp_path / "mine"
    cli(*run_args(batch, shared))
    cli(*run_args(batch, mine), "--records-per-shard", "50")  # other parameters: --overwrite would replace them
    before = tree(mine)
    link = linked_in_place(shared, "dungeons", mine / "dungeons")
    for command in (
        run_args(batch, shared),
        (*run_args(batch, shared), "--overwrite"),
        ("cleanup", "--out", str(shared)),
        ("cleanup", "--out", str(shared), "--job", "dungeons"),
    ):
        result = cli(*command, expect=None)
        assert refused(result, link), (command, result.stdout + result.stderr)
        assert tree(mine) == before, command
    assert link.is_symlink()


def test_a_link_planted_before_the_first_run_is_refused(batch, tmp_path):
    out = tmp_path / "shared"
    out.mkdir()
    victim = victim_folder(tmp_path)
    before = tree(victim)
    link = linked_in_place(out, "dungeons", victim)
    assert refused(cli(*run_args(batch, out), expect=None), link)
    assert tree(victim) == before


def test_cleanup_removes_nothing_anywhere_when_one_job_folder_is_a_link(batch, tmp_path):
    """Every folder is checked before any is cleaned: a link refuses the whole command."""
    out, mine = tmp_path / "shared", tmp_path / "mine"
    cli(*run_args(batch, out))
    cli(*run_args(batch, mine))
    (out / "other").mkdir()
    os.rename(out / "dungeons", out / "other" / "dungeons")  # a real job folder, one level down: not swept
    (out / "aaa").mkdir()
    before, kept = tree(mine), tree(out)
    link = linked_in_place(out, "dungeons", mine / "dungeons")
    result = cli("cleanup", "--out", str(out), expect=None)
    assert refused(result, link) and "removed" not in result.stdout, result.stdout + result.stderr
    assert tree(mine) == before and {k: v for k, v in tree(out).items() if k != "dungeons"} == kept


def test_an_inputs_folder_that_is_a_link_is_refused(tmp_path):
    out = tmp_path / "shared"
    out.mkdir()
    victim = victim_folder(tmp_path)
    before = tree(victim)
    link = linked_in_place(out, "_inputs", victim)
    frame = pd.DataFrame({"id": ["a"], "grid": [["@$"]]})
    with pytest.raises(LinkRefusedError, match=f"{link} is a symbolic link"):
        batchenum.run("dungeons", input=frame, out=str(out), serial=True)
    assert tree(victim) == before


def test_out_itself_may_be_a_link(batch, tmp_path):
    """The user's own choice, as documented: a run through it writes into the folder it names."""
    real = tmp_path / "disk" / "results"
    real.mkdir(parents=True)
    out = tmp_path / "results"
    out.symlink_to(real)
    done = cli(*run_args(batch, out))
    assert "dungeons" in done.stdout and (real / "dungeons" / "_manifest.json").is_file()
