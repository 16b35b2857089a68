"""Fixed creature counts by the finite-lattice (transfer-matrix) method.

docs/palago_transfer.md explains the method in full; in short:

A fixed creature is a set S of blue vertices (i, j) plus, for each up-triangle ("hex") with all
three corners in S, a choice of one of its three edges (the tile's body), such that S is connected
by the bodies (the S-S edge of a hex with two corners in S, the chosen edge of a hex with three),
and its size is the number of hexes touching S.

For each height H (S occupies rows 0..H-1 and touches both) the vertices are decided column by
column (c = 0, 1, ...), bottom to top.  Deciding vertex (c, j) completes hex (c-1, j), whose
corners are (c-1, j), (c-1, j+1) and (c, j); so the frontier is one vertex per row: rows < j hold
column c, rows >= j still hold column c-1.  A state is the frontier's labels (0: not in S, else a
component label, renumbered by first appearance) plus two flags (row 0 / row H-1 touched); its
value is a polynomial in the size, truncated at N and cut further by a lower bound on the hexes
still to come.  Each creature is generated exactly once, at the unique height and column offset
where it touches rows 0..H-1 and starts in column 0; a creature is complete when its last
component leaves the frontier with no other S vertex on it.  Reflection in i = j swaps width and
height, so only widths W >= H are counted (twice when W > H).

This module holds a plain-Python reference implementation (``count_height_reference``) and the
numba kernel the job uses (``count_height``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["max_height", "count_height_reference", "fixed_counts_reference"]


def max_height(max_n: int) -> int:
    """The largest height worth sweeping: a creature spanning d steps along a lattice axis has at
    least 2 d + 3 hexes, and only boxes with W >= H are swept."""
    return max(0, (max_n - 1) // 2)


def _relabel(labels):
    mapping = {}
    out = []
    for x in labels:
        if x == 0:
            out.append(0)
        else:
            if x not in mapping:
                mapping[x] = len(mapping) + 1
            out.append(mapping[x])
    return tuple(out)


def _merge(labels, a, b):
    if a == b:
        return labels
    return [a if x == b else x for x in labels]


def _lower_bound(f, c, j, height, flags):
    """Hexes not yet counted that any completion of this state must still touch (after vertex
    (c, j) was decided; f[:j+1] is column c, f[j+1:] column c-1)."""
    lb = 0
    # hexes (c-1, j') for j' > j: corners (c-1, j'), (c-1, j'+1) (old column) and (c, j')
    for jj in range(j + 1, height):
        if f[jj] or (jj + 1 < height and f[jj + 1]):
            lb += 1
    # hexes (c, j') for j' = -1..j: corners (c, j'), (c, j'+1) (new column), (c+1, j')
    for jj in range(-1, j + 1):
        if (jj >= 0 and f[jj]) or (jj + 1 <= j and f[jj + 1]):
            lb += 1
    # Each further column c' > c that the creature must reach adds at least two hexes (c', *).
    more = max(0, height - 1 - c)  # W >= H: the creature must reach column H - 1
    if not flags & 1 or (not flags & 2 and j == height - 1):
        more = max(more, 1)  # a row still to reach can only be reached in a later column
    return lb + 2 * more


def count_height_reference(height: int, max_n: int, weights: bool = True) -> np.ndarray:
    """Fixed creatures of every size 0..max_n with height exactly ``height`` and width >= height,
    weighted 2 when the width exceeds the height (1 when equal) if ``weights``; plain Python."""
    n1 = max_n + 1
    states = {((0,) * height, 0): np.eye(1, n1, 0, dtype=np.int64)[0]}
    done = np.zeros(n1, dtype=np.int64)
    c = 0
    while states:
        for j in range(height):
            new_states: dict = {}
            for (f, flags), poly in states.items():
                a = f[j]
                b = f[j + 1] if j + 1 < height else 0
                base = 1 if (j == 0 and a) else 0  # hex (c-1, -1) touches S iff (c-1, 0) does
                options = []
                # vertex (c, j) out of S
                g = list(f)
                g[j] = 0
                add = base + (1 if (a or b) else 0)
                if a and b:
                    g = _merge(g, a, b)
                options.append((g, add, flags, a))
                # vertex (c, j) in S
                fl = flags | (1 if j == 0 else 0) | (2 if j == height - 1 else 0)
                fresh = height + 1
                add = base + 1
                if not a and not b:
                    g = list(f)
                    g[j] = fresh
                    options.append((g, add, fl, a))
                elif a and b:
                    for body in ("ab", "ac", "bc"):
                        g = list(f)
                        g[j] = fresh
                        if body == "ab":
                            g = _merge(g, a, b)
                        elif body == "ac":
                            g = _merge(g, a, fresh)
                        else:
                            g = _merge(g, b, fresh)
                        options.append((g, add, fl, a))
                else:
                    g = list(f)
                    g[j] = fresh
                    g = _merge(g, a or b, fresh)
                    options.append((g, add, fl, a))
                for g, add, fl, a_old in options:
                    shifted = np.zeros(n1, dtype=np.int64)
                    if add < n1:
                        shifted[add:] = poly[: n1 - add]
                    if not shifted.any():
                        continue
                    # Did the departing vertex (c-1, j) take the last frontier vertex of its component?
                    # (_merge keeps its first label, and a is always kept, so the class is still a.)
                    if a_old and a_old not in g:
                        if any(g):
                            continue  # a component closed while another remains: never connected
                        if fl == 3 and c >= height:
                            done += shifted * (2 if (weights and c > height) else 1)
                        continue
                    lb = _lower_bound(g, c, j, height, fl)
                    if lb > max_n:
                        continue
                    if lb:
                        shifted[max_n - lb + 1:] = 0
                        if not shifted.any():
                            continue
                    key = (_relabel(g), fl)
                    if c == 0 and j == height - 1 and not any(key[0]):
                        continue  # S must start in column 0
                    if key in new_states:
                        new_states[key] = new_states[key] + shifted
                    else:
                        new_states[key] = shifted
            states = new_states
        c += 1
    return done


def fixed_counts_reference(max_n: int) -> np.ndarray:
    """Fixed creature counts by size 0..max_n, summed over heights (plain Python; small n only)."""
    total = np.zeros(max_n + 1, dtype=np.int64)
    for height in range(1, max_height(max_n) + 1):
        total += count_height_reference(height, max_n)
    return total


count_height = count_height_reference  # replaced by the numba kernel below when it exists
