"""The only module that imports Ray.  ``Executor`` runs a job's shards and owns everything that
takes: the Ray it connects to, the driver's compute threads, retries and shutdown.  How the modes
are put together, and why the head start earns its complexity: docs/design.md, "The executor".

A run is made of two parts:

- ``_InDriver``: the driver computes shards itself, in this thread (``--serial``) or in one thread
  per CPU (the kernels release the GIL).
- ``RaySession``: the Ray the run uses, connected on demand: a cluster (``--address`` or
  ``RAY_ADDRESS``) or a private local Ray, which only ``LocalRay`` starts, whatever the mode.  It
  runs shards as tasks in a bounded window and lends the plan a task map.

Serial is the first part alone, Ray the second alone, and the head start (the default on one
machine) both over one ``ShardQueue``: the threads take shards from the end of the plan, a private
Ray starts in the background only if they have more than ``RAY_AFTER_SECONDS`` of work left, Ray
takes from the front once it is up, and a run the threads finish first never connects.  A shard's files are the same wherever it ran.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import multiprocessing
import os
import re
import secrets
import signal
import socket
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from batchenum.pipeline import faults
from batchenum.pipeline.attempt import Attempt, CodeMismatchError, run_attempt
from batchenum.pipeline.codeversion import user_modules
from batchenum.pipeline.errors import PipelineError, RunStoppedError, SpokenError, UsageError, literal
from batchenum.pipeline.job import Job, PlanContext, Shard
from batchenum.pipeline.local_ray import LocalRay, LocalRayError
from batchenum.pipeline.shard_store import ShardStore

__all__ = [
    "Executor",
    "ExecutorOptions",
    "RaySession",
    "ShardQueue",
    "ClusterError",
    "CodeMismatchError",
    "ShardFailedError",
    "SharedFolderError",
    "TaskFailedError",
    "TASK_MAX_RETRIES",
]

# A dead worker (SIGKILL, lost node) is retried this many times by default (--retries); a Python
# exception never is, since rerunning a bad input or a bug gives the same failure.
TASK_MAX_RETRIES = 3
# How long a private local Ray may take to come up when a run waits for it (docs/benchmarks.md).
LOCAL_RAY_TIMEOUT = 180.0
# The head start starts a private Ray only when its threads have more work left than this, in wall
# seconds: on one machine Ray's workers add no CPU (the kernels release the GIL), and starting Ray
# and its workers costs seconds of CPU that a short run would lose (docs/design.md, the head start).
RAY_AFTER_SECONDS = 20.0
# ... and only when they keep less than this share of their CPUs busy (Python holding the GIL).
RAY_WHEN_BUSY = 0.75


class ClusterError(PipelineError):
    """Ray could not be started or reached."""


class ShardFailedError(PipelineError):
    """A shard raised an exception or its worker kept dying."""


class TaskFailedError(PipelineError):
    """A task of the plan's task map could not finish."""


class SharedFolderError(SpokenError):
    """A cluster node does not see the local folder the run reads or writes (named in the caller's
    words: ``out`` from Python, ``--out`` from the CLI)."""


OnDone = Callable[[Shard, Attempt], None]


@dataclass(frozen=True)
class ExecutorOptions:
    """How to run shards.

    address:    a Ray cluster; None: ``RAY_ADDRESS``, else a private local Ray.
    workers:    CPUs of the private local Ray (default: all cores).
    serial:     every shard in this thread, without Ray.
    head_start: compute shards in the driver's threads, starting a private local Ray only once they
                have more than ``ray_after`` seconds of work left.
    window:     tasks in flight (default: twice the cluster's CPUs, at least 8).
    retries:    times a task whose worker or node dies is run again.
    """

    address: str | None = None
    workers: int | None = None
    serial: bool = False
    head_start: bool = True
    window: int | None = None
    retries: int = TASK_MAX_RETRIES
    ray_after: float = RAY_AFTER_SECONDS


