"""One run per job folder at a time: a lease file (``_lease.json``) that the running driver renews,
and a fence that every commit into the folder passes.

A second run into the same folder refuses, naming the first (host, pid, start time).  A lease left
by a dead run is taken over.  The lease names its process by the kernel's boot id, the inode of its
PID namespace, its pid and the time that process started, so another container or PID namespace on
the same host (which may reuse the pid, or call its run pid 1) never mistakes it for one of its own.
Where all of these match ours, the process can be checked: the lease is taken over at once when it
is gone, and never while it lives, however long it has been stopped.  Elsewhere (another host, PID
namespace or boot, or a lease of an older version that names none of these) the holder is treated as
alive until its heartbeat is older than the ``stale_after`` the lease records.

The periods follow the holder's storage timeout, so that a store unreachable for less than that
costs only the wait: the holder keeps the folder while its last renewal is less than ``valid_for``
old (the storage timeout plus two heartbeats), and others may take it over only ``MARGIN`` seconds
after that (``stale_after``).  With the default timeout of 180 s: 200 s and 230 s.

Winning never depends on timing.  On a local disk a new lease appears by a hard link, which fails
when the file exists.  Otherwise (object storage, or taking over a dead run's lease) each candidate
writes a claim of its own (``_lease.json.tmp-claim-<run>``), then lists the claims: it goes on only
if its claim is the only one, else it withdraws and tries again after a random pause.  A claim is
written before the listing that follows it, and the winner writes the lease before it withdraws its
claim, so of two candidates at least one sees the other, whatever the latency (object stores list
what was written before: S3 and GCS are strongly consistent).

A lease that disappears while its run holds it was lost with the run's files (nothing else removes
it: a takeover replaces it), and is named so (``files_lost``), not as a takeover.

A run that has not renewed its lease for ``valid_for`` seconds (the store unreachable, the process
stopped) gives the folder up before anyone may take it: the fence refuses its commits from then on.
The fence (``LeaseFence``) runs before every file is committed into the folder, in the driver and in
Ray workers alike: the lease must still name this run and have been renewed within ``valid_for``.  A writer frozen past a takeover and then resumed therefore
commits nothing into the new owner's folder, and never renews over the new owner's lease.
"""

from __future__ import annotations

import json
import os
import random
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from batchenum.pipeline import faults
from batchenum.pipeline.errors import PipelineError, RunStoppedError
from batchenum.pipeline.storage import TMP_MARK, Storage, StorageError

__all__ = [
    "Lease",
    "LeaseError",
    "LeaseLostError",
    "LeaseFence",
    "LEASE_FILE",
    "STALE_AFTER",
    "dead_reason",
    "files_lost",
    "lease_problem",
    "process_identity",
    "stale_after",
]

LEASE_FILE = "_lease.json"
# Seconds between renewals, and between a holder giving its folder up and others taking it (tests
# shorten both).  STALE_AFTER: for a lease that does not record its own (older runs).
HEARTBEAT, MARGIN = faults.lease_times() or (10.0, 30.0)
STALE_AFTER = 120.0
CLAIM_MARK = f"{LEASE_FILE}{TMP_MARK}claim-"
_CLAIM_ROUNDS = 6  # tries of the claim protocol before refusing (each ends with a random pause)
_CLAIM_TTL = 60.0  # a claim older than this is a crashed candidate's, ignored (and a round must be quicker)
_RELEASE_TIMEOUT = 10.0  # seconds the lease's release may wait for an unreachable store
_READS = 4  # reads of a lease on an object store that does not parse before it counts as damaged (``_load``)


class LeaseError(PipelineError):
    """Another live run holds the job folder."""


class LeaseLostError(LeaseError, RunStoppedError):
    """This run no longer holds the job folder (taken over, or not renewed in time): it must stop
    committing there."""


@dataclass(frozen=True)
class LeaseFence:
    """The check every commit into a job folder passes (``Storage.guard``), picklable into Ray
    workers: the folder's lease still names ``run`` and was renewed less than ``valid_for`` ago."""

    path: str
    run: str
    folder: str  # the job folder, as people type it
    valid_for: float

    def __call__(self, storage: Storage) -> None:
        try:
            lease = _load(storage, self.path)
        except FileNotFoundError:
            raise files_lost(storage, self.path, self.folder) from None
        except (ValueError, UnicodeDecodeError, RecursionError):
            lease = {}
        if not isinstance(lease, dict) or lease.get("run") != self.run:
            other = f" by another run ({_describe(lease)})" if isinstance(lease, dict) and lease else ""
            raise LeaseLostError(
                f"this run no longer holds {self.folder}: its lease was taken over{other}, so it "
                "commits nothing more there. Committed shards are kept: see `batchenum status`, and "
                "run the same command again once no other run writes there."
            )
        beat = lease.get("heartbeat_at")
        age = time.time() - beat if isinstance(beat, (int, float)) else float("inf")
        if age > self.valid_for:
            raise _not_renewed(self.folder, age)


