"""The anchored creature search: a numba kernel and the Python wrappers that drive it.

Every creature is generated exactly once up to translation.  It is anchored at its smallest blue
vertex in the order (j, i) -- the flat index of a row-major grid -- and nothing below the anchor may
join it.  The search keeps S (the creature's blue vertices, in the order they joined) and decides,
for the first undecided hex around the first unfinished vertex of S, which of its three rotations it
has.  A rotation either makes that vertex the hex's tip, or runs the hex's body from the vertex to
another blue vertex, which must then join S; a vertex joining S may in turn pull in the far ends of
bodies already decided around it.  Every hex around S must be placed, so the number of hexes around
S is a lower bound on the final size: a branch dies when it exceeds ``max_n``.  When every hex around
S is decided, S is a closed creature whose size is that number.  Each decision follows from the
creature itself, so no creature is reached twice and no global set of creatures is kept.

Free creatures are counted with no storage either: a fixed creature counts when it is the least of
its six D3 images under a total order that compares, first, the variances of its hexes' positions
along the three lattice axes (which any symmetry merely permutes), then the sorted, translation-
normalised list of tile codes.  The variances come from running sums kept by the search, so most
creatures are classified in O(1); the tile codes are built only when variances tie.

The tree splits by prefix: a shard is a list of rotation choices from the root.  ``frontier``
lists every node at a given depth plus the creatures completed above it; running all of them counts
every creature exactly once.
"""

from __future__ import annotations

from collections import namedtuple
from dataclasses import dataclass

import numpy as np
from numba import njit

from .model import GROUP

__all__ = ["MAX_N", "SearchCounts", "count_creatures", "frontier", "prefix_nodes", "SearchGrid"]

MAX_N = 40  # grid sizes and tile codes below are laid out for creatures up to this size

# Tile codes pack (row, column, rotation, regions) of a translation-normalised tile.
_CODE_WIDTH = 128  # > any creature's extent along one axis
_STABILISER_ORDERS = (1, 2, 3, 6)


@dataclass(frozen=True)
class SearchGrid:
    """The flat grid the kernel runs on, sized for creatures of up to ``max_n`` tiles.

    Vertex (i, j) has index j * width + i; hex (q, r) has the index of its vertex (q, r).  The anchor
    sits in row 1 (row 0 holds the hexes below it) with max_n + 2 columns of room on each side.
    """

    max_n: int

    @property
    def width(self) -> int:
        return 2 * self.max_n + 5

    @property
    def height(self) -> int:
        return self.max_n + 4

    @property
    def anchor(self) -> int:
        return 1 * self.width + self.max_n + 2

    @property
    def corner_offsets(self) -> np.ndarray:
        """Index offset of the tip vertex of rotation t from the hex's own index."""
        return np.array([1, self.width, 0], dtype=np.int64)


def _axis_permutations() -> np.ndarray:
    """perm[g][k]: the axis whose variance becomes axis k's under symmetry g.

    Axes are the three lattice functionals x = i, y = j, z = -(i + j); a symmetry maps each onto
    plus or minus another (and a translation adds a constant), so variances are permuted.
    """
    axes = np.array([[1, 0], [0, 1], [-1, -1]])
    perm = np.zeros((len(GROUP), 3), dtype=np.int64)
    for g, matrix in enumerate(GROUP):
        for k, axis in enumerate(axes):
            image = axis @ matrix
            matches = [m for m, a in enumerate(axes) if (image == a).all() or (image == -a).all()]
            assert len(matches) == 1
            perm[g, k] = matches[0]
    return perm


_PERM = _axis_permutations()
_MATRICES = GROUP.reshape(len(GROUP), 4).astype(np.int64)


