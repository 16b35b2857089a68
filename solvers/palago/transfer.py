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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

import batchenum.numba_cache  # noqa: F401  (kernels cached per user, by source: batchenum/numba_cache.py)

__all__ = [
    "max_height",
    "count_height",
    "saved_stats",
    "fixed_counts",
    "exact_counts",
    "MAX_N",
    "count_height_reference",
    "fixed_counts_reference",
    "Generation",
    "PieceSummary",
    "split_generation",
    "merge_generations",
    "merged_rows",
    "advance_piece",
    "advance_generation",
    "advance_column",
    "SweepState",
    "Saver",
    "tasks_for",
    "next_phase",
    "PIECE_STATES",
    "TASK_STATES",
    "PHASE_STATE_STEPS",
    "SIGNATURE_SPARE_ROWS",
]


def max_height(max_n: int) -> int:
    """The largest height worth sweeping: a creature spanning d steps along a lattice axis has at
    least 2 d + 3 hexes, and only boxes with W >= H are swept."""
    return max(0, (max_n - 1) // 2)


def _relabel(labels):
    mapping: dict[int, int] = {}
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


def count_height_reference(height: int, max_n: int, weights: bool = True) -> np.ndarray:  # noqa: C901 -- the slow reference: one plain body, as the spec states the sweep
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
                        shifted[max_n - lb + 1 :] = 0
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
MAX_N = 2 * _MAX_HEIGHT + 1  # max_height(MAX_N) == _MAX_HEIGHT
_P = (1 << 61) - 1
_INV_2_64 = pow(1 << 64, -1, _P)  # 2^64 = 8 (mod P)
_FLOAT_AGREEMENT = 1e-9
# A generation is two int64 arrays: ``heads``, a row per state (the key's three words, its span,
# then ``at``), and ``pool``, where the state's coefficients lo..hi lie from pool[at] on.  The span
# packs the polynomial's range lo, hi (coefficient lo is nonzero; nothing outside lo..hi is read)
# and the row's width: lo | hi << 8 | wide << 16, or -1 for a row with no range yet.  A narrow row
# (wide = 0) holds each coefficient as one exact word, pool[at + k - lo], while every one is below
# 2^53 (so it is its own residue mod 2^64 and mod P, and exact as a float64); a wide row holds the
# three channels of coefficient k side by side at at + 3 (k - lo) (+0: uint64 mod 2^64, +1: mod P,
# +2: float64 bits).  A row turns wide the first time a sum reaches 2^53 (or a wide row is added to
# it) and never turns back.  At n = 50 (h010, h011) every coefficient of the largest generations
# was below 2^53: the live rows stay narrow there, and only the completed creatures' sums need the
# three channels.  Ranges are short (2.7 coefficients on average, 18 at most, of 43 at n = 42), so
# a row holds its own range only.  A range that widens (or a row that turns wide) moves its row to
# the pool's end (in place when it is already the last), so a pool being written has holes;
# _compacted closes them before a generation is saved or shipped.
_SPAN = _WORDS
_AT = _WORDS + 1
_HEAD = _WORDS + 2  # columns of a head row
_NARROW_LIMIT = 1 << 53  # a narrow row's coefficients stay below this
_BATCH = 256  # options looked up together (each state makes at most 4)
_NO_SPARE = (np.zeros((0, _HEAD), dtype=np.int64), np.zeros(0, dtype=np.int64))  # _sweep_steps: make buffers

# The functions that run once per state or option are compiled without numba's reference counting
# (the option _nrt=False, as numba's own mergesort and unicode kernels are): they allocate nothing,
# and every array they took, viewed or swapped in a loop would cost an atomic increment and
# decrement; that took a third of the sweep's time (perf, H = 10 at n = 36).  So the callers that
# allocate (_add_batch, _sweep_steps) make room before such a loop instead of growing arrays in it.
_no_refcounts = njit(cache=True, nogil=True, _nrt=False)  # type: ignore[call-overload]  # _nrt: private, no stub
# The helpers of those loops are also inlined where they are called (numba's inline='always'): a call
# passed their tuples of arrays word by word, which made the sweep slower
# (docs/benchmarks.md#palago-sweep-kernels).
_inlined = njit(cache=True, nogil=True, _nrt=False, inline="always")  # type: ignore[call-overload]  # as above


@_inlined
def _decode(key, height, f):
    for k in range(height):
        f[k] = (key[k // _PER_WORD] >> (_BITS * (k % _PER_WORD))) & 63
    return (key[0] >> 60) & 3


@_inlined
def _scan(option, height, flags, stamp, seen, span_lo, span_hi):
    """One pass over the frontier g that an option makes of f, option = (f, j, at_j, renamed, a):
    g is f with row j set to at_j and label ``renamed`` (unless -1) replaced by a.  Returns g's key
    (g relabelled by first appearance and packed with the flags), the rows holding S as bits, and
    the number of components; span_lo[y], span_hi[y]: the lowest and highest row of new label y.
    seen[x] is label x's new label when seen_at[x] == stamp (seen = (seen_at, new labels), scratch
    int64[H + 3] each; a new stamp per call, so no reset)."""
    f, j, at_j, renamed, a = option
    seen_at, relabel = seen
    nxt = 0
    occupied = np.int64(0)
    w0 = np.int64(flags) << 60
    w1 = np.int64(0)
    w2 = np.int64(0)
    for k in range(height):
        x = at_j if k == j else f[k]
        if x == renamed:
            x = a
        if x:
            occupied |= np.int64(1) << k
            if seen_at[x] != stamp:
                seen_at[x] = stamp
                nxt += 1
                relabel[x] = nxt
                span_lo[nxt] = k
            y = relabel[x]
            span_hi[y] = k
            if k < _PER_WORD:
                w0 |= np.int64(y) << (_BITS * k)
            elif k < 2 * _PER_WORD:
                w1 |= np.int64(y) << (_BITS * (k - _PER_WORD))
            else:
                w2 |= np.int64(y) << (_BITS * (k - 2 * _PER_WORD))
    return (w0, w1, w2), occupied, nxt


@_inlined
def _kernel_lower_bound(frontier, c, j, height, flags, halved, level):
    """Hexes not yet counted that every completion must still add (docs/palago_transfer.md,
    "Pruning"): level 1 counts the pending hexes at frontier S vertices and two hexes per column the
    creature must still reach; level 2 also counts the new vertices it needs to reach rows 0 and
    H-1 and to cross the gaps between frontier components; level 3 also their left hexes where no
    frontier S vertex touches them.  frontier: (occupied, components,
    span_lo, span_hi) as _scan leaves them (bit k of occupied: row k holds S)."""
    occupied = frontier[0]
    column_c = occupied & ((np.int64(1) << (j + 1)) - 1)  # rows 0..j: already in column c
    column_before = occupied ^ column_c  # rows j+1..H-1: still column c-1
    # pending hexes (c, j') for j' = -1..j and (c-1, j') for j' > j touching a frontier S vertex
    lb = _popcount(column_c | (column_c >> 1)) + (column_c & 1)
    lb += _popcount((column_before | (column_before >> 1)) & ~((np.int64(1) << (j + 1)) - 1))
    more = height - 1 - c if halved else 0
    if more < 0:
        more = 0
    if (flags & 1) == 0 or ((flags & 2) == 0 and j == height - 1):
        if more < 1:
            more = 1
    if level < 2:
        return lb + 2 * more
    required, highest = _rows_to_reach(frontier, height, flags)
    needed = _popcount(required)
    if level < 3:
        return lb + more + max(more, needed)
    # level 3: no lattice step raises both i and j, so the new vertices that take the creature up
    # to row H-1 (rows R+1..H-1) are others than those that take it to column H-1 and than those on
    # the other rows to reach
    if halved and occupied != 0:
        right = height - 1 - (c if column_c != 0 else c - 1)
        up = height - 1 - highest if (flags & 2) == 0 else 0
        needed = up + max(right, needed - up)
    # and the first new vertex (the leftmost) of a row to reach whose frontier row and the row above
    # it hold no S vertex also touches its left hex, which nothing above counts
    rows = (np.int64(1) << height) - 1
    lefts = _popcount(required & ~occupied & ~(occupied >> 1) & rows)
    return lb + max(more, needed) + max(more, lefts)


@_no_refcounts
def _rows_to_reach(frontier, height, flags):
    """(rows, R): the rows (bit k: row k) where every completion must put an undecided vertex in S, each row
    its own vertex: rows 0..r-1 when row 0 is unreached (r: the lowest frontier S row), rows
    R+1..H-1 when row H-1 is unreached (R: the highest), and every row of a gap between frontier S
    rows that no component spans (a path joining the parts below and above it must cross each of
    its rows at a new vertex).  A gap's rows are all inside one component's span or none is (spans
    end at S rows), so the rows to cross are the empty rows between r and R inside no span."""
    occupied, components, span_lo, span_hi = frontier
    if occupied == 0:
        return np.int64(0), 0
    lowest = span_lo[1]  # label 1 is the lowest row's
    highest = 0
    inside = np.int64(0)  # rows strictly inside some component's span
    for y in range(1, components + 1):
        highest = max(highest, span_hi[y])
        if span_hi[y] > span_lo[y] + 1:
            inside |= ((np.int64(1) << span_hi[y]) - 1) & ~((np.int64(1) << (span_lo[y] + 1)) - 1)
    between = ((np.int64(1) << highest) - 1) & ~((np.int64(1) << (lowest + 1)) - 1)
    required = between & ~occupied & ~inside
    if (flags & 1) == 0:
        required |= (np.int64(1) << lowest) - 1
    if (flags & 2) == 0:
        required |= ((np.int64(1) << height) - 1) & ~((np.int64(1) << (highest + 1)) - 1)
    return required, highest


@_no_refcounts
def _popcount(x):
    """Set bits of a nonnegative int64 (SWAR)."""
    x = x - ((x >> 1) & np.int64(0x5555555555555555))
    x = (x & np.int64(0x3333333333333333)) + ((x >> 2) & np.int64(0x3333333333333333))
    x = (x + (x >> 4)) & np.int64(0x0F0F0F0F0F0F0F0F)
    return (x * np.int64(0x0101010101010101)) >> 56


@_no_refcounts
def _add_mod_p(x, y):
    s = x + y  # both < P < 2^61: no overflow
    return s - _P if s >= _P else s


@_no_refcounts
def _doubled(x_w, x_p, x_f, times):
    """One coefficient's three channels multiplied by 2^times, each in its own arithmetic."""
    for _ in range(times):
        x_w = x_w + x_w
        x_p = _add_mod_p(x_p, x_p)
        x_f = x_f + x_f
    return x_w, x_p, x_f


@_no_refcounts
def _hash_slot(key, mask):
    """A slot for ``key`` in an open-addressing table of mask + 1 slots."""
    return _hash_key(key) & mask


@_no_refcounts
def _hash_key(key):
    """A multiply-xorshift mix of the key's three words."""
    h = (
        key[0] * np.int64(-7046029254386353131)
        ^ key[1] * np.int64(-4658895280553007687)
        ^ key[2] * np.int64(-3372029247567499371)
    )
    h ^= (h >> 31) & np.int64(0x1FFFFFFFF)
    h *= np.int64(-4265267296055464877)
    h ^= (h >> 29) & np.int64(0x7FFFFFFFF)
    return h


def _prefetch_typing(typingctx, array, index):
    """Ask the CPU to fetch array[index] (a one-dimensional array) into its caches, without waiting
    for it (LLVM's prefetch: read, high locality)."""

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        data = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type, data, [args[1]])
        byte_pointer = ir.IntType(8).as_pointer()
        prefetch = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer] + [ir.IntType(32)] * 3), "llvm.prefetch.p0"
        )
        int32 = ir.IntType(32)
        builder.call(prefetch, [builder.bitcast(pointer, byte_pointer), int32(0), int32(3), int32(1)])
        return context.get_dummy_value()

    return types.void(array, index), codegen


