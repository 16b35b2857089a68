"""A long shard's resumable state between attempts: ``OUT/<job>/_checkpoints/<shard id>.ckpt``.

A job whose shards run for a long time saves a shard's state now and then through its context's
checkpoint (``ShardContext.checkpoint.save``, as often as the job chooses); the next attempt at the
shard, after a killed worker or driver, continues from ``Checkpoint.load``.  The
file is committed whole, like a shard file (storage.py: rename on a disk, one upload on an object
store), and its first line records the shard's provenance (job, code version, parameters, shard id
and spec) and when and how far it was saved: a checkpoint of other code or parameters is never
loaded.  The attempt that commits the shard removes it.  Nothing here knows about any puzzle.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from batchenum.pipeline.job import Shard
from batchenum.pipeline.storage import TMP_MARK, Storage

__all__ = ["CHECKPOINTS", "Checkpoint", "saved_checkpoints"]

CHECKPOINTS = "_checkpoints"
LOGGER = logging.getLogger("batchenum.checkpoint")


class Checkpoint:
    """The checkpoint file of one shard."""

    def __init__(self, storage: Storage, shard: Shard, provenance: dict[str, str]):
        self.storage = storage
        self.path = storage.join(CHECKPOINTS, f"{shard.id}.ckpt")
        self.provenance = provenance

    def load(self) -> bytes | None:
        """The saved state, or None when there is none, or it was saved by other code or parameters."""
        if not self.storage.exists(self.path):
            return None
        header, data = _split(self.storage.read_bytes(self.path))
        if header is None or header.get("provenance") != self.provenance:
            return None
        LOGGER.info(f"{self.storage.uri(self.path)}: resuming from the save at {header.get('progress') or '?'}")
        return data

    def save(self, data: bytes, progress: str = "") -> None:
        """Commit ``data`` as the shard's state; ``progress`` says how far it is, for ``status``."""
        header = {
            "provenance": self.provenance,
            "saved_at": round(time.time(), 3),
            "progress": progress,
            "bytes": len(data),
        }

        def write(local: str) -> None:
            with open(local, "wb") as handle:
                handle.write(json.dumps(header, sort_keys=True).encode() + b"\n")
                handle.write(data)

        self.storage.write_atomic(self.path, write)
        LOGGER.info(f"{self.storage.uri(self.path)}: saved at {progress or '?'}, {len(data):,} bytes")

    def clear(self) -> None:
        self.storage.delete_file(self.path)


def saved_checkpoints(folder: Storage) -> list[dict[str, Any]]:
    """Every checkpoint under a job folder: shard id, saved_at, progress and bytes (first lines only)."""
    found = []
    for path in folder.list_files(folder.join(CHECKPOINTS)):
        if TMP_MARK in path or not path.endswith(".ckpt"):
            continue
        size, _ = folder.stat(path)
        header, _ = _split(folder.read_bytes(path, 0, min(size, 65536)))
        name = path.replace("\\", "/").rsplit("/", 1)[-1][: -len(".ckpt")]
        found.append(
            {
                "shard": name,
                **({k: header.get(k) for k in ("saved_at", "progress", "bytes")} if header else {"damaged": True}),
            }
        )
    return found


def _split(raw: bytes) -> tuple[dict | None, bytes]:
    line, _, data = raw.partition(b"\n")
    try:
        header = json.loads(line)
    except ValueError:
        return None, b""
    return (header if isinstance(header, dict) else None), data