@dataclass
class SearchCounts:
    """Counts by size n (index n, 0..max_n) from one or more searches.

    fixed[n]:          creatures up to translation
    free[n]:           creatures up to translation, rotation and reflection
    by_stabiliser[n]:  free creatures with stabiliser order 1, 2, 3, 6 (columns in that order)
    stabiliser_sum[n]: sum over fixed creatures of their stabiliser order (Burnside: = 6 * free)
    nodes[n]:          search nodes (rotation choices tried) that placed an n-th tile
    """

    fixed: np.ndarray
    free: np.ndarray
    by_stabiliser: np.ndarray
    stabiliser_sum: np.ndarray
    nodes: np.ndarray

    @classmethod
    def zeros(cls, max_n: int) -> SearchCounts:
        z = lambda: np.zeros(max_n + 1, dtype=np.int64)  # noqa: E731
        return cls(z(), z(), np.zeros((max_n + 1, 4), dtype=np.int64), z(), z())

    def __iadd__(self, other: SearchCounts) -> SearchCounts:
        for name in ("fixed", "free", "by_stabiliser", "stabiliser_sum", "nodes"):
            getattr(self, name)[...] += getattr(other, name)
        return self


@njit(cache=True, nogil=True, error_model="numpy")
def _raw_codes(g, n, grid, work, scratch, out):
    """Fill out[:n] with the translation-normalised codes of the image under symmetry g of the
    creature in work (a _Work: its first n required hexes and their rotations), in the order of
    tri_list (unsorted).  grid: a _Grid.  scratch: int64[n, 4] work space.  The cells' coordinates
    are relative to the anchor, which the normalisation cancels."""
    off, moments, matrices = grid.off, grid.moments, grid.matrices
    in_s, rot, tri_list = work.in_s, work.rot, work.tri_list
    a = matrices[g, 0]
    b = matrices[g, 1]
    c = matrices[g, 2]
    d = matrices[g, 3]
    min_i = 1 << 30
    min_j = 1 << 30
    for k in range(n):
        t = tri_list[k]
        i = moments[t, 0]
        j = moments[t, 1]
        r = rot[t]
        tip = t + off[r]
        flags = in_s[tip] + 2 * in_s[t + off[1 if r == 0 else (2 if r == 1 else 0)]]
        # images of the corners (i+1, j), (i, j+1), (i, j): rotations 0, 1, 2
        x0 = a * (i + 1) + b * j
        y0 = c * (i + 1) + d * j
        x1 = a * i + b * (j + 1)
        y1 = c * i + d * (j + 1)
        x2 = a * i + b * j
        y2 = c * i + d * j
        ll_i = min(x0, min(x1, x2))
        ll_j = min(y0, min(y1, y2))
        if r == 0:
            tx, ty = x0, y0
        elif r == 1:
            tx, ty = x1, y1
        else:
            tx, ty = x2, y2
        if tx == ll_i + 1:
            rn = 0
        elif ty == ll_j + 1:
            rn = 1
        else:
            rn = 2
        scratch[k, 0] = ll_i
        scratch[k, 1] = ll_j
        scratch[k, 2] = rn
        scratch[k, 3] = flags
        min_i = min(min_i, ll_i)
        min_j = min(min_j, ll_j)
    for k in range(n):
        code = ((scratch[k, 1] - min_j) * _CODE_WIDTH + (scratch[k, 0] - min_i)) * 16
        out[k] = code + scratch[k, 2] * 4 + scratch[k, 3]


@njit(cache=True, nogil=True, error_model="numpy")
def _tile_codes(g, n, grid, work, scratch, out):
    """Fill out[:n] with the sorted, translation-normalised codes of the creature's image under
    symmetry g (see _raw_codes)."""
    _raw_codes(g, n, grid, work, scratch, out)
    _insertion_sort(out, n)


@njit(cache=True, nogil=True, error_model="numpy")
def _insertion_sort(x, n):
    for k in range(1, n):
        code = x[k]
        m = k
        while m > 0 and x[m - 1] > code:
            x[m] = x[m - 1]
            m -= 1
        x[m] = code


