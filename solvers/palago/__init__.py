"""Palago creatures: closed shapes of blue regions on a hexagonal grid (docs/rules.md section 1).

Pure algorithms: no Ray, no files.  ``count_creatures`` runs the anchored search (below a list of
tree prefixes, for sharding), ``frontier`` cuts the tree into prefixes, ``prefix_nodes`` measures the work below each.
"""

from .canonical import Tile, canonical_tiles, decode_codes, encode_tiles, images, key_of, tiles_from_key
from .search import MAX_N, Catalogue, SearchCounts, count_creatures, frontier, prefix_nodes

__all__ = [
    "MAX_N",
    "Catalogue",
    "SearchCounts",
    "Tile",
    "canonical_tiles",
    "images",
    "count_creatures",
    "decode_codes",
    "encode_tiles",
    "frontier",
    "key_of",
    "prefix_nodes",
    "tiles_from_key",
]
