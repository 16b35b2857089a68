"""The only module that imports Ray: connect, run shards as tasks in a bounded window, retry dead
workers, cancel on Ctrl-C.  ``--serial`` runs the same shards in this process without Ray.

A task runs one shard and commits its files itself (through store.py), so results never travel
through the driver; the driver learns only that the shard is done.

A private local Ray takes seconds to start, and its workers more to import and load the kernels,
so meanwhile the driver computes shards itself, one low-priority thread per CPU of the run, from the
end of the plan, until Ray's workers deliver ("head start"); Ray gets the rest.  A shard's
files are the same wherever it ran.

``TaskMap`` lends a plan the same Ray for work of its own (counting the lines of a large input),
connecting first when nothing is connected yet.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import socket
import sys
import threading
import time
import uuid
from typing import Any, Callable, Iterable

from pipeline.codeversion import code_version
from pipeline.errors import PipelineError
from pipeline.job import INPUT_FINGERPRINT, STATS_KEY, Job, Shard
from pipeline.store import ShardStore

__all__ = ["ClusterError", "ShardFailedError", "SharedFolderError", "TaskFailedError", "TaskMap", "run_serial",
           "run_on_ray", "run_local", "connect", "is_local", "check_shared_folders", "map_tasks",
           "shutdown_private_local"]

# A dead worker (SIGKILL, lost node) is retried this many times by default (--retries); a Python
# exception never is, since rerunning a bad input or a bug gives the same failure.
TASK_MAX_RETRIES = 3
_private_local = False  # set by connect() when it starts a private local Ray
_shutting_down: threading.Thread | None = None  # a private local Ray shutting down in the background

# Test hook: a shard id whose first attempt (or, with ":always", every attempt) kills its own worker
# process with SIGKILL, so tests can prove that a real worker death is retried or named.  Never set
# in normal use.
_KILL_ENV = "BATCHENUM_TEST_KILL_SHARD"


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
    _maybe_kill_for_test(shard, store)
    return execute_shard(job, shard, store, _worker_node(), verify)


def _worker_node() -> str:
    """This Ray worker's node, as an operator can find it: host, IP and Ray node id."""
    import ray

    context = ray.get_runtime_context()
    return f"{socket.gethostname()} ({ray.util.get_node_ip_address()}, Ray node {context.get_node_id()[:12]})"


def _maybe_kill_for_test(shard: Shard, store: ShardStore) -> None:
    """The test hook: ``sXXXX`` kills the shard's first attempt, ``sXXXX:always`` every attempt."""
    target, _, mode = os.environ.get(_KILL_ENV, "").partition(":")
    if target != shard.id:
        return
    marker = os.path.join(store.storage.root, f".killed-{shard.id}")
    if os.path.exists(marker) and mode != "always":
        return
    os.makedirs(store.storage.root, exist_ok=True)
    with open(marker, "w") as handle:
        handle.write(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGKILL)


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


def run_local(job: Job, shards: list[Shard], store: ShardStore, on_done: OnDone,
              workers: int | None, on_connected: Callable[[str], None], verify: frozenset = frozenset(),
              retries: int = TASK_MAX_RETRIES) -> None:
    """Start a private local Ray and run the shards on it; shut it down at the end.

    Until Ray's workers deliver their first shard, the driver computes shards too ("head start"),
    from the end of the list while Ray takes them from the front: Ray takes seconds to start and its
    workers more to import and load the compiled kernels.  The head start runs one thread per CPU
    of the run (``workers``, default all cores) at a lower priority than Ray's processes; the
    kernels release the GIL.
    """
    queue = list(shards)
    lock = threading.Lock()
    ray_delivers = threading.Event()
    failures: list[BaseException] = []

    def head_start() -> None:
        _yield_cpu_to_ray()
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

    def on_ray_done(shard: Shard, info: ShardInfo) -> None:
        ray_delivers.set()
        on_done(shard, info)

    helpers = [threading.Thread(target=head_start, name=f"batchenum-head-start-{k}", daemon=True)
               for k in range(min(workers or os.cpu_count() or 1, len(shards)))]
    for helper in helpers:
        helper.start()
    try:  # one try: Ctrl-C while Ray is still starting must shut down what has started
        on_connected(connect(None, workers))
        run_on_ray(job, from_the_front(), store, on_ray_done, verify=verify, retries=retries)
        ray_delivers.set()
        for helper in helpers:
            helper.join()
        if failures:
            raise failures[0]
    finally:
        ray_delivers.set()
        shutdown_private_local(wait=False)  # run_job waits for it once its tables are written


def _yield_cpu_to_ray() -> None:
    """Lower this thread's priority (Linux threads have their own), so that Ray's starting processes
    get the CPUs first and start in seconds, and the head start uses what they leave."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (AttributeError, OSError):  # not Linux, or not allowed: the head start just competes
        pass


def shutdown_private_local(wait: bool = True) -> None:
    """Shut down the private local Ray that ``connect`` started, if any: now, rather than at
    interpreter exit, which first sleeps.  Ray spends about a second waiting for its processes to
    exit, so ``wait=False`` lets that happen in the background while the driver writes its tables;
    the next call (with ``wait``) waits for it."""
    global _private_local, _shutting_down
    if _private_local:
        import ray

        _private_local = False
        _shutting_down = threading.Thread(target=ray.shutdown, name="batchenum-ray-shutdown", daemon=True)
        _shutting_down.start()
    if wait and _shutting_down is not None:
        _shutting_down.join()
        _shutting_down = None


class TaskMap:
    """``task_map(fn, items)``: ``[fn(item) for item in items]`` as Ray tasks (``map_tasks``), after
    connecting as ``connect(address, workers)`` would when no Ray is connected yet.  The pipeline hands
    one to a job before it plans; ``where`` then says what it connected to (None: it did not) and
    ``tasks`` how many tasks it ran."""

    def __init__(self, address: str | None, workers: int | None):
        self.address = address
        self.workers = workers
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
        return map_tasks(fn, items)


def _ray_initialised() -> bool:
    return "ray" in sys.modules and sys.modules["ray"].is_initialized()


def map_tasks(fn: Callable, items: list) -> list:
    """``[fn(item) for item in items]``, each call a Ray task of one CPU on the connected Ray.

    fn:    a module-level function (workers import it); an item says in ``str()`` what it is, for
           messages.
    A dead worker is retried as shards are; a PipelineError that ``fn`` raises is raised as it is,
    any other failure as TaskFailedError naming the item.  Ctrl-C cancels the tasks in flight.
    """
    import ray
    from ray.exceptions import RayError, RayTaskError

    task = ray.remote(num_cpus=1, max_retries=TASK_MAX_RETRIES, retry_exceptions=False)(fn)
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
    except BaseException:
        for ref in refs:
            ray.cancel(ref, force=True)
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
        for ref in in_flight:
            ray.cancel(ref, force=True)
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
