"""Creature sums: the published sums, the convention search, round trips, errors.

Closure is judged by the literal reading of the rules in palago_oracle.py, not by the code under test.
"""

from __future__ import annotations

import itertools
import random

import pytest
from palago_oracle import DIRECTIONS, creatures_on

from batchenum.solvers.palago import canonical_tiles, count_creatures, decode_codes, images, key_of, tiles_from_key
from batchenum.solvers.palago.model import tile_corners
from batchenum.solvers.palago.sums import (
    LETTER_ROTATION,
    UP,
    NotACreatureError,
    SumNotClosedError,
    SumStepError,
    SumSyntaxError,
    decode,
    encode,
)

EYE = "4b+5c"
TWELVE = "0a+1c+2a+2c+2c+2c+3b+2c3a+4a----3b"  # both published sums (docs/rules.md, "Creature sums")


@pytest.fixture(scope="module")
def catalogue():
    """Every canonical creature up to n = 16 (5,603 of them), as tiles."""
    _, found = count_creatures(16, catalogue_max_n=16)
    return [decode_codes(found.tile_codes(k)) for k in range(len(found))]


def _oracle_closes(tiles) -> bool:
    """Whether the oracle finds exactly these tiles (with these regions) as a closed blue creature."""
    cells = frozenset((t.q, t.r) for t in tiles)
    expected = frozenset(
        ((t.q, t.r), t.t, kind) for t in tiles for kind, bit in (("tip", 1), ("body", 2)) if t.regions & bit
    )
    return expected in creatures_on(cells, {(t.q, t.r): t.t for t in tiles})


# ------------------------------------------------------------------------------ published sums


def test_the_eye_is_three_tips_at_one_corner_and_the_n3_creature(catalogue):
    eye = decode(EYE)
    assert len(eye) == 3 and all(t.regions == 1 for t in eye)  # tips only
    assert len({tile_corners(t.q, t.r)[t.t] for t in eye}) == 1  # all three tips at one blue corner
    assert _oracle_closes(eye)
    (n3,) = [c for c in catalogue if len(c) == 3]
    assert key_of(canonical_tiles(eye)[0]) == key_of(n3)


def test_the_twelve_tile_sum_closes_on_a_catalogue_creature(catalogue):
    twelve = decode(TWELVE)
    assert len(twelve) == 12
    assert _oracle_closes(twelve)
    assert key_of(canonical_tiles(twelve)[0]) in {key_of(c) for c in catalogue if len(c) == 12}


def _reference_walk(text, letters, up, clockwise, minus):
    """A plain reading of the sum rules under one candidate convention: {hex: rotation}, or None
    when a step is impossible.  minus: what '-' leaves the pointer at."""
    here, pointer, stack, last = (0, 0), up, [], None
    hexes = {here: letters["a"]}
    for ch in text:
        if ch.isdigit():
            pointer = (pointer + clockwise * int(ch)) % 6
        elif ch in "abc":
            target = (here[0] + DIRECTIONS[pointer][0], here[1] + DIRECTIONS[pointer][1])
            if target in hexes:
                return None
            hexes[target], last = letters[ch], (target, pointer)
        elif ch == "+":
            if last is None:
                return None
            stack.append((here, pointer, last[1]))
            here, pointer, last = last[0], (last[1] + 3) % 6, None
        else:
            if not stack:
                return None
            here, before, into = stack.pop()
            pointer = {"at child": into, "away from child": (into + 3) % 6, "kept": pointer, "up": up}[minus]
            last = None
    return hexes


def _turn_60(hexes):
    """Hexes turned 60 degrees: colours swap, so a yellow creature becomes a blue one."""
    return {(-r, q + r): (t + 2) % 3 for (q, r), t in hexes.items()}


def _closes(hexes, n):
    """'blue' or 'yellow' if a closed creature of that colour passes through all n hexes."""
    if hexes is None or len(hexes) != n:
        return None
    for colour, cells in (("blue", hexes), ("yellow", _turn_60(hexes))):
        if creatures_on(frozenset(cells), cells):
            return colour
    return None


