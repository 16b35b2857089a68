"""Creature sums: the game designer's names for creatures (docs/rules.md, "Creature sums").

A sum is a walk that rebuilds a creature tile by tile.  It starts on one tile in rotation ``a`` at
hex (0, 0) with a pointer pointing "up"; then, character by character:

- a digit ``0``-``5`` turns the pointer that many 60 degree steps clockwise;
- ``a``, ``b``, ``c`` place a tile in that rotation on the hex the pointer points at;
- ``+`` steps into the tile just placed (from the tile we stand on); the pointer then points back
  at the tile we came from;
- ``-`` steps back out to that tile; the pointer then points at the tile just left.

The rules leave the convention open.  This module fixes it as follows, in the geometry of model.py
(directions numbered counter-clockwise, direction k's normal at 300 + 60k degrees):

- "up" is direction 3, ``(-1, 1)``, the neighbour at 120 degrees (the nearest to straight up in
  the pointy-top frame of docs/rules.md; straight up when hexes are drawn flat-topped);
- clockwise decreases the direction index (digit k: direction d becomes d - k mod 6);
- ``a``, ``b``, ``c`` are rotations t = 2, 1, 0 (blue tip at corner 4, 2, 0): each letter turns the
  tip 120 degrees clockwise from the one before;
- ``-`` leaves the pointer pointing at the tile just left (as it was before the ``+``).

Under this convention both published sums close on blue creatures: ``4b+5c`` is the eye (n = 3,
three tips meeting at one blue corner) and ``0a+1c+2a+2c+2c+2c+3b+2c3a+4a----3b`` is a creature
of 12 tiles.  A systematic search over the 6 letter assignments x 6 starting directions x 2 senses
of clockwise x 5 readings of ``-`` (pointer at the child just left, as before the ``+``, pointing
away from that child, kept as it was in the child, reset to up) finds 24 fits: 12 conventions, each
with the first two readings of ``-``, which agree whenever ``+`` directly follows its letter, as in
both published sums.  The 12 are images of one another under the symmetries of the hex grid
(reflections flip the sense of clockwise, 60 degree turns swap the colours), and all of them decode
each published sum to the same creature shape.  Half of them close the sums on yellow creatures.

**Colour.**  A set of tiles may hold a yellow creature instead of a blue one; a yellow creature is
a blue one turned 60 degrees.  ``decode`` prefers a blue creature through all the tiles; failing
one, it takes a yellow one and returns it turned 60 degrees counter-clockwise (now blue), so it
always returns blue tiles.  ``encode`` always describes a blue creature.

>>> from batchenum.solvers.palago import key_of
>>> key_of(decode("4b+5c"))
'1,0,1,1 0,1,0,1 1,1,2,1'
>>> encode(decode("4b+5c"))
'4b1c'
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .canonical import Tile, key_of
from .model import DIRECTIONS
from .regions import closed_creatures, creatures_of_either_colour, hexes_of, open_hexes, turn_60

__all__ = [
    "UP",
    "LETTER_ROTATION",
    "SumError",
    "SumTokenError",
    "SumSyntaxError",
    "SumStepError",
    "SumNotClosedError",
    "NotACreatureError",
    "decode",
    "encode",
]

UP = 3  # the pointer's starting direction
LETTER_ROTATION = {"a": 2, "b": 1, "c": 0}  # rotation letter -> t (blue tip at corner 2t)
_ROTATION_LETTER = {t: letter for letter, t in LETTER_ROTATION.items()}
_ROOT_ROTATION = LETTER_ROTATION["a"]  # every sum starts on an `a` tile


class SumError(ValueError):
    """Root of this module's errors."""


class SumTokenError(SumError):
    """A sum failed at one token: ``position`` is 1-based in the sum (0 means the starting tile,
    len(sum) + 1 the end of the sum) and ``token`` the character there."""

    def __init__(self, text: str, position: int, token: str, reason: str):
        self.sum, self.position, self.token, self.reason = text, position, token, reason
        if position == 0:
            where = "the starting tile 'a'"
        elif position > len(text):
            where = "the end of the sum"
        else:
            where = f"position {position} ({token!r})"
        super().__init__(f"sum {text!r}, {where}: {reason}")


