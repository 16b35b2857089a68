"""A private Ray on this machine, started without blocking the driver: the only way this project
starts a Ray of its own, whatever the mode.

``ray start --head --block`` runs as a child process with its own temporary folder and free
loopback ports.  For the head start it runs at the lowest CPU priority (nice 19, which its workers
inherit), so that while it starts the driver's own threads keep the CPUs; the driver connects once
the address file appears, and only if work is left, so a run that finishes first never waits for
Ray at all.

The child dies with the driver (PR_SET_PDEATHSIG), and Ray's processes die with the child (``--block``
makes Ray share their fate with it), so a killed driver leaves nothing running.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterable

from batchenum.pipeline.storage import scratch_folder

__all__ = ["LocalRay", "LocalRayError", "process_tree"]

_PORT_OPTIONS = ("--port", "--node-manager-port", "--object-manager-port", "--metrics-export-port",
                 "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port")
# Ray starts its client server (on 10001, which a second run would find taken) where grpc is
# installed, and refuses the option where it is not.
_CLIENT_PORT_OPTION = ("--ray-client-server-port",) if importlib.util.find_spec("grpc") else ()


class LocalRayError(RuntimeError):
    """The private Ray could not start; the message holds the end of its output."""


class LocalRay:
    """One private Ray head with ``cpus`` CPUs at CPU priority ``nice``: ``start()`` returns at once,
    ``address()`` says whether it is up, ``wait()`` waits until it is, ``stop()`` kills it and
    removes its folder."""

    def __init__(self, cpus: int, nice: int = 0):
        self.cpus = cpus
        self.nice = nice
        self._folder: str | None = None
        self._process: subprocess.Popen | None = None
        self._log = None
        self._failure: str | None = None

    def start(self) -> None:
        """Spawn ``ray start``.  Call it from the main thread: the child's death signal follows the
        thread that spawned it.  A failure here (no temporary folder, say) is raised by
        ``address()``, like one of ``ray start`` itself."""
        try:
            self._folder = scratch_folder("ray", _temp_root())  # removes those killed runs left
            self._log = open(os.path.join(self._folder, "ray-start.log"), "w+b")
            command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
                       "--num-cpus", str(self.cpus), "--temp-dir", self._folder, "--node-ip-address", "127.0.0.1",
                       "--include-dashboard=false", "--disable-usage-stats", *_free_port_options()]
            self._process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self._log,
                                             stderr=subprocess.STDOUT, preexec_fn=lambda: _in_child(self.nice))
        except OSError as error:
            self._failure = f"{type(error).__name__}: {error}"

    def address(self) -> str | None:
        """The head's address once it is up, None while it starts; raises LocalRayError if
        ``ray start`` has exited."""
        if self._failure is not None or self._process is None:
            raise LocalRayError(self._failure or "the local Ray was not started")
        try:
            address = Path(self._folder, "ray_current_cluster").read_text().strip()
        except FileNotFoundError:
            address = ""
        if self._process.poll() is not None:
            raise LocalRayError(f"`ray start` exited with status {self._process.returncode}: {self._output_tail()}")
        return address or None

    def wait(self, timeout: float) -> str:
        """The head's address, once it is up; LocalRayError if it exits or takes over ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while (address := self.address()) is None:
            if time.monotonic() > deadline:
                raise LocalRayError(f"`ray start` was not up after {timeout:g} s: {self._output_tail()}")
            time.sleep(0.05)
        return address

    def stop(self) -> None:
        """Kill ``ray start`` and every process below it, and remove the folder (logs included)."""
        if self._process is not None:
            for pid in process_tree([self._process.pid]):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self._process.wait()
            self._process = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    def _output_tail(self, lines: int = 3) -> str:
        self._log.flush()
        self._log.seek(0)
        text = self._log.read().decode(errors="replace").strip().splitlines()
        return "\n".join(text[-lines:]) or "(no output)"


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


def _in_child(nice: int) -> None:
    """In the child, before exec: SIGKILL when the parent dies (Linux; elsewhere skipped), and the
    CPU priority asked for."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if nice:
        os.nice(nice)


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
