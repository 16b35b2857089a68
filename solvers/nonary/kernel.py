"""The numba kernel behind :func:`solvers.nonary.solve.solve`: the branch and bound described in
``solve.py``'s docstring (read it first) on arrays, with an explicit stack, an open-addressing
memo table, and one more cut that the pure-Python search lacks: the escape test
(:func:`_escapes_possible`), which joins residues with exit capacities.

The kernel is resumable: it runs until the search ends, a node budget is spent (so the Python
wrapper can look at the clock) or a table needs to grow, and keeps everything it needs to
continue in the arrays it was given.
"""

from __future__ import annotations

from functools import cache

import numpy as np
from numba import njit

__all__ = ["DONE", "PAUSED", "GROW", "GROW_NETS", "Tables", "new_memo", "grow_memo", "Nets", "search"]

# What search() returns.
DONE = 0  # the search is over: best / best path hold the answer
PAUSED = 1  # the node budget of this call is spent; call again to continue
GROW = 2  # the memo table is half full; grow it with grow_memo() (or set C_MEMO_FROZEN) and call again
GROW_NETS = 3  # the nets table is half full; grow it with Nets.grow() (or set C_NETS_FROZEN) and call again

# Slots of the small int64 array `ctl` that carries the search's scalars across calls.
(
    C_DEPTH,
    C_BEST,
    C_BEST_LEN,
    C_TARGET,
    C_NODES,
    C_STARTED,
    C_MEMO_COUNT,
    C_MEMO_FROZEN,
    C_NETS_COUNT,
    C_NETS_FROZEN,
) = range(10)
CTL_SIZE = 10

MAX_RESIDUE_COORDS = 3  # rooms whose residues the escape test tracks
MAX_NET_STATES = 9**4  # bits per door multiset in the escape test's cache

MAX_NINES = 3  # 3 groups of at least 3 players cover all 9


# Columns of the per-mask table Tables.masks.
M_RESIDUE = 4  # sum of the mask's players, modulo 9 (columns 0..3: cover with 0..3 doors 9)
M_SPREAD = 5  # the mask with player p moved to bit 6 * (p - 1), for memo keys


class Tables:
    """Lookup tables shared by every search (built once per process).

    group_start: int64[512 * 9 + 1]; the groups for (mask, residue) are
                 group_list[group_start[mask * 9 + residue] : group_start[mask * 9 + residue + 1]]
    group_list:  int64[...] submasks of 3..5 players, largest first (tried first through a door 9)
    group_small: int64[...] the same, smallest first (tried first through other doors: small
                 groups leave more choice behind)
    masks:       int64[512, 6]; for each mask of players: columns 0..3 the most of them that 0..3
                 disjoint groups with a sum divisible by 9 can hold, M_RESIDUE, M_SPREAD
    """

    def __init__(self, groups: list[tuple[int, ...]], cover: list[tuple[int, ...]]) -> None:
        self.group_start = np.zeros(512 * 9 + 1, dtype=np.int64)
        self.group_start[1:] = np.cumsum([len(g) for g in groups])
        self.group_list = np.array([g for gs in groups for g in gs], dtype=np.int64)
        self.group_small = np.array([g for gs in groups for g in reversed(gs)], dtype=np.int64)
        players = [[p for p in range(9) if m >> p & 1] for m in range(512)]
        self.masks = np.array(
            [(*cover[m], sum(p + 1 for p in players[m]) % 9, sum(1 << 6 * p for p in players[m])) for m in range(512)],
            dtype=np.int64,
        )

    def arrays(self) -> tuple:
        """The tables in the order :func:`search` takes them."""
        return self.group_start, self.group_list, self.group_small, self.masks


_VALUE_SHIFT = 56  # a memo slot is [key_a | value << 56, key_b]; key_a uses 54 bits
_KEY_MASK = (1 << _VALUE_SHIFT) - 1


def new_memo(capacity: int) -> np.ndarray:
    """An empty memo table of ``capacity`` slots (a power of two), int64[capacity, 2]."""
    return np.zeros((capacity, 2), dtype=np.int64)


@njit(cache=True, inline="always")
def _slot(key_a: int, key_b: int, capacity: int) -> int:
    """First probe position of key (key_a, key_b) in a table of ``capacity`` (power of two)."""
    h = (key_a * 0x9E3779B97F4A7C15 + key_b * 0xC2B2AE3D27D4EB4F) & 0x7FFFFFFFFFFFFFFF
    return (h >> 17) & (capacity - 1)


