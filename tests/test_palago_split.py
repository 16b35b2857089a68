"""One height's sweep split across tasks (solvers/palago/transfer.py, "one height across tasks";
docs/palago_transfer.md, section 6): the split sweep counts what the whole one counts, processing
the same states; the merge against a slow reference; the pipeline on Ray against a serial run."""

from __future__ import annotations

import gc
import os
import weakref

import numpy as np
import pyarrow.parquet as pq
import pytest

from batchenum.jobs.palago_transfer import sweep_height
from batchenum.pipeline.tasks import InProcessTasks, _Done
from batchenum.solvers.palago.transfer import (
    Generation,
    count_height,
    merge_generations,
    next_phase,
    split_generation,
)

P = 2**61 - 1


@pytest.mark.parametrize("height, max_n, parts", [(3, 14, 2), (5, 20, 3), (7, 24, 5), (9, 26, 4), (10, 28, 7)])
def test_split_sweep_counts_and_processes_what_the_whole_one_does(height, max_n, parts):
    whole_stats, split_stats = np.zeros(2, np.int64), np.zeros(2, np.int64)
    whole = count_height(height, max_n, stats=whole_stats)
    tasks = InProcessTasks()
    split = sweep_height(height, max_n, stats=split_stats, tasks=tasks, parts=parts, piece_states=8)
    assert split.tolist() == whole.tolist()
    assert tasks.submitted > 2 * parts  # several columns were split
    # the signature cut keeps states that meet within a phase in one task: no state twice
    assert split_stats[1] == whole_stats[1]


class TasksThatWeighTheirInputs(InProcessTasks):
    """In-process tasks that note the most states one task was given, and the most tasks a phase had."""

    largest = most_in_a_phase = 0

    def submit(self, fn, *args, returns=1, name=""):
        values = [arg.value if hasattr(arg, "value") else arg for arg in args]
        given = sum(value.rows for value in values if isinstance(value, Generation))
        self.largest = max(self.largest, given)
        self.most_in_a_phase = max(self.most_in_a_phase, int(name.rsplit("/", 1)[1]))  # "... part t/k"
        return super().submit(fn, *args, returns=returns, name=name)


def test_a_large_generation_runs_as_more_tasks_than_cpus_each_bounded():
    whole_stats, split_stats = np.zeros(2, np.int64), np.zeros(2, np.int64)
    whole = count_height(9, 26, stats=whole_stats)
    tasks = TasksThatWeighTheirInputs()
    split = sweep_height(9, 26, stats=split_stats, tasks=tasks, parts=2, piece_states=8, task_states=100)
    assert split.tolist() == whole.tolist() and split_stats[1] == whole_stats[1]
    assert whole_stats[0] > 3 * 100  # the largest generation needs more tasks than 2 CPUs
    assert tasks.most_in_a_phase >= 8  # 2 CPUs, yet as many tasks as keep each near task_states
    # a hash of a few hundred states' signatures cuts them unevenly; millions, evenly
    assert 100 < tasks.largest <= 4 * 100, tasks.largest


class TasksThatWatchTheirInputs(InProcessTasks):
    """In-process tasks whose handles can be watched (weak references): on each ``get`` of a
    task's results it notes how many input buckets of tasks already waited for are still alive."""

    class Handle(_Done):
        __slots__ = ("__weakref__", "task")

    def __init__(self):
        super().__init__()
        self.inputs: list[list[weakref.ref]] = []  # task i's input handles
        self.waited: set[int] = set()
        self.kept = 0  # input buckets of tasks waited for that were alive at a later get

    def submit(self, fn, *args, returns=1, name=""):
        handles = [self.Handle(done.value) for done in super().submit(fn, *args, returns=returns, name=name)]
        handles[0].task = len(self.inputs)
        self.inputs.append([weakref.ref(arg) for arg in args if isinstance(arg, _Done)])
        return handles

    def get(self, handles):
        gc.collect()
        self.kept += sum(ref() is not None for task in self.waited for ref in self.inputs[task])
        self.waited |= {handle.task for handle in handles if getattr(handle, "task", None) is not None}
        return super().get(handles)


def test_a_phase_lets_each_tasks_inputs_go_once_it_is_done():
    """The object store then holds about one generation a phase, not its inputs and outputs whole."""
    tasks = TasksThatWatchTheirInputs()
    split = sweep_height(9, 26, tasks=tasks, parts=2, piece_states=8, task_states=100)
    assert split.tolist() == count_height(9, 26).tolist()
    assert len(tasks.waited) > 100 and sum(map(len, tasks.inputs)) > 1000  # many tasks, many buckets
    assert tasks.kept == 0