# called in kernels as _prefetch(array, index); numba's stubs would type it as the typing function
_prefetch: Any = intrinsic(_prefetch_typing)


@njit(cache=True, nogil=True)
def _grown(rows, used):
    """``rows`` with twice as many rows, the first ``used`` copied."""
    shape = (2 * rows.shape[0],) + rows.shape[1:]
    grown = np.empty(shape, dtype=rows.dtype)
    grown[:used] = rows[:used]
    return grown


@njit(cache=True, nogil=True)
def _with_room(rows, used, more):
    """``rows`` (its first ``used`` rows kept) with room for ``more`` rows after them, doubled as
    needed (pages of the slack that nothing writes are never resident)."""
    size = max(rows.shape[0], 64)
    while size - used < more:
        size *= 2
    if size == rows.shape[0]:
        return rows
    bigger = np.empty((size,) + rows.shape[1:], dtype=rows.dtype)
    bigger[:used] = rows[:used]
    return bigger


@_no_refcounts
def _span(heads, row):
    """Row ``row``'s range and width: (lo, hi, wide); lo is -1 for a row with no range yet."""
    span = heads[row, _SPAN]
    if span < 0:
        return np.int64(-1), np.int64(-1), np.int64(0)
    return span & 0xFF, (span >> 8) & 0xFF, (span >> 16) & 1


@_no_refcounts
def _set_span(heads, row, lo, hi, wide):
    heads[row, _SPAN] = lo | (hi << 8) | (wide << 16)


@_no_refcounts
def _words(heads, row):
    """Pool words that row ``row``'s range takes: one a coefficient when narrow, three when wide."""
    lo, hi, wide = _span(heads, row)
    return (1 + 2 * wide) * (hi - lo + 1)


