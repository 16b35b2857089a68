"""``batchenum palago show`` and ``batchenum palago gallery``: look at creatures and their sums.

show:    one creature, given by a sum (``4b+5c``) or a key (``1,0,1,1 0,1,0,1 1,1,2,1``): prints its
         canonical key, size, stabiliser order and sum, and optionally draws it as SVG.
gallery: every creature of size N (or those of some stabiliser orders, or the first L) as
         self-contained HTML pages of at most P creatures and an index page, computed on the spot or
         read from a catalogue written by ``batchenum run palago --catalogue-max-n``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

from batchenum.pipeline.cli import Command, positive_int
from batchenum.pipeline.errors import PipelineError, UsageError
from batchenum.pipeline.progress import Progress
from batchenum.pipeline.storage import Storage

__all__ = ["COMMANDS", "creature_from_text", "gallery_frame", "gallery_items", "SEARCH_MAX_N", "MAX_SHOWN"]

# Sizes a gallery searches for on the spot (about threefold more time per tile:
# docs/benchmarks.md#palago-direct-search-plan), and creatures it shows without --limit or --force
# (50 pages of 500).
SEARCH_MAX_N = 16
MAX_SHOWN = 25_000


def creature_from_text(text: str) -> list:
    """The creature named by ``text``: a key (it contains commas: ``q,r,t,regions`` per tile) or
    a sum.  Raises ValueError saying what is wrong with it."""
    from batchenum.solvers.palago import tiles_from_key
    from batchenum.solvers.palago.sums import decode, encode

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
    parser.add_argument(
        "creature",
        metavar="SUM_OR_KEY",
        help="a creature sum such as 4b+5c, or a key as in the catalogue's key column "
        "(quote it: '1,0,1,1 0,1,0,1 1,1,2,1')",
    )
    parser.add_argument("--svg", metavar="FILE", help="also draw the creature, as given, to FILE (SVG)")


def _show(args: argparse.Namespace) -> int:
    from batchenum.solvers.palago import canonical_tiles, key_of
    from batchenum.solvers.palago.render import creature_svg
    from batchenum.solvers.palago.sums import encode

    tiles = creature_from_text(args.creature)
    canonical, stabiliser = canonical_tiles(tiles)
    name = encode(canonical)
    print(f"key:        {key_of(canonical)}")
    print(f"size:       {len(tiles)}")
    print(f"stabiliser: {stabiliser}")
    given = args.creature.strip()
    if "," in given or given == name:
        print(f"sum:        {name}")
    else:  # another sum of the same creature (another start, or the creature turned or mirrored)
        print(
            f"sum:        {name} (the canonical form of the sum given, {given}: the same creature up to "
            "rotation and reflection)"
        )
    if args.svg:
        _write_text(args.svg, creature_svg(tiles, title=name) + "\n")
        print(f"picture:    {args.svg}")
    return 0


# ------------------------------------------------------------------------------------- gallery


STABILISER_ORDERS = (1, 2, 3, 6)
_COLUMNS = ["key", "stabiliser", "sum", "tiles"]


def _add_gallery_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--n",
        type=positive_int,
        required=True,
        metavar="N",
        help="creature size (n = 16 has 3,404 creatures; n = 20 has 167,622: read those from "
        "a catalogue with --from rather than searching)",
    )
    parser.add_argument(
        "--out",
        default="results",
        metavar="DIR",
        help="write DIR/palago/gallery_nN/index.html and page-1.html, page-2.html, ... "
        "(default: results); filters add to the folder name, e.g. gallery_n20_stabiliser2",
    )
    parser.add_argument(
        "--from",
        dest="source",
        metavar="DIR",
        help="read the creatures from the catalogue DIR/palago/creatures/ written by "
        "`batchenum run palago --catalogue-max-n M` (M >= N) instead of searching",
    )
    parser.add_argument(
        "--per-page", type=positive_int, default=500, metavar="P", help="at most P creatures per page (default: 500)"
    )
    parser.add_argument(
        "--stabiliser",
        type=int,
        choices=STABILISER_ORDERS,
        action="append",
        metavar="S",
        help="only creatures whose symmetry group has order S (1, 2, 3 or 6); repeat for several",
    )
    parser.add_argument(
        "--limit",
        type=positive_int,
        metavar="L",
        help="only the first L creatures in gallery order (most symmetric first, then by key)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help=f"search sizes above {SEARCH_MAX_N} here, and write galleries of more than "
        f"{MAX_SHOWN:,} creatures without --limit",
    )


def gallery_frame(n: int, source: str | None = None, stabilisers=None, limit: int | None = None):
    """The creatures of size ``n`` that a gallery shows, and how many there are of each stabiliser.

    Returns ``(frame, counts)``: ``frame`` has columns key, stabiliser, sum and tiles (JSON text, as in
    the catalogue), one row per creature whose stabiliser is in ``stabilisers`` (all when None), in
    gallery order (stabiliser descending, then key), at most ``limit`` rows; ``counts`` maps each
    stabiliser order to the number of creatures of size n with it, whatever the filters.  Searched for,
    or read from the catalogue under ``source``/palago/creatures (only its row groups of size n, only the
    requested stabilisers) when ``source`` is given.
    """
    import pandas as pd

    frame, counts = _read_catalogue(n, source, stabilisers) if source is not None else _search(n, stabilisers)
    frame = frame.sort_values(["stabiliser", "key"], ascending=[False, True], kind="stable", ignore_index=True)
    if limit is not None:
        frame = frame.head(limit)
    return pd.DataFrame(frame, columns=_COLUMNS), counts


def _search(n: int, stabilisers):
    import pandas as pd

    from batchenum.solvers.palago import count_creatures, decode_codes, key_of
    from batchenum.solvers.palago.sums import encode

    _, catalogue = count_creatures(n, catalogue_max_n=n)
    rows: list = []
    counts: dict[int, int] = {}
    for k in range(len(catalogue)):
        if catalogue.sizes[k] != n:
            continue
        stabiliser = int(catalogue.stabilisers[k])
        counts[stabiliser] = counts.get(stabiliser, 0) + 1
        if stabilisers and stabiliser not in stabilisers:
            continue
        tiles = decode_codes(catalogue.tile_codes(k))
        rows.append((key_of(tiles), stabiliser, encode(tiles), json.dumps([list(t) for t in tiles])))
    return pd.DataFrame(rows, columns=_COLUMNS), counts


def _read_catalogue(n: int, source: str, stabilisers):
    """The rows of size ``n`` (and of the given stabilisers) from a catalogue, and the stabiliser
    counts of size n.  Reads only the row groups holding size n, the stabiliser column first."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    catalogue = Storage.at(source).child("palago", "creatures")
    where = catalogue.display_root
    if not catalogue.exists(catalogue.root):
        raise PipelineError(
            f"no catalogue at {where}: run `batchenum run palago --max-n {n} --catalogue-max-n {n} "
            f"--out {source}` first, or drop --from to search directly"
        )
    covered = _catalogue_max_n(Storage.at(source).child("palago"))
    if covered is not None and n > covered:
        raise PipelineError(
            f"the catalogue at {where} stops at n = {covered}: rerun with --catalogue-max-n {n} or more, or drop --from"
        )
    # every page read is checked against its checksum: a damaged catalogue is an error, never creatures
    verified = ds.ParquetFileFormat(
        default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True)
    )
    try:
        # n is a column of the parts, sorted by it: row-group statistics skip the other sizes' rows
        dataset = ds.dataset(catalogue.root, format=verified, filesystem=catalogue.fs, exclude_invalid_files=False)
        size = ds.field("n") == n
        files = [fragment.path for fragment in dataset.get_fragments(filter=size)]
        where = files[0] if len(files) == 1 else where  # name the file when there is one
        _check_catalogue_footers(dataset, size)
        orders = dataset.to_table(columns=["stabiliser"], filter=size).column("stabiliser").to_pylist()
        wanted = size if not stabilisers else size & ds.field("stabiliser").isin(sorted(stabilisers))
        columns = [c for c in _COLUMNS if c in dataset.schema.names]  # catalogues before the sum column lack it
        table = dataset.to_table(columns=columns, filter=wanted)
    except (OSError, pa.ArrowException, _DamagedCatalogue) as error:
        raise PipelineError(
            f"the catalogue at {catalogue.uri(where)} is damaged or unreadable ({error}); no "
            f"creature from it is shown. Run `batchenum run palago --max-n M --catalogue-max-n M "
            f"--out {source}` (M >= {n}) again to rebuild it"
        ) from None
    counts: dict[int, int] = {}
    for order in orders:
        counts[order] = counts.get(order, 0) + 1
    frame = table.to_pandas()
    frame["stabiliser"] = frame["stabiliser"].astype("int64")
    return frame, counts