@njit(cache=True, nogil=True, error_model="numpy")
def _compare_sorted(x, y, n):
    """Compare sorted(x[:n]) with sorted(y[:n]) lexicographically (-1, 0, 1).  The first few
    smallest codes are found by scans, which settle most asymmetric pairs; pairs still equal
    (symmetric creatures) are sorted in place and compared.  Codes of one creature are distinct."""
    previous = -1
    for _k in range(min(n, 2)):
        next_x = 1 << 62
        next_y = 1 << 62
        for m in range(n):
            v = x[m]
            if v > previous and v < next_x:
                next_x = v
            v = y[m]
            if v > previous and v < next_y:
                next_y = v
        if next_x != next_y:
            return -1 if next_x < next_y else 1
        previous = next_x
    _insertion_sort(x, n)
    _insertion_sort(y, n)
    for k in range(n):
        if x[k] != y[k]:
            return -1 if x[k] < y[k] else 1
    return 0


@njit(cache=True, nogil=True, error_model="numpy")
def _classify(var, n, grid, work, codes):
    """Return (is_canonical, stabiliser_order) for the complete creature of n tiles in work (a
    _Work) whose axis variances var (a 3-tuple) tie.  Tile codes are compared for the symmetries
    that map the variances onto themselves.  grid: a _Grid; codes: a _Codes."""
    perm = grid.perm
    scratch, own, image = codes
    canonical = True
    stabiliser = 1
    own_ready = False
    for g in range(1, 6):
        cmp = 0
        for k in range(3):
            vg = var[perm[g, k]]
            vk = var[k]
            if vg != vk:
                cmp = -1 if vg < vk else 1
                break
        if cmp == 0:
            if not own_ready:
                _raw_codes(0, n, grid, work, scratch, own)
                own_ready = True
            _raw_codes(g, n, grid, work, scratch, image)
            cmp = _compare_sorted(image, own, n)
        if cmp == 0:
            stabiliser += 1
        elif cmp < 0:
            canonical = False
    return canonical, stabiliser


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _push_vertex(x, in_s, s_list, s_len, req, tri_list, tri_len, sums, moments, off):
    """Add vertex x to S (at s_list[s_len]); the hexes around it become required.  Returns the new
    number of required hexes.  sums: running sums of the required hexes' coordinates
    (i, j, i*i, j*j, i*j), a row of the lookup table moments per hex."""
    in_s[np.uint64(x)] = 1
    s_list[np.uint64(s_len)] = x
    for c in range(3):
        t = x - off[c]
        req[np.uint64(t)] += 1
        if req[np.uint64(t)] == 1:
            tri_list[np.uint64(tri_len)] = t
            tri_len += 1
            for m in range(5):
                sums[m] += moments[np.uint64(t), m]
    return tri_len


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _pop_vertices(keep, in_s, s_list, s_len, req, tri_len, sums, moments, off):
    """Undo _push_vertex for s_list[keep:s_len], newest first.  Returns the new number of required
    hexes."""
    while s_len > keep:
        s_len -= 1
        x = s_list[np.uint64(s_len)]
        in_s[np.uint64(x)] = 0
        for c in range(2, -1, -1):
            t = x - off[c]
            req[np.uint64(t)] -= 1
            if req[np.uint64(t)] == 0:
                tri_len -= 1
                for m in range(5):
                    sums[m] -= moments[np.uint64(t), m]
    return tri_len


