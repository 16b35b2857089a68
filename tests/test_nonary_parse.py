"""The door-list contract (docs/rules.md section 3, "Invalid door lists"): every invalid kind is
rejected with its own error class and a message naming the door; valid oddities pass."""

from __future__ import annotations

import numpy as np
import pytest

from batchenum.solvers.nonary import (
    DoorListError,
    DoorNumberError,
    DoorShapeError,
    DoorTypeError,
    ExitRuleError,
    NonaryError,
    RoomError,
    TooManyDoorsError,
    parse,
)

INVALID = [
    # (doors, error class, words the message must contain)
    ([[10, 0, 1], [9, 1, -1]], DoorNumberError, ["door 0", "1..9", "10"]),
    ([[9, 0, -1], [0, 0, 1]], DoorNumberError, ["door 1", "1..9"]),
    ([[9.0, 0, -1]], DoorTypeError, ["door 0", "integer", "9.0"]),
    ([[9, "0", -1]], DoorTypeError, ["door 0", "from_room", '"0" (a string)']),
    ([["9", 0, -1]], DoorTypeError, ["door 0", "number"]),
    ([[9, 0, True]], DoorTypeError, ["door 0", "to_room", "true (a boolean)"]),
    ([[9, 0, None]], DoorTypeError, ["door 0", "to_room", "not null"]),
    ([[9, 0, -1], [8, 0]], DoorShapeError, ["door 1", "3 fields"]),
    ([[9, 0, -1, 4]], DoorShapeError, ["door 0", "3 fields"]),
    ([9, 0, -1], DoorShapeError, ["door 0", "must be a list"]),
    ([[9, 0, 2]], ExitRuleError, ["door 0", "must lead to the exit"]),
    ([[9, 0, -1], [4, 0, -1]], ExitRuleError, ["door 1", "only doors numbered 9"]),
    ([[9, 0, -1], [4, -1, 0]], ExitRuleError, ["door 1", "leave the exit"]),
    ([[9, 0, -1], [4, 0, -2]], RoomError, ["door 1", "-2"]),
    ([[9, -3, -1]], RoomError, ["door 0", "-3"]),
    ([], DoorListError, ["empty"]),
    ([[4, 0, 1], [5, 1, 0]], DoorListError, ["no door numbered 9"]),
    ({"doors": [[9, 0, -1]]}, DoorListError, ["must be a list"]),
    ("[[9, 0, -1]]", DoorListError, ["must be a list"]),
    (None, DoorListError, ["must be a list"]),
]


@pytest.mark.parametrize(
    "doors, kind, words", INVALID, ids=[f"{kind.__name__}-{i}" for i, (_, kind, _) in enumerate(INVALID)]
)
def test_each_invalid_kind_has_its_reason(doors, kind, words):
    with pytest.raises(kind) as caught:
        parse(doors)
    assert isinstance(caught.value, NonaryError) and isinstance(caught.value, ValueError)
    for word in words:
        assert word in str(caught.value)


@pytest.mark.parametrize(
    "doors",
    [
        [[1, 0, 1], [2, 1, 0], [9, 1, -1]],  # a cycle back to room 0
        [[5, 0, 0], [9, 0, -1]],  # a self-loop
        [[3, 0, 1], [3, 0, 1], [9, 1, -1], [9, 1, -1]],  # parallel doors
        [[9, 0, -1], [4, 7, 8], [9, 8, -1]],  # rooms that cannot be reached
        [[9, 5, -1]],  # no door at all out of room 0
        [[2, 0, 123456789012345678901234567890], [9, 123456789012345678901234567890, -1]],  # huge room names
    ],
)
def test_valid_oddities_pass(doors):
    assert parse(doors) == tuple(tuple(d) for d in doors)


def test_numpy_integers_and_tuples_are_accepted():
    doors = np.array([[8, 0, 1], [9, 1, -1]], dtype=np.int64)
    parsed = parse([tuple(row) for row in doors])
    assert parsed == ((8, 0, 1), (9, 1, -1))
    assert all(type(v) is int for d in parsed for v in d)


def test_max_doors_refuses_before_looking_at_the_doors():
    with pytest.raises(TooManyDoorsError) as caught:
        parse([["junk"]] * 5, max_doors=4)
    assert (caught.value.doors, caught.value.limit) == (5, 4)
    assert "limit of 4" in str(caught.value)
    assert parse([[9, 0, -1]] * 4, max_doors=4)
