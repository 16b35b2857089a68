"""The only module that imports Ray: connect, run shards as tasks in a bounded window, retry dead
workers, cancel on Ctrl-C.  ``--serial`` runs the same shards in this process without Ray.

A task runs one shard and commits its files itself (through store.py), so results never travel
through the driver; the driver learns only that the shard is done.

A private local Ray takes seconds to start, most of them spent waiting, so meanwhile the driver
computes shards itself, from the end of the plan ("head start"); Ray gets the rest.  A shard's
files are the same wherever it ran.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Callable, Iterable

from pipeline.errors import PipelineError
from pipeline.job import Job, Shard
from pipeline.store import ShardStore

__all__ = ["ClusterError", "ShardFailedError", "run_serial", "run_on_ray", "run_local", "connect", "is_local"]

# A dead worker (SIGKILL, lost node) is retried this many times; a Python exception never is,
# since rerunning a bad input or a bug gives the same failure.
TASK_MAX_RETRIES = 3
# Test hook: a shard id whose first attempt kills its own worker process with SIGKILL, so tests
# can prove that a real worker death is retried.  Never set in normal use.
_KILL_ENV = "BATCHENUM_TEST_KILL_SHARD"


class ClusterError(PipelineError):
    """Ray could not be started or reached."""


class ShardFailedError(PipelineError):
    """A shard raised an exception or its worker kept dying."""


def execute_shard(job: Job, shard: Shard, store: ShardStore) -> dict[str, int]:
    """Run one shard and commit its tables; returns rows per table."""
    return store.write_shard(shard, job.run_shard(shard))


def _execute_in_worker(job: Job, shard: Shard, store: ShardStore) -> dict[str, int]:
    _maybe_kill_for_test(shard, store)
    return execute_shard(job, shard, store)


def _maybe_kill_for_test(shard: Shard, store: ShardStore) -> None:
    if os.environ.get(_KILL_ENV) != shard.id:
        return
    marker = os.path.join(store.root, f".killed-{shard.id}")
    if os.path.exists(marker):
        return
    os.makedirs(store.root, exist_ok=True)
    with open(marker, "w") as handle:
        handle.write(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGKILL)


def _execute_here(job: Job, shard: Shard, store: ShardStore) -> None:
    """Run a shard in this process, turning its exception into one that names it."""
    try:
        execute_shard(job, shard, store)
    except PipelineError:
        raise
    except Exception as error:
        raise ShardFailedError(f"shard {shard.id} failed: {type(error).__name__}: {error}") from error


def run_serial(job: Job, shards: list[Shard], store: ShardStore, on_done: Callable[[Shard], None]) -> None:
    for shard in shards:
        _execute_here(job, shard, store)
        on_done(shard)


# ------------------------------------------------------------------------------------------- Ray


def is_local(address: str | None) -> bool:
    """Whether ``connect(address, ...)`` would start a private local Ray."""
    import ray

    return not ray.is_initialized() and (address or os.environ.get("RAY_ADDRESS") or "local") == "local"


def connect(address: str | None, workers: int | None) -> str:
    """Start a private local Ray (default) or connect to a cluster; returns a description.

    address: None (or "local") for a private local instance with ``workers`` CPUs; anything else
    (or the RAY_ADDRESS environment variable) for an existing cluster, whose resources are its own.
    """
    import ray

    if ray.is_initialized():
        return "an already initialised Ray"
    address = address or os.environ.get("RAY_ADDRESS") or "local"
    try:
        if address == "local":
            cpus = workers or os.cpu_count()
            ray.init(address="local", num_cpus=cpus, include_dashboard=False,
                     logging_level="WARNING", configure_logging=True, log_to_driver=True)
            return f"a local Ray with {cpus} CPUs"
        if workers:
            raise ClusterError("--workers applies to the local Ray only; a cluster's size is its own (drop --workers)")
        ray.init(address=address, logging_level="WARNING")
        return f"the Ray cluster at {address}"
    except ClusterError:
        raise
    except Exception as error:
        raise ClusterError(_explain_connect_failure(address, error)) from error


def run_local(job: Job, shards: list[Shard], store: ShardStore, on_done: Callable[[Shard], None],
              workers: int | None, window: int, on_connected: Callable[[str], None]) -> None:
    """Start a private local Ray and run the shards on it, computing shards in this process (from
    the end of the list) until Ray is up; shut the local Ray down at the end."""
    queue = list(shards)
    lock = threading.Lock()
    ray_up = threading.Event()
    failures: list[BaseException] = []

    def head_start() -> None:
        while not ray_up.is_set():
            with lock:
                if not queue:
                    return
                shard = queue.pop()
            try:
                _execute_here(job, shard, store)
            except BaseException as error:  # reported by the main thread
                failures.append(error)
                return
            on_done(shard)

    helper = threading.Thread(target=head_start, name="batchenum-head-start", daemon=True)
    helper.start()
    try:
        on_connected(connect(None, workers))
    finally:
        ray_up.set()
    try:
        with lock:
            rest, queue[:] = list(queue), []
        if not failures:
            run_on_ray(job, rest, store, on_done, window)
        helper.join()
        if failures:
            raise failures[0]
    finally:
        import ray

        ray.shutdown()  # now, rather than at interpreter exit, which first sleeps


def _explain_connect_failure(address: str, error: Exception) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    if address == "local":
        return f"could not start a local Ray: {text}"
    token_hint = ("set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN=<token> (print the token on the head node "
                  "with `ray get-auth-token`), then run again")
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token" or "auth" in text.lower() or "token" in text.lower():
        # Ray reports a missing token as a plain ConnectionError after retrying for a while
        return (f"could not connect to the Ray cluster at {address}: Ray clusters require an "
                f"authentication token by default; {token_hint}. If the cluster runs without tokens, check "
                f"the address and that the cluster is up. ({text})")
    return (f"could not connect to the Ray cluster at {address}: check the address, that the cluster is "
            f"up, and that RAY_AUTH_TOKEN holds this cluster's token. ({text})")


def run_on_ray(
    job: Job,
    shards: list[Shard],
    store: ShardStore,
    on_done: Callable[[Shard], None],
    window: int,
) -> None:
    """Run shards as Ray tasks, at most ``window`` in flight, consuming them as they finish."""
    import ray
    from ray.exceptions import RayTaskError, TaskCancelledError, WorkerCrashedError

    if not shards:
        return
    task = ray.remote(num_cpus=1, max_retries=TASK_MAX_RETRIES, retry_exceptions=False)(_execute_in_worker)
    job_ref = ray.put(job)
    store_ref = ray.put(store)
    queue = iter(shards)
    in_flight: dict = {}

    def submit(count: int) -> None:
        for shard in _take(queue, count):
            in_flight[task.remote(job_ref, shard, store_ref)] = shard

    submit(window)
    try:
        while in_flight:
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=1.0)
            for ref in ready:
                shard = in_flight.pop(ref)
                try:
                    ray.get(ref)
                except (RayTaskError, WorkerCrashedError, TaskCancelledError) as error:
                    raise ShardFailedError(f"shard {shard.id} failed: {_cause(error)}") from error
                on_done(shard)
            submit(window - len(in_flight))
    except BaseException:
        for ref in in_flight:
            ray.cancel(ref, force=True)
        raise


def _take(iterator, count: int) -> Iterable:
    for _ in range(max(count, 0)):
        try:
            yield next(iterator)
        except StopIteration:
            return


def _cause(error: Exception) -> str:
    cause = getattr(error, "cause", None)
    if cause is not None:
        return f"{type(cause).__name__}: {cause}"
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
