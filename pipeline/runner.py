"""The only module that imports Ray: connect, run shards as tasks in a bounded window, retry dead
workers, cancel on Ctrl-C.  ``--serial`` runs the same shards in this process without Ray.

A task runs one shard and commits its files itself (through store.py), so results never travel
through the driver; the driver learns only that the shard is done.

A private local Ray takes seconds to start, and its workers more to import and load the kernels,
so by default (``run_local``) the driver computes shards itself, one thread per CPU of the run,
from the end of the plan, while Ray starts in the background at the lowest CPU priority
(local_ray.py); Ray takes shards from the front once it is up, and the threads stop when its
workers deliver.  A run the threads finish first never connects ("head start").  A shard's files
are the same wherever it ran.

``TaskMap`` lends a plan the same Ray for work of its own (counting the lines of a large input),
connecting first when nothing is connected yet.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import sys
import threading
import time
import uuid
from typing import Any, Callable, Iterable

from pipeline import faults
from pipeline.codeversion import code_version
from pipeline.errors import PipelineError
from pipeline.job import INPUT_FINGERPRINT, STATS_KEY, Job, Shard
from pipeline.local_ray import LocalRay, LocalRayError
from pipeline.store import ShardStore

__all__ = ["ClusterError", "ShardFailedError", "SharedFolderError", "TaskFailedError", "TaskMap", "run_serial",
           "run_on_ray", "run_local", "connect", "is_local", "check_shared_folders", "map_tasks",
           "shutdown_private_local"]

# A dead worker (SIGKILL, lost node) is retried this many times by default (--retries); a Python
# exception never is, since rerunning a bad input or a bug gives the same failure.
TASK_MAX_RETRIES = 3
_private_local = False  # set when this module started a private local Ray and connected to it
_local_ray: LocalRay | None = None  # the private Ray that run_local started in the background
_shutting_down: threading.Thread | None = None  # a private local Ray shutting down in the background


class ClusterError(PipelineError):
    """Ray could not be started or reached."""


class ShardFailedError(PipelineError):
    """A shard raised an exception or its worker kept dying."""


class TaskFailedError(PipelineError):
    """A task of ``map_tasks`` could not finish."""


class CodeMismatchError(PipelineError):
    """A worker's installed code differs from the driver's."""


class SharedFolderError(PipelineError):
    """A cluster node does not see the local folder the run reads or writes."""


# What a finished shard reports to the driver: {"node": where it ran, "seconds": compute time, ...}
ShardInfo = dict[str, Any]
OnDone = Callable[[Shard, ShardInfo], None]


def execute_shard(job: Job, shard: Shard, store: ShardStore, node: str, verify: bool = False) -> ShardInfo:
    """Run one shard and commit its tables; returns where it ran, how long it took and its stats
    (which are also recorded in its files).

    verify: the shard is committed with matching provenance; reuse it ({"reused": True}) when the
            fingerprint of its input is still the one recorded, else compute it again.
    """
    _refuse_other_code(job, store, node)
    fingerprint = job.input_fingerprint(shard) if verify else None  # reading the input just for this check
    retry = []
    if verify:
        recorded = store.recorded_stats(shard)
        if recorded.get(INPUT_FINGERPRINT) == fingerprint:
            retry = recorded.get("retry") or []
            if not retry:
                return {"node": node, "reused": True}
    started = time.monotonic()
    if retry:  # the committed shard is right but for these records (timeouts, say): redo only them
        outputs = dict(job.retry_shard(shard, store.read_shard_tables(shard), retry))
    else:
        outputs = dict(job.run_shard(shard))
    stats = {**outputs.pop(STATS_KEY, {}), "node": node, "seconds": round(time.monotonic() - started, 3),
             "committed_at": round(time.time(), 3)}
    if INPUT_FINGERPRINT not in stats:  # the job did not record the checksum of what it read
        fingerprint = fingerprint or job.input_fingerprint(shard)
        if fingerprint is not None:
            stats[INPUT_FINGERPRINT] = fingerprint
    store.write_shard(shard, outputs, stats)
    return {**stats, "reused": False, "verified": verify and not retry, "retried": len(retry)}


def _refuse_other_code(job: Job, store: ShardStore, node: str) -> None:
    """A worker whose installed code differs from the driver's must not commit under its name."""
    here = code_version(job)
    if here != store.provenance.version:
        raise CodeMismatchError(
            f"node {node} runs other code than the driver (code version {here}, the driver's "
            f"{store.provenance.version}): install the same batchenum (and numba, numpy, pyarrow) on every "
            "node, or let the code travel with the job (ray job submit --working-dir .)")


