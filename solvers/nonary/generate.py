"""Seeded random door graphs that satisfy the contract, for tests and benchmarks."""

from __future__ import annotations

import random

from .parse import EXIT

__all__ = ["generate", "random_graph"]


def random_graph(
    rng: random.Random, rooms: int, doors: int, cycles: float = 0.2, parallel: float = 0.2, nines: float = 0.25
) -> list[list[int]]:
    """One door list over rooms ``0..rooms-1`` with ``doors`` doors, drawn from ``rng``.

    ``cycles``:   chance that a non-9 door goes back (to a room with a number not above its own,
                  self-loops included) instead of forward, which makes cycles;
    ``parallel``: chance that a door copies the rooms of an earlier door (a parallel door, with
                  its own number);
    ``nines``:    share of doors numbered 9 (at least one door 9 always).
    """
    if rooms < 1:
        raise ValueError(f"rooms must be at least 1, not {rooms}")
    if doors < 1:
        raise ValueError(f"doors must be at least 1 (a door 9 is required), not {doors}")
    out: list[list[int]] = []
    for index in range(doors):
        is_nine = index == 0 or rng.random() < nines
        if out and rng.random() < parallel:
            src, dst = rng.choice(out)[1:]
            if is_nine != (dst == EXIT):
                src, dst = _endpoints(rng, rooms, is_nine, cycles, src)
        else:
            src, dst = _endpoints(rng, rooms, is_nine, cycles, rng.randrange(rooms))
        number = 9 if is_nine else rng.randint(1, 8)
        out.append([number, src, dst])
    rng.shuffle(out)
    return out


def _endpoints(rng: random.Random, rooms: int, is_nine: bool, cycles: float, src: int) -> tuple[int, int]:
    """Rooms of a fresh door leaving ``src``: to the exit for a door 9, else forward or (with
    chance ``cycles``) back."""
    if is_nine:
        return src, EXIT
    if src == rooms - 1 or rng.random() < cycles:
        return src, rng.randint(0, src)
    return src, rng.randint(src + 1, rooms - 1)


def generate(
    count: int, rooms: int, doors: int, seed: int, cycles: float = 0.2, parallel: float = 0.2, nines: float = 0.25
) -> list[list[list[int]]]:
    """``count`` random door lists (see :func:`random_graph` for the other parameters), the same
    for the same ``seed``.

    >>> generate(1, rooms=2, doors=3, seed=1)
    [[[7, 0, 0], [9, 0, -1], [8, 0, 1]]]
    """
    if count < 0:
        raise ValueError(f"count must be at least 0, not {count}")
    rng = random.Random(seed)
    return [random_graph(rng, rooms, doors, cycles, parallel, nines) for _ in range(count)]