class Executor:
    """Runs one job run's shards: ``with Executor(options, say) as executor``, then
    ``executor.plan_context(job)`` for the job's plan and ``executor.run(...)`` for its shards.
    Leaving the block stops whatever Ray the executor started and waits for it.

    ray: the Ray session to use; tests pass a fake one to drive the head start deterministically.
    """

    def __init__(self, options: ExecutorOptions, say: Callable[[str], None], ray: RaySession | None = None):
        self.options = options
        self.say = say
        self.ray = ray or RaySession(options.address, options.workers, options.retries, options.window)

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc_info) -> None:
        self.ray.close()

    @property
    def on_cluster(self) -> bool:
        """Whether the shards run on a Ray this run did not start (whose nodes may not share files)."""
        return not self.options.serial and not self.ray.private

    def plan_context(self, job: Job | None = None) -> PlanContext:
        """What ``job``'s plan may know and use.  On a cluster the driver connects first, so that
        the plan follows the cluster's size; a private Ray starts only if the plan asks for tasks,
        which get the job's code that is not installed, as its shards do."""
        if self.options.serial:
            return PlanContext()
        task_map = functools.partial(self.ray.map, job=job)
        if self.on_cluster:
            self.ray.connect()
            return PlanContext(self.ray.cpus(), task_map, map_ready=True)
        return PlanContext(self.ray.local_cpus, task_map, map_ready=self.ray.connected)

    def run(
        self,
        job: Job,
        shards: list[Shard],
        store: ShardStore,
        on_done: OnDone,
        verify: frozenset = frozenset(),
        release: bool = True,
    ) -> None:
        """Run ``shards`` (those in ``verify`` are committed: check their input first), and the
        shards they hand back (``Attempt.children``), calling ``on_done`` as each finishes, from
        whichever thread ran it.  ``release``: give up the private Ray at the end (else the caller
        does, with ``ray.release()``, once the merge needs it no more)."""
        queue = ShardQueue(shards)

        def done(shard: Shard, attempt: Attempt) -> None:
            queue.finished(attempt.children)
            on_done(shard, attempt)

        here = _InDriver(job, store, verify, done)
        # a private Ray this process already connected (another run's, or a test session's) is used at once
        head_start = self.options.head_start and self.ray.private and not (self.ray.connected or self.ray.shared_up)
        splits = sum(1 for shard in shards if job.splits_on_ray(shard)) if head_start and not self.options.serial else 0
        if splits:
            many = "s" if splits > 1 else ""
            self.say(f"{splits} shard{many} may split across tasks: computing on a local Ray, no head start")
            head_start = False
        try:
            if self.options.serial:
                self.say("computing in this process (--serial)")
                here.run(queue)
            elif head_start and len(queue) == 1:
                # starting a private Ray takes seconds that one shard cannot win back
                self.say("one shard to compute: computing it here, without starting Ray")
                here.run(queue, one=True)
                if queue:
                    self.say(
                        f"it handed back {len(queue)} shards: computing them here; a local Ray starts if much work is left"
                    )
                    self._head_start(queue, here)
            elif head_start:
                self.say("computing shards here; a local Ray starts if much work is left")
                self._head_start(queue, here)
            else:
                self.say(f"computing on {self.ray.connect()}")
                self.ray.run_shards(job, queue.front(), store, done, verify, self.say)
            self._finish_handed_back(queue, here)
        finally:
            if release:
                self.ray.release()  # in the background: the driver writes its tables meanwhile

    def _finish_handed_back(self, queue: ShardQueue, here: _InDriver) -> None:
        """Shards handed back after the workers stopped taking (a driver thread's, once Ray took
        over): on the Ray, if connected, else here."""
        while queue:
            if self.ray.connected:
                self.ray.run_shards(here.job, queue.front(), here.store, here.on_done, here.verify, self.say)
            else:
                here.run(queue)

    def _head_start(self, queue: ShardQueue, here: _InDriver) -> None:
        """The driver's threads take shards from the end.  A private Ray is started only once they
        have more than ``ray_after`` seconds of work left, and takes shards from the front once it
        is up; once its workers deliver, the threads take no more."""
        ray_delivers = threading.Event()
        threads = here.start(queue, min(self.ray.local_cpus, len(queue)), stop=ray_delivers)

        def on_ray_done(shard: Shard, attempt: Attempt) -> None:
            ray_delivers.set()
            here.on_done(shard, attempt)

        try:  # one try: Ctrl-C while Ray is still starting must stop what has started
            if self._ray_worth_starting(queue, here, len(threads)) and self._local_ray_wanted(queue, here):
                self.say(f"computing on {self.ray.connect()} (and here until its workers deliver)")
                self.ray.run_shards(here.job, queue.front(until=here.failed), here.store, on_ray_done, here.verify)
            here.join(threads)
        finally:
            ray_delivers.set()

    def _ray_worth_starting(self, queue: ShardQueue, here: _InDriver, threads: int) -> bool:
        """Wait until Ray is worth starting, then start it in the background (True); False if the
        threads took every shard first.  Worth it: the threads have more than ``ray_after`` seconds
        of work left (from the shards they finished, or from the time spent before they finish one)
        and keep less than ``RAY_WHEN_BUSY`` of their CPUs busy (Python holding the GIL, say).  On
        one machine Ray's workers add no CPU to threads that keep theirs busy, and starting them
        costs seconds of it."""
        started, cpu_started = time.monotonic(), time.process_time()
        while not here.failed():
            if not queue:
                self.say("no local Ray needed: the threads here took every shard")
                return False
            elapsed = time.monotonic() - started
            left = here.seconds_left(len(queue), threads)
            # shards in processes of the driver's keep its CPUs busy, though not this process
            busy = 1.0 if here.in_processes else (time.process_time() - cpu_started) / max(elapsed, 1e-3) / threads
            if (elapsed if left is None else left) > self.options.ray_after and (
                busy < RAY_WHEN_BUSY or not self.options.ray_after
            ):
                self.say("starting a local Ray in the background for the shards left")
                self.ray.start_local(in_background=True)
                return True
            time.sleep(0.05)
        return False

    def _local_ray_wanted(self, queue: ShardQueue, here: _InDriver) -> bool:
        """Wait until the private Ray is up (True) or not needed: the threads took every shard, or
        it could not start (then they compute everything).  Not needed, it is stopped at once."""
        while not here.failed():
            try:
                address = self.ray.local_address()
            except LocalRayError as error:
                self.say(f"the local Ray did not start, so every shard is computed here: {error}")
                return False
            if not queue:
                self.say("the local Ray is not needed: every shard was taken here before it was up")
                self.ray.release()
                return False
            if address is not None:
                return True
            time.sleep(0.05)
        return False