def test_the_fixed_convention_is_one_of_the_conventions_that_close_both_sums():
    fits = []
    for rotations in itertools.permutations(range(3)):
        letters = dict(zip("abc", rotations))
        for up, clockwise, minus in itertools.product(range(6), (-1, 1), ("at child", "away from child", "kept", "up")):
            colours = [
                _closes(_reference_walk(text, letters, up, clockwise, minus), n) for text, n in ((EYE, 3), (TWELVE, 12))
            ]
            if all(colours):
                fits.append((rotations, up, clockwise, minus, colours[0]))
    fixed = (tuple(LETTER_ROTATION[x] for x in "abc"), UP, -1, "at child", "blue")
    assert fixed in fits
    # twelve walks (six letter assignments, each with two starting directions) close both sums,
    # half of them on yellow creatures; only the "at child" reading of '-' does
    assert len(fits) == 12 and {f[3] for f in fits} == {"at child"}
    assert sum(f[4] == "yellow" for f in fits) == 6


def test_yellow_creatures_decode_turned_into_blue_ones():
    """Every two-letter sum that closes, on either colour, is the eye, returned blue."""
    yellow_seen = 0
    for d1, l1, d2, l2 in itertools.product("012345", "abc", "012345", "abc"):
        text = f"{d1}{l1}+{d2}{l2}"
        colour = _closes(_reference_walk(text, LETTER_ROTATION, UP, -1, "at child"), 3)
        if colour is None:
            with pytest.raises((SumNotClosedError, SumStepError)):  # or the second tile hits the first
                decode(text)
            continue
        yellow_seen += colour == "yellow"
        assert key_of(canonical_tiles(decode(text))[0]) == key_of(canonical_tiles(decode(EYE))[0])
        assert _oracle_closes(decode(text))
    assert yellow_seen


# ------------------------------------------------------------------------------ round trips


def test_encode_decode_round_trip_on_every_creature_up_to_16(catalogue):
    assert len(catalogue) == 5603  # sum of the published free counts for n = 1..16
    for tiles in catalogue:
        text = encode(tiles)
        assert sum(ch in "abc" for ch in text) == len(tiles) - 1  # the rules: n - 1 letters
        assert key_of(decode(text)) == key_of(tiles), text  # the same fixed creature, not just its class


def test_round_trip_on_moved_creatures(catalogue):
    """Any image of a creature (a seeded choice of symmetry, translated) gets a sum of its class."""
    rng = random.Random(6)
    for tiles in rng.sample([c for c in catalogue if len(c) <= 13], 60):
        image = rng.choice(images(tiles)[1:])
        dq, dr = rng.randrange(-5, 6), rng.randrange(-5, 6)
        moved = [t._replace(q=t.q + dq, r=t.r + dr) for t in image]
        rng.shuffle(moved)
        assert key_of(canonical_tiles(decode(encode(moved)))[0]) == key_of(tiles)


def test_encode_refuses_tiles_that_are_not_a_creature():
    eye = tiles_from_key("1,0,1,1 0,1,0,1 1,1,2,1")
    with pytest.raises(NotACreatureError, match="not a closed blue creature"):
        encode([eye[0]._replace(regions=3), *eye[1:]])  # a body that opens onto empty space
    with pytest.raises(NotACreatureError):
        encode([])


# ------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    "text, error, position, token, reason",
    [
        ("4b+5x", SumSyntaxError, 5, "x", "not part of a sum"),
        ("4b+6c", SumSyntaxError, 4, "6", "not part of a sum"),
        ("+4b5c", SumStepError, 1, "+", "nothing to step into"),
        ("4b+5c+", None, None, None, None),  # stepping into a leaf is allowed; the sum still closes
        ("4b++5c", SumStepError, 4, "+", "nothing to step into"),
        ("4b-5c", SumStepError, 3, "-", "at the starting tile"),
        ("4b+0a", SumStepError, 5, "a", "hex (0, 0) already holds the tile placed by the starting tile"),
        ("4b+5c-1c", SumStepError, 8, "c", "already holds the tile placed by position 5"),
        ("4b+5c5c", SumNotClosedError, 7, "c", "does not close"),
        ("4b", SumNotClosedError, 0, "a", "does not close"),
        ("", SumNotClosedError, 0, "a", "does not close"),
    ],
)
def test_malformed_sums_name_the_token(text, error, position, token, reason):
    if error is None:
        assert len(decode(text)) == 3
        return
    with pytest.raises(error) as caught:
        decode(text)
    assert (caught.value.position, caught.value.token) == (position, token)
    assert isinstance(caught.value, ValueError)
    where = "the starting tile" if position == 0 else f"position {position} ({token!r})"
    assert where in str(caught.value) and reason in str(caught.value)