class SumSyntaxError(SumTokenError):
    """A character that is not a digit 0-5, a letter a-c, '+' or '-'."""


class SumStepError(SumTokenError):
    """A '+' with nothing to step into, a '-' at the starting tile, or a tile on an occupied hex."""


class SumNotClosedError(SumTokenError):
    """The tiles of a sum hold no closed creature through all of them (or more than one)."""


class NotACreatureError(SumError):
    """``encode`` was given tiles that are not one closed blue creature."""


@dataclass(frozen=True)
class _Placement:
    hex: tuple[int, int]  # where the tile went
    t: int  # its rotation
    position: int  # 1-based position of the letter in the sum; 0 for the starting tile
    token: str  # the letter


# ------------------------------------------------------------------------------------- decode


def decode(text: str) -> list[Tile]:
    """The closed blue creature that the sum ``text`` builds: translation-normalised tiles sorted
    by code, regions set.  Raises a ``SumTokenError`` subclass naming the token that failed; tiles
    holding several closed creatures of one colour through all of them would be refused as
    ambiguous (no tile set of up to 16 tiles does; none holds both a blue and a yellow one either).

    >>> len(decode("0a+1c+2a+2c+2c+2c+3b+2c3a+4a----3b"))
    12
    """
    placements = _walk(text)
    colour, creatures = creatures_of_either_colour({p.hex: p.t for p in placements})
    if len(creatures) == 1:
        return creatures[0]
    end = len(text) + 1
    if creatures:
        raise SumNotClosedError(
            text,
            end,
            "",
            f"its tiles hold {len(creatures)} closed {colour} creatures "
            "through all of them; a sum must name exactly one",
        )
    raise _not_closed(text, placements)


def _walk(text: str) -> list[_Placement]:
    """Place the tiles of sum ``text`` (no closure check), the starting tile first."""
    placements = [_Placement((0, 0), _ROOT_ROTATION, 0, "a")]
    by_hex = {(0, 0): placements[0]}
    here, pointer = (0, 0), UP
    stack: list[tuple[tuple[int, int], int]] = []  # (tile we stepped out of, direction into the child)
    just_placed: tuple[tuple[int, int], int] | None = None  # (hex, direction) of the last tile placed here
    for position, token in enumerate(text, start=1):
        if token in "012345":
            pointer = (pointer - int(token)) % 6  # clockwise decreases the counter-clockwise index
        elif token in LETTER_ROTATION:
            target = (here[0] + DIRECTIONS[pointer][0], here[1] + DIRECTIONS[pointer][1])
            if target in by_hex:
                earlier = by_hex[target]
                raise SumStepError(
                    text,
                    position,
                    token,
                    f"hex {target} already holds the tile placed by "
                    + ("the starting tile" if earlier.position == 0 else f"position {earlier.position}"),
                )
            by_hex[target] = _Placement(target, LETTER_ROTATION[token], position, token)
            placements.append(by_hex[target])
            just_placed = (target, pointer)
        elif token == "+":
            if just_placed is None:
                raise SumStepError(
                    text,
                    position,
                    token,
                    "nothing to step into: '+' must follow a letter that placed a tile from the tile we stand on",
                )
            stack.append((here, just_placed[1]))
            here, pointer = just_placed[0], (just_placed[1] + 3) % 6
            just_placed = None
        elif token == "-":
            if not stack:
                raise SumStepError(
                    text,
                    position,
                    token,
                    "'-' at the starting tile: there is no tile to step back out to (each '-' needs an earlier '+')",
                )
            here, pointer = stack.pop()
            just_placed = None
        else:
            raise SumSyntaxError(
                text,
                position,
                token,
                "not part of a sum: expected a digit 0-5, a rotation letter a, b or c, '+' or '-'",
            )
    return placements