class ShardQueue:
    """The shards left to run, shared by the driver's threads (from the end) and Ray (the front).
    A shard may hand others back when it finishes (``finished``): the threads wait for them while
    any shard is running, and ``front`` gives them as they come."""

    def __init__(self, shards: Iterable[Shard]):
        self._shards = deque(shards)
        self._running = 0  # taken, not yet finished
        self._changed = threading.Condition()

    def __len__(self) -> int:
        return len(self._shards)

    def pop_front(self) -> Shard | None:
        with self._changed:
            return self._take(self._shards.popleft) if self._shards else None

    def pop_back(self) -> Shard | None:
        with self._changed:
            return self._take(self._shards.pop) if self._shards else None

    def wait_back(self, stop: Callable[[], bool]) -> Shard | None:
        """A shard from the end; while none is left but some are running (and may hand back
        more), wait for them; None once none is left and none runs, or ``stop()``."""
        with self._changed:
            while not self._shards and self._running and not stop():
                self._changed.wait(0.05)
            return self._take(self._shards.pop) if self._shards and not stop() else None

    def _take(self, pop: Callable[[], Shard]) -> Shard:
        self._running += 1
        return pop()

    def finished(self, handed_back: Iterable[Shard] = ()) -> None:
        """A taken shard is done; the shards it handed back join the front of the queue, so that
        a tree's split work starts before the plan's last subtrees."""
        with self._changed:
            self._running -= 1
            self._shards.extendleft(reversed(list(handed_back)))
            self._changed.notify_all()

    def front(self, until: Callable[[], bool] = lambda: False) -> _Front:
        """Shards from the front, one at a time as they are asked for, until none is left or
        ``until()`` is true; shards handed back later are given by the same iterator."""
        return _Front(self, until)


class _Front:
    """``ShardQueue.front``: an iterator that stops when the queue is empty, and gives again once
    shards are handed back (a generator would stay exhausted)."""

    def __init__(self, queue: ShardQueue, until: Callable[[], bool]):
        self._queue = queue
        self._until = until

    def __iter__(self) -> _Front:
        return self

    def __next__(self) -> Shard:
        shard = None if self._until() else self._queue.pop_front()
        if shard is None:
            raise StopIteration
        return shard


class _InDriver:
    """Shards computed in this process, named as the driver's: in this thread (``run``), or in
    threads taking from the end of the queue (``start``, then ``join``).  A job whose shards hold
    the GIL (``Job.holds_gil``) has each thread's shards computed in a forked process of its own,
    so that pure Python gets every core without waiting for Ray."""

    def __init__(self, job: Job, store: ShardStore, verify: frozenset, on_done: OnDone):
        self.job = job
        self.store = store
        self.verify = verify
        self.on_done = on_done
        self._failures: list[BaseException] = []
        self._seconds: list[float] = []  # of each shard the threads finished
        self._processes: ProcessPoolExecutor | None = None

    @property
    def in_processes(self) -> bool:
        return self._processes is not None

    def seconds_left(self, shards: int, threads: int) -> float | None:
        """Wall seconds the threads would take for ``shards`` more, at their mean so far; None
        before they finish one."""
        done = list(self._seconds)
        return shards * sum(done) / len(done) / threads if done else None

    def failed(self) -> bool:
        return bool(self._failures)

    def run(self, queue: ShardQueue, one: bool = False) -> None:
        """Shards from the front in this thread (the shards they hand back included), or ``one``."""
        for shard in queue.front():
            self.on_done(shard, self._attempt(shard))
            if one:
                return

    def start(self, queue: ShardQueue, threads: int, stop: threading.Event) -> list[threading.Thread]:
        if self.job.holds_gil and threads > 1:
            # forked, so that a job defined in a script or a notebook needs no pickling by value; a
            # lock another driver thread (the lease's heartbeat) held at the fork stays held in the
            # child, so the workers are forked once, as the threads start
            self._processes = ProcessPoolExecutor(threads, mp_context=multiprocessing.get_context("fork"))
        started = [
            threading.Thread(
                target=self._take_from_the_end, args=(queue, stop), daemon=True, name=f"batchenum-compute-{k}"
            )
            for k in range(threads)
        ]
        for thread in started:
            thread.start()
        return started

    def join(self, threads: list[threading.Thread]) -> None:
        """Wait for the threads; raise the first failure one of them met."""
        for thread in threads:
            thread.join()
        if self._processes is not None:
            self._processes.shutdown(cancel_futures=True)
            self._processes = None
        if self._failures:
            raise self._failures[0]

    def _take_from_the_end(self, queue: ShardQueue, stop: threading.Event) -> None:
        while not stop.is_set() and not self._failures:
            shard = queue.wait_back(lambda: stop.is_set() or bool(self._failures))
            if shard is None:
                return
            started = time.monotonic()
            try:
                attempt = self._attempt(shard)
            except BaseException as error:  # raised by join, in the main thread
                self._failures.append(error)
                return
            self._seconds.append(time.monotonic() - started)
            self.on_done(shard, attempt)

    def _attempt(self, shard: Shard) -> Attempt:
        """Run a shard here, turning its exception into one that names it."""
        args = (self.job, shard, self.store, f"{socket.gethostname()} (the driver)", shard.id in self.verify)
        try:
            if self._processes is not None and threading.current_thread() is not threading.main_thread():
                return self._processes.submit(run_attempt, *args).result()
            return run_attempt(*args)
        except RunStoppedError:
            raise
        except Exception as error:
            raise ShardFailedError(f"shard {shard.id} failed: {type(error).__name__}: {error}") from error


