"""The catalogue's text columns (key, tiles, sum) for many creatures at once, in compiled code.

``catalogue_text`` turns a search's ``Catalogue`` (sorted tile codes per creature) into three
packed string columns, each a UTF-8 byte buffer plus offsets, without a Python object per
creature.  The text is byte for byte what the pure-Python functions write:

- key:   ``canonical.key_of(tiles)``, "q,r,t,regions" per tile, joined by spaces;
- tiles: ``json.dumps([list(tile) for tile in tiles])``;
- sum:   ``sums.encode(tiles)``, the same spanning tree and emission order (see sums.py), minus the
  check that the tiles are a closed creature: catalogue creatures are closed by construction.

The codes must be sorted and translation-normalised (as ``count_creatures`` writes them).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from .canonical import _CODE_WIDTH
from .model import DIRECTIONS
from .search import MAX_N, Catalogue
from .sums import LETTER_ROTATION, UP

__all__ = ["CatalogueText", "catalogue_text"]

_DIRECTIONS = np.array(DIRECTIONS, dtype=np.int64)
_LETTERS = np.zeros(3, dtype=np.uint8)  # rotation t -> the sum letter's byte
for _letter, _t in LETTER_ROTATION.items():
    _LETTERS[_t] = ord(_letter)
_ROOT_ROTATION = LETTER_ROTATION["a"]
_GRID = MAX_N + 2  # normalised hexes have 0 <= q, r < n; neighbours reach -1 and n

# Upper bounds on bytes per tile: "127,127,2,3 " (key), "[127, 127, 2, 3], " (tiles), "5a+-" (sum).
_KEY_BYTES = 12
_TILES_BYTES = 18
_SUM_BYTES = 4


@dataclass
class CatalogueText:
    """Three string columns, one row per catalogue creature: row k of a column is
    ``data[offsets[k]:offsets[k + 1]]`` (UTF-8, here plain ASCII)."""

    key_data: np.ndarray
    key_offsets: np.ndarray
    tiles_data: np.ndarray
    tiles_offsets: np.ndarray
    sum_data: np.ndarray
    sum_offsets: np.ndarray

    def column(self, name: str) -> list[str]:
        """One column as Python strings (for tests and small catalogues)."""
        data = getattr(self, f"{name}_data").tobytes()
        offsets = getattr(self, f"{name}_offsets")
        return [data[offsets[k] : offsets[k + 1]].decode() for k in range(len(offsets) - 1)]


def catalogue_text(catalogue: Catalogue) -> CatalogueText:
    """Key, tiles and sum text of every creature in ``catalogue``, packed (see the module doc)."""
    count = len(catalogue)
    total = int(catalogue.sizes.sum()) if count else 0
    if count and int(catalogue.sizes.max()) > MAX_N:
        raise ValueError(f"creatures of more than {MAX_N} tiles are not supported")
    key = np.zeros(_KEY_BYTES * total, dtype=np.uint8)
    tiles = np.zeros(_TILES_BYTES * total + 2 * count, dtype=np.uint8)
    sums = np.zeros(_SUM_BYTES * total, dtype=np.uint8)
    key_offsets = np.zeros(count + 1, dtype=np.int64)
    tiles_offsets = np.zeros(count + 1, dtype=np.int64)
    sum_offsets = np.zeros(count + 1, dtype=np.int64)
    as_int64 = lambda a: np.asarray(a, dtype=np.int64)  # noqa: E731  (no copy when it already is)
    creatures = (as_int64(catalogue.sizes), as_int64(catalogue.offsets), as_int64(catalogue.codes))
    _encode_all(creatures, _DIRECTIONS, _LETTERS, (key, key_offsets), (tiles, tiles_offsets), (sums, sum_offsets))
    return CatalogueText(
        key[: key_offsets[-1]],
        key_offsets,
        tiles[: tiles_offsets[-1]],
        tiles_offsets,
        sums[: sum_offsets[-1]],
        sum_offsets,
    )


@njit(cache=True, nogil=True, error_model="numpy")
def _write_int(buf, pos, value):
    """Write the decimal digits of 0 <= ``value`` < 1000 at buf[pos:]; return the position after."""
    if value < 10:
        buf[pos] = 48 + value
        return pos + 1
    if value < 100:
        buf[pos] = 48 + value // 10
        buf[pos + 1] = 48 + value % 10
        return pos + 2
    buf[pos] = 48 + value // 100
    buf[pos + 1] = 48 + (value // 10) % 10
    buf[pos + 2] = 48 + value % 10
    return pos + 3


@njit(cache=True, nogil=True, error_model="numpy")
def _encode_all(creatures, directions, letters, key_column, tiles_column, sum_column):  # noqa: C901 -- a compiled kernel: one body keeps its loops and locals in one frame
    """Write the three text columns of the catalogue creatures = (sizes, offsets, codes).  Each
    *_column is a (data, offsets) pair of a CatalogueText's column to fill, unpacked once here.
    directions, letters: _DIRECTIONS and _LETTERS."""
    sizes, offsets, codes = creatures
    key, key_offsets = key_column
    tiles, tiles_offsets = tiles_column
    sums, sum_offsets = sum_column
    count = sizes.shape[0]
    q = np.zeros(MAX_N, dtype=np.int64)
    r = np.zeros(MAX_N, dtype=np.int64)
    t = np.zeros(MAX_N, dtype=np.int64)
    grid = np.zeros(_GRID * _GRID, dtype=np.int64)  # 1 + tile index at (q + 1) * _GRID + r + 1, or 0
    claimed = np.zeros(MAX_N, dtype=np.uint8)
    n_children = np.zeros(MAX_N, dtype=np.int64)
    child = np.zeros((MAX_N, 6), dtype=np.int64)
    child_dir = np.zeros((MAX_N, 6), dtype=np.int64)
    order = np.zeros((MAX_N, 6), dtype=np.int64)  # a node's children in emission order (slots)
    todo = np.zeros(MAX_N, dtype=np.int64)
    frame_node = np.zeros(MAX_N, dtype=np.int64)
    frame_pointer = np.zeros(MAX_N, dtype=np.int64)
    frame_next = np.zeros(MAX_N, dtype=np.int64)
    kp = 0
    tp = 0
    sp = 0
    for k in range(count):
        n = sizes[k]
        base = offsets[k]
        for m in range(n):
            code = codes[base + m]
            low = code % 16
            position = code // 16
            q[m] = position % _CODE_WIDTH
            r[m] = position // _CODE_WIDTH
            t[m] = low // 4
            regions = low % 4
            # key: "q,r,t,regions" joined by spaces
            if m > 0:
                key[kp] = 32
                kp += 1
            kp = _write_int(key, kp, q[m])
            key[kp] = 44
            kp = _write_int(key, kp + 1, r[m])
            key[kp] = 44
            kp = _write_int(key, kp + 1, t[m])
            key[kp] = 44
            kp = _write_int(key, kp + 1, regions)
            # tiles: JSON [[q, r, t, regions], ...]
            if m == 0:
                tiles[tp] = 91
                tp += 1
            else:
                tiles[tp] = 44
                tiles[tp + 1] = 32
                tp += 2
            tiles[tp] = 91
            tp = _write_int(tiles, tp + 1, q[m])
            tiles[tp] = 44
            tiles[tp + 1] = 32
            tp = _write_int(tiles, tp + 2, r[m])
            tiles[tp] = 44
            tiles[tp + 1] = 32
            tp = _write_int(tiles, tp + 2, t[m])
            tiles[tp] = 44
            tiles[tp + 1] = 32
            tp = _write_int(tiles, tp + 2, regions)
            tiles[tp] = 93
            tp += 1
            grid[(q[m] + 1) * _GRID + r[m] + 1] = m + 1
            claimed[m] = 0
            n_children[m] = 0
        tiles[tp] = 93
        tp += 1
        key_offsets[k + 1] = kp
        tiles_offsets[k + 1] = tp

        # sum: the spanning tree of sums._spanning_tree, from the first tile (codes are in (r, q)
        # order) of the root rotation
        root = 0
        while t[root] != _ROOT_ROTATION:
            root += 1
        claimed[root] = 1
        todo[0] = root
        n_todo = 1
        while n_todo > 0:
            n_todo -= 1
            here = todo[n_todo]
            for d in range(6):
                other = grid[(q[here] + directions[d, 0] + 1) * _GRID + r[here] + directions[d, 1] + 1] - 1
                if other >= 0 and claimed[other] == 0:
                    claimed[other] = 1
                    child[here, n_children[here]] = other
                    child_dir[here, n_children[here]] = d
                    n_children[here] += 1
            for c in range(n_children[here] - 1, -1, -1):
                todo[n_todo] = child[here, c]
                n_todo += 1
        # ... emitted as sums._emit does: leaves before branches, then clockwise from the pointer
        depth = 0
        start = sp
        frame_node[0] = root
        frame_pointer[0] = UP
        frame_next[0] = 0
        _order_children(root, UP, n_children, child, child_dir, order)
        while depth >= 0:
            node = frame_node[depth]
            i = frame_next[depth]
            if i == n_children[node]:
                depth -= 1
                if depth >= 0:
                    sums[sp] = 45  # '-'
                    sp += 1
                continue
            frame_next[depth] = i + 1
            slot = order[node, i]
            d = child_dir[node, slot]
            kid = child[node, slot]
            sums[sp] = 48 + (frame_pointer[depth] - d) % 6
            sums[sp + 1] = letters[t[kid]]
            sp += 2
            frame_pointer[depth] = d
            if n_children[kid] > 0:
                sums[sp] = 43  # '+'
                sp += 1
                depth += 1
                frame_node[depth] = kid
                frame_pointer[depth] = (d + 3) % 6
                frame_next[depth] = 0
                _order_children(kid, (d + 3) % 6, n_children, child, child_dir, order)
        while sp > start and sums[sp - 1] == 45:  # trailing '-' are dropped
            sp -= 1
        sum_offsets[k + 1] = sp
        for m in range(n):
            grid[(q[m] + 1) * _GRID + r[m] + 1] = 0


@njit(cache=True, nogil=True, error_model="numpy")
def _order_children(node, pointer, n_children, child, child_dir, order):
    """order[node, :] = the slots of node's children sorted by (has children, clockwise turn from
    ``pointer``), as sums._emit sorts them."""
    count = n_children[node]
    for i in range(count):
        rank = (6 if n_children[child[node, i]] > 0 else 0) + (pointer - child_dir[node, i]) % 6
        m = i
        while m > 0:
            prev = order[node, m - 1]
            prev_rank = (6 if n_children[child[node, prev]] > 0 else 0) + (pointer - child_dir[node, prev]) % 6
            if prev_rank <= rank:
                break
            order[node, m] = prev
            m -= 1
        order[node, m] = i
