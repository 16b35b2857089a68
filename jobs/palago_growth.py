"""``batchenum palago growth``: the growth constant and critical exponent of the creature counts.

The shortcut of ``batchenum growth`` for the committed table: reads a count table (the longest one by
default), runs solvers/series.py on its fixed and free columns as exact integers, prints the
estimates (or one JSON document, in jobs/growth.py's form), tests each ``--theta`` and can draw the
ratio plot.  docs/palago_growth.md explains the methods and the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from fractions import Fraction

from batchenum.jobs.growth import (
    CONVENTION,
    add_predict_argument,
    add_theta_argument,
    add_up_to_argument,
    analysis_json,
    analysis_text,
    check_json,
    check_text,
    counted_term,
    cut_at,
    prediction_json,
    prediction_text,
    sizes_text,
)
from batchenum.jobs.palago_table import _read_counts, exact_column
from batchenum.pipeline.cli import Command
from batchenum.pipeline.errors import PipelineError
from batchenum.pipeline.storage import Storage

__all__ = ["COMMANDS", "DEFAULT_SOURCES", "series_of", "joint_predictions"]

# The committed tables --from chooses among by default: the one reaching the largest n wins.
DEFAULT_SOURCES = ("results/transfer", "results/extended", "results")
SERIES = ("fixed", "free")
PLOT_FROM = 1 / 4  # the ratio plot leaves out the first quarter of the sizes, whose ratios jump about


def series_of(table, column: str) -> list[int]:
    """series[n] = the column's count for n (series[0] = 0: no creature has no tile), as Python
    integers, exact whatever the table stores them as."""
    sizes = exact_column(table, "n")
    if sizes != list(range(1, len(sizes) + 1)):
        raise PipelineError(
            "the count table does not hold the sizes n = 1, 2, ... in order: rebuild it with `batchenum run palago`"
        )
    return [0, *exact_column(table, column)]


def joint_predictions(fixed: list[int], free: list[int], count: int) -> dict[str, list]:
    """The next ``count`` terms of both series (solvers/series.py ``predict``), each bar widened to
    the larger of the two relative bars and the distance between the two predictions: free(n) is
    fixed(n)/6 but for the symmetric creatures (1e-12 of the count at n = 56), so the two series
    predict one number twice, and where they disagree at least one bar is too narrow."""
    from batchenum.solvers.series import predict

    by_series = {"fixed": predict(fixed, count), "free": predict(free, count)}
    scale = Fraction(free[-1], fixed[-1])  # free/fixed at the last counted n, the next ones' to 1e-12
    relative = 0.0  # as in predict, relative bars never narrow with the horizon
    for step, (one, other) in enumerate(zip(by_series["fixed"], by_series["free"])):
        distance = abs(other.value.estimate / (one.value.estimate * float(scale)) - 1)
        relative = max(relative, one.relative_spread, other.relative_spread, distance)
        for name, prediction in (("fixed", one), ("free", other)):
            value = dataclasses.replace(prediction.value, spread=relative * prediction.value.estimate)
            by_series[name][step] = dataclasses.replace(prediction, value=value)
    return by_series


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from",
        dest="source",
        metavar="DIR",
        help="the folder or URI a palago run wrote to, whose DIR/palago/creature_counts.parquet "
        "is analysed (default: whichever of " + ", ".join(DEFAULT_SOURCES) + " reaches the largest n)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help='one JSON object on standard output: {"lambda": {"estimate", "spread"}, '
        '"theta": {...}, ...} for the fixed series, the same under "free" (docs/cli.md)',
    )
    parser.add_argument("--svg", metavar="PATH", help="also draw the ratio plot (ratios against 1/n) to PATH")
    add_theta_argument(parser)
    add_predict_argument(parser)
    add_up_to_argument(parser)


def _growth(args: argparse.Namespace) -> int:
    _, location, table = _source_table(args.source)
    wholes = {column: series_of(table, column) for column in SERIES}
    cuts = {column: cut_at(wholes[column], args.up_to, location) for column in SERIES}
    used = {column: cuts[column][0] for column in SERIES}
    results, checks = _analyses(used, args.theta, location)
    predictions = _predictions(used["fixed"], used["free"], location, args.predict)
    # each prediction with the term the table counted there, when --up-to left it out
    predicted = {
        column: [(p, counted_term(cuts[column][1], i)) for i, p in enumerate(predictions[column])] for column in SERIES
    }
    if args.svg:
        _write_plot(args.svg, used, results["fixed"])
    if not args.json:
        print(f"growth analysis of {location} (n = 1..{sizes_text(used['fixed'], wholes['fixed'])}), {CONVENTION}")
        for column in SERIES:
            print(analysis_text(column, results[column]))
            for check in checks[column]:
                print(check_text(check))
            for prediction, counted in predicted[column]:
                print(prediction_text(prediction, counted))
        if args.svg:
            print(f"ratio plot: {args.svg}")
        return 0

    def part(column: str) -> dict:
        return {
            **analysis_json(results[column]),
            "checks": [check_json(c) for c in checks[column]],
            "predictions": [prediction_json(p, counted) for p, counted in predicted[column]],
        }

    document = {
        "location": location,
        "max_n": table.num_rows,
        "up_to": args.up_to,
        "convention": CONVENTION,
        "series": "fixed",
        **part("fixed"),
        "free": part("free"),
        **({"svg": args.svg} if args.svg else {}),
    }
    print(json.dumps(document, indent=2))
    return 0


def _analyses(used: dict[str, list[int]], thetas: list[float], location: str) -> tuple[dict, dict]:
    """Each series' analysis, and its check of each theta."""
    from batchenum.solvers.series import analyse, check_exponent

    results, checks = {}, {}
    for column, series in used.items():
        try:
            results[column] = analyse(series)
            checks[column] = [check_exponent(series, theta, results[column]) for theta in thetas]
        except ValueError as error:
            raise PipelineError(f"{location}: {column} series: {error}") from None
    return results, checks


def _predictions(fixed: list[int], free: list[int], location: str, count: int) -> dict[str, list]:
    if not count:
        return {column: [] for column in SERIES}
    try:
        return joint_predictions(fixed, free, count)
    except ValueError as error:
        raise PipelineError(f"{location}: predicting {count} terms: {error}") from None


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
            raise PipelineError(
                f"no count table at {folder.uri(path)}: run `batchenum run palago --out {source}` "
                "first, or give --from the folder a palago run wrote to"
            )
    if not found:
        raise PipelineError(
            f"no count table under {', '.join(DEFAULT_SOURCES)} (run from the repository's folder, or give --from DIR)"
        )
    return max(found, key=lambda item: item[2].num_rows)


def _write_plot(path: str, used: dict[str, list[int]], fixed_analysis) -> None:
    from batchenum.solvers.palago.render import ratio_plot_svg
    from batchenum.solvers.series import ratios

    first = max(2, int((len(used["fixed"]) - 1) * PLOT_FROM))
    points = {column: [(n, r) for n, r in ratios(series) if n >= first] for column, series in used.items()}
    svg = ratio_plot_svg(points, fixed_analysis.lam.estimate, fixed_analysis.lam.spread)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(svg + "\n")
    os.replace(temporary, path)  # a reader never sees half a picture


COMMANDS = [
    Command(
        ("palago", "growth"),
        "estimate the growth constant and critical exponent of the creature counts",
        _add_arguments,
        _growth,
    )
]
