"""Which closed creatures a set of placed tiles holds, read literally from the region table in docs/rules.md.

Independent of the search's vertex lattice: blue regions are joined across shared edges with a
union-find over (hex, region), exactly as the rules say, so sums and pictures can be checked against
the search rather than built from it.  A yellow creature is found by turning the tiles 60 degrees,
which swaps the colours.
"""

from __future__ import annotations

from collections.abc import Mapping

from .canonical import REGION_BODY, REGION_TIP, Tile, decode_codes, encode_tiles
from .model import DIRECTIONS

__all__ = ["Hexes", "closed_creatures", "creatures_of_either_colour", "hexes_of", "open_hexes", "turn_60"]

Hexes = Mapping[tuple[int, int], int]  # hex (q, r) -> rotation t


def hexes_of(tiles: list[Tile]) -> dict[tuple[int, int], int]:
    """The placed hexes of ``tiles`` as {(q, r): t} (regions dropped)."""
    return {(tile.q, tile.r): tile.t for tile in tiles}


def _region_at_edge(t: int, edge: int) -> int:
    """The rules' table (docs/rules.md): the blue tip of rotation t touches edges 2t and 2t+1, the body the rest."""
    return REGION_TIP if (edge - 2 * t) % 6 in (0, 1) else REGION_BODY


def _components(hexes: Hexes) -> list[tuple[set, bool]]:
    """The blue regions of ``hexes`` ({(q, r): t}) joined across shared edges: one (set of
    (hex, region), opens onto empty space) pair per component."""
    parent: dict = {}

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]  # path halving keeps the trees flat
            x = parent[x]
        return x

    opened = set()
    for (q, r), t in hexes.items():
        for edge, (dq, dr) in enumerate(DIRECTIONS):
            mine = ((q, r), _region_at_edge(t, edge))
            neighbour = (q + dq, r + dr)
            if neighbour in hexes:
                parent[find(mine)] = find((neighbour, _region_at_edge(hexes[neighbour], (edge + 3) % 6)))
            else:
                find(mine)
                opened.add(mine)
    components: dict = {}
    for region in list(parent):
        components.setdefault(find(region), set()).add(region)
    return [(regions, bool(regions & opened)) for regions in components.values()]


def closed_creatures(hexes: Hexes) -> list[list[Tile]]:
    """Every closed blue creature that passes through all the placed ``hexes`` ({(q, r): t}), each
    as translation-normalised tiles sorted by code (regions set), in a deterministic order."""
    found = []
    for regions, is_open in _components(hexes):
        if is_open or {hex_ for hex_, _ in regions} != set(hexes):
            continue
        masks: dict = {}
        for hex_, region in regions:
            masks[hex_] = masks.get(hex_, 0) | region
        found.append(decode_codes(encode_tiles(Tile(q, r, hexes[(q, r)], masks[(q, r)]) for q, r in masks)))
    return sorted(found, key=encode_tiles)


def open_hexes(hexes: Hexes) -> set[tuple[int, int]]:
    """The hexes of ``hexes`` ({(q, r): t}) whose blue regions all open onto empty space."""
    closed = {hex_ for regions, is_open in _components(hexes) if not is_open for hex_, _ in regions}
    return set(hexes) - closed


def turn_60(hexes: Hexes) -> dict[tuple[int, int], int]:
    """``hexes`` turned 60 degrees counter-clockwise about hex (0, 0).  The turn swaps the corner
    colours: the yellow tip (corner 2t+3) lands on blue corner 2t+4, so rotation t becomes t+2."""
    return {(-r, q + r): (t + 2) % 3 for (q, r), t in hexes.items()}


def creatures_of_either_colour(hexes: Hexes) -> tuple[str, list[list[Tile]]]:
    """The closed creatures through all ``hexes``, blue ones first: ("blue", creatures) if there
    are any, else ("yellow", the yellow ones turned 60 degrees into blue creatures), else
    ("none", [])."""
    blue = closed_creatures(hexes)
    if blue:
        return "blue", blue
    yellow = closed_creatures(turn_60(hexes))
    return ("yellow", yellow) if yellow else ("none", [])