# ------------------------------------------------------------------------------------------- Ray


class RaySession:
    """The Ray one run uses, connected on demand, and the work it does there: shard tasks in a
    bounded window, the plan's task map, the probe of shared folders, and shutdown.

    address: a cluster's address; None or "local" (and no ``RAY_ADDRESS``): a private local Ray of
             ``workers`` CPUs (default: all cores), started by ``LocalRay``.  The runs of several
             threads share one private Ray (``_SharedPrivateRay``).  A Ray this process already
             initialised otherwise (tests do) is used as it is.
    """

    def __init__(
        self, address: str | None, workers: int | None, retries: int = TASK_MAX_RETRIES, window: int | None = None
    ):
        self.address = address or os.environ.get("RAY_ADDRESS") or "local"
        self.private = self.address == "local" and (not _ray_initialised() or _PRIVATE_RAY.connected)
        self.workers = workers
        self.local_cpus = workers or os.cpu_count() or 1
        self.retries = retries
        self.window = window
        self.where: str | None = None  # what it is connected to, once it is
        self.tasks_mapped = 0  # tasks the plan's task map ran
        self._local: LocalRay | None = None  # this session's share of the process's private Ray
        self._stopping: threading.Thread | None = None

    @property
    def connected(self) -> bool:
        return self.where is not None

    @property
    def shared_up(self) -> bool:
        """Whether this process is already connected to the private Ray this session would share."""
        return self.private and _PRIVATE_RAY.connected

    def start_local(self, in_background: bool = False) -> None:
        """Start the private Ray's processes without waiting for them (or share the one another thread
        of this process started).  In the background (the head start) they run at the lowest CPU
        priority, so that they take only what the driver's threads leave."""
        if self._local is None:
            self._local = _PRIVATE_RAY.acquire(self.local_cpus, nice=19 if in_background else 0)
            self.local_cpus = self._local.cpus

    def local_address(self) -> str | None:
        """The private Ray's address once it is up, None while it starts; LocalRayError if it
        could not start."""
        return self._local.address() if self._local is not None else None

    def connect(self) -> str:
        """Connect (starting the private Ray first, if that is the one), once; says to what."""
        if self.where is None:
            self.where = self._connect_private() if self.private else self._connect_cluster()
        return self.where

    def _connect_private(self) -> str:
        self.start_local()
        _PRIVATE_RAY.connect()
        retried = self._local.retried if self._local is not None else None
        again = f" (started again: the first start said {retried})" if retried else ""
        return f"a local Ray with {self.local_cpus} CPUs{again}"

    def _connect_cluster(self) -> str:
        import ray

        if ray.is_initialized():
            return self._already_initialised()
        if self.workers:
            raise UsageError("--workers applies to the local Ray only; a cluster's size is its own (drop --workers)")
        _check_reachable(self.address)
        try:
            with _our_signal_handlers():
                ray.init(address=self.address, logging_level=logging.WARNING)
        except Exception as error:
            raise ClusterError(_explain_connect_failure(self.address, error)) from error
        _filter_forwarded_lines(private=False)
        return f"the Ray cluster at {self.address}"

    def _already_initialised(self) -> str:
        """A Ray this process initialised itself (``ray.init`` in a notebook) is used only when the
        run asks for no other: no ``workers``, and no address but that Ray's own."""
        import ray

        connected = ray.get_runtime_context().gcs_address
        if self.workers:
            raise UsageError(
                f"this process is already connected to the Ray at {connected} (ray.init), whose size "
                "is its own: drop workers, or call ray.shutdown() first"
            )
        if self.address not in ("local", "auto") and self.address != connected:
            raise UsageError(
                f"this process is already connected to the Ray at {connected} (ray.init), not to "
                f"{self.address}: call ray.shutdown() first, or drop address"
            )
        return f"the Ray this process had already initialised (at {connected})"

    def cpus(self) -> int:
        """The CPUs of the connected Ray now."""
        import ray

        return int(ray.cluster_resources().get("CPU", 0))

    def run_shards(
        self,
        job: Job,
        shards: Iterable[Shard],
        store: ShardStore,
        on_done: OnDone,
        verify: frozenset = frozenset(),
        say: Callable[[str], None] | None = None,
    ) -> None:
        """Run shards as Ray tasks, consuming them as they finish.  A shard whose worker or node
        dies is retried ``retries`` times; ``say`` hears when the cluster has no CPU left."""
        import ray
        from ray.exceptions import RayError

        task = ray.remote(num_cpus=1, max_retries=self.retries, retry_exceptions=False)(_attempt_in_worker)
        _ship_by_value(job)
        job_ref, store_ref = ray.put(job), ray.put(store)

        def submit(shard: Shard):
            return task.options(name=f"{job.name} {job.shard_label(shard)}").remote(  # type: ignore[call-arg]
                job_ref, shard, store_ref, shard.id in verify, self.retries
            )  # (Ray's stubs type 4 arguments at most)

        stream = _TaskStream(submit, shards, _WindowSize(self.window, say, self.cpus))
        try:
            for shard, ref in stream:
                try:
                    attempt = ray.get(ref)
                except RayError as error:
                    cause = getattr(error, "cause", None)  # a task's own exception (RayTaskError)
                    if isinstance(cause, RunStoppedError):
                        raise cause from None
                    raise ShardFailedError(_failure_message(shard, error, self.retries)) from error
                on_done(shard, attempt)
        except BaseException:
            stream.cancel()
            raise

    def map(self, fn: Callable, items: list, job: Job | None = None) -> list:
        """``[fn(item) for item in items]``, each call a Ray task of one CPU (connecting first).

        fn:    a module-level function (workers import it); an item says in ``str()`` what it is, for
               messages.
        job:   the job the items carry (a merge's tasks do): its code that is not installed travels
               by value, as for its shards, which a rerun may not have run.
        A dead worker is retried up to ``retries`` times, as shards are (--retries); a PipelineError
        that ``fn`` raises is raised as it is, any other failure as TaskFailedError naming the item,
        once the other tasks have finished.  Ctrl-C cancels the tasks in flight.
        """
        self.connect()
        import ray
        from ray.exceptions import RayError, RayTaskError

        self.tasks_mapped += len(items)
        if job is not None:
            _ship_by_value(job)
        task = ray.remote(num_cpus=1, max_retries=self.retries, retry_exceptions=False)(fn)
        stream = _TaskStream(
            lambda pair: task.remote(pair[1]), enumerate(items), _WindowSize(self.window, None, self.cpus)
        )
        results: list[Any] = [None] * len(items)
        try:
            for (k, item), ref in stream:
                try:
                    results[k] = ray.get(ref)
                except RayTaskError as error:
                    if isinstance(error.cause, PipelineError):
                        raise error.cause from None
                    raise TaskFailedError(f"{fn.__name__} failed on {item}: {_cause(error)}") from error
                except RayError as error:
                    raise TaskFailedError(f"{fn.__name__} could not finish on {item}: {_cause(error)}") from error
            return results
        except KeyboardInterrupt:
            stream.cancel()
            raise
        except BaseException:
            stream.drain()  # cancelling a task just as it completes can crash Ray's driver (see _cancel_unfinished)
            raise

    def check_shared_folders(self, folders: dict[str, str], files: dict[str, tuple[int, int]]) -> None:
        """Refuse, before any shard runs, a cluster node that does not see the driver's local
        folders or files (``check_shared_folders``)."""
        check_shared_folders(folders, files)

    def on_every_node(self, fn: Callable, *args) -> list:
        """``fn(*args)`` once on every node of the connected Ray (``on_every_node``)."""
        self.connect()
        return on_every_node(fn, *args, timeout=3600)

    def release(self) -> None:
        """Give up this session's share of the private Ray; the last user stops it in the background,
        since Ray's own shutdown takes a second or two, which the driver spends writing its tables.
        ``close`` waits for it."""
        if self._local is None:
            return
        self._local, self.where = None, None
        self._stopping = _PRIVATE_RAY.release()

    def close(self) -> None:
        """Stop the private Ray, if any, and wait until it is gone."""
        self.release()
        if self._stopping is not None:
            self._stopping.join()
            self._stopping = None


