"""Checking a Nonary door list against the contract (docs/rules.md section 3).

A door is ``[number, from_room, to_room]``: JSON integers, number in 1..9, rooms integers with
``-1`` the exit.  Every door 9 leads to the exit and no other door does; nothing leaves the exit.
"""

from __future__ import annotations

import decimal
import json
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


_SHOWN_CHARS = 40  # a value quoted in a message is cut to this many characters
_SHOWN_DIGITS = 12  # an integer with more digits is shown by its first digits and its length


def _show(value: Any) -> str:
    """A value as it would read in JSON (``true``, ``null``, ``"9"``, ``[9, 0, -1]``), cut short:
    messages name a value, they never echo a huge one."""
    text = _json_text(value)
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def _json_text(value: Any, depth: int = 0) -> str:
    """``_show`` before cutting; containers deeper than two levels are elided."""
    if isinstance(value, (list, tuple)):
        if depth >= 2:
            return "[...]"
        items = [_json_text(item, depth + 1) for item in value[:4]]
        return "[" + ", ".join(items + (["..."] if len(value) > 4 else [])) + "]"
    if isinstance(value, dict):
        return "{...}"
    if isinstance(value, (bytes, bytearray)):
        return "binary data"
    if isinstance(value, decimal.Decimal):
        return str(value) if len(value.as_tuple().digits) <= _SHOWN_DIGITS else "a long decimal"
    return _scalar_text(value)


def _scalar_text(value: Any) -> str:
    """A JSON scalar as ``_json_text`` shows it (a string cut to what can be shown)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        return _integer_text(int(value))
    if isinstance(value, float):
        return json.dumps(value)  # 9.0, NaN, Infinity
    if isinstance(value, str):
        value = value[: _SHOWN_CHARS + 1]
        text = json.dumps(value, ensure_ascii=False)
        return text if text.isascii() or _encodable(text) else json.dumps(value)  # a lone surrogate: escape it
    return f"a value of type {type(value).__name__}"


def _encodable(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _integer_text(value: int) -> str:
    """An integer in decimal, or its first digits and digit count when it is long."""
    if value.bit_length() <= 40:
        return str(value)
    digits = decimal.Decimal(value).as_tuple().digits  # no int-to-str length limit on this route
    sign = "-" if value < 0 else ""
    if len(digits) <= _SHOWN_DIGITS:
        return sign + "".join(map(str, digits))
    return f"{sign}{''.join(map(str, digits[:6]))}... ({len(digits):,} digits)"


def _kind(value: Any) -> str:
    """The JSON kind of a value, in words, for messages."""
    for kind, name in (
        (bool, "a boolean"),
        (numbers.Integral, "an integer"),
        (float, "a number"),
        (str, "a string"),
        ((list, tuple), "a list"),
        (dict, "an object"),
        ((bytes, bytearray), "binary data"),
        (decimal.Decimal, "a decimal number"),
    ):
        if isinstance(value, kind):
            return name
    return "null" if value is None else f"a value of type {type(value).__name__}"


def _describe(value: Any) -> str:
    """A value and its kind for messages: ``9.0 (a number)``, ``"9" (a string)``, ``null``."""
    if value is None:
        return "null"
    if isinstance(value, (bool, numbers.Integral, float, str, decimal.Decimal)):
        return f"{_show(value)} ({_kind(value)})"
    return _kind(value)


def _check_door(index: int, door: Any) -> Door:
    """Check door ``door`` at position ``index`` of the list; return it as a tuple of ints."""
    number, src, dst = _door_fields(index, door)
    shown = _show([number, src, dst])
    if not 1 <= number <= 9:
        raise DoorNumberError(f"door {index} {shown}: number must be in 1..9, not {_show(number)}")
    if src == EXIT:
        raise ExitRuleError(f"door {index} {shown}: no door may leave the exit -1")
    for name, room in (("from_room", src), ("to_room", dst)):
        if room < 0 and room != EXIT:
            raise RoomError(
                f"door {index} {shown}: {name} {_show(room)} is negative; the only negative room is the exit -1"
            )
    _check_nines(f"door {index} {shown}", number, dst)
    return number, src, dst


def _door_fields(index: int, door: Any) -> Door:
    """A door's three fields as ints, once it is a list of three integers."""
    if not isinstance(door, (list, tuple)):
        raise DoorShapeError(f"door {index}: must be a list [number, from_room, to_room], not {_describe(door)}")
    if len(door) != 3:
        raise DoorShapeError(
            f"door {index} {_show(door)}: must have 3 fields [number, from_room, to_room], not {len(door)}"
        )
    for name, value in zip(("number", "from_room", "to_room"), door):
        if not _is_integer(value):
            raise DoorTypeError(f"door {index} {_show(door)}: {name} must be an integer, not {_describe(value)}")
    number, src, dst = (int(v) for v in door)
    return number, src, dst


def _check_nines(door: str, number: int, dst: int) -> None:
    """Doors numbered 9, and only they, lead to the exit."""
    if number == 9 and dst != EXIT:
        raise ExitRuleError(f"{door}: a door numbered 9 must lead to the exit -1, not room {_show(dst)}")
    if number != 9 and dst == EXIT:
        raise ExitRuleError(f"{door}: only doors numbered 9 may lead to the exit -1")


def parse(doors: Any, max_doors: int | None = None) -> tuple[Door, ...]:
    """Check ``doors`` (a list of ``[number, from_room, to_room]``) and return it as int tuples.

    ``max_doors`` caps the list length (``None``: no cap) so that a huge record is refused before
    any work is spent on it.  Raises a subclass of :class:`NonaryError` naming the first problem.

    >>> parse([[8, 0, 1], [9, 1, -1]])
    ((8, 0, 1), (9, 1, -1))
    """
    if not isinstance(doors, (list, tuple)):
        raise DoorListError(f"doors must be a list of [number, from_room, to_room] triples, not {_describe(doors)}")
    if not doors:
        raise DoorListError("doors is empty: at least one door 9 to the exit is needed")
    if max_doors is not None and len(doors) > max_doors:
        raise TooManyDoorsError(len(doors), max_doors)
    checked = tuple(_check_door(i, door) for i, door in enumerate(doors))
    if not any(number == 9 for number, _, _ in checked):
        raise DoorListError("no door numbered 9: nobody can ever reach the exit")
    return checked
