"""The merge of tables by partition (pipeline/table_merge.py) against the rule the driver's in-memory
merge kept: the shards' rows in plan order, sorted stably by ``sort``, the first row per key kept.
Partitions are made small, so that every table here is split into several ranges and parts."""

from __future__ import annotations

import io
import json
import os
import re
import signal
import subprocess
import sys
import uuid

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import MARK, marked_processes, objects, s3_fs, wait_until
from hypothesis import given, settings
from hypothesis import strategies as st

from batchenum.pipeline import table_merge
from batchenum.pipeline.execute import DRIVER_MERGE_ROWS, RunOptions, run_job
from batchenum.pipeline.job import Column, Job, PlanContext, Shard, ShardResult, TableSpec
from batchenum.pipeline.lazy_table import TableTooLargeError
from batchenum.pipeline.progress import Progress
from batchenum.pipeline.status import job_statuses, render

COLUMNS = (Column("key", "int64"), Column("score", "int64"), Column("payload", "string"))


def quiet() -> Progress:
    return Progress("overlapping", stream=io.StringIO())


class Overlapping(Job):
    """Shards of random rows whose keys overlap their neighbours' (and repeat within a shard);
    ``score`` takes few values, so that ties in ``sort`` are decided by the rows' places."""

    name = "overlapping"
    version = "1"

    def __init__(self, key=("key",), sort=("key",), shards=7, rows=300, seed=1, nulls=False):
        self.tables = (TableSpec("rows", COLUMNS, key=tuple(key), sort=tuple(sort)),)
        self.shards, self.rows, self.seed, self.nulls = shards, rows, seed, nulls

    def extra_params(self) -> dict:
        spec = self.tables[0]
        return {"key": spec.key, "sort": spec.sort, "shards": self.shards, "seed": self.seed, "nulls": self.nulls}

    def plan(self, context: PlanContext) -> list[Shard]:
        return [Shard(f"s{k:03d}", {"k": k}) for k in range(self.shards)]

    def run_shard(self, shard: Shard, context=None) -> ShardResult:
        return ShardResult({"rows": shard_rows(shard.spec["k"], self.rows, self.seed, self.nulls)})


