"""The exact Nonary solver: branch and bound over canonical states with memoisation.

Graph.  Doors that can never matter are dropped first (self-loops, doors out of rooms that room 0
cannot reach or that cannot reach a door 9, doors into such rooms); rooms are relabelled
0..R-1 (room 0 stays 0) and identical doors ``[n, a, b]`` form one *door type*: they are
interchangeable, so a state only counts how many of each are unused.  Doors 9 come first, then
doors leading closer to an exit, and the kernel sends the largest groups through doors 9 and the
smallest through the others first, so that good plans are tried early.

State.  The occupancy of every room as a 9-bit mask (player p is bit p-1) and the packed
unused-door counts.  Players who escaped are simply absent, so the value of a state (how many
more can escape) does not depend on the path that led to it.

Canonical states.  Before a state is looked up, players who can never escape are removed and
doors that can never be used, or never help, are dropped:
  * a room from which no unused door 9 is reachable through unused doors is dead;
  * a room holding fewer than 3 players can only be left after others join it, so if no room
    holding 3 or more can reach it, its players are stuck;
  * a door whose from-room no active room can reach can never be used, and a door leading into a
    dead room only throws players away (more players in a room never hurts: every move stays
    possible), so it never helps.

Bounds.  The players still alive can escape only as disjoint groups of 3..5 with a sum that is a
multiple of 9, at most one group per usable door 9; a table gives the most players such groups
cover, for every mask and for 0..3 doors.  When the best plan so far leaves at most one player
behind, the kernel also tests residues and exit capacities (``kernel._escapes_possible``).  A
state that cannot beat the best plan found so far is cut, and the search stops at once when a
plan reaches the start's bound.

Memo.  For each canonical state the memo keeps an upper bound on its value; with the invariant
``escaped + bound <= best`` at every return, a state seen again is cut when it cannot improve on
the best plan.

Two implementations share this design: the numba kernel (``kernel.py``), used whenever the graph
fits its int64 layout (at most 62 rooms, 62 bits of packed counts, 62 door types), and the
pure-Python :class:`_Search` for larger graphs, without the residue and exit tests.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import kernel
from .parse import EXIT, Door, NonaryError, parse

__all__ = ["Move", "SolveTimeout", "solve", "solve_parsed"]

Move = tuple[int, list[int]]  # (door index into the input list, players in increasing order)

_FULL = (1 << 9) - 1
_MAX_NINES = 3  # 3 groups of at least 3 players already cover all 9 players
_CHECK_EVERY = 4096  # nodes between two looks at the clock (pure-Python search)
# kernel nodes between two looks at the clock: a small fraction of a second
# (docs/benchmarks.md#record-batches-and-first-shards)
_NODE_BUDGET = 100_000
_MAX_MEMO_BYTES = 1 << 28  # memory for the memo table (256 MiB)
_MAX_NETS_BYTES = 1 << 26  # memory for the escape test's sets (64 MiB)
_KERNEL_MAX_ROOMS = 62  # a player's room + 1 must fit in 6 bits of the kernel's memo key


class SolveTimeout(NonaryError):
    """The work on a graph ran past its deadline (the record's time budget).

    states: how many states the search had visited (0 when time ran out before the search).
    stage:  "search", or "preparation" when time ran out while preparing the graph (its
            canonical form) before any search.
    """

    def __init__(self, states: int, stage: str = "search") -> None:
        if stage == "search":
            message = f"no optimal plan within the time budget ({states:,} states searched)"
        else:
            message = "the time budget ran out while preparing the graph, before the search"
        super().__init__(message)
        self.states = states
        self.stage = stage


def _residue(mask: int) -> int:
    """Sum of the players in ``mask`` (player p is bit p-1), modulo 9."""
    return sum(p + 1 for p in range(9) if mask >> p & 1) % 9


def _group_table() -> list[tuple[int, ...]]:
    """For every occupancy mask and residue (index ``mask * 9 + residue``): the submasks of 3..5
    players with that residue, largest first (big groups through a door 9 find good plans early)."""
    table: list[list[int]] = [[] for _ in range(512 * 9)]
    for mask in range(512):
        sub = mask
        while sub:
            if 3 <= sub.bit_count() <= 5:
                table[mask * 9 + _residue(sub)].append(sub)
            sub = (sub - 1) & mask
    return [tuple(sorted(groups, key=lambda g: (-g.bit_count(), g))) for groups in table]


def _cover_table(groups: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """For every mask: the most players that 0..3 disjoint groups with sum 0 mod 9 can cover."""
    cover = [[0] * (_MAX_NINES + 1) for _ in range(512)]
    for k in range(1, _MAX_NINES + 1):
        for mask in range(512):
            best = cover[mask][k - 1]
            for g in groups[mask * 9]:
                best = max(best, g.bit_count() + cover[mask ^ g][k - 1])
            cover[mask][k] = best
    return [tuple(row) for row in cover]


GROUPS = _group_table()
COVER = _cover_table(GROUPS)
_TABLES = kernel.Tables(GROUPS, COVER)


@dataclass(frozen=True)
class _Graph:
    """A door list compiled for the search.

    rooms:      number of rooms kept, relabelled 0..rooms-1 (room 0 stays 0; the exit is no room)
    types:      distinct useful doors (number, from, to), to == EXIT for a door 9; doors 9 first
    members:    for each type, the indices of its doors in the input list
    nines:      how many types are doors 9 (they are types 0..nines-1)
    offsets:    bit offset of each type's unused-door count in the packed count int
    fields:     mask of each type's count field (after shifting it down by its offset)
    """

    rooms: int
    types: tuple[tuple[int, int, int], ...]
    members: tuple[tuple[int, ...], ...]
    nines: int
    offsets: tuple[int, ...]
    fields: tuple[int, ...]

    @property
    def counts(self) -> int:
        """The packed count int with every door unused."""
        return sum(len(m) << off for m, off in zip(self.members, self.offsets))

    @property
    def count_bits(self) -> int:
        """Bits the packed count int needs."""
        return sum(f.bit_length() for f in self.fields)


def _useful_doors(doors: Sequence[Door]) -> list[int]:
    """Indices of the doors that can ever matter: not a self-loop (it moves nobody and only uses
    itself up), leaving a room reachable from room 0, and leading to the exit or to a room from
    which a door 9 is reachable.  Two breadth-first searches: linear in the number of doors."""
    edges = [(i, src, dst) for i, (_, src, dst) in enumerate(doors) if src != dst]
    forward: dict[int, list[int]] = {}
    backward: dict[int, list[int]] = {}
    for _, src, dst in edges:
        if dst != EXIT:
            forward.setdefault(src, []).append(dst)
            backward.setdefault(dst, []).append(src)
    reached = _closure({0}, forward)
    live = _closure({src for _, src, dst in edges if dst == EXIT}, backward)
    return [i for i, src, dst in edges if src in reached and src in live and (dst == EXIT or dst in live)]


def _closure(rooms: set[int], step: dict[int, list[int]]) -> set[int]:
    """``rooms`` and every room reachable from them through ``step`` (room -> next rooms)."""
    frontier = list(rooms)
    while frontier:
        for room in step.get(frontier.pop(), ()):
            if room not in rooms:
                rooms.add(room)
                frontier.append(room)
    return rooms


def _hops_to_exit(types: list[tuple[int, int, int]]) -> dict[int, int]:
    """For each room of ``types`` that can reach a door 9: the fewest doors to pass before it
    (breadth-first, backwards from the rooms with a door 9)."""
    backward: dict[int, list[int]] = {}
    for _, src, dst in types:
        if dst != EXIT:
            backward.setdefault(dst, []).append(src)
    hops = {src: 0 for _, src, dst in types if dst == EXIT}
    frontier = list(hops)
    while frontier:
        following = []
        for room in frontier:
            for src in backward.get(room, ()):
                if src not in hops:
                    hops[src] = hops[room] + 1
                    following.append(src)
        frontier = following
    return hops


def _compile(doors: Sequence[Door]) -> _Graph:
    """Keep the useful doors, relabel their rooms, group identical doors into types and lay out
    the packed counts."""
    label = {0: 0}
    members: dict[tuple[int, int, int], list[int]] = {}
    for index in _useful_doors(doors):
        number, src, dst = doors[index]
        for room in (src, dst):
            if room != EXIT and room not in label:
                label[room] = len(label)
        key = (number, label[src], EXIT if dst == EXIT else label[dst])
        members.setdefault(key, []).append(index)
    hops = _hops_to_exit(list(members))
    # Doors 9 first, then doors that lead closer to an exit: good plans are found early.
    order = sorted(members, key=lambda t: (t[0] != 9, hops.get(t[2], 0), t))
    fields = tuple((1 << len(members[t]).bit_length()) - 1 for t in order)
    offsets = tuple(itertools.accumulate((f.bit_length() for f in fields[:-1]), initial=0)) if fields else ()
    return _Graph(
        rooms=len(label),
        types=tuple(order),
        members=tuple(tuple(members[t]) for t in order),
        nines=sum(1 for t in order if t[0] == 9),
        offsets=offsets,
        fields=fields,
    )


@dataclass(frozen=True)
class _Live:
    """What follows from the set of unused door types alone (cached per set).

    rooms:    bit r set when room r can still reach an unused door 9
    occ_mask: the 9-bit blocks of those rooms, for clearing players in dead rooms
    succ:     for each room, the rooms one useful unused door away (bitmask)
    """

    rooms: int
    occ_mask: int
    succ: tuple[int, ...]


@dataclass(frozen=True)
class _Usable:
    """What follows from the unused types and the rooms holding 3 or more players (cached).

    rooms:   active rooms and every room they can reach: only these can ever be left
    avail:   the unused types that are useful and leave one of those rooms
    counts:  mask over the packed counts keeping only those types
    """

    rooms: int
    avail: int
    counts: int


class _Search:
    """One branch-and-bound search over a compiled graph (see the module docstring)."""

    def __init__(self, graph: _Graph, deadline: float | None) -> None:
        self.graph = graph
        self.deadline = deadline
        self.into: list[list[int]] = [[] for _ in range(graph.rooms)]  # non-9 types into each room
        for t, (_, _, dst) in enumerate(graph.types):
            if dst != EXIT:
                self.into[dst].append(t)
        self.live_cache: dict[int, _Live] = {}
        self.usable_cache: dict[tuple[int, int], _Usable] = {}
        self.memo: dict[tuple[int, int], int] = {}
        self.best = 0
        self.best_path: list[tuple[int, int]] = []
        self.path: list[tuple[int, int]] = []
        self.target = 9
        self.nodes = 0
        # A node costs time proportional to the number of door types: look at the clock often
        # enough that a large graph cannot overrun its deadline by much.
        self.check_every = max(1, _CHECK_EVERY * 16 // max(16, len(graph.types)))

    def live(self, avail: int) -> _Live:
        """Rooms that can reach an unused door 9 through the unused types ``avail``."""
        graph = self.graph
        types = [t for t in range(len(graph.types)) if avail >> t & 1]
        frontier = [graph.types[t][1] for t in types if t < graph.nines]
        rooms = 0
        while frontier:  # backwards from the rooms with doors 9
            room = frontier.pop()
            if not rooms >> room & 1:
                rooms |= 1 << room
                frontier.extend(graph.types[t][1] for t in self.into[room] if avail >> t & 1)
        succ = [0] * graph.rooms
        for t in types:
            _, src, dst = graph.types[t]
            if dst != EXIT and rooms >> dst & 1:
                succ[src] |= 1 << dst
        occ_mask = sum(_FULL << (9 * r) for r in range(graph.rooms) if rooms >> r & 1)
        return _Live(rooms, occ_mask, tuple(succ))

    def usable(self, avail: int, active: int, live: _Live) -> _Usable:
        """Rooms reachable from the ``active`` rooms, and the unused types that can still help."""
        rooms = active
        frontier = list(_bits(active))
        while frontier:
            grown = live.succ[frontier.pop()] & ~rooms
            rooms |= grown
            frontier.extend(_bits(grown))
        graph = self.graph
        keep = 0
        counts = 0
        for t, (_, src, dst) in enumerate(graph.types):
            if avail >> t & 1 and rooms >> src & 1 and (dst == EXIT or live.rooms >> dst & 1):
                keep |= 1 << t
                counts |= graph.fields[t] << graph.offsets[t]
        return _Usable(rooms, keep, counts)

    def run(self) -> tuple[int, list[tuple[int, int]]]:
        """Search from the start (everyone in room 0, every door unused)."""
        graph = self.graph
        avail = (1 << len(graph.types)) - 1
        depth = sum(len(m) for m in graph.members)  # one frame per move, one move per door
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, depth + 200))
        try:
            self.dfs(_FULL, graph.counts, avail, 0, True)
        except _Done:
            pass
        finally:
            sys.setrecursionlimit(limit)
        return self.best, self.best_path

    def dfs(self, occ: int, counts: int, avail: int, escaped: int, root: bool = False) -> int:  # noqa: C901 -- the search's one recursive frame: a call per state is its hot path
        """Explore the state; return an upper bound u on how many more can escape from it, with
        ``escaped + u <= self.best`` on return (the memo relies on it)."""
        self.nodes += 1
        if self.deadline is not None and self.nodes % self.check_every == 0 and time.monotonic() > self.deadline:
            raise SolveTimeout(self.nodes)
        live = self.live_cache.get(avail)
        if live is None:
            live = self.live_cache[avail] = self.live(avail)
        occ &= live.occ_mask
        active = small = alive = 0
        rest = occ
        while rest:  # one step per occupied room
            room = ((rest & -rest).bit_length() - 1) // 9
            mask = (rest >> (9 * room)) & _FULL
            rest &= ~(_FULL << (9 * room))
            alive |= mask
            if mask.bit_count() >= 3:
                active |= 1 << room
            else:
                small |= 1 << room
        usable = self.usable_cache.get((avail, active))
        if usable is None:
            usable = self.usable_cache[(avail, active)] = self.usable(avail, active, live)
        stuck = small & ~usable.rooms
        for r in _bits(stuck):
            alive &= ~((occ >> (9 * r)) & _FULL)
            occ &= ~(_FULL << (9 * r))
        avail = usable.avail
        counts &= usable.counts
        graph = self.graph
        nines = 0
        for t in range(graph.nines):
            if avail >> t & 1:
                nines += counts >> graph.offsets[t] & graph.fields[t]
        bound = COVER[alive][min(nines, _MAX_NINES)]
        if root:
            self.target = bound
            if bound == 0:
                raise _Done
        if escaped + bound <= self.best:
            return bound
        key = (occ, counts)
        known = self.memo.get(key)
        if known is not None:
            if escaped + known <= self.best:
                return known
            bound = min(bound, known)
        result = 0
        for t, (number, src, dst) in enumerate(graph.types):
            if not avail >> t & 1:
                continue
            here = (occ >> (9 * src)) & _FULL
            if here.bit_count() < 3:
                continue
            left = counts - (1 << graph.offsets[t])
            next_avail = avail if left >> graph.offsets[t] & graph.fields[t] else avail & ~(1 << t)
            for group in GROUPS[here * 9 + number % 9]:
                moved = occ ^ (group << (9 * src))
                if dst == EXIT:
                    gain = group.bit_count()
                else:
                    gain = 0
                    moved |= group << (9 * dst)
                self.path.append((t, group))
                if escaped + gain > self.best:
                    self.best = escaped + gain
                    self.best_path = list(self.path)
                    if self.best >= self.target:
                        raise _Done
                value = gain + self.dfs(moved, left, next_avail, escaped + gain)
                self.path.pop()
                if value > result:
                    result = value
                if escaped + bound <= self.best:
                    result = bound
                    break
            else:
                continue
            break
        result = min(result, bound)
        if known is None or result < known:
            self.memo[key] = result
        return result


def _bits(mask: int):
    """The positions of the set bits of ``mask``, lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


class _Done(Exception):
    """The best plan reached the root bound: nothing can beat it."""


def _plan(graph: _Graph, path: list[tuple[int, int]]) -> list[Move]:
    """Turn a path of (type, group mask) into moves on the input's door indices."""
    used = [0] * len(graph.types)
    plan = []
    for t, group in path:
        index = graph.members[t][used[t]]
        used[t] += 1
        plan.append((index, [p + 1 for p in range(9) if group >> p & 1]))
    return plan


def _fits_kernel(graph: _Graph) -> bool:
    """True when the graph fits the kernel's int64 layout (6 bits per player's room in the memo
    key, packed counts and the type bitmask in one int64 each)."""
    return graph.rooms <= _KERNEL_MAX_ROOMS and graph.count_bits <= 62 and len(graph.types) <= 62


class _KernelRun:
    """The arrays of one numba search over ``graph`` (see :func:`kernel.search` for each)."""

    def __init__(self, graph: _Graph) -> None:
        depth = sum(len(m) for m in graph.members) + 2
        i64 = np.int64
        self.f_occ = np.zeros((depth, graph.rooms), dtype=i64)
        self.f_occ[0, 0] = _FULL
        self.frames = [np.zeros(depth, dtype=i64) for _ in range(11)]
        self.frames[0][0] = graph.counts
        self.frames[1][0] = (1 << len(graph.types)) - 1
        self.paths = [np.zeros(depth, dtype=i64) for _ in range(4)]  # path type/group, best type/group
        self.types = [
            np.array([n % 9 for n, _, _ in graph.types], dtype=i64),
            np.array([a for _, a, _ in graph.types], dtype=i64),
            np.array([b for _, _, b in graph.types], dtype=i64),
            np.array(graph.offsets, dtype=i64),
            np.array(graph.fields, dtype=i64),
            graph.nines,
        ]
        self.ctl = np.zeros(kernel.CTL_SIZE, dtype=i64)
        self.memo = kernel.new_memo(1 << 12)
        self.nets = kernel.Nets(list(graph.types), graph.rooms)

    def run(self, deadline: float | None) -> None:
        """Search to the end, growing tables when asked and looking at the clock between node
        budgets."""
        ctl = self.ctl
        while True:
            nets = self.nets
            status = kernel.search(
                (self.f_occ, *self.frames),
                tuple(self.paths),
                tuple(self.types),
                _TABLES.arrays(),
                self.memo,
                ctl,
                _NODE_BUDGET,
                nets.arrays(),
            )
            if status == kernel.DONE:
                return
            if status == kernel.GROW:
                if 2 * self.memo.nbytes > _MAX_MEMO_BYTES:
                    ctl[kernel.C_MEMO_FROZEN] = 1  # keep what is known, remember nothing new
                else:
                    self.memo = kernel.grow_memo(self.memo)
            if status == kernel.GROW_NETS:
                if 2 * nets.nbytes > _MAX_NETS_BYTES:
                    ctl[kernel.C_NETS_FROZEN] = 1  # enough memory on residue sets: test only those kept
                else:
                    nets.grow(int(ctl[kernel.C_NETS_COUNT]))
            if deadline is not None and time.monotonic() > deadline:
                raise SolveTimeout(int(ctl[kernel.C_NODES]))

    def best(self) -> tuple[int, list[tuple[int, int]]]:
        """The best plan found: (escaped, [(type, group mask), ...])."""
        _, _, best_type, best_group = self.paths
        length = int(self.ctl[kernel.C_BEST_LEN])  # moves of the best path (0: nobody escapes)
        return int(self.ctl[kernel.C_BEST]), [(int(best_type[i]), int(best_group[i])) for i in range(length)]


def _run_kernel(graph: _Graph, deadline: float | None) -> tuple[int, list[tuple[int, int]]]:
    """Run the numba search on ``graph``; (escaped, [(type, group mask), ...])."""
    run = _KernelRun(graph)
    run.run(deadline)
    return run.best()


def solve_parsed(doors: Sequence[Door], timeout: float | None = None) -> tuple[int, list[Move]]:
    """Solve an already checked door list ``doors`` (see :func:`solve`) within ``timeout`` seconds."""
    deadline = None if timeout is None else time.monotonic() + timeout
    graph = _compile(doors)
    if not graph.nines:
        return 0, []
    if _fits_kernel(graph):
        escaped, path = _run_kernel(graph, deadline)
    else:
        escaped, path = _Search(graph, deadline).run()
    return escaped, _plan(graph, path)


def solve(doors: Any, timeout: float | None = None) -> tuple[int, list[Move]]:
    """The most players who can escape through ``doors``, and one plan that achieves it.

    ``doors`` is a door list as in the input (checked with :func:`parse`); ``timeout`` is a time
    budget in seconds (``None``: unlimited) after which :class:`SolveTimeout` is raised (the
    search looks at the clock every 100,000 states in the kernel and every 4,096 in the
    pure-Python search).  The plan is a list of moves
    ``(door_index, [players...])`` in order.

    >>> solve([[9, 0, -1]])
    (5, [(0, [1, 2, 4, 5, 6])])
    """
    return solve_parsed(parse(doors), timeout)
