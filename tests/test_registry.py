"""One registry of jobs: every parameter behaves the same in the CLI and in batchenum.run; a puzzle
is added with one job file and nothing else; an installed package adds a job through the
entry-point group ``batchenum.jobs``; contract mistakes are named."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pandas as pd
import pytest
from helpers import CASES, REPO, assert_exit, cli_command

import batchenum
from batchenum.jobs import REGISTRY
from batchenum.pipeline.cli import _one_job, parse_job
from batchenum.pipeline.errors import PipelineError, UsageError
from batchenum.pipeline.job import Column, Job, Shard, ShardResult, TableSpec
from batchenum.pipeline.params import INPUTS, REQUIRED, spelled


def _bad_values(param) -> list:
    """Values each declared bound or choice must refuse."""
    if param.choices:
        return ["no-such-choice"]
    bad = []
    if param.type in (int, float):
        bad.append("x")
        if param.low is not None:
            bad.append(param.low - 1)
        if param.above is not None:
            bad.append(param.above)
        if isinstance(param.high, (int, float)):
            bad.append(param.high + 1)
    return bad


@pytest.mark.parametrize("name", REGISTRY.names())
def test_every_parameter_has_one_name_default_bound_and_message_in_the_cli_and_in_run(name, tmp_path):
    job_class = REGISTRY.job_class(name)
    needed = {
        p: str(CASES / "dungeon_seed.jsonl") for p, param in job_class.declared_params().items() if param.type is INPUTS
    }
    argv = [x for p, v in needed.items() for x in (spelled(p, cli=True), v)]
    from_cli, from_python = parse_job(REGISTRY, [name, *argv]), job_class.create(**needed)
    assert from_cli.params() == from_python.params()
    for p, param in job_class.declared_params().items():
        if param.type is not INPUTS:  # (a list of one path on the command line; params() record both alike)
            assert getattr(from_cli, p) == getattr(from_python, p), p  # the same defaults
        if param.default is not REQUIRED and param.type is not INPUTS:
            assert getattr(from_python, p) == param.default or p == "checkpoint_interval", p
        for value in _bad_values(param):
            with pytest.raises(UsageError) as python:
                job_class.create(**needed, **{p: value})
            with pytest.raises(UsageError) as cli:
                parse_job(REGISTRY, [name, *argv, spelled(p, cli=True), str(value)])
            # the same words, each naming the parameters as its caller writes them
            assert cli.value.template == python.value.template, (p, value)
            assert str(python.value).startswith(f"{p} ") and str(cli.value).startswith(f"{spelled(p, cli=True)} ")


TOY_JOB_FILE = textwrap.dedent('''
    """Polyomino cells: the area and perimeter of every shape of a batch."""

    from batchenum.pipeline.job import Column, Param
    from batchenum.pipeline.skeletons import RecordJob


    class CellsJob(RecordJob):
        """Measure the area and perimeter of every polyomino of a batch."""

        name = "cells"
        version = "1"
        field = "cells"
        answer_columns = (Column("area", "int64"), Column("perimeter", "int64"))
        max_area = Param(int, default=100, low=1, help="reject larger shapes")

        def answer(self, cells):
            shape = {tuple(cell) for cell in cells}
            if not shape or len(shape) > self.max_area:
                raise ValueError(f"area {len(shape)} is not between 1 and {self.max_area}")
            edges = sum((x + dx, y + dy) not in shape for x, y in shape for dx, dy in ((1, 0), (-1, 0), (0, 1), (0, -1)))
            return {"area": len(shape), "perimeter": edges}


    JOB = CellsJob
''')


@pytest.mark.integration  # a CLI run that starts a private local Ray
def test_a_puzzle_is_one_job_file_run_from_the_cli_and_python(tmp_path):
    copy = tmp_path / "checkout"
    for package in ("batchenum", "jobs", "pipeline", "solvers"):
        shutil.copytree(
            REPO / package,
            copy / package,
            symlinks=True,  # batchenum/jobs stays a link to jobs/
            ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"),
        )
    shutil.copy(REPO / "pyproject.toml", copy)
    (copy / "jobs" / "cells.py").write_text(TOY_JOB_FILE)  # the one file added
    batch = tmp_path / "shapes.jsonl"
    batch.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"id": "mono", "cells": [[0, 0]]},
                {"id": "L", "cells": [[0, 0], [0, 1], [1, 1]]},
                {"id": "none", "cells": []},
            ]
        )
        + "\n"
    )
    env = {**os.environ, "PYTHONPATH": str(copy)}
    done = subprocess.run(
        cli_command("run", "cells", "--input", str(batch), "--serial", "--out", str(tmp_path / "a"), "--json"),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert_exit(done, 0)
    assert json.loads(done.stdout)["summary"] == "cells: read 3, answered 2, rejected 1"
    listed = subprocess.run(
        cli_command("run", "--help"), capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )
    assert "cells Measure the area and perimeter of every polyomino of a batch" in " ".join(listed.stdout.split())
    script = (
        f"import batchenum; r = batchenum.run('cells', input={str(batch)!r}, out={str(tmp_path / 'b')!r}, "
        "workers=2); print(r.tables['answers'].to_pandas()[['id', 'area', 'perimeter']].to_dict('list'))"
    )
    python = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path
    )
    assert_exit(python, 0)
    assert python.stdout.strip().splitlines()[-1] == "{'id': ['mono', 'L'], 'area': [1, 3], 'perimeter': [4, 8]}"


def test_an_installed_package_adds_a_job_through_the_entry_point_group(tmp_path):
    package = tmp_path / "pkg"
    (package / "toyqueens").mkdir(parents=True)
    (package / "toyqueens" / "__init__.py").write_text(
        (REPO / "examples" / "queens.py").read_text().replace('name = "queens"', 'name = "toyqueens"')
    )
    (package / "pyproject.toml").write_text(
        textwrap.dedent("""
        [build-system]
        requires = ["setuptools>=68"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "toyqueens"
        version = "0.1"

        [project.entry-points."batchenum.jobs"]
        toyqueens = "toyqueens:Queens"
    """)
    )
    pip = [sys.executable, "-m", "pip", "-q"]
    installed = subprocess.run(
        [*pip, "install", "--no-deps", str(package)], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert_exit(installed, 0)
    try:
        done = subprocess.run(
            cli_command("run", "toyqueens", "--n", "6", "--serial", "--out", str(tmp_path / "o"), "--json"),
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert_exit(done, 0)
        assert json.loads(done.stdout)["summary"] == "toyqueens: 4 leaves, 153 nodes, 1 distinct by key"
        helped = subprocess.run(cli_command("run", "--help"), capture_output=True, text=True, timeout=300)
        assert "toyqueens" in helped.stdout
        api = subprocess.run(
            [sys.executable, "-c", "import batchenum; print(batchenum.job_names())"],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert "'toyqueens'" in api.stdout
    finally:
        subprocess.run([*pip, "uninstall", "-y", "toyqueens"], capture_output=True, timeout=300)


class _Broken(Job):
    name = "broken"
    tables = (TableSpec("t", (Column("k", "int64"), Column("cells", "list<int64>"))),)

    def __init__(self, rows=None, ids=("a", "b"), params=None):
        self.rows, self.ids, self._params = rows, ids, params

    def extra_params(self):
        return self._params or {}

    def plan(self, context):
        return [Shard(i) for i in self.ids]

    def run_shard(self, shard, context=None):
        return ShardResult({"t": self.rows})


@pytest.mark.parametrize(
    "job, says",
    [
        (
            _Broken({"k": [1, 0.5], "cells": [[1], [2]]}),
            "shard a: table 't', column 'k' is declared int64 but row 2 holds 0.5 (float): Arrow would truncate it",
        ),
        (
            _Broken({"k": [1], "cells": ["12"]}),
            "shard a: table 't', column 'cells' is declared list<int64> but row 1 holds '12' (str): give each row a list",
        ),
        (_Broken({"k": [1], "cells": [[1]]}, ids=("a", "a")), "plan() gives the shard id 'a' twice"),
        (
            _Broken({"k": [1], "cells": [[1]]}, params={"n": __import__("numpy").int64(3)}),
            "params() gives n = np.int64(3) (int64), which is not JSON",
        ),
    ],
)
def test_contract_mistakes_name_the_job_s_mistake(job, says, tmp_path):
    with pytest.raises(PipelineError, match=".*".join(map(__import__("re").escape, says.split("(", 1)[:1]))) as raised:
        batchenum.run(job, out=str(tmp_path), serial=True)
    assert says in str(raised.value)


def test_a_malformed_dataframe_column_is_one_error_naming_it(tmp_path):
    frame = pd.DataFrame({"id": ["a", "b", "c"], "grid": [["@$"], ["@"], "@$"]})
    with pytest.raises(UsageError, match="input column 'grid' mixes kinds of values: row 2 holds '@\\$'"):
        batchenum.run("dungeons", input=frame, out=str(tmp_path), serial=True)


def test_the_job_contract_sits_below_the_cli_and_the_executor():
    probe = (
        "import sys, batchenum.pipeline.job, batchenum.pipeline.batch, batchenum.pipeline.skeletons, "
        "batchenum.jobs.palago_transfer; print(sorted(m for m in ('argparse', 'batchenum.pipeline.cli', "
        "'batchenum.pipeline.execute', 'batchenum.jobs.palago') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd="/")
    assert_exit(done, 0)
    assert done.stdout.strip() == "[]", done.stderr


def test_a_command_line_for_one_job_imports_no_other_job():
    """``run dungeons ...`` builds its parser from the dungeons module alone (the others' modules,
    and the kernels they compile, cost every run time); ``run --help`` still lists every job."""
    probe = (
        "import sys; from batchenum.jobs import REGISTRY; from batchenum.pipeline.cli import build_parser, _one_job; "
        "argv = ['run', 'dungeons', '--input', 'x.jsonl', '--max-cells', '5000']; "
        "args = build_parser(REGISTRY, 'batchenum', only_job=_one_job(REGISTRY, argv)).parse_args(argv); "
        "print(args.max_cells, sorted(m for m in sys.modules if m.startswith('batchenum.jobs.')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd="/")
    assert_exit(done, 0)
    assert done.stdout.split() == ["5000", "['batchenum.jobs.dungeons']"], done.stderr
    assert _one_job(REGISTRY, ["run", "--help"]) == _one_job(REGISTRY, ["run", "no-such-job"]) == ""
    assert _one_job(REGISTRY, ["status", "dungeons"]) == ""
    assert _one_job(REGISTRY, ["run", "examples/queens.py:Queens"]) == "examples/queens.py:Queens"


def _package(where, dist: str, modules: dict[str, str], entry_points: dict[str, str]):
    """A source tree of a distribution ``dist`` with these modules and ``batchenum.jobs`` entry
    points, to install with pip."""
    folder = where / dist
    for module, text in modules.items():
        (folder / module).mkdir(parents=True)
        (folder / module / "__init__.py").write_text(text)
    lines = "\n".join(f'{name} = "{value}"' for name, value in entry_points.items())
    (folder / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{dist}"\nversion = "0.1"\n\n[project.entry-points."batchenum.jobs"]\n{lines}\n'
    )
    return folder


def test_a_broken_or_competing_installed_job_is_one_warning_and_every_other_job_works(tmp_path):
    queens = (REPO / "examples" / "queens.py").read_text().replace('name = "queens"', 'name = "toyqueens"')
    packages = [
        # one job that cannot be imported, and one named like a built-in (never imported)
        _package(
            tmp_path,
            "zz-broken-jobs",
            {"zzbroken": ""},
            {
                "broken": "zzbroken.missing:Broken",
                "dungeons": "zzbroken.shadow:Dungeons",
                "misnamed": "toyqueens_a:Queens",  # a job named toyqueens: it would write in toyqueens/
            },
        ),
        # two packages registering one name: the first by distribution name wins
        _package(tmp_path, "toyqueens-b", {"toyqueens_b": queens}, {"toyqueens": "toyqueens_b:Queens"}),
        _package(tmp_path, "toyqueens-a", {"toyqueens_a": queens}, {"toyqueens": "toyqueens_a:Queens"}),
    ]
    pip = [sys.executable, "-m", "pip", "-q"]
    installed = subprocess.run(
        [*pip, "install", "--no-deps", *map(str, packages)], capture_output=True, text=True, timeout=900, cwd=tmp_path
    )
    assert_exit(installed, 0)

    def run(*args: str, expect: int = 0) -> subprocess.CompletedProcess:
        done = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert_exit(done, expect)
        return done

    def warned(done: subprocess.CompletedProcess) -> list[str]:
        return [line for line in done.stderr.splitlines() if line.startswith("batchenum: warning: ")]

    broken = "the job 'broken' of the installed package zz-broken-jobs (zzbroken.missing:Broken) cannot be loaded: "
    error = "ModuleNotFoundError: No module named 'zzbroken.missing'"
    try:
        helped = run(*cli_command("run", "--help"))
        lines = warned(helped)
        assert len(lines) == 4 and all(line.count("\n") == 0 for line in lines), helped.stderr
        assert f"batchenum: warning: {broken}{error}; it is left out" in lines, lines
        assert any(
            "zz-broken-jobs (zzbroken.shadow:Dungeons) registers the job 'dungeons'" in line
            and "batchenum.jobs.dungeons" in line
            and "the built-in job is used" in line
            for line in lines
        ), lines
        assert any(
            "toyqueens-a (toyqueens_a:Queens), toyqueens-b (toyqueens_b:Queens) all register the job 'toyqueens'"
            in line
            and "toyqueens-a's is used, the first by distribution name" in line
            for line in lines
        ), lines
        assert (
            "batchenum: warning: the job 'misnamed' of the installed package zz-broken-jobs (toyqueens_a:Queens) cannot "
            "be loaded: UsageError: its class Queens is named 'toyqueens': give the entry point its job's name; "
            "it is left out"
        ) in lines, lines
        assert "toyqueens" in helped.stdout and "broken" not in helped.stdout and "misnamed" not in helped.stdout

        out = tmp_path / "out"
        dungeons = ("run", "dungeons", "--input", str(CASES / "dungeon_seed.jsonl"), "--serial", "--out", str(out))
        assert "dungeons:" in run(*cli_command(*dungeons)).stdout
        for command in (("status", "--out", str(out)), ("cleanup", "--out", str(out))):
            done = run(*cli_command(*command))
            assert "dungeons" in done.stdout, done.stdout  # listed, and cleaned up
            assert [line for line in warned(done) if "'broken'" in line] == [
                f"batchenum: warning: {broken}{error}; it is left out"
            ]
        toy = run(*cli_command("run", "toyqueens", "--n", "6", "--serial", "--out", str(out), "--json"))
        assert json.loads(toy.stdout)["summary"] == "toyqueens: 4 leaves, 153 nodes, 1 distinct by key"

        asked = run(*cli_command("run", "broken", "--serial", "--out", str(out)), expect=2)
        assert asked.stderr.splitlines()[-1] == f"batchenum: error: {broken}{error}", asked.stderr
        probe = (
            "import batchenum, warnings; from batchenum.jobs import REGISTRY\n"
            "with warnings.catch_warnings(record=True) as caught:\n"
            "    warnings.simplefilter('always'); names = batchenum.job_names()\n"
            "print(names, REGISTRY.job_class('toyqueens').__module__, REGISTRY.job_class('dungeons').__module__)\n"
            "print(len([w for w in caught if \"'broken'\" in str(w.message)]))\n"
            "try:\n    batchenum.run('broken', out='o', serial=True)\nexcept Exception as e:\n    print(type(e).__name__, e)"
        )
        printed = run(sys.executable, "-c", probe).stdout.splitlines()
        assert printed[0] == f"{[*REGISTRY.names(), 'toyqueens']} toyqueens_a batchenum.jobs.dungeons", printed
        assert printed[1:] == ["1", f"UsageError {broken}{error}"], printed
    finally:
        subprocess.run(
            [*pip, "uninstall", "-y", "zz-broken-jobs", "toyqueens-a", "toyqueens-b"], capture_output=True, timeout=300
        )
