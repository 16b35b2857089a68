"""``batchenum palago show`` and ``batchenum palago gallery``: look at creatures and their sums.

show:    one creature, given by a sum (``4b+5c``) or a key (``1,0,1,1 0,1,0,1 1,1,2,1``): prints its
         canonical key, size, stabiliser order and sum, and optionally draws it as SVG.
gallery: one self-contained HTML page with every creature of size N, grouped by symmetry, computed
         on the spot or read from a catalogue written by ``batchenum run palago --catalogue-max-n``.
"""

from __future__ import annotations

import argparse
import json
import os

from pipeline.cli import Command, positive_int
from pipeline.errors import PipelineError

__all__ = ["COMMANDS", "creature_from_text", "gallery_items"]


def creature_from_text(text: str) -> list:
    """The creature named by ``text``: a key (it contains commas: ``q,r,t,regions`` per tile) or
    a sum.  Raises ValueError saying what is wrong with it."""
    from solvers.palago import tiles_from_key
    from solvers.palago.sums import decode, encode

    text = text.strip()
    if "," in text:
        tiles = tiles_from_key(text)
        encode(tiles)  # checks that the key's tiles are one closed creature, with a clear error
        return tiles
    return decode(text)


def _write_text(path: str, text: str) -> None:
    """Write ``text`` to ``path`` atomically (temporary name, then rename)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------- show


def _add_show_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("creature", metavar="SUM_OR_KEY",
                        help="a creature sum such as 4b+5c, or a key as in the catalogue's key column "
                             "(quote it: '1,0,1,1 0,1,0,1 1,1,2,1')")
    parser.add_argument("--svg", metavar="FILE", help="also draw the creature, as given, to FILE (SVG)")


def _show(args: argparse.Namespace) -> int:
    from solvers.palago import canonical_tiles, key_of
    from solvers.palago.render import creature_svg
    from solvers.palago.sums import encode

    tiles = creature_from_text(args.creature)
    canonical, stabiliser = canonical_tiles(tiles)
    name = encode(canonical)
    print(f"key:        {key_of(canonical)}")
    print(f"size:       {len(tiles)}")
    print(f"stabiliser: {stabiliser}")
    print(f"sum:        {name}")
    if args.svg:
        _write_text(args.svg, creature_svg(tiles, title=name) + "\n")
        print(f"picture:    {args.svg}")
    return 0


# ------------------------------------------------------------------------------------- gallery


def _add_gallery_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=positive_int, required=True, metavar="N",
                        help="creature size (n = 16 has 1,335 creatures; n = 20 has 23,592)")
    parser.add_argument("--out", default="results", metavar="DIR",
                        help="write DIR/palago/gallery_nN.html (default: results)")
    parser.add_argument("--from", dest="source", metavar="DIR",
                        help="read the creatures from the catalogue DIR/palago/creatures/ written by "
                             "`batchenum run palago --catalogue-max-n M` (M >= N) instead of searching")


def gallery_items(n: int, source: str | None = None) -> list:
    """The creatures of size ``n`` as ``GalleryItem``: searched for, or read from the catalogue
    under ``source``/palago/creatures when ``source`` is given."""
    from solvers.palago.render import GalleryItem

    if source is None:
        from solvers.palago import count_creatures, decode_codes, key_of
        from solvers.palago.sums import encode

        _, catalogue = count_creatures(n, catalogue_max_n=n)
        found = [decode_codes(catalogue.tile_codes(k)) for k in range(len(catalogue)) if catalogue.sizes[k] == n]
        stabilisers = [int(s) for s, size in zip(catalogue.stabilisers, catalogue.sizes) if size == n]
        return [GalleryItem(key_of(tiles), stabiliser, encode(tiles), tiles)
                for tiles, stabiliser in zip(found, stabilisers)]
    return [GalleryItem(row["key"], row["stabiliser"], row["sum"], row["tiles"]) for row in _read_catalogue(n, source)]


def _read_catalogue(n: int, source: str) -> list[dict]:
    """Rows of size ``n`` from a catalogue; catalogues written before the sum column get sums now."""
    import pandas as pd

    from solvers.palago import Tile
    from solvers.palago.sums import encode

    root = os.path.join(source, "palago", "creatures")
    if not os.path.isdir(root):
        raise PipelineError(f"no catalogue at {root}: run `batchenum run palago --max-n {n} --catalogue-max-n {n} "
                            f"--out {source}` first, or drop --from to search directly")
    part = os.path.join(root, f"n={n}")
    if not os.path.isdir(part):
        known = sorted(int(name[2:]) for name in os.listdir(root) if name.startswith("n="))
        if known and n <= known[-1]:
            return []  # the catalogue covers n, and no creature has exactly n tiles
        raise PipelineError(f"the catalogue at {root} stops at n = {known[-1] if known else 0}: rerun with "
                            f"--catalogue-max-n {n} or more, or drop --from")
    frame = pd.read_parquet(part)
    rows = []
    for record in frame.to_dict("records"):
        tiles = [Tile(*values) for values in json.loads(record["tiles"])]
        rows.append({"key": record["key"], "stabiliser": int(record["stabiliser"]), "tiles": tiles,
                     "sum": record.get("sum") or encode(tiles)})
    return rows


def _gallery(args: argparse.Namespace) -> int:
    from solvers.palago.render import gallery_html

    items = gallery_items(args.n, args.source)
    path = os.path.join(args.out, "palago", f"gallery_n{args.n}.html")
    _write_text(path, gallery_html(args.n, items) + "\n")
    print(f"palago gallery: {len(items)} creatures of size {args.n} in {path}")
    return 0


COMMANDS = [
    Command(("palago", "show"), "show one Palago creature: canonical key, size, symmetry, sum, picture",
            _add_show_arguments, _show),
    Command(("palago", "gallery"), "write an HTML page with every Palago creature of size N",
            _add_gallery_arguments, _gallery),
]
