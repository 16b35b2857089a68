"""``batchenum palago growth``: the growth constant and critical exponent of the creature counts.

Reads a committed count table (the longest one by default), runs solvers/palago/growth.py on its
fixed and free columns as exact integers, prints the estimates (or one JSON document) and can draw
the ratio plot.  docs/palago_growth.md explains the methods and the figures.
"""

from __future__ import annotations

import argparse
import json
import os

from batchenum.jobs.palago import _read_counts, exact_column
from batchenum.pipeline.cli import Command
from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.storage import Storage

__all__ = ["COMMANDS", "DEFAULT_SOURCES", "analysis_json", "series_of"]

# The committed tables --from chooses among by default: the one reaching the largest n wins.
DEFAULT_SOURCES = ("results/transfer", "results/extended", "results")
CONVENTION = "a(n) ~ C * lambda^n * n^(-theta)"
SERIES = ("fixed", "free")
PLOT_FROM = 1 / 4  # the ratio plot leaves out the first quarter of the sizes, whose ratios jump about


def series_of(table, column: str) -> list[int]:
    """series[n] = the column's count for n (series[0] = 0: no creature has no tile), as Python
    integers, exact whatever the table stores them as."""
    sizes = exact_column(table, "n")
    if sizes != list(range(1, len(sizes) + 1)):
        raise PipelineError("the count table does not hold the sizes n = 1, 2, ... in order: rebuild it with "
                            "`batchenum run palago`")
    return [0, *exact_column(table, column)]


def analysis_json(analysis) -> dict:
    """The estimates of one series as JSON: ``lambda`` and ``theta`` (estimate, spread), then each
    method's, with the number of approximants behind it."""
    methods = {}
    for method in (analysis.ratio, analysis.first_order, analysis.second_order):
        methods[method.name] = {"approximants": len(method.approximants),
                                **({"lambda": _summary(method.lam), "theta": _summary(method.theta)}
                                   if method.lam is not None else {})}
    return {"lambda": _summary(analysis.lam), "theta": _summary(analysis.theta), "methods": methods}


def _summary(summary) -> dict:
    return {"estimate": summary.estimate, "spread": summary.spread}


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="source", metavar="DIR",
                        help="the folder or URI a palago run wrote to, whose DIR/palago/creature_counts.parquet "
                             "is analysed (default: whichever of " + ", ".join(DEFAULT_SOURCES)
                             + " reaches the largest n)")
    parser.add_argument("--json", action="store_true",
                        help='one JSON object on standard output: {"lambda": {"estimate", "spread"}, '
                             '"theta": {...}, ...} for the fixed series, the same under "free" (docs/cli.md)')
    parser.add_argument("--svg", metavar="PATH", help="also draw the ratio plot (ratios against 1/n) to PATH")


def _growth(args: argparse.Namespace) -> int:
    from batchenum.solvers.palago.growth import analyse

    _, location, table = _source_table(args.source)
    results = {}
    for column in SERIES:
        try:
            results[column] = analyse(series_of(table, column))
        except ValueError as error:
            raise PipelineError(f"{location}: {column} series: {error}") from None
    if args.svg:
        _write_plot(args.svg, table, results["fixed"])
    if args.json:
        document = {"location": location, "max_n": table.num_rows, "convention": CONVENTION, "series": "fixed",
                    **analysis_json(results["fixed"]), "free": analysis_json(results["free"])}
        if args.svg:
            document["svg"] = args.svg
        print(json.dumps(document, indent=2))
        return 0
    print(f"growth analysis of {location} (n = 1..{table.num_rows}), {CONVENTION}")
    for column in SERIES:
        print(_text(column, results[column]))
    if args.svg:
        print(f"ratio plot: {args.svg}")
    return 0


def _source_table(source: str | None):
    """(DIR, the table's location, the table): the given DIR's, else the longest default one."""
    candidates = [source] if source else list(DEFAULT_SOURCES)
    found = []
    for candidate in candidates:
        folder = Storage.at(candidate).child("palago")
        path = folder.join("creature_counts.parquet")
        if folder.is_file(path):
            found.append((candidate, folder.uri(path), _read_counts(folder, path, candidate)))
        elif source:
            raise PipelineError(f"no count table at {folder.uri(path)}: run `batchenum run palago --out {source}` "
                                "first, or give --from the folder a palago run wrote to")
    if not found:
        raise PipelineError(f"no count table under {', '.join(DEFAULT_SOURCES)} (run from the repository's folder, "
                            "or give --from DIR)")
    return max(found, key=lambda item: item[2].num_rows)


def _text(column: str, analysis) -> str:
    lines = [f"{column}: lambda = {_pm(analysis.lam, 6)}, theta = {_pm(analysis.theta, 4)}"]
    for method, name in ((analysis.ratio, "ratio method"), (analysis.first_order, "first-order approximants"),
                         (analysis.second_order, "second-order approximants")):
        if method.lam is None:
            lines.append(f"  {name:26s} none usable")
        else:
            lines.append(f"  {name:26s} lambda = {_pm(method.lam, 6)}, theta = {_pm(method.theta, 4)} "
                         f"({len(method.approximants)})")
    return "\n".join(lines)


def _pm(summary, digits: int) -> str:
    return f"{summary.estimate:.{digits}f} ± {summary.spread:.1g}"


def _write_plot(path: str, table, fixed_analysis) -> None:
    from batchenum.solvers.palago.growth import ratios
    from batchenum.solvers.palago.render import ratio_plot_svg

    first = max(2, int(table.num_rows * PLOT_FROM))
    points = {column: [(n, r) for n, r in ratios(series_of(table, column)) if n >= first] for column in SERIES}
    svg = ratio_plot_svg(points, fixed_analysis.lam.estimate, fixed_analysis.lam.spread)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(svg + "\n")
    os.replace(temporary, path)  # a reader never sees half a picture


COMMANDS = [Command(("palago", "growth"), "estimate the growth constant and critical exponent of the creature counts",
                    _add_arguments, _growth)]