# The kernel's arguments, grouped.  _search unpacks each group once on entry: an array read from
# a tuple is reference-counted (atomic increments and decrements), which in the hot loop or in
# the helpers it calls per node costs several times the work, so _push_vertex and _pop_vertices
# take the arrays themselves.  _classify and _raw_codes, run only for finished creatures whose
# variances tie, take the groups: there it does not show (see docs/benchmarks.md#palago-search-kernel).
_Grid = namedtuple("_Grid", ["max_n", "width", "anchor", "off", "moments", "perm", "matrices"])
# max_n, width, anchor: ints (see SearchGrid); off: int64[3], the tip of rotation r is hex +
# off[r]; moments: int64[cells, 5] each cell's (i, j, i*i, j*j, i*j), its coordinates relative to
# the anchor and the products the running sums add (so the kernel never divides or multiplies for
# them); perm: int64[6, 3] (_PERM), matrices: int64[6, 4] (_MATRICES).
_Work = namedtuple("_Work", ["in_s", "rot", "req", "s_list", "tri_list", "stack"])
# Grid-sized work arrays in_s uint8, rot int8, req int8 (must be zero / -1 / zero, and are left
# so), s_list, tri_list int64; stack: int64[max_n + 2, 10] frames (see _search).
_Tally = namedtuple("_Tally", ["fixed", "free", "by_stab", "stab_sum", "nodes"])
# The arrays of a SearchCounts: int64[max_n + 1] (by_stab int64[max_n + 1, 4]).
_Cut = namedtuple("_Cut", ["depth", "paths", "lens", "count"])
# Frontier mode when depth >= 0: every node at that depth and every creature completed above it
# go to paths (int8[rows, depth]) and lens (int64[rows]); count (int64[1]) counts them, rows past
# the buffer included (those are dropped, so the caller can retry larger).  depth -1: count.
_Shelf = namedtuple("_Shelf", ["max_n", "codes", "meta", "count"])
_Codes = namedtuple("_Codes", ["scratch", "own", "image"])
# Work space for tile codes: scratch int64[max_n + 1, 4]; own, image int64[max_n + 1], the codes of
# the creature and of one of its images.
# The catalogue: canonical creatures of up to max_n tiles go to codes (int64, tile codes) and
# meta (int64[rows, 3]: n, stabiliser, offset) from the positions count = int64[3] [creatures,
# codes, overflowed], which are advanced.