def _execute_in_worker(job: Job, shard: Shard, store: ShardStore, verify: bool) -> ShardInfo:
    faults.maybe_kill_worker(shard.id, store.storage.root)
    return execute_shard(job, shard, store, _worker_node(), verify)


def _worker_node() -> str:
    """This Ray worker's node, as an operator can find it: host, IP and Ray node id."""
    import ray

    context = ray.get_runtime_context()
    return f"{socket.gethostname()} ({ray.util.get_node_ip_address()}, Ray node {context.get_node_id()[:12]})"


def _execute_here(job: Job, shard: Shard, store: ShardStore, verify: bool) -> ShardInfo:
    """Run a shard in this process, turning its exception into one that names it."""
    try:
        return execute_shard(job, shard, store, f"{socket.gethostname()} (the driver)", verify)
    except Exception as error:
        raise ShardFailedError(f"shard {shard.id} failed: {type(error).__name__}: {error}") from error


def run_serial(job: Job, shards: list[Shard], store: ShardStore, on_done: OnDone, verify: frozenset = frozenset()) -> None:
    for shard in shards:
        on_done(shard, _execute_here(job, shard, store, shard.id in verify))


# ------------------------------------------------------------------------------------------- Ray


def is_local(address: str | None) -> bool:
    """Whether ``connect(address, ...)`` would start a private local Ray (without importing Ray, so
    that ``connect`` can still set up the token before Ray reads its configuration)."""
    return not _ray_initialised() and (address or os.environ.get("RAY_ADDRESS") or "local") == "local"


def connect(address: str | None, workers: int | None) -> str:
    """Start a private local Ray (default) or connect to a cluster; returns a description.

    address: None (or "local") for a private local instance with ``workers`` CPUs; anything else
    (or the RAY_ADDRESS environment variable) for an existing cluster, whose resources are its own.
    """
    if is_local(address):
        _private_token()  # before Ray is imported: it reads the mode and token once, at import
    import ray

    global _private_local
    if ray.is_initialized():
        return "an already initialised Ray"
    address = address or os.environ.get("RAY_ADDRESS") or "local"
    try:
        if address == "local":
            cpus = workers or os.cpu_count()
            ray.init(address="local", num_cpus=cpus, include_dashboard=False,
                     logging_level="WARNING", configure_logging=True, log_to_driver=True)
            _private_local = True
            return f"a local Ray with {cpus} CPUs"
        if workers:
            raise ClusterError("--workers applies to the local Ray only; a cluster's size is its own (drop --workers)")
        ray.init(address=address, logging_level="WARNING")
        return f"the Ray cluster at {address}"
    except ClusterError:
        raise
    except Exception as error:
        raise ClusterError(_explain_connect_failure(address, error)) from error


def _private_token() -> None:
    """A private local Ray requires a token, as Ray 2.60 does by default, but says so explicitly (so
    Ray prints no advice to turn it off) and, when the user has no token, uses a fresh one for this
    run instead of writing ~/.ray/auth_token as a side effect."""
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    has_token_file = os.path.exists(os.path.join(os.path.expanduser("~"), ".ray", "auth_token"))
    if os.environ["RAY_AUTH_MODE"].lower() == "token" and not os.environ.get("RAY_AUTH_TOKEN") and not has_token_file:
        os.environ["RAY_AUTH_TOKEN"] = secrets.token_hex(32)


def cluster_cpus() -> int:
    """The CPUs of the connected Ray cluster now."""
    import ray

    return int(ray.cluster_resources().get("CPU", 0))


def is_private_local() -> bool:
    """Whether the connected Ray is a private local instance that ``connect`` started."""
    return _private_local


