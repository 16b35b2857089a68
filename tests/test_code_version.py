"""The code version is a hash of every source file of the installed packages plus the numba, numpy
and pyarrow versions, computed where each shard runs: a node whose workers import a modified copy
of a solver module refuses to commit, with an error naming it."""

from __future__ import annotations

import os
import shutil
import subprocess

import clusters
import pytest
from helpers import REPO, assert_exit, cli_command

from batchenum.jobs.palago import PalagoJob
from batchenum.pipeline.codeversion import code_version


def test_code_version_covers_every_package_and_the_libraries():
    version = code_version(PalagoJob(10))
    assert version.startswith("2+") and len(version.split("+")[1]) == 16
    assert code_version(PalagoJob(12)) == version  # parameters are not code


@pytest.mark.slow
def test_a_node_with_modified_solver_code_refuses_naming_itself(tmp_path):
    copy = tmp_path / "other_code"
    for package in ("batchenum", "jobs", "pipeline", "solvers"):  # a checkout: batchenum/ finds the rest
        shutil.copytree(
            REPO / package,
            copy / package,
            symlinks=True,
            ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"),
        )
    shutil.copy(REPO / "pyproject.toml", copy)
    with open(copy / "solvers" / "palago" / "canonical.py", "a") as handle:
        handle.write("\n# a local edit on one node\n")
    temp_dir, env = f"/tmp/bv{os.getpid()}", clusters.token_env()
    try:
        # the head has no CPU, so every shard runs on the node with the modified copy
        address = clusters.start_head(temp_dir, env, "--num-cpus", "0", "--include-dashboard", "false")
        node_env = {**env, "PYTHONPATH": str(copy)}
        clusters.join_node(address, node_env)
        clusters.wait_for_nodes(address, env, 2)
        result = subprocess.run(
            cli_command("run", "palago", "--max-n", "9", "--out", str(tmp_path / "out"), "--address", address),
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
            cwd=tmp_path,
        )  # Ray puts the driver's folder first on workers' paths
    finally:
        clusters.stop(temp_dir)
    assert_exit(result, 1)
    message = result.stderr.strip().splitlines()[-1]
    assert "runs other code than the driver" in message and "Ray node" in message
    assert not (tmp_path / "out" / "palago" / "_shards" / "partial_counts").exists()


def test_code_change_names_the_part_of_the_code_version_that_differs():
    from batchenum.pipeline.codeversion import code_change

    assert code_change("1+aaaa", "2+aaaa") == "the job's declared version (1 -> 2)"
    assert code_change("1+aaaa", "1+bbbb").startswith("the installed code it runs")
    assert code_change("1+aaaa+cccc", "1+aaaa+dddd") == "the job's file or a module it imports"
    assert code_change(None, "1+aaaa") == "the job's declared version (none -> 1)"