class _SharedPrivateRay:
    """The private Ray of this process.  Ray allows one connection per process, so the runs of
    several threads (``batchenum.run`` from a thread pool) share one: the first starts it, the first
    that needs it connects, and the last to leave stops it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._local: LocalRay | None = None
        self._users = 0
        self.connected = False
        self._stopping: threading.Thread | None = None

    def acquire(self, cpus: int, nice: int) -> LocalRay:
        """The private Ray, started (with ``cpus`` CPUs at priority ``nice``) if none runs."""
        with self._lock:
            if self._stopping is not None:  # the last user's Ray is still stopping: a new one after it
                self._stopping.join()
                self._stopping = None
            if self._local is None:
                _private_token()  # before Ray starts or is imported: it reads the mode and token once
                self._local = LocalRay(cpus, nice)
                self._local.start()
            self._users += 1
            return self._local

    def connect(self) -> None:
        """Connect this process to the private Ray (once), waiting until it is up."""
        with self._lock:
            if self.connected:
                return
            if self._local is None:
                raise ClusterError("internal error: the local Ray was connected to before it was started (acquire)")
            try:
                address = self._local.wait(LOCAL_RAY_TIMEOUT)
            except LocalRayError as error:
                raise ClusterError(f"could not start a local Ray: {error}") from error
            import ray

            _loopback_only(True)
            try:
                with _our_signal_handlers():
                    ray.init(address=address, logging_level=logging.WARNING, configure_logging=True, log_to_driver=True)
            except Exception as error:
                _loopback_only(False)
                raise ClusterError(
                    f"could not connect to the local Ray at {address}: {type(error).__name__}: {error}"
                ) from error
            _filter_forwarded_lines(private=True)
            self.connected = True

    def release(self) -> threading.Thread | None:
        """One user fewer; the last one's thread that stops the Ray (started here), else None."""
        with self._lock:
            self._users -= 1
            if self._users > 0:
                return None
            local, connected = self._local, self.connected
            self._local, self.connected = None, False
            self._stopping = threading.Thread(
                target=_stop_private, args=(connected, local), name="batchenum-ray-shutdown", daemon=True
            )
            self._stopping.start()
            return self._stopping


