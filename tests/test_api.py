"""The Python API, ``batchenum.run``: its docstring examples, one result type for every job, data
frames and Arrow tables as batch input, and clear errors."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest
from helpers import CASES, assert_exit

import batchenum
from batchenum.pipeline.errors import UsageError


def test_every_job_gives_one_result_type_with_readable_tables(tmp_path):
    seeds = pd.read_json(CASES / "dungeon_seed.jsonl", lines=True)
    batch = seeds[["id", "grid"]]
    from_frame = batchenum.run("dungeons", input=batch, out=str(tmp_path / "a"), serial=True)
    from_arrow = batchenum.run("dungeons", input=pa.Table.from_pandas(batch), out=str(tmp_path / "b"), serial=True)
    from_file = batchenum.run("dungeons", input=str(CASES / "dungeon_seed.jsonl"), out=str(tmp_path / "c"), serial=True)
    for result in (from_frame, from_arrow, from_file):
        assert isinstance(result, batchenum.Result) and set(result.tables) == {"answers", "errors"}
        answers = result.tables["answers"]
        assert answers.rows == len(seeds) == len(answers.to_pandas()) == answers.to_arrow().num_rows
        assert answers.to_pandas().set_index("id").gold.to_dict() == dict(zip(seeds.id, seeds.answer))
        assert result.totals["records"] == len(seeds) and result.summary.startswith("dungeons: read ")
    again = batchenum.run("dungeons", input=batch, out=str(tmp_path / "a"), serial=True)
    assert again.reused == again.shards  # the frame was written once, named by its content
    catalogue = batchenum.run("palago", max_n=9, catalogue_max_n=9, out=str(tmp_path / "p"), serial=True)
    creatures = catalogue.tables["creatures"]
    frame = creatures.to_pandas()
    assert creatures.partition == "n" and frame.n.dtype == "int64" and len(frame) == creatures.rows
    counts = catalogue.tables["creature_counts"].to_pandas()
    assert frame.groupby("n").size().to_dict() == {n: f for n, f in zip(counts.n, counts.free) if f}


def test_bad_calls_say_what_to_change(tmp_path):
    with pytest.raises(UsageError, match=f"no job 'sudoku': the jobs are {', '.join(batchenum.job_names())}"):
        batchenum.run("sudoku")
    with pytest.raises(UsageError, match="input has no column grid: it needs 'id' and 'grid'"):
        batchenum.run("dungeons", input=pd.DataFrame({"id": ["a"], "map": [["@"]]}), out=str(tmp_path))
    with pytest.raises(UsageError, match="input must be a path, a URI, a pandas DataFrame or an Arrow table"):
        batchenum.run("dungeons", input=[["@"]], out=str(tmp_path))
    with pytest.raises(UsageError, match="palago has no parameter 'input': its parameters are max_n, catalogue_max_n"):
        batchenum.run("palago", input="x.jsonl")
    with pytest.raises(UsageError, match="^max_cells must be at least 1, not 0$"):  # as the CLI refuses --max-cells 0
        batchenum.run("dungeons", input=str(CASES / "dungeon_seed.jsonl"), max_cells=0, out=str(tmp_path))
    with pytest.raises(UsageError, match="^record_timeout must be above 0, not 0$"):
        batchenum.run("nonary", input="x.jsonl", record_timeout=0, out=str(tmp_path))
    with pytest.raises(UsageError, match="^max_n must be a whole number, not 8.5$"):
        batchenum.run("palago", max_n=8.5, out=str(tmp_path))
    mixed = pd.DataFrame({"id": ["a", "b"], "grid": [["@$"], "@$"]})
    with pytest.raises(UsageError, match="input column 'grid' mixes kinds of values: row 1 holds '@\\$' \\(str\\)"):
        batchenum.run("dungeons", input=mixed, out=str(tmp_path))


def test_a_numpy_integer_is_taken_as_the_integer_it_holds(tmp_path):
    import numpy as np

    result = batchenum.run("palago", max_n=np.int64(6), catalogue_max_n=np.int32(3), out=str(tmp_path), serial=True)
    assert result.tables["creature_counts"].rows == 6


ALREADY_INITIALISED = """
import logging, sys
import ray
import batchenum
from batchenum.pipeline.errors import UsageError

logging.basicConfig(level=logging.INFO)
ray.init(address="local", num_cpus=1, include_dashboard=False)  # a notebook's own Ray, never another's
connected = ray.get_runtime_context().gcs_address
out = sys.argv[1]
for options in ({"workers": 2}, {"address": "127.0.0.9:1"}):
    try:
        batchenum.run("palago", max_n=6, out=out, head_start=False, **options)
        print("NOT REFUSED", options)
    except UsageError as error:
        print("refused:", str(error).replace(connected, "CONNECTED"))
result = batchenum.run("palago", max_n=6, out=out, quiet=False, head_start=False)
print("rows:", result.tables["creature_counts"].rows, "connected:", ray.is_initialized())
"""


@pytest.mark.integration  # a Ray started by ray.init in a script
def test_an_already_initialised_ray_is_used_only_when_the_call_allows_it(tmp_path):
    """A notebook's own ``ray.init``: a run that asks for another Ray (``workers``, an ``address``)
    is refused naming it; one that asks for none computes there and says so."""
    import subprocess
    import sys

    script = tmp_path / "notebook.py"
    script.write_text(ALREADY_INITIALISED)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "out")], capture_output=True, text=True, timeout=600, cwd=tmp_path
    )
    assert_exit(done, 0)
    lines = done.stdout.splitlines()
    assert (
        lines[0].startswith("refused: this process is already connected to the Ray at CONNECTED")
        and "drop workers" in lines[0]
    ), done.stdout
    assert (
        lines[1].startswith("refused: this process is already connected to the Ray at CONNECTED")
        and "not to 127.0.0.9:1" in lines[1]
    ), done.stdout
    assert lines[2] == "rows: 6 connected: True", done.stdout
    assert "computing on the Ray this process had already initialised (at " in done.stderr