@njit(cache=True, nogil=True, error_model="numpy")
def _search(grid, work, prefix, counts, cut, shelf):  # noqa: C901 -- a compiled kernel: one body keeps its loops and locals in one frame
    """Depth-first search from the anchor.  grid, work, counts, cut, shelf: a _Grid, _Work, _Tally,
    _Cut, _Shelf (see each).

    prefix: int8[...] forced rotation choices for the first decisions (a shard of the tree).
    cut.depth >= 0: instead of counting, record every node at that depth and every creature
    completed above it in the cut.  shelf.max_n: canonical creatures up to this size are appended
    to the catalogue buffers; when they are full, overflowed is set and the search goes on counting
    without appending.  (Growing the buffers in here instead slows the whole kernel down, even when
    nothing is collected: docs/benchmarks.md#palago-search-kernel.)
    stack: int64[max_n + 2, 10] frames (hex, bit mask of the rotations still to try, rotation being
    tried, saved |S|, saved head, for rotations 0, 1, 2 the vertex it pulls into S or -1, the
    frame's depth in decisions, the length of ``forced`` when it was made).  Forced decisions
    get no frame, so frames and depths differ below the prefix; in frontier mode they coincide.

    The three modes (count, count and catalogue, frontier) still share this one loop.  One kernel
    per mode, with the loop's steps as inlined helpers taking these groups, ran several times slower
    (the reference counting above; docs/benchmarks.md#palago-search-kernel); with helpers taking the
    arrays one by one, the shared steps need up to 17 arguments each.
    """
    max_n, width, anchor, off, moments = grid.max_n, grid.width, grid.anchor, grid.off, grid.moments
    in_s, rot, req, s_list, tri_list, stack = work
    fixed, free, by_stab, stab_sum, nodes = counts
    frontier_depth, paths, path_lens, path_count = cut
    catalogue_max_n, cat_codes, cat_meta, cat_count = shelf
    prefix_len = prefix.shape[0]
    # Hot-path indices are cast to np.uint64: numba then leaves out the negative-index wraparound
    # it adds to every signed index (docs/benchmarks.md#palago-search-kernel).  Never negative: cells
    # around S lie at or above row 0, S at or above the anchor's row 1.
    sums = np.zeros(5, dtype=np.int64)
    own = np.empty(max_n + 1, dtype=np.int64)
    codes = _Codes(np.empty((max_n + 1, 4), dtype=np.int64), own, np.empty(max_n + 1, dtype=np.int64))
    forced = np.empty(max_n + 1, dtype=np.int64)  # hexes set without a frame, in order
    forced_len = 0
    top = 0  # frames on the stack

    # The anchor joins S.
    tri_len = _push_vertex(anchor, in_s, s_list, 0, req, tri_list, 0, sums, moments, off)
    s_len = 1
    head = 0
    depth = 0
    # The anchor alone needs three hexes; below that nothing closes (and the stack holds max_n).
    descend = tri_len <= max_n
    if not descend:
        _pop_vertices(0, in_s, s_list, s_len, req, tri_len, sums, moments, off)
        return

    while True:
        if descend:
            # Decide hexes in head-scan order.  A hex with only one rotation that can succeed, and
            # that rotation pulling in no vertex, is forced: below the prefix (and when counting)
            # it is set at once and listed in `forced` instead of getting a frame; the frame above
            # undoes it.  Its three rotations still count as nodes.
            while True:
                t = -1
                if depth != frontier_depth:
                    while head < s_len:
                        v = s_list[np.uint64(head)]
                        for c in range(3):
                            tc = v - off[c]
                            if rot[np.uint64(tc)] < 0:
                                t = tc
                                break
                        if t >= 0:
                            break
                        head += 1
                if t < 0:
                    break
                # Which vertex each rotation pulls into S (-1: none), and which rotations can
                # succeed: a vertex may join only if it is not below the anchor and its hexes not
                # yet required fit in the room left.  The others are counted as tried but never
                # entered.  The corners of hex t are t + 1, t + width, t (the tips of rotations
                # 0, 1, 2); a rotation's body joins the other two, and pulls in the end not in S
                # when exactly one end is in S.
                a0 = t + 1
                a1 = t + width
                s0 = in_s[np.uint64(a0)]
                s1 = in_s[np.uint64(a1)]
                s2 = in_s[np.uint64(t)]
                room = max_n - tri_len
                mask = 0
                # rotation 0: body a1 - t
                j0 = -1 if s1 == s2 else (t if s1 else a1)
                if j0 < 0 or (
                    j0 >= anchor
                    and (req[np.uint64(j0 - 1)] == 0) + (req[np.uint64(j0 - width)] == 0) + (req[np.uint64(j0)] == 0)
                    <= room
                ):
                    mask |= 1
                # rotation 1: body t - a0
                j1 = -1 if s2 == s0 else (a0 if s2 else t)
                if j1 < 0 or (
                    j1 >= anchor
                    and (req[np.uint64(j1 - 1)] == 0) + (req[np.uint64(j1 - width)] == 0) + (req[np.uint64(j1)] == 0)
                    <= room
                ):
                    mask |= 2
                # rotation 2: body a0 - a1
                j2 = -1 if s0 == s1 else (a1 if s0 else a0)
                if j2 < 0 or (
                    j2 >= anchor
                    and (req[np.uint64(j2 - 1)] == 0) + (req[np.uint64(j2 - width)] == 0) + (req[np.uint64(j2)] == 0)
                    <= room
                ):
                    mask |= 4
                if depth < prefix_len:
                    mask &= 1 << prefix[depth]
                else:
                    nodes[np.uint64(depth + 1)] += 3  # every rotation counts as a node, as if tried one by one
                    if frontier_depth < 0:
                        r = -1
                        if mask == 1:
                            if j0 < 0:
                                r = 0
                        elif mask == 2:
                            if j1 < 0:
                                r = 1
                        elif mask == 4:
                            if j2 < 0:
                                r = 2
                        if r >= 0:
                            rot[np.uint64(t)] = r
                            forced[np.uint64(forced_len)] = t
                            forced_len += 1
                            depth += 1
                            continue
                stack[np.uint64(top), 0] = t
                stack[np.uint64(top), 1] = mask
                stack[np.uint64(top), 3] = s_len
                stack[np.uint64(top), 4] = head
                stack[np.uint64(top), 5] = j0
                stack[np.uint64(top), 6] = j1
                stack[np.uint64(top), 7] = j2
                stack[np.uint64(top), 8] = depth
                stack[np.uint64(top), 9] = forced_len
                top += 1
                break
            descend = False
            if t < 0:
                if frontier_depth >= 0:
                    k = path_count[0]
                    if k < paths.shape[0]:
                        for m in range(depth):
                            paths[k, m] = stack[m, 2]
                        path_lens[k] = depth
                    path_count[0] = k + 1
                else:
                    n = tri_len
                    fixed[n] += 1
                    # Variances of the hexes' positions along the three axes, which every
                    # symmetry permutes: when they differ, only the sorted order can be least.
                    v0 = n * sums[2] - sums[0] * sums[0]
                    v1 = n * sums[3] - sums[1] * sums[1]
                    v2 = n * (sums[2] + 2 * sums[4] + sums[3]) - (sums[0] + sums[1]) * (sums[0] + sums[1])
                    stabiliser = 1
                    if v0 != v1 and v1 != v2 and v0 != v2:
                        canonical = v0 < v1 and v1 < v2
                    else:
                        canonical, stabiliser = _classify((v0, v1, v2), n, grid, work, codes)
                    stab_sum[n] += stabiliser
                    if canonical:
                        free[n] += 1
                        column = 0 if stabiliser == 1 else (1 if stabiliser == 2 else (2 if stabiliser == 3 else 3))
                        by_stab[n, column] += 1
                        if n <= catalogue_max_n:
                            _tile_codes(0, n, grid, work, codes.scratch, own)
                            k = cat_count[0]
                            pos = cat_count[1]
                            if k < cat_meta.shape[0] and pos + n <= cat_codes.shape[0]:
                                for m in range(n):
                                    cat_codes[pos + m] = own[m]
                                cat_meta[k, 0] = n
                                cat_meta[k, 1] = stabiliser
                                cat_meta[k, 2] = pos
                                cat_count[0] = k + 1
                                cat_count[1] = pos + n
                            else:
                                cat_count[2] = 1
                if top == 0:
                    break
            # else fall through to try the new frame's first rotation

        # Try the next possible rotation of the top frame, undoing the previous attempt first.
        f = top - 1
        t = stack[np.uint64(f), 0]
        base = stack[np.uint64(f), 9]
        while forced_len > base:
            forced_len -= 1
            rot[forced[np.uint64(forced_len)]] = -1
        saved_len = stack[np.uint64(f), 3]
        tri_len = _pop_vertices(saved_len, in_s, s_list, s_len, req, tri_len, sums, moments, off)
        s_len = saved_len
        rot[np.uint64(t)] = -1
        head = stack[np.uint64(f), 4]

        mask = stack[np.uint64(f), 1]
        if mask == 0:
            top -= 1
            if top == 0:
                break
            continue
        r = 0 if mask & 1 else (1 if mask & 2 else 2)
        stack[np.uint64(f), 1] = mask & (mask - 1)
        stack[np.uint64(f), 2] = r
        rot[np.uint64(t)] = r
        join = stack[np.uint64(f), np.uint64(5 + r)]
        depth = stack[np.uint64(f), 8]

        ok = True
        if join >= 0:  # the frame checked that `join` may join
            p = s_len
            tri_len = _push_vertex(join, in_s, s_list, s_len, req, tri_list, tri_len, sums, moments, off)
            s_len += 1
            # Each vertex that joins pulls in the far ends of bodies already decided around it.
            while p < s_len and ok:
                if tri_len > max_n:
                    ok = False
                    break
                x = s_list[np.uint64(p)]
                p += 1
                for c in range(3):
                    tx = x - off[c]
                    rx = rot[np.uint64(tx)]
                    if rx >= 0 and rx != c:
                        y = tx + off[3 - rx - c]
                        if in_s[np.uint64(y)] == 0:
                            if y < anchor:
                                ok = False
                                break
                            tri_len = _push_vertex(y, in_s, s_list, s_len, req, tri_list, tri_len, sums, moments, off)
                            s_len += 1
            if tri_len > max_n:
                ok = False
        if ok:
            depth += 1
            descend = True

    # Leave the work arrays clean for the next call.
    while forced_len > 0:
        forced_len -= 1
        rot[forced[np.uint64(forced_len)]] = -1
    _pop_vertices(0, in_s, s_list, s_len, req, tri_len, sums, moments, off)
    for m in range(top):
        rot[stack[m, 0]] = -1


