"""The numba kernels: breadth-first search over many dungeons given as flat cell-code arrays.

Each dungeon is copied into a scratch grid with a one-cell wall border (so neighbours never need a
bounds check), every cell gets a bitmask of the directions in which a monster stands next to it,
and a move p -> p + d is allowed when the target is open and no monster stands next to both p and
p + d, i.e. ``mask[p] & common[d] == 0``.  Scratch arrays are allocated once per call, sized for
the largest dungeon.

Cell codes (see ``parse``): 0 floor, 1 wall, 2 gold, 3 monster, 4 start.
"""

from __future__ import annotations

import numpy as np
from numba import njit

import batchenum.numba_cache  # noqa: F401  (kernels cached per user, by source: batchenum/numba_cache.py)

__all__ = ["DIRECTIONS", "COMMON", "solve_kernel", "parents_kernel"]

_WALL, _GOLD, _MONSTER = 1, 2, 3

# The eight moves, as (row step, column step); bit k of a mask stands for DIRECTIONS[k].
DIRECTIONS = tuple((dr, dc) for dr in (-1, 0, 1) for dc in (-1, 0, 1) if (dr, dc) != (0, 0))


def _common_masks() -> np.ndarray:
    """uint8[8]: for move k, the directions j (seen from p) whose cell also touches p + move k."""
    common = np.zeros(8, dtype=np.uint8)
    for k, (kr, kc) in enumerate(DIRECTIONS):
        for j, (jr, jc) in enumerate(DIRECTIONS):
            if j != k and max(abs(jr - kr), abs(jc - kc)) <= 1:
                common[k] |= 1 << j
    return common


COMMON = _common_masks()


@njit(cache=True, nogil=True)
def _prepare(codes, offset, height, width, cell, mask, delta):
    """Copy one dungeon into the padded scratch grid and mark the monsters' neighbours.

    codes:  uint8[*], all dungeons' cells; this one's start at ``offset``, row-major.
    cell:   uint8[>= (height + 2) * (width + 2)], filled with padded codes (border = wall).
    mask:   uint8[same], filled with bit j set when a monster stands at p + DIRECTIONS[j].
    delta:  int64[8], filled with the flat step of each direction in the padded grid.
    """
    pw = width + 2
    size = (height + 2) * pw
    k = 0
    for dr in range(-1, 2):
        for dc in range(-1, 2):
            if dr != 0 or dc != 0:
                delta[k] = dr * pw + dc
                k += 1
    cell[:size] = _WALL
    mask[:size] = 0
    for r in range(height):
        src = offset + r * width
        dst = (r + 1) * pw + 1
        for c in range(width):
            code = codes[src + c]
            cell[dst + c] = code
            if code == _MONSTER:
                for j in range(8):
                    mask[dst + c - delta[j]] |= np.uint8(1 << j)


@njit(cache=True, nogil=True)
def _search(start, gold_total, cell, mask, common, delta, queue, parent, record_parents):
    """Breadth-first search from padded cell ``start``; returns the number of gold cells reached.

    Stops early once all ``gold_total`` gold cells are reached (unless recording parents).  Visited
    cells are marked in ``cell`` (set to wall), so ``cell`` is consumed.  With ``record_parents``,
    ``parent[q]`` is set to the cell each reached cell q was first entered from.
    """
    cell[start] = _WALL
    queue[0] = start
    head, tail, gold = 0, 1, 0
    while head < tail:
        p = queue[head]
        head += 1
        blocked = mask[p]
        for k in range(8):
            q = p + delta[k]
            code = cell[q]
            if code == _WALL or code == _MONSTER or (blocked & common[k]) != 0:
                continue
            cell[q] = _WALL
            queue[tail] = q
            tail += 1
            if record_parents:
                parent[q] = p
            if code == _GOLD:
                gold += 1
                if gold == gold_total and not record_parents:
                    return gold
    return gold


