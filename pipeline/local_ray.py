"""A private Ray on this machine, started without blocking the driver: the only way this project
starts a Ray of its own, whatever the mode.

``ray start --head --block`` runs below a watchdog (pipeline/ray_watchdog.py) with free loopback
ports.  For the head start it runs at the lowest CPU priority (nice 19, which its workers inherit,
for its processes and for their session's scheduling autogroup), so that while it starts the
driver's own threads keep the CPUs; the driver connects once Ray is up, and only if work is left,
so a run that finishes first never waits for Ray at all.

Private on a shared machine (docs/cluster.md, "On a shared machine"):

- Its folder is a new folder of this user, mode 0700 (``batchenum-ray-XXXXXXXX`` in the temporary
  folder); Ray's own temporary folder, which Ray makes mode 0777, is inside it, so no other user
  reaches Ray's sockets, logs or address file.
- Every Ray server listens on 127.0.0.1 only: Ray's single-machine mode
  (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, as on macOS) keeps them on the loopback interface,
  where ``--node-ip-address 127.0.0.1`` alone would be replaced by the machine's address.
- The driver connects to the GCS port it chose itself; Ray's address file only says that Ray is up.
- The watchdog leads a session of its own, so Ctrl-C at a terminal reaches the driver, not Ray.  It
  kills all of Ray's processes, and removes the folder, when the driver stops it or dies, however
  it dies.
- The run holds a lock on its folder while it lives; a folder whose lock no process holds was left
  by a run killed with its watchdog, and the next run removes it.  A live run's folder is never
  removed, whatever its PID namespace.

Its object store (where tasks' results wait for the tasks that take them: a split height's
buckets, docs/palago_transfer.md) is sized and spills explicitly (``object_store_options``): a
quarter of the machine's memory unless ``BATCHENUM_RAY_OBJECT_STORE`` says how many bytes (at most
what /dev/shm holds), and past about 80% of it Ray writes objects to files in ``spill`` inside the
private folder, on the temporary folder's disk, or in a new private folder under
``BATCHENUM_RAY_SPILL_DIR`` (made if missing): removed with the rest when the run ends.
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import IO

__all__ = ["LocalRay", "LocalRayError", "object_store_bytes", "process_tree"]

_PORT_OPTIONS = (
    "--port",
    "--node-manager-port",
    "--object-manager-port",
    "--metrics-export-port",
    "--dashboard-agent-listen-port",
    "--dashboard-agent-grpc-port",
    "--runtime-env-agent-port",
)
# Ray starts its client server (on 10001, which a second run would find taken) where grpc is
# installed, and refuses the option where it is not.
_CLIENT_PORT_OPTION = ("--ray-client-server-port",) if importlib.util.find_spec("grpc") else ()
_WATCHDOG = str(Path(__file__).with_name("ray_watchdog.py"))
_FOLDER_PREFIX = "batchenum-ray-"
_STAGING_PREFIX = "batchenum-rayinit-"
_FOLDER_NAME = re.compile(rf"{_FOLDER_PREFIX}[a-z0-9_]{{8}}")  # tempfile.mkdtemp's names
_LOCK = "lock"  # held (flock) by the run while it lives
_RAY_DIR = "ray"  # Ray's --temp-dir, inside the private folder
_STOP_TIMEOUT = 30.0  # seconds the watchdog may take to kill Ray's processes
_SPILL = "spill"  # where the object store spills, inside the private folder (or a folder of its own)
_STORE_SHARE = 0.25  # of the machine's memory, the object store's by default (Ray's own: 0.3)
_AVAILABLE_SHARE = 0.3  # of the memory available at start, the most the store takes by default (Ray's own share)
_STORE_BYTES_ENV, _SPILL_DIR_ENV = "BATCHENUM_RAY_OBJECT_STORE", "BATCHENUM_RAY_SPILL_DIR"
# glibc's malloc serves an allocation from its heap, which keeps freed memory resident, once the
# threshold for mmap has risen (dynamically, up to 32 MB); fixed at 1 MB, a worker's arrays of a
# MB or more go back to the system when freed (a split height's task: 0.350 GiB of its own at the
# peak instead of 0.424, docs/palago_transfer.md).  Such arrays then come in transparent huge
# pages (glibc 2.35 on; ignored before): each fresh one faulted in 4 kB pages cost a split
# height's tasks a quarter of their CPU in the kernel.  Ray's processes inherit both; a value
# already set wins.
_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "1048576", "GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
# What `ray start` says when its raylet has not registered with the GCS within Ray's fixed 30 s:
# seen on a loaded machine (2026-12-07), where a second start goes through.
_STARTUP_TIMED_OUT = "timed out during startup"
_STARTS = 2  # ray start is tried this many times at most, again only after that timeout
_SWEPT: set[str] = set()


class LocalRayError(RuntimeError):
    """The private Ray could not start; the message holds the end of its output."""


class LocalRay:
    """One private Ray head with ``cpus`` CPUs at CPU priority ``nice``: ``start()`` returns at once,
    ``address()`` says whether it is up, ``wait()`` waits until it is, ``stop()`` kills it and
    removes its folder.  Any thread may call them."""

    def __init__(self, cpus: int, nice: int = 0):
        self.cpus = cpus
        self.nice = nice
        self._folder: str | None = None
        self._lock: int | None = None  # the folder's lock, held while the run lives
        self._pipe: int | None = None  # the driver's end of the watchdog's pipe: closing it stops Ray
        self._address = ""
        self._process: subprocess.Popen | None = None  # the watchdog
        self._log: IO[bytes] | None = None  # ray start's output, read back for error messages
        self._failure: str | None = None
        self._spill: tuple[str, int] | None = None  # a spill folder outside the private one, and its lock
        self._starts = 0
        self._starting = threading.Lock()  # held by address(), which may start it again
        self.retried: str | None = None  # why ray start was started again, if it was

    def start(self) -> None:
        """Spawn the watchdog and ``ray start``.  A failure here (no temporary folder, say) is raised
        by ``address()``, like one of ``ray start`` itself."""
        self._starts += 1
        try:
            _check_socket_room(_temp_root())
            self._folder, self._lock = private_folder(_temp_root())
            self._log = open(os.path.join(self._folder, "ray-start.log"), "w+b")
            ports = _free_port_options()
            self._address = f"127.0.0.1:{dict(zip(ports[::2], ports[1::2]))['--port']}"  # the GCS
            read_end, self._pipe = os.pipe()
            ray = [
                sys.executable,
                "-m",
                "ray.scripts.scripts",
                "start",
                "--head",
                "--block",
                "--num-cpus",
                str(self.cpus),
                "--temp-dir",
                os.path.join(self._folder, _RAY_DIR),
                "--node-ip-address",
                "127.0.0.1",
                "--include-dashboard=false",
                "--disable-usage-stats",
                *self._object_store_options(),
                *ports,
            ]
            try:
                self._process = subprocess.Popen(
                    [sys.executable, "-I", _WATCHDOG, str(read_end), str(self.nice), self._folder, "--", *ray],
                    stdin=subprocess.DEVNULL,
                    stdout=self._log,
                    stderr=subprocess.STDOUT,
                    pass_fds=(read_end,),
                    start_new_session=True,
                    env={**_MALLOC_ENV, **os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"},
                )
            finally:
                os.close(read_end)
        except (OSError, LocalRayError) as error:
            self._failure = str(error) if isinstance(error, LocalRayError) else f"{type(error).__name__}: {error}"

    def _object_store_options(self) -> list[str]:
        """``ray start``'s object store size and spill folder (the module's docstring says which)."""
        assert self._folder is not None
        spill_root = os.environ.get(_SPILL_DIR_ENV)
        if spill_root:
            os.makedirs(spill_root, mode=0o700, exist_ok=True)  # named by the user: made, like --out
            self._spill = private_folder(spill_root)
            spill = os.path.join(self._spill[0], _SPILL)
        else:
            spill = os.path.join(self._folder, _SPILL)
        os.makedirs(spill, mode=0o700, exist_ok=True)
        return ["--object-store-memory", str(object_store_bytes()), "--object-spilling-directory", spill]

    def address(self) -> str | None:
        """The head's address once it is up, None while it starts; raises LocalRayError if
        ``ray start`` has exited (after starting it once more if it timed out waiting for its own
        raylet, as it may on a loaded machine)."""
        with self._starting:  # another thread asking while it starts again finds it starting
            if self._failure is not None or self._process is None or self._folder is None:
                raise LocalRayError(self._failure or "the local Ray was not started")
            up = os.path.exists(os.path.join(self._folder, _RAY_DIR, "ray_current_cluster"))
            if self._process.poll() is not None:
                timed_out = _STARTUP_TIMED_OUT.encode() in self._output()
                again = self._starts < _STARTS and timed_out
                said = self._failure_said(keep=not again)
                if not again:
                    busy = f"; {_timed_out_twice(self.nice)}" if timed_out else ""
                    raise LocalRayError(f"`ray start` exited with status {self._process.returncode}: {said}{busy}")
                self.retried = said
                self.stop()
                self.start()
                return None
            if up:
                os.chmod(os.path.join(self._folder, _RAY_DIR), 0o700)  # Ray made it 0777
            return self._address if up else None

    def wait(self, timeout: float) -> str:
        """The head's address, once it is up; LocalRayError if it exits or takes over ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while (address := self.address()) is None:
            if time.monotonic() > deadline:
                raise LocalRayError(f"`ray start` was not up after {timeout:g} s: {self._failure_said()}")
            time.sleep(0.05)
        return address

    def stop(self) -> None:
        """Kill ``ray start`` and every process below it, and remove the folder (logs included)."""
        if self._pipe is not None:
            os.close(self._pipe)  # the watchdog kills Ray's processes, then exits
            self._pipe = None
        if self._process is not None:
            try:
                self._process.wait(timeout=_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                _kill(process_tree([self._process.pid]))
                self._process.wait()
            self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
        if self._spill is not None:
            shutil.rmtree(self._spill[0], ignore_errors=True)
            os.close(self._spill[1])
            self._spill = None

    def _output(self) -> bytes:
        """What ``ray start`` has written so far."""
        if self._log is None:  # stopped, or the log could not be opened
            return b""
        self._log.flush()
        self._log.seek(0)
        return self._log.read()

    def _failure_said(self, keep: bool = True) -> str:
        """One line: the reason ``ray start`` gave (its last error line, without colour codes),
        and, with ``keep``, where its whole output is kept (a copy: the private folder is removed
        with Ray)."""
        if self._log is None:  # stopped, or the log could not be opened
            return "(no output)"
        output = self._output()
        lines = [_ANSI.sub("", line).strip() for line in output.decode(errors="replace").splitlines()]
        lines = [line for line in lines if line]
        reason = next((line for line in reversed(lines) if _ERROR_LINE.search(line)), lines[-1] if lines else "")
        kept = _keep_log(output) if keep else None
        return (reason or "(no output)") + (f" (its output: {kept})" if kept else "")


def _timed_out_twice(nice: int) -> str:
    """Why a start that timed out twice most likely did: the load it met, so that the user sees a
    busy machine rather than a broken Ray."""
    load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    yielding = f", and this Ray ran at nice {nice} to yield to the work here" if nice else ""
    return (
        f"its raylet missed Ray's 30 s to register twice, as on a busy machine: the load average "
        f"was {load:.1f} over the last minute on {cpus} CPUs{yielding}"
    )


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")  # colour codes Ray writes even off a terminal
_ERROR_LINE = re.compile(r"^\w*(Error|Exception)\b|\berror\b|\bfailed\b", re.IGNORECASE)


def _keep_log(output: bytes) -> str | None:
    """A copy of ``ray start``'s output in the temporary folder (mode 0600), for the message."""
    try:
        handle, path = tempfile.mkstemp(prefix="batchenum-ray-start-", suffix=".log", dir=_temp_root())
        with os.fdopen(handle, "wb") as copy:
            copy.write(output)
    except OSError:
        return None
    return path


# Ray makes its Unix sockets at TEMP/session_<date>_<time>_<microseconds>_<pid>/sockets/plasma_store
# (its longest), and a Unix socket's path holds at most 107 bytes.
_SOCKET_TAIL = len("/session_2026-12-04_23-18-33_633652_") + len("/sockets/plasma_store")
_SOCKET_PATH_MAX = 107


def _check_socket_room(root: str) -> None:
    """LocalRayError, before anything starts, when Ray's socket paths in a private folder of
    ``root`` would pass 107 bytes: a long RAY_TMPDIR (or TMPDIR) that Ray would refuse, seconds
    later, with a traceback."""
    if not os.path.isdir(root):
        return  # mkdtemp then says what is wrong with it
    pid_digits = len(_read_text("/proc/sys/kernel/pid_max", "4194304").strip())
    folder = os.path.join(os.path.abspath(root), _FOLDER_PREFIX + "x" * 8, _RAY_DIR)
    longest = len(os.fsencode(folder)) + _SOCKET_TAIL + pid_digits
    if longest > _SOCKET_PATH_MAX:
        room = len(os.fsencode(os.path.abspath(root))) - (longest - _SOCKET_PATH_MAX)
        variable = "RAY_TMPDIR" if "RAY_TMPDIR" in os.environ else "TMPDIR"
        raise LocalRayError(
            f"{variable}={root} is too long for the private Ray: its socket paths there would take "
            f"{longest} bytes, and a Unix socket's path may take {_SOCKET_PATH_MAX}; set {variable} to a "
            f"folder of yours of at most {max(room, 1)} characters (such as /tmp), or unset it"
        )


def _read_text(path: str, default: str) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return default


def object_store_bytes() -> int:
    """The object store's size: ``BATCHENUM_RAY_OBJECT_STORE`` bytes if set, else a quarter of the
    machine's memory, but at most 30% of what is available now (Ray's own default share, so that
    `ray start` on a busy machine still leaves memory for tasks; a fixed quarter made it refuse to
    start with 9 GB of 24 in use); at most what /dev/shm can hold (Ray's store lives there)."""
    wanted = os.environ.get(_STORE_BYTES_ENV)
    if wanted:
        try:
            size = int(float(wanted))
        except ValueError:
            raise LocalRayError(f"{_STORE_BYTES_ENV}={wanted!r} is not a number of bytes") from None
    else:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        size = int(min(_STORE_SHARE * total, _AVAILABLE_SHARE * _available_memory(total)))
    try:
        shm = os.statvfs("/dev/shm")
        size = min(size, shm.f_bavail * shm.f_frsize)
    except OSError:
        pass  # no /dev/shm (not Linux): Ray uses its own fallback folder
    return size


def _available_memory(total: int) -> int:
    """The memory available now (MemAvailable of /proc/meminfo), or ``total`` where that is unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return total


def private_folder(root: str) -> tuple[str, int]:
    """A new folder of this user, mode 0700, in ``root``, and the descriptor of its lock, held.  The
    first call for a root removes the folders killed runs left there (``remove_dead_folders``)."""
    _check_root(root)
    if root not in _SWEPT:
        _SWEPT.add(root)
        remove_dead_folders(root)
    # made under a name the sweep ignores, and given its own once locked: a sweep never sees it unlocked
    staging = tempfile.mkdtemp(prefix=_STAGING_PREFIX, dir=root)  # mode 0700, a name nobody had
    lock = os.open(os.path.join(staging, _LOCK), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    folder = os.path.join(root, _FOLDER_PREFIX + os.path.basename(staging)[len(_STAGING_PREFIX) :])
    os.rename(staging, folder)
    return folder, lock


def remove_dead_folders(root: str) -> list[str]:
    """Remove this user's private Ray folders in ``root`` whose lock no process holds (their run was
    killed); return their paths.  A folder of another user, a link, or one whose lock is held (by a
    live run, in any PID namespace) is left alone."""
    removed = []
    for name in os.listdir(root) if os.path.isdir(root) else ():
        path = os.path.join(root, name)
        if not _FOLDER_NAME.fullmatch(name):
            continue
        try:
            found = os.lstat(path)
            if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid():
                continue
            lock = os.open(os.path.join(path, _LOCK), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: its run is alive
        else:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        finally:
            os.close(lock)
    return removed


def _check_root(root: str) -> None:
    """Refuse a temporary folder where any user may rename or replace our folder (writable by all,
    without the sticky bit that /tmp has)."""
    try:
        mode = os.stat(root).st_mode
    except OSError:
        return  # mkdtemp then says what is wrong with it
    if stat.S_ISDIR(mode) and mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        raise LocalRayError(
            f"the temporary folder {root} is writable by every user and has no sticky bit, so "
            "another user could replace the private Ray's folder there: set RAY_TMPDIR to a folder "
            "of your own (or `chmod +t` it)"
        )


def _temp_root() -> str:
    """Where Ray itself would put its folder (the rule of Ray's private
    ``get_default_system_temp_dir``, restated so that the driver need not import Ray to start it):
    its socket paths must stay short (Unix sockets allow about 107 bytes), so a long TMPDIR (as on
    macOS) is not used unless Ray would use it too."""
    if "RAY_TMPDIR" in os.environ:
        return os.environ["RAY_TMPDIR"]
    if sys.platform.startswith("linux") and "TMPDIR" in os.environ:
        return os.environ["TMPDIR"]
    return "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()


def _free_port_options() -> list[str]:
    """A distinct free loopback port for each port option: the sockets stay open until all are
    chosen, so the system cannot hand out one port twice."""
    options = _PORT_OPTIONS + _CLIENT_PORT_OPTION
    sockets = [socket.socket() for _ in options]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        ports = [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()
    return [item for option, port in zip(options, ports) for item in (option, str(port))]


def _kill(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def process_tree(roots: Iterable[int]) -> set[int]:
    """``roots`` and every process below them, read from /proc (only ``roots`` where there is none)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir() if os.path.isdir("/proc") else ():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, stack = set(), list(roots)
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(children.get(pid, []))
    return found
