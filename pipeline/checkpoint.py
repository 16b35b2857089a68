"""A long shard's resumable state between attempts: ``OUT/<job>/_checkpoints/<shard id>.ckpt``.

A job whose shards run for a long time saves a shard's state now and then through its context's
checkpoint (``ShardContext.checkpoint.save``, as often as the job chooses); the next attempt at the
shard, after a killed worker or driver, continues from ``Checkpoint.load``.  The
file is committed whole, like a shard file (storage.py: rename on a disk, one upload on an object
store), and its first line records the shard's provenance (job, code version, parameters, shard id
and spec) and when and how far it was saved: a checkpoint of other code or parameters is never
loaded.  The attempt that commits the shard removes it.  Nothing here knows about any puzzle.

A state too large for one process is saved in *parts*, each by the process that holds it
(``save_part``: ``OUT/<job>/_checkpoints/<shard id>.<name>.part``, committed whole, with the same
first line), and then the small ``.ckpt`` file that names them, by the shard itself, last: a save
is complete once its ``.ckpt`` is, and a part no ``.ckpt`` names is removed by the next save
(``remove_parts``) or when the shard commits.
"""

from __future__ import annotations

import json
import logging
import posixpath
import time
from collections.abc import Callable
from typing import IO, Any

from batchenum.pipeline.job import Shard
from batchenum.pipeline.storage import TMP_MARK, Storage

__all__ = ["CHECKPOINTS", "Checkpoint", "SaveWatch", "saved_checkpoints"]

CHECKPOINTS = "_checkpoints"
PART = ".part"
LOGGER = logging.getLogger("batchenum.checkpoint")


class Checkpoint:
    """The checkpoint file of one shard."""

    def __init__(self, storage: Storage, shard: Shard, provenance: dict[str, str]):
        self.storage = storage
        self.shard_id = shard.id
        self.path = storage.join(CHECKPOINTS, f"{shard.id}.ckpt")
        self.provenance = provenance
        # [saved_at, done] of every save this shard's attempts resumed from, oldest first: which
        # of its work a given run did (``done_before_run``), even when it retried within that run
        self.resumed: list[list[float]] = []

    @property
    def resumed_done(self) -> float:
        """The share of the work done of the save ``load`` resumed from (0: none)."""
        return self.resumed[-1][1] if self.resumed else 0.0

    def load(self) -> bytes | None:
        """The saved state, or None when there is none, or it was saved by other code or parameters."""
        if not self.storage.exists(self.path):
            return None
        header, data = _split(self.storage.read_bytes(self.path))
        if header is None or header.get("provenance") != self.provenance:
            return None
        LOGGER.info(f"{self.storage.uri(self.path)}: resuming from the save at {header.get('progress') or '?'}")
        self.resumed = [
            *_resume_points(header),
            [float(header.get("saved_at") or 0), _share(header.get("done")) or 0.0],
        ]
        return data

    def save(self, data: bytes, progress: str = "", done: float | None = None) -> None:
        """Commit ``data`` as the shard's state; ``progress`` says how far it is, for ``status``;
        ``done``, when the job knows it, the share of the shard's expected work done (0 to 1), for
        the estimates of the time left (SaveWatch, ``status``), with the share done when this
        attempt began (``done_before``: an earlier attempt's, which a rate of this run leaves out)."""
        header = {
            "provenance": self.provenance,
            "saved_at": round(time.time(), 3),
            "progress": progress,
            "bytes": len(data),
            **(
                {"done": round(min(1.0, max(0.0, done)), 6), "done_before": self.resumed_done, "resumed": self.resumed}
                if done is not None
                else {}
            ),
        }

        def write(local: str) -> None:
            with open(local, "wb") as handle:
                handle.write(json.dumps(header, sort_keys=True).encode() + b"\n")
                handle.write(data)

        self.storage.write_atomic(self.path, write)  # the run says it, wherever it was saved (SaveWatch)

    def save_part(self, name: str, write: Callable[[IO[bytes]], object], progress: str = "") -> None:
        """Commit one part of a save (``write`` writes its data to an open binary file), from any
        process; the ``.ckpt`` file that names it is saved after every part it names."""
        header = json.dumps({"provenance": self.provenance, "saved_at": round(time.time(), 3), "progress": progress})

        def written(local: str) -> None:
            with open(local, "wb") as handle:
                handle.write(header.encode() + b"\n")
                write(handle)

        self.storage.write_atomic(self._part_path(name), written)

    def load_part(self, name: str) -> bytes:
        """A part's data; ValueError when it is missing or saved by other code or parameters (the
        ``.ckpt`` that names it was committed after it, so either means the folder was tampered with)."""
        path = self._part_path(name)
        if not self.storage.exists(path):
            raise ValueError(f"{self.storage.uri(self.path)} names the part {name}, which is missing")
        header, data = _split(self.storage.read_bytes(path))
        if header is None or header.get("provenance") != self.provenance:
            raise ValueError(f"{self.storage.uri(path)} was saved by other code or parameters")
        return data

    def remove_parts(self, keep: frozenset[str] = frozenset()) -> None:
        """Delete this shard's parts, but those named in ``keep``."""
        for name in self._part_names():
            if name not in keep:
                self.storage.delete_file(self._part_path(name))

    def clear(self) -> None:
        self.storage.delete_file(self.path)
        self.remove_parts()

    def _part_path(self, name: str) -> str:
        return self.storage.join(CHECKPOINTS, f"{self.shard_id}.{name}{PART}")

    def _part_names(self) -> list[str]:
        prefix = f"{self.shard_id}."
        names = []
        for path in self.storage.list_files(self.storage.join(CHECKPOINTS), recursive=False):
            base = posixpath.basename(path.replace("\\", "/"))
            if base.startswith(prefix) and base.endswith(PART) and TMP_MARK not in base:
                names.append(base[len(prefix) : -len(PART)])
        return names