def _not_closed(text: str, placements: list[_Placement]) -> SumNotClosedError:
    """The error for tiles holding no closed creature through all of them: it names the first tile
    (in sum order) whose regions, blue and yellow, all open onto empty space."""
    hexes = {p.hex: p.t for p in placements}
    turned_back = {(-r, q + r): (q, r) for q, r in hexes}  # turn_60's image -> original hex
    open_both = open_hexes(hexes) & {turned_back[h] for h in open_hexes(turn_60(hexes))}
    for placement in placements:
        if placement.hex in open_both:
            return SumNotClosedError(
                text,
                placement.position,
                placement.token,
                f"the sum does not close: every region of the tile placed here (hex "
                f"{placement.hex}), blue or yellow, opens onto empty space",
            )
    return SumNotClosedError(
        text,
        len(text) + 1,
        "",
        f"the sum does not close: its {len(placements)} tiles "
        "hold closed creatures, but none passes through all of them",
    )


# ------------------------------------------------------------------------------------- encode


def encode(tiles: Iterable[Tile]) -> str:
    """A sum that rebuilds the closed blue creature ``tiles`` (hexes, rotations and regions).

    The walk starts on the creature's first tile (in key order) of rotation ``a``, so ``decode``
    returns the same tiles up to translation.  The spanning tree claims all free neighbours of
    a tile before moving on, leaves come before branches, turns go clockwise from the pointer, and
    trailing ``-`` are dropped.  Raises ``NotACreatureError`` if ``tiles`` is not one closed
    creature.
    """
    tiles = _checked_creature(tiles)
    hexes = hexes_of(tiles)
    # A closed creature always has a tile of every rotation: at its vertex with the largest j (then
    # i), the hex (i, j) must have its tip there, or its body would reach a higher vertex; the same
    # argument along the other lattice axes gives the other two rotations.  So a root exists.
    root = next((t.q, t.r) for t in sorted(tiles, key=lambda t: (t.r, t.q)) if t.t == _ROOT_ROTATION)
    return _emit(hexes, _spanning_tree(hexes, root), root).rstrip("-")


def _checked_creature(tiles: Iterable[Tile]) -> list[Tile]:
    """``tiles`` as a list, after checking that they are exactly one closed blue creature."""
    tiles = [Tile(*tile) for tile in tiles]
    hexes = hexes_of(tiles)
    if not tiles or len(hexes) != len(tiles):
        raise NotACreatureError("a creature needs at least one tile and at most one tile per hex")
    if key_of(tiles) not in {key_of(creature) for creature in closed_creatures(hexes)}:
        raise NotACreatureError(
            f"tiles {key_of(tiles)!r} are not a closed blue creature through all of them "
            "(check the rotations and the regions column)"
        )
    return tiles


def _spanning_tree(hexes: dict, root: tuple[int, int]) -> dict:
    """Children of each hex as [(direction, hex), ...]: a depth-first walk from ``root`` in which
    every tile claims all its unclaimed neighbours at once (short sums, few '-')."""
    children: dict = {root: []}
    stack = [root]
    while stack:
        here = stack.pop()
        for direction, (dq, dr) in enumerate(DIRECTIONS):
            neighbour = (here[0] + dq, here[1] + dr)
            if neighbour in hexes and neighbour not in children:
                children[neighbour] = []
                children[here].append((direction, neighbour))
        stack.extend(child for _, child in reversed(children[here]))
    return children


def _emit(hexes: dict, children: dict, root: tuple[int, int]) -> str:
    """The sum text of the tree ``children`` from ``root``.  After a leaf, or after '-' back from a
    branch, the pointer points at that child, so every turn is known without simulating."""
    out: list[str] = []
    pending: list = [(root, UP)]  # (hex, pointer on arrival) to expand, or literal text
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            out.append(item)
            continue
        here, pointer = item
        ordered = sorted(children[here], key=lambda c: (bool(children[c[1]]), (pointer - c[0]) % 6))
        pieces: list = []
        for direction, child in ordered:
            pieces.append(f"{(pointer - direction) % 6}{_ROTATION_LETTER[hexes[child]]}")
            if children[child]:
                pieces += ["+", (child, (direction + 3) % 6), "-"]
            pointer = direction
        pending.extend(reversed(pieces))
    return "".join(out)
