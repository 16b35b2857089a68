"""The numba kernel behind :func:`solvers.nonary.solve.solve`: the same branch and bound as the
pure-Python search in ``solve.py`` (read that module's docstring first), on arrays, with an
explicit stack and an open-addressing memo table.

The kernel is resumable: it runs until the search ends, a node budget is spent (so the Python
wrapper can look at the clock) or the memo table needs to grow, and keeps everything it needs
to continue in the arrays it was given.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["DONE", "PAUSED", "GROW", "Tables", "new_memo", "grow_memo", "search"]

# What search() returns.
DONE = 0  # the search is over: best / best path hold the answer
PAUSED = 1  # the node budget of this call is spent; call again to continue
GROW = 2  # the memo table is half full; grow it with grow_memo() and call again

# Slots of the small int64 array `ctl` that carries the search's scalars across calls.
C_DEPTH, C_BEST, C_BEST_LEN, C_TARGET, C_NODES, C_STARTED, C_MEMO_COUNT = range(7)
CTL_SIZE = 7

MAX_NINES = 3  # 3 groups of at least 3 players cover all 9


class Tables:
    """Lookup tables shared by every search (built once per process).

    group_start: int64[512 * 9 + 1]; the groups for (mask, residue) are
                 group_list[group_start[mask * 9 + residue] : group_start[mask * 9 + residue + 1]]
    group_list:  int64[...] submasks of 3..5 players, largest first
    cover:       int64[512 * 4]; cover[mask * 4 + k]: most players of mask that k disjoint groups
                 with a sum divisible by 9 can hold
    """

    def __init__(self, groups: list[tuple[int, ...]], cover: list[tuple[int, ...]]) -> None:
        self.group_start = np.zeros(512 * 9 + 1, dtype=np.int64)
        self.group_start[1:] = np.cumsum([len(g) for g in groups])
        self.group_list = np.array([g for gs in groups for g in gs], dtype=np.int64)
        self.cover = np.array([c for row in cover for c in row], dtype=np.int64)


def new_memo(capacity: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An empty memo table of ``capacity`` slots (a power of two): keys a, keys b, values."""
    return (np.zeros(capacity, dtype=np.int64), np.zeros(capacity, dtype=np.int64), np.zeros(capacity, dtype=np.int64))


@njit(cache=True, inline="always")
def _slot(key_a: int, key_b: int, capacity: int) -> int:
    """First probe position of key (key_a, key_b) in a table of ``capacity`` (power of two)."""
    h = (key_a * 0x9E3779B97F4A7C15 + key_b * 0xC2B2AE3D27D4EB4F) & 0x7FFFFFFFFFFFFFFF
    return (h >> 17) & (capacity - 1)


@njit(cache=True)
def _memo_find(keys_a, keys_b, key_a, key_b):
    """Slot holding the key, or the empty slot where it would go (key_a is never 0)."""
    capacity = keys_a.shape[0]
    i = _slot(key_a, key_b, capacity)
    while keys_a[i] != 0 and (keys_a[i] != key_a or keys_b[i] != key_b):
        i = (i + 1) & (capacity - 1)
    return i


@njit(cache=True)
def _rehash(old_a, old_b, old_v, new_a, new_b, new_v):
    """Copy every entry of the old memo arrays into the (empty, larger) new ones."""
    for i in range(old_a.shape[0]):
        if old_a[i] != 0:
            j = _memo_find(new_a, new_b, old_a[i], old_b[i])
            new_a[j] = old_a[i]
            new_b[j] = old_b[i]
            new_v[j] = old_v[i]