@_inlined
def _coefficient(pool, pool_w, pool_f, at, i, wide):
    """The three channels (uint64 mod 2^64, int64 mod P, float64) of the i-th coefficient of a row
    whose words start at ``at``: a narrow row's word is all three (it is below 2^53 < P)."""
    if wide:
        w = at + 3 * i
        return pool_w[w], pool[w + 1], pool_f[w + 2]
    x = pool[at + i]
    return np.uint64(x), x, np.float64(x)


@_inlined
def _reshaped(target, row, lo, hi, wide, used):
    """Row ``row`` widened to cover lo..hi and, if ``wide``, made wide: its words move to the pool's
    end (or stay where they start when they are the last), coefficients shifted up when the range
    starts lower, what it newly covers zeroed (0 in all three channels: 0.0 is all zero bits), and
    a narrow row's exact words written as three channels (a word below 2^63 is its own residue mod
    2^64).  target: (heads, pool, its uint64 view, its float64 view).  Returns the words used."""
    heads, pool, pool_f = target[0], target[1], target[3]
    r_lo, r_hi, r_wide = _span(heads, row)
    at = heads[row, _AT]
    old = _words(heads, row)
    to = at if at + old == used else used
    per = 1 + 2 * wide
    up = per * (r_lo - lo)
    if wide == r_wide:
        for i in range(old - 1, -1, -1):  # backwards: the words may overlap their new place
            pool[to + up + i] = pool[at + i]
    else:  # narrow to wide; backwards, each word read before anything is written over it
        for i in range(old - 1, -1, -1):
            x = pool[at + i]
            w = to + up + 3 * i
            pool[w] = x
            pool[w + 1] = x % _P
            pool_f[w + 2] = np.float64(x)
    for i in range(up):
        pool[to + i] = 0
    for i in range(up + per * (r_hi - r_lo + 1), per * (hi - lo + 1)):
        pool[to + i] = 0
    _set_span(heads, row, lo, hi, wide)
    heads[row, _AT] = to
    return to + per * (hi - lo + 1)


@_inlined
def _add_terms(target, at, source, s_at, s_wide, terms, doublings):
    """Add ``terms`` coefficients of a source row from word s_at on (wide or not), times
    2^doublings, to a wide target row from word ``at`` on; target and source: (int64 pool, its
    uint64 view, its float64 view)."""
    out, out_w, out_f = target
    rows, rows_w, rows_f = source
    for i in range(terms):
        x_w, x_p, x_f = _coefficient(rows, rows_w, rows_f, s_at, i, s_wide)
        x_w, x_p, x_f = _doubled(x_w, x_p, x_f, doublings)
        w = at + 3 * i
        out_w[w] += x_w
        out[w + 1] = _add_mod_p(out[w + 1], x_p)
        out_f[w + 2] += x_f


@_inlined
def _add_narrow(pool, at, s_pool, s_at, terms, doublings):
    """Add ``terms`` words of a narrow source row, times 2^doublings, to a narrow target row (exact:
    each word below 2^53 and doublings at most 1).  Returns the largest sum."""
    largest = np.int64(0)
    for i in range(terms):
        x = pool[at + i] + (s_pool[s_at + i] << doublings)
        pool[at + i] = x
        largest = max(largest, x)
    return largest


@_inlined
def _accumulate(target, row, used, source, s, shift, s_hi, doublings):
    """Add coefficients lo..s_hi of source row ``s`` (lo its own), times 2^doublings and ``shift``
    sizes up, to row ``row`` of ``target``: a row with no range yet takes them at the pool's end,
    any other widens its range to cover them (_reshaped) and adds; the row turns wide when the
    source row is wide or a sum reaches 2^53.  target and source: (heads, pool, the pool's uint64
    view, its float64 view); the target pool has room for 3 (max_n + 1) more words.  Returns the
    target pool's words used."""
    heads, pool = target[0], target[1]
    s_heads, s_pool = source[0], source[1]
    s_lo, _, s_wide = _span(s_heads, s)
    terms = s_hi - s_lo + 1
    d_lo = s_lo + shift
    d_hi = d_lo + terms - 1
    s_at = s_heads[s, _AT]
    if heads[row, _SPAN] < 0:
        _set_span(heads, row, d_lo, d_hi, s_wide)
        heads[row, _AT] = used
        words = (1 + 2 * s_wide) * terms
        if doublings == 0:
            for i in range(words):
                pool[used + i] = s_pool[s_at + i]  # every channel, bit for bit
            return used + words
        for i in range(words):
            pool[used + i] = 0
        used += words
    else:
        r_lo, r_hi, r_wide = _span(heads, row)
        if d_lo < r_lo or d_hi > r_hi or s_wide > r_wide:
            used = _reshaped(target, row, min(d_lo, r_lo), max(d_hi, r_hi), max(s_wide, r_wide), used)
    lo, hi, wide = _span(heads, row)
    at = heads[row, _AT]
    if wide:
        _add_terms(
            (pool, target[2], target[3]),
            at + 3 * (d_lo - lo),
            (s_pool, source[2], source[3]),
            s_at,
            s_wide,
            terms,
            doublings,
        )
    elif _add_narrow(pool, at + d_lo - lo, s_pool, s_at, terms, doublings) >= _NARROW_LIMIT:
        used = _reshaped(target, row, lo, hi, 1, used)
    return used


@_no_refcounts
def _new_row(out, row, keys, i):
    """Fill ``row`` of ``out`` with the key keys[i] and no range yet."""
    for w in range(_WORDS):
        out[row, w] = keys[i, w]
    out[row, _SPAN] = -1
    out[row, _AT] = -1


@_no_refcounts
def _probe(slots, slot, rows, keys, i):
    """Look for the key keys[i] (its first three words) in ``rows`` through the open-addressing
    table ``slots``, from ``slot`` on: returns (its slot, its row), or (the empty slot to fill, -1)."""
    mask = slots.shape[0] - 1
    row = slots[slot]
    while row >= 0:
        if rows[row, 0] == keys[i, 0] and rows[row, 1] == keys[i, 1] and rows[row, 2] == keys[i, 2]:
            break
        slot = (slot + 1) & mask
        row = slots[slot]
    return slot, row


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


@_no_refcounts
def _look_up(batch, n_batch, out, out_count, slots):
    """Find each option's row in ``out`` (heads) through ``slots`` (a new key gets a new row, with
    no range yet), into the batch's row scratch; ``out`` and ``slots`` have room for every option
    to be new.  Returns the new row count."""
    b_key, b_hash, _, b_row = batch
    mask = slots.shape[0] - 1
    for i in range(n_batch):  # the rows the slots point at, fetched before any is compared
        row = slots[b_hash[i] & mask]
        if row >= 0:
            _prefetch(out[row], 0)
    for i in range(n_batch):
        slot, row = _probe(slots, b_hash[i] & mask, out, b_key, i)
        if row < 0:
            _new_row(out, out_count, b_key, i)
            row = out_count
            out_count += 1
            slots[slot] = row
        b_row[i] = row
    return out_count