def test_one_part_or_large_pieces_split_nothing():
    tasks = InProcessTasks()
    assert sweep_height(6, 20, tasks=tasks, parts=1, piece_states=1).tolist() == count_height(6, 20).tolist()
    assert sweep_height(6, 20, tasks=tasks, parts=8, piece_states=10**9).tolist() == count_height(6, 20).tolist()
    assert tasks.submitted == 0


def checkpoint_at(folder, shard_id: str):
    """A real checkpoint of shard ``shard_id`` under ``folder`` (pipeline/checkpoint.py)."""
    from batchenum.pipeline.checkpoint import Checkpoint
    from batchenum.pipeline.job import Shard
    from batchenum.pipeline.storage import Storage

    return Checkpoint(Storage.at(str(folder)), Shard(shard_id, {}), {"code": "test"})


def saved_snapshots(checkpoint, into) -> list:
    """Make ``checkpoint`` copy its whole folder (index and parts) into a new folder under ``into``
    after every save it commits; returns the list of those folders, filled as the saves come."""
    import shutil

    snapshots: list = []
    save = checkpoint.save

    def save_and_copy(data, progress="", done=None):
        save(data, progress, done)
        snapshot = into / f"save-{len(snapshots)}"
        shutil.copytree(checkpoint.storage.root, snapshot)
        snapshots.append(snapshot)

    checkpoint.save = save_and_copy
    return snapshots


def saved_header(folder, shard: str) -> dict:
    """The first line of a save: its provenance, time, progress and share done."""
    import json

    return json.loads((folder / "_checkpoints" / f"{shard}.ckpt").read_bytes().partition(b"\n")[0])


def test_a_split_save_is_written_bucket_by_bucket_and_resumes_split_or_whole(tmp_path):
    from batchenum.jobs.palago_transfer import BucketIndex

    # large enough for columns that take longer than nine saves (Saver's rule): about 1.5 s in all
    height, max_n, piece_states = 10, 34, 100
    whole_stats = np.zeros(2, np.int64)
    whole = count_height(height, max_n, stats=whole_stats).tolist()
    checkpoint = checkpoint_at(tmp_path / "run", "h010")
    snapshots = saved_snapshots(checkpoint, tmp_path)
    split = sweep_height(
        height, max_n, tasks=InProcessTasks(), parts=3, piece_states=piece_states, checkpoint=checkpoint, save_every=0
    )
    assert split.tolist() == whole
    saves = [(folder, checkpoint_at(folder, "h010").load()) for folder in snapshots]
    bucketed = [(folder, BucketIndex.from_bytes(data)) for folder, data in saves if BucketIndex.holds(data)]
    assert bucketed, "a split column was saved"
    # each save, whole or split, says how far the height is by the cost model, for the run's estimate
    shares = [saved_header(folder, "h010")["done"] for folder in snapshots]
    assert shares == sorted(shares) and 0 < shares[0] and shares[-1] <= 0.99, shares
    # the parts of older saves are removed once a later save is committed
    last = BucketIndex.from_bytes(saves[-1][1]).names if BucketIndex.holds(saves[-1][1]) else ()
    left = {path.name for path in (tmp_path / "run" / "_checkpoints").glob("h010.*.part")}
    assert left == {f"h010.{name}.part" for name in last}
    for folder, index in bucketed:
        parts = {path.name for path in (folder / "_checkpoints").glob("h010.*.part")}
        assert {f"h010.{name}.part" for name in index.names} <= parts and len(index.names) >= 2  # a file a part
        assert (folder / "_checkpoints" / "h010.ckpt").stat().st_size < 4096  # the index holds no states
        for tasks, parts_now in ((InProcessTasks(), 2), (InProcessTasks(), 5), (None, 1)):
            stats = np.zeros(2, np.int64)
            resumed = sweep_height(
                height,
                max_n,
                stats=stats,
                tasks=tasks,
                parts=parts_now,
                piece_states=piece_states,
                resume=checkpoint_at(folder, "h010").load(),
                checkpoint=checkpoint_at(folder, "h010"),
            )
            assert resumed.tolist() == whole
            assert stats[1] == whole_stats[1]  # the states before the save, and after it, once each


