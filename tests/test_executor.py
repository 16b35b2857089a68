"""The executor's modes with a fake Ray injected, so the head start's hand-over is deterministic:
the fake Ray comes up exactly when a test says, and runs its shards in this process.
(tests/test_local_ray.py runs the same modes with a real private Ray, in their own processes.)"""

from __future__ import annotations

import socket
import sys
import threading

import pytest
import toy_job
from ray import cloudpickle
from toy_job import ToyJob

from batchenum.pipeline.codeversion import code_version
from batchenum.pipeline.job import PlanContext, Shard, ShardResult
from batchenum.pipeline.local_ray import LocalRayError
from batchenum.pipeline.parquet_format import Provenance
from batchenum.pipeline.runner import Executor, ExecutorOptions, ShardFailedError
from batchenum.pipeline.shard_store import ShardStore
from batchenum.pipeline.storage import Storage

for _module in (toy_job, sys.modules[__name__]):  # Ray workers cannot import test modules
    cloudpickle.register_pickle_by_value(_module)
FAKE_NODE = "the fake Ray"


class FakeRay:
    """What the executor needs of a Ray session; it is "up" once ``up`` is set, fails to start
    when given ``failure``, and runs shards here, named as ``FAKE_NODE``."""

    def __init__(self, failure: str | None = None):
        self.private = True
        self.local_cpus = 1
        self.where: str | None = None
        self.tasks_mapped = 0
        self.up = threading.Event()
        self.failure = failure
        self.started = self.released = self.closed = False

    @property
    def connected(self) -> bool:
        return self.where is not None

    shared_up = False

    def start_local(self, in_background: bool = False) -> None:
        self.started = True

    def local_address(self) -> str | None:
        if self.failure:
            raise LocalRayError(self.failure)
        return "fake:1" if self.up.is_set() else None

    def connect(self) -> str:
        self.where = "a fake Ray"
        return self.where

    def run_shards(self, job, shards, store, on_done, verify=frozenset(), say=None) -> None:
        from batchenum.pipeline.attempt import run_attempt

        for shard in shards:
            on_done(shard, run_attempt(job, shard, store, FAKE_NODE, shard.id in verify))

    def map(self, fn, items: list) -> list:
        self.connect()
        return [fn(item) for item in items]

    def release(self) -> None:
        self.released = True

    def close(self) -> None:
        self.closed = True


class HandOverJob(ToyJob):
    """ToyJob whose driver threads compute ``up_after`` shards, then bring the fake Ray up while they
    hold the next one until Ray has delivered a shard."""

    def __init__(self, fake: FakeRay, up_after: int, delivered: threading.Event, shards: int = 10):
        super().__init__(shards=shards)
        self.fake, self.up_after, self.delivered = fake, up_after, delivered
        self.by_driver = 0
        self.lock = threading.Lock()

    def run_shard(self, shard: Shard, context=None) -> ShardResult:
        if threading.current_thread().name.startswith("batchenum-compute"):
            with self.lock:
                self.by_driver += 1
                count = self.by_driver
            if count > self.up_after:
                self.fake.up.set()
                assert self.delivered.wait(30), "the fake Ray never delivered"
        return super().run_shard(shard)


def run_with(tmp_path, job, fake: FakeRay, **options) -> tuple[dict[str, str], list[str]]:
    """Run every planned shard through an executor holding ``fake``; (shard -> node, what it said)."""
    store = ShardStore(Storage.at(str(tmp_path)), job, Provenance(job.name, code_version(job), job.params()))
    ran: dict[str, str] = {}
    said: list[str] = []

    def on_done(shard, attempt) -> None:
        ran[shard.id] = attempt.node
        if attempt.node == FAKE_NODE and hasattr(job, "delivered"):
            job.delivered.set()

    with Executor(ExecutorOptions(**options), said.append, ray=fake) as executor:
        executor.run(job, job.plan(PlanContext()), store, on_done)
    return ran, said


def test_the_head_start_hands_the_front_of_the_plan_to_ray_once_it_is_up(tmp_path):
    fake, delivered = FakeRay(), threading.Event()
    ran, said = run_with(tmp_path, HandOverJob(fake, up_after=2, delivered=delivered), fake, ray_after=0)
    on_ray = sorted(shard for shard, node in ran.items() if node == FAKE_NODE)
    assert on_ray == [f"s{k:03d}" for k in range(7)]  # the front, until none was left
    assert sorted(set(ran) - set(on_ray)) == ["s007", "s008", "s009"]  # the end: two, and the one held
    assert "computing on a fake Ray (and here until its workers deliver)" in said  # what connect() says of it
    assert fake.released and fake.closed


