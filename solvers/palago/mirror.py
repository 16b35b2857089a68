"""Creatures mapped onto themselves by the reflection (i, j) -> (j, i), by a transfer matrix on the
half-plane i >= j (docs/palago_transfer.md, "Mirror-symmetric creatures by a sweep").

A creature X fixed by the reflection is its half X+ = {(i, j) in X: i >= j} and the mirror image
of it.  Call hex (i, j) (the up-triangle (i, j), (i+1, j), (i, j+1)) *right* when i > j, *left*
when i < j (the mirror image of a right one) and an *axis* hex when i = j: its corners are the
axis vertex (i, i) and the mirror pair (i+1, i), (i, i+1), so it touches X when (i, i) or (i+1, i)
is in X, and when all three are, only the tip on (i, i) (the body joining the pair) is symmetric.
So the size of X is 2 (right hexes touching X+) + (axis hexes touching X), and X is connected when
X+ is connected through the bodies of right hexes and joined to its mirror image: X+ holds an axis
vertex, or an axis hex joins a pair (i+1, i), (i, i+1) by its body.

The sweep decides the vertices of X+ column by column, c = 0, 1, ..., rows 0..c from the bottom, as
the fixed-creature sweep (solvers/palago/transfer.py) does in a box; the frontier grows by one row
a column (the axis vertex (c, c) closes it).  Two flags say whether X+ has touched row 0 (so min
j = 0, the placement symmetric.py counts) and whether it is joined to its mirror image.  X+ may
start in any column.  Counts stay far below 2^53 for n <= 61 (about 10^11 at n = 61), so each
coefficient is an int64, with a float64 twin that exposes an overflow.

``reflection_counts`` is the numba kernel the job runs; ``reflection_counts_reference`` the same
sweep in plain Python; symmetric.py's search counts the same creatures one by one.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .transfer import _grown, _hash_key, _no_refcounts, _popcount, _probe, _rehashed, _rows_to_reach

__all__ = ["reflection_counts", "reflection_counts_reference", "MAX_N"]

MAX_N = 61  # the frontier of column (MAX_N - 1) // 2 = 30 fits the key (36 rows)
_BITS = 5
_PER_WORD = 12
_WORDS = 3
_LABEL = (1 << _BITS) - 1
_ROW0 = 1  # flags, in bits 60.. of the key's first word
_JOINED = 2


# ------------------------------------------------------------------------------- plain Python


def _relabel(labels) -> tuple:
    mapping: dict = {}
    return tuple(0 if x == 0 else mapping.setdefault(x, len(mapping) + 1) for x in labels)


def _merged(g: list, a: int, b: int) -> list:
    return g if a == b else [a if x == b else x for x in g]


def _options(f: list, c: int, j: int, flags: int) -> list[tuple[list, int, int, int]]:
    """The ways to decide vertex (c, j) from frontier f (rows 0..c-1): (new frontier, hexes added,
    flags, the label of the vertex (c-1, j) that leaves the frontier, 0 if none or not in S)."""
    fresh = max(f, default=0) + 1
    if j == c:  # the axis vertex (c, c) joins the frontier as row c; no hex completes
        return [(f + [0], 0, flags, 0), (f + [fresh], 0, flags | _JOINED | (_ROW0 if c == 0 else 0), 0)]
    a = f[j]
    row0 = _ROW0 if j == 0 else 0
    base = 2 if (j == 0 and a) else 0  # the right hex (c-1, -1) touches S iff (c-1, 0) is in it
    out = []
    if j == c - 1:  # the axis hex (c-1, c-1): A = (c-1, c-1), C = (c, c-1), B its mirror image
        out.append((f[:j] + [0], base + (1 if a else 0), flags, a))
        out.append((f[:j] + [fresh], base + 1, flags | row0 | _JOINED, a))  # body B-C, tip on A
        return out
    b = f[j + 1]
    g = f[:j] + [0] + f[j + 1 :]
    out.append((_merged(g, a, b) if (a and b) else g, base + (2 if (a or b) else 0), flags, a))
    g = f[:j] + [fresh] + f[j + 1 :]
    if a and b:
        for other in (None, a, b):  # bodies A-B (C the tip), A-C, B-C
            out.append((_merged(g, a, b) if other is None else _merged(g, other, fresh), base + 2, flags | row0, a))
    else:
        out.append((_merged(g, a or b, fresh) if (a or b) else g, base + 2, flags | row0, a))
    return out


def _reference_bound(g: list, c: int, j: int, flags: int) -> int:
    """Hexes every completion still adds: 2 for each pending right hex and 1 for the pending axis
    hex at a frontier S vertex, and 2 for each new vertex needed on the rows below, above and
    between the frontier's S rows (to reach row 0, the axis, and across gaps no component spans)."""
    lb = 0
    column_c = j + 1  # rows 0..j hold column c, rows j+1..c-1 column c-1
    for jj in range(-1, min(j + 1, c)):  # right hexes (c, jj): corners (c, jj), (c, jj + 1)
        if (jj >= 0 and g[jj]) or (jj + 1 < column_c and g[jj + 1]):
            lb += 2
    for jj in range(j + 1, c - 1):  # right hexes (c-1, jj): corners (c-1, jj), (c-1, jj + 1)
        if g[jj] or g[jj + 1]:
            lb += 2
    if j == c and g[c]:
        lb += 1  # the axis hex (c, c)
    if j < c - 1 and g[c - 1]:
        lb += 1  # the axis hex (c-1, c-1), completed at step (c, c-1)
    rows = [k for k, x in enumerate(g) if x]
    lowest, highest = rows[0], rows[-1]
    need = 0 if flags & _ROW0 else lowest
    if not flags & _JOINED:
        # the nearest vertex that joins X+ to its mirror image: (c, c-1), (c, c) or (c', >= c'-1)
        need += max(0, (c - 1 if j < c - 1 else c) - highest)
    spans: dict[int, tuple[int, int]] = {}  # component label -> its lowest and highest row
    for k, x in enumerate(g):
        if x:
            spans[x] = (spans.get(x, (k, k))[0], k)
    need += sum(1 for k in range(lowest + 1, highest) if not g[k] and not any(lo < k < hi for lo, hi in spans.values()))
    return lb + 2 * need


