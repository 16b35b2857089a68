"""Roguelike gold: how many gold cells can the rogue reach without standing next to the same
monster on two consecutive turns?  (docs/rules.md section 2.)

Pure: numpy and numba only, no Ray, Arrow or pipeline imports.

    >>> from batchenum.solvers.dungeon import solve
    >>> solve(["@....", "...g$", "....."])
    0
"""

from .errors import (
    BadCharacterError,
    DungeonError,
    EmptyGridError,
    GridTooLargeError,
    NotAGridError,
    PathError,
    RaggedGridError,
    StartError,
)
from .generate import generate
from .oracle import oracle_gold
from .parse import Dungeon, ParsedBatch, parse, parse_flat, parse_many
from .solve import solve, solve_batch, verify_path, witness

__all__ = [
    "BadCharacterError",
    "Dungeon",
    "DungeonError",
    "EmptyGridError",
    "GridTooLargeError",
    "NotAGridError",
    "ParsedBatch",
    "PathError",
    "RaggedGridError",
    "StartError",
    "generate",
    "oracle_gold",
    "parse",
    "parse_flat",
    "parse_many",
    "solve",
    "solve_batch",
    "verify_path",
    "witness",
]
