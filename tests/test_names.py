"""Names are checked where they are declared (issue 45, item 2): a job's name, a table's and a
column's break the rule, or repeat, and the job class fails at its definition with one line naming
the class, the name and the rule; a folder beside ``--out`` (the one ``name = ".."`` made the job
folder) is byte for byte as it was, and ``--out`` is not even created."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest
from helpers import assert_exit, cli_command
from test_store_links import tree

import batchenum
from batchenum.pipeline.contract import ContractError
from batchenum.pipeline.job import Column, Job, Shard, ShardResult, TableSpec
from batchenum.pipeline.names import RULE, BadNameError

GOOD_TABLES = 'TableSpec("t", (Column("a", "int64"),))'

# (the job's name, its tables, what the one line says)
BAD = [
    ("..", GOOD_TABLES, f"job class Foo: name '..' is not a plain name ({RULE})"),
    ("../x", GOOD_TABLES, f"job class Foo: name '../x' is not a plain name ({RULE})"),
    ("/abs", GOOD_TABLES, f"job class Foo: name '/abs' is not a plain name ({RULE})"),
    ("a\nb", GOOD_TABLES, f"job class Foo: name 'a\\nb' is not a plain name ({RULE})"),
    ("x" * 101, GOOD_TABLES, f"job class Foo: name '{'x' * 101}' is not a plain name ({RULE})"),
    ("_inputs", GOOD_TABLES, "job class Foo: name '_inputs' starts with _, which batchenum keeps for its own files"),
    ("ok", 'TableSpec("t", (Column("a", "int64"), Column("a", "string")))', "table 't': two columns named 'a'"),
    ("ok", f'{GOOD_TABLES}, TableSpec("T", (Column("b", "int64"),))', "job class Foo: two tables named 't' and 'T'"),
    ("ok", 'TableSpec("../t", (Column("a", "int64"),))', f"table '../t' is not a plain name ({RULE})"),
    ("ok", 'TableSpec("t", (Column("a/b", "int64"),))', f"column 'a/b' is not a plain name ({RULE})"),
    ("ok", 'TableSpec("NOT_A_TABLE", (Column("a", "int64"),))', "table 'NOT_A_TABLE' is the name of the file"),
    ("ok", 'TableSpec("t.tmp-1-deadbeef", (Column("a", "int64"),))', "holds .tmp-, which marks batchenum's temporary"),
]

JOB_FILE = """
    from batchenum.pipeline.job import Column, Job, Shard, ShardResult, TableSpec


    class Foo(Job):
        name = {name!r}
        tables = ({tables},)

        def plan(self, context):
            return [Shard("s0")]

        def run_shard(self, shard, context=None):
            return ShardResult({{}})
"""


def victim_beside(out: Path) -> Path:
    """The folder ``out`` is made in, holding a user's table and a folder named like a run's
    staging (what ``name = ".."`` overwrote and deleted)."""
    victim = out.parent
    (victim / "_staged" / "projX").mkdir(parents=True)
    (victim / "_staged" / "projX" / "draft.txt").write_text("a user's draft\n")
    (victim / "t.parquet").write_bytes(b"a user's table, not a run's\n")
    return victim


@pytest.mark.parametrize("name, tables, says", BAD, ids=[f"{name!r} {tables}" for name, tables, _ in BAD])
def test_a_bad_name_fails_at_definition_in_one_line_and_writes_nothing(name, tables, says, tmp_path):
    out = tmp_path / "p" / "out"
    victim = victim_beside(out)
    before = tree(victim)
    job_file = tmp_path / "job.py"
    job_file.write_text(textwrap.dedent(JOB_FILE.format(name=name, tables=tables)))

    with pytest.raises(BadNameError) as raised:  # the class statement itself, in Python
        exec(compile(job_file.read_text(), str(job_file), "exec"), {})
    assert says in str(raised.value) and "\n" not in str(raised.value).replace("\\n", ""), raised.value

    done = subprocess.run(
        cli_command("run", f"{job_file}:Foo", "--serial", "--out", str(out)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert_exit(done, 2)
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    assert done.stderr.startswith(f"batchenum: error: {job_file}, line "), done.stderr  # where, in the file
    assert tree(victim) == before and not out.exists()


class Named(Job):
    """A job whose name is given later, on the object: checked when it runs."""

    name = "named"
    tables = (TableSpec("t", (Column("a", "int64"),)),)

    def __init__(self, shard_id: str = "s0"):
        self.shard_id = shard_id

    def plan(self, context):
        return [Shard(self.shard_id)]

    def run_shard(self, shard, context=None):
        return ShardResult({"t": {"a": [1]}})


@pytest.mark.parametrize("name", ["..", "../x", "/abs", "a\nb"])
def test_a_name_set_on_the_object_is_refused_before_anything_is_written(name, tmp_path):
    out = tmp_path / "p" / "out"
    victim = victim_beside(out)
    before = tree(victim)
    job = Named()
    job.name = name
    with pytest.raises(BadNameError, match="job class Named: name .* is not a plain name"):
        batchenum.run(job, out=str(out), serial=True)
    assert tree(victim) == before and not out.exists()


@pytest.mark.parametrize("shard_id", ["../../escape", "_manifest", "a/b", ".hidden"])
def test_a_shard_id_that_cannot_name_its_files_is_a_contract_error(shard_id, tmp_path):
    out = tmp_path / "p" / "out"
    victim = victim_beside(out)
    before = {key: value for key, value in tree(victim).items() if not key.startswith("out")}
    with pytest.raises(ContractError, match="plan\\(\\) gives a shard id that cannot name its files"):
        batchenum.run(Named(shard_id), out=str(out), serial=True)
    assert {key: value for key, value in tree(victim).items() if not key.startswith("out")} == before
    assert not (out / "named" / "_shards").exists() and not (tmp_path / "escape.parquet").exists()


def test_plain_names_of_every_kind_run():
    """The rule's edges that are allowed: dots inside, a leading digit, _ or -, 100 characters."""
    for name in ("a.b", "0-x", "x" * 100, "answers_v2"):
        spec = TableSpec(name, (Column("_key", "int64"), Column("-x.y", "string")))
        assert spec.column_names == ["_key", "-x.y"]
        type("Fine", (Named,), {"name": name, "tables": (spec,)})