@njit(cache=True)
def _memo_find(memo, key_a, key_b):
    """Slot holding the key, or the empty slot where it would go (key_a is never 0)."""
    capacity = memo.shape[0]
    i = _slot(key_a, key_b, capacity)
    while memo[i, 0] != 0 and ((memo[i, 0] & _KEY_MASK) != key_a or memo[i, 1] != key_b):
        i = (i + 1) & (capacity - 1)
    return i


@njit(cache=True)
def _rehash(old, new):
    """Copy every entry of the old memo table into the (empty, larger) new one."""
    for i in range(old.shape[0]):
        if old[i, 0] != 0:
            j = _memo_find(new, old[i, 0] & _KEY_MASK, old[i, 1])
            new[j, 0] = old[i, 0]
            new[j, 1] = old[i, 1]


def grow_memo(memo: np.ndarray) -> np.ndarray:
    """A memo table twice the size of ``memo`` holding the same entries."""
    bigger = new_memo(2 * memo.shape[0])
    _rehash(memo, bigger)
    return bigger


@cache
def _digits(coordinates: int) -> np.ndarray:
    """int64[9 ** coordinates, coordinates]: the base-9 digits of every vector index."""
    index = np.arange(9**coordinates, dtype=np.int64)
    return index[:, None] // 9 ** np.arange(coordinates, dtype=np.int64)[None, :] % 9


def _moved(digits: np.ndarray, src: int, dst: int, number: int) -> np.ndarray:
    """Index of every vector after a door moves ``number`` from coordinate src to coordinate dst
    (-1: a room left out, whose residue is implied)."""
    coordinates = digits.shape[1]
    moved = digits.copy()
    if src >= 0:
        moved[:, src] = (moved[:, src] - number) % 9
    if dst >= 0:
        moved[:, dst] = (moved[:, dst] + number) % 9
    return moved @ (9 ** np.arange(coordinates, dtype=np.int64))


