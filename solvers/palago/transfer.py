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

import io
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
from numba import njit, types

__all__ = ["max_height", "count_height", "fixed_counts", "exact_counts", "MAX_N", "count_height_reference",
           "fixed_counts_reference", "Generation", "PieceSummary", "split_generation", "merge_generations",
           "advance_piece", "next_phase", "PIECE_STATES", "PHASE_STATE_STEPS"]


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


def _lower_bound(f, c, j, height, flags, halved=True):
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
    more = max(0, height - 1 - c) if halved else 0  # W >= H: the creature must reach column H - 1
    if not flags & 1 or (not flags & 2 and j == height - 1):
        more = max(more, 1)  # a row still to reach can only be reached in a later column
    return lb + 2 * more


def count_height_reference(height: int, max_n: int, weights: bool = True) -> np.ndarray:
    """Fixed creatures of every size 0..max_n with height exactly ``height`` and width >= height,
    weighted 2 when the width exceeds the height (1 when equal); plain Python.  ``weights=False``:
    every width, each creature once (no use of the i <-> j reflection)."""
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
                        if fl == 3 and (c >= height or not weights):
                            done += shifted * (2 if (weights and c > height) else 1)
                        continue
                    lb = _lower_bound(g, c, j, height, fl, weights)
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


# ------------------------------------------------------------------------------- numba kernel
#
# The same sweep as count_height_reference.  A state's key is three int64 words of ten 6-bit
# labels each (rows 0..9, 10..19, 20..29), the flags in bits 60 and 61 of the first: heights up to
# 30, so n <= 61.
#
# Exact wide arithmetic (docs/palago_transfer.md, "Arithmetic"): every coefficient is carried three
# times, as a uint64 (counts modulo 2^64, by wraparound), modulo the Mersenne prime P = 2^61 - 1
# (one addition and one conditional subtraction), and as a float64 (an approximation of the same
# nonnegative sum, relative error far below 1e-9).  The wrapper rebuilds each count modulo
# 2^64 * P ~ 2^125 by the Chinese remainder theorem and accepts it only if it agrees with the
# float64 channel: a count of 2^125 or more (or any arithmetic slip) would land far from it.
# The float64 channel also decides whether a coefficient is nonzero (a residue can be 0).

_BITS = 6
_PER_WORD = 10
_WORDS = 3
_MAX_HEIGHT = _WORDS * _PER_WORD
_KEY = types.UniTuple(types.int64, _WORDS)
MAX_N = 2 * _MAX_HEIGHT + 1  # max_height(MAX_N) == _MAX_HEIGHT
_P = (1 << 61) - 1
_INV_2_64 = pow(1 << 64, -1, _P)  # 2^64 = 8 (mod P)
_FLOAT_AGREEMENT = 1e-9