class _DamagedCatalogue(Exception):
    pass


def _catalogue_max_n(job_folder: Storage) -> int | None:
    """The largest n the committed catalogue covers, from its manifest (None when it has none)."""
    from batchenum.pipeline.parquet_format import StoreError
    from batchenum.pipeline.table_commit import read_manifest

    try:
        manifest = read_manifest(job_folder)
    except StoreError as error:
        raise PipelineError(str(error)) from None
    try:
        return int(manifest["params"]["catalogue_max_n"]) if manifest else None
    except (KeyError, TypeError, ValueError):
        return None


def _check_catalogue_footers(dataset, size) -> None:
    """Check, in the parts holding size n, what no page checksum covers: each footer's row counts
    agree with one another and with the rows of its n column, and its columns have the catalogue's
    types (a damaged footer could otherwise turn a column into another type, or hide rows)."""
    from batchenum.jobs.palago import CREATURES
    from batchenum.pipeline.parquet_format import table_schema

    declared = table_schema(CREATURES)
    for fragment in dataset.get_fragments(filter=size):
        metadata = fragment.metadata
        stated = sum(metadata.row_group(k).num_rows for k in range(metadata.num_row_groups))
        read = fragment.to_table(columns=["n"]).num_rows
        if not metadata.num_rows == stated == read:
            raise _DamagedCatalogue(
                f"{fragment.path}: its footer says {metadata.num_rows} rows, its row "
                f"groups {stated}, and {read} were read"
            )
        for field in fragment.physical_schema:
            index = declared.get_field_index(field.name)
            if index < 0 or not field.type.equals(declared.field(index).type):
                raise _DamagedCatalogue(f"{fragment.path}: column {field.name}: {field.type} is not in the catalogue")


