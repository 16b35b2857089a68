"""``batchenum growth FILE``: the growth constant and critical exponent of any count series.

Reads the series from a file (solvers/series.py does the analysis, on exact integers):

- a text file of one count per line, a(1) first; blank lines and lines starting with '#' (a
  citation, say) are skipped;
- a Parquet or CSV table (by the name's ending) with a column ``n`` of consecutive sizes and a count
  column chosen by ``--column`` (needed only when the table has more than one besides ``n``).

Prints the estimates with their error bars (or one JSON document, ``--json``) and, for each
``--theta T``, whether the series is consistent with that exponent.  docs/palago_growth.md explains
the methods and how the error bars are made.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os

from batchenum.pipeline.cli import Command
from batchenum.pipeline.errors import PipelineError, UsageError

__all__ = [
    "COMMANDS",
    "CONVENTION",
    "read_series",
    "analysis_json",
    "analysis_text",
    "check_json",
    "check_text",
    "add_predict_argument",
    "add_theta_argument",
    "add_up_to_argument",
    "counted_term",
    "cut_at",
    "sizes_text",
    "prediction_json",
    "prediction_text",
]

CONVENTION = "a(n) ~ C * lambda^n * n^(-theta)"
TABLE_ENDINGS = (".parquet", ".csv")


def read_series(path: str, column: str | None = None) -> tuple[list[int], str]:
    """(series with series[n] = a(n) from n = 0, the count column's name or 'counts') from ``path``."""
    if not os.path.isfile(path):
        raise PipelineError(
            f"no file at {path}: give a text file of one count per line, or a .parquet or .csv "
            "table with columns n and the counts"
        )
    lower = path.lower()
    if lower.endswith(TABLE_ENDINGS):
        columns = _parquet_columns(path) if lower.endswith(".parquet") else _csv_columns(path)
        return _table_series(path, columns, column)
    if column is not None:
        raise UsageError(
            f"--column chooses a column of a .parquet or .csv table; {path} is read as text, one count per line"
        )
    return _text_series(path), "counts"


def _text_series(path: str) -> list[int]:
    values = [0]  # a(0): the text starts at n = 1
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            values.append(_whole_number(text, f"{path} line {line_number}"))
    return values


def _whole_number(text: str, where: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise PipelineError(
            f"{where} holds {text!r}, not a whole number: give one exact count per line "
            "(lines starting with # are comments)"
        ) from None
    if value < 0:
        raise PipelineError(f"{where} holds {value}: counts cannot be negative")
    return value


def _parquet_columns(path: str) -> dict[str, list[int] | None]:
    import pyarrow.parquet as pq

    from batchenum.jobs.palago_table import exact_column

    try:
        table = pq.read_table(path)
    except Exception as error:  # pyarrow raises several types for files that are not Parquet
        raise PipelineError(f"cannot read {path} as Parquet: {error}") from None
    columns: dict[str, list[int] | None] = {}
    for name in table.column_names:
        try:
            columns[name] = exact_column(table, name)
        except PipelineError:
            columns[name] = None  # not a count column; an error only if chosen
    return columns


def _csv_columns(path: str) -> dict[str, list[int] | None]:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    if not rows:
        raise PipelineError(f"{path} is empty: give a header line (n and the count columns) and one row per n")
    header, body = [name.strip() for name in rows[0]], rows[1:]
    columns: dict[str, list[int] | None] = {}
    for index, name in enumerate(header):
        try:
            columns[name] = [
                _whole_number(row[index].strip(), f"{path} row {row_number + 2} column {name}")
                for row_number, row in enumerate(body)
            ]
        except (PipelineError, IndexError):
            columns[name] = None
    return columns


def _table_series(path: str, columns: dict[str, list[int] | None], column: str | None) -> tuple[list[int], str]:
    if "n" not in columns or columns["n"] is None:
        raise PipelineError(
            f"{path} has no column n of whole numbers (it has {', '.join(columns) or 'none'}): name the sizes' column n"
        )
    counts = [name for name in columns if name != "n"]
    if column is None:
        if len(counts) != 1:
            raise UsageError(
                f"{path} has the columns {', '.join(counts) or 'none'} besides n: choose one with --column"
            )
        column = counts[0]
    if column not in counts:
        raise UsageError(f"{path} has no column {column!r}: choose one of {', '.join(counts) or 'none'}")
    values, sizes = columns[column], columns["n"]
    if values is None:
        raise PipelineError(f"{path}'s column {column} holds something other than whole numbers: give exact counts")
    if not sizes or sizes != list(range(sizes[0], sizes[0] + len(sizes))) or sizes[0] < 0:
        raise PipelineError(
            f"{path}'s column n does not hold consecutive sizes in order from n >= 0: sort the "
            "table by n and fill every size"
        )
    return [0] * sizes[0] + values, column


# ------------------------------------------------------------------------------------- output


def analysis_json(analysis) -> dict:
    """One series' estimates as JSON: ``lambda`` and ``theta`` (estimate, spread), the method behind
    them, each method's (with scatter, drift and the medians on the shorter series), and the
    disagreements between methods."""
    methods = {}
    for method in (analysis.ratio, analysis.first_order, analysis.second_order):
        methods[method.name] = {
            "approximants": len(method.approximants),
            **(
                {"lambda": _estimate(method.lam, True), "theta": _estimate(method.theta, True)}
                if method.lam is not None
                else {}
            ),
            "history": [
                {"last_n": stage.last, "approximants": stage.approximants, "lambda": stage.lam, "theta": stage.theta}
                for stage in method.history
            ],
        }
    return {
        "lambda": _estimate(analysis.lam),
        "theta": _estimate(analysis.theta),
        "method": analysis.method,
        "methods": methods,
        "disagreements": analysis.disagreements(),
    }


def _estimate(estimate, detail: bool = False) -> dict:
    """JSON has no infinity: an unknown drift (no shorter series to compare), and so an unbounded
    spread, is null."""
    document = {"estimate": estimate.estimate, "spread": _finite(estimate.spread)}
    if detail:
        document.update(scatter=estimate.scatter, drift=_finite(estimate.drift))
    return document


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def check_json(check) -> dict:
    return {"theta": check.theta, "biased_lambda": _estimate(check.biased), "consistent": check.consistent}


def analysis_text(name: str, analysis) -> str:
    lines = [f"{name}: lambda = {_pm(analysis.lam, 6)}, theta = {_pm(analysis.theta, 4)} ({analysis.method})"]
    for method, label in (
        (analysis.ratio, "ratio method"),
        (analysis.first_order, "first-order approximants"),
        (analysis.second_order, "second-order approximants"),
    ):
        if method.lam is None:
            lines.append(f"  {label:26s} none usable")
        else:
            lines.append(
                f"  {label:26s} lambda = {_pm(method.lam, 6)}, theta = {_pm(method.theta, 4)} "
                f"({len(method.approximants)})"
            )
    lines += [f"  warning: {text}" for text in analysis.disagreements()]
    return "\n".join(lines)


def check_text(check) -> str:
    verdict = "consistent" if check.consistent else "excluded"
    return (
        f"  theta = {check.theta:g} assumed: lambda = {_pm(check.biased, 6)} against {_pm(check.unbiased, 6)} "
        f"with theta free: {verdict}"
    )


def prediction_json(prediction, counted: int | None = None) -> dict:
    """One predicted term: its estimate, error bar (absolute and relative) and the backtest's error;
    with the counted term (``--up-to``), that term (a decimal string: it may pass a double), the
    prediction's relative error and that error over the relative bar."""
    document = {
        "n": prediction.n,
        "estimate": prediction.value.estimate,
        "spread": _finite(prediction.value.spread),
        "relative_spread": _finite(prediction.relative_spread),
        "scatter": prediction.value.scatter,
        "backtest_error": _finite(prediction.backtest_error),
        "approximants": prediction.approximants,
    }
    if counted is not None:
        error = prediction_error(prediction, counted)
        document |= {"counted": str(counted), "error": error, "error_over_bar": _finite(_over_bar(prediction, error))}
    return document


def prediction_text(prediction, counted: int | None = None) -> str:
    """'  predicted a(57) = 4.300878e+22 ± 2e-06 relative (...)': the digits the bar leaves meaningful;
    with the counted term, '; counted 43008...: error +9.0e-07, 0.22 of the bar'."""
    relative = prediction.relative_spread
    digits = (
        6 if not math.isfinite(relative) or relative <= 0 else max(1, min(16, 1 - math.floor(math.log10(relative))))
    )
    backtest = f"{prediction.backtest_error:.1g}" if math.isfinite(prediction.backtest_error) else "none"
    text = (
        f"  predicted a({prediction.n}) = {prediction.value.estimate:.{digits}e} ± {relative:.1g} relative "
        f"(backtest error {backtest}, {prediction.approximants} approximants)"
    )
    if counted is None:
        return text
    error = prediction_error(prediction, counted)
    share = _over_bar(prediction, error)
    return (
        text
        + f"; counted {counted}: error {error:+.1e}, "
        + (f"{share:.2f} of the bar" if math.isfinite(share) else "no bar to compare")
    )


def prediction_error(prediction, counted: int) -> float:
    """predicted / counted - 1 (inf for a counted 0)."""
    return prediction.value.estimate / counted - 1 if counted else math.inf


def _over_bar(prediction, error: float) -> float:
    relative = prediction.relative_spread
    return abs(error) / relative if math.isfinite(relative) and relative > 0 else math.inf


def cut_at(series: list[int], up_to: int | None, where: str) -> tuple[list[int], list[int]]:
    """(a(0)..a(N), the counted terms past N) for ``--up-to N``; the whole series and [] without it."""
    if up_to is None:
        return series, []
    if up_to > len(series) - 1:
        raise PipelineError(f"{where}: --up-to {up_to}, but the series ends at n = {len(series) - 1}")
    return series[: up_to + 1], series[up_to + 1 :]


def _pm(estimate, digits: int) -> str:
    """At least ``digits`` decimals, and as many as the spread's first significant digit needs."""
    if math.isfinite(estimate.spread) and estimate.spread > 0:
        digits = max(digits, 1 - math.floor(math.log10(estimate.spread)))
    return f"{estimate.estimate:.{digits}f} ± {estimate.spread:.1g}"


# ------------------------------------------------------------------------------------ command


def add_theta_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--theta",
        type=float,
        action="append",
        default=[],
        metavar="T",
        help="test the exponent T (repeatable): the ratio method with theta = T assumed gives a "
        "biased lambda, which must agree with the unbiased one within both error bars",
    )


def _term_count(text: str) -> int:
    count = int(text) if text.strip().isdigit() else -1
    if count < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of terms: give K >= 1 (0: no prediction)")
    return count


def _size(text: str) -> int:
    size = int(text) if text.strip().isdigit() else 0
    if size < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size: give N >= 1")
    return size


def add_up_to_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--up-to",
        type=_size,
        metavar="N",
        help="use the terms n <= N only; with --predict, each predicted term the file holds is shown "
        "beside it: the counted term, the prediction's error and that error over the bar",
    )


