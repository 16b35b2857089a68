"""Every ``bash`` and ``python`` block of README.md and docs/*.md runs as written, in the order
given, in a copy of the repository's files as a fresh clone has them; and the defaults the docs
state are the ones the code has.

A block preceded by ``<!-- needs: KIND -->`` (``cluster``, ``credentials`` or ``benchmark``) is
skipped; the README's install and test-suite commands are left out of its Quick start blocks (the
test runs inside that very suite, from an installed package), the rest of those lines runs
(docs/development.md, "The docs examples")."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import REPO, cli

# README first, then the pages in the order its "Documentation" list gives them
PAGES = [
    "README.md",
    "docs/cli.md",
    "docs/api.md",
    "docs/jobs.md",
    "docs/batch_input.md",
    "docs/faults.md",
    "docs/cluster.md",
    "docs/palago.md",
    "docs/palago_transfer.md",
    "docs/palago_growth.md",
    "docs/rules.md",
    "docs/design.md",
    "docs/benchmarks.md",
    "docs/development.md",
]
SKIPPED_NEEDS = {"cluster", "credentials", "benchmark"}
LANGUAGES = {"bash", "python"}
_FENCE = re.compile(r"^```(\w*)\s*$")
_NEEDS = re.compile(r"^<!-- needs: (\w+) -->$")
# the parts of a Quick start line that install or run the suite, never run here
_SETUP = re.compile(r"^(python3 -m venv \S+|\. \S+/bin/activate|pip install .*|pytest( .*)?|ruff .*|mypy( .*)?)$")


@dataclass
class Block:
    page: str
    line: int  # of the opening fence
    language: str
    code: str
    needs: str | None  # the marker's kind, None when unmarked

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ({self.language})"


def blocks(page: str) -> list[Block]:
    """The fenced blocks of ``page`` with a language, with the needs marker before each."""
    found, lines = [], (REPO / page).read_text().splitlines()
    k = 0
    while k < len(lines):
        opening = _FENCE.match(lines[k])
        if not opening:
            k += 1
            continue
        end = next(j for j in range(k + 1, len(lines)) if lines[j].strip() == "```")
        previous = next((lines[j].strip() for j in range(k - 1, -1, -1) if lines[j].strip()), "")
        needs = _NEEDS.match(previous)
        if opening.group(1):
            found.append(
                Block(page, k + 1, opening.group(1), "\n".join(lines[k + 1 : end]), needs.group(1) if needs else None)
            )
        k = end + 1
    return found


def without_setup(code: str) -> str:
    """A bash block without its install and test-suite commands (``a && b && c`` split on ``&&``)."""
    kept = []
    for line in code.splitlines():
        parts = [part.strip() for part in line.split("&&")]
        rest = [part for part in parts if not _SETUP.match(part)]
        if rest:
            kept.append(" && ".join(rest))
    return "\n".join(kept)


def fresh_clone(target: Path) -> None:
    """The files git tracks, as a clone has them (the checkout's own edits included)."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in tracked.decode().split("\0"):
        if name and (REPO / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, target / name)


def test_every_block_is_runnable_or_marked():
    """A language the test does not run, or a marker it does not know, would skip a block silently."""
    for page in PAGES:
        for block in blocks(page):
            assert block.language in LANGUAGES | {"json", "toml"}, f"{block}: a block in a language the test cannot run"
            assert block.needs in SKIPPED_NEEDS | {None}, f"{block}: unknown marker needs: {block.needs}"
    assert {path.relative_to(REPO).as_posix() for path in (REPO / "docs").glob("*.md")} | {"README.md"} == set(PAGES)


@pytest.mark.slow
def test_the_docs_examples_run_as_written_in_order(tmp_path):
    clone = tmp_path / "clone"
    fresh_clone(clone)
    ray_tmp = tempfile.mkdtemp(prefix="rd")  # short: Ray's socket paths have a length limit
    plant_a_stale_ray(ray_tmp)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "RAY_TMPDIR": ray_tmp,  # where an address-less init looks for a Ray: a dead one's address is there
        "PYTHONSAFEPATH": "1",
    }  # the installed batchenum (its numba cache), not the copy's folders
    env.pop("RAY_ADDRESS", None)
    ran, seconds = 0, []
    try:
        for page in PAGES:
            for block in blocks(page):
                if block.language not in LANGUAGES or block.needs in SKIPPED_NEEDS:
                    continue
                command = (
                    ["bash", "-euo", "pipefail", "-c", without_setup(block.code)]
                    if block.language == "bash"
                    else [sys.executable, str(_as_script(tmp_path / "blocks", block))]
                )
                started = time.monotonic()
                done = subprocess.run(command, cwd=clone, env=env, capture_output=True, text=True, timeout=600)
                assert done.returncode == 0, f"{block} failed:\n{block.code}\n--- stderr:\n{done.stderr[-3000:]}"
                seconds.append(f"{block}: {time.monotonic() - started:.1f} s")
                ran += 1
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
        print("\n".join(seconds))  # where the time goes (pytest -s, or -rP)
    assert ran >= 15


def plant_a_stale_ray(temp_root: str) -> None:
    """The address file a Ray that is gone leaves where an address-less ``ray.init`` looks for one
    (``RAY_TMPDIR/ray/ray_current_cluster``), as another user's dead Ray leaves /tmp/ray's on a shared
    machine: a block that attached to it failed after 207 s (issue 48)."""
    os.makedirs(os.path.join(temp_root, "ray"))
    with open(os.path.join(temp_root, "ray", "ray_current_cluster"), "w") as stale:
        stale.write("127.0.0.1:9")  # the discard port: nothing answers there