@_no_refcounts
def _accumulate_batch(batch, n_batch, source, target, used):
    """Add the batch's options to their rows of ``target``, in order (source and target as
    _accumulate takes them; the target pool has room for 3 (max_n + 1) words an option).  Their
    rows' pool words are fetched first, so that their cache misses overlap.  Returns the target
    pool's words used."""
    _, _, b_option, b_row = batch
    heads, pool = target[0], target[1]
    for i in range(n_batch):
        at = heads[b_row[i], _AT]
        if at >= 0:
            _prefetch(pool, at)
    for i in range(n_batch):
        s, add, t_hi, doublings = b_option[i, 0], b_option[i, 1], b_option[i, 2], b_option[i, 3]
        used = _accumulate(target, b_row[i], used, source, s, add, t_hi, doublings)
    return used


@njit(cache=True, nogil=True)
def _add_batch(batch, n_batch, source, table, n1):
    """Add a batch of options to the next generation, in their order (so the rows, and every sum,
    are what one option at a time would make): first every lookup, then every addition.  Their
    slots were prefetched as the options were made, and one lookup hardly waits for another, so
    the cache misses on rows overlap instead of coming one after another; the additions then find
    their rows cached.  batch: (keys, full hashes, (source row, add, t_hi, doublings) per option,
    scratch for rows); source: the generation (heads, pool, pool's views), as _accumulate takes it;
    table: (out heads, out pool, out_count, pool words used, slots), returned updated (the arrays
    may be grown, slots rehashed)."""
    out, pool, out_count, used, slots = table
    out = _with_room(out, out_count, n_batch)
    pool = _with_room(pool, used, 3 * n1 * n_batch)
    size = slots.shape[0]
    while 2 * (out_count + n_batch) > size:
        size *= 2
    if size > slots.shape[0]:
        slots = _rehashed(out, out_count, size)
    out_count = _look_up(batch, n_batch, out, out_count, slots)
    used = _accumulate_batch(batch, n_batch, source, (out, pool, pool.view(np.uint64), pool.view(np.float64)), used)
    return out, pool, out_count, used, slots


