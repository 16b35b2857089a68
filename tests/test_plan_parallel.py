"""Planning a JSONL input in parallel (issue 10, item 3): newlines counted per block, by Ray tasks for
a large input, and cuts found by the readers, must give exactly the slices of a plain scan of the
whole file, whoever counted."""

from __future__ import annotations

import io
import json
import os
import re
import sys

import pandas as pd
import pytest
from helpers import cli
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from ray import cloudpickle

from batchenum.jobs.dungeons import DungeonJob
from batchenum.pipeline.errors import InputError
from batchenum.pipeline.execute import RunOptions, run_job
from batchenum.pipeline.inputs.plan import count_block_newlines, load_slice, plan_slices
from batchenum.pipeline.job import PlanContext
from batchenum.pipeline.progress import Progress
from batchenum.pipeline.runner import RaySession, TaskFailedError

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray workers cannot import test modules
SETTINGS = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def reference_cuts(data: bytes, lines_per_slice: int) -> list[tuple[int, int, int]]:
    """The test oracle, the planner before issue 10 item 3: scan the whole file, cut just after every
    newline that ends a multiple of ``lines_per_slice`` lines; (start, end, first_line) per slice."""
    cuts = [0]
    seen = 0
    for offset, byte in enumerate(data):
        if byte == 0x0A:
            seen += 1
            if seen % lines_per_slice == 0:
                cuts.append(offset + 1)
    if cuts[-1] != len(data):
        cuts.append(len(data))  # the tail, possibly a last line without a newline
    return [(start, end, 1 + k * lines_per_slice) for k, (start, end) in enumerate(zip(cuts, cuts[1:]))]


def resolved(path, specs: list[dict], data: bytes) -> list[tuple[int, int, int]]:
    """(start, end, first_line) of each planned slice, found from the bytes its reader returns."""
    out, start = [], 0
    for spec in specs:
        sliced = load_slice(json.loads(json.dumps(spec))).data  # specs must survive JSON
        assert data[start : start + len(sliced)] == sliced
        out.append((start, start + len(sliced), spec["first_line"]))
        start += len(sliced)
    return out


def in_process_map(fn, items):
    return [fn(item) for item in items]


pieces = st.sampled_from([b"\n", b"\n", b"\r\n", b"{", b'"x"', b" ", b"}", b"\xef\xbb\xbf", b"y" * 37])


@SETTINGS
@given(st.lists(pieces, max_size=60).map(b"".join), st.integers(1, 9), st.integers(1, 48), st.integers(1, 5))
@example(b"", 1, 1, 1)  # an empty file has no slices
@example(b"a\nb\n", 2, 4, 1)  # ends with a newline exactly at a cut, at the end of a block
@example(b"a\nb", 1, 1, 1)  # a last line without a newline
@example(b"y" * 100 + b"\n" + b"y" * 100, 1, 8, 2)  # lines far longer than a block
def test_block_plan_resolves_to_the_reference_slices(tmp_path_factory, data, lines_per_slice, block, task_blocks):
    path = tmp_path_factory.mktemp("plan") / "batch.jsonl"
    path.write_bytes(data)
    expected = reference_cuts(data, lines_per_slice)
    by_driver = plan_slices(str(path), "grid", lines_per_slice, block=block)
    by_tasks = plan_slices(
        str(path),
        "grid",
        lines_per_slice,
        PlanContext(task_map=in_process_map),
        block=block,
        task_blocks=task_blocks,
        driver_bytes=0,
    )
    assert by_tasks == by_driver
    assert resolved(path, by_driver, data) == expected


