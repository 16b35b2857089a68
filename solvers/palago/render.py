"""Pictures: a creature on its tiles (SVG), a gallery of creatures (HTML), the growth of the
creature counts with n and the ratio plot of their growth analysis (SVG).

Pure functions returning text; no files, no plotting library, nothing fetched over a network.

**Tiles.**  Drawn in the frame of docs/rules.md, "The lattice the search runs on" (hex (q, r)
centred at q*(1, 0) + r*(1/2, sqrt(3)/2), y up, so hexes are pointy-topped).  A tile in rotation t has, with c = 2t, four regions:

- the blue tip: the sector cut off blue corner c by an arc between the midpoints of edges c, c+1;
- the yellow tip: the same at the opposite yellow corner c+3 (edges c+3, c+4);
- the blue body: the half beyond the straight line joining the midpoints of edges c+2 and c+5
  that holds blue corners c+2 and c+4, less the yellow tip;
- the yellow body: the other half (yellow corners c+5 and c+1), less the blue tip.

The creature's regions are filled in strong blue and outlined (their arcs and straight lines are
exactly the creature's outline, since every edge it touches is shared with another of its
regions); the rest of each tile is in muted blue and yellow.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from html import escape as _html_escape
from typing import NamedTuple

from .canonical import REGION_BODY, REGION_TIP, Tile

__all__ = [
    "COLOURS",
    "GalleryItem",
    "GalleryPage",
    "creature_svg",
    "gallery_index_html",
    "gallery_page_html",
    "gallery_page_name",
    "gallery_pages",
    "growth_plot_svg",
    "ratio_plot_svg",
    "tile_defs_svg",
]

COLOURS = {
    "creature": "#1f4fa3",  # the creature's blue regions
    "outline": "#0a1f4d",  # the creature's outline
    "blue": "#a8bfe3",  # blue regions outside the creature (muted)
    "yellow": "#f2d870",  # yellow regions (never part of a blue creature; muted)
    "edge": "#7a7a7a",  # tile borders
}
_SQRT3 = math.sqrt(3)
_CIRCUMRADIUS = 1 / _SQRT3  # neighbouring centres are 1 apart, so the apothem is 1/2
_SVG_NS = ' xmlns="http://www.w3.org/2000/svg"'


def escape(value) -> str:
    """``value`` as text safe in element content and in a double-quoted attribute alike (``&``,
    ``<``, ``>``, both quotes): every value a page embeds from a catalogue goes through it, so a
    crafted key, sum or tile cannot close its attribute or open an element."""
    return _html_escape(str(value), quote=True)


# ----------------------------------------------------------------------------------- creatures


def creature_svg(
    tiles: Iterable[Tile],
    *,
    radius: float = 24.0,
    title: str | None = None,
    standalone: bool = True,
    shared_tiles: bool = False,
) -> str:
    """An SVG picture of the creature ``tiles``: one element of class ``tile`` per tile.

    radius:       a hex's circumradius in pixels (its side length);
    title:        a tooltip (``<title>``), e.g. the creature's sum;
    standalone:   include the SVG namespace (a file); False for SVG inlined in HTML, which needs none;
    shared_tiles: draw each tile as ``<use class="tile">`` of the drawings in ``tile_defs_svg(radius)``
                  (same radius), which the HTML page must hold once: a gallery page gets about 15 times
                  smaller and faster to write.  Only for inlined SVG (standalone=False).
                  Otherwise each tile is a ``<g class="tile">`` holding its own paths.
    """
    tiles = list(tiles)
    if not tiles:
        raise ValueError("nothing to draw: a creature has at least one tile")
    if radius <= 0:
        raise ValueError(f"radius must be positive, not {radius}")
    if shared_tiles and standalone:
        raise ValueError("shared_tiles needs standalone=False: the tile drawings live in the page, not the file")
    scale = radius / _CIRCUMRADIUS  # pixels per unit of hex-centre distance
    margin = radius * 0.25
    xs, ys = zip(*(_point(_corner(tile.q, tile.r, k), scale) for tile in tiles for k in range(6)))
    left, top = min(xs) - margin, min(ys) - margin
    width, height = max(xs) - min(xs) + 2 * margin, max(ys) - min(ys) + 2 * margin
    parts = [
        f'<svg{_SVG_NS if standalone else ""} class="creature" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="{left:.2f} {top:.2f} {width:.2f} {height:.2f}" role="img">'
    ]
    if title:
        parts.append(f"<title>{escape(title)}</title>")
    draw = _tile_use if shared_tiles else _tile_svg
    parts += [draw(tile, scale) for tile in sorted(tiles, key=lambda t: (t.r, t.q))]
    parts.append("</svg>")
    return "\n".join(parts)


def _centre(q: int, r: int) -> tuple[float, float]:
    return q + r / 2, r * _SQRT3 / 2


def _corner(q: int, r: int, k: int) -> tuple[float, float]:
    """Corner k of hex (q, r), at 330 + 60k degrees."""
    x, y = _centre(q, r)
    angle = math.radians(330 + 60 * k)
    return x + _CIRCUMRADIUS * math.cos(angle), y + _CIRCUMRADIUS * math.sin(angle)


def _midpoint(q: int, r: int, k: int) -> tuple[float, float]:
    """The midpoint of edge k of hex (q, r), at 300 + 60k degrees."""
    x, y = _centre(q, r)
    angle = math.radians(300 + 60 * k)
    return x + math.cos(angle) / 2, y + math.sin(angle) / 2


def _point(p: tuple[float, float], scale: float) -> tuple[float, float]:
    """Model coordinates (y up) to SVG pixels (y down)."""
    return p[0] * scale, -p[1] * scale


def _fmt(p: tuple[float, float]) -> str:
    return f"{p[0]:.2f},{p[1]:.2f}"


def _arc_to(centre: tuple[float, float], start: tuple[float, float], end: tuple[float, float], radius: float) -> str:
    """An SVG arc command from ``start`` to ``end`` (pixels) round ``centre``, the short way."""
    cross = (start[0] - centre[0]) * (end[1] - centre[1]) - (start[1] - centre[1]) * (end[0] - centre[0])
    return f"A{radius:.2f},{radius:.2f} 0 0 {1 if cross > 0 else 0} {_fmt(end)}"


def _tile_paths(tile: Tile, scale: float) -> dict[str, str]:
    """Path data of the tile's four regions and of the three curves that separate them."""
    c = 2 * tile.t
    corner = lambda k: _point(_corner(tile.q, tile.r, k % 6), scale)  # noqa: E731
    mid = lambda k: _point(_midpoint(tile.q, tile.r, k % 6), scale)  # noqa: E731
    arc_radius = scale * _CIRCUMRADIUS / 2  # the midpoints of a corner's two edges are half a side away
    blue_arc = f"M{_fmt(mid(c))} {_arc_to(corner(c), mid(c), mid(c + 1), arc_radius)}"
    yellow_arc = f"M{_fmt(mid(c + 3))} {_arc_to(corner(c + 3), mid(c + 3), mid(c + 4), arc_radius)}"
    line = f"M{_fmt(mid(c + 2))} L{_fmt(mid(c + 5))}"
    return {
        "blue_tip": f"{blue_arc} L{_fmt(corner(c))} Z",
        "yellow_tip": f"{yellow_arc} L{_fmt(corner(c + 3))} Z",
        "blue_body": (
            f"M{_fmt(mid(c + 2))} L{_fmt(corner(c + 2))} L{_fmt(mid(c + 3))} "
            f"{_arc_to(corner(c + 3), mid(c + 3), mid(c + 4), arc_radius)} "
            f"L{_fmt(corner(c + 4))} L{_fmt(mid(c + 5))} Z"
        ),
        "yellow_body": (
            f"M{_fmt(mid(c + 5))} L{_fmt(corner(c + 5))} L{_fmt(mid(c))} "
            f"{_arc_to(corner(c), mid(c), mid(c + 1), arc_radius)} "
            f"L{_fmt(corner(c + 1))} L{_fmt(mid(c + 2))} Z"
        ),
        "blue_arc": blue_arc,
        "yellow_arc": yellow_arc,
        "line": line,
        "hex": "M" + " L".join(_fmt(corner(k)) for k in range(6)) + " Z",
    }


