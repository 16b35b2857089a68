"""Palago geometry, as docs/rules.md defines it, and the lattice the search runs on.

Hexes use axial coordinates (q, r): the centre of hex (q, r) sits at q*A + r*B with A = (1, 0) and
B = (1/2, sqrt(3)/2).  Directions, edges and corners are numbered counter-clockwise:

    direction k:  0: (1,-1)  1: (1,0)  2: (0,1)  3: (-1,1)  4: (-1,0)  5: (0,-1)
    edge k faces direction k (its outward normal points 300 + 60k degrees, mod 360)
    corner k lies between edge k and edge k+1 (at 330 + 60k degrees); blue when k is even

A tile in rotation t in {0, 1, 2} has its blue tip at corner c = 2t; its blue body touches the blue
corners c+2 and c+4.

**The search lattice.**  Every blue corner is shared by exactly three hexes, and every hex has
three blue corners, so blue corners and hexes are in one-to-one correspondence.  Blue corners form
a triangular lattice with vertices (i, j) at i*A + j*B; hex (q, r) is the "up" triangle with
vertices (q, r), (q+1, r), (q, r+1):

    corner 0 (blue, 330 deg) = vertex (q+1, r)     tip of rotation t = 0
    corner 2 (blue,  90 deg) = vertex (q, r+1)     tip of rotation t = 1
    corner 4 (blue, 210 deg) = vertex (q, r)       tip of rotation t = 2

So rotation t puts the tip at triangle corner ``TIP_OFFSET[t]`` and the body along the opposite
side.  Regions meet only at blue corners: the three hexes around a blue vertex v join their regions
at v, and a region is closed at v exactly when all three hexes are placed.  A creature is therefore
a set S of blue vertices, connected through tile bodies, such that every hex around S is placed and
every body with one end in S has both ends in S.  Its size is the number of hexes around S.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "DIRECTIONS",
    "TIP_OFFSET",
    "GROUP",
    "tile_corners",
    "transform_tile",
]

# Axial offsets of the six neighbours, direction k facing edge k.
DIRECTIONS = ((1, -1), (1, 0), (0, 1), (-1, 1), (-1, 0), (0, -1))

# Offset of the tip vertex from the hex's lower-left vertex, by rotation t.
TIP_OFFSET = ((1, 0), (0, 1), (0, 0))


def tile_corners(q: int, r: int) -> tuple[tuple[int, int], ...]:
    """The three blue vertices of hex (q, r), indexed by the rotation whose tip they are."""
    return tuple((q + dq, r + dr) for dq, dr in TIP_OFFSET)


def _group() -> np.ndarray:
    """The six colour-preserving symmetries (D3) as integer matrices acting on blue-vertex
    coordinates: identity, two 120-degree rotations, three reflections."""
    identity = np.array([[1, 0], [0, 1]])
    rot120 = np.array([[-1, -1], [1, 0]])  # (i, j) -> (-i-j, i)
    mirror = np.array([[-1, -1], [0, 1]])  # (i, j) -> (-i-j, j): the vertical axis
    rot240 = rot120 @ rot120
    return np.array([identity, rot120, rot240, mirror, mirror @ rot120, mirror @ rot240], dtype=np.int64)


GROUP = _group()


def transform_tile(g: np.ndarray, q: int, r: int, t: int) -> tuple[int, int, int]:
    """Image of tile (q, r, t) under the linear symmetry g (before translation)."""
    corners = [g @ np.array(c) for c in tile_corners(q, r)]
    qn = min(int(c[0]) for c in corners)
    rn = min(int(c[1]) for c in corners)
    tip = g @ np.array(tile_corners(q, r)[t])
    tn = TIP_OFFSET.index((int(tip[0]) - qn, int(tip[1]) - rn))
    return qn, rn, tn
