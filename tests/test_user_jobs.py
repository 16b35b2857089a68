"""A user's own job runs wherever it is written: a script run as ``python myjob.py``, a module
anywhere on the driver's sys.path, a file or module named on the command line, a notebook cell in
a real Jupyter kernel, and a cluster whose workers never saw the file.  Its source is part of the
code version: an edit recomputes, an untouched job reuses every shard."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap

import clusters
import pyarrow.parquet as pq
import pytest
from helpers import REPO, assert_exit, cli_command

QUEENS = textwrap.dedent('''
    from batchenum.pipeline.job import Param
    from batchenum.pipeline.skeletons import TreeJob


    class Queens(TreeJob):
        """Count the n-queens solutions."""

        name = "queens"
        version = "1"
        n = Param(int, default=8, low=1, high=12, help="board size")

        def root(self):
            return ()

        def children(self, cols):
            row = len(cols)
            return [cols + (c,) for c in range(self.n)
                    if all(c != d and abs(c - d) != row - r for r, d in enumerate(cols))]

        def is_leaf(self, cols):
            return len(cols) == self.n
''')

DRIVER = textwrap.dedent("""
    import json, sys
    sys.path.append({folder!r})  # a folder Ray's workers are never told about
    import batchenum
    from {module} import Queens

    result = batchenum.run(Queens, n=7, out={out!r}, workers=2, head_start=False, **{options})
    print(json.dumps({{"summary": result.summary, "reused": result.reused, "shards": result.shards}}))
""")


def _last_json(done: subprocess.CompletedProcess) -> dict:
    assert_exit(done, 0)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _nodes(job_folder) -> set[str]:
    """Where each committed shard ran, from the stats its file records."""
    files = glob.glob(os.path.join(job_folder, "_shards", "partial", "*.parquet"))
    return {json.loads(pq.read_schema(f).metadata[b"batchenum.stats"])["node"] for f in files}


def test_a_job_in_a_script_runs_on_ray_workers(tmp_path):
    script = tmp_path / "myjob.py"
    script.write_text(
        QUEENS
        + textwrap.dedent(f"""
        if __name__ == "__main__":
            import json, batchenum
            result = batchenum.run(Queens, n=7, out={str(tmp_path / "out")!r}, workers=2, head_start=False)
            print(json.dumps({{"summary": result.summary}}))
    """)
    )
    seen = _last_json(
        subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    )
    assert seen["summary"].startswith("queens: 40 leaves")  # OEIS A000170: 40 for n = 7
    assert all("Ray node" in node for node in _nodes(tmp_path / "out" / "queens"))


def driver_of_a_module_elsewhere(tmp_path, module: str, source: str, job: str = "Queens"):
    """A driver script that runs class ``job`` of module ``module`` (``source``), written in a
    folder Ray's workers are never told about, as Queens."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / f"{module}.py").write_text(source)
    driver = tmp_path / "driver" / "run.py"
    driver.parent.mkdir()
    script = DRIVER.format(folder=str(elsewhere), module=module, out=str(tmp_path / "out"), options={})
    driver.write_text(script.replace("import Queens", f"import {job} as Queens"))
    return elsewhere, driver


def test_a_module_elsewhere_on_sys_path_is_shipped_and_its_edits_recompute(tmp_path):
    elsewhere, driver = driver_of_a_module_elsewhere(tmp_path, "nqjob", QUEENS)

    def run() -> dict:
        return _last_json(
            subprocess.run(
                [sys.executable, str(driver)], cwd=driver.parent, capture_output=True, text=True, timeout=600
            )
        )

    first = run()
    assert first["summary"].startswith("queens: 40 leaves") and first["reused"] == 0
    assert all("Ray node" in node for node in _nodes(tmp_path / "out" / "queens"))
    assert run()["reused"] == first["shards"]  # untouched: every shard reused
    (elsewhere / "nqjob.py").write_text(QUEENS.replace("return len(cols) == self.n", "return len(cols) == self.n - 1"))
    edited = run()
    assert edited["reused"] == 0 and not edited["summary"].startswith("queens: 40 leaves")


PLANNED_ON_RAY = QUEENS + textwrap.dedent('''

    def doubled(x):
        return 2 * x


    class PlannedQueens(Queens):
        """Queens whose plan maps a function of this module over Ray's workers first."""

        def plan(self, context):
            if context.task_map is not None:
                assert context.task_map(doubled, [1, 2, 3]) == [2, 4, 6]
            return super().plan(context)
''')


def test_a_plans_tasks_get_the_jobs_code_as_its_shards_do(tmp_path):
    _, driver = driver_of_a_module_elsewhere(tmp_path, "planjob", PLANNED_ON_RAY, job="PlannedQueens")
    done = subprocess.run([sys.executable, str(driver)], cwd=driver.parent, capture_output=True, text=True, timeout=600)
    assert _last_json(done)["summary"].startswith("queens: 40 leaves")