def run_local(job: Job, shards: list[Shard], store: ShardStore, on_done: OnDone, workers: int | None,
              say: Callable[[str], None], verify: frozenset = frozenset(), retries: int = TASK_MAX_RETRIES) -> None:
    """Run the shards on this machine: the driver's own threads compute them while a private Ray
    starts in the background, Ray takes what is left once it is up, and a run that the threads
    finish first never connects to it.

    The threads (one per CPU of the run, ``workers``, default all cores; the kernels release the
    GIL) take shards from the end of the plan, Ray from the front.  Ray's processes run at the
    lowest CPU priority, so they start on what the threads leave rather than slowing them down.
    Once Ray's workers deliver a shard, the threads stop taking more.
    """
    cpus = workers or os.cpu_count() or 1
    queue = list(shards)
    lock = threading.Lock()
    ray_delivers = threading.Event()
    failures: list[BaseException] = []

    def compute_here() -> None:
        while not ray_delivers.is_set() and not failures:
            with lock:
                if not queue:
                    return
                shard = queue.pop()
            try:
                info = _execute_here(job, shard, store, shard.id in verify)
            except BaseException as error:  # reported by the main thread
                failures.append(error)
                return
            on_done(shard, info)

    def from_the_front() -> Iterable[Shard]:
        while not failures:
            with lock:
                if not queue:
                    return
                shard = queue.pop(0)
            yield shard

    def wait_for_ray() -> str | None:
        """Ray's address once it is up; None if the threads took every shard first or Ray could not
        start (then they compute everything)."""
        while not failures:
            try:
                address = _local_ray.address()
            except LocalRayError as error:
                say(f"the local Ray did not start, so every shard is computed here: {error}")
                return None
            with lock:
                if not queue:
                    say("the local Ray is not needed: every shard was taken here before it was up")
                    return None
            if address is not None:
                return address
            time.sleep(0.05)
        return None

    def on_ray_done(shard: Shard, info: ShardInfo) -> None:
        ray_delivers.set()
        on_done(shard, info)

    global _local_ray
    _private_token()  # before Ray starts or is imported
    _local_ray = LocalRay(cpus)
    _local_ray.start()  # from this (the main) thread: Ray's processes die with it
    helpers = [threading.Thread(target=compute_here, name=f"batchenum-compute-{k}", daemon=True)
               for k in range(min(cpus, len(shards)))]
    for helper in helpers:
        helper.start()
    try:  # one try: Ctrl-C while Ray is still starting must stop what has started
        address = wait_for_ray()
        if address is not None:
            _connect_local(address)
            say(f"computing on a local Ray with {cpus} CPUs (and here until its workers deliver)")
            run_on_ray(job, from_the_front(), store, on_ray_done, verify=verify, retries=retries)
        for helper in helpers:
            helper.join()
        if failures:
            raise failures[0]
    finally:
        ray_delivers.set()
        shutdown_private_local(wait=False)  # run_job waits for it once its tables are written


def _connect_local(address: str) -> None:
    import ray

    global _private_local
    try:
        ray.init(address=address, logging_level="WARNING", configure_logging=True, log_to_driver=True)
    except Exception as error:
        raise ClusterError(f"could not connect to the local Ray at {address}: {type(error).__name__}: {error}") from error
    _private_local = True


def shutdown_private_local(wait: bool = True) -> None:
    """Shut down the private local Ray that this module started, if any: now, rather than at
    interpreter exit, which first sleeps.  That takes up to a second or two, so ``wait=False`` lets
    it happen in the background while the driver writes its tables; the next call (with ``wait``)
    waits for it."""
    global _private_local, _local_ray, _shutting_down
    if _private_local or _local_ray is not None:
        connected, local = _private_local, _local_ray
        _private_local, _local_ray = False, None
        _shutting_down = threading.Thread(target=_stop_private_local, args=(connected, local),
                                          name="batchenum-ray-shutdown", daemon=True)
        _shutting_down.start()
    if wait and _shutting_down is not None:
        _shutting_down.join()
        _shutting_down = None


def _stop_private_local(connected: bool, local: LocalRay | None) -> None:
    if connected:
        import ray

        ray.shutdown()
    if local is not None:
        local.stop()


class TaskMap:
    """``task_map(fn, items)``: ``[fn(item) for item in items]`` as Ray tasks (``map_tasks``), after
    connecting as ``connect(address, workers)`` would when no Ray is connected yet.  The pipeline hands
    one to a job before it plans; ``where`` then says what it connected to (None: it did not) and
    ``tasks`` how many tasks it ran."""

    def __init__(self, address: str | None, workers: int | None, retries: int = TASK_MAX_RETRIES):
        self.address = address
        self.workers = workers
        self.retries = retries
        self.where: str | None = None
        self.tasks = 0

    @property
    def ready(self) -> bool:
        """Whether Ray is connected already (else the first call starts or connects it)."""
        return _ray_initialised()

    def __call__(self, fn: Callable, items: list) -> list:
        if not _ray_initialised():
            self.where = connect(self.address, self.workers)
        self.tasks += len(items)
        return map_tasks(fn, items, self.retries)