def test_no_python_block_or_test_attaches_to_a_ray_it_did_not_start():
    """A bare ``ray.init()`` (no address, or without ``address="local"``) attaches to the Ray named
    by the temporary folder's address file, whoever started it; the docs and the tests start their
    own, or use the session's (tests/conftest.py)."""
    bare = re.compile(r"ray\.init\((?![^)]*address=)")
    sources = [block.code for page in PAGES for block in blocks(page) if block.language == "python"]
    sources += [path.read_text() for path in (REPO / "tests").glob("*.py") if path.name != "test_docs_examples.py"]
    assert not [source for source in sources if bare.search(re.sub(r"#.*", "", source))]  # comments may name it


def test_the_readme_names_the_extra_that_installs_duckdb():
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (block,) = [block for block in blocks("README.md") if "import duckdb" in block.code]
    named = re.search(r'pip install -e "\.\[(\w+)\]"', block.code)
    assert named and any(need.startswith("duckdb") for need in extras[named.group(1)])


def _as_script(folder: Path, block: Block) -> Path:
    """A python block saved as a script of its own, as a reader saves it (a job class needs its
    source in a file or a notebook cell: its code version hashes it), outside the clone's files."""
    folder.mkdir(exist_ok=True)
    script = folder / f"{Path(block.page).stem}_{block.line}.py"
    script.write_text(block.code)
    return script


def test_the_defaults_the_docs_state_are_the_codes():
    """Shards per CPU, minimum shard sizes and option defaults, as README.md, docs/cli.md and the
    commands' --help say them, against the constants the code uses."""
    from batchenum.jobs.dungeons import MAX_CELLS
    from batchenum.jobs.nonary import MAX_DOORS, RECORD_TIMEOUT
    from batchenum.pipeline.inputs.plan import MAX_SLICE_BYTES, SLICES_PER_CPU
    from batchenum.pipeline.runner import TASK_MAX_RETRIES
    from batchenum.pipeline.storage import STORAGE_TIMEOUT

    per_cpu = f"{SLICES_PER_CPU} to {2 * SLICES_PER_CPU}"
    readme, cli_md = (REPO / "README.md").read_text(), (REPO / "docs/cli.md").read_text()
    assert f"({per_cpu} per CPU, at least 25,000 lines each)" in readme
    assert (
        f"{per_cpu} shards per CPU, at least 25,000 dungeons or 2,000 door graphs, at most about "
        f"{MAX_SLICE_BYTES >> 20} MB of input" in cli_md
    )
    for job, least in (("dungeons", "25,000"), ("nonary", "2,000")):
        shown = " ".join(_help("run", job).split())
        assert f"{per_cpu} shards per CPU of the run, at least {least} records" in shown
        assert f"at most about {MAX_SLICE_BYTES >> 20} MB" in shown
    assert f"(default {MAX_CELLS:,})" in _row(cli_md, "--max-cells C")
    assert f"(default {MAX_DOORS})" in _row(cli_md, "--max-doors D")
    assert f"(default {RECORD_TIMEOUT:g};" in _row(cli_md, "--record-timeout S")
    assert f"(default {TASK_MAX_RETRIES})" in _row(cli_md, "--retries R")
    assert f"(default {STORAGE_TIMEOUT:g};" in _row(cli_md, "--storage-timeout SECONDS")
    assert "(default: 24)" in _row(cli_md, "--max-n N") and "default: 24" in " ".join(_help("run", "palago").split())


def _help(*command: str) -> str:
    return subprocess.run(
        [sys.executable, "-m", "batchenum", *command, "--help"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "200"},
    ).stdout


def _row(markdown: str, option: str) -> str:
    """The table row of docs/cli.md that documents ``option``."""
    return next(line for line in markdown.splitlines() if line.startswith(f"| `{option}`"))


@pytest.mark.slow
def test_the_gallery_advice_runs_as_printed_after_the_quick_start(tmp_path):
    """A fresh clone's results/ holds the Quick start's n <= 24 table (as after the Quick start): the
    catalogue command the gallery prints must not be refused there, and its --from must then work."""
    fresh_clone(tmp_path)
    refused = cli("palago", "gallery", "--n", "17", cwd=tmp_path, expect=2)
    command = re.search(r"`batchenum (run palago [^`]+)`", refused.stderr).group(1).split()
    source = re.search(r"add `(--from [^`]+)`", refused.stderr).group(1).split()
    cli(*command, "--quiet", cwd=tmp_path)
    cli("palago", "gallery", "--n", "17", *source, "--limit", "5", "--out", "runs", cwd=tmp_path)
    [index] = (tmp_path / "runs" / "palago").glob("gallery_n17*/index.html")
    assert "creature" in index.read_text().lower()


def test_the_line_count_docs_jobs_md_gives_for_the_queens_example_is_the_files():
    heading = re.search(
        r"^## A search tree: n-queens in a file of (\d+) lines$", (REPO / "docs" / "jobs.md").read_text(), re.M
    )
    assert heading, "docs/jobs.md lost its n-queens heading"
    assert int(heading.group(1)) == len((REPO / "examples" / "queens.py").read_text().splitlines())