def reflection_counts_reference(max_n: int) -> np.ndarray:
    """Creatures of every size 0..max_n fixed by (i, j) -> (j, i) with min j = 0 (plain Python)."""
    n1 = max_n + 1
    states: dict = {((), 0): np.eye(1, n1, 0, dtype=np.int64)[0]}
    done = np.zeros(n1, dtype=np.int64)
    c = 0
    while states:
        for j in range(c + 1):
            new: dict = {}
            for (f, flags), poly in states.items():
                for g, add, fl, leaving in _options(list(f), c, j, flags):
                    shifted = np.zeros(n1, dtype=np.int64)
                    shifted[add:] = poly[: max(0, n1 - add)]
                    if leaving and leaving not in g:
                        if not any(g) and fl == _ROW0 | _JOINED:
                            done += shifted  # complete; another S vertex left behind: never connected
                        continue
                    if not any(g):
                        if 2 * (c + 1) + 3 > max_n:
                            continue  # X+ starting in column c+1 or later spans its mirror's c+1 columns
                    else:
                        lb = _reference_bound(g, c, j, fl)
                        shifted[max(0, max_n - lb + 1) :] = 0
                    if shifted.any():
                        key = (_relabel(g), fl)
                        new[key] = new[key] + shifted if key in new else shifted
            states = new
        c += 1
    return done


# ------------------------------------------------------------------------------- numba kernel
#
# The same sweep.  A state's key is three int64 words of twelve 5-bit labels each (frontier rows
# 0..35), the flags in bits 60 and 61 of the first; its polynomial is a row of int64 coefficients
# 0..max_n with a float64 twin.