def _ray_initialised() -> bool:
    return "ray" in sys.modules and sys.modules["ray"].is_initialized()


def map_tasks(fn: Callable, items: list, retries: int = TASK_MAX_RETRIES) -> list:
    """``[fn(item) for item in items]``, each call a Ray task of one CPU on the connected Ray.

    fn:    a module-level function (workers import it); an item says in ``str()`` what it is, for
           messages.
    A dead worker is retried up to ``retries`` times, as shards are (--retries); a PipelineError
    that ``fn`` raises is raised as it is, any other failure as TaskFailedError naming the item,
    once the other tasks have finished.  Ctrl-C cancels the tasks in flight.
    """
    import ray
    from ray.exceptions import RayError, RayTaskError

    task = ray.remote(num_cpus=1, max_retries=retries, retry_exceptions=False)(fn)
    refs = [task.remote(item) for item in items]
    try:
        results = []
        for item, ref in zip(items, refs):
            try:
                results.append(ray.get(ref))
            except RayTaskError as error:
                if isinstance(error.cause, PipelineError):
                    raise error.cause from None
                raise TaskFailedError(f"{fn.__name__} failed on {item}: {_cause(error)}") from error
            except RayError as error:
                raise TaskFailedError(f"{fn.__name__} could not finish on {item}: {_cause(error)}") from error
        return results
    except KeyboardInterrupt:
        _cancel_unfinished(refs)
        raise
    except BaseException:
        # let the others finish (seconds): a task cancelled just as it completes can crash Ray's
        # driver (a RAY_CHECK on "Tried to complete task that was not pending", ray-project/ray#54798)
        ray.wait(refs, num_returns=len(refs), fetch_local=False)
        raise