class Nets:
    """The escape test's tables (see :func:`_escapes_possible`) for one graph.

    A *net* is what a sub-multiset U of the unused non-9 doors does: the residue it moves into
    each tracked room, and for each tracked exit room (a room with doors 9) how many of U's doors
    lead into it (0, 1, or 2 meaning 2 or more).  Index: v + size * f, with
      v = sum(x_c * 9 ** c) over the tracked rooms c (at most 3, and never all rooms: the rooms
          left out form one implied room, since the residues moved sum to 0), size = 9 ** coords;
      f = sum(c_j * 3 ** j) over the tracked exits (the most entry-limited ones first, as many as
          keep size * 3 ** exits within MAX_NET_STATES).

    coord:  int64[rooms] each room's coordinate in v, or -1 when left out
    perm:   int64[types, size] the residue index after one more door of each type
    fstep:  int64[types, flags] the exit-count index after one more door of each type
    exits:  int64[exit rooms] every room with doors 9, the tracked ones first
    keys:   int64[capacity] packed counts of non-9 doors + 1 (0: empty slot)
    rows:   int64[capacity] row of the key's nets in pool
    pool:   uint8[capacity // 2 + 1, (size * flags + 7) // 8] bitsets: bit set where some U has that net
    fany:   int64[capacity // 2 + 1] bit f set when some U has exit counts f
    buf:    int64[size * flags + 2 * rooms + flags] scratch: _net_fill's list of indices, then the
            escape test's door counts per room and capacities per exit-count index
    """

    def __init__(self, types: list[tuple[int, int, int]], rooms: int, capacity: int = 1 << 6) -> None:
        exits = _exit_order(types)
        tracked_rooms = _tracked_rooms(types, rooms, exits)
        size = 9 ** len(tracked_rooms)
        tracked = 0
        while tracked < len(exits) and size * 3 ** (tracked + 1) <= MAX_NET_STATES:
            tracked += 1
        flags = 3**tracked
        self.coord = np.full(rooms, -1, dtype=np.int64)
        self.coord[tracked_rooms] = np.arange(len(tracked_rooms))
        self.exits = np.array(exits, dtype=np.int64)
        self.perm = np.zeros((len(types), size), dtype=np.int64)
        self.fstep = np.zeros((len(types), flags), dtype=np.int64)
        digits = _digits(len(tracked_rooms))
        for t, (number, src, dst) in enumerate(types):
            if dst >= 0:
                self.perm[t] = _moved(digits, self.coord[src], self.coord[dst], number)
                self.fstep[t] = _counted(tracked, exits.index(dst) if dst in exits[:tracked] else -1)
        self._allocate(capacity, size * flags, rooms)

    def _allocate(self, capacity: int, states: int, rooms: int) -> None:
        self.keys = np.zeros(capacity, dtype=np.int64)
        self.rows = np.zeros(capacity, dtype=np.int64)
        self.pool = np.zeros((capacity // 2 + 1, (states + 7) // 8), dtype=np.uint8)
        self.fany = np.zeros(capacity // 2 + 1, dtype=np.int64)
        self.buf = np.zeros(states + 2 * rooms + self.fstep.shape[1], dtype=np.int64)

    def grow(self, used: int) -> None:
        """Double the capacity, keeping the ``used`` rows already computed."""
        keys, rows, pool, fany = self.keys, self.rows, self.pool, self.fany
        self._allocate(2 * keys.shape[0], self.perm.shape[1] * self.fstep.shape[1], self.coord.shape[0])
        self.pool[:used] = pool[:used]
        self.fany[:used] = fany[:used]
        _net_rehash(keys, rows, self.keys, self.rows)

    @property
    def nbytes(self) -> int:
        return self.pool.nbytes + self.keys.nbytes + self.rows.nbytes + self.fany.nbytes

    def arrays(self) -> tuple:
        """The arrays in the order :func:`search` takes them."""
        return self.coord, self.perm, self.fstep, self.exits, self.keys, self.rows, self.pool, self.fany, self.buf


def _exit_order(types: list[tuple[int, int, int]]) -> list[int]:
    """Rooms with doors 9, those with the fewest doors in first (where the test bites most)."""
    exits = {src for _, src, dst in types if dst < 0}
    entries = {room: sum(1 for _, _, dst in types if dst == room) for room in exits}
    return sorted(exits, key=lambda room: (entries[room], room))


def _tracked_rooms(types: list[tuple[int, int, int]], rooms: int, exits: list[int]) -> list[int]:
    """Rooms whose residues the test tracks: exit rooms first, then the busiest, at most
    MAX_RESIDUE_COORDS and never all (the rest form the implied room)."""
    degree = [0] * rooms
    for _, src, dst in types:
        for room in (src, dst):
            if room >= 0:
                degree[room] += 1
    order = sorted(range(rooms), key=lambda room: (room not in exits, -degree[room], room))
    return order[: min(rooms - 1, MAX_RESIDUE_COORDS)]


def _counted(exits: int, into: int) -> np.ndarray:
    """int64[3 ** exits]: each exit-count index after one more door into tracked exit ``into``
    (-1: into none), counts capped at 2."""
    out = np.arange(3**exits, dtype=np.int64)
    if into >= 0:
        digit = out // 3**into % 3
        out = out + np.where(digit < 2, 3**into, 0)
    return out


@njit(cache=True)
def _net_find(net_keys, key):
    """Slot holding ``key`` in the nets table, or the empty slot where it would go."""
    capacity = net_keys.shape[0]
    i = _slot(key, key, capacity)
    while net_keys[i] != 0 and net_keys[i] != key:
        i = (i + 1) & (capacity - 1)
    return i


@njit(cache=True)
def _net_rehash(old_keys, old_rows, new_keys, new_rows):
    """Copy every entry of the old nets table into the (empty, larger) new one."""
    for i in range(old_keys.shape[0]):
        if old_keys[i] != 0:
            j = _net_find(new_keys, old_keys[i])
            new_keys[j] = old_keys[i]
            new_rows[j] = old_rows[i]


@njit(cache=True)
def _escapes_possible(occ, alive, counts, avail, need, layout, masks, nets, ctl):  # noqa: C901 -- a compiled kernel: one body keeps its loops and locals in one frame
    """False when ``need`` more players provably cannot escape from occupancy ``occ`` (a frame's
    int64[rooms] row; ``alive``: the union of its masks, which the caller has) with the unused doors
    ``counts`` / ``avail``.

    layout = (t_src, t_off, t_field, nines), as :func:`search` takes them; nets = ``Nets.arrays()``.
    A relaxation over the multiset U of non-9 doors a plan will still use:
      * residues: each non-9 door [n, a, b] moves n (mod 9) of player-number sum from room a to
        room b, doors 9 move multiples of 9; so room r ends with its sum now plus U's net residue
        into r.  When everyone alive must escape, every room ends at 0; when one player p may
        stay, the escapers' sum is 0, so p = sum(alive) mod 9 and p's room ends at p (tested only
        when at most one may stay);
      * exits: at exit room X at most 5 escape per unused door 9 there, and only the players in X
        now plus at most 5 per door of U leading into X;
      * rooms: at most 5 players leave a room per unused door out of it, so the others stay.
    The nets of every U are computed once per multiset of unused non-9 doors (cached).
    """
    coord, perm, fstep, exits, net_keys, net_rows, net_pool, net_fany, net_buf = nets
    rooms = occ.shape[0]
    size = perm.shape[1]
    flags = fstep.shape[1]
    out = size * flags  # this test's scratch in net_buf (before it: _net_fill's list)
    stay = _popcount(alive) - need
    _doors_out(counts, avail, layout, rooms, net_buf, out)
    if _stuck_at_least(occ, net_buf, out) > stay:
        return False
    capacity = out + 2 * rooms
    most = _exit_capacity(occ, exits, flags, net_buf, out)
    if stay > 1 and net_buf[capacity] >= need:
        return True  # the plan using no more non-9 doors passes: nothing to learn from the nets
    if most < need:
        return False
    row, new = _net_row(counts, layout, net_keys, net_rows, ctl)
    if new:
        _net_fill(row, counts, layout, perm, fstep, net_pool, net_fany, net_buf)
    if row == -2:
        return True  # the table is full and frozen: no test
    target = 0  # the residues every room must end with when nobody stays
    for r in range(rooms):
        if coord[r] >= 0:
            target += (9 - masks[occ[r], M_RESIDUE]) % 9 * 9 ** coord[r]
    total = masks[alive, M_RESIDUE]
    for f in range(flags):
        if net_buf[capacity + f] < need:
            continue
        if stay > 1:
            if row == -1 and f == 0 or row >= 0 and net_fany[row] >> f & 1:
                return True
            continue
        if total == 0 and _has(row, target + size * f, net_pool):
            return True
        if total != 0 and stay == 1 and alive >> (total - 1) & 1:
            if _has(row, target + size * f, net_pool):  # the stayer in the implied room
                return True
            weight = 1
            while weight < size:  # the stayer in a tracked room
                digit = target // weight % 9
                moved = target + ((digit + total) % 9 - digit) * weight
                if _has(row, moved + size * f, net_pool):
                    return True
                weight *= 9
    return False


@njit(cache=True)
def _doors_out(counts, avail, layout, rooms, buf, out):
    """Count the unused doors out of each room r in buf[out + r], and the unused doors 9 out of it
    in buf[out + rooms + r]."""
    t_src, t_off, t_field, nines = layout
    for r in range(2 * rooms):
        buf[out + r] = 0
    for t in range(t_src.shape[0]):
        if avail >> t & 1:
            doors = (counts >> t_off[t]) & t_field[t]
            buf[out + t_src[t]] += doors
            if t < nines:
                buf[out + rooms + t_src[t]] += doors


@njit(cache=True)
def _stuck_at_least(occ, buf, out):
    """How many players of occupancy ``occ`` can never leave their room: past 5 per unused door
    out (counted in buf[out:] by :func:`_doors_out`)."""
    stuck = 0
    for r in range(occ.shape[0]):
        stuck += max(0, _popcount(occ[r]) - 5 * buf[out + r])
    return stuck


@njit(cache=True)
def _exit_capacity(occ, exits, flags, buf, out):
    """Fill buf[out + 2 * rooms + f], for each exit-count index f < flags, with the most players
    who can escape if the doors a plan still uses lead into the tracked exits as f says (untracked
    exits count 5 a door 9; doors 9 counted in buf[out:] by :func:`_doors_out`).  Returns the
    largest."""
    rooms = occ.shape[0]
    capacity = out + 2 * rooms
    for f in range(flags):
        buf[capacity + f] = 0
    weight = 1
    for j in range(exits.shape[0]):
        room = exits[j]
        doors = buf[out + rooms + room]
        here = _popcount(occ[room])
        for f in range(flags):
            if weight < flags:
                buf[capacity + f] += min(5 * doors, here + 5 * (f // weight % 3))
            else:
                buf[capacity + f] += 5 * doors
        weight *= 3
    most = 0
    for f in range(flags):
        most = max(most, buf[capacity + f])
    return most


@njit(cache=True)
def _net_row(counts, layout, net_keys, net_rows, ctl):
    """(row, new): the row of the nets for the unused non-9 doors in ``counts``, and whether it
    was just reserved (then :func:`_net_fill` must fill it).  Row -1: no non-9 door is left;
    -2: the doors are new and the table is frozen."""
    _, t_off, t_field, nines = layout
    key = counts
    for t in range(nines):
        key &= ~(t_field[t] << t_off[t])
    key += 1  # 0 marks an empty slot
    if key == 1:
        return -1, False
    slot = _net_find(net_keys, key)
    if net_keys[slot] != 0:
        return net_rows[slot], False
    if ctl[C_NETS_FROZEN]:
        return -2, False
    row = ctl[C_NETS_COUNT]
    ctl[C_NETS_COUNT] += 1
    net_keys[slot] = key
    net_rows[slot] = row
    return row, True


@njit(cache=True)
def _net_fill(row, counts, layout, perm, fstep, net_pool, net_fany, net_buf):
    """Set, in row ``row`` of the pool, the bit of the net of every sub-multiset of the unused
    non-9 doors in ``counts``, and their exit-count indices in fany."""
    _, t_off, t_field, nines = layout
    size = perm.shape[1]
    for i in range(net_pool.shape[1]):
        net_pool[row, i] = 0
    net_pool[row, 0] = 1
    net_buf[0] = 0  # net_buf lists the indices set so far, in order
    filled = 1
    for t in range(nines, perm.shape[0]):
        for _ in range((counts >> t_off[t]) & t_field[t]):
            before = filled  # each door once: only what was there before it moves through it
            for k in range(before):
                index = net_buf[k]
                f = index // size
                moved = perm[t, index - f * size] + size * fstep[t, f]
                if not net_pool[row, moved >> 3] >> (moved & 7) & 1:
                    net_pool[row, moved >> 3] |= 1 << (moved & 7)
                    net_buf[filled] = moved
                    filled += 1
    fany = 0
    for k in range(filled):
        fany |= 1 << (net_buf[k] // size)
    net_fany[row] = fany


@njit(cache=True, inline="always")
def _has(row, index, net_pool):
    """Whether the nets in ``row`` (-1: no non-9 door left, only the empty U) hold ``index``."""
    if row == -1:
        return index == 0
    return net_pool[row, index >> 3] >> (index & 7) & 1 == 1


@njit(cache=True, inline="always")
def _popcount(x: int) -> int:
    """Number of set bits of a 9-bit mask."""
    n = 0
    while x:
        x &= x - 1
        n += 1
    return n


@njit(cache=True, inline="always")
def _enter(d, frames, doors, tables, memo, ctl, nets):  # noqa: C901 -- a compiled kernel: one body keeps its loops and locals in one frame
    """Canonicalise the state in frame ``d`` (drop stuck players and useless doors), bound it and
    look it up.  Returns the state's upper bound when it can be cut at once, else -1 after
    preparing the frame for expansion.

    frames and doors as :func:`search` takes them: f_occ int64[depth, rooms] occupancy masks;
    f_counts / f_avail / f_esc int64[depth] packed unused-door counts, bitmask of types with unused
    doors, players escaped so far.  Inlined into search: each call site compiles to the same 27
    reference-count increments as with the arrays passed one by one (optimised LLVM IR, compared).
    """
    f_occ, f_counts, f_avail, f_esc, _, f_bound, f_known, f_result, f_type, f_next, f_end, f_key = frames
    _, t_src, t_dst, t_off, t_field, nines = doors
    masks = tables[3]
    rooms = f_occ.shape[1]
    types = t_src.shape[0]
    avail = f_avail[d]
    best = ctl[C_BEST]
    # A first, cheap bound on the raw state: most moves are cut here.
    alive = 0
    for r in range(rooms):
        alive |= f_occ[d, r]
    door_nines = 0
    for t in range(nines):
        if avail >> t & 1:
            door_nines += (f_counts[d] >> t_off[t]) & t_field[t]
    bound = masks[alive, min(door_nines, MAX_NINES)]
    if f_esc[d] + bound <= best and ctl[C_STARTED]:
        return bound
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
    bound = masks[alive, min(door_nines, MAX_NINES)]
    if ctl[C_STARTED] == 0:
        ctl[C_TARGET] = bound
        ctl[C_STARTED] = 1
    if f_esc[d] + bound <= best:
        return bound
    # Memo key: each player's room + 1 (0 when gone) in 6 bits, and the unused-door counts.
    key_a = 0
    for r in range(rooms):
        key_a += masks[f_occ[d, r], M_SPREAD] * (r + 1)
    f_key[d] = key_a
    slot = _memo_find(memo, key_a, counts)
    known = -1
    if memo[slot, 0] != 0:
        known = memo[slot, 0] >> _VALUE_SHIFT
        if f_esc[d] + known <= best:
            return known
        bound = min(bound, known)
    # A fresh tuple, dropped after the call: passing `doors` itself would keep it alive through
    # _enter, 5 more reference counts a node (optimised LLVM IR).
    if not _escapes_possible(
        f_occ[d], alive, counts, avail, best + 1 - f_esc[d], (t_src, t_off, t_field, nines), masks, nets, ctl
    ):
        return best - f_esc[d]
    f_bound[d] = bound
    f_known[d] = known
    f_result[d] = 0
    f_type[d] = -1
    f_next[d] = 0
    f_end[d] = 0
    return -1


@njit(cache=True)
def _remember(d, f_key, f_counts, value, memo, ctl):
    """Store ``value`` as the upper bound of the (canonical) state in frame ``d``."""
    slot = _memo_find(memo, f_key[d], f_counts[d])
    if memo[slot, 0] == 0:
        if ctl[C_MEMO_FROZEN]:
            return  # no room for new states: the memo only speeds the search up
        memo[slot, 1] = f_counts[d]
        ctl[C_MEMO_COUNT] += 1
    memo[slot, 0] = f_key[d] | (value << _VALUE_SHIFT)


@njit(cache=True)
def search(frames, paths, doors, tables, memo, ctl, node_budget, nets):  # noqa: C901 -- a compiled kernel: one body keeps its loops and locals in one frame
    """Run (or resume) the branch and bound.  Frame 0 must hold the start state on the first call.

    The arrays come in tuples, unpacked once here (a tuple of arrays is passed as its members; the
    unpacking adds 17 reference-count increments per call of search, none per node):
      frames = (f_occ, f_counts, f_avail, f_esc, f_gain, f_bound, f_known, f_result, f_type, f_next,
                f_end, f_key)
      paths  = (path_type, path_group, best_type, best_group)
      doors  = (t_num, t_src, t_dst, t_off, t_field, nines)

    Frames (one per depth, depth <= number of doors + 1), all int64:
      f_occ[depth, rooms]  occupancy masks         f_counts, f_avail, f_esc  the state
      f_gain               players the move into this frame let escape
      f_bound, f_known     upper bound, memo value (-1: none) of the state
      f_result             best value found below the frame so far
      f_type, f_next, f_end  move cursor: current type, next / end index into group_list
                           (doors 9) or group_small (other doors)
      f_key                the state's memo key (each player's room + 1 in 6 bits)
    path_type/path_group[depth]: the moves of the current path; best_type/best_group the best one.
    Types (arrays of length types): residue, from room, to room (-1: exit), bit offset and field
    mask of the type's count in f_counts; types 0..nines-1 are doors 9.
    tables: ``Tables.arrays()``: group_start, group_list, group_small, masks.
    nets: the escape test's tables, ``Nets.arrays()``.
    Returns DONE, PAUSED (node_budget spent), GROW (memo half full) or GROW_NETS.
    """
    f_occ, f_counts, f_avail, f_esc, f_gain, f_bound, f_known, f_result, f_type, f_next, f_end, f_key = frames
    path_type, path_group, best_type, best_group = paths
    t_num, t_src, t_dst, t_off, t_field, nines = doors
    group_start, group_list, group_small, _ = tables
    net_keys = nets[4]
    capacity = memo.shape[0]
    if ctl[C_STARTED] == 0:
        ctl[C_DEPTH] = 0
        first = _enter(0, frames, doors, tables, memo, ctl, nets)
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
        if 2 * ctl[C_MEMO_COUNT] >= capacity and not ctl[C_MEMO_FROZEN]:
            ctl[C_DEPTH] = d
            return GROW
        if 2 * ctl[C_NETS_COUNT] + 2 >= net_keys.shape[0] and not ctl[C_NETS_FROZEN]:
            ctl[C_DEPTH] = d
            return GROW_NETS
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
                _remember(d, f_key, f_counts, value, memo, ctl)
            if d == 0:
                return DONE
            d -= 1
            value += f_gain[d + 1]
            if value > f_result[d]:
                f_result[d] = value
            continue
        t = f_type[d]
        group = group_list[f_next[d]] if t < nines else group_small[f_next[d]]
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
        value = _enter(c, frames, doors, tables, memo, ctl, nets)
        if value >= 0:
            value += gain
            if value > f_result[d]:
                f_result[d] = value
        else:
            d = c
