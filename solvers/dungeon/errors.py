"""The dungeon solver's exceptions: one root, a subclass per way a dungeon can be wrong."""

from __future__ import annotations

__all__ = [
    "DungeonError",
    "NotAGridError",
    "EmptyGridError",
    "RaggedGridError",
    "BadCharacterError",
    "StartError",
    "GridTooLargeError",
    "PathError",
]


class DungeonError(ValueError):
    """Root of every error raised by ``solvers.dungeon``."""


class NotAGridError(DungeonError):
    """The grid is neither a string nor a list of strings."""


class EmptyGridError(DungeonError):
    """The grid has no rows, or one of its rows is empty."""


class RaggedGridError(DungeonError):
    """The rows do not all have the same length."""


class BadCharacterError(DungeonError):
    """A character outside the dungeon alphabet."""


class StartError(DungeonError):
    """No start ``@``, or more than one."""


class GridTooLargeError(DungeonError):
    """More cells than the caller's limit; ``cells`` and ``limit`` say by how much."""

    def __init__(self, message: str, cells: int, limit: int) -> None:
        super().__init__(message)
        self.cells = cells
        self.limit = limit


class PathError(DungeonError):
    """A path that breaks the rules (``verify_path``)."""
