"""The rules, written as plainly as possible: a plan replayer and an exhaustive search.

Both are independent of the fast solver in :mod:`solvers.nonary.solve`, so tests can use them as
references: :func:`verify_plan` checks every plan the solver returns, and :func:`brute_force`
(no pruning, no memo, exponential) gives the expected answer on small graphs.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import combinations
from typing import Any

from .parse import EXIT, Door, NonaryError, parse

__all__ = ["PlanError", "verify_plan", "brute_force", "PLAYERS", "GROUP_SIZES"]

PLAYERS = tuple(range(1, 10))
GROUP_SIZES = (3, 4, 5)
START_ROOM = 0


class PlanError(NonaryError):
    """A plan breaks a rule of the game; the message names the move and the rule."""


def _fits(number: int, group: Iterable[int]) -> bool:
    """True when the players of ``group`` may pass a door numbered ``number`` (sum = number mod 9)."""
    return sum(group) % 9 == number % 9


def _check_move(  # noqa: C901 -- the reference: the rules checked one by one, as plainly as the spec states them
    step: int, move: Any, doors: tuple[Door, ...], used: set[int], where: dict[int, int]
) -> tuple[int, list[int]]:
    """Check move number ``step`` against the ``doors``, the ``used`` door indices and the players'
    rooms ``where``; return (door index, players) or raise :class:`PlanError`."""
    if not isinstance(move, (list, tuple)) or len(move) != 2:
        raise PlanError(f"move {step}: must be [door_index, [players...]], not {move!r}")
    index, group = move
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(doors):
        raise PlanError(f"move {step}: door index {index!r} is not one of 0..{len(doors) - 1}")
    number, src, _ = doors[index]
    where_text = f"move {step} (door {index} {list(doors[index])})"
    if index in used:
        raise PlanError(f"{where_text}: the door was already used")
    if not isinstance(group, (list, tuple)) or not all(isinstance(p, int) and not isinstance(p, bool) for p in group):
        raise PlanError(f"{where_text}: players must be a list of integers, not {group!r}")
    if len(set(group)) != len(group):
        raise PlanError(f"{where_text}: players {list(group)} repeat a player")
    if not GROUP_SIZES[0] <= len(group) <= GROUP_SIZES[-1]:
        raise PlanError(f"{where_text}: a group has 3 to 5 players, not {len(group)}")
    for player in group:
        if player not in where:
            raise PlanError(f"{where_text}: {player} is not a player (players are 1..9)")
        if where[player] != src:
            room = "the exit" if where[player] == EXIT else f"room {where[player]}"
            raise PlanError(f"{where_text}: player {player} is in {room}, not in room {src}")
    if not _fits(number, group):
        raise PlanError(f"{where_text}: players {list(group)} sum to {sum(group)}, which is not {number} mod 9")
    return index, list(group)


def verify_plan(doors: Any, plan: Iterable[Any]) -> int:
    """Replay ``plan`` (moves ``[door_index, [players...]]``) on ``doors``; return how many escaped.

    ``doors`` is checked with :func:`parse` first.  Raises :class:`PlanError` naming the first move
    that breaks a rule, and why.

    >>> verify_plan([[8, 0, 1], [9, 1, -1]], [[0, [3, 4, 5, 6, 8]], [1, [3, 4, 5, 6]]])
    4
    """
    checked = parse(doors)
    where = {player: START_ROOM for player in PLAYERS}
    used: set[int] = set()
    for step, move in enumerate(plan):
        index, group = _check_move(step, move, checked, used, where)
        used.add(index)
        for player in group:
            where[player] = checked[index][2]
    return sum(1 for room in where.values() if room == EXIT)


def brute_force(doors: Any) -> int:
    """The most players who can escape through ``doors``, by trying every sequence of moves.

    No pruning and no bound; the only shortcut is remembering the answer for a full state
    (every player's room and the set of used doors) already explored.  Exponential: meant for
    graphs of a handful of doors, as a reference for tests.
    """
    checked = parse(doors)
    memo: dict[tuple[tuple[int, ...], frozenset[int]], int] = {}

    def best(where: tuple[int, ...], used: frozenset[int]) -> int:
        known = memo.get((where, used))
        if known is not None:
            return known
        escaped = sum(1 for room in where if room == EXIT)
        for index, (number, src, dst) in enumerate(checked):
            if index in used:
                continue
            here = [p for p in PLAYERS if where[p - 1] == src]
            for size in GROUP_SIZES:
                for group in combinations(here, size):
                    if _fits(number, group):
                        moved = tuple(dst if p in group else room for p, room in zip(PLAYERS, where))
                        escaped = max(escaped, best(moved, used | {index}))
        memo[(where, used)] = escaped
        return escaped

    return best(tuple(START_ROOM for _ in PLAYERS), frozenset())