def files_lost(storage: Storage, path: str, folder: str) -> LeaseLostError:
    """The lease file of a run that still holds it is gone: only that run removes it (as it ends)
    and a takeover replaces it, so the store lost the run's files (the job folder deleted, an object
    store restarted empty); saying "taken over" and "committed shards are kept" would be untrue."""
    from batchenum.pipeline.shard_store import PLAN_FILE  # (shard_store imports this module)

    try:  # a commit under way may have made the folder again: its plan, written as the run began, tells
        plan_gone = not storage.exists(storage.join(PLAN_FILE))
    except (StorageError, OSError):
        plan_gone = False
    gone = f"{LEASE_FILE} and {PLAN_FILE} are gone from" if plan_gone else f"{LEASE_FILE} is gone from"
    return LeaseLostError(
        f"the store lost this run's files: {gone} the job folder {folder}, which the run held (deleted, "
        "or the store lost its contents); this run commits nothing more there, and the shards it had "
        "committed may be gone too. Run the same command again: it computes whatever is missing."
    )


def _not_renewed(folder: str, age: float) -> LeaseLostError:
    return LeaseLostError(
        f"this run could not renew its lease on {folder} for {age:.0f} s (the store unreachable, "
        "or the process stopped): it commits nothing more, since another run may take the folder "
        "over now. Committed shards are kept: run the same command again."
    )