def _tile_svg(tile: Tile, scale: float) -> str:
    """One tile as ``<g class="tile">``: four filled regions, the creature's outline, the border."""
    return "\n".join(
        [
            f'<g class="tile" {_tile_data(tile)}>',
            *_tile_parts(tile, scale),
            "</g>",
        ]
    )


def _tile_parts(tile: Tile, scale: float) -> list[str]:
    """The paths of one tile: four filled regions, the border, the creature's outline on top."""
    paths = _tile_paths(tile, scale)
    tip_in = bool(tile.regions & REGION_TIP)
    body_in = bool(tile.regions & REGION_BODY)
    fill = lambda inside: COLOURS["creature"] if inside else COLOURS["blue"]  # noqa: E731
    outline = []
    if tip_in:
        outline.append(paths["blue_arc"])
    if body_in:
        outline += [paths["yellow_arc"], paths["line"]]
    stroke_width = scale * 0.035
    return [
        f'<path class="blue tip{" creature" if tip_in else ""}" d="{paths["blue_tip"]}" fill="{fill(tip_in)}"/>',
        f'<path class="blue body{" creature" if body_in else ""}" d="{paths["blue_body"]}" fill="{fill(body_in)}"/>',
        f'<path class="yellow tip" d="{paths["yellow_tip"]}" fill="{COLOURS["yellow"]}"/>',
        f'<path class="yellow body" d="{paths["yellow_body"]}" fill="{COLOURS["yellow"]}"/>',
        f'<path class="border" d="{paths["hex"]}" fill="none" stroke="{COLOURS["edge"]}" '
        f'stroke-width="{stroke_width:.2f}" stroke-linejoin="round"/>',
        *(
            f'<path class="outline" d="{d}" fill="none" stroke="{COLOURS["outline"]}" '
            f'stroke-width="{2.5 * stroke_width:.2f}" stroke-linecap="round"/>'
            for d in outline
        ),
    ]