def random_generation(rng: np.random.Generator, rows: int, n1: int, distinct_keys: int) -> Generation:
    """Rows drawn from ``distinct_keys`` keys (so keys repeat), random sparse ranges, garbage
    outside each range (which must never be read).  Half the rows are wide, residues up to
    2^64 - 1 and P - 1 (so sums wrap); the others narrow, exact integers from 2^51 to 2^53 (so two
    of them can sum past 2^53, where a row turns wide)."""
    pool = rng.integers(0, 2**62, size=(distinct_keys, 3), dtype=np.int64)
    keys = pool[rng.integers(0, distinct_keys, size=rows)]
    lo = rng.integers(0, n1, size=rows)
    hi = np.minimum(n1 - 1, lo + rng.integers(0, 4, size=rows))
    pw = rng.integers(0, 2**64, size=(rows, n1), dtype=np.uint64, endpoint=False)
    pp = rng.integers(0, P, size=(rows, n1), dtype=np.int64)
    pf = rng.random((rows, n1)) * 1e6 + 1.0
    exact = rng.integers(2**51, 2**53, size=(rows, n1), dtype=np.int64)
    narrow = rng.random(rows) < 0.5
    pw[narrow], pp[narrow], pf[narrow] = exact[narrow], exact[narrow], exact[narrow]
    return Generation.pack(keys, pw, pp, pf, lo.astype(np.int64), hi.astype(np.int64))


def slow_merge(pieces: list[Generation], n1: int) -> dict:
    """{key: (lo, hi, [(w mod 2^64, p mod P, f) per coefficient lo..hi])} with Python ints."""
    merged: dict = {}
    for piece in pieces:
        pw, pp, pf = piece.channels(n1)
        for row in range(piece.rows):
            key = tuple(piece.keys[row].tolist())
            lo, hi = int(piece.lo[row]), int(piece.hi[row])
            before = merged.get(key, (lo, hi, {}))
            sums = dict(before[2])
            for k in range(lo, hi + 1):
                w, p, f = sums.get(k, (0, 0, 0.0))
                sums[k] = ((w + int(pw[row, k])) % 2**64, (p + int(pp[row, k])) % P, f + float(pf[row, k]))
            merged[key] = (min(lo, before[0]), max(hi, before[1]), sums)
    return {
        key: (lo, hi, [sums.get(k, (0, 0, 0.0)) for k in range(lo, hi + 1)]) for key, (lo, hi, sums) in merged.items()
    }


def as_dict(generation: Generation, n1: int) -> dict:
    out = {}
    pw, pp, pf = generation.channels(n1)
    for row in range(generation.rows):
        lo, hi = int(generation.lo[row]), int(generation.hi[row])
        out[tuple(generation.keys[row].tolist())] = (
            lo,
            hi,
            [(int(pw[row, k]), int(pp[row, k]), float(pf[row, k])) for k in range(lo, hi + 1)],
        )
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_merge_sums_equal_keys_as_the_slow_reference_does(seed):
    rng = np.random.default_rng(seed)
    n1 = 9
    pieces = [random_generation(rng, rows, n1, 25) for rows in (40, 0, 17, 60)]
    assert 0 < sum(piece.wide.sum() for piece in pieces) < sum(piece.rows for piece in pieces)
    merged = merge_generations(pieces, n1)
    expected, got = slow_merge(pieces, n1), as_dict(merged, n1)
    assert len(got) == merged.rows == len(expected)  # each key once
    for key, (lo, hi, coefficients) in expected.items():
        assert got[key][:2] == (lo, hi)
        for (w, p, f), (w2, p2, f2) in zip(coefficients, got[key][2]):
            assert (w2, p2) == (w, p) and f2 == pytest.approx(f, rel=1e-12)
    assert merge_generations([], n1).rows == 0