_PRIVATE_RAY = _SharedPrivateRay()


@contextlib.contextmanager
def _our_signal_handlers() -> Iterator[None]:
    """Put back the SIGTERM and SIGINT handlers in place before ``ray.init``, which installs its own
    (a fatal-signal stack dump, then ``sys.exit``): a stopped run then says our one message
    (pipeline/cli.py), not Ray's dump."""
    main = threading.current_thread() is threading.main_thread()
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)} if main else {}
    try:
        yield
    finally:
        for signum, handler in before.items():
            if handler is not None:
                signal.signal(signum, handler)


def _stop_private(connected: bool, local: LocalRay) -> None:
    if connected:
        import ray

        ray.shutdown()
        _loopback_only(False)
    local.stop()


# Lines Ray forwards to the driver that say nothing about the run: its GCS's and raylet's own C++
# log (the metrics exporter agent not up yet, periodic state dumps), which a newcomer reads as a
# failure.  From the private Ray every line of those two processes is dropped (the run reports what
# matters in its own words); from a cluster, only these.
_RAY_INTERNALS = ("raylet", "gcs_server")
_NOISE = re.compile(r"\[state-dump\]|event\+metrics exporter agent|Exporter agent status")
_COLOUR = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def _filter_forwarded_lines(private: bool) -> None:
    """Wrap the handler through which Ray prints what its processes write (``log_to_driver``): drop
    Ray's own noise (``_NOISE``; everything its GCS and raylet say, from the private Ray), and
    colour codes when standard error is not a terminal.  Ray's printing is private API: if it
    changes, lines are printed unfiltered, never lost."""
    try:
        from ray._private.worker import global_worker_stdstream_dispatcher as dispatcher
    except ImportError:
        return
    printing = [handler for name, handler in getattr(dispatcher, "handlers", []) if name == "ray_print_logs"]
    if len(printing) != 1:
        return
    plain = not sys.stderr.isatty()
    if plain:
        os.environ["RAY_COLOR_PREFIX"] = "0"  # Ray's own colours around its prefixes, read as it prints

    def filtered(data: dict) -> None:
        if private and data.get("pid") in _RAY_INTERNALS:
            return
        lines = [_COLOUR.sub("", line) if plain else line for line in data.get("lines", []) if not _NOISE.search(line)]
        if lines:
            printing[0]({**data, "lines": lines})

    dispatcher.remove_handler("ray_print_logs")
    dispatcher.add_handler("ray_print_logs", filtered)


def _loopback_only(on: bool) -> None:
    """Ray's single-machine mode in this process while it is connected to its private Ray, as in
    that Ray's own processes (pipeline/local_ray.py): otherwise Ray replaces 127.0.0.1 in the
    address by the machine's address, where the private Ray does not listen."""
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = not on and ray_constants.env_bool(
        ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR, not ray_constants.IS_WINDOWS_OR_OSX
    )


def _check_reachable(address: str, timeout: float = 10.0) -> None:
    """Fail within ``timeout`` when nothing listens at a ``host:port`` address: Ray itself retries
    an unreachable cluster for minutes, printing only its own warnings."""
    host, _, port = address.rpartition(":")
    if "://" in address or not host or not port.isdigit():
        return  # "auto", ray:// client addresses and the like: Ray resolves them
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as error:
        raise ClusterError(
            f"could not reach the Ray cluster at {address} ({error.strerror or error}): check the "
            "address (--address or RAY_ADDRESS: the head's IP and its GCS port, 6379 by default), "
            "that the cluster is up (`ray status` on the head) and that no firewall stands "
            "between"
        ) from error


def _ship_by_value(job: Job) -> None:
    """The job's code that is not installed (a module on the driver's sys.path, a file named on the
    command line) travels pickled by value, as ``__main__``'s always does: workers need no copy."""
    from ray import cloudpickle

    for module in user_modules(type(job)):
        if module.__name__ != "__main__":
            cloudpickle.register_pickle_by_value(module)


def _attempt_in_worker(
    job: Job, shard: Shard, store: ShardStore, verify: bool, retries: int = TASK_MAX_RETRIES
) -> Attempt:
    faults.maybe_kill_worker(shard.id, store.storage.root)
    tasks = functools.partial(_NestedTasks, f"{job.name} {job.shard_label(shard)}", retries)  # made if asked for
    return run_attempt(job, shard, store, _worker_node(), verify, tasks)


class _NestedTasks:
    """A shard's own tasks (pipeline/tasks.py) as Ray tasks of one CPU started from its task, which
    releases its CPU while it waits for them; a dead worker's task is retried ``retries`` times."""

    def __init__(self, label: str, retries: int):
        import ray

        self.label = label
        self.retries = retries
        self.cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._remote: dict = {}

    def submit(self, fn: Callable, *args, returns: int = 1, name: str = "") -> list:
        import ray

        if fn not in self._remote:
            self._remote[fn] = ray.remote(num_cpus=1, max_retries=self.retries, retry_exceptions=False)(fn)
        refs = self._remote[fn].options(num_returns=returns, name=f"{self.label} {name}".strip()).remote(*args)
        return [refs] if returns == 1 else list(refs)

    def get(self, handles: list) -> list:
        import ray

        return ray.get(list(handles))


