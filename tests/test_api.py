"""The Python API, ``batchenum.run``: its docstring examples, one result type for every job, data
frames and Arrow tables as batch input, and clear errors."""

from __future__ import annotations

import doctest

import pandas as pd
import pyarrow as pa
import pytest

import batchenum
import batchenum.api
from conftest import CASES
from batchenum.pipeline.errors import UsageError


@pytest.mark.parametrize("module", [batchenum, batchenum.api], ids=["batchenum", "batchenum.api"])
def test_docstring_examples_run(module, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    failed, attempted = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert attempted and not failed


def test_every_job_gives_one_result_type_with_readable_tables(tmp_path):
    seeds = pd.read_json(CASES / "dungeon_seed.jsonl", lines=True)
    batch = seeds[["id", "grid"]]
    from_frame = batchenum.run("dungeons", input=batch, out=str(tmp_path / "a"), serial=True)
    from_arrow = batchenum.run("dungeons", input=pa.Table.from_pandas(batch), out=str(tmp_path / "b"), serial=True)
    from_file = batchenum.run("dungeons", input=str(CASES / "dungeon_seed.jsonl"), out=str(tmp_path / "c"),
                              serial=True)
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
    with pytest.raises(UsageError, match="no job 'sudoku': the jobs are palago, dungeons, nonary"):
        batchenum.run("sudoku")
    with pytest.raises(UsageError, match="input has no column grid: it needs 'id' and 'grid'"):
        batchenum.run("dungeons", input=pd.DataFrame({"id": ["a"], "map": [["@"]]}), out=str(tmp_path))
    with pytest.raises(UsageError, match="input must be a path, a URI, a pandas DataFrame or an Arrow table"):
        batchenum.run("dungeons", input=[["@"]], out=str(tmp_path))
    with pytest.raises(UsageError, match="palago: .*unexpected keyword argument 'input'"):
        batchenum.run("palago", input="x.jsonl")