def grow_memo(memo: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A memo table twice the size of ``memo`` holding the same entries."""
    bigger = new_memo(2 * memo[0].shape[0])
    _rehash(*memo, *bigger)
    return bigger


@njit(cache=True, inline="always")
def _popcount(x: int) -> int:
    """Number of set bits of a 9-bit mask."""
    n = 0
    while x:
        x &= x - 1
        n += 1
    return n


@njit(cache=True)
def _enter(d, f_occ, f_counts, f_avail, f_esc, f_bound, f_known, f_result, f_type, f_next, f_end,
           t_src, t_dst, t_off, t_field, nines, cover, keys_a, keys_b, values, ctl):
    """Canonicalise the state in frame ``d`` (drop stuck players and useless doors), bound it and
    look it up.  Returns the state's upper bound when it can be cut at once, else -1 after
    preparing the frame for expansion.

    f_occ: int64[depth, rooms] occupancy masks; f_counts / f_avail / f_esc: int64[depth] packed
    unused-door counts, bitmask of types with unused doors, players escaped so far.
    """
    rooms = f_occ.shape[1]
    types = t_src.shape[0]
    avail = f_avail[d]
    # Rooms that can reach an unused door 9 through unused doors.
    live = 0
    for t in range(nines):
        if avail >> t & 1:
            live |= 1 << t_src[t]
    grown = True
    while grown:
        grown = False
        for t in range(nines, types):
            if avail >> t & 1 and live >> t_dst[t] & 1 and not live >> t_src[t] & 1:
                live |= 1 << t_src[t]
                grown = True
    # Players in dead rooms are gone; rooms with 3 or more players are active.
    active = 0
    small = 0
    for r in range(rooms):
        if not live >> r & 1:
            f_occ[d, r] = 0
        m = f_occ[d, r]
        if m:
            if _popcount(m) >= 3:
                active |= 1 << r
            else:
                small |= 1 << r
    # Rooms the active ones can reach: only these can ever be left.
    reach = active
    grown = True
    while grown:
        grown = False
        for t in range(nines, types):
            if avail >> t & 1 and reach >> t_src[t] & 1 and live >> t_dst[t] & 1 and not reach >> t_dst[t] & 1:
                reach |= 1 << t_dst[t]
                grown = True
    alive = 0
    for r in range(rooms):
        if small >> r & 1 and not reach >> r & 1:
            f_occ[d, r] = 0
        alive |= f_occ[d, r]
    counts = f_counts[d]
    door_nines = 0
    for t in range(types):
        if avail >> t & 1:
            if reach >> t_src[t] & 1 and (t < nines or live >> t_dst[t] & 1):
                if t < nines:
                    door_nines += (counts >> t_off[t]) & t_field[t]
            else:
                avail &= ~(1 << t)
                counts &= ~(t_field[t] << t_off[t])
    f_avail[d] = avail
    f_counts[d] = counts
    bound = cover[alive * 4 + min(door_nines, MAX_NINES)]
    if ctl[C_STARTED] == 0:
        ctl[C_TARGET] = bound
        ctl[C_STARTED] = 1
    best = ctl[C_BEST]
    if f_esc[d] + bound <= best:
        return bound
    # Memo key: each player's room + 1 (0 when gone) in 4 bits, and the unused-door counts.
    key_a = 0
    for r in range(rooms):
        m = f_occ[d, r]
        p = 0
        while m:
            if m & 1:
                key_a |= (r + 1) << (4 * p)
            m >>= 1
            p += 1
    slot = _memo_find(keys_a, keys_b, key_a, counts)
    known = -1
    if keys_a[slot] != 0:
        known = values[slot]
        if f_esc[d] + known <= best:
            return known
        bound = min(bound, known)
    f_bound[d] = bound
    f_known[d] = known
    f_result[d] = 0
    f_type[d] = -1
    f_next[d] = 0
    f_end[d] = 0
    return -1


@njit(cache=True)
def _remember(d, f_occ, f_counts, value, keys_a, keys_b, values, ctl):
    """Store ``value`` as the upper bound of the (canonical) state in frame ``d``."""
    rooms = f_occ.shape[1]
    key_a = 0
    for r in range(rooms):
        m = f_occ[d, r]
        p = 0
        while m:
            if m & 1:
                key_a |= (r + 1) << (4 * p)
            m >>= 1
            p += 1
    slot = _memo_find(keys_a, keys_b, key_a, f_counts[d])
    if keys_a[slot] == 0:
        keys_a[slot] = key_a
        keys_b[slot] = f_counts[d]
        values[slot] = value
        ctl[C_MEMO_COUNT] += 1
    elif value < values[slot]:
        values[slot] = value


@njit(cache=True)
def search(f_occ, f_counts, f_avail, f_esc, f_gain, f_bound, f_known, f_result, f_type, f_next, f_end,
           path_type, path_group, best_type, best_group,
           t_num, t_src, t_dst, t_off, t_field, nines,
           group_start, group_list, cover, keys_a, keys_b, values, ctl, node_budget):
    """Run (or resume) the branch and bound.  Frame 0 must hold the start state on the first call.

    Frames (one per depth, depth <= number of doors + 1), all int64:
      f_occ[depth, rooms]  occupancy masks         f_counts, f_avail, f_esc  the state
      f_gain               players the move into this frame let escape
      f_bound, f_known     upper bound, memo value (-1: none) of the state
      f_result             best value found below the frame so far
      f_type, f_next, f_end  move cursor: current type, next / end index into group_list
    path_type/path_group[depth]: the moves of the current path; best_type/best_group the best one.
    Types (arrays of length types): residue, from room, to room (-1: exit), bit offset and field
    mask of the type's count in f_counts; types 0..nines-1 are doors 9.
    Returns DONE, PAUSED (node_budget spent) or GROW (memo half full).
    """
    capacity = keys_a.shape[0]
    if ctl[C_STARTED] == 0:
        ctl[C_DEPTH] = 0
        first = _enter(0, f_occ, f_counts, f_avail, f_esc, f_bound, f_known, f_result, f_type, f_next, f_end,
                       t_src, t_dst, t_off, t_field, nines, cover, keys_a, keys_b, values, ctl)
        ctl[C_NODES] += 1
        if first >= 0 or ctl[C_TARGET] == 0:
            return DONE
    d = ctl[C_DEPTH]
    budget_end = ctl[C_NODES] + node_budget
    types = t_src.shape[0]
    while True:
        if ctl[C_NODES] >= budget_end:
            ctl[C_DEPTH] = d
            return PAUSED
        if 2 * ctl[C_MEMO_COUNT] >= capacity:
            ctl[C_DEPTH] = d
            return GROW
        best = ctl[C_BEST]
        finished = f_esc[d] + f_bound[d] <= best
        if finished:
            f_result[d] = f_bound[d]
        else:
            # Advance the cursor to the next type with a group to move, if the current one is spent.
            while f_next[d] >= f_end[d]:
                t = f_type[d] + 1
                while t < types:
                    if f_avail[d] >> t & 1 and _popcount(f_occ[d, t_src[t]]) >= 3:
                        break
                    t += 1
                f_type[d] = t
                if t >= types:
                    finished = True
                    break
                index = f_occ[d, t_src[t]] * 9 + t_num[t]
                f_next[d] = group_start[index]
                f_end[d] = group_start[index + 1]
        if finished:
            value = min(f_result[d], f_bound[d])
            if f_known[d] < 0 or value < f_known[d]:
                _remember(d, f_occ, f_counts, value, keys_a, keys_b, values, ctl)
            if d == 0:
                return DONE
            d -= 1
            value += f_gain[d + 1]
            if value > f_result[d]:
                f_result[d] = value
            continue
        t = f_type[d]
        group = group_list[f_next[d]]
        f_next[d] += 1
        # Build the child state in frame d + 1.
        c = d + 1
        src = t_src[t]
        dst = t_dst[t]
        for r in range(f_occ.shape[1]):
            f_occ[c, r] = f_occ[d, r]
        f_occ[c, src] ^= group
        gain = 0
        if dst < 0:
            gain = _popcount(group)
        else:
            f_occ[c, dst] |= group
        f_counts[c] = f_counts[d] - (1 << t_off[t])
        f_avail[c] = f_avail[d]
        if (f_counts[c] >> t_off[t]) & t_field[t] == 0:
            f_avail[c] &= ~(1 << t)
        f_esc[c] = f_esc[d] + gain
        f_gain[c] = gain
        path_type[d] = t
        path_group[d] = group
        if f_esc[c] > best:
            ctl[C_BEST] = f_esc[c]
            ctl[C_BEST_LEN] = c
            for i in range(c):
                best_type[i] = path_type[i]
                best_group[i] = path_group[i]
            if f_esc[c] >= ctl[C_TARGET]:
                return DONE
        ctl[C_NODES] += 1
        value = _enter(c, f_occ, f_counts, f_avail, f_esc, f_bound, f_known, f_result, f_type, f_next, f_end,
                       t_src, t_dst, t_off, t_field, nines, cover, keys_a, keys_b, values, ctl)
        if value >= 0:
            value += gain
            if value > f_result[d]:
                f_result[d] = value
        else:
            d = c