def test_the_cli_runs_a_file_or_a_module_with_options_from_its_parameters(tmp_path):
    (tmp_path / "nqcli.py").write_text(QUEENS)
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    helped = subprocess.run(
        cli_command("run", "nqcli:Queens", "--help"), capture_output=True, text=True, env=env, timeout=300
    )
    assert_exit(helped, 0)
    assert "--n N" in helped.stdout and "board size (default: 8)" in helped.stdout
    by_file = subprocess.run(
        cli_command(
            "run", str(tmp_path / "nqcli.py:Queens"), "--n", "6", "--serial", "--out", str(tmp_path / "a"), "--json"
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert json.loads(by_file.stdout)["summary"].startswith("queens: 4 leaves")
    (tmp_path / "nqcli.py").write_text(QUEENS + "\n# an edit: a rerun says why nothing is reused\n")
    edited = subprocess.run(
        cli_command("run", str(tmp_path / "nqcli.py:Queens"), "--n", "6", "--serial", "--out", str(tmp_path / "a")),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert_exit(edited, 0)
    assert "(0 reused, 21 recomputed: the job's file or a module it imports changed)" in edited.stdout
    assert (
        "21 shards were computed by other code (the job's file or a module it imports changed since)" in edited.stderr
    )
    by_module = subprocess.run(
        cli_command("run", "nqcli:Queens", "--n", "6", "--out", str(tmp_path / "b"), "--workers", "2", "--json"),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert json.loads(by_module.stdout)["summary"].startswith("queens: 4 leaves")
    refused = subprocess.run(
        cli_command("run", str(tmp_path / "nqcli.py:Queens"), "--n", "13", "--serial"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert_exit(refused, 2)
    assert refused.stderr == "batchenum: error: --n must be between 1 and 12, not 13\n"
    missing = subprocess.run(
        cli_command("run", str(tmp_path / "nqcli.py:Kings")), capture_output=True, text=True, timeout=300
    )
    assert_exit(missing, 2)
    assert "has no 'Kings'" in missing.stderr


def test_a_job_in_a_notebook_cell_runs_in_a_jupyter_kernel(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    cells = [
        QUEENS,
        textwrap.dedent(f"""
        import os, batchenum
        before = dict(os.environ)
        result = batchenum.run(Queens, n=6, out={str(tmp_path / "out")!r}, workers=2, head_start=False)
        again = batchenum.run(Queens, n=6, out={str(tmp_path / "out")!r}, workers=2)
        print(result.summary, again.reused == again.shards, dict(os.environ) == before)
    """),
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(cell) for cell in cells])
    nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    printed = "".join(output.get("text", "") for output in notebook.cells[1].outputs if output.output_type == "stream")
    assert "queens: 4 leaves" in printed and printed.strip().endswith("True True")  # reused; os.environ as before


@pytest.mark.slow
def test_a_cluster_whose_workers_never_saw_the_file(tmp_path):
    """A head without CPUs and a second node: every shard runs on the node, which has no copy of
    the job's module on any path it knows."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "clusterjob.py").write_text(QUEENS)
    temp_dir, env = f"/tmp/uj{os.getpid()}", clusters.token_env()
    try:
        address = clusters.start_head(temp_dir, env, "--num-cpus", "0", "--include-dashboard", "false")
        clusters.join_node(address, env, cwd="/")
        clusters.wait_for_nodes(address, env, 2)
        driver = tmp_path / "driver" / "run.py"
        driver.parent.mkdir()
        driver.write_text(
            DRIVER.replace(", workers=2", "").format(
                folder=str(elsewhere), module="clusterjob", out=str(tmp_path / "out"), options={"address": address}
            )
        )
        seen = _last_json(
            subprocess.run(
                [sys.executable, str(driver)], cwd=driver.parent, capture_output=True, text=True, timeout=600, env=env
            )
        )
    finally:
        clusters.stop(temp_dir)
    assert seen["summary"].startswith("queens: 40 leaves")


def test_the_examples_run_as_documented(tmp_path):
    queens = subprocess.run(
        cli_command(
            "run", str(REPO / "examples" / "queens.py:Queens"), "--n", "8", "--serial", "--out", str(tmp_path), "--json"
        ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert json.loads(queens.stdout)["summary"] == "queens: 92 leaves, 2057 nodes, 12 distinct by key"
    collatz = subprocess.run(
        [sys.executable, str(REPO / "examples" / "collatz.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert_exit(collatz, 0)
    assert "collatz: read 4, answered 3, rejected 1" in collatz.stdout and "111  9232" in collatz.stdout


def test_a_rerun_after_an_edit_of_a_module_the_job_imports_says_so(tmp_path):
    """Issue 48: such a rerun recomputed every shard with no reason given."""
    (tmp_path / "attacks.py").write_text(
        "def attacks(col, c, r, row):\n    return col == c or abs(col - c) == row - r\n"
    )
    job = QUEENS.replace(
        "if all(c != d and abs(c - d) != row - r for r, d in enumerate(cols))",
        "if not any(attacks(c, d, r, row) for r, d in enumerate(cols))",
    )
    assert job != QUEENS
    (tmp_path / "helped.py").write_text("from attacks import attacks\n" + job)
    command = cli_command(
        "run", str(tmp_path / "helped.py:Queens"), "--n", "6", "--serial", "--out", str(tmp_path / "o")
    )
    assert_exit(subprocess.run(command, capture_output=True, text=True, timeout=300), 0)
    with open(tmp_path / "attacks.py", "a") as helper:
        helper.write("# an edit of the helper only\n")
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert_exit(again, 0)
    assert "recomputed: the job's file or a module it imports changed)" in again.stdout
