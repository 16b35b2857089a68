"""The gallery as a browser shows it: a real headless Chromium lays out generated gallery pages and
a probe script reports, for every picture, where it landed and whether each tile was drawn.

Skipped, saying why, when no Chromium binary is found (set BATCHENUM_CHROMIUM to pick one).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

import pytest

CHROMIUM_NAMES = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome-stable", "google-chrome")
HEX_WIDTH, HEX_HEIGHT = 20 * 3**0.5, 40.0  # a tile's border in the gallery (radius 20), in SVG user units


def _chromium() -> str | None:
    chosen = os.environ.get("BATCHENUM_CHROMIUM")
    if chosen:
        return shutil.which(chosen)
    return next((path for path in map(shutil.which, CHROMIUM_NAMES) if path), None)


CHROMIUM = _chromium()
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason=f"no Chromium binary found (looked for {', '.join(CHROMIUM_NAMES)} on PATH, or $BATCHENUM_CHROMIUM): "
    "install one with `apt-get install -y chromium-headless-shell`",
)

# Runs at the end of the page, after layout: for every card, scroll it into view, then record its
# box, its content box (the caption's width), its picture's box, viewBox and drawn bounds, and for
# every tile its drawn bounds and whether the browser hit-tests the tile's own centre to that tile
# (it does only where the tile is painted).
PROBE = """
<script>
(function () {
  var out = {cards: [], error: null};
  try {
    var cards = document.querySelectorAll("figure.creature-card");
    for (var i = 0; i < cards.length; i++) {
      var card = cards[i], svg = card.querySelector("svg");
      card.scrollIntoView({block: "center"});
      var c = card.getBoundingClientRect(), s = svg.getBoundingClientRect();
      var t = card.querySelector("figcaption").getBoundingClientRect();  // spans the card's content box
      var vb = svg.viewBox.baseVal, drawn = svg.getBBox();
      var tiles = [], uses = svg.querySelectorAll(".tile");
      for (var k = 0; k < uses.length; k++) {
        var b = uses[k].getBBox(), r = uses[k].getBoundingClientRect();
        var hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
        var inside = r.left >= s.left - 1 && r.right <= s.right + 1 && r.top >= s.top - 1 && r.bottom <= s.bottom + 1;
        tiles.push({w: b.width, h: b.height, hit: hit === uses[k], inside: inside});
      }
      out.cards.push({id: card.id, card: [c.left, c.top, c.right, c.bottom], svg: [s.left, s.top, s.right, s.bottom],
                      content: [t.left, t.right],
                      viewBox: [vb.x, vb.y, vb.width, vb.height], drawn: [drawn.x, drawn.y, drawn.width, drawn.height],
                      tiles: tiles});
    }
  } catch (e) { out.error = String(e); }
  var pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>
"""


def _probe(page) -> dict:
    """Open a copy of ``page`` (with the probe script) in headless Chromium; the probe's report."""
    probed = page.with_name(f"probe-{page.name}")  # beside the page, so its links resolve the same way
    probed.write_text(page.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    try:
        result = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                "--window-size=1200,900",
                "--dump-dom",
                probed.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        shutil.rmtree(profile, ignore_errors=True)
        probed.unlink()
    found = re.search(r'<pre id="probe">(.*?)</pre>', result.stdout, re.S)
    assert found, f"no probe report from Chromium (exit {result.returncode}):\n{result.stderr[-2000:]}"
    report = json.loads(html.unescape(found.group(1)))
    assert report["error"] is None, report["error"]
    return report


@pytest.fixture(scope="module")
def gallery(tmp_path_factory):
    """A gallery of the 81 creatures of size 12 (every stabiliser order 1, 2, 3, 6) on 3 pages."""
    out = tmp_path_factory.mktemp("gallery")
    subprocess.run(
        [sys.executable, "-m", "batchenum", "palago", "gallery", "--n", "12", "--per-page", "30", "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out / "palago" / "gallery_n12"


@pytest.fixture(scope="module")
def wide_page(tmp_path_factory):
    """A page of the 12 widest creatures of size 16, pictures wider than a card (235 px in 228)."""
    from batchenum.jobs.palago_views import gallery_items
    from batchenum.solvers.palago.render import gallery_page_html, gallery_pages

    def width(item):
        xs = [tile.q + tile.r / 2 for tile in item.tiles]
        return max(xs) - min(xs)

    items = sorted(gallery_items(16), key=width, reverse=True)[:12]
    page = tmp_path_factory.mktemp("wide") / "page-1.html"
    counts = {order: sum(i.stabiliser == order for i in items) for order in {i.stabiliser for i in items}}
    page.write_text(
        gallery_page_html(16, items, gallery_pages([i.stabiliser for i in items], 12)[0], 1, counts), encoding="utf-8"
    )
    return page


@pytest.mark.parametrize("name", ["page-1.html", "page-2.html", "page-3.html"])
def test_every_picture_is_drawn_whole_inside_its_card(gallery, name):
    _check_page(gallery / name, cards=30 if name != "page-3.html" else 21, tiles=12)


def test_pictures_wider_than_a_card_shrink_to_fit_it(wide_page):
    assert max(int(w) for w in re.findall(r'class="creature" width="(\d+)"', wide_page.read_text())) > 228
    _check_page(wide_page, cards=12, tiles=16)


def _check_page(page, *, cards: int, tiles: int) -> None:
    name = page.name
    expected = [f.get("id") for f in ET.parse(page).getroot().iter("figure") if f.get("class") == "creature-card"]
    assert len(expected) == cards
    report = _probe(page)
    assert [card["id"] for card in report["cards"]] == expected
    for card in report["cards"]:
        where = f"{name} #{card['id']}"
        left, top, right, bottom = card["svg"]
        assert right - left > 50 and bottom - top > 50, f"{where}: picture laid out at {card['svg']}"
        c_left, c_top, c_right, c_bottom = card["card"]
        assert c_left <= left and right <= c_right and c_top <= top and bottom <= c_bottom, (
            f"{where}: picture {card['svg']} spills out of its card {card['card']}"
        )
        inner_left, inner_right = card["content"]
        assert inner_left - 0.5 <= left and right <= inner_right + 0.5, (
            f"{where}: picture {card['svg']} wider than the card's content box {card['content']}"
        )
        x, y, width, height = card["viewBox"]
        dx, dy, dwidth, dheight = card["drawn"]
        assert dwidth > 0 and dheight > 0, f"{where}: nothing drawn (do the tiles' <use> find their drawings?)"
        assert x <= dx and y <= dy and dx + dwidth <= x + width and dy + dheight <= y + height, (
            f"{where}: drawing {card['drawn']} clipped by the viewBox {card['viewBox']}"
        )
        assert len(card["tiles"]) == tiles, f"{where}: {len(card['tiles'])} tiles"
        for k, tile in enumerate(card["tiles"]):
            assert abs(tile["w"] - HEX_WIDTH) < 0.5 and abs(tile["h"] - HEX_HEIGHT) < 0.5, (
                f"{where}: tile {k} drawn {tile['w']:.1f} x {tile['h']:.1f}, not a whole hex"
            )
            assert tile["inside"], f"{where}: tile {k} lies outside its picture"
            assert tile["hit"], f"{where}: tile {k} is not painted at its centre"