def _items(frame) -> list:
    """GalleryItem per row of a gallery frame (tiles decoded, sums made for catalogues without them)."""
    from batchenum.solvers.palago import Tile
    from batchenum.solvers.palago.render import GalleryItem
    from batchenum.solvers.palago.sums import encode

    items = []
    for key, stabiliser, name, tiles_json in frame[_COLUMNS].itertuples(index=False):
        tiles = [Tile(*values) for values in _tile_values(key, tiles_json)]
        name = name if isinstance(name, str) and name else encode(tiles)  # catalogues before the sum column
        items.append(GalleryItem(key, int(stabiliser), name, tiles))
    return items


def _tile_values(key, tiles_json) -> list[list[int]]:
    """A catalogue row's ``tiles`` text as [q, r, t, regions] lists of integers; PipelineError naming
    the creature for anything else (a damaged or crafted catalogue: no page is written from it)."""
    try:
        tiles = json.loads(tiles_json)
    except (TypeError, ValueError):
        tiles = None
    if (
        not isinstance(tiles, list)
        or not tiles
        or not all(
            isinstance(tile, list) and len(tile) == 4 and all(type(value) is int for value in tile) for tile in tiles
        )
    ):
        raise PipelineError(
            f"the catalogue's creature {str(key)[:80]!r} has tiles that are not lists of four "
            f"integers [q, r, t, regions] ({str(tiles_json)[:80]!r}): the catalogue is damaged; "
            "rebuild it with `batchenum run palago --max-n M --catalogue-max-n M`"
        )
    return tiles


def gallery_items(n: int, source: str | None = None) -> list:
    """Every creature of size ``n`` as ``GalleryItem``, in gallery order: searched for, or read from
    the catalogue under ``source``/palago/creatures when ``source`` is given."""
    return _items(gallery_frame(n, source)[0])


def gallery_folder(n: int, stabilisers=None, limit: int | None = None) -> str:
    """The folder name of a gallery: gallery_nN, plus _stabiliserS... and _firstL for its filters."""
    name = f"gallery_n{n}"
    if stabilisers:
        name += "_stabiliser" + "-".join(str(s) for s in sorted(set(stabilisers), reverse=True))
    if limit is not None:
        name += f"_first{limit}"
    return name


