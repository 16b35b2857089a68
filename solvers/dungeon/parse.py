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

import decimal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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
from .kernel import classify_kernel, first_equal_kernel, hash_kernel, shape_kernel

__all__ = [
    "Dungeon",
    "ParsedBatch",
    "parse",
    "parse_many",
    "parse_flat",
    "grid_rows",
    "FLOOR",
    "WALL",
    "GOLD",
    "MONSTER",
    "START",
]

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
    codes:      uint8[*], cell codes, row-major; may also hold cells of rejected or dropped grids.
    offsets:    int64[m], dungeon k's cells are ``codes[offsets[k] : offsets[k] + heights[k] * widths[k]]``.
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

    def take(self, picks) -> ParsedBatch:
        """The valid dungeons ``picks`` (indices into this batch), sharing ``codes`` and ``errors``."""
        picks = np.asarray(picks, dtype=np.int64)
        return ParsedBatch(
            index=self.index[picks],
            codes=self.codes,
            offsets=self.offsets[picks],
            heights=self.heights[picks],
            widths=self.widths[picks],
            starts=self.starts[picks],
            monsters=self.monsters[picks],
            gold_total=self.gold_total[picks],
            errors=self.errors,
        )

    def cells_of(self, k: int) -> np.ndarray:
        """uint8[height * width]: the cell codes of dungeon k, row-major."""
        start = int(self.offsets[k])
        return self.codes[start : start + int(self.heights[k] * self.widths[k])]

    def unique(self) -> tuple[ParsedBatch, np.ndarray]:
        """(the distinct dungeons, inverse) with ``inverse[k]`` the distinct dungeon of dungeon k.

        Two dungeons are the same when their width and cell codes agree: floor written as ``.`` or
        space, and the letters of the monsters, do not change the answer.
        """
        sizes = self.heights * self.widths
        hashes = np.empty(len(self), dtype=np.uint64)
        hash_kernel(self.codes, self.offsets, sizes, self.widths, hashes)
        order = np.argsort(hashes, kind="stable")
        first_equal = np.empty(len(self), dtype=np.int64)
        first_equal_kernel(self.codes, self.offsets, sizes, self.widths, order, hashes[order], first_equal)
        is_first = first_equal == np.arange(len(self))
        firsts = np.flatnonzero(is_first)
        inverse = (np.cumsum(is_first) - 1)[first_equal]
        return (self if len(firsts) == len(self) else self.take(firsts)), inverse


# ------------------------------------------------------------------------------------------ public