def test_split_generation_keeps_every_row_once_and_equal_signatures_together():
    height, max_n = 10, 30
    # real keys: a generation of a sweep, taken from a save
    saved = []
    count_height(height, max_n, save=lambda data, progress: saved.append(data), save_every=0.0)
    from batchenum.solvers.palago.transfer import _SweepState

    live = max(
        (_SweepState.from_bytes(data, (height, max_n, True, 3)).generation_rows() for data in saved),
        key=lambda generation: generation.rows,
    )  # the largest generation
    for steps in ((0, 5), (5, 10), (0, 1), (3, 7), (9, 10)):
        buckets = split_generation(live, 6, height, steps)
        assert sum(b.rows for b in buckets) == live.rows
        keys = np.concatenate([b.keys for b in buckets]).tolist()
        assert sorted(map(tuple, keys)) == sorted(map(tuple, live.keys.tolist()))
        # rows outside the phase's steps (and the flag the phase cannot set) decide the bucket:
        # equal signatures never in two buckets
        where = {}
        for b, bucket in enumerate(buckets):
            for key in bucket.keys:
                labels = [(int(key[k // 10]) >> (6 * (k % 10))) & 63 for k in range(height)]
                flags = int(key[0]) >> 60
                signature = (
                    tuple(bool(x) for k, x in enumerate(labels) if not steps[0] <= k < steps[1]),
                    flags & 1 if steps[0] > 0 else None,
                    flags & 2 if steps[1] < height else None,
                )
                assert where.setdefault(signature, b) == b
        assert len(where) > 6 and min(b.rows for b in buckets) > 0


def test_phases_are_short_for_many_large_tasks_and_end_at_the_column_end():
    assert next_phase(10, 10, 64 * 10**6, 64) == (0, 1)  # 64 tasks of a million states: one step
    assert next_phase(12, 12, 64 * 10**6, 64) == (0, 1)
    assert next_phase(16, 16, 64 * 10**6, 64) == (0, 4)  # a signature of 6 + log2(64) rows
    assert next_phase(12, 12, 2 * 10**6, 2) == (0, 5)  # two tasks: 6 + 1 rows
    assert next_phase(10, 10, 2 * 10**6, 3) == (0, 2)  # three: 6 + 2
    assert next_phase(10, 3, 4000, 2) == (3, 8)  # 2,000 states a task: five steps
    assert next_phase(10, 8, 4000, 2) == (8, 10)  # never past the column's end
    assert next_phase(4, 4, 10, 1) == (0, 2)  # at most half a column: the other half is the signature
    assert next_phase(1, 1, 10, 1) == (0, 1)


def test_in_process_tasks_run_at_once_and_check_their_returns():
    tasks = InProcessTasks()
    (handle,) = tasks.submit(divmod, 7, 2)
    first, second = tasks.submit(divmod, *tasks.submit(int, "9"), 4, returns=2)
    assert tasks.get([handle, first, second]) == [(3, 1), 2, 1]
    with pytest.raises(ValueError, match="returned 2 values, not the 3 asked for"):
        tasks.submit(divmod, 7, 2, returns=3)


def _witnessed(job_class: type, witness: str) -> type:
    """``job_class`` whose shards write, from the process that runs them, the kind of their tasks
    and the name of every task they submit into the folder ``witness``."""

    class Witnessed(job_class):  # type: ignore[misc, valid-type]
        def run_shard(self, shard, context):
            tasks, submit = context.tasks, context.tasks.submit
            record = os.path.join(witness, f"{shard.id}-{os.getpid()}.txt")

            def recorded(fn, *args, returns=1, name=""):
                with open(record, "a") as names:
                    names.write(f"{type(tasks).__name__} {name}\n")
                return submit(fn, *args, returns=returns, name=name)

            tasks.submit = recorded
            return super().run_shard(shard, context)

    return Witnessed


def test_ray_run_with_split_heights_equals_the_serial_run(tmp_path, ray_session):
    # Pieces of at least 40 states: at n = 22 the larger heights' columns run as nested tasks on
    # the session's Ray (2 CPUs, so 2 tasks a phase); the shards record the tasks they submit.
    import batchenum
    from batchenum.jobs.palago_transfer import PalagoTransferJob

    max_n = 22
    serial = batchenum.run("palago", max_n=max_n, method="transfer", out=str(tmp_path / "serial"), serial=True)
    witness = tmp_path / "witness"
    witness.mkdir()
    job = _witnessed(PalagoTransferJob, str(witness))(max_n)
    job.piece_states = 40
    on_ray = batchenum.run(job, out=str(tmp_path / "ray"))
    serial_dir, ray_dir = tmp_path / "serial" / "palago", tmp_path / "ray" / "palago"
    assert (serial_dir / "creature_counts.parquet").read_bytes() == (ray_dir / "creature_counts.parquet").read_bytes()
    table = [(folder / "creature_counts.md").read_text().partition("| n |")[2] for folder in (serial_dir, ray_dir)]
    assert table[0] == table[1] and table[0]  # the rows (the text above them names the --out folder)
    assert on_ray.summary == serial.summary
    submitted = [line for path in witness.iterdir() for line in path.read_text().splitlines()]
    assert any(line.startswith("_NestedTasks ") and "part 2/2" in line for line in submitted), submitted[:20]
    # a split height's CPU is its own thread's and its tasks', which it counts and measures
    split_stats = [stats for stats in _shard_stats(ray_dir) if "split_tasks" in stats]
    assert split_stats and all(stats["split_tasks"] >= 2 and stats["cpu_ms"] >= 0 for stats in split_stats)
    assert all(stats["task_peak_rss_bytes"] > 10 * 2**20 for stats in split_stats)  # an interpreter at least
    # and the published cost statement says so, per shard
    from batchenum.jobs.palago_publish import machine_description, publish

    publish(tmp_path / "ray", tmp_path / "published", machine_description())
    cost = pq.read_table(tmp_path / "published" / "palago" / "cost.parquet").to_pandas()
    assert cost.split_tasks.notna().sum() == len(split_stats)
    assert "split: tasks" in (tmp_path / "published" / "palago" / "cost.md").read_text()


def _shard_stats(job_folder) -> list[dict]:
    """The stats every committed height shard's file records in its footer."""
    import json

    from batchenum.pipeline.parquet_format import recorded_metadata

    files = sorted((job_folder / "_shards" / "partial_counts").glob("h*.parquet"))
    return [json.loads(recorded_metadata(pq.read_schema(path))["stats"]) for path in files]


# A run of the transfer job on a private Ray of 4 CPUs whose heights split into tasks of at least 40
# states, saving every 0.2 s: argv[1] the --out folder, argv[2] max_n.
_SPLIT_RUN = """
import sys
import batchenum
from batchenum.jobs.palago_transfer import PalagoTransferJob
job = PalagoTransferJob(int(sys.argv[2]), checkpoint_interval=0.2)
job.piece_states = 40
batchenum.run(job, out=sys.argv[1], workers=4, head_start=False)
"""


def split_saves(folder) -> dict:
    """{shard id: BucketIndex} of the split saves committed in ``folder``/palago/_checkpoints."""
    from batchenum.jobs.palago_transfer import BucketIndex

    found = {}
    for path in (folder / "palago" / "_checkpoints").glob("h*.ckpt"):
        data = path.read_bytes().partition(b"\n")[2]
        if BucketIndex.holds(data):
            found[path.stem] = BucketIndex.from_bytes(data)
    return found


def killed_during_a_split_column(script, out, max_n: int) -> dict:
    """Start the split run and SIGKILL its whole process group (the driver; Ray goes with it) once
    a split save is committed; returns the split saves the kill left (again, if a first kill came
    as late as the height's commit)."""
    import signal
    import subprocess
    import sys
    import time

    for _ in range(3):
        run = subprocess.Popen(
            [sys.executable, str(script), str(out), str(max_n)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 900
        while not split_saves(out):
            assert run.poll() is None, "the run finished before any split column was saved"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        os.killpg(run.pid, signal.SIGKILL)
        run.wait()
        left = split_saves(out)
        if left:
            return left
    raise AssertionError("every kill came after the saved height had committed")


def test_a_run_killed_during_a_split_column_resumes_from_its_bucketed_save(tmp_path):
    import json
    import subprocess
    import sys

    import pyarrow.parquet as pq

    import batchenum

    max_n = 28
    batchenum.run("palago", max_n=max_n, method="transfer", out=str(tmp_path / "serial"), serial=True)
    script = tmp_path / "split_run.py"
    script.write_text(_SPLIT_RUN)
    out = tmp_path / "split"
    saved = killed_during_a_split_column(script, out, max_n)
    for shard, index in saved.items():  # every part the index names is on disk, written whole
        for name in index.names:
            assert (out / "palago" / "_checkpoints" / f"{shard}.{name}.part").stat().st_size > 0
    subprocess.run([sys.executable, str(script), str(out), str(max_n)], check=True, timeout=900)
    table = "palago/creature_counts.parquet"
    assert (out / table).read_bytes() == (tmp_path / "serial" / table).read_bytes()
    for shard, index in saved.items():
        footer = pq.ParquetFile(out / "palago" / "_shards" / "partial_counts" / f"{shard}.parquet")
        stats = json.loads(footer.schema_arrow.metadata[b"batchenum.stats"])
        whole = np.zeros(2, np.int64)
        count_height(int(shard[1:]), max_n, stats=whole)
        # resumed from the save: the states before it came from it, and none was processed twice
        assert stats["state_steps_resumed"] == int(index.stats[1]) > 0
        assert stats["state_steps"] == int(whole[1])
    assert not list((out / "palago" / "_checkpoints").iterdir())  # index and parts removed at the commit
