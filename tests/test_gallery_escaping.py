"""Gallery pages escape every value they embed: a crafted catalogue cannot put markup into a page
(issue 35 item 6).  The pages are parsed back as XML: a value that was escaped comes back as the
exact text it was, and no element or attribute appears that the page did not write itself."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import assert_exit

from batchenum.solvers.palago import Tile
from batchenum.solvers.palago.render import GalleryItem, gallery_index_html, gallery_page_html, gallery_pages

SCRIPT = '"><script>alert(1)</script><x a="'
ALLOWED = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "nav",
    "span",
    "a",
    "h1",
    "h2",
    "p",
    "code",
    "div",
    "figure",
    "figcaption",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "ol",
    "li",
    "svg",
    "defs",
    "g",
    "path",
    "use",
}


def _tags(root: ET.Element) -> set[str]:
    return {element.tag for element in root.iter()}


def test_crafted_values_come_back_as_text_in_a_page_and_the_index():
    tile = Tile(0, 0, '0" onload="alert(1)', "1" + SCRIPT)  # t and regions as a crafted tiles column could give them
    item = GalleryItem(key="0,0,0,1" + SCRIPT, stabiliser=1, sum="0a" + SCRIPT, tiles=[tile])
    pages = gallery_pages([1], per_page=5)
    page = gallery_page_html(1, [item], pages[0], 1, {1: 1})
    root = ET.fromstring(page)  # well-formed: nothing closed an attribute or an element early
    assert _tags(root) <= ALLOWED and "script" not in _tags(root) and "x" not in _tags(root)
    assert not any("onload" in element.attrib for element in root.iter())
    use = next(element for element in root.iter("use"))  # inline SVG in HTML: no namespace
    assert use.get("data-t") == tile.t and use.get("data-regions") == tile.regions  # escaped, kept whole
    assert use.get("href") == f"#palago-tile-{tile.t}-{tile.regions}"
    assert root.find(".//code[@class='key']").text == item.key
    assert root.find(".//code[@class='sum']").text == item.sum
    assert root.find("head/title").text.startswith("Palago creatures")
    pictures = [svg for svg in root.iter("svg") if svg.get("class") == "creature"]
    assert pictures[0].find("title").text == item.sum

    index = ET.fromstring(gallery_index_html(1, pages, {1: 1}, per_page=5, selection=SCRIPT))
    assert _tags(index) <= ALLOWED and SCRIPT in "".join(index.itertext())


def batchenum(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "batchenum", *args], capture_output=True, text=True, timeout=300)


def _craft(catalogue: Path, column: str, value: str) -> None:
    """Rewrite the catalogue's first row of size 9 with ``value`` in ``column``, keeping every
    part's schema, as someone with write access to the folder could."""
    for part in sorted(catalogue.glob("*.parquet")):
        table = pq.read_table(part)
        sizes = table.column("n").to_pylist()
        if 9 not in sizes:
            continue
        values = table.column(column).to_pylist()
        values[sizes.index(9)] = value
        table = table.set_column(table.schema.get_field_index(column), column, pa.array(values, pa.string()))
        pq.write_table(table, part)
        return
    raise AssertionError(f"no part of size 9 under {catalogue}")


@pytest.fixture(scope="module")
def catalogue_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("catalogue")
    run = batchenum("run", "palago", "--max-n", "9", "--catalogue-max-n", "9", "--serial", "--quiet", "--out", str(out))
    assert_exit(run, 0)
    return out


def _copy(source: Path, to: Path) -> Path:
    import shutil

    shutil.copytree(source, to)
    return to


def test_a_crafted_key_and_sum_are_shown_as_text(catalogue_run, tmp_path):
    out = _copy(catalogue_run, tmp_path / "out")
    _craft(out / "palago" / "creatures", "key", "k" + SCRIPT)
    _craft(out / "palago" / "creatures", "sum", "s" + SCRIPT)
    run = batchenum("palago", "gallery", "--n", "9", "--from", str(out), "--out", str(out))
    assert_exit(run, 0)
    for page in (out / "palago" / "gallery_n9").iterdir():
        text = page.read_text()
        assert "<script" not in text
        root = ET.fromstring(text)
        assert _tags(root) <= ALLOWED
    page = ET.parse(out / "palago" / "gallery_n9" / "page-1.html").getroot()
    assert "k" + SCRIPT in [code.text for code in page.iter("code") if code.get("class") == "key"]
    assert "s" + SCRIPT in [code.text for code in page.iter("code") if code.get("class") == "sum"]


def test_crafted_tiles_are_refused_naming_the_creature_and_no_page_is_written(catalogue_run, tmp_path):
    out = _copy(catalogue_run, tmp_path / "out")
    _craft(out / "palago" / "creatures", "tiles", '[[0, 0, "0\\" onload=\\"alert(1)", 1]]')
    run = batchenum("palago", "gallery", "--n", "9", "--from", str(out), "--out", str(out))
    assert_exit(run, 1)
    assert "has tiles that are not lists of four integers [q, r, t, regions]" in run.stderr
    assert "rebuild it" in run.stderr and "Traceback" not in run.stderr
    assert not (out / "palago" / "gallery_n9").exists()
