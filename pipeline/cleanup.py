"""``batchenum cleanup``'s sweep of ``OUT/_inputs/``: the DataFrames and Arrow tables that
``batchenum.run`` wrote there as Parquet, which no job folder's tables or plan name any more (a
refused attempt's, or one whose tables another input has replaced).

Only entries of the exact names batchenum gives them (``<32 hex digits>.parquet``) are candidates,
each checked without following a link (``Storage.kind``: a link, a folder or anything else there is
left alone), and a file written within ``RECENT_SECONDS`` is kept: a run writes its frame before it
takes its job folder and writes its plan, so a frame that young may belong to a run starting now.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.frames import FRAME_NAME, INPUTS_DIR, frame_name
from batchenum.pipeline.shard_store import PLAN_FILE
from batchenum.pipeline.storage import Storage
from batchenum.pipeline.table_commit import MANIFEST_FILE

__all__ = ["INPUTS_DIR", "RECENT_SECONDS", "InputsSwept", "remove_unreferenced_inputs"]

RECENT_SECONDS = 3600


@dataclass(frozen=True)
class InputsSwept:
    removed: int  # files removed
    freed: int  # their bytes
    kept_recent: int  # unreferenced files kept for being younger than RECENT_SECONDS


def remove_unreferenced_inputs(out: Storage, recent_seconds: float = RECENT_SECONDS) -> InputsSwept:
    """Delete the files of ``OUT/_inputs/`` that no job folder under ``out`` names in the
    parameters of its manifest (its committed tables) or of its plan (its last or current run).
    PipelineError, removing nothing, when a manifest or plan cannot be read (what it names is
    unknown); LinkRefusedError when ``_inputs`` is reached through a link."""
    folder = out.join(INPUTS_DIR)
    out.refuse_links(folder)
    if out.local and out.kind(folder) != "folder":
        return InputsSwept(0, 0, 0)
    referenced = _referenced_names(out)
    removed = freed = kept = 0
    now_ns = time.time_ns()
    for path in out.list_files(folder, recursive=False):
        name = path.rsplit("/", 1)[-1]
        if not FRAME_NAME.fullmatch(name) or name in referenced or out.kind(path) != "file":
            continue
        size, mtime_ns = out.stat(path)
        if now_ns - mtime_ns < recent_seconds * 1e9:
            kept += 1
            continue
        out.delete_file(path)
        removed, freed = removed + 1, freed + size
    return InputsSwept(removed, freed, kept)


def _referenced_names(out: Storage) -> set[str]:
    """The names of ``_inputs`` files that the job folders' manifests and plans name."""
    names: set[str] = set()
    for folder in out.list_dirs(out.root):
        if folder.rstrip("/").rsplit("/", 1)[-1].startswith("_"):
            continue
        job = out.child(folder.rstrip("/").rsplit("/", 1)[-1])
        for record in (MANIFEST_FILE, PLAN_FILE):
            names.update(_input_names(_params(job, record)))
    return names


def _params(job: Storage, record: str) -> Any:
    path = job.join(record)
    if not job.is_file(path):
        return None
    try:
        return json.loads(job.read_bytes(path)).get("params")
    except (ValueError, UnicodeDecodeError, AttributeError, OSError) as error:
        raise PipelineError(
            f"{job.uri(path)} cannot be read ({type(error).__name__}), so which inputs it names is "
            f"unknown: no file of {INPUTS_DIR}/ was removed. Run that job again (or delete its folder), "
            "then clean up"
        ) from None


def _input_names(value: Any) -> Iterator[str]:
    """The file names of every string in ``value`` (parameters, nested) that lies in an ``_inputs``
    folder."""
    if isinstance(value, str):
        name = frame_name(value)
        if name:
            yield name
    elif isinstance(value, dict):
        for item in value.values():
            yield from _input_names(item)
    elif isinstance(value, list):
        for item in value:
            yield from _input_names(item)
