"""One installed namespace: pipeline/, jobs/ and solvers/ install as batchenum.pipeline,
batchenum.jobs and batchenum.solvers, so a user's own modules of those names and ours never meet."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import textwrap
import tomllib

from helpers import CASES, assert_exit

REPO = pathlib.Path(__file__).resolve().parent.parent
FOLDERS = {
    "batchenum": "batchenum",
    "pipeline": "batchenum.pipeline",
    "jobs": "batchenum.jobs",
    "solvers": "batchenum.solvers",
}


def test_pyproject_installs_every_package_folder_under_batchenum():
    """The links batchenum/pipeline, batchenum/jobs and batchenum/solvers lead to the top-level
    folders, and package discovery (pyproject's packages.find) finds every package folder there."""
    from setuptools import find_packages

    for folder in ("pipeline", "jobs", "solvers"):
        link = REPO / "batchenum" / folder
        assert link.is_symlink() and os.readlink(link) == f"../{folder}", link
    assert tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"] == {
        "include": ["batchenum*"]
    }
    on_disk = {
        ".".join([FOLDERS[init.relative_to(REPO).parts[0]], *init.relative_to(REPO).parts[1:-1]])
        for folder in FOLDERS
        for init in (REPO / folder).rglob("__init__.py")
        if "__pycache__" not in init.parts
    }
    assert set(find_packages(str(REPO), include=["batchenum*"])) == on_disk


def _notebook_folder(root: pathlib.Path) -> pathlib.Path:
    """A user's folder with its own pipeline, jobs and solvers packages, as notebooks often have."""
    for name in ("pipeline", "jobs", "solvers"):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text(f"OWNER = 'the user'\nNAME = {name!r}\n")
    return root


USER_SCRIPT = textwrap.dedent("""
    import importlib.util, json, sys
    import pandas as pd
    import pipeline, jobs, solvers  # the user's own
    import batchenum

    grids = pd.read_json(sys.argv[1], lines=True)[["id", "grid"]]
    result = batchenum.run("dungeons", input=grids, out="out", workers=2)  # a private local Ray
    answers = result.tables["answers"].to_pandas()
    print(json.dumps({
        "users": [module.OWNER for module in (pipeline, jobs, solvers)],
        "ours": sorted({module.__name__.split(".")[0] for name, module in sys.modules.items()
                        if name.startswith("batchenum.") and module is not None}),
        "gold": dict(zip(answers.id, answers.gold.astype(int))),
        "files": [pipeline.__file__, batchenum.__file__],
    }))
""")


def test_a_notebook_folder_with_its_own_pipeline_runs_batchenum_on_ray(tmp_path):
    folder = _notebook_folder(tmp_path / "notebook")
    (folder / "analysis.py").write_text(USER_SCRIPT)
    done = subprocess.run(
        [sys.executable, "analysis.py", str(CASES / "dungeon_seed.jsonl")],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert_exit(done, 0)
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["users"] == ["the user"] * 3  # ours did not replace theirs in sys.modules
    assert seen["files"][0] == str(folder / "pipeline" / "__init__.py")
    assert seen["ours"] == ["batchenum"]
    expected = {row["id"]: row["answer"] for row in map(json.loads, open(CASES / "dungeon_seed.jsonl"))}
    assert seen["gold"] == expected


def test_the_command_runs_from_a_folder_with_its_own_jobs_and_pipeline(tmp_path):
    folder = _notebook_folder(tmp_path / "notebook")
    for command in (["batchenum"], [sys.executable, "-m", "batchenum"]):
        done = subprocess.run(
            [*command, "run", "palago", "--max-n", "8", "--serial", "--out", "out", "--json"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert_exit(done, 0)
        assert json.loads(done.stdout)["tables"]["creature_counts"]["rows"] == 8


def test_no_top_level_pipeline_jobs_or_solvers_is_installed(tmp_path):
    probe = "import importlib.util; print([importlib.util.find_spec(n) for n in ('pipeline', 'jobs', 'solvers')])"
    installed_only = {
        name: value for name, value in os.environ.items() if name != "PYTHONPATH"
    }  # a checkout on it would show
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=installed_only
    )
    assert_exit(done, 0)
    assert done.stdout.strip() == "[None, None, None]", done.stderr
