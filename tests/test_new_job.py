"""docs/design.md's checklist is true: a job file added to jobs/ needs no edit anywhere else.

A copy of the repository gets a 29-line TreeJob in jobs/walks.py and nothing else; the fast tier's
registry tests (every registered job's parameters through the CLI and ``batchenum.run``) and
option-docs tests then run on that copy (it comes first on sys.path) and must pass, and the copy's
CLI runs the new job."""

from __future__ import annotations

import ast
import inspect
import os
import shutil
import subprocess
import sys

import pytest
from helpers import REPO

WALKS = '''"""Self-avoiding walks on the square lattice, counted by the tree skeleton."""

from batchenum.pipeline.job import Param
from batchenum.pipeline.skeletons import TreeJob

STEPS = ((1, 0), (-1, 0), (0, 1), (0, -1))


class Walks(TreeJob):
    """Count the self-avoiding walks of n steps from the origin."""

    name = "walks"
    version = "1"
    n = Param(int, default=6, low=1, high=12, help="steps of a walk")

    def root(self):
        return ((0, 0),)

    def children(self, walk):
        if len(walk) > self.n:
            return []
        x, y = walk[-1]
        return [walk + ((x + dx, y + dy),) for dx, dy in STEPS if (x + dx, y + dy) not in walk]

    def is_leaf(self, walk):
        return len(walk) == self.n + 1


JOB = Walks
'''

TESTS = ("test_registry.py", "test_option_docs.py")  # every registered job through the CLI and run()


def _copy_of_the_repository(target) -> None:
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        source, copy = REPO / name, target / name
        if not os.path.lexists(source):
            continue  # deleted in the working tree, not yet in git
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            os.symlink(os.readlink(source), copy)
        else:
            shutil.copy2(source, copy)


def test_job_modules_import_no_command_line():
    """A job module (one that declares JOB) imports the job contract, its parameters and its solver;
    the CLI, the pipeline's top floor, is for command modules."""
    jobs = [path for path in (REPO / "jobs").glob("*.py") if "\nJOB = " in path.read_text()]
    assert len(jobs) >= 3
    for path in jobs:
        imported = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
            elif isinstance(node, ast.Import):
                imported |= {alias.name for alias in node.names}
        assert "batchenum.pipeline.cli" not in imported, path.name


def test_every_run_shard_has_the_base_signature():
    from batchenum.jobs import REGISTRY
    from batchenum.pipeline.job import Job
    from batchenum.pipeline.skeletons import RecordJob, TreeJob

    base = inspect.signature(Job.run_shard)
    classes = [REGISTRY.job_class(name) for name in REGISTRY.names()] + [RecordJob, TreeJob]
    for job_class in classes:
        for klass in job_class.__mro__:
            if "run_shard" in vars(klass):
                assert inspect.signature(vars(klass)["run_shard"]) == base, klass.__qualname__


@pytest.mark.slow
def test_a_job_file_alone_adds_a_job(tmp_path):
    if not (REPO / ".git").exists():
        pytest.skip("needs the repository's git index to copy it")
    copy = tmp_path / "repo"
    _copy_of_the_repository(copy)
    (copy / "jobs" / "walks.py").write_text(WALKS)
    env = {**os.environ, "PYTHONPATH": str(copy)}
    ran = subprocess.run(
        [sys.executable, "-m", "batchenum", "run", "walks", "--n", "5", "--serial", "--out", str(tmp_path / "out")],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert ran.returncode == 0, ran.stderr
    assert "walks: 284 leaves" in ran.stdout  # A001411(5)
    suite = subprocess.run(
        [sys.executable, "-m", "pytest", *(f"tests/{name}" for name in TESTS), "-m", "not integration", "-q"]
        + ["-p", "no:cacheprovider"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert suite.returncode == 0, suite.stdout[-3000:]
    assert " passed" in suite.stdout