def _sweep_columns(sweep, stats, done, rows, count, c, columns, spare=_NO_SPARE):
    """Sweep ``columns`` more columns (fewer if no state survives) from the generation ``rows`` =
    (heads, pool) of ``count`` states before column ``c``, and return (rows, count, c, spare) after
    them.  The arguments are _sweep_steps's, in columns; no spare: new buffers."""
    height = sweep[0]
    rows, count, step, spare = _sweep_steps(sweep, stats, done, rows, count, c * height, (c + columns) * height, spare)
    return rows, count, -(-step // height), spare


@_no_refcounts
def _make_options(sweep, c, j, source, s, count, scratch, batch, done, stats, slots):  # noqa: C901 -- a compiled kernel: one body keeps its loops and locals in one frame
    """The options of states s, s + 1, ... of the generation ``source`` (heads, pool, the pool's
    uint64 and float64 views) at
    step (c, j), into the batch until it has no room for another state's four options or the
    generation ends; creatures they complete are added to ``done``.
    Returns (the next state, the batch's options).  scratch: (f, (seen_at, relabel, stamp),
    span_lo, span_hi, options), the work arrays _sweep_steps makes once (stamp: int64[1])."""
    height, max_n, weighted, bound = sweep
    heads, pool, pool_w, pool_f = source
    done_w, done_p, done_f = done
    f, seen, span_lo, span_hi, options = scratch
    opt_at_j, opt_renamed, opt_add, opt_flags, opt_doublings = options
    b_key, b_hash, b_option, _ = batch
    fresh = height + 1
    stamp = seen[2][0]
    n_batch = 0
    while s < count and n_batch <= _BATCH - 4:
        stats[1] += 1
        flags = _decode(heads[s], height, f)
        s_lo, s_hi, s_wide = _span(heads, s)
        s_at = heads[s, _AT]
        a = f[j]
        b = f[j + 1] if j + 1 < height else 0
        base = 1 if (j == 0 and a != 0) else 0
        fl_in = flags | (1 if j == 0 else 0) | (2 if j == height - 1 else 0)
        # the options for vertex (c, j): the new frontier is f with row j set to opt_at_j and
        # label opt_renamed (if not -1) renamed to a (a merge keeps a's label)
        n_opt = 0
        # vertex (c, j) out of S (A and B, if both in S, joined by the forced body)
        opt_at_j[n_opt] = 0
        opt_renamed[n_opt] = b if (a != 0 and b != 0 and a != b) else -1
        opt_add[n_opt] = base + (1 if (a != 0 or b != 0) else 0)
        opt_flags[n_opt] = flags
        opt_doublings[n_opt] = 0
        n_opt += 1
        # vertex (c, j) in S: one option per body the hex (c-1, j) can have
        if a == 0 or b == 0:
            opt_at_j[n_opt] = a if a != 0 else (b if b != 0 else fresh)
            opt_renamed[n_opt] = -1
            opt_add[n_opt] = base + 1
            opt_flags[n_opt] = fl_in
            opt_doublings[n_opt] = 0
            n_opt += 1
        else:
            # 0: a-b (c is the tip), 1: a-c, 2: b-c; when A and B are already joined (a == b),
            # bodies a-c and b-c give the same state: one option counted twice
            for body in range(3 if a != b else 2):
                opt_at_j[n_opt] = fresh if body == 0 else (a if body == 1 else b)
                opt_renamed[n_opt] = b if (body == 0 and a != b) else -1
                opt_add[n_opt] = base + 1
                opt_flags[n_opt] = fl_in
                opt_doublings[n_opt] = 1 if (body == 1 and a == b) else 0
                n_opt += 1
        for o in range(n_opt):
            add = opt_add[o]
            fl = opt_flags[o]
            doublings = opt_doublings[o]
            if s_lo + add > max_n:
                continue
            stamp += 1
            key, occupied, components = _scan(
                (f, j, opt_at_j[o], opt_renamed[o], a), height, fl, stamp, (seen[0], seen[1]), span_lo, span_hi
            )
            if a != 0:
                alive = seen[0][a] == stamp
                others = components > (1 if alive else 0)
                if not alive:
                    # (c-1, j) took the last frontier vertex of its component with it
                    if not others and fl == 3 and (c >= height or not weighted):
                        times = doublings + (1 if (weighted and c > height) else 0)  # W > H counts twice
                        for k in range(s_lo, min(s_hi, max_n - add) + 1):
                            x_w, x_p, x_f = _coefficient(pool, pool_w, pool_f, s_at, k - s_lo, s_wide)
                            x_w, x_p, x_f = _doubled(x_w, x_p, x_f, times)
                            done_w[k + add] += x_w
                            done_p[k + add] = _add_mod_p(done_p[k + add], x_p)
                            done_f[k + add] += x_f
                    continue
            frontier = (occupied, components, span_lo, span_hi)
            lb = _kernel_lower_bound(frontier, c, j, height, fl, weighted, bound) if bound else 0
            # coefficients k with k + add + lb > max_n cannot finish; s_lo is nonzero
            t_hi = min(s_hi, max_n - lb - add)
            if t_hi < s_lo:
                continue
            if c == 0 and j == height - 1 and key[0] == (np.int64(fl) << 60) and key[1] == 0 and key[2] == 0:
                continue  # S must start in column 0
            # looked up and added in a batch, so that the lookups' cache misses overlap
            h = _hash_key(key)
            _prefetch(slots, h & (slots.shape[0] - 1))
            for w in range(_WORDS):
                b_key[n_batch, w] = key[w]
            b_hash[n_batch] = h
            b_option[n_batch, 0] = s
            b_option[n_batch, 1] = add
            b_option[n_batch, 2] = t_hi
            b_option[n_batch, 3] = doublings
            n_batch += 1
        s += 1
    seen[2][0] = stamp
    return s, n_batch


@njit(cache=True, nogil=True)
def _sweep_steps(sweep, stats, done, rows, count, first, end, spare):
    """Sweep steps ``first`` .. ``end`` - 1 (step s decides vertex (s // H, s % H); fewer if no
    state survives) from the generation ``rows`` = (heads, pool) (the layout above) of ``count``
    states before step ``first``, and return (rows, count, step, spare) after them, step the next
    one and spare the other pair of buffers, to be passed to the next call (empty ones, _NO_SPARE,
    make new buffers).  sweep: (height, max_n, weighted, bound), as count_height takes them.
    Only coefficients lo..hi of a row are read (coefficient lo is nonzero, hi only bounds the
    range).  An open-addressing table of row indices finds a key's row.
    Adds completed creatures to done = (done_w, done_p, done_f): done_w (uint64[max_n + 1], counts
    mod 2^64), done_p (int64, mod P) and done_f (float64).  stats[0]: largest number of states after
    a step; stats[1]: states processed (sum over steps)."""
    height, max_n, weighted, bound = sweep
    heads, pool = rows
    # the next generation's buffers, reused from step to step (grown, never shrunk) and from call
    # to call: new ones each column faulted their pages in again (docs/palago_transfer.md, "One
    # buffer pair for a whole height")
    out, out_pool = spare
    if out.shape[0] < max(64, heads.shape[0]):
        out = np.zeros((max(64, heads.shape[0]), _HEAD), dtype=np.int64)
    if out_pool.shape[0] < pool.shape[0]:
        out_pool = np.zeros(max(64, pool.shape[0]), dtype=np.int64)
    n1 = max_n + 1
    seen = (np.full(height + 3, -1, dtype=np.int64), np.zeros(height + 3, dtype=np.int64), np.zeros(1, np.int64))
    # a state's options: row j's label, the label renamed, hexes added, flags, and d when 2^d choices
    # of body reach the option
    options = (
        np.zeros(4, dtype=np.int64),
        np.zeros(4, dtype=np.int64),
        np.zeros(4, dtype=np.int64),
        np.zeros(4, dtype=np.int64),
        np.zeros(4, dtype=np.int64),
    )
    scratch = (
        np.zeros(height + 1, dtype=np.int64),
        seen,
        np.zeros(height + 2, dtype=np.int64),
        np.zeros(height + 2, dtype=np.int64),
        options,
    )
    # options waiting for their lookup: key, full hash, (source row, add, t_hi, doublings), row
    batch = (
        np.zeros((_BATCH, _WORDS), dtype=np.int64),
        np.zeros(_BATCH, dtype=np.int64),
        np.zeros((_BATCH, 4), dtype=np.int64),
        np.zeros(_BATCH, dtype=np.int64),
    )
    step = first
    while count > 0 and step < end:
        size = 64
        while size < 4 * count:
            size *= 2
        slots = np.full(size, -1, dtype=np.int64)
        out_count = 0
        used = 0
        source = (heads, pool, pool.view(np.uint64), pool.view(np.float64))
        s = 0
        while s < count:
            s, n_batch = _make_options(
                sweep, step // height, step % height, source, s, count, scratch, batch, done, stats, slots
            )
            out, out_pool, out_count, used, slots = _add_batch(
                batch, n_batch, source, (out, out_pool, out_count, used, slots), n1
            )
        # the new generation becomes current; the old one's buffers hold the next
        heads, out = out, heads
        pool, out_pool = out_pool, pool
        count = out_count
        if count > stats[0]:
            stats[0] = count
        step += 1
    return (heads, pool), count, step, (out, out_pool)


@njit(cache=True, nogil=True)
def _compacted(heads, pool, count):
    """Rows 0..count-1 of a generation with their pool words packed in row order, without the
    holes that moved ranges leave: (heads, pool), new arrays of exactly that size."""
    words = 0
    for row in range(count):
        words += _words(heads, row)
    out = heads[:count].copy()
    packed = np.empty(words, dtype=np.int64)
    to = 0
    for row in range(count):
        at = heads[row, _AT]
        for i in range(_words(heads, row)):
            packed[to + i] = pool[at + i]
        out[row, _AT] = to
        to += _words(heads, row)
    return out, packed


def exact_counts(residues_2_64: np.ndarray, residues_p: np.ndarray, approximations: np.ndarray) -> np.ndarray:
    """Exact nonnegative counts (a numpy object array of Python ints) from their residues modulo
    2^64 and P = 2^61 - 1, by the Chinese remainder theorem, each checked against its float64
    approximation.  Raises ArithmeticError when one disagrees: the count reached 2^64 P ~ 2^125,
    or a channel went wrong."""
    out = np.zeros(len(residues_2_64), dtype=object)
    for k, (r, q, approx) in enumerate(zip(residues_2_64.tolist(), residues_p.tolist(), approximations.tolist())):
        x = int(r) + (1 << 64) * (((int(q) - int(r)) * _INV_2_64) % _P)
        if abs(x - approx) > _FLOAT_AGREEMENT * approx + 0.5:
            raise ArithmeticError(
                f"coefficient {k}: the residues give {x}, the float64 channel {approx:.6e}; "
                "the count does not fit below 2^64 (2^61 - 1)"
            )
        out[k] = x
    return out


def count_height(
    height: int,
    max_n: int,
    weights: bool = True,
    stats: np.ndarray | None = None,
    bound: int = 3,
    resume: bytes | None = None,
    save: Callable[[bytes, str], None] | None = None,
    save_every: float = 300.0,
) -> np.ndarray:
    """Fixed creatures of every size 0..max_n with height exactly ``height`` and width >= height,
    weighted 2 when the width exceeds the height (numba kernel; the same sweep as the reference),
    as exact Python ints in a numpy object array.
    ``weights=False``: every width, each creature once (a check of the reflection argument).
    ``stats``, if given (int64[2]), receives the peak number of states and the states processed.
    ``bound`` picks the lower bound on hexes still to come that prunes states: 3 (default) the
    strongest, 2 without the left hexes of level 3, 1 the column bound alone, 0 (or False) none (states die only when their size alone
    exceeds max_n): slower, and checks that no bound ever cut a creature.
    ``save``, if given, is called with the sweep's state (bytes) and a line saying how far it got
    ("column 12, 3,456 states, 1,234,567 processed") at the end of a column whenever
    ``save_every`` seconds have passed since the start or the last save (and nine times as long as
    the last save took, so that saving costs at most a tenth of the time); ``resume`` continues a
    sweep from such bytes (of the same height, max_n, weights and bound) instead of from scratch.
    One process sweeps every column; jobs/palago_transfer.py splits a height's large columns
    across tasks with the pieces below (docs/palago_transfer.md, section 6)."""
    if not 1 <= height <= _MAX_HEIGHT:
        raise ValueError(f"height must be between 1 and {_MAX_HEIGHT}, not {height}")
    if not 0 <= max_n <= MAX_N:
        raise ValueError(f"max_n must be between 0 and {MAX_N}, not {max_n}")
    if bound not in (0, 1, 2, 3):
        raise ValueError(f"bound must be 0, 1, 2 or 3, not {bound!r}")
    if stats is None:
        stats = np.zeros(2, dtype=np.int64)
    sweep = (height, max_n, bool(weights), int(bound))
    state = SweepState.start(max_n) if resume is None else SweepState.from_bytes(resume, sweep)
    stats[:2] += state.stats
    saver = Saver(save, save_every, sweep)
    spare: tuple | None = None
    while state.count > 0:
        state, spare = advance_column(sweep, state, stats, spare)
        saver.maybe(state)
    return exact_counts(state.done_w, state.done_p, state.done_f)


def advance_column(
    sweep: tuple, state: SweepState, stats: np.ndarray, spare: tuple | None = None
) -> tuple[SweepState, tuple]:
    """``state`` swept over one column in this process: (the state after it, the spare buffers to
    pass to the next call; None: new ones).  stats (int64[2]) gains the column's peak and states
    processed."""
    spare = _NO_SPARE if spare is None else spare
    before = stats[:2].copy()
    done = (state.done_w, state.done_p, state.done_f)
    data, count, c, spare = _sweep_columns(sweep, stats, done, state.data, state.count, state.c, 1, spare)
    after = SweepState(
        data,
        count=count,
        c=c,
        done_w=state.done_w,
        done_p=state.done_p,
        done_f=state.done_f,
        stats=state.stats + (stats[:2] - before),
    )
    return after, spare


def saved_stats(data: bytes) -> np.ndarray:
    """The stats (peak states, states processed) a save of ``count_height`` holds: the part of a
    resumed sweep's stats that an earlier process computed."""
    with np.load(io.BytesIO(data)) as saved:
        return saved["stats"].copy()


class Saver:
    """Calls ``save`` at a column's end once ``every`` seconds have passed since the last save (and
    nine times as long as the last save took, so that saves take at most a tenth of the time)."""

    def __init__(self, save: Callable[[bytes, str], None] | None, every: float, sweep: tuple):
        self.save, self.every, self.sweep = save, every, sweep
        self.last = time.monotonic()
        self.gap = every

    def due(self) -> bool:
        return self.save is not None and time.monotonic() - self.last >= self.gap

    def saved(self, started: float) -> None:
        """A save that began at ``started`` (time.monotonic()) has just been committed."""
        self.last = time.monotonic()
        self.gap = max(self.every, 9 * (self.last - started))

    def maybe(self, state: SweepState) -> None:
        if state.count > 0 and self.due():
            self.now(state)

    def now(self, state: SweepState) -> None:
        if self.save is None:  # a sweep that saves nothing
            return
        saving = time.monotonic()
        self.save(
            state.to_bytes(self.sweep), f"column {state.c}, {state.count:,} states, {int(state.stats[1]):,} processed"
        )
        self.saved(saving)


@dataclass
class SweepState:
    """A sweep between two columns: the generation of states before column ``c`` (``count`` rows
    of ``data`` = (heads, pool), laid out as _sweep_steps reads them; the arrays may have room for
    more, the pool holes), the
    creatures completed so far, and the stats (peak states, states processed) so far."""

    data: tuple[np.ndarray, np.ndarray]
    count: int
    c: int
    done_w: np.ndarray
    done_p: np.ndarray
    done_f: np.ndarray
    stats: np.ndarray

    @classmethod
    def start(cls, max_n: int) -> SweepState:
        """One state before column 0: the empty frontier, polynomial 1."""
        n1 = max_n + 1
        start = Generation.start(n1)
        return cls(
            (start.heads, start.pool),
            1,
            0,
            np.zeros(n1, np.uint64),
            np.zeros(n1, np.int64),
            np.zeros(n1, np.float64),
            np.zeros(2, np.int64),
        )

    def without_rows(self) -> SweepState:
        """This sweep's column, completed creatures and stats, with no states: tasks hold them."""
        empty = _empty_generation()
        return SweepState((empty.heads, empty.pool), 0, self.c, self.done_w, self.done_p, self.done_f, self.stats)

    def add_done(self, piece: PieceSummary) -> None:
        """Add a piece's completed creatures (in place; each channel's own arithmetic)."""
        self.done_w += piece.done_w  # wraps modulo 2^64
        summed = self.done_p + piece.done_p  # both below P < 2^61: no overflow
        self.done_p[:] = np.where(summed >= _P, summed - _P, summed)
        self.done_f += piece.done_f

    def generation_rows(self) -> Generation:
        """The live rows (the arrays have room for more), their pool packed."""
        return Generation(*_compacted(*self.data, self.count))

    def to_bytes(self, sweep: tuple) -> bytes:
        """The live rows only, their pool packed, with the sweep's parameters (height, max_n,
        weights, bound)."""
        live = self.generation_rows()
        buffer = io.BytesIO()
        np.savez(
            buffer,
            sweep=np.array(sweep, np.int64),
            scalars=np.array([self.count, self.c], np.int64),
            heads=live.heads,
            pool=live.pool,
            done_w=self.done_w,
            done_p=self.done_p,
            done_f=self.done_f,
            stats=self.stats,
        )
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, sweep: tuple) -> SweepState:
        with np.load(io.BytesIO(data)) as saved:
            if tuple(saved["sweep"].tolist()) != sweep:
                raise ValueError(
                    f"the saved sweep is of (height, max_n, weights, bound) = {tuple(saved['sweep'].tolist())}, "
                    f"not {sweep}"
                )
            older = _older_layout(saved)
            if older:
                raise ValueError(
                    f"the saved sweep has {older}, a layout this version no longer reads: delete the "
                    "checkpoint to sweep that height afresh"
                )
            count, c = saved["scalars"].tolist()
            return cls(
                (saved["heads"], saved["pool"]),
                count=count,
                c=c,
                **{name: saved[name] for name in ("done_w", "done_p", "done_f", "stats")},
            )