@njit(cache=True, nogil=True)
def _decode(key, height, f):
    for k in range(height):
        f[k] = (key[k // _PER_WORD] >> (_BITS * (k % _PER_WORD))) & 63
    return (key[0] >> 60) & 3


@njit(cache=True, nogil=True)
def _encode(g, height, flags, seen):
    """Relabel g by first appearance and pack it with the flags."""
    for k in range(height + 2):
        seen[k] = 0
    nxt = 0
    w0 = np.int64(flags) << 60
    w1 = np.int64(0)
    w2 = np.int64(0)
    for k in range(height):
        x = g[k]
        if x:
            if seen[x] == 0:
                nxt += 1
                seen[x] = nxt
            x = seen[x]
            shifted = np.int64(x) << (_BITS * (k % _PER_WORD))
            if k < _PER_WORD:
                w0 |= shifted
            elif k < 2 * _PER_WORD:
                w1 |= shifted
            else:
                w2 |= shifted
    return (w0, w1, w2)


@njit(cache=True, nogil=True)
def _kernel_lower_bound(g, c, j, height, flags, halved, level, span_lo, span_hi):
    """Hexes not yet counted that every completion must still add (docs/palago_transfer.md,
    "Pruning"): level 1 counts the pending hexes at frontier S vertices and two hexes per column the
    creature must still reach; level 2 also counts the new vertices it needs to reach rows 0 and
    H-1 and to cross the gaps between frontier components (span_lo, span_hi: scratch, int64[H + 2])."""
    lb = 0
    for jj in range(j + 1, height):
        if g[jj] or (jj + 1 < height and g[jj + 1]):
            lb += 1
    for jj in range(-1, j + 1):
        if (jj >= 0 and g[jj]) or (jj + 1 <= j and g[jj + 1]):
            lb += 1
    more = height - 1 - c if halved else 0
    if more < 0:
        more = 0
    if (flags & 1) == 0 or ((flags & 2) == 0 and j == height - 1):
        if more < 1:
            more = 1
    if level < 2:
        return lb + 2 * more
    return lb + more + max(more, _new_vertices_needed(g, height, flags, span_lo, span_hi))


@njit(cache=True, nogil=True)
def _new_vertices_needed(g, height, flags, span_lo, span_hi):
    """Undecided vertices every completion must put in S, each at its own row: rows 0..r-1 when row
    0 is unreached (r: the lowest frontier S row), rows R+1..H-1 when row H-1 is unreached (R: the
    highest), and every row of a gap between frontier S rows that no component spans (a path
    joining the parts below and above it must cross each of its rows at a new vertex)."""
    lowest = -1
    highest = -1
    for k in range(height + 2):
        span_lo[k] = height
        span_hi[k] = -1
    for k in range(height):
        x = g[k]
        if x:
            if lowest < 0:
                lowest = k
            highest = k
            if span_lo[x] > k:
                span_lo[x] = k
            span_hi[x] = k
    if lowest < 0:
        return 0
    needed = 0
    if (flags & 1) == 0:
        needed += lowest
    if (flags & 2) == 0:
        needed += height - 1 - highest
    previous = lowest
    for k in range(lowest + 1, highest + 1):
        if g[k] == 0:
            continue
        if k - previous > 1:
            spanned = False
            for x in range(height + 2):
                if span_lo[x] <= previous and span_hi[x] >= k:
                    spanned = True
                    break
            if not spanned:
                needed += k - previous - 1
        previous = k
    return needed


@njit(cache=True, nogil=True)
def _add_mod_p(x, y):
    s = x + y  # both < P < 2^61: no overflow
    return s - _P if s >= _P else s


@njit(cache=True, nogil=True)
def _hash_slot(key, mask):
    """A slot for ``key`` in an open-addressing table of mask + 1 slots (multiply-xorshift mix)."""
    h = key[0] * np.int64(-7046029254386353131) ^ key[1] * np.int64(-4658895280553007687) ^ key[2] * np.int64(
        -3372029247567499371)
    h ^= (h >> 31) & np.int64(0x1FFFFFFFF)
    h *= np.int64(-4265267296055464877)
    h ^= (h >> 29) & np.int64(0x7FFFFFFFF)
    return h & mask


@njit(cache=True, nogil=True)
def _grown(rows, used):
    """``rows`` with twice as many rows, the first ``used`` copied."""
    shape = (2 * rows.shape[0],) + rows.shape[1:]
    grown = np.empty(shape, dtype=rows.dtype)
    grown[:used] = rows[:used]
    return grown


@njit(cache=True, nogil=True)
def _rehashed(keys, count, size):
    """An open-addressing table of ``size`` slots (a power of two) holding rows 0..count-1."""
    slots = np.full(size, -1, dtype=np.int64)
    mask = size - 1
    for row in range(count):
        slot = _hash_slot(keys[row], mask)
        while slots[slot] >= 0:
            slot = (slot + 1) & mask
        slots[slot] = row
    return slots


def _sweep_columns(sweep, stats, done, generation, count, c, columns):
    """Sweep ``columns`` more columns (fewer if no state survives) from the ``generation`` of
    ``count`` states before column ``c``, and return the generation after them: (keys, pw, pp, pf,
    lo, hi, count, c).  The arguments are _sweep_steps's, in columns."""
    height = sweep[0]
    *generation, count, step = _sweep_steps(sweep, stats, done, generation, count, c * height, (c + columns) * height)
    return (*generation, count, -(-step // height))


@njit(cache=True, nogil=True)
def _sweep_steps(sweep, stats, done, generation, count, first, end):
    """Sweep steps ``first`` .. ``end`` - 1 (step s decides vertex (s // H, s % H); fewer if no
    state survives) from the ``generation`` of ``count`` states before step ``first``, and return
    the generation after them: (keys, pw, pp, pf, lo, hi, count, step), step the next one.
    sweep: (height, max_n, weighted, bound), as count_height takes them.
    A generation is (keys, pw, pp, pf, lo, hi): keys int64[cap, 3], the three channels of each state's size
    polynomial (pw uint64, pp int64 mod P, pf float64, each [cap, max_n + 1]) and lo, hi int64[cap]:
    a sparse polynomial, zero outside lo..hi and never read there (coefficient lo is nonzero, hi
    only bounds the range).  An open-addressing table of row indices finds a key's row.
    Adds completed creatures to done = (done_w, done_p, done_f): done_w (uint64[max_n + 1], counts
    mod 2^64), done_p (int64, mod P) and done_f (float64).  stats[0]: largest number of states after
    a step; stats[1]: states processed (sum over steps).  The groups are unpacked once here."""
    height, max_n, weighted, bound = sweep
    done_w, done_p, done_f = done
    keys, pw, pp, pf, lo, hi = generation
    n1 = max_n + 1
    cap = max(64, keys.shape[0])
    # the next generation's buffers, reused from step to step (grown, never shrunk)
    o_keys = np.zeros((cap, _WORDS), dtype=np.int64)
    ow = np.zeros((cap, n1), dtype=np.uint64)
    op = np.zeros((cap, n1), dtype=np.int64)
    of = np.zeros((cap, n1), dtype=np.float64)
    o_lo = np.zeros(cap, dtype=np.int64)
    o_hi = np.zeros(cap, dtype=np.int64)
    f = np.zeros(height + 1, dtype=np.int64)
    g = np.zeros(height + 1, dtype=np.int64)
    seen = np.zeros(height + 3, dtype=np.int64)
    span_lo = np.zeros(height + 2, dtype=np.int64)
    span_hi = np.zeros(height + 2, dtype=np.int64)
    opt_add = np.zeros(4, dtype=np.int64)
    opt_flags = np.zeros(4, dtype=np.int64)
    opt_g = np.zeros((4, height + 1), dtype=np.int64)
    fresh = height + 1
    step = first
    while count > 0 and step < end:
        c = step // height
        for j in range(step % height, step % height + 1):  # one step (the loop keeps the body as it was)
            size = 64
            while size < 4 * count:
                size *= 2
            slots = np.full(size, -1, dtype=np.int64)
            mask = size - 1
            out_count = 0
            for s in range(count):
                stats[1] += 1
                flags = _decode(keys[s], height, f)
                s_lo = lo[s]
                s_hi = hi[s]
                a = f[j]
                b = f[j + 1] if j + 1 < height else 0
                base = 1 if (j == 0 and a != 0) else 0
                fl_in = flags | (1 if j == 0 else 0) | (2 if j == height - 1 else 0)
                n_opt = 0
                # vertex (c, j) out of S
                for k in range(height):
                    opt_g[n_opt, k] = f[k]
                opt_g[n_opt, j] = 0
                if a != 0 and b != 0 and a != b:
                    for k in range(height):
                        if opt_g[n_opt, k] == b:
                            opt_g[n_opt, k] = a
                opt_add[n_opt] = base + (1 if (a != 0 or b != 0) else 0)
                opt_flags[n_opt] = flags
                n_opt += 1
                # vertex (c, j) in S: one option per body the hex (c-1, j) can have
                if a == 0 or b == 0:
                    for k in range(height):
                        opt_g[n_opt, k] = f[k]
                    opt_g[n_opt, j] = a if a != 0 else (b if b != 0 else fresh)
                    opt_add[n_opt] = base + 1
                    opt_flags[n_opt] = fl_in
                    n_opt += 1
                else:
                    for body in range(3):  # 0: a-b (c is the tip), 1: a-c, 2: b-c
                        for k in range(height):
                            x = f[k]
                            if body == 0 and x == b:
                                x = a
                            opt_g[n_opt, k] = x
                        opt_g[n_opt, j] = fresh if body == 0 else (a if body == 1 else b)
                        opt_add[n_opt] = base + 1
                        opt_flags[n_opt] = fl_in
                        n_opt += 1
                for o in range(n_opt):
                    add = opt_add[o]
                    fl = opt_flags[o]
                    if s_lo + add > max_n:
                        continue
                    for k in range(height):
                        g[k] = opt_g[o, k]
                    if a != 0:
                        alive = False
                        others = False
                        for k in range(height):
                            if g[k] == a:
                                alive = True
                            elif g[k] != 0:
                                others = True
                        if not alive:
                            # (c-1, j) took the last frontier vertex of its component with it
                            if not others and fl == 3 and (c >= height or not weighted):
                                twice = weighted and c > height
                                for k in range(s_lo, min(s_hi, max_n - add) + 1):
                                    x_w = pw[s, k]
                                    x_p = pp[s, k]
                                    x_f = pf[s, k]
                                    if twice:
                                        x_w = x_w + x_w
                                        x_p = _add_mod_p(x_p, x_p)
                                        x_f = x_f + x_f
                                    done_w[k + add] += x_w
                                    done_p[k + add] = _add_mod_p(done_p[k + add], x_p)
                                    done_f[k + add] += x_f
                            continue
                    lb = _kernel_lower_bound(g, c, j, height, fl, weighted, bound, span_lo, span_hi) if bound else 0
                    # coefficients k with k + add + lb > max_n cannot finish; s_lo is nonzero
                    t_hi = min(s_hi, max_n - lb - add)
                    if t_hi < s_lo:
                        continue
                    key = _encode(g, height, fl, seen)
                    if c == 0 and j == height - 1 and key[0] == (np.int64(fl) << 60) and key[1] == 0 and key[2] == 0:
                        continue  # S must start in column 0
                    slot = _hash_slot(key, mask)
                    row = slots[slot]
                    while row >= 0:
                        if o_keys[row, 0] == key[0] and o_keys[row, 1] == key[1] and o_keys[row, 2] == key[2]:
                            break
                        slot = (slot + 1) & mask
                        row = slots[slot]
                    d_lo = s_lo + add
                    d_hi = t_hi + add
                    if row < 0:
                        if out_count == o_keys.shape[0]:
                            o_keys = _grown(o_keys, out_count)
                            ow = _grown(ow, out_count)
                            op = _grown(op, out_count)
                            of = _grown(of, out_count)
                            o_lo = _grown(o_lo, out_count)
                            o_hi = _grown(o_hi, out_count)
                        row = out_count
                        out_count += 1
                        slots[slot] = row
                        for w in range(_WORDS):
                            o_keys[row, w] = key[w]
                        for k in range(d_lo, d_hi + 1):
                            ow[row, k] = pw[s, k - add]
                            op[row, k] = pp[s, k - add]
                            of[row, k] = pf[s, k - add]
                        o_lo[row] = d_lo
                        o_hi[row] = d_hi
                        if 2 * out_count > size:
                            size *= 2
                            mask = size - 1
                            slots = _rehashed(o_keys, out_count, size)
                        continue
                    # widen the row's range, zeroing what it newly covers, then add
                    r_lo = o_lo[row]
                    r_hi = o_hi[row]
                    if d_lo < r_lo:
                        for k in range(d_lo, r_lo):
                            ow[row, k] = 0
                            op[row, k] = 0
                            of[row, k] = 0.0
                        o_lo[row] = d_lo
                    if d_hi > r_hi:
                        for k in range(r_hi + 1, d_hi + 1):
                            ow[row, k] = 0
                            op[row, k] = 0
                            of[row, k] = 0.0
                        o_hi[row] = d_hi
                    for k in range(d_lo, d_hi + 1):
                        ow[row, k] += pw[s, k - add]
                        op[row, k] = _add_mod_p(op[row, k], pp[s, k - add])
                        of[row, k] += pf[s, k - add]
            # the new generation becomes current; the old one's buffers hold the next
            keys, o_keys = o_keys, keys
            pw, ow = ow, pw
            pp, op = op, pp
            pf, of = of, pf
            lo, o_lo = o_lo, lo
            hi, o_hi = o_hi, hi
            count = out_count
            if count > stats[0]:
                stats[0] = count
        step += 1
    return keys, pw, pp, pf, lo, hi, count, step


def exact_counts(residues_2_64: np.ndarray, residues_p: np.ndarray, approximations: np.ndarray) -> np.ndarray:
    """Exact nonnegative counts (a numpy object array of Python ints) from their residues modulo
    2^64 and P = 2^61 - 1, by the Chinese remainder theorem, each checked against its float64
    approximation.  Raises ArithmeticError when one disagrees: the count reached 2^64 P ~ 2^125,
    or a channel went wrong."""
    out = np.zeros(len(residues_2_64), dtype=object)
    for k, (r, q, approx) in enumerate(zip(residues_2_64.tolist(), residues_p.tolist(), approximations.tolist())):
        x = int(r) + (1 << 64) * (((int(q) - int(r)) * _INV_2_64) % _P)
        if abs(x - approx) > _FLOAT_AGREEMENT * approx + 0.5:
            raise ArithmeticError(f"coefficient {k}: the residues give {x}, the float64 channel {approx:.6e}; "
                                  "the count does not fit below 2^64 (2^61 - 1)")
        out[k] = x
    return out


def count_height(height: int, max_n: int, weights: bool = True, stats: np.ndarray | None = None,
                 bound: int = 2, resume: bytes | None = None, save: Callable[[bytes, str], None] | None = None,
                 save_every: float = 300.0, tasks=None, parts: int = 1,
                 piece_states: int | None = None) -> np.ndarray:
    """Fixed creatures of every size 0..max_n with height exactly ``height`` and width >= height,
    weighted 2 when the width exceeds the height (numba kernel; the same sweep as the reference),
    as exact Python ints in a numpy object array.
    ``weights=False``: every width, each creature once (a check of the reflection argument).
    ``stats``, if given (int64[2]), receives the peak number of states and the states processed.
    ``bound`` picks the lower bound on hexes still to come that prunes states: 2 (default) the
    strongest, 1 the column bound alone, 0 (or False) none (states die only when their size alone
    exceeds max_n): slower, and checks that no bound ever cut a creature.
    ``save``, if given, is called with the sweep's state (bytes) and a line saying how far it got
    ("column 12, 3,456 states, 1,234,567 processed") at the end of a column whenever
    ``save_every`` seconds have passed since the start or the last save (and nine times as long as
    the last save took, so that saving costs at most a tenth of the time); ``resume`` continues a
    sweep from such bytes (of the same height, max_n, weights and bound) instead of from scratch.
    ``tasks`` (an object with ``submit(fn, *args, returns=k, name=...)`` returning k handles and
    ``get(handles)`` returning their values, as pipeline/tasks.py describes) and ``parts`` >= 2: a
    generation of at least 2 ``piece_states`` states (default PIECE_STATES) is advanced as up to
    ``parts`` tasks per phase of a column, each of at least ``piece_states`` states, their outputs
    shuffled between phases by a hash of what the next phase cannot change (docs/palago_transfer.md,
    section 6); the counts and the states processed are the same.  stats[0] is then an upper bound
    on the peak (the sum of the tasks' peaks)."""
    if not 1 <= height <= _MAX_HEIGHT:
        raise ValueError(f"height must be between 1 and {_MAX_HEIGHT}, not {height}")
    if not 0 <= max_n <= MAX_N:
        raise ValueError(f"max_n must be between 0 and {MAX_N}, not {max_n}")
    if bound not in (0, 1, 2):
        raise ValueError(f"bound must be 0, 1 or 2, not {bound!r}")
    if stats is None:
        stats = np.zeros(2, dtype=np.int64)
    sweep = (height, max_n, bool(weights), int(bound))
    state = _SweepState.start(max_n) if resume is None else _SweepState.from_bytes(resume, sweep)
    piece_states = PIECE_STATES if piece_states is None else piece_states
    if piece_states < 1:
        raise ValueError(f"piece_states must be at least 1, not {piece_states}")
    stats[:2] += state.stats
    saver = _Saver(save, save_every, sweep)
    while state.count > 0:
        if tasks is not None and _tasks_for(state.count, parts, piece_states) >= 2:
            state = _sweep_spread(sweep, state, stats, saver, tasks, parts, piece_states)
            continue
        before = stats[:2].copy()
        done = (state.done_w, state.done_p, state.done_f)
        *generation, count, c = _sweep_columns(sweep, stats, done, state.generation(), state.count, state.c, 1)
        state = _SweepState(*generation, count=count, c=c, done_w=state.done_w, done_p=state.done_p,
                            done_f=state.done_f, stats=state.stats + (stats[:2] - before))
        saver.maybe(state)
    return exact_counts(state.done_w, state.done_p, state.done_f)


class _Saver:
    """Calls ``save`` at a column's end once ``every`` seconds have passed since the last save (and
    nine times as long as the last save took, so that saves take at most a tenth of the time)."""

    def __init__(self, save: Callable[[bytes, str], None] | None, every: float, sweep: tuple):
        self.save, self.every, self.sweep = save, every, sweep
        self.last = time.monotonic()
        self.gap = every

    def due(self) -> bool:
        return self.save is not None and time.monotonic() - self.last >= self.gap

    def maybe(self, state: "_SweepState") -> None:
        if state.count > 0 and self.due():
            self.now(state)

    def now(self, state: "_SweepState") -> None:
        saving = time.monotonic()
        self.save(state.to_bytes(self.sweep),
                  f"column {state.c}, {state.count:,} states, {int(state.stats[1]):,} processed")
        self.last = time.monotonic()
        self.gap = max(self.every, 9 * (self.last - saving))


@dataclass
class _SweepState:
    """A sweep between two columns: the generation of states before column ``c`` (``count`` rows
    of keys and the three polynomial channels, with their nonzero ranges), the creatures completed
    so far, and the stats (peak states, states processed) so far."""

    keys: np.ndarray
    pw: np.ndarray
    pp: np.ndarray
    pf: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    count: int
    c: int
    done_w: np.ndarray
    done_p: np.ndarray
    done_f: np.ndarray
    stats: np.ndarray

    @classmethod
    def start(cls, max_n: int) -> "_SweepState":
        """One state before column 0: the empty frontier, polynomial 1."""
        n1 = max_n + 1
        pw, pp, pf = np.zeros((1, n1), np.uint64), np.zeros((1, n1), np.int64), np.zeros((1, n1), np.float64)
        pw[0, 0], pp[0, 0], pf[0, 0] = 1, 1, 1.0
        return cls(np.zeros((1, _WORDS), np.int64), pw, pp, pf, np.zeros(1, np.int64), np.zeros(1, np.int64), 1, 0,
                   np.zeros(n1, np.uint64), np.zeros(n1, np.int64), np.zeros(n1, np.float64), np.zeros(2, np.int64))

    def generation(self) -> tuple:
        return self.keys, self.pw, self.pp, self.pf, self.lo, self.hi

    def generation_rows(self) -> "Generation":
        """The live rows (the arrays have room for more)."""
        return Generation(*self.generation()).take(slice(0, self.count))

    def to_bytes(self, sweep: tuple) -> bytes:
        """The live rows only, with the sweep's parameters (height, max_n, weights, bound)."""
        buffer = io.BytesIO()
        rows = slice(0, self.count)
        np.savez(buffer, sweep=np.array(sweep, np.int64), scalars=np.array([self.count, self.c], np.int64),
                 keys=self.keys[rows], pw=self.pw[rows], pp=self.pp[rows], pf=self.pf[rows], lo=self.lo[rows],
                 hi=self.hi[rows], done_w=self.done_w, done_p=self.done_p, done_f=self.done_f, stats=self.stats)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, sweep: tuple) -> "_SweepState":
        with np.load(io.BytesIO(data)) as saved:
            if tuple(saved["sweep"].tolist()) != sweep:
                raise ValueError(f"the saved sweep is of (height, max_n, weights, bound) = {tuple(saved['sweep'].tolist())}, "
                                 f"not {sweep}")
            count, c = saved["scalars"].tolist()
            return cls(*(saved[name] for name in ("keys", "pw", "pp", "pf", "lo", "hi")), count=count, c=c,
                       **{name: saved[name] for name in ("done_w", "done_p", "done_f", "stats")})


def fixed_counts(max_n: int, bound: int = 2, halved: bool = True) -> np.ndarray:
    """Fixed creature counts by size 0..max_n (exact Python ints), summed over heights (numba
    kernel).  ``halved=False`` sweeps every box with its own height, wide or tall, instead of only
    W >= H counted twice."""
    total = np.zeros(max_n + 1, dtype=object)
    for height in range(1, max_height(max_n) + 1):
        total += count_height(height, max_n, weights=halved, bound=bound)
    return total


# ------------------------------------------------------------------- one height across tasks
#
# Any partition of a generation's rows can be advanced separately: every output state comes from
# one input row, so the pieces' outputs, merged by key (identical keys summed), are the generation
# the whole sweep would have made.  A split column is swept in phases of consecutive steps; a phase
# of steps a..b-1 writes frontier rows a..b-1 only, so which of the other rows hold an S vertex
# (and the one flag those steps cannot set) stays as it was: two states that meet within the phase
# agree on it.  Rows are cut by a hash of that signature, so states that would merge during a
# phase are in one task and no task repeats another's work.  Each task hashes its outputs by the
# next phase's signature into buckets, and task t of the next phase merges bucket t of every task
# (a shuffle per phase): no generation passes through one process while it is split.

# The fewest states a task advances: a nested Ray task costs a few ms with its arguments, a step of
# one state 1-3 us (H = 8..12 at n = 36 on this machine, quiet or loaded): 2,000 states over a
# phase of several steps are 15-60 ms of sweeping (docs/palago_transfer.md, section 6).
PIECE_STATES = 2000
# A phase has as few steps as keep each task at this many state-steps (2,000 states over 5 steps;
# one step once a task holds 10,000 states): the fewer its steps, the more rows its signature has,
# so the more evenly its states spread over many tasks.
PHASE_STATE_STEPS = 10_000


@dataclass(frozen=True)
class Generation:
    """Live states, one per row: keys int64[rows, 3], the three channels of their polynomials
    (pw uint64, pp int64 mod P, pf float64, each [rows, max_n + 1]) and the nonzero ranges lo, hi
    int64[rows] (coefficient lo is nonzero; nothing outside lo..hi is read)."""

    keys: np.ndarray
    pw: np.ndarray
    pp: np.ndarray
    pf: np.ndarray
    lo: np.ndarray
    hi: np.ndarray

    @property
    def rows(self) -> int:
        return self.keys.shape[0]

    def arrays(self) -> tuple:
        return self.keys, self.pw, self.pp, self.pf, self.lo, self.hi

    def take(self, rows: np.ndarray | slice) -> "Generation":
        return Generation(*(array[rows] for array in self.arrays()))


@dataclass(frozen=True)
class PieceSummary:
    """What one task of a split column tells the height's sweep, besides its buckets: the creatures
    it completed (done_w uint64, done_p int64 mod P, done_f float64, [max_n + 1]), its stats (peak
    states after a step, states processed) and the rows of each of its buckets."""

    done_w: np.ndarray
    done_p: np.ndarray
    done_f: np.ndarray
    stats: np.ndarray
    bucket_rows: tuple[int, ...]


def next_phase(height: int, end: int, states: int, tasks: int) -> tuple[int, int]:
    """The rows (a, b) a phase sweeps (b excluded) after a phase that ended at row ``end`` (at the
    column's end when ``end`` is ``height``), for ``states`` states in ``tasks`` tasks: as few
    steps as give each task PHASE_STATE_STEPS state-steps, at most half a column (so that half
    the rows or more make the signature; a whole column would leave none), never past its end."""
    a = 0 if end >= height else end
    steps = -(-PHASE_STATE_STEPS * max(tasks, 1) // max(states, 1))
    return a, min(height, a + max(1, min(steps, height // 2)))


@njit(cache=True, nogil=True)
def _bucket_of(keys, count, height, a, b, parts, out):
    """out[row] = the bucket among ``parts`` of keys[row] before a phase of steps a..b-1: a hash
    of which rows outside a..b hold an S vertex and of the flag those steps cannot set (row 0's
    when a > 0, row H-1's when b < H)."""
    for row in range(count):
        signature = np.int64(0)
        for k in range(height):
            if (k < a or k >= b) and (keys[row, k // _PER_WORD] >> (_BITS * (k % _PER_WORD))) & 63:
                signature |= np.int64(1) << k
        flags = (keys[row, 0] >> 60) & 3
        if a > 0:
            signature |= (flags & 1) << 40
        if b < height:
            signature |= (flags & 2) << 40
        h = signature * np.int64(-7046029254386353131)  # splitmix64's finaliser
        h ^= (h >> 30) & np.int64(0x3FFFFFFFF)
        h *= np.int64(-4658895280553007687)
        h ^= (h >> 27) & np.int64(0x1FFFFFFFFF)
        h *= np.int64(-7723592293110705685)
        h ^= (h >> 31) & np.int64(0x1FFFFFFFF)
        out[row] = (h & np.int64(0x7FFFFFFFFFFFFFFF)) % parts


@njit(cache=True, nogil=True)
def _merge_rows(keys, pw, pp, pf, lo, hi, o_keys, ow, op, of, o_lo, o_hi):
    """Rows with equal keys summed (uint64 wraps, mod P adds mod P, float64 adds, ranges widen)
    into the zeroed o_* arrays (as many rows as the input); returns the rows used."""
    size = 64
    while size < 2 * keys.shape[0]:
        size *= 2
    slots = np.full(size, -1, dtype=np.int64)
    mask = size - 1
    count = 0
    for s in range(keys.shape[0]):
        slot = _hash_slot((keys[s, 0], keys[s, 1], keys[s, 2]), mask)
        row = slots[slot]
        while row >= 0:
            if o_keys[row, 0] == keys[s, 0] and o_keys[row, 1] == keys[s, 1] and o_keys[row, 2] == keys[s, 2]:
                break
            slot = (slot + 1) & mask
            row = slots[slot]
        if row < 0:
            row = count
            count += 1
            slots[slot] = row
            for w in range(_WORDS):
                o_keys[row, w] = keys[s, w]
            o_lo[row] = lo[s]
            o_hi[row] = hi[s]
        else:
            o_lo[row] = min(o_lo[row], lo[s])
            o_hi[row] = max(o_hi[row], hi[s])
        for k in range(lo[s], hi[s] + 1):  # the o_* rows are zero outside what was added
            ow[row, k] += pw[s, k]
            op[row, k] = _add_mod_p(op[row, k], pp[s, k])
            of[row, k] += pf[s, k]
    return count


def merge_generations(pieces: list[Generation], n1: int) -> Generation:
    """One generation from ``pieces`` (of max_n + 1 = ``n1`` coefficients), rows with equal keys
    summed: the uint64 channel wraps, the mod-P channel adds mod P, float64 adds, ranges widen."""
    pieces = [piece for piece in pieces if piece.rows]
    if not pieces:
        return _empty_generation(n1)
    keys, pw, pp, pf, lo, hi = (np.concatenate(arrays) for arrays in zip(*(piece.arrays() for piece in pieces)))
    rows = keys.shape[0]
    out = (np.zeros((rows, _WORDS), np.int64), np.zeros((rows, n1), np.uint64), np.zeros((rows, n1), np.int64),
           np.zeros((rows, n1), np.float64), np.zeros(rows, np.int64), np.zeros(rows, np.int64))
    count = _merge_rows(keys, pw, pp, pf, lo, hi, *out)
    return Generation(*out).take(slice(0, count))


def split_generation(generation: Generation, parts: int, height: int, steps: tuple[int, int]) -> list[Generation]:
    """``generation``'s rows in ``parts`` buckets by their signature before the phase of rows
    ``steps`` = (a, b) (b excluded) of a height-``height`` sweep: states that can meet during that
    phase, equal keys among them, land in one bucket."""
    if parts < 1:
        raise ValueError(f"parts must be at least 1, not {parts}")
    bucket = np.zeros(generation.rows, np.int64)
    _bucket_of(generation.keys, generation.rows, height, steps[0], steps[1], parts, bucket)
    order = np.argsort(bucket, kind="stable")
    bounds = np.searchsorted(bucket[order], np.arange(parts + 1))
    return [generation.take(order[bounds[b]:bounds[b + 1]]) for b in range(parts)]


def advance_piece(sweep: tuple, c: int, rows: tuple[int, int], following: tuple[int, int], buckets: int,
                  *pieces: Generation) -> tuple:
    """Merge ``pieces`` (parts of the generation before rows ``rows`` = (a, b) of column ``c``,
    whose signatures no other task holds), sweep those steps and hash the output by the signature
    of the phase of rows ``following`` into ``buckets`` generations.  ``sweep``: (height, max_n,
    weighted, bound).  Returns (PieceSummary, bucket 0, ..., bucket buckets-1)."""
    height, n1 = sweep[0], sweep[1] + 1
    merged = merge_generations(list(pieces), n1)
    stats = np.zeros(2, np.int64)
    done = (np.zeros(n1, np.uint64), np.zeros(n1, np.int64), np.zeros(n1, np.float64))
    *arrays, count, _ = _sweep_steps(sweep, stats, done, merged.arrays(), merged.rows, c * height + rows[0],
                                     c * height + rows[1])
    out = split_generation(Generation(*arrays).take(slice(0, count)), buckets, height, following)
    return (PieceSummary(*done, stats, tuple(piece.rows for piece in out)), *out)


def _empty_generation(n1: int) -> Generation:
    return Generation(np.zeros((0, _WORDS), np.int64), np.zeros((0, n1), np.uint64), np.zeros((0, n1), np.int64),
                      np.zeros((0, n1), np.float64), np.zeros(0, np.int64), np.zeros(0, np.int64))


def _tasks_for(states: int, parts: int, piece_states: int) -> int:
    """Tasks for a phase of ``states`` states: at most ``parts``, each of at least piece_states."""
    return min(parts, states // piece_states)


def _add_done(state: "_SweepState", piece: PieceSummary) -> None:
    """Add a piece's completed creatures to the sweep's (in place; each channel's own arithmetic)."""
    state.done_w += piece.done_w  # wraps modulo 2^64
    summed = state.done_p + piece.done_p  # both below P < 2^61: no overflow
    state.done_p[:] = np.where(summed >= _P, summed - _P, summed)
    state.done_f += piece.done_f


def _sweep_spread(sweep: tuple, state: "_SweepState", stats: np.ndarray, saver: _Saver, tasks, parts: int,
                  piece_states: int) -> "_SweepState":
    """Columns advanced as tasks, phase by phase, while the generation keeps at least 2
    piece_states states at a column's end; returns the sweep gathered back into this process (or
    finished).  Saves at a column's end as count_height does."""
    height, n1 = sweep[0], sweep[1] + 1
    live = state.generation_rows()
    c, rows, k = state.c, live.rows, _tasks_for(live.rows, parts, piece_states)
    steps = next_phase(height, height, rows, k)
    groups = [[piece] for piece in split_generation(live, k, height, steps)]
    while True:
        following = next_phase(height, steps[1], rows, len(groups))
        buckets = min(parts, 2 * len(groups))  # room for the next phase to use twice the tasks
        phase = f"h{height:03d} column {c} rows {steps[0]}-{steps[1] - 1}"
        outputs = [tasks.submit(advance_piece, sweep, c, steps, following, buckets, *group, returns=buckets + 1,
                                name=f"{phase} part {t + 1}/{len(groups)}") for t, group in enumerate(groups)]
        summaries = tasks.get([output[0] for output in outputs])
        for piece in summaries:
            _add_done(state, piece)
        peak, processed = sum(int(p.stats[0]) for p in summaries), sum(int(p.stats[1]) for p in summaries)
        stats[0], stats[1] = max(stats[0], peak), stats[1] + processed
        state.stats = np.array([max(state.stats[0], peak), state.stats[1] + processed], np.int64)
        column_end = steps[1] == height
        c += column_end
        rows = sum(sum(piece.bucket_rows) for piece in summaries)
        k = max(1, min(buckets, _tasks_for(rows, parts, piece_states)))  # a task per bucket at most
        handles = [[output[1 + b] for output in outputs] for b in range(buckets)]  # bucket b of every task
        if rows == 0 or (column_end and (k < 2 or saver.due())):
            gathered = _gathered(state, tasks, handles, n1, c)
            if rows == 0 or k < 2:
                return gathered
            saver.now(gathered)
        # task t of the next phase merges buckets b with b * k // buckets == t of every task
        groups = [[h for b in range(buckets) if b * k // buckets == t for h in handles[b]] for t in range(k)]
        steps = following


def _gathered(state: "_SweepState", tasks, handles: list[list], n1: int, c: int) -> "_SweepState":
    """The split generation (``handles[b]``: bucket b of every piece) merged in this process."""
    live = merge_generations(tasks.get([h for bucket in handles for h in bucket]), n1)
    return _SweepState(*live.arrays(), count=live.rows, c=c, done_w=state.done_w, done_p=state.done_p,
                       done_f=state.done_f, stats=state.stats)