def _check_max_n(max_n: int) -> None:
    if not 1 <= max_n <= MAX_N:
        raise ValueError(f"max_n must be between 1 and {MAX_N}, not {max_n}")


class _Workspace:
    """Work arrays for one grid, reused across kernel calls."""

    def __init__(self, max_n: int):
        _check_max_n(max_n)
        layout = SearchGrid(max_n)
        cells = layout.width * layout.height
        # coordinates of every cell relative to the anchor, so the kernel never divides
        index = np.arange(cells, dtype=np.int64)
        i = index % layout.width - layout.anchor % layout.width
        j = index // layout.width - layout.anchor // layout.width
        moments = np.stack([i, j, i * i, j * j, i * j], axis=1)
        self.grid = _Grid(max_n, layout.width, layout.anchor, layout.corner_offsets, moments, _PERM, _MATRICES)
        self.work = _Work(
            in_s=np.zeros(cells, dtype=np.uint8),
            rot=np.full(cells, -1, dtype=np.int8),
            req=np.zeros(cells, dtype=np.int8),
            s_list=np.zeros(cells, dtype=np.int64),
            tri_list=np.zeros(cells, dtype=np.int64),
            stack=np.zeros((max_n + 2, 10), dtype=np.int64),
        )

    def run(self, prefix, counts, cut=None, shelf=None):
        """Search below ``prefix`` into ``counts`` (a SearchCounts); frontier mode when a _Cut with
        depth >= 0 is given, the catalogue kept in ``shelf`` when given."""
        c = counts
        _search(
            self.grid,
            self.work,
            prefix,
            _Tally(c.fixed, c.free, c.by_stabiliser, c.stabiliser_sum, c.nodes),
            cut or _NO_CUT,
            shelf or _NO_SHELF,
        )


