"""The watchdog of a private Ray (pipeline/local_ray.py), run as a script by ``LocalRay``:

    python -I ray_watchdog.py PIPE_FD NICE FOLDER -- COMMAND...

It runs as the leader of a session of its own and as a child subreaper, starts COMMAND (``ray start
--block``) at CPU priority NICE, and waits.  On Linux a new session is a scheduling autogroup of its
own, where a process's nice ranks it only against its own group; so the group too is given NICE, or
the driver's group's nice if that is higher (a run made to yield, ``echo 19 > /proc/self/autogroup``,
yields with its Ray).  When the driver's end of the pipe closes (the driver stopped Ray, or died of
any signal, SIGKILL included) or when Ray exits by itself, it kills every process of its session
and every process below it (Ray's workers run in process groups of their own; orphans are
reparented to it), then exits with Ray's status (0 when stopped).  Stopped, it also removes FOLDER,
the private Ray's folder, which a killed driver cannot remove.

Standard library only: it runs apart from the package, before Ray is imported anywhere.
"""

from __future__ import annotations

import ctypes
import os
import select
import shutil
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
_KILL_WITHIN = 10.0  # seconds to keep killing processes that Ray forks while it is being killed


def main(argv: list[str]) -> int:
    pipe, nice, folder, command = int(argv[1]), int(argv[2]), argv[3], argv[5:]
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the session still finds Ray's processes
    stop_signals: list[int] = []
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda received, frame: stop_signals.append(received))
    if nice:
        os.nice(nice)
    _set_group_nice(max(nice, group_nice(f"/proc/{os.getppid()}/autogroup")))
    ray = subprocess.Popen(command, stdin=subprocess.DEVNULL)
    status = None
    while status is None and not stop_signals:
        if select.select([pipe], [], [], 0.2)[0]:
            break  # end of file: the driver closed its end or is gone
        status = _reap(ray)
    kill_everything_below_me()
    if status is None:
        shutil.rmtree(folder, ignore_errors=True)
        status = _reap(ray)
    return 0 if status is None or status < 0 else status


def group_nice(path: str) -> int:
    """The nice of the scheduling autogroup ``path`` names (``/autogroup-42 nice 19``); 0 where
    the kernel has none."""
    try:
        with open(path) as handle:
            return int(handle.read().split()[-1])
    except (OSError, ValueError, IndexError):
        return 0


def _set_group_nice(nice: int) -> None:
    """Make this session's autogroup (Ray's processes, forked below it) yield as a whole."""
    if not nice:
        return
    for _ in range(10):
        try:
            with open("/proc/self/autogroup", "w") as handle:
                handle.write(str(nice))
            return
        except BlockingIOError:
            time.sleep(0.1)  # the kernel lets a user set one group's nice each 0.1 s, machine-wide
        except OSError:
            return  # no autogroups here: a process's nice is all there is


def _reap(ray: subprocess.Popen) -> int | None:
    """Reap every finished child (orphans are ours too); Ray's exit status once it has exited."""
    while True:
        try:
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ray.returncode
        if pid == 0:
            return ray.returncode
        if pid == ray.pid:
            ray.returncode = os.waitstatus_to_exitcode(wait_status)


def kill_everything_below_me() -> None:
    """SIGKILL the processes of this session and below this process until none is left (a process
    being started while the others die is caught by the next round)."""
    deadline = time.monotonic() + _KILL_WITHIN
    while time.monotonic() < deadline:
        victims = _session_and_descendants(os.getpid())
        if not victims:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
        while True:  # reap them, so that they leave /proc
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break


def _session_and_descendants(me: int) -> set[int]:
    """This user's live processes in session ``me`` or below process ``me``, ``me`` excepted."""
    children: dict[int, list[int]] = {}
    in_session = set()
    uid = os.getuid()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            if os.stat(f"/proc/{name}").st_uid != uid:
                continue
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        state, parent, session = fields[0], int(fields[1]), int(fields[3])
        if state in (b"Z", b"X"):
            continue  # dead already, waiting to be reaped
        children.setdefault(parent, []).append(int(name))
        if session == me:
            in_session.add(int(name))
    found, stack = set(), [me]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return (found | in_session) - {me}


if __name__ == "__main__":
    sys.exit(main(sys.argv))