_SweepState = SweepState  # the name tests and benchmarks know it by


def _older_layout(saved) -> str | None:
    """What an older version's save holds (a layout this one no longer reads), or None."""
    if "pool" not in saved.files:
        return "rows as wide as the widest range"
    if saved["heads"].shape[1] != _HEAD:
        return "three channels for every coefficient"
    return None


def fixed_counts(max_n: int, bound: int = 3, halved: bool = True) -> np.ndarray:
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
# (a shuffle per phase): no generation passes through one process while it is split.  These are
# the pure pieces; jobs/palago_transfer.py (SplitSweep) runs them as tasks and saves their buckets.

# The fewest states a task advances: a nested Ray task has a fixed cost, which a piece's sweep over a
# phase of several steps must outweigh (docs/benchmarks.md#palago-sweep-kernels).
PIECE_STATES = 2000
# A phase has as few steps as keep each task at this many state-steps (2,000 states over 5 steps;
# one step once a task holds 10,000 states): the fewer its steps, the more rows its signature has,
# so the more evenly its states spread over many tasks.
PHASE_STATE_STEPS = 10_000
# ... but no fewer steps than leave its signature this many rows beyond log2 of its tasks: every
# phase passes the whole generation through the shuffle (about as costly a state as a step), so a
# split over a few tasks takes long phases (half a column on 2 CPUs) and one over many short ones.
SIGNATURE_SPARE_ROWS = 6
# The most states a task advances, whatever the CPUs: its peak is about 1 kB a state (its input,
# the sweep's buffers and its output buckets; 7.7-8.1 GB for 8 million at n = 60, h013), so a split
# of one task per CPU would bind a height to one node's memory.  More tasks than CPUs queue.
TASK_STATES = 2_000_000