_NO_CUT = _Cut(-1, np.zeros((0, 0), dtype=np.int8), np.zeros(0, dtype=np.int64), np.zeros(1, dtype=np.int64))
_NO_SHELF = _Shelf(0, np.zeros(0, dtype=np.int64), np.zeros((0, 3), dtype=np.int64), np.zeros(3, dtype=np.int64))


def frontier(max_n: int, depth: int, trunk: SearchCounts | None = None) -> list[tuple[int, ...]]:
    """Every node ``depth`` choices below the root, plus every creature completed above that
    depth, as tuples of rotation choices.  Searching below each of them once counts every creature
    of size <= max_n exactly once.  The nodes above the cut (the trunk) are added to
    ``trunk.nodes`` when given, so that trunk plus shards count exactly the unsplit search's nodes.

    >>> frontier(3, 0)
    [()]
    """
    _check_max_n(max_n)
    if depth < 0:
        raise ValueError(f"depth must be at least 0, not {depth}")
    workspace = _Workspace(max_n)
    capacity = 1024
    while True:
        paths = np.zeros((capacity, max(depth, 1)), dtype=np.int8)
        lens = np.zeros(capacity, dtype=np.int64)
        count = np.zeros(1, dtype=np.int64)
        counts = SearchCounts.zeros(max_n)
        workspace.run(np.zeros(0, dtype=np.int8), counts, cut=_Cut(depth, paths, lens, count))
        if count[0] <= capacity:
            if trunk is not None:
                trunk.nodes[...] += counts.nodes
            return [tuple(int(x) for x in paths[k, : lens[k]]) for k in range(count[0])]
        capacity = int(count[0])