def check_shared_folders(folders: dict[str, str], files: dict[str, tuple[int, int]]) -> None:
    """Refuse, before any shard runs, a cluster node that does not see the driver's local folders.

    folders: {option: local folder the workers write}, e.g. {"--out": "/data/runs/palago"}; the
             driver writes a probe file there and every alive node must read it back.
    files:   {option: (size, mtime_ns)} keyed by local input path; every node must see the same.
    Raises SharedFolderError naming the node and the two fixes.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    token = uuid.uuid4().hex
    probes = {}
    for option, folder in folders.items():
        os.makedirs(folder, exist_ok=True)
        probes[option] = (folder, os.path.join(folder, f".batchenum-probe-{token}"))
        with open(probes[option][1], "w") as handle:
            handle.write(token)
    try:
        nodes = [node for node in ray.nodes() if node.get("Alive") and node.get("Resources", {}).get("CPU", 0) > 0]
        probe = ray.remote(num_cpus=0, max_retries=0)(_probe_node)
        refs = {probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False))
                .remote({o: p for o, (_, p) in probes.items()}, token, files): node for node in nodes}
        for ref, node in refs.items():
            where, problems = ray.get(ref, timeout=120)
            if problems:
                raise SharedFolderError(_not_shared_message(where, problems))
    finally:
        for _, path in probes.values():
            if os.path.exists(path):
                os.remove(path)


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
            problems.append(f"{option} {os.path.dirname(path)}")
    for path, (size, mtime_ns) in files.items():
        try:
            stat = os.stat(path)
            same = (stat.st_size, stat.st_mtime_ns) == (size, mtime_ns)
        except OSError:
            same = False
        if not same:
            problems.append(f"--input {path}")
    return _worker_node(), problems


def _not_shared_message(node: str, problems: list[str]) -> str:
    return (f"node {node} does not see {' or '.join(problems)} as this driver does: on a cluster, shards are "
            "read and committed by the node that computes them, so every node must see the same files. "
            "Either give a folder that every node mounts at the same path (NFS or another shared file "
            "system), or use object storage (--out s3://bucket/prefix, --input s3://bucket/batch.jsonl). "
            "Nothing was computed.")


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


def run_on_ray(job: Job, shards: Iterable[Shard], store: ShardStore, on_done: OnDone, window: int | None = None,
               verify: frozenset = frozenset(), retries: int = TASK_MAX_RETRIES,
               say: Callable[[str], None] | None = None) -> None:
    """Run shards as Ray tasks, consuming them as they finish.  Tasks in flight: ``window``, or by
    default twice the cluster's CPUs (at least 8), re-read every few seconds so that the window
    follows nodes joining and leaving an autoscaling cluster.  A shard whose worker or node dies is
    retried ``retries`` times.  ``say`` hears when the cluster has no CPU left to run on."""
    import ray
    from ray.exceptions import RayError

    if not shards:
        return
    task = ray.remote(num_cpus=1, max_retries=retries, retry_exceptions=False)(_execute_in_worker)
    job_ref = ray.put(job)
    store_ref = ray.put(store)
    queue = iter(shards)
    in_flight: dict = {}

    def submit(count: int) -> None:
        for shard in _take(queue, count):
            in_flight[task.remote(job_ref, shard, store_ref, shard.id in verify)] = shard

    size = _WindowSize(window, say)
    submit(size.current())
    try:
        while in_flight:
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=1.0)
            for ref in ready:
                shard = in_flight.pop(ref)
                try:
                    info = ray.get(ref)
                except RayError as error:
                    raise ShardFailedError(_failure_message(shard, error, retries)) from error
                on_done(shard, info)
            submit(size.current() - len(in_flight))
    except BaseException:
        _cancel_unfinished(list(in_flight))
        raise


class _WindowSize:
    """Tasks to keep in flight: fixed, or twice the cluster's CPUs (re-read at most every 5 s).
    Reading the CPUs also notices a cluster left with none, which would otherwise look like a hang."""

    def __init__(self, fixed: int | None, say: Callable[[str], None] | None = None):
        self.fixed = fixed
        self.say = say
        self.value = 8
        self.read_at = -1e9
        self.cpus = None

    def current(self) -> int:
        now = time.monotonic()
        if now - self.read_at >= 5.0:
            self.read_at = now
            self._read_cpus()
        return self.fixed or self.value

    def _read_cpus(self) -> None:
        cpus = cluster_cpus()
        if self.say and cpus == 0 and self.cpus != 0:
            self.say("the cluster has no CPUs (no worker node has joined, or all have left): waiting for nodes "
                     "to join; Ctrl-C stops, and a rerun reuses the committed shards")
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


def _take(iterator, count: int) -> Iterable:
    for _ in range(max(count, 0)):
        try:
            yield next(iterator)
        except StopIteration:
            return


def _failure_message(shard: Shard, error: Exception, retries: int = TASK_MAX_RETRIES) -> str:
    """One message for a shard Ray could not finish: what happened and what to do.  Committed
    shards are kept either way, and a rerun of the same command reuses them."""
    from ray import exceptions as rex

    rerun = "committed shards are kept: run the same command again to reuse them"
    if isinstance(error, rex.OutOfMemoryError):
        return (f"shard {shard.id}: Ray's memory monitor killed its worker (the node ran short of memory) "
                f"on every attempt. Give the workers more memory, run fewer at once (--workers), or cut the "
                f"work smaller (more shards); {rerun}.")
    attempts = f"every one of {retries + 1} attempts" if retries else "its only attempt"
    if isinstance(error, (rex.NodeDiedError, rex.LocalRayletDiedError)):
        return (f"shard {shard.id}: the node running it died ({_node_of(error)}) on {attempts} (see --retries). "
                f"Check the cluster's nodes (`ray status`, `ray list nodes`); {rerun}.")
    if isinstance(error, (rex.ObjectLostError, rex.OwnerDiedError, rex.ObjectFetchTimedOutError)):
        return (f"shard {shard.id}: Ray lost an object the shard needed ({type(error).__name__}), usually because "
                f"a node left the cluster. {rerun[0].upper() + rerun[1:]}.")
    if isinstance(error, rex.WorkerCrashedError):
        return (f"shard {shard.id}: its worker process died on {attempts} (see --retries) "
                f"(killed, or crashed in native code). Look for what kills it (the OOM killer, an operator); {rerun}.")
    if isinstance(error, rex.TaskCancelledError):
        return f"shard {shard.id} was cancelled; {rerun}."
    if isinstance(error, rex.RayTaskError):
        return f"shard {shard.id} failed: {_cause(error)}"
    return f"shard {shard.id}: Ray failed ({_cause(error)}); {rerun}."


def _node_of(error: Exception) -> str:
    """"node <ip> <id>" from Ray's node-death message, which has no attributes for them."""
    found = re.search(r"Node IP: ([^,\s]+), node ID: ([0-9a-f]+)", str(error))
    return f"node {found.group(1)} {found.group(2)[:12]}" if found else "node unknown"


def _cause(error: Exception) -> str:
    cause = getattr(error, "cause", None)
    if cause is not None:
        return f"{type(cause).__name__}: {cause}"
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
