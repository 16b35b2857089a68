"""Pictures, the gallery, the growth plot, and the commands that write them (the real CLI)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pandas as pd
import pytest
from helpers import cli

from batchenum.jobs.palago_views import gallery_items
from batchenum.solvers.palago import count_creatures, decode_codes, key_of, tiles_from_key
from batchenum.solvers.palago.render import (
    COLOURS,
    creature_svg,
    gallery_index_html,
    gallery_page_html,
    gallery_pages,
    growth_plot_svg,
    tile_defs_svg,
)
from batchenum.solvers.palago.sums import decode

SVG = "{http://www.w3.org/2000/svg}"
TWELVE = "0a+1c+2a+2c+2c+2c+3b+2c3a+4a----3b"
FREE_1_TO_12 = [0, 0, 1, 0, 1, 1, 2, 2, 9, 13, 37, 81]  # docs/rules.md / tests/data/palago_seed.jsonl


def _tiles_of(svg_root, ns: str = SVG) -> list:
    """The tiles of a picture: ``<g class="tile">`` (own paths) or ``<use class="tile">`` (shared)."""
    return [e for e in svg_root.iter() if e.get("class") == "tile" and e.tag in (f"{ns}g", f"{ns}use")]


def _creature_regions(tile_group, ns: str = SVG) -> int:
    return sum("creature" in (p.get("class") or "").split() for p in tile_group.iter(f"{ns}path"))


@pytest.mark.parametrize("text", ["4b+5c", TWELVE])
def test_creature_svg_has_one_tile_shape_per_tile_and_its_regions(text):
    tiles = decode(text)
    root = ET.fromstring(creature_svg(tiles, title=text))
    assert root.tag == f"{SVG}svg"
    groups = _tiles_of(root)
    assert len(groups) == len(tiles)
    by_hex = {(int(g.get("data-q")), int(g.get("data-r"))): g for g in groups}
    for tile in tiles:
        group = by_hex[(tile.q, tile.r)]
        assert int(group.get("data-t")) == tile.t
        assert _creature_regions(group) == bin(tile.regions).count("1")  # highlighted: tip, body or both
        fills = {p.get("fill") for p in group.iter(f"{SVG}path")}
        assert COLOURS["yellow"] in fills  # both yellow regions are drawn on every tile


def test_every_small_creature_draws_as_valid_svg():
    _, catalogue = count_creatures(10, catalogue_max_n=10)
    for k in range(len(catalogue)):
        tiles = decode_codes(catalogue.tile_codes(k))
        assert len(_tiles_of(ET.fromstring(creature_svg(tiles)))) == len(tiles)


def test_creature_svg_rejects_nothing_to_draw():
    with pytest.raises(ValueError, match="at least one tile"):
        creature_svg([])


def test_growth_plot_is_svg_with_both_series_on_a_log_scale():
    rows = [(n, free, free * 6) for n, free in enumerate(FREE_1_TO_12, start=1)]
    root = ET.fromstring(growth_plot_svg(rows))
    lines = {}
    for line in root.iter(f"{SVG}polyline"):
        lines.setdefault(line.get("class"), []).append(line)
    assert set(lines) == {"free", "fixed"}
    assert len(lines["free"]) == 2  # the zero count at n = 4 breaks the line (log scale)
    circles = [c for c in root.iter(f"{SVG}circle") if c.get("class") == "free"]
    assert len(circles) == sum(1 for f in FREE_1_TO_12 if f)
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert {"1", "10", "100"} <= set(texts) and "12" in texts  # decade ticks and n ticks
    assert any("log scale" in (t or "") for t in texts) and any("fixed" in (t or "") for t in texts)


def test_shared_tiles_draw_the_same_tiles_by_reference():
    tiles = decode(TWELVE)
    own = ET.fromstring(creature_svg(tiles, radius=20))
    shared = ET.fromstring(creature_svg(tiles, radius=20, standalone=False, shared_tiles=True))
    assert own.get("viewBox") == shared.get("viewBox")
    defs = ET.fromstring(tile_defs_svg(20))
    ids = {g.get("id"): g for g in defs.iter("g") if g.get("id")}
    assert len(ids) == 12  # three rotations, four region choices
    for tile, use in zip(sorted(tiles, key=lambda t: (t.r, t.q)), _tiles_of(shared, ns="")):
        assert (int(use.get("data-q")), int(use.get("data-r"))) == (tile.q, tile.r)
        drawing = ids[use.get("href").lstrip("#")]
        assert _creature_regions(drawing, ns="") == bin(tile.regions).count("1")
    with pytest.raises(ValueError, match="standalone=False"):
        creature_svg(tiles, shared_tiles=True)


def _cards(root) -> list:
    return [f for f in root.iter("figure") if f.get("class") == "creature-card"]


def _links(root) -> list:
    return [a.get("href") for a in root.iter("a")]


def test_gallery_for_n9_holds_nine_creatures_and_nothing_external():
    items = gallery_items(9)
    assert [(-i.stabiliser, i.key) for i in items] == sorted((-i.stabiliser, i.key) for i in items)  # gallery order
    counts = {3: 1, 2: 4, 1: 4}
    pages = gallery_pages([i.stabiliser for i in items], per_page=500)
    assert len(pages) == 1
    page = gallery_page_html(9, items, pages[0], 1, counts)
    assert "http" not in page and "src=" not in page and "<script" not in page
    root = ET.fromstring(page)  # the page is well-formed XML
    figures = _cards(root)
    assert len(figures) == 9 == FREE_1_TO_12[8]
    defined = {g.get("id") for g in root.iter("g") if g.get("id")}
    for place, (figure, item) in enumerate(zip(figures, items), start=1):
        uses = _tiles_of(figure.find("svg"), ns="")
        assert len(uses) == 9
        assert all(use.get("href")[1:] in defined for use in uses)  # every tile's drawing is on the page
        codes = {c.get("class"): c.text for c in figure.iter("code")}
        assert codes["key"] == item.key and codes["sum"] == item.sum
        assert key_of(decode(item.sum)) == item.key  # the caption's sum rebuilds the pictured creature
        assert figure.get("id") == f"creature-{place}"
    headings = [h.text for h in root.iter("h2")]
    assert [int(re.search(r"order (\d)", h).group(1)) for h in headings] == [3, 2, 1]
    assert sum(int(re.search(r": (\d+) here", h).group(1)) for h in headings) == 9
    assert set(_links(root)) == {"index.html"}  # one page: no previous, no next


def test_gallery_pages_cut_in_order_and_the_index_links_every_page():
    orders = [6] + [2] * 3 + [1] * 8
    pages = gallery_pages(orders, per_page=5)
    assert [(p.number, p.first, p.last) for p in pages] == [(1, 1, 5), (2, 6, 10), (3, 11, 12)]
    assert [p.stabilisers for p in pages] == [{6: 1, 2: 3, 1: 1}, {1: 5}, {1: 2}]
    assert [(p.number, p.first, p.last) for p in gallery_pages([], per_page=5)] == [(1, 1, 0)]  # one empty page
    with pytest.raises(ValueError, match="per_page"):
        gallery_pages(orders, per_page=0)
    counts = {6: 1, 3: 2, 2: 3, 1: 80}
    index = ET.fromstring(gallery_index_html(12, pages, counts, per_page=5, selection="the first 12"))
    assert [link for link in _links(index) if "#" not in link] == [
        "page-1.html",
        "page-1.html",
        "page-2.html",
        "page-3.html",
    ]
    rows = {r.get("id"): [td.text for td in r.iter("td")] for r in index.iter("tr") if r.get("id")}
    assert rows["stabiliser-3"][2:4] == ["2", "0"]  # in the catalogue, not in this gallery
    assert rows["stabiliser-1"][2:4] == ["80", "8"]


# ------------------------------------------------------------------------------- the real CLI


def test_show_a_sum_prints_the_creature_and_draws_it(tmp_path):
    picture = tmp_path / "eye.svg"
    out = cli("palago", "show", "4b+5c", "--svg", str(picture)).stdout
    assert "key:        1,0,1,1 0,1,0,1 1,1,2,1" in out
    assert "size:       3" in out and "stabiliser: 6" in out
    shown_sum = re.search(r"sum:\s+(\S+)", out).group(1)
    assert key_of(decode(shown_sum)) == "1,0,1,1 0,1,0,1 1,1,2,1"
    assert len(_tiles_of(ET.parse(picture).getroot())) == 3


def test_show_a_key_and_refuse_bad_input():
    key = key_of(decode(TWELVE))
    out = cli("palago", "show", key).stdout
    assert "size:       12" in out
    bad = cli("palago", "show", "4b+5x", expect=1)
    assert "position 5 ('x')" in bad.stderr
    not_closed = cli("palago", "show", "1,0,1,1 0,1,0,1 1,1,2,2", expect=1)
    assert "not a closed blue creature" in not_closed.stderr


@pytest.mark.slow  # minutes of CPU on a loaded machine: an end-to-end run
def test_count_job_writes_sums_and_plot_and_gallery_reads_the_catalogue(tmp_path):
    cli("run", "palago", "--max-n", "9", "--catalogue-max-n", "9", "--serial", "--quiet", "--out", str(tmp_path))
    creatures = pd.read_parquet(tmp_path / "palago" / "creatures")
    assert len(creatures) == sum(FREE_1_TO_12[:9])
    for row in creatures.itertuples():
        assert key_of(decode(row.sum)) == row.key == key_of(tiles_from_key(row.key))
        assert len(json.loads(row.tiles)) == sum(ch in "abc" for ch in row.sum) + 1
    plot = ET.parse(tmp_path / "palago" / "creature_counts.svg").getroot()
    assert plot.tag == f"{SVG}svg"
    printed = cli(
        "palago", "gallery", "--n", "9", "--from", str(tmp_path), "--out", str(tmp_path), "--per-page", "4"
    ).stdout
    folder = tmp_path / "palago" / "gallery_n9"
    assert str(folder / "index.html") in printed and "9 of 9 creatures of size 9 on 3 pages" in printed
    assert sorted(p.name for p in folder.iterdir()) == ["index.html", "page-1.html", "page-2.html", "page-3.html"]
    _check_gallery(folder, pages=3, creatures=9)
    index = ET.parse(folder / "index.html").getroot()
    rows = {r.get("id"): [td.text for td in r.iter("td")] for r in index.iter("tr") if r.get("id")}
    assert {key: row[2] for key, row in rows.items()} == {"stabiliser-3": "1", "stabiliser-2": "4", "stabiliser-1": "4"}

    # Filters: a folder of their own; the index still counts every creature of size 9.
    printed = cli(
        "palago",
        "gallery",
        "--n",
        "9",
        "--from",
        str(tmp_path),
        "--out",
        str(tmp_path),
        "--stabiliser",
        "2",
        "--limit",
        "3",
    ).stdout
    assert "3 of 9 creatures of size 9 on 1 page" in printed
    filtered = tmp_path / "palago" / "gallery_n9_stabiliser2_first3"
    cards = _check_gallery(filtered, pages=1, creatures=3)
    assert all(key_of(decode(card)) in set(creatures[creatures.stabiliser == 2].key) for card in cards)
    index_text = (filtered / "index.html").read_text()
    assert "this gallery shows 3 (stabiliser 2 only, the first 3)" in index_text

    # A rerun with bigger pages replaces the gallery: no stale page-2.html, page-3.html left behind,
    # and the half-written folder of a writer that died is deleted.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    leftover = tmp_path / "palago" / f"gallery_n9.tmp-{dead.pid}"
    leftover.mkdir()
    (leftover / "page-1.html").write_text("<html><body>half")
    cli("palago", "gallery", "--n", "9", "--from", str(tmp_path), "--out", str(tmp_path))
    assert sorted(p.name for p in folder.iterdir()) == ["index.html", "page-1.html"]
    assert sorted(p.name for p in (tmp_path / "palago").iterdir() if "tmp" in p.name or "old" in p.name) == []


def _check_gallery(folder, *, pages: int, creatures: int) -> list:
    """Every page of a gallery folder: well-formed, self-contained, linked to its neighbours and the
    index, which links every page.  Returns the sums of all its creatures, in order."""
    index = ET.parse(folder / "index.html").getroot()
    names = [f"page-{k}.html" for k in range(1, pages + 1)]
    assert set(names) <= set(_links(index))
    sums = []
    for k, name in enumerate(names, start=1):
        text = (folder / name).read_text()
        assert "http" not in text and "src=" not in text and "<script" not in text
        root = ET.fromstring(text)
        links = set(_links(root))
        assert "index.html" in links
        assert (f"page-{k - 1}.html" in links) == (k > 1) and (f"page-{k + 1}.html" in links) == (k < pages)
        sums += [card.find(".//code[@class='sum']").text for card in _cards(root)]
    assert len(sums) == creatures
    return sums


def test_gallery_help_quotes_the_published_counts():
    """The sizes and counts in ``palago gallery --help`` are those of results/palago/creature_counts.md."""
    from helpers import REPO

    published = {}
    for line in (REPO / "results" / "palago" / "creature_counts.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0].isdigit():
            published[int(cells[0])] = cells[1]  # free(n), with thousands separators
    text = " ".join(cli("palago", "gallery", "--help").stdout.split())
    quoted = re.findall(r"n = (\d+) has ([\d,]+)", text)
    assert quoted, text
    assert all(published[int(n)] == count for n, count in quoted), quoted