def prefix_nodes(max_n: int, prefixes: list[tuple[int, ...]]) -> np.ndarray:
    """Search nodes below each prefix (the work of searching it), one kernel call per prefix on one
    workspace.  A prefix that is no node of this ``max_n``'s tree (one cut from a larger tree) must
    not be given: use ``frontier(max_n, depth)``."""
    _check_max_n(max_n)
    workspace = _Workspace(max_n)
    nodes = np.zeros(len(prefixes), dtype=np.int64)
    for k, prefix in enumerate(prefixes):
        counts = SearchCounts.zeros(max_n)
        workspace.run(np.asarray(prefix, dtype=np.int8), counts)
        nodes[k] = counts.nodes.sum()
    return nodes


@dataclass
class Catalogue:
    """Canonical creatures found by a search: sizes, stabiliser orders and tile codes.

    codes[offsets[k] : offsets[k] + sizes[k]] are creature k's sorted tile codes (see
    ``canonical.decode_code``)."""

    sizes: np.ndarray
    stabilisers: np.ndarray
    offsets: np.ndarray
    codes: np.ndarray

    def tile_codes(self, k: int) -> np.ndarray:
        return self.codes[self.offsets[k] : self.offsets[k] + self.sizes[k]]

    def __len__(self) -> int:
        return len(self.sizes)


def count_creatures(
    max_n: int,
    prefixes: list[tuple[int, ...]] | None = None,
    catalogue_max_n: int = 0,
) -> tuple[SearchCounts, Catalogue]:
    """Count creatures of every size up to ``max_n`` below each of ``prefixes`` (default: the
    whole tree), and collect the canonical creatures of size <= ``catalogue_max_n``.

    >>> counts, _ = count_creatures(6)
    >>> counts.free[1:].tolist()
    [0, 0, 1, 0, 1, 1]
    """
    _check_max_n(max_n)
    if prefixes is None:
        prefixes = [()]
    if catalogue_max_n < 0 or catalogue_max_n > max_n:
        raise ValueError(f"catalogue_max_n must be between 0 and max_n ({max_n}), not {catalogue_max_n}")
    workspace = _Workspace(max_n)
    counts = SearchCounts.zeros(max_n)
    # The catalogue of every prefix goes into one pair of buffers.  When they overflow, the
    # prefix's counts say exactly how much room it needs: grow them and search that prefix again.
    cat_codes = np.zeros(4096 * catalogue_max_n, dtype=np.int64)
    cat_meta = np.zeros((4096 if catalogue_max_n else 0, 3), dtype=np.int64)
    cat_count = np.zeros(3, dtype=np.int64)
    sizes = np.arange(catalogue_max_n + 1)
    for prefix in prefixes:
        prefix_array = np.asarray(prefix, dtype=np.int8)
        while True:
            start = cat_count[:2].copy()
            attempt = SearchCounts.zeros(max_n)
            workspace.run(prefix_array, attempt, shelf=_Shelf(catalogue_max_n, cat_codes, cat_meta, cat_count))
            if not cat_count[2]:
                break
            free = attempt.free[: catalogue_max_n + 1]
            cat_meta = _grown(cat_meta, int(start[0]), int(start[0] + free.sum()))
            cat_codes = _grown(cat_codes, int(start[1]), int(start[1] + (free * sizes).sum()))
            cat_count[:] = (start[0], start[1], 0)
        counts += attempt
    meta = cat_meta[: int(cat_count[0])]  # views into the buffers: no copy of a large catalogue
    return counts, Catalogue(meta[:, 0], meta[:, 1], meta[:, 2], cat_codes[: int(cat_count[1])])


def _grown(buffer: np.ndarray, used: int, needed: int) -> np.ndarray:
    """A buffer of at least ``needed`` rows (and twice the old size) holding ``buffer[:used]``."""
    grown = np.zeros((max(needed, 2 * len(buffer)), *buffer.shape[1:]), dtype=buffer.dtype)
    grown[:used] = buffer[:used]
    return grown