def test_counting_runs_in_ray_tasks_and_gives_the_driver_plan(tmp_path, ray_session):
    path = tmp_path / "batch.jsonl"
    lines = [json.dumps({"id": f"r{k}", "grid": ["@" + "." * (k % 50)]}) for k in range(3000)]
    lines[7] = ""
    path.write_text("\n".join(lines) + "\n")
    calls = []

    def counting_map(fn, items):  # the real map, watched
        calls.append(len(items))
        return RaySession(None, None).map(fn, items)

    by_tasks = plan_slices(
        str(path), "grid", 250, PlanContext(task_map=counting_map), block=4096, task_blocks=3, driver_bytes=0
    )
    assert calls == [-(-path.stat().st_size // (4096 * 3))] and calls[0] > 1
    assert by_tasks == plan_slices(str(path), "grid", 250, block=4096)
    assert resolved(path, by_tasks, path.read_bytes()) == reference_cuts(path.read_bytes(), 250)
    assert os.getpid() not in RaySession(None, None).map(worker_pid, [1, 2])  # tasks run in Ray workers
    assert (
        plan_slices(str(path), "grid", 250, PlanContext(task_map=counting_map), block=4096) == by_tasks
    )  # small: counted here
    assert len(calls) == 1


def worker_pid(_item) -> int:
    return os.getpid()


def failing_count(blocks):
    """A count that fails on blocks 2..3 only, as a read error would."""
    if blocks.first == 2:
        raise OSError("the disk went away")
    return count_block_newlines(blocks)


def test_failed_counting_names_the_blocks_or_the_changed_file(tmp_path, ray_session):
    path = tmp_path / "batch.jsonl"
    path.write_text("".join(json.dumps({"id": f"r{k}", "grid": ["@"]}) + "\n" for k in range(400)))

    def map_after_an_append(fn, items):  # the file grows while its lines are counted
        with open(path, "a") as handle:
            handle.write("{}\n")
        return RaySession(None, None).map(fn, items)

    with pytest.raises(InputError, match=f"input file {path} changed during the run"):
        plan_slices(str(path), "grid", 10, PlanContext(task_map=map_after_an_append), block=1024, driver_bytes=0)

    def map_failing(fn, items):
        return RaySession(None, None).map(failing_count, items)

    named = rf"failed on blocks 2\.\.3 \(bytes 2,048 to 4,096\) of {path}: OSError: the disk went away"
    with pytest.raises(TaskFailedError, match=named):
        plan_slices(str(path), "grid", 10, PlanContext(task_map=map_failing), block=1024, task_blocks=2, driver_bytes=0)


def run_dungeons(path, out, **options):
    """(result, progress lines) of one dungeons run."""
    stream = io.StringIO()
    result = run_job(
        DungeonJob(str(path), records_per_shard=40),
        RunOptions(out=str(out), **options),
        Progress("dungeons", stream=stream),
    )
    return result, stream.getvalue()


def test_a_resumed_run_reuses_every_shard_whoever_counted(tmp_path, ray_session, monkeypatch):
    path = tmp_path / "batch.jsonl"
    path.write_text(
        "".join(json.dumps({"id": f"d{k}", "grid": ["@.$", ".g$"][: 1 + k % 2]}) + "\n" for k in range(300))
    )
    monkeypatch.setenv("BATCHENUM_TEST_PLAN", "512,2,1000000000")
    first, said = run_dungeons(path, tmp_path / "out", serial=True)  # counted by the driver
    assert "planned with" not in said
    monkeypatch.setenv("BATCHENUM_TEST_PLAN", "512,2,0")
    again, said = run_dungeons(path, tmp_path / "out")  # counted by tasks on the session's Ray
    assert f"planned with {-(-path.stat().st_size // (512 * 2))} tasks" in said
    assert again.shards == first.shards > 1 and again.reused == first.shards and not again.recomputed


@pytest.mark.slow
def test_cli_with_task_counting_gives_the_same_tables(tmp_path):
    path = tmp_path / "batch.jsonl"
    cli("generate", "dungeons", "--count", "2000", "--height", "6", "--width", "1-9", "--seed", "8", "--out", str(path))
    with open(path, "a", encoding="utf-8") as handle:
        handle.write('{"id": "bad", "grid": 7}\nnot json\n\n{"id": "last", "grid": ["@$"]}')
    args = ("run", "dungeons", "--input", str(path), "--records-per-shard", "300", "--workers", "2")
    default = cli(*args, "--out", str(tmp_path / "default"))
    tasks = cli(*args, "--out", str(tmp_path / "tasks"), env={"BATCHENUM_TEST_PLAN": "4096,4,0"})
    assert re.search(r"planned with \d+ tasks on a local Ray with 2 CPUs", tasks.stderr)
    assert "planned with" not in default.stderr
    assert default.stdout.splitlines()[0] == tasks.stdout.splitlines()[0]
    for table in ("answers", "errors"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(tmp_path / "default" / "dungeons" / table),
            pd.read_parquet(tmp_path / "tasks" / "dungeons" / table),
        )
    assert len(pd.read_parquet(tmp_path / "tasks" / "dungeons" / "errors")) == 2
