"""Reading dungeons: validate grids and turn them into flat cell-code arrays, many at a time.

A grid is a list of equal-length row strings, or one string of rows separated by ``\\n`` (one
trailing newline allowed).  Cells: ``.`` or space (floor), ``@`` (start, exactly one), ``$``
(gold), ``#`` (wall), and monsters ``a-z``, ``A-Z``, ``*``, ``&``.

Per-record checks that depend on Python objects (types, row lengths) run per record; everything
per cell (allowed characters, counting starts, monsters and gold) runs on one uint8 array for the
whole batch with a lookup table.

    >>> d = parse(["@.$", ".g."])
    >>> (d.height, d.width, d.start, d.monsters, d.gold)
    (2, 3, (0, 0), ((1, 1),), ((0, 2),))
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Any, Sequence

import numpy as np

from .errors import (
    BadCharacterError,
    DungeonError,
    EmptyGridError,
    GridTooLargeError,
    NotAGridError,
    RaggedGridError,
    StartError,
)

__all__ = ["Dungeon", "ParsedBatch", "parse", "parse_many", "FLOOR", "WALL", "GOLD", "MONSTER", "START"]

# Cell codes shared with the kernel.
FLOOR, WALL, GOLD, MONSTER, START = 0, 1, 2, 3, 4
_BAD = 255
MONSTER_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ*&"
_ALLOWED_TEXT = "'.', ' ', '@', '$', '#', a-z, A-Z, '*', '&'"


def _lookup_table() -> np.ndarray:
    """uint8[256]: ASCII byte -> cell code, ``_BAD`` for anything not allowed."""
    table = np.full(256, _BAD, dtype=np.uint8)
    for chars, code in ((". ", FLOOR), ("#", WALL), ("$", GOLD), (MONSTER_CHARS, MONSTER), ("@", START)):
        table[np.frombuffer(chars.encode("ascii"), dtype=np.uint8)] = code
    return table


CODE_OF_BYTE = _lookup_table()


@dataclass(frozen=True)
class Dungeon:
    """One valid dungeon.

    rows:     the rows as given.
    height:   number of rows; width: characters per row.
    start:    (row, column) of ``@``, 0-based.
    monsters: (row, column) of every monster cell, row-major.
    gold:     (row, column) of every gold cell, row-major.
    """

    rows: tuple[str, ...]
    height: int
    width: int
    start: tuple[int, int]
    monsters: tuple[tuple[int, int], ...]
    gold: tuple[tuple[int, int], ...]


@dataclass
class ParsedBatch:
    """The valid dungeons of a batch as flat arrays (the kernel's input), plus every record's error.

    index:      int64[m], position in the input of each valid dungeon.
    codes:      uint8[sum of cells], the cells of all valid dungeons, row-major, concatenated.
    offsets:    int64[m + 1], dungeon k's cells are ``codes[offsets[k]:offsets[k + 1]]``.
    heights:    int64[m]; widths: int64[m].
    starts:     int64[m], the start's index within its dungeon's cells.
    monsters:   int64[m], monster cells; gold_total: int64[m], gold cells.
    errors:     one entry per input record: None, or the DungeonError that rejected it.
    """

    index: np.ndarray
    codes: np.ndarray
    offsets: np.ndarray
    heights: np.ndarray
    widths: np.ndarray
    starts: np.ndarray
    monsters: np.ndarray
    gold_total: np.ndarray
    errors: list[DungeonError | None]

    def __len__(self) -> int:
        return len(self.index)

    def take(self, picks: np.ndarray) -> "ParsedBatch":
        """A batch of the valid dungeons ``picks`` (indices into this batch); errors are kept."""
        picks = np.asarray(picks, dtype=np.int64)
        sizes = self.offsets[1:] - self.offsets[:-1]
        offsets = np.zeros(len(picks) + 1, dtype=np.int64)
        np.cumsum(sizes[picks], out=offsets[1:])
        cells = _segment_cells(self.offsets[picks], sizes[picks], offsets)
        return ParsedBatch(
            index=self.index[picks],
            codes=self.codes[cells],
            offsets=offsets,
            heights=self.heights[picks],
            widths=self.widths[picks],
            starts=self.starts[picks],
            monsters=self.monsters[picks],
            gold_total=self.gold_total[picks],
            errors=self.errors,
        )

    def unique(self) -> tuple["ParsedBatch", np.ndarray]:
        """(the distinct dungeons, inverse) with ``inverse[k]`` the distinct dungeon of dungeon k.

        Two dungeons are the same when their cell codes and width agree: floor written as ``.`` or
        space, and a monster's letter, do not change the answer.
        """
        first_of: dict[tuple[int, bytes], int] = {}
        firsts: list[int] = []
        inverse = np.empty(len(self), dtype=np.int64)
        codes, offsets, widths = self.codes, self.offsets.tolist(), self.widths.tolist()
        for k in range(len(self)):
            key = (widths[k], codes[offsets[k] : offsets[k + 1]].tobytes())
            distinct = first_of.setdefault(key, len(firsts))
            if distinct == len(firsts):
                firsts.append(k)
            inverse[k] = distinct
        return self.take(firsts), inverse


def _segment_cells(old_starts: np.ndarray, sizes: np.ndarray, new_offsets: np.ndarray) -> np.ndarray:
    """Indices into the old cell array that gather the given segments back to back."""
    total = int(new_offsets[-1])
    shift = np.repeat(old_starts - new_offsets[:-1], sizes)
    return np.arange(total, dtype=np.int64) + shift


# ------------------------------------------------------------------------------------------ public


def parse(grid: Any, max_cells: int | None = None) -> Dungeon:
    """Validate one grid and return it as a Dungeon; raises a DungeonError subclass if invalid.

    grid:      a list of equal-length row strings, or one string with ``\\n`` between rows.
    max_cells: reject grids with more cells than this (GridTooLargeError); None for no limit.
    """
    batch = parse_many([grid], max_cells=max_cells)
    if batch.errors[0] is not None:
        raise batch.errors[0]
    rows = tuple(_rows_of(grid, None))
    width = int(batch.widths[0])
    return Dungeon(
        rows=rows,
        height=len(rows),
        width=width,
        start=divmod(int(batch.starts[0]), width),
        monsters=_cells_with(batch.codes, MONSTER, width),
        gold=_cells_with(batch.codes, GOLD, width),
    )


def _cells_with(codes: np.ndarray, code: int, width: int) -> tuple[tuple[int, int], ...]:
    """(row, column) of every cell of one dungeon's codes that equals ``code``, row-major."""
    return tuple(divmod(int(i), width) for i in np.flatnonzero(codes == code))


def parse_many(grids: Sequence[Any], max_cells: int | None = None) -> ParsedBatch:
    """Validate many grids at once; every record gets either a place in the batch or an error.

    grids:     the grids (anything; invalid ones are reported in ``errors``, never raised).
    max_cells: reject grids with more cells than this; None for no limit.
    """
    errors: list[DungeonError | None] = [None] * len(grids)
    kept, kept_rows = [], []
    for i, grid in enumerate(grids):
        try:
            kept_rows.append(_rows_of(grid, max_cells))
            kept.append(i)
        except DungeonError as exc:
            errors[i] = exc
    kept, kept_rows = _drop_non_ascii(kept, kept_rows, errors)
    heights = np.fromiter((len(rows) for rows in kept_rows), dtype=np.int64, count=len(kept))
    widths = np.fromiter((len(rows[0]) for rows in kept_rows), dtype=np.int64, count=len(kept))
    offsets = np.zeros(len(kept) + 1, dtype=np.int64)
    np.cumsum(heights * widths, out=offsets[1:])
    text = "".join(chain.from_iterable(kept_rows)).encode("ascii")
    codes = CODE_OF_BYTE[np.frombuffer(text, dtype=np.uint8)]
    batch = ParsedBatch(
        index=np.asarray(kept, dtype=np.int64),
        codes=codes,
        offsets=offsets,
        heights=heights,
        widths=widths,
        starts=np.zeros(len(kept), dtype=np.int64),
        monsters=_count_per_dungeon(codes == MONSTER, offsets),
        gold_total=_count_per_dungeon(codes == GOLD, offsets),
        errors=errors,
    )
    return _check_cells(batch, kept_rows)


# ------------------------------------------------------------------------------ per-record checks


def _rows_of(grid: Any, max_cells: int | None) -> list[str]:
    """The grid's rows after the checks that need no per-cell work: type, emptiness, size, shape."""
    if isinstance(grid, str):
        text = grid[:-1] if grid.endswith("\n") else grid
        if not text:
            raise EmptyGridError("grid is empty")
        rows = text.split("\n")
    elif isinstance(grid, (list, tuple)):
        rows = list(grid)
        if not rows:
            raise EmptyGridError("grid is empty (no rows)")
        for r, row in enumerate(rows):
            if not isinstance(row, str):
                raise NotAGridError(f"row {r + 1} is not a string but {_type_name(row)}")
    else:
        raise NotAGridError(f"grid must be a string or a list of strings, not {_type_name(grid)}")
    _check_size(rows, max_cells)
    _check_shape(rows)
    return rows


def _check_size(rows: list[str], max_cells: int | None) -> None:
    """GridTooLargeError when the grid has more characters than ``max_cells``."""
    if max_cells is not None:
        cells = sum(map(len, rows))
        if cells > max_cells:
            raise GridTooLargeError(
                f"grid has {cells} cells, more than the limit of {max_cells}", cells, max_cells
            )


def _check_shape(rows: list[str]) -> None:
    """EmptyGridError for an empty row, RaggedGridError for rows of different lengths."""
    lengths = set(map(len, rows))
    if len(lengths) == 1 and 0 not in lengths:
        return
    width = len(rows[0])
    for r, row in enumerate(rows):
        if not row:
            raise EmptyGridError(f"row {r + 1} is empty")
        if len(row) != width:
            raise RaggedGridError(
                f"row {r + 1} has {len(row)} characters but row 1 has {width} (rows must have equal length)"
            )


def _drop_non_ascii(kept: list[int], kept_rows: list[list[str]], errors: list) -> tuple[list, list]:
    """Reject the (rare) grids with non-ASCII characters one by one, so the rest encode in bulk."""
    if all(row.isascii() for rows in kept_rows for row in rows):
        return kept, kept_rows
    still, still_rows = [], []
    for i, rows in zip(kept, kept_rows):
        if all(row.isascii() for row in rows):
            still.append(i)
            still_rows.append(rows)
        else:
            errors[i] = _first_bad_character(rows)
    return still, still_rows


def _first_bad_character(rows: list[str]) -> BadCharacterError:
    """The error for the first character outside the alphabet, scanning row by row."""
    for r, row in enumerate(rows):
        for c, char in enumerate(row):
            if not (char.isascii() and CODE_OF_BYTE[ord(char)] != _BAD):
                return BadCharacterError(
                    f"row {r + 1}, column {c + 1}: character {char!r} (U+{ord(char):04X}) is not allowed "
                    f"(allowed: {_ALLOWED_TEXT})"
                )
    raise AssertionError("no bad character")  # only called on grids known to have one


def _type_name(value: Any) -> str:
    """A JSON-ish name of a value's type, for messages."""
    names = {type(None): "null", bool: "a boolean", int: "an integer", float: "a number", dict: "an object",
             list: "a list", str: "a string"}
    return names.get(type(value), type(value).__name__)


# ------------------------------------------------------------------------------- per-cell checks


def _count_per_dungeon(flags: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """int64[m]: how many True flags fall in each dungeon's segment (segments are non-empty)."""
    if len(offsets) == 1:
        return np.zeros(0, dtype=np.int64)
    return np.add.reduceat(flags.astype(np.int64), offsets[:-1])


def _check_cells(batch: ParsedBatch, kept_rows: list[list[str]]) -> ParsedBatch:
    """Reject dungeons with a disallowed character or not exactly one start; fill in the starts."""
    bad_cells = np.flatnonzero(batch.codes == _BAD)
    bad = np.zeros(len(batch), dtype=bool)
    bad[np.searchsorted(batch.offsets, bad_cells, side="right") - 1] = True
    start_cells = np.flatnonzero(batch.codes == START)
    start_owner = np.searchsorted(batch.offsets, start_cells, side="right") - 1
    start_count = np.bincount(start_owner, minlength=len(batch))
    for k in np.flatnonzero(bad | (start_count != 1)):
        rows = kept_rows[k]
        batch.errors[batch.index[k]] = _first_bad_character(rows) if bad[k] else _start_error(rows)
    single = start_count[start_owner] == 1
    owners = start_owner[single]
    batch.starts[owners] = start_cells[single] - batch.offsets[owners]
    good = np.flatnonzero(~bad & (start_count == 1))
    return batch if len(good) == len(batch) else batch.take(good)


def _start_error(rows: list[str]) -> StartError:
    """The error for a grid without exactly one ``@``."""
    found = [(r + 1, c + 1) for r, row in enumerate(rows) for c, char in enumerate(row) if char == "@"]
    if not found:
        return StartError("no start '@' (exactly one is needed)")
    where = " and ".join(f"row {r}, column {c}" for r, c in found[:2])
    more = f" and {len(found) - 2} more" if len(found) > 2 else ""
    return StartError(f"{len(found)} starts '@' (at {where}{more}); exactly one is needed")