def shard_rows(k: int, rows: int, seed: int, nulls: bool = False) -> dict:
    rng = np.random.default_rng([seed, k])
    keys = rng.integers(k * rows // 2, k * rows // 2 + rows, rows)  # half of each range is the next shard's
    return {
        "key": keys,
        "score": rng.integers(0, 4, rows),
        # says where the row came from (null now and then, with ``nulls``)
        "payload": [None if nulls and keys[r] % 37 == 0 else f"s{k}-r{r}" for r in range(rows)],
    }


def oracle(job: Overlapping) -> pd.DataFrame:
    """The rule, by pandas: rows in plan order, stably sorted by ``sort``, the first per key."""
    spec = job.tables[0]
    shards = [pd.DataFrame(shard_rows(k, job.rows, job.seed, job.nulls)) for k in range(job.shards)]
    frame = pd.concat(shards, ignore_index=True)
    if spec.sort:
        frame = frame.sort_values(list(spec.sort), kind="stable")
    return frame.drop_duplicates(list(spec.key), keep="first").reset_index(drop=True)


@pytest.fixture
def small_partitions(monkeypatch):
    monkeypatch.setattr("batchenum.pipeline.table_merge.MERGE_ROWS", 400)


@pytest.mark.parametrize(
    "key, sort",
    [
        (("key",), ("key",)),  # one round, ranges of the key
        (("key",), ("score", "key")),  # two rounds: ranges of the key, then of score
        (("key",), ("score",)),  # ties in score decided by place
        (("key",), ()),  # no sort: plan order, the first occurrence
        (("key", "score"), ("key", "score")),  # a key of two columns
    ],
)
def test_a_merged_table_keeps_the_first_row_per_key_in_sort_order(tmp_path, small_partitions, key, sort):
    job = Overlapping(key, sort)
    result = run_job(job, RunOptions(out=str(tmp_path), serial=True), quiet())
    folder = tmp_path / "overlapping" / "rows"
    parts = sorted(folder.iterdir())
    assert len(parts) > 1  # several partitions, each a part
    expected = oracle(job)
    assert pd.read_parquet(folder).equals(expected)
    assert result.tables["rows"].to_pandas().equals(expected)
    assert len(result.tables["rows"]) == len(expected)
    assert not (tmp_path / "overlapping" / "_merge").exists()  # removed once the tables are committed


@pytest.mark.parametrize("sort", [("payload",), ("score",)])
def test_null_keys_are_one_key_sorted_last_as_in_memory(tmp_path, small_partitions, sort):
    job = Overlapping(("payload",), sort, nulls=True)  # a string key, null in some rows
    run_job(job, RunOptions(out=str(tmp_path), serial=True), quiet())
    found = pd.read_parquet(tmp_path / "overlapping" / "rows")
    expected = oracle(job)
    assert found.payload.isna().sum() == 1 and found.astype(str).equals(expected.astype(str))


def test_ray_tasks_and_the_drivers_threads_write_the_same_bytes(tmp_path, small_partitions, ray_session):
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import tests/
    job = Overlapping(("key",), ("score",))
    run_job(job, RunOptions(out=str(tmp_path / "serial"), serial=True), quiet())
    run_job(job, RunOptions(out=str(tmp_path / "ray"), serial=False, head_start=False), quiet())
    assert _table_bytes(tmp_path / "serial") == _table_bytes(tmp_path / "ray")


def test_a_large_table_is_refused_in_memory_with_the_lazy_way(tmp_path):
    result = run_job(Overlapping(rows=2000), RunOptions(out=str(tmp_path), serial=True), quiet())
    table = result.tables["rows"]
    with pytest.raises(TableTooLargeError, match=r"table 'rows' takes .* MiB in memory \(\d[\d,]* rows\).*scan"):
        table.to_pandas(max_bytes=1000)
    assert sum(piece.num_rows for piece in table.scan(["key"])) == len(table)


KILLED_RUN = """
import sys
sys.path.insert(0, {tests!r})
import batchenum.pipeline.table_merge as table_merge
table_merge.MERGE_ROWS = 400
from test_table_merge import Overlapping
from batchenum.pipeline.execute import RunOptions, run_job
from batchenum.pipeline.progress import Progress
run_job(Overlapping({key!r}, {sort!r}), RunOptions(out={out!r}, serial=True), Progress("overlapping"))
"""


def serial_run(out, key, sort, kill=None, env=None) -> subprocess.CompletedProcess:
    """KILLED_RUN in a process of its own (``kill``: the partition after which it kills itself)."""
    env = {**os.environ, **(env or {}), **({"BATCHENUM_TEST_KILL_IN_MERGE": str(kill)} if kill is not None else {})}
    code = KILLED_RUN.format(tests=os.path.dirname(__file__), key=key, sort=sort, out=str(out))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.integration
@pytest.mark.parametrize("key, sort", [(("key",), ("key",)), (("key",), ("score",))])
def test_a_merge_killed_and_rerun_keeps_its_partitions_and_writes_the_same_bytes(tmp_path, key, sort):
    def run(out, kill=None):
        return serial_run(out, key, sort, kill)

    killed = run(tmp_path / "killed", kill=2)
    assert killed.returncode == -9  # SIGKILL, once partition 2 was written
    merge = tmp_path / "killed" / "overlapping" / "_merge" / "rows"
    written = sorted(path.name for path in merge.rglob("*-0000*.parquet"))
    assert written[:3] == [f"{'part' if sort == key else 'dedup'}-{p:05d}.parquet" for p in range(3)]
    assert not (tmp_path / "killed" / "overlapping" / "rows").exists()  # nothing committed
    shown = render(job_statuses(str(tmp_path / "killed")))
    assert re.search(r"merge: +rows: 3 of \d+ ranges written \(round 1\); a rerun keeps them", shown), shown
    rerun = run(tmp_path / "killed")
    assert rerun.returncode == 0, rerun.stderr
    assert "3 of " in rerun.stderr and "merged ranges (round 1) kept from an interrupted run" in rerun.stderr
    assert run(tmp_path / "whole").returncode == 0
    assert _table_bytes(tmp_path / "killed") == _table_bytes(tmp_path / "whole")


RAY_RUN = """
import sys
sys.path.insert(0, {tests!r})
import batchenum.pipeline.table_merge as table_merge
table_merge.MERGE_ROWS = {merge_rows}
from test_table_merge import Overlapping
from batchenum.pipeline.execute import RunOptions, run_job
from batchenum.pipeline.progress import Progress
job = Overlapping(shards={shards}, rows={rows})
run_job(job, RunOptions(out={out!r}, workers=2, head_start=False), Progress("overlapping"))
"""


@pytest.mark.slow
def test_a_merge_on_ray_workers_killed_with_its_process_group_is_finished_by_a_rerun(tmp_path, monkeypatch):
    """A run whose merge runs as Ray tasks (more than DRIVER_MERGE_ROWS rows), killed with its whole
    process group (SIGKILL) once its first part is written and while its workers write more (each
    pausing after a part): every process of the run ends, the rerun keeps the parts written and
    writes the rest, and the table is the bytes of an uninterrupted run."""
    shards, rows, merge_rows = 8, 40_000, 16_384
    assert shards * rows > DRIVER_MERGE_ROWS  # so the merge runs on Ray's workers
    out, log, mark = tmp_path / "killed", tmp_path / "killed.log", uuid.uuid4().hex
    code = RAY_RUN.format(
        tests=os.path.dirname(__file__), merge_rows=merge_rows, shards=shards, rows=rows, out=str(out)
    )
    env = {**os.environ, MARK: mark, "BATCHENUM_TEST_PAUSE_IN_MERGE": "0.5"}
    with open(log, "w") as stderr:
        run = subprocess.Popen([sys.executable, "-c", code], env=env, stderr=stderr, start_new_session=True)
    try:
        merge = out / "overlapping" / "_merge" / "rows"
        wait_until(lambda: list(merge.glob("*/part-*.parquet")), "the merge wrote a part", 120, run)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    wait_until(lambda: not marked_processes(mark), "every process of the killed run ended (its Ray's too)", 60)
    assert "merging shard outputs" in log.read_text() and "local Ray" in log.read_text()
    ranges = json.loads(next(merge.glob("*/round-1.json")).read_text())["ranges"]
    written = {path.name: path.stat().st_ino for path in merge.glob("*/part-*.parquet")}
    assert 0 < len(written) < ranges, (written, ranges)  # killed while parts were being written
    assert not (out / "overlapping" / "rows").exists()

    rerun = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    kept = f"rows: {len(written)} of {ranges} merged ranges (round 1) kept from an interrupted run"
    assert kept in rerun.stderr, rerun.stderr
    table = out / "overlapping" / "rows"
    # a part kept is the very file the killed run wrote: the commit links it into the table
    assert {name: (table / name).stat().st_ino for name in written} == written
    monkeypatch.setattr("batchenum.pipeline.table_merge.MERGE_ROWS", merge_rows)
    run_job(Overlapping(shards=shards, rows=rows), RunOptions(out=str(tmp_path / "whole"), serial=True), quiet())
    assert _table_bytes(out) == _table_bytes(tmp_path / "whole")


@pytest.mark.slow
@pytest.mark.parametrize("key, sort", [(("key",), ("key",)), (("key",), ("score",))])
def test_a_merge_on_s3_killed_and_rerun_writes_the_bytes_of_a_local_run(s3_server, new_bucket, tmp_path, key, sort):
    """The merge's files on object storage (a real S3 server): written whole by PUTs, checked and
    kept by the rerun, copied into the table by the commit, then removed; one round and two."""
    out, prefix = f"s3://{new_bucket}/run", f"{new_bucket}/run/overlapping"
    killed = serial_run(out, key, sort, kill=2, env=s3_server)
    assert killed.returncode == -9, killed.stderr  # SIGKILL, once partition 2 was written
    written = [path.rsplit("/", 1)[1] for path in objects(s3_server, f"{prefix}/_merge/rows") if "-0000" in path]
    assert written[:3] == [f"{'part' if sort == key else 'dedup'}-{p:05d}.parquet" for p in range(3)]
    assert not objects(s3_server, f"{prefix}/rows")
    rerun = serial_run(out, key, sort, env=s3_server)
    assert rerun.returncode == 0, rerun.stderr
    assert "rows: 3 of " in rerun.stderr and "merged ranges (round 1) kept from an interrupted run" in rerun.stderr
    assert not objects(s3_server, f"{prefix}/_merge")
    assert serial_run(tmp_path, key, sort).returncode == 0
    fs = s3_fs(s3_server)
    found = {path.rsplit("/", 1)[1]: fs.open_input_stream(path).read() for path in objects(s3_server, f"{prefix}/rows")}
    assert found == _table_bytes(tmp_path)


def _table_bytes(out) -> dict[str, bytes]:
    folder = out / "overlapping" / "rows"
    found = {path.name: path.read_bytes() for path in sorted(folder.iterdir())}
    assert found and all(pq.read_metadata(folder / name).num_rows for name in found)
    return found


def test_free_polyominoes_by_overlapping_seeds_are_counted_exactly(tmp_path, monkeypatch):
    """A real overlapping job: every free 9-omino (1,285, OEIS A000105) reached from each of the 5
    tetrominoes that it holds, the merge keeping the first seed in plan order."""
    from polyomino_job import FREE, Polyominoes

    monkeypatch.setattr("batchenum.pipeline.table_merge.MERGE_ROWS", 1000)
    job = Polyominoes(n=9, seed=4)
    result = run_job(job, RunOptions(out=str(tmp_path), serial=True), quiet())
    first: dict[str, str] = {}
    for shard in job.plan(PlanContext()):
        for key, seed in zip(*job.run_shard(shard).tables["forms"].values()):
            first.setdefault(key, seed)
    forms = pd.read_parquet(tmp_path / "polyominoes" / "forms")
    assert len(forms) == len(result.tables["forms"]) == FREE[9] == len(first)
    assert result.totals["emitted"] > 2 * FREE[9]  # the shards overlap
    assert forms.key.tolist() == sorted(first) and forms.seed.tolist() == [first[key] for key in sorted(first)]
    assert len(list((tmp_path / "polyominoes" / "forms").iterdir())) > 1


def test_the_compiled_polyomino_growth_emits_the_rows_of_the_plain_one():
    """The numba growth of the polyomino job against the plain growth it replaced (tests/polyomino_job.py):
    the same rows from every tetromino at n = 9, and from one cell the free counts of OEIS A000105."""
    from polyomino_job import FREE, Polyominoes, form_of, grown, grown_codes, key_text

    job = Polyominoes(n=9, seed=4)
    for shard in job.plan(PlanContext()):
        forms = {form_of(shard.spec["seed"])}
        for _ in range(job.n - job.seed):
            forms = grown(forms)
        keys = sorted(key_text(form) for form in forms)
        assert job.run_shard(shard).tables["forms"] == {"key": keys, "seed": [shard.spec["seed"]] * len(keys)}
    codes = np.zeros((1, 1), np.uint8)  # the monomino
    for n in range(2, 12):
        codes = grown_codes(codes)
        assert len(codes) == FREE[n]


# A small table is sorted, deduplicated and reordered by Python (table_merge._small): the same
# rows, in the same order, as Arrow's compute functions give, whatever the values
_SMALL_COLUMNS = {
    "i": (pa.int64(), st.integers(min_value=-(2**63), max_value=2**63 - 1)),
    "f": (pa.float64(), st.sampled_from([float("nan"), 0.0, -0.0, float("inf")]) | st.floats()),
    "s": (pa.string(), st.text(max_size=3)),
    "b": (pa.binary(), st.binary(max_size=2)),
    "t": (pa.bool_(), st.booleans()),
}


@st.composite
def _small_tables(draw):
    rows = draw(st.integers(min_value=0, max_value=40))
    names = draw(st.lists(st.sampled_from(sorted(_SMALL_COLUMNS)), min_size=1, max_size=3, unique=True))
    columns = {}
    for name in names:
        arrow_type, values = _SMALL_COLUMNS[name]
        few = draw(st.lists(st.none() | values, min_size=1, max_size=4))  # repeats, so ties and runs
        columns[name] = pa.array([draw(st.sampled_from(few)) for _ in range(rows)], type=arrow_type)
    return pa.table(columns), names


def _arranged_by(table, names, small_rows):
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(table_merge, "SMALL_TABLE_ROWS", small_rows)
        indices = table_merge._sort_indices(table, names)
        taken = table_merge._taken(table, indices)
        first = table_merge._first_of_runs(taken, names) if table.num_rows else np.zeros(0, bool)
    return indices.tolist(), taken, first.tolist()


@settings(max_examples=300, deadline=None)
@given(_small_tables())
def test_a_small_table_is_sorted_and_deduplicated_as_arrow_does(drawn):
    table, names = drawn
    assert table_merge._small(table, names)
    by_python, by_arrow = _arranged_by(table, names, 1024), _arranged_by(table, names, -1)
    assert by_python[0] == by_arrow[0] and by_python[2] == by_arrow[2]
    python_table, arrow_table = by_python[1], by_arrow[1]
    assert python_table.schema == arrow_table.schema and python_table.column(0).num_chunks == 1
    assert repr(python_table.to_pylist()) == repr(arrow_table.to_pylist())  # NaN == NaN, 0.0 != -0.0
