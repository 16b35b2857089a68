"""Pictures, the gallery, the growth plot, and the commands that write them (the real CLI)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pandas as pd
import pytest

from jobs.palago_views import gallery_items
from solvers.palago import count_creatures, decode_codes, key_of, tiles_from_key
from solvers.palago.render import COLOURS, creature_svg, gallery_html, growth_plot_svg
from solvers.palago.sums import decode

SVG = "{http://www.w3.org/2000/svg}"
TWELVE = "0a+1c+2a+2c+2c+2c+3b+2c3a+4a----3b"
FREE_1_TO_12 = [0, 0, 1, 0, 1, 1, 2, 2, 9, 13, 37, 81]  # docs/rules.md / tests/data/palago_seed.jsonl


def batchenum(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "jobs", *args], capture_output=True, text=True, timeout=300)
    if check and result.returncode != 0:
        raise AssertionError(f"batchenum {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
    return result


def _tiles_of(svg_root, ns: str = SVG) -> list:
    return [g for g in svg_root.iter(f"{ns}g") if g.get("class") == "tile"]


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


def test_gallery_for_n9_holds_nine_creatures_and_nothing_external():
    items = gallery_items(9)
    page = gallery_html(9, items)
    assert "http" not in page and "src=" not in page and "<script" not in page
    root = ET.fromstring(page)  # the page is well-formed XML
    figures = [f for f in root.iter("figure") if f.get("class") == "creature-card"]
    assert len(figures) == 9 == FREE_1_TO_12[8]
    for figure, item in zip(figures, sorted(items, key=lambda i: (-i.stabiliser, i.key))):
        assert len(_tiles_of(figure.find("svg"), ns="")) == 9
        codes = {c.get("class"): c.text for c in figure.iter("code")}
        assert codes["key"] == item.key and codes["sum"] == item.sum
        assert key_of(decode(item.sum)) == item.key  # the caption's sum rebuilds the pictured creature
    headings = [h.text for h in root.iter("h2")]
    assert [int(re.search(r"order (\d)", h).group(1)) for h in headings] == [3, 2, 1]
    assert sum(int(h.rsplit(": ", 1)[1]) for h in headings) == 9


# ------------------------------------------------------------------------------- the real CLI


def test_show_a_sum_prints_the_creature_and_draws_it(tmp_path):
    picture = tmp_path / "eye.svg"
    out = batchenum("palago", "show", "4b+5c", "--svg", str(picture)).stdout
    assert "key:        1,0,1,1 0,1,0,1 1,1,2,1" in out
    assert "size:       3" in out and "stabiliser: 6" in out
    shown_sum = re.search(r"sum:\s+(\S+)", out).group(1)
    assert key_of(decode(shown_sum)) == "1,0,1,1 0,1,0,1 1,1,2,1"
    assert len(_tiles_of(ET.parse(picture).getroot())) == 3


def test_show_a_key_and_refuse_bad_input():
    key = key_of(decode(TWELVE))
    out = batchenum("palago", "show", key).stdout
    assert "size:       12" in out
    bad = batchenum("palago", "show", "4b+5x", check=False)
    assert bad.returncode == 1 and "position 5 ('x')" in bad.stderr
    not_closed = batchenum("palago", "show", "1,0,1,1 0,1,0,1 1,1,2,2", check=False)
    assert not_closed.returncode == 1 and "not a closed blue creature" in not_closed.stderr


def test_count_job_writes_sums_and_plot_and_gallery_reads_the_catalogue(tmp_path):
    batchenum("run", "palago", "--max-n", "9", "--catalogue-max-n", "9", "--serial", "--quiet", "--out", str(tmp_path))
    creatures = pd.read_parquet(tmp_path / "palago" / "creatures")
    assert len(creatures) == sum(FREE_1_TO_12[:9])
    for row in creatures.itertuples():
        assert key_of(decode(row.sum)) == row.key == key_of(tiles_from_key(row.key))
        assert len(json.loads(row.tiles)) == sum(ch in "abc" for ch in row.sum) + 1
    plot = ET.parse(tmp_path / "palago" / "creature_counts.svg").getroot()
    assert plot.tag == f"{SVG}svg"
    printed = batchenum("palago", "gallery", "--n", "9", "--from", str(tmp_path), "--out", str(tmp_path)).stdout
    page = tmp_path / "palago" / "gallery_n9.html"
    assert str(page) in printed
    root = ET.parse(page).getroot()
    assert len([f for f in root.iter("figure") if f.get("class") == "creature-card"]) == 9
    assert "http" not in page.read_text()
