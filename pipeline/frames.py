"""A DataFrame or Arrow table given as a batch's input (``batchenum.run(..., input=frame)``): written
once to ``OUT/_inputs/<32 hex digits of its content's hash>.parquet`` (batchenum/api.py), so its
file's name changes with any row.  A file input keeps its path when some of its lines change, and a
rerun reuses every slice whose bytes are unchanged; a frame's slices are the same by being named
without that hash (``frame_neutral``): the parameters a shard is checked against and its slice's
identity name "a frame", and the slice's checksum decides, as for a file.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["INPUTS_DIR", "FRAME_NAME", "FRAME", "frame_name", "frame_neutral", "frame_row_group"]

INPUTS_DIR = "_inputs"  # beside the job folders: batchenum.run writes a frame input there
FRAME_NAME = re.compile(r"[0-9a-f]{32}\.parquet")  # the content's hash
FRAME = "<frame>"  # what stands for a frame's file name in what a shard is checked against

# A frame's row groups: a slice's checksum covers the row groups that hold its rows, so a frame is
# written in row groups of the rows its slices are cut in, each changed row then changing one slice;
# at most FRAME_GROUP_BYTES decoded each (a worker reads a group whole: halved, a group may then
# straddle two slices, which a change there both recomputes), and at least FRAME_GROUP_ROWS rows when
# the slices may be that small (a footer entry per few rows is slow; a change then recomputes the
# slices sharing its group).
FRAME_GROUP_BYTES = 64 << 20
FRAME_GROUP_ROWS = 1024


def frame_name(path: str) -> str | None:
    """The file name of ``path`` when it is a frame batchenum wrote (``OUT/_inputs/<hash>.parquet``),
    else None."""
    parts = path.rstrip("/").rsplit("/", 2)
    if len(parts) >= 2 and parts[-2] == INPUTS_DIR and FRAME_NAME.fullmatch(parts[-1]):
        return parts[-1]
    return None


def frame_neutral(value: Any) -> Any:
    """``value`` (parameters or a slice's identity, nested) with every frame's file name replaced by
    ``FRAME``: two frames of the same length and slicing then differ only in their slices' checksums."""
    if isinstance(value, str):
        name = frame_name(value)
        return value[: -len(name)] + FRAME if name else value
    if isinstance(value, dict):
        return {key: frame_neutral(item) for key, item in value.items()}
    if isinstance(value, list):
        return [frame_neutral(item) for item in value]
    return value


def frame_row_group(slice_rows: int, fixed: bool, row_bytes: float) -> int:
    """Rows per row group of a frame whose slices hold ``slice_rows`` rows (``fixed``: given by the
    caller; else a least size, the slices a power-of-two multiple of it), its rows averaging
    ``row_bytes`` decoded: ``slice_rows``, halved while a group would exceed ``FRAME_GROUP_BYTES``;
    an automatic size is doubled up to ``FRAME_GROUP_ROWS`` rows."""
    rows = max(1, slice_rows)
    while not fixed and rows < FRAME_GROUP_ROWS:
        rows *= 2
    while rows > 1 and rows * row_bytes > FRAME_GROUP_BYTES:
        rows = -(-rows // 2)
    return rows
