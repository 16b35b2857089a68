"""Symmetric creatures, counted by a search that only ever builds symmetric creatures.

This is a second, independent route to the stabiliser columns of the count table, and the piece
the transfer-matrix method needs to turn fixed counts into free counts.

The model (see docs/palago.md, "How the Palago search works"): blue vertices (i, j) form a triangular
lattice; hex (i, j) is the up-triangle (i, j), (i + 1, j), (i, j + 1) and its rotation puts the
tip on one of those corners, the body on the other two.  A creature is a set S of vertices, with
every hex around S placed, every body touching S inside S, and S connected through bodies.

The colour-preserving symmetries are D3 (120-degree rotations and three reflections) combined with
translations.  A creature class (up to translation) is fixed by a symmetry g exactly when some
affine image of g -- a reflection in an axis parallel to g's, or a rotation about some centre --
maps the creature onto itself.  So the counts we need are counts of creatures *placed* relative to
a fixed symmetry element:

- ``reflection[n]``: creatures mapped onto themselves by the reflection (i, j) -> (j, i) (the
  axes parallel to it are its conjugates by translations along (1, -1), so every class with such a
  symmetry has exactly one member with this axis), moved along the axis so that min j = 0;
- ``rotation[n]``: creatures mapped onto themselves by a 120-degree rotation about a vertex, the
  centre of an up-triangle or the centre of a down-triangle (the three kinds of 3-fold centre;
  each class has exactly one centre, its centroid, of exactly one kind);
- ``full[n]``: creatures mapped onto themselves by all six elements of D3 about those centres.

The search decides hexes like the direct search (the first undecided hex around the first
unfinished vertex of S), but a decision is applied to the whole orbit of the hex, and a vertex
joins S together with its whole orbit, so every state is symmetric.  Each creature is anchored at
its least vertex in (j, i) order; nothing below the anchor may join.  Because the images of a
vertex join without a body path to it, a finished S may be a union of disjoint images of one
connected piece: a breadth-first search over bodies keeps only connected S.  The number of hexes
around S bounds the size from below, exactly as in the direct search.

Burnside over D3 (two rotations, three conjugate reflections) gives, with A_ref = reflection[n],
A_rot = rotation[n], A_full = full[n] and f_s the free creatures with a symmetry group of order s:

    free = (fixed + 2 A_rot + 3 A_ref) / 6
    f_6 = A_full,   f_3 = (A_rot - A_full) / 2,   f_2 = A_ref - A_full,
    f_1 = (fixed - 3 f_2 - 2 f_3 - f_6) / 6.

(A class with symmetry group of order 2 has one member fixed by a given reflection, order 3 has
two members fixed by the rotation, order 6 has one member fixed by everything.)
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import numpy as np
from numba import njit

__all__ = [
    "SymmetricCounts",
    "SymmetricPart",
    "symmetric_counts",
    "symmetric_parts",
    "count_symmetric_part",
    "stabiliser_columns",
    "GROUPS",
    "KINDS",
]

# Affine maps (i, j) -> (a i + b j + e, c i + d j + f) as (a, b, c, d, e, f).
_SWAP = (0, 1, 1, 0, 0, 0)  # reflection in the line i = j (through a vertex, and
# through the centres of up-triangle (0, 0) and of
# down-triangle (1, 0), (0, 1), (1, 1))
_ROT_VERTEX = (0, 1, -1, -1, 0, 0)  # 120 degrees about vertex (0, 0)
_ROT_UP = (-1, -1, 1, 0, 1, 0)  # 120 degrees about the centre of up-triangle (0, 0)
_ROT_DOWN = (0, 1, -1, -1, 0, 2)  # 120 degrees about the centre of down-triangle (1, 0), (0, 1), (1, 1)
_Affine = tuple[int, int, int, int, int, int]

GROUPS: dict[str, list[tuple[_Affine, ...]]] = {  # each group by its generators
    "reflection": [(_SWAP,)],
    "rotation": [(_ROT_VERTEX,), (_ROT_UP,), (_ROT_DOWN,)],
    "full": [(_ROT_VERTEX, _SWAP), (_ROT_UP, _SWAP), (_ROT_DOWN, _SWAP)],
}

# Corner c of hex (i, j) is vertex (i, j) + _CORNERS[c]; rotation r puts the tip on corner r
# (the same convention as search.py: offsets 1, width, 0).
_CORNERS = ((1, 0), (0, 1), (0, 0))


def _apply(m, i, j):
    a, b, c, d, e, f = m
    return a * i + b * j + e, c * i + d * j + f


def _compose(m2, m1):
    """m2 after m1."""
    a1, b1, c1, d1, e1, f1 = m1
    a2, b2, c2, d2, e2, f2 = m2
    return (
        a2 * a1 + b2 * c1,
        a2 * b1 + b2 * d1,
        c2 * a1 + d2 * c1,
        c2 * b1 + d2 * d1,
        a2 * e1 + b2 * f1 + e2,
        c2 * e1 + d2 * f1 + f2,
    )


def _closure(generators) -> list[tuple]:
    identity = (1, 0, 0, 1, 0, 0)
    group = [identity]
    frontier = [identity]
    while frontier:
        new = []
        for m in frontier:
            for g in generators:
                h = _compose(g, m)
                if h not in group:
                    group.append(h)
                    new.append(h)
        frontier = new
    return group


def _hex_image(m):
    """(base offset of the image hex relative to m's image of (0, 0)..., corner map) for the linear
    part of m: the image of hex (0, 0) is hex base, corner c going to corner cmap[c]."""
    points = [_apply(m, *p) for p in _CORNERS]
    for base in points:
        rel = sorted((x - base[0], y - base[1]) for x, y in points)
        if rel == sorted(_CORNERS):
            cmap = [_CORNERS.index((x - base[0], y - base[1])) for x, y in points]
            origin = _apply(m, 0, 0)
            return (base[0] - origin[0], base[1] - origin[1]), cmap
    raise AssertionError(f"{m} does not map up-triangles to up-triangles")


@dataclass(frozen=True)
class _Grid:
    max_n: int

    @property
    def radius(self) -> int:
        return 2 * self.max_n + 4

    @property
    def width(self) -> int:
        return 2 * self.radius + 1

    def index(self, i, j):
        return (j + self.radius) * self.width + (i + self.radius)


def _tables(grid: _Grid, group):
    """Vertex images, hex images and corner maps of every group element on the grid (-1 off it)."""
    w, rad = grid.width, grid.radius
    cells = w * w
    idx = np.arange(cells, dtype=np.int64)
    i = idx % w - rad
    j = idx // w - rad
    inside = (np.abs(i) <= rad - 2) & (np.abs(j) <= rad - 2)
    vimg = np.full((len(group), cells), -1, dtype=np.int64)
    timg = np.full((len(group), cells), -1, dtype=np.int64)
    cmap = np.zeros((len(group), 3), dtype=np.int64)
    for k, m in enumerate(group):
        a, b, c, d, e, f = m
        ii = a * i + b * j + e
        jj = c * i + d * j + f
        ok = inside & (np.abs(ii) <= rad - 2) & (np.abs(jj) <= rad - 2)
        vimg[k, ok] = grid.index(ii[ok], jj[ok])
        (di, dj), corner_map = _hex_image(m)
        ti, tj = ii + di, jj + dj
        ok_t = inside & (np.abs(ti) <= rad - 2) & (np.abs(tj) <= rad - 2)
        timg[k, ok_t] = grid.index(ti[ok_t], tj[ok_t])
        cmap[k] = corner_map
    return vimg, timg, cmap


# The search's arguments, grouped; _symmetric_search unpacks each group once on entry (an array read
# from a tuple in the search loop would be reference-counted on every read: see search.py).
_Tables = namedtuple("_Tables", ["vimg", "timg", "cmap", "off"])
# From _tables: vimg, timg int64[group size, cells] the image of every vertex and hex under each
# element (-1 off the grid), cmap int64[group size, 3] where each element sends a hex's corners;
# off int64[3]: corner c of hex t is vertex t + off[c].
_Work = namedtuple("_Work", ["in_s", "rot", "req", "s_list", "trail", "stack", "mark", "queue"])
# Grid-sized work arrays: in_s uint8 (vertices in S), rot int8 (each hex's rotation, -1 undecided),
# req int16 (how many vertices of S each hex touches), s_list int64 (S in joining order), trail
# int64 (hexes decided, in order), mark uint8 and queue int64 (the connectivity check's); in_s,
# req and mark must be zero and rot -1, and are left so; stack: int64[3 max_n + 8, 6] frames.


@njit(cache=True, nogil=True)
def _join(x, anchor, vimg, in_s, s_list, s_len, req, tri, off):
    """x and its whole orbit join S.  Returns the new |S| and hex count, or -1 when an image lies
    below the anchor (or off the grid)."""
    ng = vimg.shape[0]
    for k in range(ng):
        if vimg[k, x] < anchor:
            return s_len, -1
    for k in range(ng):
        y = vimg[k, x]
        if in_s[y] == 0:
            in_s[y] = 1
            s_list[s_len] = y
            s_len += 1
            for c in range(3):
                t = y - off[c]
                if req[t] == 0:
                    tri[0] += 1
                req[t] += 1
    return s_len, tri[0]


@njit(cache=True, nogil=True)
def _pop(keep, in_s, s_list, s_len, req, tri, off):
    while s_len > keep:
        s_len -= 1
        y = s_list[s_len]
        in_s[y] = 0
        for c in range(3):
            t = y - off[c]
            req[t] -= 1
            if req[t] == 0:
                tri[0] -= 1
    return s_len


@njit(cache=True, nogil=True)
def _connected(in_s, s_list, s_len, rot, off, mark, queue):
    x0 = s_list[0]
    mark[x0] = 1
    queue[0] = x0
    qh = 0
    qt = 1
    while qh < qt:
        x = queue[qh]
        qh += 1
        for c in range(3):
            tx = x - off[c]
            rx = rot[tx]
            if rx != c:
                y = tx + off[3 - rx - c]
                if in_s[y] and mark[y] == 0:
                    mark[y] = 1
                    queue[qt] = y
                    qt += 1
    for q in range(qt):
        mark[queue[q]] = 0
    return qt == s_len


@njit(cache=True, nogil=True)
def _symmetric_search(max_n, anchor, tables, work, counts, nodes):  # noqa: C901 -- a compiled kernel: one body keeps its loops and locals in one frame
    """Count the connected symmetric creatures whose least vertex is ``anchor`` into counts[n],
    and the rotation choices tried into nodes[0].  tables, work: a _Tables and a _Work (see each),
    unpacked here once.

    Work arrays in_s, req (zero), rot (-1) are left as they were found."""
    vimg, timg, cmap, off = tables
    in_s, rot, req, s_list, trail, stack, mark, queue = work
    ng = vimg.shape[0]
    tri = np.zeros(1, dtype=np.int64)
    s_len, t_len = _join(anchor, anchor, vimg, in_s, s_list, 0, req, tri, off)
    if t_len < 0 or t_len > max_n:
        _pop(0, in_s, s_list, s_len, req, tri, off)
        return
    head = 0
    trail_len = 0
    depth = 0
    descend = True
    while True:
        if descend:
            descend = False
            t_next = -1
            corner = -1
            while head < s_len:
                v = s_list[head]
                for c in range(3):
                    t = v - off[c]
                    if rot[t] < 0:
                        t_next = t
                        corner = c
                        break
                if t_next >= 0:
                    break
                head += 1
            if t_next < 0:
                if _connected(in_s, s_list, s_len, rot, off, mark, queue):
                    counts[tri[0]] += 1
                if depth == 0:
                    break
                depth -= 1
            else:
                stack[depth, 0] = t_next
                stack[depth, 1] = corner
                stack[depth, 2] = -1
                stack[depth, 3] = s_len
                stack[depth, 4] = head
                stack[depth, 5] = trail_len

        # Undo the frame's previous attempt, then try its next rotation.
        t = stack[depth, 0]
        s_len = _pop(stack[depth, 3], in_s, s_list, s_len, req, tri, off)
        while trail_len > stack[depth, 5]:
            trail_len -= 1
            rot[trail[trail_len]] = -1
        head = stack[depth, 4]
        r = stack[depth, 2] + 1
        if r >= 3:
            if depth == 0:
                break
            depth -= 1
            continue
        stack[depth, 2] = r
        nodes[0] += 1

        ok = True
        # The decision applies to the hex's whole orbit.
        first = trail_len
        for k in range(ng):
            t2 = timg[k, t]
            r2 = cmap[k, r]
            if t2 < 0:
                ok = False
                break
            if rot[t2] < 0:
                rot[t2] = r2
                trail[trail_len] = t2
                trail_len += 1
            elif rot[t2] != r2:
                ok = False
                break
        p = s_len
        # A body with one end in S pulls in the other end (with its orbit).
        if ok:
            for q in range(first, trail_len):
                t2 = trail[q]
                r2 = rot[t2]
                b1 = t2 + off[(r2 + 1) % 3]
                b2 = t2 + off[(r2 + 2) % 3]
                if in_s[b1] != in_s[b2]:
                    s_len, t_len = _join(b2 if in_s[b1] else b1, anchor, vimg, in_s, s_list, s_len, req, tri, off)
                    if t_len < 0 or t_len > max_n:
                        ok = False
                        break
        # Each vertex that joins pulls in the far ends of bodies already decided around it.
        while ok and p < s_len:
            x = s_list[p]
            p += 1
            for c in range(3):
                tx = x - off[c]
                rx = rot[tx]
                if rx >= 0 and rx != c:
                    y = tx + off[3 - rx - c]
                    if in_s[y] == 0:
                        s_len, t_len = _join(y, anchor, vimg, in_s, s_list, s_len, req, tri, off)
                        if t_len < 0 or t_len > max_n:
                            ok = False
                            break
        if ok:
            depth += 1
            descend = True

    _pop(0, in_s, s_list, s_len, req, tri, off)
    while trail_len > 0:
        trail_len -= 1
        rot[trail[trail_len]] = -1


@dataclass
class SymmetricCounts:
    """Counts by size n (index n, 0..max_n) of creatures placed on a symmetry element (see the
    module docstring): reflection, rotation (all three kinds of centre) and full D3 symmetry;
    nodes: rotation choices the three searches tried."""

    reflection: np.ndarray
    rotation: np.ndarray
    full: np.ndarray
    nodes: int


def _count_group(max_n: int, generators, anchors: list[tuple[int, int]]) -> tuple[np.ndarray, int]:
    grid = _Grid(max_n)
    group = _closure(generators)
    vimg, timg, cmap = _tables(grid, group)
    tables = _Tables(vimg, timg, cmap, np.array([1, grid.width, 0], dtype=np.int64))
    cells = grid.width * grid.width
    work = _Work(
        in_s=np.zeros(cells, dtype=np.uint8),
        rot=np.full(cells, -1, dtype=np.int8),
        req=np.zeros(cells, dtype=np.int16),
        s_list=np.zeros(cells, dtype=np.int64),
        trail=np.zeros(cells, dtype=np.int64),
        stack=np.zeros((3 * max_n + 8, 6), dtype=np.int64),
        mark=np.zeros(cells, dtype=np.uint8),
        queue=np.zeros(cells, dtype=np.int64),
    )
    counts = np.zeros(max_n + 1 + 8 * len(group), dtype=np.int64)
    nodes = np.zeros(1, dtype=np.int64)
    for i, j in anchors:
        orbit = [_apply(m, i, j) for m in group]
        # A creature spanning d steps along a lattice axis has at least 2 d + 3 hexes.
        span = max(
            max(p[0] for p in orbit) - min(p[0] for p in orbit),
            max(p[1] for p in orbit) - min(p[1] for p in orbit),
            max(p[0] + p[1] for p in orbit) - min(p[0] + p[1] for p in orbit),
        )
        if 2 * span + 3 > max_n or any((q, p) < (j, i) for p, q in orbit):
            continue
        _symmetric_search(max_n, grid.index(i, j), tables, work, counts, nodes)
    return counts[: max_n + 1].copy(), int(nodes[0])


def _axis_anchors(max_n: int) -> list[tuple[int, int]]:
    """Reflection: moved along the axis so that min j = 0, the anchor is (i0, 0)."""
    return [(i0, 0) for i0 in range(0, max_n + 1)]


def _centre_anchors(max_n: int) -> list[tuple[int, int]]:
    """Rotations: the centroid is the centre, within max_n of every vertex."""
    return [(i, j) for j in range(-max_n - 1, 2) for i in range(-max_n - 2, max_n + 3)]


_ANCHORS = {"reflection": _axis_anchors, "rotation": _centre_anchors, "full": _centre_anchors}
KINDS = tuple(GROUPS)


@dataclass(frozen=True)
class SymmetricPart:
    """One independent piece of the symmetric counts: the anchors ``part``, ``part + parts``,
    ``part + 2 parts``... of symmetry group ``GROUPS[kind][group]`` (dealt round-robin, since the
    anchors near the centre hold most of the work)."""

    kind: str
    group: int
    part: int
    parts: int


def symmetric_parts(parts: int, rotation_parts: int = 1) -> list[SymmetricPart]:
    """The whole symmetric count in pieces: each reflection group's in ``parts``, each rotation
    group's in ``rotation_parts``, each full group's whole: the reflection holds most of the work,
    a full group little, and a rotation group's pieces come out nearly even
    (docs/benchmarks.md#palago-symmetric-shards)."""
    if parts < 1 or rotation_parts < 1:
        raise ValueError(f"parts must be at least 1, not {min(parts, rotation_parts)}")
    split = {"reflection": parts, "rotation": rotation_parts, "full": 1}
    return [
        SymmetricPart(kind, group, part, split[kind])
        for kind in KINDS
        for group in range(len(GROUPS[kind]))
        for part in range(split[kind])
    ]


def count_symmetric_part(max_n: int, piece: SymmetricPart) -> tuple[np.ndarray, int]:
    """(counts indexed by n = 0..max_n, search nodes) of one piece's creatures (``piece.kind``)."""
    if max_n < 1:
        raise ValueError(f"max_n must be at least 1, not {max_n}")
    anchors = _ANCHORS[piece.kind](max_n)[piece.part :: piece.parts]
    return _count_group(max_n, GROUPS[piece.kind][piece.group], anchors)


def symmetric_counts(max_n: int, parts: int = 1) -> SymmetricCounts:
    """Creatures of every size 1..max_n fixed by a reflection, a 120-degree rotation, and all of D3
    (counts indexed by n; see the module docstring for the placement conventions): the sum of
    ``count_symmetric_part`` over ``symmetric_parts(parts, parts)``, whatever ``parts`` is."""
    if max_n < 1:
        raise ValueError(f"max_n must be at least 1, not {max_n}")
    totals = {kind: np.zeros(max_n + 1, dtype=np.int64) for kind in KINDS}
    total_nodes = 0
    for piece in symmetric_parts(parts, parts):
        counts, nodes = count_symmetric_part(max_n, piece)
        totals[piece.kind] += counts
        total_nodes += nodes
    return SymmetricCounts(totals["reflection"], totals["rotation"], totals["full"], total_nodes)


def stabiliser_columns(fixed: np.ndarray, sym: SymmetricCounts) -> dict[str, np.ndarray]:
    """Free counts and free counts by stabiliser order from fixed counts and symmetric counts
    (Burnside over D3), indexed like ``fixed``.  Raises ValueError when a division is not exact,
    which would mean the inputs are inconsistent.  Exact at any size: an int64 ``fixed`` gives
    int64 columns, an object array of Python ints (past 2^63) gives Python ints."""
    exact = np.asarray(fixed).dtype == object
    fixed = np.asarray(fixed, dtype=object if exact else np.int64)
    a_ref, a_rot, a_full = (
        np.asarray(column[: len(fixed)], dtype=fixed.dtype) for column in (sym.reflection, sym.rotation, sym.full)
    )
    f6 = a_full
    f3, r3 = _divmod(a_rot - a_full, 2)
    f2 = a_ref - a_full
    f1, r1 = _divmod(fixed - 3 * f2 - 2 * f3 - f6, 6)
    free, r = _divmod(fixed + 2 * a_rot + 3 * a_ref, 6)
    if r3.any() or r1.any() or r.any() or (np.minimum.reduce([f1, f2, f3, f6]) < 0).any():
        raise ValueError("fixed and symmetric counts are inconsistent (Burnside divisions are not exact)")
    return {
        "free": free,
        "free_stabiliser_1": f1,
        "free_stabiliser_2": f2,
        "free_stabiliser_3": f3,
        "free_stabiliser_6": f6,
    }


def _divmod(x: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """np.divmod for int64 and object (Python int) arrays alike (np.divmod refuses objects)."""
    return x // d, x % d