@_no_refcounts
def _decode(key, length, f):
    for k in range(length):
        f[k] = (key[k // _PER_WORD] >> (_BITS * (k % _PER_WORD))) & _LABEL
    return (key[0] >> 60) & 3


@_no_refcounts
def _encode(g, length, flags, relabel, span_lo, span_hi):
    """(g's key, the rows holding S as bits, the number of components): labels renumbered by first
    appearance (relabel: scratch, all -1 on entry and exit); span_lo[y], span_hi[y]: the lowest and
    highest row of new label y."""
    w0 = np.int64(flags) << 60
    w1 = np.int64(0)
    w2 = np.int64(0)
    occupied = np.int64(0)
    nxt = 0
    for k in range(length):
        x = g[k]
        if x:
            occupied |= np.int64(1) << k
            if relabel[x] < 0:
                nxt += 1
                relabel[x] = nxt
                span_lo[nxt] = k
            span_hi[relabel[x]] = k
            y = np.int64(relabel[x]) << (_BITS * (k % _PER_WORD))
            if k < _PER_WORD:
                w0 |= y
            elif k < 2 * _PER_WORD:
                w1 |= y
            else:
                w2 |= y
    for k in range(length):
        relabel[g[k]] = -1
    return (w0, w1, w2), occupied, nxt


@_no_refcounts
def _bound(frontier, c, j, flags):
    """_reference_bound, from _encode's (occupied, components, span_lo, span_hi)."""
    occupied = frontier[0]
    column_c = occupied & ((np.int64(1) << (j + 1)) - 1)  # rows 0..j: column c
    column_before = occupied ^ column_c  # rows j+1..c-1: column c-1
    right_c = column_c & ((np.int64(1) << c) - 1)  # not the axis vertex (c, c)
    lb = 2 * (_popcount(right_c | (column_c >> 1)) + (column_c & 1))  # right hexes (c, -1..min(j, c-1))
    below_axis = (np.int64(1) << (c - 1)) - 1 if c > 0 else np.int64(0)  # rows j+1..c-2 (hexes (c-1, jj))
    lb += 2 * _popcount((column_before | (column_before >> 1)) & below_axis & ~((np.int64(1) << (j + 1)) - 1))
    if j == c and (occupied >> c) & 1:
        lb += 1  # the axis hex (c, c)
    if j < c - 1 and (occupied >> (c - 1)) & 1:
        lb += 1  # the axis hex (c-1, c-1), completed at step (c, c-1)
    # the rows to reach: below the lowest S row while row 0 is unreached, the gaps no component
    # spans, and while X+ is not joined to its mirror image, up to the nearest row a joining vertex
    # can take ((c, c-1), (c, c) or (c', >= c'-1)): transfer's rows to reach in a box of that height
    top = c - 1 if j < c - 1 else c
    required, _ = _rows_to_reach(frontier, top + 1, (flags & _ROW0) | (2 if flags & _JOINED else 0))
    return lb + 2 * _popcount(required)


@_no_refcounts
def _option_frontiers(f, c, j, flags, opt_g, opt_add, opt_flags):
    """_options, into opt_g[o, :length] (length c + 1 for the axis vertex, else c), opt_add and
    opt_flags; returns (how many options, the leaving label)."""
    fresh = 1
    for k in range(c):
        fresh = max(fresh, f[k] + 1)
    for o in range(4):
        for k in range(c):
            opt_g[o, k] = f[k]
    if j == c:
        opt_g[0, c] = 0
        opt_g[1, c] = fresh
        opt_add[0] = opt_add[1] = 0
        opt_flags[0] = flags
        opt_flags[1] = flags | _JOINED | (_ROW0 if c == 0 else 0)
        return 2, 0
    a = f[j]
    row0 = _ROW0 if j == 0 else 0
    base = 2 if (j == 0 and a != 0) else 0
    opt_g[0, j] = 0
    opt_g[1, j] = fresh
    if j == c - 1:
        opt_add[0] = base + (1 if a != 0 else 0)
        opt_add[1] = base + 1
        opt_flags[0] = flags
        opt_flags[1] = flags | row0 | _JOINED
        return 2, a
    b = f[j + 1]
    opt_add[0] = base + (2 if (a != 0 or b != 0) else 0)
    opt_flags[0] = flags
    if a != 0 and b != 0:
        _rename(opt_g[0], c, b, a)
        for o in range(1, 4):
            opt_g[o, j] = fresh
            opt_add[o] = base + 2
            opt_flags[o] = flags | row0
        _rename(opt_g[1], c, b, a)  # body A-B, C the tip
        _rename(opt_g[2], c, fresh, a)  # body A-C
        _rename(opt_g[3], c, fresh, b)  # body B-C
        return 4, a
    if a != 0 or b != 0:
        opt_g[1, j] = a + b
    opt_add[1] = base + 2
    opt_flags[1] = flags | row0
    return 2, a


@_no_refcounts
def _rename(g, length, old, new):
    if old != new:
        for k in range(length):
            if g[k] == old:
                g[k] = new


@_no_refcounts
def _holds(g, length, label):
    for k in range(length):
        if g[k] == label:
            return True
    return False


@_no_refcounts
def _step_states(c, j, max_n, source, s, count, table, done, stats, scratch):  # noqa: C901 -- a compiled kernel: one body keeps its loops and locals in one frame
    """States s, s + 1, ... of step (c, j) (source = (keys, polys, polyf)) into the next generation
    (table = (out_keys, out_polys, out_polyf, out_count, slots)) while it has room for another
    state's four options, rows and slots; adds completed creatures to done.  Returns (the next
    state, the next generation's row count).  scratch: the work arrays _step makes once."""
    keys, polys, polyf = source
    out_keys, out_polys, out_polyf, out_count, slots = table
    done_i, done_f = done
    f, opt_g, opt_add, opt_flags, relabel, span_lo, span_hi, new_key = scratch
    n1 = max_n + 1
    length = c + 1 if j == c else c
    while s < count and out_count + 4 <= out_keys.shape[0] and 2 * (out_count + 4) <= slots.shape[0]:
        stats[1] += 1
        flags = _decode(keys[s], c, f)
        n_opt, leaving = _option_frontiers(f, c, j, flags, opt_g, opt_add, opt_flags)
        for o in range(n_opt):
            g, add, fl = opt_g[o], opt_add[o], opt_flags[o]
            if add > max_n:
                continue
            key, occupied, components = _encode(g, length, fl, relabel, span_lo, span_hi)
            if leaving != 0 and not _holds(g, length, leaving):
                if occupied == 0 and fl == _ROW0 | _JOINED:  # complete (else another part is left behind)
                    for k in range(n1 - add):
                        done_i[k + add] += polys[s, k]
                        done_f[k + add] += polyf[s, k]
                continue
            if occupied == 0:
                if 2 * (c + 1) + 3 > max_n:
                    continue  # X+ starting in column c+1 or later spans its mirror's c+1 columns
                top = max_n
            else:
                top = max_n - _bound((occupied, components, span_lo, span_hi), c, j, fl)
            last = -1  # the last nonzero coefficient kept
            for k in range(min(n1 - add, top - add + 1)):
                if polyf[s, k] != 0.0:
                    last = k
            if last < 0:
                continue
            new_key[0, 0], new_key[0, 1], new_key[0, 2] = key
            slot, row = _probe(slots, _hash_key(new_key[0]) & (slots.shape[0] - 1), out_keys, new_key, 0)
            if row < 0:
                row = out_count
                out_count += 1
                for w in range(_WORDS):
                    out_keys[row, w] = new_key[0, w]
                for k in range(n1):  # a grown array's new rows are not cleared
                    out_polys[row, k] = 0
                    out_polyf[row, k] = 0.0
                slots[slot] = row
            for k in range(last + 1):
                out_polys[row, k + add] += polys[s, k]
                out_polyf[row, k + add] += polyf[s, k]
        s += 1
    return s, out_count


@njit(cache=True, nogil=True)
def _step(c, j, max_n, generation, done, stats, spare):
    """Decide vertex (c, j) for every state of ``generation`` = (keys, polys, polyf, count); adds
    completed creatures to done = (int64, float64) and returns the next generation.  ``spare`` =
    (keys, polys, polyf) arrays the next generation may be written into (their rows are cleared as
    they are taken), used when they have room for ``count`` rows: a new generation each step made
    the kernel fault its pages in again (docs/benchmarks.md#palago-sweep-kernels)."""
    keys, polys, polyf, count = generation
    n1 = max_n + 1
    cap = max(64, count)
    out_keys, out_polys, out_polyf = spare
    if out_keys.shape[0] < cap:
        out_keys = np.zeros((cap, _WORDS), dtype=np.int64)
        out_polys = np.zeros((cap, n1), dtype=np.int64)
        out_polyf = np.zeros((cap, n1), dtype=np.float64)
    out_count = 0
    size = 64
    while size < 4 * count:
        size *= 2
    slots = np.full(size, -1, dtype=np.int64)
    scratch = (
        np.zeros(40, dtype=np.int64),
        np.zeros((4, 40), dtype=np.int64),
        np.zeros(4, dtype=np.int64),
        np.zeros(4, dtype=np.int64),
        np.full(64, -1, dtype=np.int64),
        np.zeros(64, dtype=np.int64),
        np.zeros(64, dtype=np.int64),
        np.zeros((1, _WORDS), dtype=np.int64),
    )
    s = 0
    while s < count:
        # room for the next states' options before the loop, which swaps no array (_no_refcounts)
        if out_count + 4 > out_keys.shape[0]:
            out_keys, out_polys, out_polyf = (
                _grown(out_keys, out_count),
                _grown(out_polys, out_count),
                _grown(out_polyf, out_count),
            )
        if 2 * (out_count + 4) > slots.shape[0]:
            slots = _rehashed(out_keys, out_count, 2 * slots.shape[0])
        s, out_count = _step_states(
            c,
            j,
            max_n,
            (keys, polys, polyf),
            s,
            count,
            (out_keys, out_polys, out_polyf, out_count, slots),
            done,
            stats,
            scratch,
        )
    if out_count > stats[0]:
        stats[0] = out_count
    return out_keys, out_polys, out_polyf, out_count


def reflection_counts(max_n: int, stats: np.ndarray | None = None) -> np.ndarray:
    """Creatures of every size 0..max_n fixed by (i, j) -> (j, i) with min j = 0 (int64, the numba
    kernel).  ``stats`` (int64[2]), if given, receives the peak number of states and the states
    processed.  Raises ArithmeticError if a count left int64 (not below n = 62)."""
    if not 0 <= max_n <= MAX_N:
        raise ValueError(f"max_n must be between 0 and {MAX_N}, not {max_n}")
    n1 = max_n + 1
    stats = np.zeros(2, dtype=np.int64) if stats is None else stats
    generation = (np.zeros((1, _WORDS), np.int64), np.eye(1, n1, dtype=np.int64), np.eye(1, n1, dtype=np.float64), 1)
    spare = (np.zeros((0, _WORDS), np.int64), np.zeros((0, n1), np.int64), np.zeros((0, n1), np.float64))
    done = (np.zeros(n1, np.int64), np.zeros(n1, np.float64))
    c = 0
    while generation[3] > 0:
        for j in range(c + 1):
            former = generation[:3]
            generation = _step(c, j, max_n, generation, done, stats, spare)
            spare = former  # the generation just read: the next step writes into it
        c += 1
    if (np.abs(done[0].astype(np.float64) - done[1]) > 1e-9 * done[1] + 0.5).any():
        raise ArithmeticError("a reflection count left int64: its float64 twin disagrees")
    return done[0]