def _tile_id(t: int, regions: int) -> str:
    return f"palago-tile-{t}-{regions}"


def _tile_use(tile: Tile, scale: float) -> str:
    """One tile as ``<use class="tile">`` of its drawing at hex (0, 0), moved to its hex."""
    x, y = _point(_centre(tile.q, tile.r), scale)
    return (
        f'<use class="tile" href="#{escape(_tile_id(tile.t, tile.regions))}" x="{x:.2f}" y="{y:.2f}" '
        f"{_tile_data(tile)}/>"
    )


def _tile_data(tile: Tile) -> str:
    """A tile's ``data-`` attributes, each value escaped."""
    return (
        f'data-q="{escape(tile.q)}" data-r="{escape(tile.r)}" data-t="{escape(tile.t)}" '
        f'data-regions="{escape(tile.regions)}"'
    )


def tile_defs_svg(radius: float = 24.0) -> str:
    """The drawings that ``creature_svg(..., shared_tiles=True)`` refers to: every rotation and
    region choice of a tile at hex (0, 0), as an invisible inline ``<svg>`` to put once in an HTML
    page (before the pictures).  Kept in the layout at size 0 rather than ``display: none``, which
    would stop some browsers from drawing the references."""
    scale = radius / _CIRCUMRADIUS
    parts = ['<svg class="tile-defs" width="0" height="0" style="position:absolute" aria-hidden="true"><defs>']
    for t in range(3):
        for regions in range(4):
            parts.append(f'<g id="{_tile_id(t, regions)}">')
            parts += _tile_parts(Tile(0, 0, t, regions), scale)
            parts.append("</g>")
    parts.append("</defs></svg>")
    return "\n".join(parts)


# ----------------------------------------------------------------------------------- growth plot

_PLOT = {"width": 640, "height": 400, "left": 78, "right": 20, "top": 44, "bottom": 52}
_SERIES = (
    ("free", "#1f4fa3", "free (up to rotation and reflection)"),
    ("fixed", "#c48a00", "fixed (up to translation)"),
)
_BELOW_ONE = 0.3  # decades of room between the n axis and the count 1
_SUPERSCRIPT = str.maketrans("0123456789", "⁰¹²³⁴⁵⁶⁷⁸⁹")