def saved_checkpoints(folder: Storage) -> list[dict[str, Any]]:
    """Every checkpoint under a job folder: shard id, saved_at, progress and bytes (first lines only),
    and done and done_before (None unless the job says how far its shards are: Checkpoint.save)."""
    found = []
    for path in _checkpoint_files(folder):
        header = _header(folder, path, folder.stat(path)[0])
        found.append(
            {
                "shard": _shard_of(path),
                **(
                    {
                        **{k: header.get(k) for k in ("saved_at", "progress", "bytes")},
                        "done": _share(header.get("done")),
                        "done_before": _share(header.get("done_before")),
                        "resumed": _resume_points(header),
                    }
                    if header
                    else {"damaged": True}
                ),
            }
        )
    return found


class SaveWatch:
    """The saves a run's shards make, wherever they run (the driver, a Ray worker, another node):
    ``new_saves`` gives each save made since ``since`` (a ``time.time()``) once, reading the first
    line of only those files whose size or time changed since the last look.  A look retries a
    failing store for LOOK_TIMEOUT seconds at most, not the run's storage timeout: the next look
    comes soon, and the thread that looks also writes the run's progress lines.  ``done_before``
    holds, by shard id, the share of its work (``done``) that the last save made before ``since``
    records: what an earlier run did of a shard this one resumes."""

    LOOK_TIMEOUT = 5.0

    def __init__(self, folder: Storage, since: float):
        self.folder = folder.copy(timeout=min(folder.timeout, self.LOOK_TIMEOUT))
        self.since = since
        self._seen: dict[str, tuple[int, int]] = {}
        self.done_before: dict[str, float] = {}

    def new_saves(self) -> list[dict[str, Any]]:
        """[{"shard", "saved_at", "progress", "done"}] for the saves not given before, by shard id
        ("done": None when the job gave none)."""
        found = []
        for path in _checkpoint_files(self.folder):
            try:
                stat = self.folder.stat(path)
                if self._seen.get(path) == stat:
                    continue
                header = _header(self.folder, path, stat[0])
            except FileNotFoundError:  # its shard committed and removed it since the listing
                continue
            self._seen[path] = stat
            saved_at = float(header.get("saved_at") or 0) if header else 0.0
            done = _share(header.get("done")) if header else None
            if header and saved_at >= self.since:
                found.append(
                    {"shard": _shard_of(path), "saved_at": saved_at, "progress": header.get("progress"), "done": done}
                )
            elif done is not None:
                self.done_before[_shard_of(path)] = done
        return found


def done_before_run(saved: dict[str, Any], started: float) -> float:
    """The share of a shard's work done before the run that started at ``started``, by the shard's
    save (a ``saved_checkpoints`` entry): the ``done`` of the last save its attempts resumed from
    that was made before then (none: 0).  A save by older code, which kept only its own attempt's
    start, gives that (``done_before``)."""
    points = saved.get("resumed")
    if not points:
        return saved.get("done_before") or 0.0
    before = [done for saved_at, done in points if saved_at < started]
    return before[-1] if before else 0.0


def _resume_points(header: dict[str, Any]) -> list[list[float]]:
    """A header's ``resumed``: its well-formed [saved_at, done] pairs."""
    points = header.get("resumed")
    if not isinstance(points, list):
        return []
    return [
        [float(p[0]), share]
        for p in points
        if isinstance(p, list)
        and len(p) == 2
        and isinstance(p[0], (int, float))
        and (share := _share(p[1])) is not None
    ]


def _share(value: Any) -> float | None:
    """A header's ``done``, if it is a share (0 to 1)."""
    return float(value) if isinstance(value, (int, float)) and 0 <= value <= 1 else None


def _checkpoint_files(folder: Storage) -> list[str]:
    return sorted(
        path for path in folder.list_files(folder.join(CHECKPOINTS)) if TMP_MARK not in path and path.endswith(".ckpt")
    )


def _header(folder: Storage, path: str, size: int) -> dict | None:
    return _split(folder.read_bytes(path, 0, min(size, 65536)))[0]


def _shard_of(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1][: -len(".ckpt")]


def _split(raw: bytes) -> tuple[dict | None, bytes]:
    line, _, data = raw.partition(b"\n")
    try:
        header = json.loads(line)
    except ValueError:
        return None, b""
    return (header if isinstance(header, dict) else None), data