def parse(grid: Any, max_cells: int | None = None) -> Dungeon:
    """Validate one grid and return it as a Dungeon; raises a DungeonError subclass if invalid.

    grid:      a list of equal-length row strings, or one string with ``\\n`` between rows.
    max_cells: reject grids with more cells than this (GridTooLargeError); None for no limit.
    """
    batch = parse_many([grid], max_cells=max_cells)
    if batch.errors[0] is not None:
        raise batch.errors[0]
    height, width, text = _flatten(grid, None)
    codes = batch.cells_of(0)
    return Dungeon(
        rows=tuple(text[r * width : (r + 1) * width] for r in range(height)),
        height=height,
        width=width,
        start=divmod(int(batch.starts[0]), width),
        monsters=_cells_with(codes, MONSTER, width),
        gold=_cells_with(codes, GOLD, width),
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
    kept, shapes, texts = [], [], []
    for i, grid in enumerate(grids):
        try:
            height, width, text = _flatten(grid, max_cells)
        except DungeonError as exc:
            errors[i] = exc
            continue
        kept.append(i)
        shapes.append((height, width))
        texts.append(text)
    everything = "".join(texts)
    if not everything.isascii():
        kept, shapes, texts = _drop_non_ascii(kept, shapes, texts, errors)
        everything = "".join(texts)
    shape = np.array(shapes, dtype=np.int64).reshape(-1, 2)
    sizes = shape[:, 0] * shape[:, 1]
    offsets = np.cumsum(sizes) - sizes
    raw = np.frombuffer(everything.encode("ascii"), dtype=np.uint8)
    codes = np.empty(len(raw), dtype=np.uint8)
    tally = np.empty((len(kept), 5), dtype=np.int64)
    classify_kernel(raw, CODE_OF_BYTE, offsets, sizes, codes, tally)
    batch = ParsedBatch(
        index=np.asarray(kept, dtype=np.int64),
        codes=codes,
        offsets=offsets,
        heights=shape[:, 0].copy(),
        widths=shape[:, 1].copy(),
        starts=tally[:, 4].copy(),
        monsters=tally[:, 0].copy(),
        gold_total=tally[:, 1].copy(),
        errors=errors,
    )
    return _check_cells(batch, texts, start_count=tally[:, 2], first_bad=tally[:, 3])


def parse_flat(
    chars: np.ndarray, row_offsets: np.ndarray, grid_offsets: np.ndarray, max_cells: int | None = None
) -> ParsedBatch:
    """Validate many grids given as flat UTF-8 bytes (for example Arrow list<string> buffers),
    with no Python object per grid; same results and errors as ``parse_many`` on the row lists.

    chars:        uint8[*], the rows' UTF-8 bytes.
    row_offsets:  int64[rows + 1], row j is ``chars[row_offsets[j] : row_offsets[j + 1]]``.
    grid_offsets: int64[n + 1], grid i is rows ``grid_offsets[i] .. grid_offsets[i + 1] - 1``;
                  a grid's rows are consecutive in ``chars``.
    max_cells:    reject grids with more cells than this; None for no limit.

    Shapes are checked in one kernel pass, characters and starts in another; the few grids that
    fail are decoded and handed to ``parse_many`` so that their errors read the same.
    """
    n = len(grid_offsets) - 1
    heights, widths, starts_at = (np.empty(n, dtype=np.int64) for _ in range(3))
    suspect = np.empty(n, dtype=np.bool_)
    shape_kernel(row_offsets, grid_offsets, -1 if max_cells is None else max_cells, heights, widths, starts_at, suspect)
    sizes = heights * widths
    codes = np.empty(len(chars), dtype=np.uint8)
    tally = np.empty((n, 5), dtype=np.int64)
    classify_kernel(chars, CODE_OF_BYTE, starts_at, np.where(suspect, 0, sizes), codes, tally)
    suspect |= (tally[:, 3] >= 0) | (tally[:, 2] != 1)
    good = np.flatnonzero(~suspect)
    return ParsedBatch(
        index=good,
        codes=codes,
        offsets=starts_at[good],
        heights=heights[good],
        widths=widths[good],
        starts=tally[good, 4],
        monsters=tally[good, 0],
        gold_total=tally[good, 1],
        errors=_errors_of_suspects(np.flatnonzero(suspect), n, chars, row_offsets, grid_offsets, max_cells),
    )


def _errors_of_suspects(suspects, n, chars, row_offsets, grid_offsets, max_cells) -> list[DungeonError | None]:
    """Errors for grids ``parse_flat`` flagged, from ``parse_many`` on their decoded rows.

    Every flagged grid is invalid: an empty grid or row, rows of different byte lengths, too many
    bytes, a byte outside the ASCII alphabet or not one start; with non-ASCII rows the byte checks
    can misjudge which rule broke, but never that one did.
    """

    def rows_of(k: int) -> list[str]:
        bounds = row_offsets[grid_offsets[k] : grid_offsets[k + 1] + 1].tolist()
        return [chars[lo:hi].tobytes().decode("utf-8") for lo, hi in zip(bounds, bounds[1:])]

    errors: list[DungeonError | None] = [None] * n
    checked = parse_many([rows_of(k) for k in suspects], max_cells=max_cells)
    for k, error in zip(suspects.tolist(), checked.errors):
        if error is None:
            raise AssertionError(f"grid {k} was flagged by the byte checks but parses as valid")
        errors[k] = error
    return errors


# ------------------------------------------------------------------------------ per-record checks


def grid_rows(grid: Any) -> list[str]:
    """A grid's rows as a list of strings: a list of strings as it is, one string split at ``\n``;
    NotAGridError for anything else, EmptyGridError for an empty string.  (A job that reads grids
    as Arrow lists of strings turns other JSON values into them with this, before ``parse_flat``.)"""
    rows = _rows_of(grid)
    _joined(rows)
    return rows


def _flatten(grid: Any, max_cells: int | None) -> tuple[int, int, str]:
    """(height, width, the rows joined) after the checks that need no per-cell work: type,
    emptiness, size and shape."""
    rows = _rows_of(grid)
    if not rows:
        raise EmptyGridError("grid is empty (no rows)")
    joined = _joined(rows)
    _check_size(len(joined), max_cells)
    _check_shape(rows)
    return len(rows), len(rows[0]), joined


def _rows_of(grid: Any) -> list:
    """The rows of a grid given as one string or as a list (whatever the rows are)."""
    if isinstance(grid, str):
        text = grid[:-1] if grid.endswith("\n") else grid
        if not text:
            raise EmptyGridError("grid is empty")
        return text.split("\n")
    if isinstance(grid, (list, tuple)):
        return list(grid)
    raise NotAGridError(f"grid must be a string or a list of strings, not {_type_name(grid)}")


def _joined(rows: list) -> str:
    """The rows joined; NotAGridError naming the first row that is not a string."""
    try:
        return "".join(rows)
    except TypeError:  # some row is not a string: name it
        r = next(r for r, row in enumerate(rows) if not isinstance(row, str))
        raise NotAGridError(f"row {r + 1} is not a string but {_type_name(rows[r])}") from None


def _check_size(cells: int, max_cells: int | None) -> None:
    """GridTooLargeError when the grid has more cells than ``max_cells``."""
    if max_cells is not None and cells > max_cells:
        raise GridTooLargeError(f"grid has {cells} cells, more than the limit of {max_cells}", cells, max_cells)


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


def _drop_non_ascii(kept: list, shapes: list, texts: list, errors: list) -> tuple[list, list, list]:
    """Reject the (rare) grids with non-ASCII characters one by one, so the rest encode in bulk."""
    still = [k for k, text in enumerate(texts) if text.isascii()]
    for k in sorted(set(range(len(texts))) - set(still)):
        errors[kept[k]] = _first_bad_character(texts[k], shapes[k][1])
    return [kept[k] for k in still], [shapes[k] for k in still], [texts[k] for k in still]


def _first_bad_character(text: str, width: int) -> BadCharacterError:
    """The error for the first character outside the alphabet, scanning row by row."""
    for i, char in enumerate(text):
        if not (char.isascii() and CODE_OF_BYTE[ord(char)] != _BAD):
            r, c = divmod(i, width)
            return BadCharacterError(
                f"row {r + 1}, column {c + 1}: character {char!r} (U+{ord(char):04X}) is not allowed "
                f"(allowed: {_ALLOWED_TEXT})"
            )
    raise AssertionError("no bad character")  # only called on grids known to have one


def _type_name(value: Any) -> str:
    """A JSON-ish name of a value's type, for messages."""
    names = {
        type(None): "null",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        dict: "an object",
        list: "a list",
        tuple: "a list",
        str: "a string",
        bytes: "binary data",
        bytearray: "binary data",
    }
    if type(value) in names:
        return names[type(value)]
    return "a decimal number" if isinstance(value, decimal.Decimal) else f"a value of type {type(value).__name__}"


# ------------------------------------------------------------------------------- per-cell checks


def _check_cells(batch: ParsedBatch, texts: list[str], start_count: np.ndarray, first_bad: np.ndarray) -> ParsedBatch:
    """Reject dungeons with a disallowed character or not exactly one start; fill in the starts.

    start_count: int64[m], starts per dungeon; first_bad: int64[m], first bad cell or -1.
    """
    for k in np.flatnonzero((first_bad >= 0) | (start_count != 1)):
        width = int(batch.widths[k])
        error = _first_bad_character(texts[k], width) if first_bad[k] >= 0 else _start_error(texts[k], width)
        batch.errors[batch.index[k]] = error
    good = np.flatnonzero((first_bad < 0) & (start_count == 1))
    return batch if len(good) == len(batch) else batch.take(good)


def _start_error(text: str, width: int) -> StartError:
    """The error for a grid without exactly one ``@``."""
    found = [divmod(i, int(width)) for i, char in enumerate(text) if char == "@"]
    if not found:
        return StartError("no start '@' (exactly one is needed)")
    where = " and ".join(f"row {r + 1}, column {c + 1}" for r, c in found[:2])
    more = f" and {len(found) - 2} more" if len(found) > 2 else ""
    return StartError(f"{len(found)} starts '@' (at {where}{more}); exactly one is needed")
