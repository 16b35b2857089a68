"""Seeded random dungeons for tests and benchmarks.

Each cell is independently a wall, gold, a monster or floor with the given densities.  Monster
letters come from a per-dungeon pool of 1 to 54 letters, so small pools make monsters share a
letter; about one dungeon in five writes its floor as spaces and one in five mixes spaces and dots;
the start replaces a random cell.

    >>> generate(2, 3, 4, seed=7) == generate(2, 3, 4, seed=7)
    True
"""

from __future__ import annotations

import numpy as np

from .parse import MONSTER_CHARS

__all__ = ["generate"]

_CHUNK = 256  # dungeons drawn per numpy call; fixed, so results depend only on the arguments
_MONSTER_BYTES = np.frombuffer(MONSTER_CHARS.encode("ascii"), dtype=np.uint8)
_DOT, _SPACE, _WALL, _GOLD, _START = (ord(ch) for ch in ". #$@")


def generate(
    count: int,
    height: int | tuple[int, int],
    width: int | tuple[int, int],
    seed: int,
    wall: float = 0.25,
    gold: float = 0.05,
    monster: float = 0.03,
) -> list[list[str]]:
    """``count`` random dungeons, each a list of row strings.

    count:   how many, at least 0.
    height:  rows per dungeon, or an inclusive (low, high) range drawn per dungeon; at least 1.
    width:   columns per dungeon, likewise.
    seed:    the same arguments and seed always give the same dungeons.
    wall, gold, monster: probability of each cell being a wall, gold or a monster (the rest is
             floor); each in [0, 1], together at most 1.
    """
    low_h, high_h = _size_range("height", height)
    low_w, high_w = _size_range("width", width)
    _check_densities(wall, gold, monster)
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"count must be a non-negative integer, not {count!r}")
    rng = np.random.default_rng(seed)
    thresholds = np.cumsum([wall, gold, monster])
    dungeons: list[list[str]] = []
    while len(dungeons) < count:
        k = min(_CHUNK, count - len(dungeons))
        heights = rng.integers(low_h, high_h + 1, size=k)
        widths = rng.integers(low_w, high_w + 1, size=k)
        cells = _draw_cells(rng, k, high_h, high_w, thresholds)
        dungeons.extend(_place_starts_and_cut(rng, cells, heights, widths))
    return dungeons


def _size_range(name: str, size: int | tuple[int, int]) -> tuple[int, int]:
    """(low, high) from a size or a range, checked."""
    low, high = (size, size) if isinstance(size, (int, np.integer)) else size
    if not 1 <= low <= high:
        raise ValueError(f"{name} must be at least 1 (or a range low <= high from 1), not {size!r}")
    return int(low), int(high)


def _check_densities(wall: float, gold: float, monster: float) -> None:
    """ValueError unless the densities are probabilities that sum to at most 1."""
    for name, value in (("wall", wall), ("gold", gold), ("monster", monster)):
        if not 0 <= value <= 1:
            raise ValueError(f"{name} density must be between 0 and 1, not {value!r}")
    if wall + gold + monster > 1:
        raise ValueError(f"wall + gold + monster densities must be at most 1, not {wall + gold + monster:g}")


def _draw_cells(rng: np.random.Generator, k: int, height: int, width: int, thresholds) -> np.ndarray:
    """uint8[k, height, width] of characters: walls, gold, monsters and floor (no start yet)."""
    shape = (k, height, width)
    roll = rng.random(shape)
    pool = rng.integers(1, len(_MONSTER_BYTES) + 1, size=(k, 1, 1))
    shift = rng.integers(0, len(_MONSTER_BYTES), size=(k, 1, 1))
    letters = _MONSTER_BYTES[((rng.random(shape) * pool).astype(np.int64) + shift) % len(_MONSTER_BYTES)]
    style = rng.random((k, 1, 1))  # < 0.6 dots, < 0.8 spaces, else a mix
    mixed_space = rng.random(shape) < 0.5
    floor = np.where((style >= 0.6) & ((style < 0.8) | mixed_space), _SPACE, _DOT).astype(np.uint8)
    return np.select(
        [roll < thresholds[0], roll < thresholds[1], roll < thresholds[2]],
        [np.uint8(_WALL), np.uint8(_GOLD), letters],
        default=floor,
    ).astype(np.uint8)


def _place_starts_and_cut(rng, cells: np.ndarray, heights, widths) -> list[list[str]]:
    """Crop each drawn dungeon to its size, put the start on a random cell, split into rows."""
    rows_out = []
    starts_r = (rng.random(len(heights)) * heights).astype(np.int64)
    starts_c = (rng.random(len(widths)) * widths).astype(np.int64)
    for d, (h, w) in enumerate(zip(heights.tolist(), widths.tolist())):
        grid = np.ascontiguousarray(cells[d, :h, :w])
        grid[starts_r[d], starts_c[d]] = _START
        text = grid.tobytes().decode("ascii")
        rows_out.append([text[r * w : (r + 1) * w] for r in range(h)])
    return rows_out