@dataclass(frozen=True)
class Generation:
    """Live states, one per row of ``heads`` (int64[rows, _HEAD]: the key's three words, the span
    (the nonzero range lo, hi and the width), and where the coefficients lo..hi start in ``pool``,
    one exact word each in a narrow row, three channels each in a wide one, as _sweep_steps reads
    them).  ``keys`` is a view; ``channels`` gives the polynomials dense."""

    heads: np.ndarray
    pool: np.ndarray

    @classmethod
    def start(cls, n1: int) -> Generation:
        """The sweep's first generation: the empty frontier, polynomial 1."""
        return cls.pack(
            np.zeros((1, _WORDS), np.int64),
            np.eye(1, n1, dtype=np.uint64),
            np.eye(1, n1, dtype=np.int64),
            np.eye(1, n1, dtype=np.float64),
            np.zeros(1, np.int64),
            np.zeros(1, np.int64),
        )

    @classmethod
    def pack(cls, keys, pw, pp, pf, lo, hi) -> Generation:
        """A generation of these states: keys int64[rows, 3], the polynomials' channels dense (pw
        uint64 mod 2^64, pp int64 mod P, pf float64, each [rows, max_n + 1]) and their ranges lo, hi
        (coefficient lo nonzero; only lo..hi is kept).  A row is narrow when its three channels are
        one and the same integer below 2^53 at every coefficient of its range, wide otherwise."""
        lo, hi = np.asarray(lo, np.int64), np.asarray(hi, np.int64)
        pw, pp, pf = np.asarray(pw, np.uint64), np.asarray(pp, np.int64), np.asarray(pf, np.float64)
        inside = (np.arange(pw.shape[1]) >= lo[:, None]) & (np.arange(pw.shape[1]) <= hi[:, None])
        exact = (pw < _NARROW_LIMIT) & (pp == pw.astype(np.int64)) & (pf == pw.astype(np.float64))
        wide = (inside & ~exact).any(axis=1).astype(np.int64)
        heads = np.zeros((len(keys), _HEAD), np.int64)
        heads[:, :_WORDS] = keys
        heads[:, _SPAN] = lo | (hi << 8) | (wide << 16)
        words = (1 + 2 * wide) * (hi - lo + 1)
        heads[:, _AT] = np.cumsum(words) - words
        pool = np.zeros(int(words.sum()), np.int64)
        channels = [np.ascontiguousarray(values).view(np.int64) for values in (pw, pp, pf)]
        for row in range(len(keys)):
            at, per = heads[row, _AT], 1 + 2 * wide[row]
            for channel in range(per):
                pool[at + channel : at + words[row] : per] = channels[channel][row, lo[row] : hi[row] + 1]
        return cls(heads, pool)

    @property
    def rows(self) -> int:
        return self.heads.shape[0]

    @property
    def keys(self) -> np.ndarray:
        return self.heads[:, :_WORDS]

    @property
    def lo(self) -> np.ndarray:
        return self.heads[:, _SPAN] & 0xFF

    @property
    def hi(self) -> np.ndarray:
        return (self.heads[:, _SPAN] >> 8) & 0xFF

    @property
    def wide(self) -> np.ndarray:
        """1 for a row that holds three channels a coefficient, 0 for one exact word."""
        return (self.heads[:, _SPAN] >> 16) & 1

    @property
    def nbytes(self) -> int:
        """Bytes the states take: their heads and their pool."""
        return self.heads.nbytes + self.pool.nbytes

    def channels(self, n1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The polynomials, dense: (uint64 mod 2^64, int64 mod P, float64), each [rows, n1], zero
        outside lo..hi."""
        dense = np.zeros((3, self.rows, n1), np.int64)
        rows = zip(self.lo.tolist(), self.hi.tolist(), self.wide.tolist(), self.heads[:, _AT].tolist())
        for row, (lo, hi, wide, at) in enumerate(rows):
            words = self.pool[at : at + (1 + 2 * wide) * (hi - lo + 1)]
            if wide:
                for channel in range(3):
                    dense[channel, row, lo : hi + 1] = words[channel::3]
            else:
                dense[:2, row, lo : hi + 1] = words
                dense[2, row, lo : hi + 1] = words.astype(np.float64).view(np.int64)
        return dense[0].view(np.uint64), dense[1], dense[2].view(np.float64)

    def write(self, handle) -> None:
        """Write the rows to an open binary file ``handle`` (numpy's npz), as ``read`` reads them."""
        np.savez(handle, heads=self.heads, pool=self.pool)

    @classmethod
    def read(cls, data: bytes) -> Generation:
        """The rows ``write`` wrote."""
        with np.load(io.BytesIO(data)) as saved:
            return cls(saved["heads"], saved["pool"])

    def take(self, rows: np.ndarray | slice) -> Generation:
        """These rows, their coefficients packed into a pool of their own."""
        heads = self.heads[rows]
        return Generation(*_compacted(heads, self.pool, heads.shape[0]))


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
    steps as give each task PHASE_STATE_STEPS state-steps, or as leave the signature
    SIGNATURE_SPARE_ROWS + log2(tasks) rows if that is more, at most half a column (so that half
    the rows or more make the signature; a whole column would leave none), never past its end."""
    a = 0 if end >= height else end
    tasks = max(tasks, 1)
    steps = max(
        -(-PHASE_STATE_STEPS * tasks // max(states, 1)), height - SIGNATURE_SPARE_ROWS - (tasks - 1).bit_length()
    )
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


@_no_refcounts
def _merge_from(source, first, slots, target, count, used, n1):
    """Rows first.. of the generation ``source`` summed into ``target`` (a row for each new key,
    found through ``slots``) while target's pool has room for a range of n1 coefficients; source
    and target: (heads, pool, the pool's uint64 and float64 views).  Returns (the next row,
    target's row count, its pool words used)."""
    heads = source[0]
    out, pool = target[0], target[1]
    mask = slots.shape[0] - 1
    for s in range(first, heads.shape[0]):
        if pool.shape[0] - used < 3 * n1:
            return s, count, used
        slot, row = _probe(slots, _hash_slot(heads[s], mask), out, heads, s)
        if row < 0:
            _new_row(out, count, heads, s)  # out has a row for every input row
            row = count
            count += 1
            slots[slot] = row
        used = _accumulate(target, row, used, source, s, 0, _span(heads, s)[1], 0)
    return heads.shape[0], count, used


@njit(cache=True, nogil=True)
def _merge_piece(heads, pool, slots, out, out_pool, count, used, n1):
    """The rows of one piece (heads, pool) summed into the merged rows ``out`` (found through
    ``slots``, room for every row) and their pool, grown as needed; returns (out_pool, count,
    used)."""
    source = (heads, pool, pool.view(np.uint64), pool.view(np.float64))
    first = 0
    while first < heads.shape[0]:
        out_pool = _with_room(out_pool, used, 3 * n1 + pool.shape[0] // 4)
        first, count, used = _merge_from(
            source, first, slots, (out, out_pool, out_pool.view(np.uint64), out_pool.view(np.float64)), count, used, n1
        )
    return out_pool, count, used


def merged_rows(pieces: list[Generation], n1: int) -> Generation:
    """merge_generations's rows, read from each piece in place (no copy of them all together) and
    left where the merge wrote them: a pool with holes (where a widened range moved), which the
    sweep reads as it is.  For a task that sweeps them next (advance_piece)."""
    pieces = [piece for piece in pieces if piece.rows]
    if not pieces:
        return _empty_generation()
    rows = sum(piece.rows for piece in pieces)
    size = 64
    while size < 2 * rows:
        size *= 2
    slots = np.full(size, -1, dtype=np.int64)
    out = np.zeros((rows, _HEAD), np.int64)
    out_pool = np.zeros(max(64, sum(piece.pool.shape[0] for piece in pieces)), np.int64)
    count, used = 0, 0
    for piece in pieces:
        out_pool, count, used = _merge_piece(piece.heads, piece.pool, slots, out, out_pool, count, used, n1)
    return Generation(out[:count], out_pool)


def merge_generations(pieces: list[Generation], n1: int) -> Generation:
    """One generation from ``pieces`` (of max_n + 1 = ``n1`` coefficients), rows with equal keys
    summed: the uint64 channel wraps, the mod-P channel adds mod P, float64 adds, ranges widen."""
    merged = merged_rows(pieces, n1)
    return Generation(*_compacted(merged.heads, merged.pool, merged.rows))


def split_generation(generation: Generation, parts: int, height: int, steps: tuple[int, int]) -> list[Generation]:
    """``generation``'s rows in ``parts`` buckets by their signature before the phase of rows
    ``steps`` = (a, b) (b excluded) of a height-``height`` sweep: states that can meet during that
    phase, equal keys among them, land in one bucket."""
    if parts < 1:
        raise ValueError(f"parts must be at least 1, not {parts}")
    bucket = np.zeros(generation.rows, np.int64)
    _bucket_of(generation.heads, generation.rows, height, steps[0], steps[1], parts, bucket)
    order = np.argsort(bucket, kind="stable")
    bounds = np.searchsorted(bucket[order], np.arange(parts + 1))
    return [generation.take(order[bounds[b] : bounds[b + 1]]) for b in range(parts)]


def advance_piece(
    sweep: tuple, c: int, rows: tuple[int, int], following: tuple[int, int], buckets: int, *pieces: Generation
) -> tuple:
    """Merge ``pieces`` (parts of the generation before rows ``rows`` = (a, b) of column ``c``,
    whose signatures no other task holds), sweep those steps and hash the output by the signature
    of the phase of rows ``following`` into ``buckets`` generations.  ``sweep``: (height, max_n,
    weighted, bound).  Returns (PieceSummary, bucket 0, ..., bucket buckets-1)."""
    return advance_generation(sweep, c, rows, following, buckets, [merged_rows(list(pieces), sweep[1] + 1)])


def advance_generation(
    sweep: tuple, c: int, rows: tuple[int, int], following: tuple[int, int], buckets: int, source: list[Generation]
) -> tuple:
    """advance_piece's sweep and bucketing, from a generation whose keys are distinct already (one
    saved bucket, or the merged pieces), handed over in the one-item list ``source``, which is
    emptied: no reference is left to keep its rows once they are swept (an argument would stay
    referenced by the caller until the call returns).  Returns (PieceSummary, bucket 0, ...,
    bucket buckets-1)."""
    merged = source.pop()
    height, n1 = sweep[0], sweep[1] + 1
    stats = np.zeros(2, np.int64)
    done = (np.zeros(n1, np.uint64), np.zeros(n1, np.int64), np.zeros(n1, np.float64))
    data, count, _, spare = _sweep_steps(
        sweep,
        stats,
        done,
        (merged.heads, merged.pool),
        merged.rows,
        c * height + rows[0],
        c * height + rows[1],
        _NO_SPARE,
    )
    del merged, spare  # the swept rows and the buffers not holding the output: freed before the cut
    out = split_generation(Generation(data[0][:count], data[1]), buckets, height, following)
    return (PieceSummary(*done, stats, tuple(piece.rows for piece in out)), *out)


def _empty_generation() -> Generation:
    return Generation(np.zeros((0, _HEAD), np.int64), np.zeros(0, np.int64))


def tasks_for(states: int, parts: int, piece_states: int, task_states: int = TASK_STATES) -> int:
    """Tasks for a phase of ``states`` states: one per CPU among ``parts`` if each gets piece_states,
    and as many more as keep each at most ``task_states``."""
    return max(min(parts, states // piece_states), -(-states // task_states))