def _worker_node() -> str:
    """This Ray worker's node, as an operator can find it: host, IP and Ray node id."""
    import ray

    context = ray.get_runtime_context()
    return f"{socket.gethostname()} ({ray.util.get_node_ip_address()}, Ray node {context.get_node_id()[:12]})"


def _ray_initialised() -> bool:
    return "ray" in sys.modules and sys.modules["ray"].is_initialized()


def _private_token() -> None:
    """A private local Ray requires a token, as Ray 2.60 does by default, but says so explicitly (so
    Ray prints no advice to turn it off) and, when the user has no token, uses a fresh one for this
    run instead of writing ~/.ray/auth_token as a side effect."""
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    has_token_file = os.path.exists(os.path.join(os.path.expanduser("~"), ".ray", "auth_token"))
    if os.environ["RAY_AUTH_MODE"].lower() == "token" and not os.environ.get("RAY_AUTH_TOKEN") and not has_token_file:
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)


class _TaskStream:
    """Items submitted as tasks (``submit(item)`` returns the task's ref) with at most the window's
    size in flight; iterating yields ``(item, ref)`` as the tasks finish, in completion order."""

    def __init__(self, submit: Callable[[Any], Any], items: Iterable, window: _WindowSize):
        self._submit = submit
        self._items = iter(items)
        self._window = window
        self._in_flight: dict = {}

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        import ray

        self._fill()
        while self._in_flight:
            ready, _ = ray.wait(list(self._in_flight), num_returns=1, timeout=1.0)
            for ref in ready:
                yield self._in_flight.pop(ref), ref
            self._fill()

    def _fill(self) -> None:
        for item in itertools.islice(self._items, max(self._window.current() - len(self._in_flight), 0)):
            self._in_flight[self._submit(item)] = item

    def cancel(self) -> None:
        """Cancel the tasks in flight that have not finished."""
        _cancel_unfinished(list(self._in_flight))

    def drain(self) -> None:
        """Wait for the tasks in flight to finish, submitting no more."""
        import ray

        if self._in_flight:
            ray.wait(list(self._in_flight), num_returns=len(self._in_flight), fetch_local=False)


class _WindowSize:
    """Tasks to keep in flight: fixed, or twice the cluster's CPUs (re-read at most every 5 s).
    Reading the CPUs also notices a cluster left with none, which would otherwise look like a hang."""

    def __init__(self, fixed: int | None, say: Callable[[str], None] | None, read_cpus: Callable[[], int]):
        self.fixed = fixed
        self.say = say
        self.read_cpus = read_cpus
        self.value = 8
        self.read_at = -1e9
        self.cpus: int | None = None

    def current(self) -> int:
        now = time.monotonic()
        if now - self.read_at >= 5.0:
            self.read_at = now
            self._update()
        return self.fixed or self.value

    def _update(self) -> None:
        cpus = self.read_cpus()
        if self.say and cpus == 0 and self.cpus != 0:
            self.say(
                "the cluster has no CPUs (no worker node has joined, or all have left): waiting for nodes "
                "to join; Ctrl-C stops, and a rerun reuses the committed shards"
            )
        elif self.say and cpus and self.cpus == 0:
            self.say(f"the cluster has {cpus} CPU{'' if cpus == 1 else 's'} now: going on")
        self.cpus = cpus
        self.value = max(8, 2 * cpus)


def _cancel_unfinished(refs: list) -> None:
    """Cancel the tasks of ``refs`` that have not finished (cancelling a finished one can crash
    Ray's driver: ray-project/ray#54798; one finishing right now still can, rarely)."""
    import ray

    if not refs:
        return
    _, unfinished = ray.wait(refs, num_returns=len(refs), timeout=0, fetch_local=False)
    for ref in unfinished:
        ray.cancel(ref, force=True)


def check_shared_folders(folders: dict[str, str], files: dict[str, tuple[int, int]]) -> None:
    """Refuse, before any shard runs, a cluster node that does not see the driver's local folders.

    folders: {parameter: local folder the workers write}, e.g. {"out": "/data/runs/palago"}; the
             driver writes a probe file there and every alive node must read it back.
    files:   {option: (size, mtime_ns)} keyed by local input path; every node must see the same.
    Raises SharedFolderError naming the node and the two fixes.  A cluster whose one node is the
    driver's own sees what the driver sees: nothing to check (a task there costs a worker's start).
    """
    if _driver_node_only():
        return
    token = uuid.uuid4().hex
    probes = {}
    for option, folder in folders.items():
        os.makedirs(folder, exist_ok=True)
        probes[option] = (folder, os.path.join(folder, f".batchenum-probe-{token}"))
        with open(probes[option][1], "w") as handle:
            handle.write(token)
    try:
        for where, problems in on_every_node(_probe_node, {o: p for o, (_, p) in probes.items()}, token, files):
            if problems:
                raise SharedFolderError(_not_shared_message(where, problems))
    finally:
        for _, path in probes.values():
            if os.path.exists(path):
                os.remove(path)


def _driver_node_only() -> bool:
    """Whether the connected Ray's only node with CPUs is the one this driver runs on (never
    through Ray's client, whose driver may be on another machine)."""
    import ray

    if ray.util.client.ray.is_connected():
        return False
    return [node["NodeID"] for node in _cpu_nodes()] == [ray.get_runtime_context().get_node_id()]