class Lease:
    """Hold ``<folder>/_lease.json`` while a run writes there (a context manager).  While held,
    ``folder.guard`` is the lease's fence, so every commit through ``folder`` checks it."""

    def __init__(self, folder: Storage, say=print):
        self.folder = folder
        self.store = folder.copy(guard=None)  # the lease's own files pass no fence
        self.path = folder.join(LEASE_FILE)
        self.say = say
        self.valid_for = folder.timeout + 2 * HEARTBEAT
        self.record = {
            "run": uuid.uuid4().hex,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "started_at": round(time.time(), 3),
            "stale_after": round(self.valid_for + MARGIN, 3),
            **process_identity(os.getpid()),
        }
        self.renewed = time.monotonic()  # when the lease was last written
        self.lost: str | None = None  # why this run gave the folder up, once it has
        self._taking_over: str | None = None  # the dead run whose lease this one takes over
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Lease:
        self.folder.refuse_links(self.path)  # the job folder itself a link: nothing read or written
        current = self._read()
        if current is not None:
            self._refuse_if_alive(current)
        if not (current is None and self.folder.local and self._create_exclusively()):
            self._claim()
        self.renewed = time.monotonic()
        self.folder.guard = LeaseFence(self.path, self.record["run"], self.folder.display_root, self.valid_for)
        self._thread = threading.Thread(target=self._renew, name="batchenum-lease", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.folder.guard = None
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:  # an unreachable store must not hold the exit for long: the lease then goes stale
            quick = self.store.copy(timeout=_RELEASE_TIMEOUT)
            current = _read_lease(quick, self.path, check=False)
            if current and current.get("run") == self.record["run"]:
                quick.delete_file(self.path)
        except (StorageError, OSError):
            pass

    def _refuse_if_alive(self, current: dict) -> None:
        if current.get("run") == self.record["run"]:
            return
        dead = dead_reason(current)
        if dead is None:
            beat = time.time() - current["heartbeat_at"]
            stopped = (
                f" (no heartbeat for {beat:.0f} s: it may be stopped; `kill -CONT {current['pid']}` resumes it, "
                "and it then gives the folder up by itself)"
                if beat > stale_after(current)
                else ""
            )
            elsewhere = (
                ""
                if stopped or _checkable(current)
                else (
                    " (its process cannot be checked from here: another host, container or PID namespace; if it is "
                    f"dead, the folder can be taken over {max(stale_after(current) - beat, 0):.0f} s from now)"
                )
            )
            raise LeaseError(
                f"another run is writing to {self.folder.display_root}: {_describe(current)}{stopped}"
                f"{elsewhere}. Wait for it to finish (or stop it), or give another --out."
            )
        if current.get("run") != self._taking_over:  # checked again after the claim: said once
            self._taking_over = current.get("run")
            self.say(f"taking over the folder from a dead run ({_describe(current)}: {dead})")

    # ------------------------------------------------------------------------------ winning it

    def _create_exclusively(self) -> bool:
        """Make the lease appear whole where none exists (local disk): True if this run made it;
        False if the file system has no hard links (the claims decide then).  LeaseError when
        another run's lease appeared first."""
        scratch = f"{self.path}{TMP_MARK}{self.record['run']}"  # a crash leaves it to remove_temporaries
        try:
            os.makedirs(self.folder.root, exist_ok=True)
            with open(scratch, "w", encoding="utf-8") as handle:
                handle.write(json.dumps({**self.record, "heartbeat_at": round(time.time(), 3)}))
        except OSError as error:
            if os.path.exists(scratch):
                os.unlink(scratch)
            raise self.folder.no_room(scratch, error) or error from None
        try:
            os.link(scratch, self.path)
            return True
        except FileExistsError:
            raise self._beaten(self._read(check=False)) from None
        except OSError:
            return False
        finally:
            os.unlink(scratch)

    def _claim(self) -> None:
        """Win the folder by the claims protocol (module docstring), then write the lease."""
        claim = self.folder.join(f"{CLAIM_MARK}{self.record['run']}")
        for _ in range(_CLAIM_ROUNDS):
            started = time.monotonic()
            self.store.write_text(claim, json.dumps({**self.record, "claimed_at": round(time.time(), 3)}))
            try:
                rivals = self._live_claims(claim)
                if rivals is None and time.monotonic() - started < _CLAIM_TTL / 2:
                    current = self._read()  # after the listing: a winner wrote its lease before it withdrew
                    if current is not None:
                        self._refuse_if_alive(current)
                    self._write()
                    return
            finally:
                self.store.delete_file(claim)
            time.sleep(random.uniform(0.1, 1.0))  # both withdraw; random pauses part them
        raise self._beaten(self._read(check=False))

    def _live_claims(self, mine: str) -> list[str] | None:
        """The other candidates' claims in place now (None when there is none and ours is there);
        claims older than ``_CLAIM_TTL`` are crashed candidates' and are removed."""
        claims = [
            path
            for path in self.store.list_files(self.folder.root, recursive=False)
            if os.path.basename(path).startswith(CLAIM_MARK)
        ]
        if mine not in claims:
            return []  # ours is gone (removed as debris by another): not a win
        rivals = []
        for path in claims:
            if path == mine:
                continue
            try:
                claimed = json.loads(self.store.read_bytes(path)).get("claimed_at")
            except (FileNotFoundError, ValueError, UnicodeDecodeError, AttributeError):
                continue  # withdrawn meanwhile, or not a claim
            if isinstance(claimed, (int, float)) and time.time() - claimed > _CLAIM_TTL:
                self.store.delete_file(path)
                continue
            rivals.append(path)
        return rivals or None

    def _beaten(self, winner: dict | None) -> LeaseError:
        return LeaseError(
            f"another run started writing to {self.folder.display_root} at the same moment: "
            f"{_describe(winner or {})}. Wait for it to finish, or give another --out."
        )

    # ------------------------------------------------------------------------------ keeping it

    def _renew(self) -> None:
        """Every ``HEARTBEAT``: renew the lease if it still names this run and was renewed within
        ``VALID_FOR``; otherwise give the folder up (the fence then refuses every commit)."""
        renewing = self.store.copy(timeout=HEARTBEAT)  # a slow store delays one heartbeat, not all
        while not self._stop.wait(HEARTBEAT):
            age = time.monotonic() - self.renewed
            if age > self.valid_for:
                self._give_up(str(_not_renewed(self.folder.display_root, age)))
                return
            try:
                current = _read_lease(renewing, self.path, check=False)
                if current is None and not renewing.exists(self.path):
                    self._give_up(str(files_lost(renewing, self.path, self.folder.display_root)))
                    return
                if not current or current.get("run") != self.record["run"]:
                    self._give_up(
                        f"the lease on {self.folder.display_root} was taken over "
                        f"({_describe(current or {})}): this run commits nothing more there"
                    )
                    return
                if time.monotonic() - self.renewed <= self.valid_for:  # the read may have waited
                    self._write(renewing)
                    self.renewed = time.monotonic()
            except (StorageError, OSError):
                continue  # the store did not answer within a heartbeat: the next one tries again

    def _give_up(self, why: str) -> None:
        self.lost = why
        self.say(why)

    def _write(self, storage: Storage | None = None) -> None:
        (storage or self.store).write_text(
            self.path, json.dumps({**self.record, "heartbeat_at": round(time.time(), 3)})
        )

    def _read(self, check: bool = True) -> dict | None:
        return _read_lease(self.store, self.path, check)


def _read_lease(storage: Storage, path: str, check: bool = True) -> dict | None:
    """The lease now in place (None when there is none).  LeaseError when the file is not a lease
    that a run of ours wrote (``check``; otherwise such a file reads as None)."""
    try:
        if not storage.exists(path):
            return None
        if not storage.is_file(path):
            problem: str | None = "it is not a file"
        else:
            record = _load(storage, path)
            problem = lease_problem(record)
    except FileNotFoundError:  # removed between the two looks: its run has just ended
        return None
    except (ValueError, UnicodeDecodeError, RecursionError):
        problem = "it is not JSON"
    if problem is None:
        return record
    if not check:
        return None
    raise LeaseError(
        f"{storage.uri(path)} is damaged or foreign ({problem}): it is not a lease a run of batchenum "
        f"wrote, so whether a run is writing to {storage.display_root} is unknown. If no run is writing "
        "there, remove that file and run the same command again."
    )


def _load(storage: Storage, path: str) -> Any:
    """The lease file's JSON.  An object store's reader learns a file's size before it reads the
    bytes, so a read that races a heartbeat's rewrite can get the new lease cut to the old one's
    size: there, a file that does not parse is read again a few times before it counts as damaged
    (a disk's lease is replaced by a rename: a read sees all of one lease or of the other)."""
    for attempt in range(1, 1 if storage.local else _READS):
        try:
            return json.loads(storage.read_bytes(path))
        except (ValueError, UnicodeDecodeError):
            time.sleep(0.05 * attempt)
    return json.loads(storage.read_bytes(path))  # the last read: a lease still cut is damaged


def lease_problem(lease: object) -> str | None:
    """Why ``lease`` (parsed JSON) is not a lease a run of ours wrote, or None when it is one."""
    if not isinstance(lease, dict):
        return f"it holds a JSON {type(lease).__name__}, not an object"
    for key, kinds in (
        ("run", str),
        ("host", str),
        ("pid", int),
        ("started_at", (int, float)),
        ("heartbeat_at", (int, float)),
    ):
        value = lease.get(key)
        if not isinstance(value, kinds) or isinstance(value, bool):
            return f"its {key} is {json.dumps(value)[:40]}" if key in lease else f"it has no {key}"
        if isinstance(value, str):  # run and host: any text will do
            continue
        if key == "pid" and not 0 < value < 1 << 31:
            return f"its pid is {value}"
        if key.endswith("_at") and not 0 <= value < 1e11:  # seconds since 1970, before the year 5000
            return f"its {key} is {value}"
    for key, kind in (("boot_id", str), ("pid_namespace", int), ("pid_started", int)):  # older leases: none
        value = lease.get(key)
        if key in lease and (not isinstance(value, kind) or isinstance(value, bool)):
            return f"its {key} is {json.dumps(value)[:40]}"
    value = lease.get("stale_after", STALE_AFTER)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < 1e9:
        return f"its stale_after is {json.dumps(value)[:40]}"
    return None


def stale_after(lease: dict) -> float:
    """Seconds without a heartbeat after which ``lease`` (one ``lease_problem`` accepts) belongs to a
    dead run: what its run recorded, for leases that record it."""
    return float(lease.get("stale_after", STALE_AFTER))


def dead_reason(lease: dict) -> str | None:
    """Why the run that wrote ``lease`` (one that ``lease_problem`` accepts) is dead, or None while
    it may be alive."""
    if _checkable(lease):
        if process_identity(lease["pid"]).get("pid_started") != lease.get("pid_started"):
            return "its process is gone"
        return None  # alive here (perhaps stopped): never taken over; it gives the folder up by itself
    age = time.time() - float(lease.get("heartbeat_at", 0))
    if age > stale_after(lease):
        return (
            f"no heartbeat for {age:.0f} s, and its process cannot be checked from here (another host, "
            "container or PID namespace)"
        )
    return None


def process_identity(pid: int) -> dict:
    """What names process ``pid`` of this PID namespace beyond doubt: the kernel's boot id, the inode
    of this PID namespace and the time the process started (clock ticks after boot).  Empty where
    /proc cannot tell (not Linux); without ``pid_started`` when no such process lives."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as handle:
            identity: dict = {"boot_id": handle.read().strip(), "pid_namespace": os.stat("/proc/self/ns/pid").st_ino}
    except OSError:
        return {}
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            identity["pid_started"] = int(handle.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        pass
    return identity


def _checkable(lease: dict) -> bool:
    """Whether the process ``lease`` names can be looked at from here: same boot, same PID namespace."""
    here = process_identity(os.getpid())
    return (
        bool(here)
        and "pid_started" in lease
        and lease.get("boot_id") == here["boot_id"]
        and lease.get("pid_namespace") == here["pid_namespace"]
    )


def _describe(lease: dict) -> str:
    started = lease.get("started_at")
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)) if started else "?"
    return f"host {lease.get('host', '?')}, pid {lease.get('pid', '?')}, started {when}"