def _selection(stabilisers, limit: int | None) -> str | None:
    words = []
    if stabilisers:
        words.append("stabiliser " + " or ".join(str(s) for s in sorted(set(stabilisers), reverse=True)) + " only")
    if limit is not None:
        words.append(f"the first {limit:,}")
    return ", ".join(words) or None


def _remove_leftovers(folder: str) -> None:
    """Delete the half-written ``folder.tmp-PID`` and ``folder.old-PID`` of writers no longer running."""
    parent, name = os.path.split(folder)
    if not os.path.isdir(parent):
        return
    for entry in os.listdir(parent):
        stem, _, pid = entry.rpartition("-")
        if stem in (f"{name}.tmp", f"{name}.old") and pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(os.path.join(parent, entry), ignore_errors=True)


def _running(pid: int) -> bool:
    if pid == os.getpid():
        return False  # ours, from an earlier call in this process
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _gallery(args: argparse.Namespace) -> int:
    from batchenum.solvers.palago.render import gallery_index_html, gallery_page_html, gallery_page_name, gallery_pages

    if args.source is None and args.n > SEARCH_MAX_N and not args.force:
        raise UsageError(
            f"--n {args.n}: searching creatures of size {args.n} here would take long (a minute at "
            f"n = 18, about three times more per tile); write a catalogue first with "
            f"`batchenum run palago --max-n {args.n} --catalogue-max-n {args.n} --out runs/catalogue` "
            "then add `--from runs/catalogue`; or give --force"
        )
    stabilisers = sorted(set(args.stabiliser)) if args.stabiliser else None
    say = Progress("palago gallery", stream=sys.stderr).stage
    say(f"finding the creatures of size {args.n} " + (f"in {args.source}" if args.source else "by searching"))
    frame, counts = gallery_frame(args.n, args.source, stabilisers, args.limit)
    pages = gallery_pages(frame["stabiliser"].tolist(), args.per_page)
    if len(frame) > MAX_SHOWN and args.limit is None and not args.force:
        raise UsageError(
            f"--n {args.n}: {len(frame):,} creatures would make {len(pages):,} pages of {args.per_page}; "
            f"give --limit L (for example --limit {MAX_SHOWN:,}) or --stabiliser S to show fewer, "
            "or --force for all"
        )
    say(f"writing {len(frame):,} creatures on {len(pages):,} page{'' if len(pages) == 1 else 's'}")
    folder = os.path.join(args.out, "palago", gallery_folder(args.n, stabilisers, args.limit))
    said_at = time.monotonic()
    # Write the pages into a fresh folder, then swap it in: no page of an earlier gallery (which may
    # have had more pages) is left behind, and an interrupted run leaves the old gallery whole.
    tmp = f"{folder}.tmp-{os.getpid()}"
    _remove_leftovers(folder)
    os.makedirs(tmp)
    try:
        for page in pages:
            items = _items(frame.iloc[page.first - 1 : page.last])
            html = gallery_page_html(args.n, items, page, len(pages), counts)
            with open(os.path.join(tmp, gallery_page_name(page.number)), "w", encoding="utf-8") as handle:
                handle.write(html + "\n")
            if time.monotonic() - said_at >= 5.0:
                say(f"page {page.number:,} of {len(pages):,} written")
                said_at = time.monotonic()
        index = gallery_index_html(
            args.n, pages, counts, per_page=args.per_page, selection=_selection(stabilisers, args.limit)
        )
        with open(os.path.join(tmp, "index.html"), "w", encoding="utf-8") as handle:
            handle.write(index + "\n")
        old = f"{folder}.old-{os.getpid()}"
        if os.path.exists(folder):
            os.replace(folder, old)
        os.replace(tmp, folder)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    index_path = os.path.join(folder, "index.html")
    print(
        f"palago gallery: {len(frame):,} of {sum(counts.values()):,} creatures of size {args.n} on "
        f"{len(pages):,} page{'' if len(pages) == 1 else 's'}; open {index_path}"
    )
    return 0


COMMANDS = [
    Command(
        ("palago", "show"),
        "show one Palago creature: canonical key, size, symmetry, sum, picture",
        _add_show_arguments,
        _show,
    ),
    Command(
        ("palago", "gallery"),
        "write HTML pages (and an index) showing every Palago creature of size N",
        _add_gallery_arguments,
        _gallery,
    ),
]