def test_a_run_the_threads_finish_first_never_connects(tmp_path):
    fake = FakeRay()
    ran, said = run_with(tmp_path, ToyJob(shards=5), fake, ray_after=0)
    assert set(ran.values()) == {f"{socket.gethostname()} (the driver)"} and len(ran) == 5
    assert "the local Ray is not needed: every shard was taken here before it was up" in said
    assert fake.started and not fake.connected


def test_ray_starts_only_when_the_threads_have_more_work_left_than_ray_after(tmp_path):
    # 20 shards of 0.05 s on one thread: about 1 s of work, estimated from the first shard
    short, said = FakeRay(), []
    ran, said = run_with(tmp_path / "short", ToyJob(shards=20, seconds=0.05), short, ray_after=5)
    assert len(ran) == 20 and not short.started
    assert "no local Ray needed: the threads here took every shard" in said
    long = FakeRay()
    ran, said = run_with(tmp_path / "long", ToyJob(shards=20, seconds=0.05), long, ray_after=0.2)
    assert len(ran) == 20 and long.started  # never up: the threads finished every shard
    assert "starting a local Ray in the background for the shards left" in said


def test_a_ray_that_cannot_start_leaves_every_shard_to_the_driver(tmp_path):
    fake = FakeRay(failure="NotADirectoryError: no place for Ray's files")
    ran, said = run_with(tmp_path, ToyJob(shards=6), fake, ray_after=0)
    assert len(ran) == 6 and FAKE_NODE not in ran.values()
    assert (
        "the local Ray did not start, so every shard is computed here: NotADirectoryError: no place for Ray's files"
    ) in said


def test_one_shard_is_computed_here_without_starting_ray(tmp_path):
    fake = FakeRay()
    ran, said = run_with(tmp_path, ToyJob(shards=1), fake)
    assert list(ran) == ["s000"] and not fake.started
    assert "one shard to compute: computing it here, without starting Ray" in said


def test_without_the_head_start_every_shard_goes_to_ray(tmp_path):
    fake = FakeRay()
    ran, said = run_with(tmp_path, ToyJob(shards=4), fake, head_start=False)
    assert set(ran.values()) == {FAKE_NODE} and len(ran) == 4
    assert said == ["computing on a fake Ray"]


class SplittingJob(ToyJob):
    """ToyJob whose shard s002 splits across tasks (Job.splits_on_ray): only a Ray may run it."""

    def splits_on_ray(self, shard: Shard) -> bool:
        return shard.id == "s002"


def test_a_pending_shard_that_splits_skips_the_head_start(tmp_path):
    # the driver's threads would compute s002 whole: Ray takes every shard from the start
    fake = FakeRay()
    ran, said = run_with(tmp_path, SplittingJob(shards=4), fake, ray_after=3600)
    assert set(ran.values()) == {FAKE_NODE} and len(ran) == 4
    assert said == [
        "1 shard may split across tasks: computing on a local Ray, no head start",
        "computing on a fake Ray",
    ]


def test_a_shard_that_splits_runs_here_with_serial(tmp_path):
    fake = FakeRay()
    ran, said = run_with(tmp_path, SplittingJob(shards=4), fake, serial=True)
    assert len(ran) == 4 and not fake.started and said == ["computing in this process (--serial)"]


def test_serial_runs_in_plan_order_and_never_touches_ray(tmp_path):
    fake = FakeRay()
    ran, said = run_with(tmp_path, ToyJob(shards=4), fake, serial=True)
    assert list(ran) == ["s000", "s001", "s002", "s003"] and not fake.started and not fake.connected
    assert said == ["computing in this process (--serial)"]


def test_a_failing_shard_on_a_driver_thread_is_raised_by_name(tmp_path):
    fake = FakeRay()
    with pytest.raises(ShardFailedError, match=r"shard s002 failed: ValueError: bad input in s002"):
        run_with(tmp_path, ToyJob(shards=5, fail_on="s002"), fake)
    assert fake.closed


