"""Tile codes and creature keys.

The search describes a creature by its tiles, each packed into one integer code:

    code = (r * 128 + q) * 16 + t * 4 + regions

with (q, r) the hex in axial coordinates after translating the creature so that its smallest q and
smallest r are 0, t the tile's rotation, and ``regions`` which of the tile's blue regions belong to
the creature (1: the tip, 2: the body, 3: both).  A creature's codes, sorted, identify it up to
translation; the canonical creature of a free class is the one the search counts (see search.py),
and its key is the text form of its sorted codes: ``"q,r,t,regions"`` per tile, joined by spaces.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from .model import GROUP, transform_tile

__all__ = [
    "Tile",
    "canonical_tiles",
    "decode_codes",
    "encode_tiles",
    "images",
    "key_of",
    "tiles_from_key",
    "REGION_TIP",
    "REGION_BODY",
]

REGION_TIP = 1
REGION_BODY = 2
_CODE_WIDTH = 128  # must match search._CODE_WIDTH


class Tile(NamedTuple):
    q: int  # axial column
    r: int  # axial row
    t: int  # rotation: the blue tip is at corner 2t
    regions: int  # REGION_TIP | REGION_BODY: which blue regions belong to the creature


def decode_codes(codes: Iterable[int]) -> list[Tile]:
    """Tiles from tile codes, in code order."""
    tiles = []
    for code in codes:
        code = int(code)
        position, low = divmod(code, 16)
        r, q = divmod(position, _CODE_WIDTH)
        tiles.append(Tile(q, r, low // 4, low % 4))
    return tiles


def encode_tiles(tiles: Iterable[Tile]) -> list[int]:
    """Sorted, translation-normalised codes of a set of tiles."""
    tiles = list(tiles)
    if not tiles:
        raise ValueError("a creature has at least one tile")
    min_q = min(tile.q for tile in tiles)
    min_r = min(tile.r for tile in tiles)
    return sorted(((t.r - min_r) * _CODE_WIDTH + (t.q - min_q)) * 16 + t.t * 4 + t.regions for t in tiles)


def key_of(tiles: Iterable[Tile]) -> str:
    """The text key of a creature given by its tiles (translation-normalised, sorted)."""
    return " ".join(f"{t.q},{t.r},{t.t},{t.regions}" for t in decode_codes(encode_tiles(tiles)))


def tiles_from_key(key: str) -> list[Tile]:
    """Parse a key written by ``key_of``; raises ValueError naming the bad part."""
    tiles = []
    for part in key.split():
        fields = part.split(",")
        if len(fields) != 4 or not all(f.lstrip("-").isdigit() for f in fields):
            raise ValueError(f"bad tile {part!r} in key: expected four integers 'q,r,t,regions'")
        q, r, t, regions = map(int, fields)
        if t not in (0, 1, 2) or regions not in (1, 2, 3):
            raise ValueError(f"bad tile {part!r} in key: rotation must be 0-2 and regions 1-3")
        tiles.append(Tile(q, r, t, regions))
    if not tiles:
        raise ValueError("empty creature key")
    return tiles


def images(tiles: Iterable[Tile]) -> list[list[Tile]]:
    """The creature's six images under D3 (the identity first), each translation-normalised."""
    tiles = list(tiles)
    result = []
    for g in GROUP:
        moved = [Tile(*transform_tile(g, t.q, t.r, t.t), t.regions) for t in tiles]
        result.append(decode_codes(encode_tiles(moved)))
    return result


def _order_key(tiles: list[Tile]) -> tuple:
    """The total order the search uses to pick a class's canonical member: the variances of the
    hexes' positions along the axes q, r and q + r, then the sorted tile codes."""
    n = len(tiles)
    qs = [t.q for t in tiles]
    rs = [t.r for t in tiles]
    ss = [t.q + t.r for t in tiles]
    variance = lambda xs: n * sum(x * x for x in xs) - sum(xs) ** 2  # noqa: E731
    return (variance(qs), variance(rs), variance(ss), encode_tiles(tiles))


def canonical_tiles(tiles: Iterable[Tile]) -> tuple[list[Tile], int]:
    """The canonical member of a creature's free class and the creature's stabiliser order."""
    keyed = [(_order_key(image), image) for image in images(tiles)]
    best_key, best = min(keyed, key=lambda pair: pair[0])
    stabiliser = sum(1 for k, _ in keyed if k == keyed[0][0])
    return best, stabiliser
