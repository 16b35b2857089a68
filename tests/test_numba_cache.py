"""The package's kernels are cached once per user, by their source (batchenum/numba_cache.py): a
second checkout or virtual environment of the same code loads them instead of compiling again
(issue 48: every new clone or venv compiled for minutes on a busy machine)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import REPO, assert_exit

pytestmark = pytest.mark.slow  # each test compiles the dungeon kernels in a child process (about 25 s)

# Warms the dungeon job (its kernels, and the JSONL readers'), then reports, per kernel of the
# dungeon solver, numba's cache hits and misses in this process, and where the module was read from.
_WARM = """
import json, sys, tempfile
from batchenum.jobs.dungeons import DungeonJob
from batchenum.solvers.dungeon import kernel
DungeonJob.warm(tempfile.mkdtemp())
stats = {name: getattr(kernel, name).stats for name in ("solve_kernel", "_prepare", "_search")}
print(json.dumps({"file": kernel.__file__, "hits": sum(sum(s.cache_hits.values()) for s in stats.values()),
                  "misses": sum(sum(s.cache_misses.values()) for s in stats.values())}))
"""


def a_checkout(where: Path) -> Path:
    """The package's files at another path, as another clone or install has them (no __pycache__)."""
    shutil.copytree(
        REPO / "batchenum", where / "batchenum", symlinks=False, ignore=shutil.ignore_patterns("__pycache__")
    )
    return where


def warm_in(checkout: Path, cache: Path, **env: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", _WARM],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=checkout,
        env={
            **{k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"},
            "PYTHONPATH": str(checkout),
            "XDG_CACHE_HOME": str(cache),
            **env,
        },
    )
    assert_exit(done, 0)
    return json.loads(done.stdout.splitlines()[-1])


def test_a_second_checkout_loads_the_kernels_the_first_compiled(tmp_path):
    cache = tmp_path / "cache"
    first = warm_in(a_checkout(tmp_path / "one"), cache)
    assert first["file"].startswith(str(tmp_path / "one")) and first["misses"] > 0 and first["hits"] == 0
    [folder] = (cache / "batchenum" / "numba").glob("numba-*/batchenum.solvers.dungeon.kernel-*")
    assert any(name.suffix == ".nbi" for name in folder.iterdir())
    second = warm_in(a_checkout(tmp_path / "two"), cache)
    assert second["file"].startswith(str(tmp_path / "two"))
    assert second["misses"] == 0 and second["hits"] > 0  # loaded, not compiled


def test_numba_cache_dir_when_set_is_where_the_kernels_go(tmp_path):
    mine = tmp_path / "mine"
    warm_in(a_checkout(tmp_path / "one"), tmp_path / "cache", NUMBA_CACHE_DIR=str(mine))
    assert list(mine.rglob("*.nbi")) and not (tmp_path / "cache" / "batchenum").exists()


def test_a_palago_run_compiles_once_while_it_plans_and_never_while_it_merges(tmp_path):
    """The merge's check of the symmetric counts compiled its own kernels (9.8 s measured in issue
    48); they are now compiled with the planning's, in one phase."""
    done = subprocess.run(
        [sys.executable, "-m", "batchenum", "run", "palago", "--max-n", "9", "--serial", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**{k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}, "XDG_CACHE_HOME": str(tmp_path / "c")},
    )
    assert_exit(done, 0)
    said = done.stderr.splitlines()
    merging = next(k for k, line in enumerate(said) if "merging shard outputs" in line)
    assert sum("kernels compiled in" in line for line in said) == 1, said
    assert not any("compiling kernels" in line or "kernels compiled" in line for line in said[merging:]), said


def test_a_cold_dungeon_run_says_one_compile_phase(tmp_path):
    """A dungeon shard compiles its parser, parses, then compiles its solver: a cold run said
    "kernels compiled" twice (issue 48); the two are one phase now (pipeline/progress.py)."""
    env = {**{k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}, "XDG_CACHE_HOME": str(tmp_path / "c")}
    batch = tmp_path / "dungeons.jsonl"
    generate = [sys.executable, "-m", "batchenum", "generate", "dungeons", "--count", "30000", "--seed", "1"]
    assert_exit(subprocess.run([*generate, "--out", str(batch)], capture_output=True, text=True, env=env), 0)
    run = [sys.executable, "-m", "batchenum", "run", "dungeons", "--input", str(batch), "--serial"]
    done = subprocess.run([*run, "--out", str(tmp_path)], capture_output=True, text=True, timeout=900, env=env)
    assert_exit(done, 0)
    said = done.stderr.splitlines()
    assert sum("compiling kernels (numba" in line for line in said) == 1, said
    assert sum("kernels compiled in" in line for line in said) == 1, said
    assert list((tmp_path / "c" / "batchenum" / "numba").rglob("*.nbi"))  # compiled into the empty cache