@njit(cache=True, nogil=True)
def solve_kernel(codes, offsets, heights, widths, starts, gold_totals, common, gold_out):
    """Reachable gold of many dungeons.

    codes:       uint8[*], cell codes, row-major.
    offsets:     int64[n], dungeon i's cells are codes[offsets[i] : offsets[i] + heights[i] * widths[i]].
    heights:     int64[n]; widths: int64[n].
    starts:      int64[n], index of the start within its dungeon (row * width + column).
    gold_totals: int64[n], gold cells per dungeon (lets the search stop early).
    common:      uint8[8], COMMON.
    gold_out:    int64[n], filled with the answers.
    """
    n = heights.shape[0]
    biggest = 1
    for i in range(n):
        biggest = max(biggest, (heights[i] + 2) * (widths[i] + 2))
    cell = np.empty(biggest, dtype=np.uint8)
    mask = np.empty(biggest, dtype=np.uint8)
    queue = np.empty(biggest, dtype=np.int64)
    parent = np.empty(1, dtype=np.int64)
    delta = np.empty(8, dtype=np.int64)
    for i in range(n):
        if gold_totals[i] == 0:
            gold_out[i] = 0
            continue
        _prepare(codes, offsets[i], heights[i], widths[i], cell, mask, delta)
        pw = widths[i] + 2
        start = (starts[i] // widths[i] + 1) * pw + starts[i] % widths[i] + 1
        gold_out[i] = _search(start, gold_totals[i], cell, mask, common, delta, queue, parent, False)


@njit(cache=True, nogil=True)
def parents_kernel(codes, height, width, start, common):
    """Search tree of one dungeon: int64[height * width], the cell each reached cell was entered
    from (row * width + column), -1 for the start and for unreached cells.

    codes: uint8[height * width]; start: the start's index; common: COMMON.
    """
    pw = width + 2
    size = (height + 2) * pw
    cell = np.empty(size, dtype=np.uint8)
    mask = np.empty(size, dtype=np.uint8)
    queue = np.empty(size, dtype=np.int64)
    parent = np.full(size, -1, dtype=np.int64)
    delta = np.empty(8, dtype=np.int64)
    _prepare(codes, 0, height, width, cell, mask, delta)
    padded_start = (start // width + 1) * pw + start % width + 1
    _search(padded_start, 0, cell, mask, common, delta, queue, parent, True)
    out = np.full(height * width, -1, dtype=np.int64)
    for r in range(height):
        for c in range(width):
            p = parent[(r + 1) * pw + c + 1]
            if p >= 0:
                out[r * width + c] = (p // pw - 1) * width + p % pw - 1
    return out


@njit(cache=True, nogil=True)
def shape_kernel(row_offsets, grid_offsets, max_cells, heights, widths, starts_at, suspect):
    """The shape of many grids given as flat rows, in one pass (``parse.parse_flat``).

    row_offsets:  int64[rows + 1], row j is bytes row_offsets[j] .. row_offsets[j + 1] - 1.
    grid_offsets: int64[n + 1], grid i is rows grid_offsets[i] .. grid_offsets[i + 1] - 1.
    max_cells:    grids with more cells are suspect; negative for no limit.
    heights, widths, starts_at: int64[n], filled with each grid's rows, the byte length of its
                  first row (0 for no row), and where its first byte is (its first row's offset).
    suspect:      bool[n], set for a grid without rows, with an empty row, with rows of different
                  byte lengths, or with too many cells: these are checked the slow way.
    """
    last_row = row_offsets.shape[0] - 1
    for i in range(grid_offsets.shape[0] - 1):
        first, end = grid_offsets[i], grid_offsets[i + 1]
        height = end - first
        width = row_offsets[first + 1] - row_offsets[first] if height > 0 else 0
        bad = height == 0 or width == 0 or (0 <= max_cells < height * width)
        for j in range(first + 1, end):
            if row_offsets[j + 1] - row_offsets[j] != width:
                bad = True
                break
        heights[i] = height
        widths[i] = width
        starts_at[i] = row_offsets[min(first, last_row)]
        suspect[i] = bad


# classify_kernel counts monsters, gold and starts together: one table lookup per cell adds a packed
# increment (monsters in bits 0-20, gold in 21-41, starts in 42-62), so that no branch depends on
# the cell (random dungeons mispredict such branches often).  The fields are emptied into int64
# counts every _FLUSH cells, before any can overflow.
_FIELD_BITS = 21
_FIELD_MASK = (1 << _FIELD_BITS) - 1
_FLUSH = 1 << 20


def _packed_increments() -> np.ndarray:
    """uint64[256]: per code, 1 in the field it counts (monster, gold, start), else 0."""
    increments = np.zeros(256, dtype=np.uint64)
    for field, code in enumerate((_MONSTER, _GOLD, 4)):
        increments[code] = np.uint64(1) << np.uint64(_FIELD_BITS * field)
    return increments


PACKED_INCREMENTS = _packed_increments()


@njit(cache=True, nogil=True)
def classify_kernel(text, code_of_byte, offsets, sizes, codes_out, tally_out):
    """Translate characters to cell codes and tally each dungeon in one pass.

    text:         uint8[*], the ASCII characters of all dungeons, row-major, back to back.
    code_of_byte: uint8[256], cell code per byte, 255 for a character that is not allowed.
    offsets:      int64[n], dungeon i is text[offsets[i] : offsets[i] + sizes[i]].
    codes_out:    uint8[len(text)], filled with the cell codes.
    tally_out:    int64[n, 5], filled per dungeon with: monsters, gold, starts, the index of
                  the first character that is not allowed (-1 if none), the index of the last
                  start (-1 if none).  Codes 3 = monster, 2 = gold, 4 = start.
    """
    increments = PACKED_INCREMENTS
    for i in range(offsets.shape[0]):
        base = np.uint64(offsets[i])
        size = np.uint64(sizes[i])
        counts = np.zeros(3, dtype=np.int64)
        seen = np.uint8(0)  # OR of all codes: bit 7 is set only by a character not allowed
        start = np.int64(-1)
        done = np.uint64(0)
        while done < size:
            stop = min(size, done + np.uint64(_FLUSH))
            packed = np.uint64(0)
            for j in range(done, stop):
                code = code_of_byte[text[base + j]]
                codes_out[base + j] = code
                packed += increments[code]
                seen |= code
                start = np.int64(j) if code == 4 else start
            for field in range(3):
                counts[field] += np.int64((packed >> np.uint64(_FIELD_BITS * field)) & np.uint64(_FIELD_MASK))
            done = stop
        first_bad = np.int64(-1)
        if seen & 0x80:
            for j in range(size):
                if codes_out[base + j] == 255:
                    first_bad = np.int64(j)
                    break
        tally_out[i, 0] = counts[0]
        tally_out[i, 1] = counts[1]
        tally_out[i, 2] = counts[2]
        tally_out[i, 3] = first_bad
        tally_out[i, 4] = start


_PRIME = 0x100000001B3


@njit(cache=True, nogil=True)
def hash_kernel(codes, offsets, sizes, widths, out):
    """out[i] = a 64-bit hash of dungeon i's width and cell codes (equal dungeons, equal hashes).

    FNV-1a over 8 codes at a time (one multiply per word, not per code), with a shift-xor after each
    multiply so that high bits feed back into low ones; the last partial word is padded with zeros,
    which cannot merge dungeons of different sizes since equal hashes are compared byte by byte.
    """
    prime = np.uint64(_PRIME)
    for i in range(offsets.shape[0]):
        h = (np.uint64(14695981039346656037) ^ np.uint64(widths[i])) * prime
        base = np.uint64(offsets[i])
        size = np.uint64(sizes[i])
        whole = size - size % np.uint64(8)
        for j in range(np.uint64(0), whole, np.uint64(8)):
            word = np.uint64(0)
            for b in range(8):
                word |= np.uint64(codes[base + j + np.uint64(b)]) << np.uint64(8 * b)
            h = (h ^ word) * prime
            h ^= h >> np.uint64(29)
        word = np.uint64(0)
        for j in range(whole, size):
            word |= np.uint64(codes[base + j]) << np.uint64(8 * (j - whole))
        out[i] = ((h ^ word) * prime) ^ np.uint64(size)


@njit(cache=True, nogil=True)
def first_equal_kernel(codes, offsets, sizes, widths, order, hashes, out):
    """out[i] = the smallest index of a dungeon equal to dungeon i (its width and cell codes).

    order: the indices sorted by hash, ties by index (a stable sort), and ``hashes`` the hashes
    in that order.  Within a run of equal hashes each dungeon is compared byte by byte with the
    distinct dungeons found so far in the run, so a collision never merges two different ones.
    """
    n = order.shape[0]
    start = 0
    while start < n:
        stop = start + 1
        while stop < n and hashes[stop] == hashes[start]:
            stop += 1
        for a in range(start, stop):
            i = order[a]
            out[i] = i
            for b in range(start, a):
                k = order[b]
                if out[k] != k or widths[k] != widths[i] or sizes[k] != sizes[i]:
                    continue
                same = True
                for j in range(sizes[i]):
                    if codes[offsets[k] + j] != codes[offsets[i] + j]:
                        same = False
                        break
                if same:
                    out[i] = k
                    break
        start = stop
