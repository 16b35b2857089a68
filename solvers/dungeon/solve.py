"""Solving dungeons: many at once through the kernel, one at a time with a witness, and checking
a path against the rules.

    >>> solve(["@..", ".$.", "..."])
    1
    >>> witness(["@.$"])
    {(0, 2): [(0, 0), (0, 1), (0, 2)]}
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import PathError
from .kernel import COMMON, parents_kernel, solve_kernel
from .parse import GOLD, ParsedBatch, parse, parse_many

__all__ = ["solve", "solve_batch", "witness", "verify_path"]

_PASSABLE = ".@$ "


def solve(grid: Any, max_cells: int | None = None) -> int:
    """The number of gold cells the rogue can reach; raises a DungeonError for an invalid grid.

    grid:      a list of equal-length row strings, or one string with ``\\n`` between rows.
    max_cells: reject grids with more cells than this; None for no limit.
    """
    batch = parse_many([grid], max_cells=max_cells)
    if batch.errors[0] is not None:
        raise batch.errors[0]
    return int(solve_batch(batch)[0])


def solve_batch(batch: ParsedBatch) -> np.ndarray:
    """int64[len(batch)]: the reachable gold of every valid dungeon of a parsed batch, in one
    kernel call.

    batch: from ``parse_many`` (or its ``unique()``/``take()``).
    """
    gold = np.empty(len(batch), dtype=np.int64)
    if len(batch):
        solve_kernel(
            batch.codes, batch.offsets, batch.heights, batch.widths, batch.starts, batch.gold_total, COMMON, gold
        )
    return gold


def witness(grid: Any) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """For every reachable gold cell (row, column), one legal path from the start to it.

    grid: as for ``solve``.  Paths are lists of (row, column), start first, shortest in moves.
    """
    batch = parse_many([grid])
    if batch.errors[0] is not None:
        raise batch.errors[0]
    height, width, start = int(batch.heights[0]), int(batch.widths[0]), int(batch.starts[0])
    codes = batch.cells_of(0)
    parents = parents_kernel(codes, height, width, start, COMMON)
    paths = {}
    for cell in np.flatnonzero(codes == GOLD):
        if parents[cell] >= 0:
            paths[divmod(int(cell), width)] = _path_to(int(cell), parents, start, width)
    return paths


def _path_to(cell: int, parents: np.ndarray, start: int, width: int) -> list[tuple[int, int]]:
    """The search-tree path from ``start`` to ``cell`` as (row, column) pairs."""
    path = [cell]
    while path[-1] != start:
        path.append(int(parents[path[-1]]))
    return [divmod(step, width) for step in reversed(path)]


def verify_path(grid: Any, path: Sequence[Sequence[int]]) -> bool:
    """True if ``path`` is a legal walk; raises PathError saying which step breaks which rule.

    grid: as for ``solve``.
    path: (row, column) pairs, 0-based, beginning at the start; each step moves to one of the
          eight neighbours, onto floor, gold or the start, and the rogue is never next to the same
          monster (by position) on two consecutive turns.
    """
    dungeon = parse(grid)
    steps = [tuple(step) for step in path]
    if not steps or steps[0] != dungeon.start:
        raise PathError(f"a path must begin at the start {dungeon.start}, not {steps[:1]}")
    for turn, (here, there) in enumerate(zip(steps, steps[1:]), start=1):
        _check_step(dungeon, turn, here, there)
    return True


def _check_step(dungeon, turn: int, here: tuple[int, ...], there: tuple[int, ...]) -> None:
    """PathError unless the move ``here -> there`` on ``turn`` obeys the rules."""
    (r0, c0), (r1, c1) = here, there
    if max(abs(r1 - r0), abs(c1 - c0)) != 1:
        raise PathError(f"turn {turn}: {here} -> {there} is not a move to one of the eight neighbours")
    if not (0 <= r1 < dungeon.height and 0 <= c1 < dungeon.width):
        raise PathError(f"turn {turn}: {there} is outside the {dungeon.height}x{dungeon.width} dungeon")
    if dungeon.rows[r1][c1] not in _PASSABLE:
        raise PathError(f"turn {turn}: {there} is {dungeon.rows[r1][c1]!r}, not floor, gold or the start")
    shared = _monsters_next_to(dungeon, here) & _monsters_next_to(dungeon, there)
    if shared:
        raise PathError(f"turn {turn}: next to the monster at {min(shared)} both at {here} and at {there}")


def _monsters_next_to(dungeon, cell: tuple[int, ...]) -> set[tuple[int, int]]:
    """Positions of the monsters in the 8-neighbourhood of ``cell``."""
    r, c = cell
    return {m for m in dungeon.monsters if max(abs(m[0] - r), abs(m[1] - c)) == 1}
