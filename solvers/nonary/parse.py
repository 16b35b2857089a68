"""Checking a Nonary door list against the contract (docs/rules.md section 3).

A door is ``[number, from_room, to_room]``: JSON integers, number in 1..9, rooms integers with
``-1`` the exit.  Every door 9 leads to the exit and no other door does; nothing leaves the exit.
"""

from __future__ import annotations

import numbers
from typing import Any

__all__ = [
    "EXIT",
    "Door",
    "NonaryError",
    "DoorListError",
    "DoorShapeError",
    "DoorTypeError",
    "DoorNumberError",
    "RoomError",
    "ExitRuleError",
    "TooManyDoorsError",
    "parse",
]

EXIT = -1

Door = tuple[int, int, int]  # (number, from_room, to_room)


class NonaryError(ValueError):
    """Root of every Nonary error: the input breaks the contract, or a plan breaks the rules."""


class DoorListError(NonaryError):
    """The door list as a whole is wrong: not a list, empty, or without a door 9."""


class DoorShapeError(NonaryError):
    """A door is not a list of exactly three fields."""


class DoorTypeError(NonaryError):
    """A door field is not a JSON integer (a float, string, boolean or null)."""


class DoorNumberError(NonaryError):
    """A door number is outside 1..9."""


class RoomError(NonaryError):
    """A room is negative but not the exit -1."""


class ExitRuleError(NonaryError):
    """A door breaks the exit rules: door 9 must lead to -1, no other door may, none may leave -1."""


class TooManyDoorsError(NonaryError):
    """The door list is longer than the configured limit.

    doors: the list's length; limit: the limit it exceeds.
    """

    def __init__(self, doors: int, limit: int) -> None:
        super().__init__(f"{doors} doors is more than the limit of {limit}")
        self.doors = doors
        self.limit = limit


def _is_integer(value: Any) -> bool:
    """True for a real integer: ``int`` or a numpy integer, but not ``bool``, ``9.0`` or ``"9"``."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_door(index: int, door: Any) -> Door:
    """Check door ``door`` at position ``index`` of the list; return it as a tuple of ints."""
    if not isinstance(door, (list, tuple)):
        raise DoorShapeError(f"door {index}: must be a list [number, from_room, to_room], not {door!r}")
    if len(door) != 3:
        raise DoorShapeError(
            f"door {index} {list(door)!r}: must have 3 fields [number, from_room, to_room], not {len(door)}")
    for name, value in zip(("number", "from_room", "to_room"), door):
        if not _is_integer(value):
            raise DoorTypeError(
                f"door {index} {list(door)!r}: {name} must be an integer, not {value!r} ({type(value).__name__})")
    number, src, dst = (int(v) for v in door)
    shown = [number, src, dst]
    if not 1 <= number <= 9:
        raise DoorNumberError(f"door {index} {shown}: number must be in 1..9, not {number}")
    if src == EXIT:
        raise ExitRuleError(f"door {index} {shown}: no door may leave the exit -1")
    for name, room in (("from_room", src), ("to_room", dst)):
        if room < 0 and room != EXIT:
            raise RoomError(f"door {index} {shown}: {name} {room} is negative; the only negative room is the exit -1")
    if number == 9 and dst != EXIT:
        raise ExitRuleError(f"door {index} {shown}: a door numbered 9 must lead to the exit -1, not room {dst}")
    if number != 9 and dst == EXIT:
        raise ExitRuleError(f"door {index} {shown}: only doors numbered 9 may lead to the exit -1")
    return number, src, dst


def parse(doors: Any, max_doors: int | None = None) -> tuple[Door, ...]:
    """Check ``doors`` (a list of ``[number, from_room, to_room]``) and return it as int tuples.

    ``max_doors`` caps the list length (``None``: no cap) so that a huge record is refused before
    any work is spent on it.  Raises a subclass of :class:`NonaryError` naming the first problem.

    >>> parse([[8, 0, 1], [9, 1, -1]])
    ((8, 0, 1), (9, 1, -1))
    """
    if not isinstance(doors, (list, tuple)):
        raise DoorListError(f"doors must be a list of [number, from_room, to_room] triples, not {type(doors).__name__}")
    if not doors:
        raise DoorListError("doors is empty: at least one door 9 to the exit is needed")
    if max_doors is not None and len(doors) > max_doors:
        raise TooManyDoorsError(len(doors), max_doors)
    checked = tuple(_check_door(i, door) for i, door in enumerate(doors))
    if not any(number == 9 for number, _, _ in checked):
        raise DoorListError("no door numbered 9: nobody can ever reach the exit")
    return checked