def growth_plot_svg(rows: Iterable[tuple[int, int, int]], *, title: str = "Palago creatures by size") -> str:
    """A log-scale line plot of free and fixed creature counts by n, as standalone SVG.

    rows:  (n, free, fixed) per size, e.g. ``counts[["n", "free", "fixed"]].itertuples(index=False)``;
           a zero count has no place on a log scale, so it is left out and the line breaks there.
    title: the heading drawn above the plot.
    """
    rows = sorted((int(n), int(free), int(fixed)) for n, free, fixed in rows)
    if not rows:
        raise ValueError("nothing to plot: give at least one (n, free, fixed) row")
    top_count = max(max(free, fixed) for _, free, fixed in rows)
    decades = max(1, math.ceil(math.log10(top_count))) if top_count > 0 else 1
    n_low, n_high = rows[0][0], max(rows[-1][0], rows[0][0] + 1)
    p = _PLOT
    plot_w, plot_h = p["width"] - p["left"] - p["right"], p["height"] - p["top"] - p["bottom"]
    x_of = lambda n: p["left"] + (n - n_low) / (n_high - n_low) * plot_w  # noqa: E731
    # The axis sits a little below 1, so that counts of 1 (n = 3, 5, 6) stand clear of it
    y_of = lambda v: p["top"] + plot_h * (1 - (math.log10(v) + _BELOW_ONE) / (decades + _BELOW_ONE))  # noqa: E731
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{p["width"]}" height="{p["height"]}" '
        f'viewBox="0 0 {p["width"]} {p["height"]}" font-family="sans-serif" font-size="12">',
        f'<rect width="{p["width"]}" height="{p["height"]}" fill="white"/>',
        f'<text x="{p["width"] / 2}" y="24" text-anchor="middle" font-size="16">{escape(title)}</text>',
        *_y_axis(decades, y_of, p["left"], p["left"] + plot_w, p["top"] + plot_h),
        *_x_axis([n for n, _, _ in rows], x_of, p["top"] + plot_h),
        f'<text x="{p["left"] + plot_w / 2}" y="{p["height"] - 10}" text-anchor="middle">n (tiles in the creature)</text>',
        f'<text transform="translate(16,{p["top"] + plot_h / 2}) rotate(-90)" text-anchor="middle">'
        "creatures (log scale)</text>",
    ]
    for column, (name, colour, _) in enumerate(_SERIES, start=1):
        points = [(x_of(row[0]), y_of(row[column])) for row in rows if row[column] > 0]
        for segment in _runs([(row[0], row[column]) for row in rows]):
            coords = " ".join(f"{x_of(n):.1f},{y_of(v):.1f}" for n, v in segment)
            parts.append(f'<polyline class="{name}" points="{coords}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts += [f'<circle class="{name}" cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{colour}"/>' for x, y in points]
    parts += _legend(p["left"] + 12, p["top"] + 10)
    empty = [str(n) for n, free, fixed in rows if free == fixed == 0]
    if empty:  # say why those sizes have no points rather than leave the reader guessing
        parts.append(
            f'<text x="{p["width"] - p["right"]}" y="{p["height"] - 10}" text-anchor="end" font-size="11" '
            f'fill="#666666">no creatures for n = {", ".join(empty)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def _runs(points: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    """Maximal runs of consecutive (n, count) points with a positive count."""
    runs: list[list[tuple[int, int]]] = [[]]
    for n, value in points:
        if value > 0:
            runs[-1].append((n, value))
        elif runs[-1]:
            runs.append([])
    return [run for run in runs if run]


def _power_label(k: int) -> str:
    """10**k as text: plain digits up to a thousand, then 10 with a superscript exponent."""
    return f"{10**k:,}" if k <= 3 else "10" + str(k).translate(_SUPERSCRIPT)


def _y_axis(decades: int, y_of, x_left: float, x_right: float, y_bottom: float) -> list[str]:
    """Grid lines and labels at every power of ten, faint lines at 2..9 times each."""
    parts = [f'<line x1="{x_left}" y1="{y_bottom}" x2="{x_left}" y2="{y_of(10**decades):.1f}" stroke="black"/>']
    for k in range(decades + 1):
        y = y_of(10**k)
        parts.append(f'<line x1="{x_left - 5}" y1="{y:.1f}" x2="{x_right}" y2="{y:.1f}" stroke="#cccccc"/>')
        parts.append(f'<text x="{x_left - 8}" y="{y + 4:.1f}" text-anchor="end">{_power_label(k)}</text>')
        if k < decades:
            parts += [
                f'<line x1="{x_left}" y1="{y_of(m * 10**k):.1f}" x2="{x_right}" y2="{y_of(m * 10**k):.1f}" '
                'stroke="#eeeeee"/>'
                for m in range(2, 10)
            ]
    return parts


def _x_axis(sizes: list[int], x_of, y_bottom: float) -> list[str]:
    """The n axis: a tick per size, a label on every one (every other one past 20 sizes)."""
    step = 1 if len(sizes) <= 20 else 2
    parts = [
        f'<line x1="{x_of(sizes[0]):.1f}" y1="{y_bottom}" x2="{x_of(sizes[-1]):.1f}" y2="{y_bottom}" stroke="black"/>'
    ]
    for index, n in enumerate(sizes):
        x = x_of(n)
        parts.append(f'<line x1="{x:.1f}" y1="{y_bottom}" x2="{x:.1f}" y2="{y_bottom + 5}" stroke="black"/>')
        if index % step == 0:
            parts.append(f'<text x="{x:.1f}" y="{y_bottom + 18}" text-anchor="middle">{n}</text>')
    return parts


def _legend(x: float, y: float) -> list[str]:
    parts = [f'<rect x="{x}" y="{y}" width="250" height="{14 + 18 * len(_SERIES)}" fill="white" stroke="#999999"/>']
    for row, (name, colour, label) in enumerate(_SERIES):
        line_y = y + 16 + 18 * row
        parts.append(
            f'<line class="legend {name}" x1="{x + 8}" y1="{line_y}" x2="{x + 32}" y2="{line_y}" '
            f'stroke="{colour}" stroke-width="2"/>'
        )
        parts.append(f'<text x="{x + 40}" y="{line_y + 4}">{label}</text>')
    return parts


_RATIO_SERIES = (("fixed", "#c0392b"), ("free", "#1f4fa3"))
_RATIO_MARK = {
    "fixed": lambda colour: f'r="2.5" fill="{colour}"',
    "free": lambda colour: f'r="3.5" fill="none" stroke="{colour}" stroke-width="1.2"',
}


def ratio_plot_svg(
    ratios: dict[str, list[tuple[int, float]]],
    lam: float,
    spread: float,
    *,
    title: str = "Ratio plot: a(n)/a(n-1) against 1/n",
) -> str:
    """The ratio plot of growth analysis (docs/palago_growth.md) as standalone SVG: each series'
    ratios a(n)/a(n-1) against 1/n, which approach the growth constant as 1/n -> 0 along a line
    of slope -lam * theta, and the estimate ``lam`` +- ``spread`` drawn at 1/n = 0.

    ratios: series name ("fixed", "free") -> (n, ratio) points, n >= 1;
    lam, spread: the estimate marked on the vertical axis, with its error bar.
    """
    points = {name: [(1 / n, r) for n, r in rows] for name, rows in ratios.items() if rows}
    if not points:
        raise ValueError("nothing to plot: give at least one series with one ratio")
    xs = [x for rows in points.values() for x, _ in rows]
    ys = [y for rows in points.values() for _, y in rows] + [lam - spread, lam + spread]
    x_high = max(xs) * 1.05
    y_low, y_high = min(ys), max(ys)
    pad = (y_high - y_low) * 0.08 or 0.1
    y_low, y_high = y_low - pad, y_high + pad
    p = _PLOT
    plot_w, plot_h = p["width"] - p["left"] - p["right"], p["height"] - p["top"] - p["bottom"]
    x_of = lambda x: p["left"] + x / x_high * plot_w  # noqa: E731
    y_of = lambda y: p["top"] + plot_h * (y_high - y) / (y_high - y_low)  # noqa: E731
    bottom = p["top"] + plot_h
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{p["width"]}" height="{p["height"]}" '
        f'viewBox="0 0 {p["width"]} {p["height"]}" font-family="sans-serif" font-size="12">',
        f'<rect width="{p["width"]}" height="{p["height"]}" fill="white"/>',
        f'<text x="{p["width"] / 2}" y="24" text-anchor="middle" font-size="16">{escape(title)}</text>',
        f'<line x1="{p["left"]}" y1="{bottom}" x2="{p["left"] + plot_w}" y2="{bottom}" stroke="black"/>',
        f'<line x1="{p["left"]}" y1="{bottom}" x2="{p["left"]}" y2="{p["top"]}" stroke="black"/>',
        f'<text x="{p["left"] + plot_w / 2}" y="{p["height"] - 10}" text-anchor="middle">1/n</text>',
        f'<text transform="translate(16,{p["top"] + plot_h / 2}) rotate(-90)" text-anchor="middle">'
        "a(n) / a(n-1)</text>",
    ]
    for value in _nice_ticks(0, x_high):
        parts.append(
            f'<line x1="{x_of(value):.1f}" y1="{bottom}" x2="{x_of(value):.1f}" y2="{bottom + 5}" stroke="black"/>'
        )
        parts.append(f'<text x="{x_of(value):.1f}" y="{bottom + 18}" text-anchor="middle">{value:g}</text>')
    for value in _nice_ticks(y_low, y_high):
        y = y_of(value)
        parts.append(
            f'<line x1="{p["left"] - 5}" y1="{y:.1f}" x2="{p["left"] + plot_w}" y2="{y:.1f}" stroke="#e4e4e4"/>'
        )
        parts.append(f'<text x="{p["left"] - 8}" y="{y + 4:.1f}" text-anchor="end">{value:g}</text>')
    for name, colour in _RATIO_SERIES:  # free drawn hollow over fixed: where they meet, both show
        parts += [
            f'<circle class="{name}" cx="{x_of(x):.1f}" cy="{y_of(y):.1f}" {_RATIO_MARK[name](colour)}/>'
            for x, y in points.get(name, [])
        ]
    top, low = y_of(lam + spread), y_of(lam - spread)
    parts += [
        f'<line class="estimate" x1="{x_of(0):.1f}" y1="{y_of(lam):.1f}" x2="{p["left"] + plot_w}" y2="{y_of(lam):.1f}" '
        'stroke="#444444" stroke-dasharray="4 3"/>',
        f'<line class="estimate" x1="{x_of(0) + 4:.1f}" y1="{top:.1f}" x2="{x_of(0) + 4:.1f}" y2="{low:.1f}" '
        'stroke="black" stroke-width="2"/>',
        f'<circle class="estimate" cx="{x_of(0) + 4:.1f}" cy="{y_of(lam):.1f}" r="4" fill="black"/>',
        f'<text x="{x_of(0) + 12:.1f}" y="{y_of(lam) - 6:.1f}">λ = {lam:.5f} ± {spread:.1g}</text>',
    ]
    names = [(name, colour) for name, colour in _RATIO_SERIES if name in points]
    legend_x, legend_y = p["left"] + plot_w - 110, bottom - 14 - 18 * len(names) - 8
    parts.append(
        f'<rect x="{legend_x}" y="{legend_y}" width="100" height="{10 + 18 * len(names)}" fill="white" '
        'stroke="#999999"/>'
    )
    for row, (name, colour) in enumerate(names):
        y = legend_y + 14 + 18 * row
        parts.append(f'<circle cx="{legend_x + 14}" cy="{y - 4}" {_RATIO_MARK[name](colour)}/>')
        parts.append(f'<text x="{legend_x + 26}" y="{y}">{name}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _nice_ticks(low: float, high: float, count: int = 6) -> list[float]:
    """About ``count`` round values (1, 2 or 5 times a power of ten apart) between low and high."""
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(low / step)
    return [round(k * step, 12) for k in range(first, math.floor(high / step) + 1)]


# ----------------------------------------------------------------------------------- gallery


class GalleryItem(NamedTuple):
    key: str  # canonical key (the catalogue's key column)
    stabiliser: int  # order of the creature's symmetry group: 1, 2, 3 or 6
    sum: str  # its creature sum
    tiles: list  # its tiles (list of Tile), drawn as given


class GalleryPage(NamedTuple):
    number: int  # 1, 2, ... (its file is gallery_page_name(number))
    first: int  # the place of its first creature in the whole gallery, counting from 1
    last: int  # the place of its last creature
    stabilisers: dict  # stabiliser order -> how many of its creatures have it, most symmetric first


_SYMMETRY = {
    6: "all six symmetries: three rotations and three reflections",
    3: "the three rotations only",
    2: "one reflection",
    1: "no symmetry",
}
_GALLERY_CSS = """
body { font-family: sans-serif; margin: 2em; color: #222; background: #fafafa; line-height: 1.4; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 1.5em; }
.grid { display: flex; flex-wrap: wrap; gap: 1em; align-items: flex-start; }
figure { margin: 0; padding: 0.8em; background: white; border: 1px solid #ccc; border-radius: 6px;
         width: 16em; box-sizing: border-box; }
figure svg { display: block; margin: 0 auto 0.5em auto; max-width: 100%; height: auto; }
figcaption { font-size: 0.8em; line-height: 1.4; }
figcaption .label, figcaption .place { color: #777; }
figcaption .place { float: right; }
code { font-family: monospace; overflow-wrap: anywhere; }
p code { font-size: 1.1em; background: #e8e8e8; padding: 0 0.25em; border-radius: 3px; }
figcaption code { display: block; margin-bottom: 0.3em; }
code.sum { font-size: 1.15em; font-weight: bold; word-break: break-all; }
code.key { color: #555; }
.key-item { white-space: nowrap; }
.swatch { display: inline-block; width: 1em; height: 1em; vertical-align: middle; border: 1px solid #999; }
nav.pager { display: flex; gap: 1.5em; align-items: baseline; margin: 1em 0; padding: 0.5em 0.8em;
            background: white; border: 1px solid #ccc; border-radius: 6px; }
nav.pager .here { font-weight: bold; }
nav.pager .none { color: #aaa; }
table { border-collapse: collapse; background: white; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.7em; text-align: left; }
td.number { text-align: right; font-variant-numeric: tabular-nums; }
ol.pages { display: grid; grid-template-columns: repeat(auto-fill, minmax(19em, 1fr)); gap: 0.3em 1.5em;
           padding-left: 0; list-style: none; font-size: 0.9em; }
ol.pages .detail { color: #666; }
"""


def gallery_page_name(number: int) -> str:
    """The file name of gallery page ``number`` (pages link to one another by these names)."""
    return f"page-{number}.html"


def gallery_pages(stabilisers: Iterable[int], per_page: int) -> list[GalleryPage]:
    """Cut a gallery into pages of at most ``per_page`` creatures.

    stabilisers: the stabiliser order of every creature, in gallery order (most symmetric first,
                 then by key); there is always at least one page, empty if there are no creatures.
    """
    if per_page < 1:
        raise ValueError(f"per_page must be at least 1, not {per_page}")
    orders = [int(s) for s in stabilisers]
    pages: list[GalleryPage] = []
    for start in range(0, max(len(orders), 1), per_page):
        chunk = orders[start : start + per_page]
        counts = {order: chunk.count(order) for order in sorted(set(chunk), reverse=True)}
        pages.append(GalleryPage(len(pages) + 1, start + 1, start + len(chunk), counts))
    return pages


def _head(title: str) -> list[str]:
    return [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8"/>',
        '<meta name="viewport" content="width=device-width, initial-scale=1"/>',
        f"<title>{escape(title)}</title>",
        f"<style>{_GALLERY_CSS}</style></head><body>",
    ]


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def _legend_html() -> str:
    return " ".join(
        f'<span class="key-item"><span class="swatch" style="background:{COLOURS[name]}"></span> {label}</span>'
        for name, label in (("creature", "the creature"), ("blue", "other blue regions"), ("yellow", "yellow regions"))
    )


_SUM_HELP = (
    "<p>The sum under each picture rebuilds it: start on a tile <code>a</code> with the pointer up "
    "(towards the upper-left neighbour); a digit turns the pointer that many 60&#176; steps clockwise; "
    "<code>a</code>, <code>b</code>, <code>c</code> place a tile there with its blue tip at its "
    "lower-left, top and lower-right corner; <code>+</code> steps into the tile just placed, "
    "<code>-</code> steps back out.</p>"
)


def _pager(number: int | None, pages: int) -> str:
    """Links to the previous page, the index and the next page (``number`` None: the index)."""

    def link(target: int, rel: str) -> str:
        if not 1 <= target <= pages:  # greyed, not a link, so the others keep their places
            return f'<span class="none {rel}">{"&#8592; first page" if rel == "prev" else "last page &#8594;"}</span>'
        text = f"&#8592; page {target}" if rel == "prev" else f"page {target} &#8594;"
        return f'<a class="{rel}" rel="{rel}" href="{gallery_page_name(target)}">{text}</a>'

    if number is None:
        return f'<nav class="pager"><span class="here">index</span> {link(1, "next")}</nav>'
    return (
        f'<nav class="pager">{link(number - 1, "prev")} '
        f'<a class="index" href="index.html">index</a> <span class="here">page {number} of {pages}</span> '
        f"{link(number + 1, 'next')}</nav>"
    )


def gallery_index_html(
    n: int, pages: list[GalleryPage], counts: dict, *, per_page: int, selection: str | None = None
) -> str:
    """The gallery's index page (self-contained HTML, no scripts, no external links): how many
    creatures of size ``n`` there are by stabiliser order, how many the gallery shows, and a link to
    every page with the creatures it holds.  Well-formed XML.

    pages:     the gallery's pages (``gallery_pages``), of at most ``per_page`` creatures each;
    counts:    stabiliser order -> creatures of size n with it (all of them, whatever the gallery shows);
    selection: what the gallery leaves out, in words (e.g. "stabiliser 2 only"), None if nothing.
    """
    n, counts = int(n), {int(order): int(count) for order, count in counts.items()}  # numbers, never markup
    shown: dict = {}
    for page in pages:
        for order, count in page.stabilisers.items():
            shown[order] = shown.get(order, 0) + count
    first_page: dict[int, int] = {}  # stabiliser order -> the number of the first page showing it
    for page in pages:
        for order in page.stabilisers:
            first_page.setdefault(order, page.number)
    total, total_shown = sum(counts.values()), sum(shown.values())
    title = f"Palago creatures of size {n}"
    parts = _head(title) + [
        f"<h1>{title}</h1>",
        f"<p>{_plural(total, 'creature')} of size {n} up to rotation and reflection"
        + (f"; this gallery shows {total_shown:,} ({escape(selection)})" if selection else "")
        + f", on {_plural(len(pages), 'page')} of at most {per_page:,}. "
        f"Each is drawn on the {n} tiles it passes through: {_legend_html()}.</p>",
        _SUM_HELP,
        _pager(None, len(pages)),
        '<table class="stabilisers"><thead><tr><th>symmetry group</th><th>symmetries</th>'
        "<th>creatures</th><th>in this gallery</th><th>first page</th></tr></thead><tbody>",
    ]
    for order in sorted(set(counts) | set(shown), reverse=True):
        first = first_page.get(order)
        where = f'<a href="{gallery_page_name(first)}#stabiliser-{order}">page {first}</a>' if first else "&#8212;"
        parts.append(
            f'<tr id="stabiliser-{order}"><td>order {order}</td><td>{escape(_SYMMETRY.get(order, "unknown"))}'
            f'</td><td class="number">{counts.get(order, 0):,}</td><td class="number">{shown.get(order, 0):,}'
            f"</td><td>{where}</td></tr>"
        )
    parts.append(
        f'<tr><th colspan="2">all</th><td class="number">{total:,}</td>'
        f'<td class="number">{total_shown:,}</td><td></td></tr></tbody></table>'
    )
    if total_shown:
        parts.append("<h2>Pages</h2>")
        parts.append('<ol class="pages">')
        for page in pages:
            detail = ", ".join(f"order {order}: {count:,}" for order, count in page.stabilisers.items())
            parts.append(
                f'<li><a href="{gallery_page_name(page.number)}">page {page.number}</a> '
                f'<span class="detail">creatures {page.first:,}&#8211;{page.last:,} ({detail})</span></li>'
            )
        parts.append("</ol>")
    else:
        parts.append(f"<p>No creature of size {n} to show.</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def gallery_page_html(
    n: int, items: Iterable[GalleryItem], page: GalleryPage, pages: int, counts: dict, *, radius: float = 20.0
) -> str:
    """One gallery page (self-contained HTML: inline CSS and SVG, no scripts, no external links):
    the creatures ``items`` of size ``n``, in gallery order, under a heading per stabiliser order,
    each with its place in the gallery, sum and key, between links to the previous page, the index
    (``index.html``) and the next page.  Well-formed XML, so it also parses with xml.etree.

    page:   this page (``gallery_pages``), ``pages`` how many there are;
    counts: stabiliser order -> creatures of size n with it, for the headings;
    radius: a hex's circumradius in pixels.
    """
    items = list(items)
    n, counts = int(n), {int(order): int(count) for order, count in counts.items()}  # numbers, never markup
    title = f"Palago creatures of size {n}: page {page.number} of {pages}"
    parts = _head(title) + [
        _pager(page.number, pages),
        f"<h1>{title}</h1>",
        (
            f"<p>Creatures {page.first:,}&#8211;{page.last:,} of the gallery, drawn on their {n} tiles: "
            f"{_legend_html()}. The sum under each picture rebuilds it (the index says how).</p>"
            if items
            else f"<p>No creature of size {n} to show.</p>"
        ),
        tile_defs_svg(radius),
    ]
    place = page.first
    for order in sorted({int(item.stabiliser) for item in items}, reverse=True):
        group = [item for item in items if int(item.stabiliser) == order]
        parts.append(
            f'<h2 id="stabiliser-{order}">Symmetry group of order {order} '
            f"({escape(_SYMMETRY.get(order, 'unknown'))}): {len(group):,} here, "
            f"{counts.get(order, len(group)):,} of size {n} in all</h2>"
        )
        parts.append('<div class="grid">')
        for item in group:
            parts.append(_gallery_figure(item, radius, place))
            place += 1
        parts.append("</div>")
    parts.append(_pager(page.number, pages))
    parts.append("</body></html>")
    return "\n".join(parts)


def _gallery_figure(item: GalleryItem, radius: float, place: int) -> str:
    picture = creature_svg(item.tiles, radius=radius, title=item.sum, standalone=False, shared_tiles=True)
    return (
        f'<figure class="creature-card" id="creature-{place}">{picture}<figcaption>'
        f'<span class="place">no. {place:,}</span><span class="label">sum</span>'
        f'<code class="sum">{escape(item.sum)}</code>'
        f'<span class="label">key</span><code class="key">{escape(item.key)}</code></figcaption></figure>'
    )