def add_predict_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--predict",
        type=_term_count,
        default=0,
        metavar="K",
        help="also predict the next K terms from the second-order approximants' equations, with error "
        "bars from their scatter and from a backtest (the same prediction K terms earlier)",
    )


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "file",
        metavar="FILE",
        help="a text file of one count per line from n = 1 ('#' lines are comments), or a .parquet "
        "or .csv table with a column n and the counts",
    )
    parser.add_argument(
        "--column", help="the count column of a .parquet or .csv table (needed when it has more than one besides n)"
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help='one JSON object on standard output: {"lambda": {"estimate", "spread"}, "theta": {...}, '
        '"method", "methods", "disagreements", "checks"} (docs/cli.md)',
    )
    add_theta_argument(parser)
    add_predict_argument(parser)
    add_up_to_argument(parser)


def _growth(args: argparse.Namespace) -> int:
    from batchenum.solvers.series import analyse, check_exponent, predict

    whole, column = read_series(args.file, args.column)
    series, later = cut_at(whole, args.up_to, args.file)
    try:
        analysis = analyse(series)
        checks = [check_exponent(series, theta, analysis) for theta in args.theta]
        predictions = predict(series, args.predict) if args.predict else []
    except ValueError as error:
        raise PipelineError(f"{args.file}: {column}: {error}") from None
    if args.json:
        print(
            json.dumps(
                {
                    "file": args.file,
                    "column": column,
                    "max_n": len(whole) - 1,
                    "up_to": args.up_to,
                    "convention": CONVENTION,
                    **analysis_json(analysis),
                    "checks": [check_json(c) for c in checks],
                    "predictions": [prediction_json(p, counted_term(later, i)) for i, p in enumerate(predictions)],
                },
                indent=2,
            )
        )
        return 0
    print(f"growth analysis of {args.file} (n = 1..{sizes_text(series, whole)}), {CONVENTION}")
    print(analysis_text(column, analysis))
    for check in checks:
        print(check_text(check))
    for i, prediction in enumerate(predictions):
        print(prediction_text(prediction, counted_term(later, i)))
    return 0


def sizes_text(series: list[int], whole: list[int]) -> str:
    """'56', or '52 of 1..56' when --up-to leaves terms out."""
    used, held = len(series) - 1, len(whole) - 1
    return f"{used}" if used == held else f"{used} of 1..{held}"


def counted_term(later: list[int], index: int) -> int | None:
    """The counted term ``index`` places past --up-to's N, if the series holds it."""
    return later[index] if index < len(later) else None


COMMANDS = [
    Command(
        ("growth",),
        "estimate the growth constant and critical exponent of any count series, with error bars",
        _add_arguments,
        _growth,
    )
]
