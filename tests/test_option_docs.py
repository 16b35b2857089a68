"""The docs' lists of options match their one declaration (pipeline/run_options.py, the jobs'
``Param``s): an option added, renamed or dropped fails here until the docs say so."""

from __future__ import annotations

import ast
import re

from helpers import REPO

from batchenum.jobs import REGISTRY
from batchenum.pipeline.params import spelled
from batchenum.pipeline.run_options import CLI, PYTHON, run_params


def _section(path, heading: str) -> str:
    text = path.read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


def test_cli_md_lists_every_run_option():
    table = _section(REPO / "docs" / "cli.md", "## Common options of `batchenum run`")
    listed = set(re.findall(r"^\| `(--[a-z-]+)", table, flags=re.MULTILINE))
    declared = {
        spelled(f"no_{name}" if p.type is bool and p.default else name, cli=True) for name, p in run_params(CLI).items()
    }
    assert listed == declared


def test_api_md_gives_run_signature_as_declared():
    text = (REPO / "docs" / "api.md").read_text()
    written = re.search(r"`(run\(job, \*,.*?\*\*params\))`", text, flags=re.DOTALL)
    assert written, "docs/api.md gives run()'s signature"
    function = ast.parse(f"def {written.group(1).replace(chr(10), ' ')}: pass").body[0]
    documented = {
        arg.arg: ast.literal_eval(default) for arg, default in zip(function.args.kwonlyargs, function.args.kw_defaults)
    }
    assert documented == {name: param.default for name, param in run_params(PYTHON).items()}


def test_api_md_lists_every_parameter_of_the_jobs_it_names():
    text = (REPO / "docs" / "api.md").read_text()
    rows = re.findall(r'^\| `"([a-z_]+)"` \| (.*) \|$', text, flags=re.MULTILINE)
    assert rows
    for job, cell in rows:
        listed = set(re.findall(r"`([a-z_]+)`", cell))
        assert listed == set(REGISTRY.job_class(job).declared_params()), job


def test_cli_md_lists_every_generate_option():
    from batchenum.jobs.generate import GenerateDoorGraphs, GenerateDungeons
    from batchenum.pipeline.params import declared_params

    table = _section(REPO / "docs" / "cli.md", "## `batchenum generate dungeons` and `batchenum generate nonary`")
    listed = {(flag, metavar) for flag, metavar in re.findall(r"`(--[a-z-]+) ([A-Z]+)`", table)}
    declared = {
        (spelled(name, cli=True), param.metavar)
        for command in (GenerateDungeons, GenerateDoorGraphs)
        for name, param in declared_params(command).items()
    }
    assert listed == declared