def _cpu_nodes() -> list[dict]:
    """The connected Ray's alive nodes that have CPUs (``ray.nodes()`` records), in its order."""
    import ray

    return [node for node in ray.nodes() if node.get("Alive") and node.get("Resources", {}).get("CPU", 0) > 0]


def on_every_node(fn: Callable, *args, timeout: float = 120) -> list:
    """``fn(*args)`` once on every alive node that has CPUs (a task of no CPU pinned to the node),
    in node order; a module-level ``fn`` (workers import it)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = _cpu_nodes()
    task = ray.remote(num_cpus=0, max_retries=0)(fn)
    refs = [
        task.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            name=f"{fn.__name__} {node['NodeManagerAddress']}",
        ).remote(*args)
        for node in nodes
    ]
    return [ray.get(ref, timeout=timeout) for ref in refs]


def _probe_node(probes: dict[str, str], token: str, files: dict[str, tuple[int, int]]) -> tuple[str, list[str]]:
    """On one node: which of the driver's folders and files it does not see as the driver does."""
    problems = []
    for option, path in probes.items():
        try:
            with open(path) as handle:
                seen = handle.read() == token
        except OSError:
            seen = False
        if not seen:
            problems.append(f"{{{option}}} " + literal(os.path.dirname(path)))
    for path, (size, mtime_ns) in files.items():
        try:
            stat = os.stat(path)
            same = (stat.st_size, stat.st_mtime_ns) == (size, mtime_ns)
        except OSError:
            same = False
        if not same:
            problems.append("{input} " + literal(path))
    return _worker_node(), problems


def _not_shared_message(node: str, problems: list[str]) -> str:
    """A SharedFolderError template: ``problems`` are templates already."""
    return (
        literal(f"node {node} does not see ")
        + " or ".join(problems)
        + " as this driver does: on a cluster, shards are read and committed by the node that computes "
        "them, so every node must see the same files. Either give a folder that every node mounts at the "
        "same path (NFS or another shared file system), or use object storage "
        "({out=s3://bucket/prefix}, {input=s3://bucket/batch.jsonl}). Nothing was computed."
    )


def _explain_connect_failure(address: str, error: Exception) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    if address == "local":
        return f"could not start a local Ray: {text}"
    token_hint = (
        "set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=<token> (print the token on the head node "
        "with `ray get-auth-token`), then run again"
    )
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token" or "auth" in text.lower() or "token" in text.lower():
        # Ray reports a missing token as a plain ConnectionError after retrying for a while
        return (
            f"could not connect to the Ray cluster at {address}: Ray clusters require an "
            f"authentication token by default; {token_hint}. If the cluster runs without tokens, check "
            f"the address and that the cluster is up. ({text})"
        )
    return (
        f"could not connect to the Ray cluster at {address}: check the address, that the cluster is "
        f"up, and that RAY_AUTH_TOKEN holds this cluster's token. ({text})"
    )


def _failure_message(shard: Shard, error: Exception, retries: int = TASK_MAX_RETRIES) -> str:
    """One message for a shard Ray could not finish: what happened and what to do.  Committed
    shards are kept either way, and a rerun of the same command reuses them."""
    from ray import exceptions as rex

    rerun = "committed shards are kept: run the same command again to reuse them"
    if isinstance(error, rex.OutOfMemoryError):
        return (
            f"shard {shard.id}: Ray's memory monitor killed its worker (the node ran short of memory) "
            f"on every attempt. Give the workers more memory, run fewer at once (--workers), or cut the "
            f"work smaller (more shards); {rerun}."
        )
    attempts = f"every one of {retries + 1} attempts" if retries else "its only attempt"
    if isinstance(error, (rex.NodeDiedError, rex.LocalRayletDiedError)):
        return (
            f"shard {shard.id}: the node running it died ({_node_of(error)}) on {attempts} (see --retries). "
            f"Check the cluster's nodes (`ray status`, `ray list nodes`); {rerun}."
        )
    if isinstance(error, (rex.ObjectLostError, rex.OwnerDiedError, rex.ObjectFetchTimedOutError)):
        return (
            f"shard {shard.id}: Ray lost an object the shard needed ({type(error).__name__}), usually because "
            f"a node left the cluster. {rerun[0].upper() + rerun[1:]}."
        )
    if isinstance(error, rex.WorkerCrashedError):
        return (
            f"shard {shard.id}: its worker process died on {attempts} (see --retries) "
            f"(killed, crashed in native code, or ended by the job's code with os._exit). Look for what kills it (the OOM killer, an operator); {rerun}."
        )
    if isinstance(error, rex.TaskCancelledError):
        return f"shard {shard.id} was cancelled; {rerun}."
    if isinstance(error, rex.RayTaskError):
        return f"shard {shard.id} failed: {_cause(error)}"
    return f"shard {shard.id}: Ray failed ({_cause(error)}); {rerun}."


def _node_of(error: Exception) -> str:
    """ "node <ip> <id>" from Ray's node-death message, which has no attributes for them."""
    found = re.search(r"Node IP: ([^,\s]+), node ID: ([0-9a-f]+)", str(error))
    return f"node {found.group(1)} {found.group(2)[:12]}" if found else "node unknown"


def _cause(error: Exception) -> str:
    cause = getattr(error, "cause", None)
    if cause is not None:
        return f"{type(cause).__name__}: {cause}"
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
