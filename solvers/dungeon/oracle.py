"""A slow, literal oracle for tests: search over (position, monsters next to the rogue on the
previous turn) states, exactly as the rules are worded, with no precomputed masks.

    >>> oracle_gold(["@....", "...$g", "....."])
    1
"""

from __future__ import annotations

from collections import deque
from typing import Any

from .parse import parse

__all__ = ["oracle_gold"]


def oracle_gold(grid: Any) -> int:
    """Reachable gold by explicit state search; grid as for ``solve``.

    A state is (where the rogue stands, the monsters it stood next to on the previous turn); the
    first turn has no previous turn.  A state is legal when the rogue does not stand next to any of
    those monsters now.  From (p, before) it steps to (q, monsters next to p) for any of the eight
    neighbours q inside the grid that is not a wall or a monster.  Gold counts when some legal state
    stands on it.
    """
    dungeon = parse(grid)
    monsters = set(dungeon.monsters)
    walls = {(r, c) for r, row in enumerate(dungeon.rows) for c, ch in enumerate(row) if ch == "#"}

    def next_to(cell):
        r, c = cell
        return frozenset(m for m in monsters if max(abs(m[0] - r), abs(m[1] - c)) == 1)

    first: tuple[tuple[int, int], frozenset] = (dungeon.start, frozenset())
    seen, queue = {first}, deque([first])
    while queue:
        here, _before = queue.popleft()
        now = next_to(here)
        for dr in (-1, 0, 1):
            for dc in (-1, 0, 1):
                there = (here[0] + dr, here[1] + dc)
                if there == here or there in walls or there in monsters:
                    continue
                if not (0 <= there[0] < dungeon.height and 0 <= there[1] < dungeon.width):
                    continue
                state = (there, now)
                if next_to(there) & now:
                    continue  # next to the same monster on two consecutive turns
                if state not in seen:
                    seen.add(state)
                    queue.append(state)
    reached = {position for position, _ in seen}
    return sum(1 for cell in dungeon.gold if cell in reached)
