"""One run per job folder at a time: a lease file (``_lease.json``) that the running driver renews.

A second run into the same folder refuses, naming the first (host, pid, start time).  A lease left
by a dead run is taken over: on the same host when its pid is gone, anywhere when its heartbeat is
older than ``STALE_AFTER``.  The lease is an ordinary file written whole (storage.py), so it works
on object storage too.  On a local disk a new lease appears by a hard link, which fails when the
file exists, so of two runs starting in the same instant exactly one gets it; on object storage,
and when taking over a dead run's lease, the runs are told apart by writing, waiting a moment and
reading back.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid

from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.storage import TMP_MARK, Storage

__all__ = ["Lease", "LeaseError", "LEASE_FILE", "STALE_AFTER", "dead_reason", "lease_problem"]

LEASE_FILE = "_lease.json"
HEARTBEAT = 10.0  # seconds between renewals
STALE_AFTER = 120.0  # a lease not renewed for this long belongs to a dead run
_SETTLE = 0.2  # seconds between writing a new lease and reading it back


class LeaseError(PipelineError):
    """Another live run holds the job folder."""


class Lease:
    """Hold ``<folder>/_lease.json`` while a run writes there (a context manager)."""

    def __init__(self, folder: Storage, say=print):
        self.folder = folder
        self.path = folder.join(LEASE_FILE)
        self.say = say
        self.record = {"run": uuid.uuid4().hex, "host": socket.gethostname(), "pid": os.getpid(),
                       "started_at": round(time.time(), 3)}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "Lease":
        current = self._read()
        if current and current.get("run") != self.record["run"]:
            dead = dead_reason(current)
            if dead is None:
                raise LeaseError(f"another run is writing to {self.folder.display_root}: {_describe(current)}. "
                                 "Wait for it to finish (or stop it), or give another --out.")
            self.say(f"taking over the folder from a dead run ({_describe(current)}: {dead})")
        created = self._create_exclusively() if current is None and self.folder.local else None
        if created is None:  # not possible here: write, let a simultaneous writer finish, read back
            self._write()
            time.sleep(_SETTLE)
        winner = self.record if created else self._read()
        if not winner or winner.get("run") != self.record["run"]:
            raise LeaseError(f"another run started writing to {self.folder.display_root} at the same moment: "
                             f"{_describe(winner or {})}. Wait for it to finish, or give another --out.")
        self._thread = threading.Thread(target=self._renew, name="batchenum-lease", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        current = self._read(check=False)
        if current and current.get("run") == self.record["run"]:
            self.folder.delete_file(self.path)

    def _renew(self) -> None:
        while not self._stop.wait(HEARTBEAT):
            try:
                self._write()
            except Exception:  # a missed heartbeat only shortens the lease; the run goes on
                pass

    def _create_exclusively(self) -> bool | None:
        """Make the lease appear whole where none exists (local disk): True if this run made it,
        False if another run's appeared first, None if the file system has no hard links."""
        os.makedirs(self.folder.root, exist_ok=True)
        scratch = f"{self.path}{TMP_MARK}{self.record['run']}"  # a crash leaves it to remove_temporaries
        with open(scratch, "w", encoding="utf-8") as handle:
            handle.write(json.dumps({**self.record, "heartbeat_at": round(time.time(), 3)}))
        try:
            os.link(scratch, self.path)
            return True
        except FileExistsError:
            return False
        except OSError:
            return None
        finally:
            os.unlink(scratch)

    def _write(self) -> None:
        self.folder.write_text(self.path, json.dumps({**self.record, "heartbeat_at": round(time.time(), 3)}))

    def _read(self, check: bool = True) -> dict | None:
        """The lease now in place (None when there is none).  LeaseError when the file is not a
        lease that a run of ours wrote (``check``; otherwise such a file reads as None)."""
        try:
            if not self.folder.exists(self.path):
                return None
            if not self.folder.is_file(self.path):
                problem: str | None = "it is not a file"
            else:
                record = json.loads(self.folder.read_bytes(self.path))
                problem = lease_problem(record)
        except FileNotFoundError:  # removed between the two looks: its run has just ended
            return None
        except (ValueError, UnicodeDecodeError, RecursionError):
            problem = "it is not JSON"
        if problem is None:
            return record
        if not check:
            return None
        raise self._damaged(problem)

    def _damaged(self, problem: str) -> LeaseError:
        return LeaseError(f"{self.folder.uri(self.path)} is damaged or foreign ({problem}): it is not a lease a run of "
                          f"batchenum wrote, so whether a run is writing to {self.folder.display_root} is unknown. If "
                          "no run is writing there, remove that file and run the same command again.")


def lease_problem(lease: object) -> str | None:
    """Why ``lease`` (parsed JSON) is not a lease a run of ours wrote, or None when it is one."""
    if not isinstance(lease, dict):
        return f"it holds a JSON {type(lease).__name__}, not an object"
    for key, kinds in (("run", str), ("host", str), ("pid", int), ("started_at", (int, float)),
                       ("heartbeat_at", (int, float))):
        value = lease.get(key)
        if not isinstance(value, kinds) or isinstance(value, bool):
            return f"its {key} is {json.dumps(value)[:40]}" if key in lease else f"it has no {key}"
        if key == "pid" and not 0 < value < 1 << 31:
            return f"its pid is {value}"
        if key.endswith("_at") and not 0 <= value < 1e11:  # seconds since 1970, before the year 5000
            return f"its {key} is {value}"
    return None


def dead_reason(lease: dict) -> str | None:
    """Why the run that wrote ``lease`` (one that ``lease_problem`` accepts) is dead, or None while
    it may be alive."""
    age = time.time() - float(lease.get("heartbeat_at", 0))
    if lease.get("host") == socket.gethostname() and isinstance(lease.get("pid"), int):
        try:
            os.kill(lease["pid"], 0)
        except ProcessLookupError:
            return "its process is gone"
        except (PermissionError, OverflowError):
            pass
    if age > STALE_AFTER:
        return f"no heartbeat for {age:.0f} s"
    return None


def _describe(lease: dict) -> str:
    started = lease.get("started_at")
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)) if started else "?"
    return f"host {lease.get('host', '?')}, pid {lease.get('pid', '?')}, started {when}"
