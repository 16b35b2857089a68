"""A new DataFrame into the same ``out`` from Python: the refusal speaks Python (``out=``,
``overwrite=True``), the command line keeps its flags, and ``overwrite=True`` replaces only that
job's tables."""

from __future__ import annotations

import pandas as pd
import pytest
from helpers import cli

import batchenum
from batchenum.pipeline.errors import PipelineError

FIRST = pd.DataFrame({"id": ["a", "b"], "grid": [["@$"], ["@#$"]]})
SECOND = pd.DataFrame({"id": ["c", "d", "e"], "grid": [["@$$"], ["@.$"], ["@"]]})


def test_a_second_dataframe_is_refused_in_pythons_words(tmp_path):
    batchenum.run("dungeons", input=FIRST, out=str(tmp_path), serial=True)
    with pytest.raises(PipelineError) as refused:
        batchenum.run("dungeons", input=SECOND, out=str(tmp_path), serial=True)
    message = str(refused.value)
    assert "holds the tables of another run" in message
    assert "Give out= another folder to keep both, or overwrite=True to replace this job's tables" in message
    assert "--" not in message.split("). ", 1)[1]  # no flag in the advice


def test_overwrite_replaces_only_that_jobs_tables(tmp_path):
    batchenum.run("palago", max_n=8, out=str(tmp_path), serial=True)
    counts = (tmp_path / "palago" / "creature_counts.parquet").read_bytes()
    batchenum.run("dungeons", input=FIRST, out=str(tmp_path), serial=True)
    second = batchenum.run("dungeons", input=SECOND, out=str(tmp_path), serial=True, overwrite=True)
    assert sorted(second.tables["answers"].to_pandas().id) == ["c", "d", "e"]
    assert second.totals["records"] == 3 and second.reused == 0
    assert (tmp_path / "palago" / "creature_counts.parquet").read_bytes() == counts  # another job's, untouched
    again = batchenum.run("dungeons", input=SECOND, out=str(tmp_path), serial=True)  # no overwrite needed now
    assert again.reused == again.shards


def test_the_command_line_keeps_its_flags(tmp_path):
    cli("run", "palago", "--max-n", "8", "--serial", "--quiet", "--out", str(tmp_path))
    refused = cli("run", "palago", "--max-n", "9", "--serial", "--quiet", "--out", str(tmp_path), expect=1)
    assert refused.returncode == 1
    assert "Give --out another folder to keep both, or --overwrite to replace this job's tables" in refused.stderr
    assert "overwrite=True" not in refused.stderr


def test_an_out_that_cannot_be_written_is_named_in_pythons_words(tmp_path):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    with pytest.raises(PipelineError) as refused:
        batchenum.run("palago", max_n=4, out=str(not_a_folder), serial=True)
    assert str(refused.value) == f"out: {not_a_folder} exists and is not a folder"
    casual = cli("run", "palago", "--max-n", "4", "--out", str(not_a_folder), "--serial", expect=1)
    assert f"batchenum: error: --out: {not_a_folder} exists and is not a folder" in casual.stderr


def test_a_full_place_is_named_in_the_callers_words_after_crossing_a_process():
    import pickle

    from batchenum.pipeline.storage import NoRoomError, Storage

    error = Storage.at("/tmp/runs").no_room("/tmp/runs/palago/t.parquet", OSError(28, "No space left on device"))
    assert isinstance(error, NoRoomError) and error.reason == "no space is left on its device"
    travelled = pickle.loads(pickle.dumps(error))  # as from a Ray worker
    assert str(travelled).startswith("out: /tmp/runs takes no more (no space is left on its device)")
    assert "give out= another place" in str(travelled) and "--out" not in str(travelled)
    cli_words = str(travelled.spoken(cli=True))
    assert cli_words.startswith("--out: /tmp/runs takes no more") and "give --out another place" in cli_words
    assert travelled.spoken(cli=True).reason == error.reason