def test_planning_on_one_machine_offers_a_task_map_that_starts_ray(tmp_path):
    fake = FakeRay()
    with Executor(ExecutorOptions(workers=3), lambda _: None, ray=fake) as executor:
        context = executor.plan_context()
    assert context.cpus == fake.local_cpus and context.task_map is not None and not context.map_ready
    with Executor(ExecutorOptions(serial=True), lambda _: None, ray=fake) as executor:
        assert executor.plan_context() == PlanContext()


class _NamedTasks(ToyJob):
    """ToyJob whose shards record the name Ray gave their task."""

    def shard_label(self, shard: Shard) -> str:
        return f"{shard.id} values {shard.spec['start']}-{shard.spec['stop'] - 1}"

    def run_shard(self, shard: Shard, context=None) -> ShardResult:
        import ray

        result = super().run_shard(shard)
        result.tables["items"]["label"] = [ray.get_runtime_context().get_task_name()] * len(
            result.tables["items"]["value"]
        )
        return result


def test_ray_tasks_are_named_after_the_job_and_the_shard(tmp_path, ray_session):
    from batchenum.pipeline.runner import RaySession

    job = _NamedTasks(shards=3)
    store = ShardStore(Storage.at(str(tmp_path)), job, Provenance(job.name, code_version(job), job.params()))
    RaySession(None, None).run_shards(job, job.plan(PlanContext()), store, lambda shard, attempt: None)
    labels = {
        table.column("label")[0].as_py()
        for table in (store.read_shard_tables(Shard(f"s{k:03d}"))["items"] for k in range(3))
    }
    assert labels == {"toy s000 values 0-9", "toy s001 values 5-14", "toy s002 values 10-19"}


def test_a_batch_shard_is_labelled_by_its_lines_or_rows(tmp_path):
    from batchenum.jobs.dungeons import DungeonJob

    path = tmp_path / "batch.jsonl"
    path.write_text("".join(f'{{"id": "d{k}", "grid": ["@"]}}\n' for k in range(7)))
    job = DungeonJob(str(path), records_per_shard=3)
    assert [job.shard_label(shard) for shard in job.plan(PlanContext())] == [
        "s00000 lines 1-3",
        "s00001 lines 4-6",
        "s00002 lines 7-end",
    ]


class _HandsBack(ToyJob):
    """ToyJob whose every shard of generation 0 or 1 hands back two shards of the next one."""

    hands_back = True

    def plan(self, context: PlanContext) -> list[Shard]:
        return [Shard(shard.id, {**shard.spec, "generation": 0}) for shard in super().plan(context)]

    def run_shard(self, shard: Shard, context=None) -> ShardResult:
        result = super().run_shard(shard)
        generation = shard.spec["generation"]
        if generation < 2:
            result.children = [Shard(f"{shard.id}-{k}", {**shard.spec, "generation": generation + 1}) for k in range(2)]
        return result


@pytest.mark.parametrize(
    "options",
    [{"serial": True}, {"head_start": False}, {"ray_after": 0}, {"ray_after": 3600}],
    ids=["serial", "ray", "head start, ray up", "head start, threads only"],
)
@pytest.mark.parametrize("planned", [1, 3])
def test_every_shard_handed_back_is_computed_once_in_every_mode(tmp_path, options, planned):
    job, fake = _HandsBack(shards=planned, seconds=0.01), FakeRay()
    fake.up.set()
    store = ShardStore(Storage.at(str(tmp_path)), job, Provenance(job.name, code_version(job), job.params()))
    ran: list[str] = []
    with Executor(ExecutorOptions(**options), lambda _: None, ray=fake) as executor:
        executor.run(job, job.plan(PlanContext()), store, lambda shard, attempt: ran.append(shard.id))
    expected = {f"s{k:03d}{tail}" for k in range(planned) for tail in ("", "-0", "-1", "-0-0", "-0-1", "-1-0", "-1-1")}
    assert sorted(ran) == sorted(expected)


def test_a_cluster_of_the_drivers_own_node_is_not_probed_for_shared_folders(tmp_path, ray_session):
    """Its one node sees what the driver sees; a probe's task would wait for a worker to start."""
    from batchenum.pipeline.runner import RaySession, _driver_node_only, check_shared_folders

    RaySession(None, None).connect()
    assert _driver_node_only()
    (tmp_path / "out").mkdir()
    check_shared_folders({"out": str(tmp_path / "out")}, {"/nowhere/input.jsonl": (1, 2)})  # nothing refused
    assert list((tmp_path / "out").iterdir()) == []  # and no probe written
