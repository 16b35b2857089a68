"""Growth analysis (solvers/series.py) on closed forms with known answers, and `batchenum palago
growth` through the real CLI.  The published series with their constants: tests/test_series.py.

Convention: a(n) ~ C lam**n n**(-theta).  Tolerances:
- closed forms that satisfy a first-order linear differential equation with polynomial
  coefficients (central binomials, Catalan, Motzkin numbers) are reproduced exactly by every
  approximant whose degrees reach that equation's, so only numpy's root finding rounds: 1e-9;
- the ratio method's fit of degree d over n = n1..n2 leaves the next term of r(n) = lam * (1 -
  theta/n + c/n**2 + ...) unfitted, an intercept error of about |c'| / n1**(d+1).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import pyarrow.parquet as pq
import pytest
from helpers import REPO, assert_exit

from batchenum.jobs.growth import prediction_json
from batchenum.jobs.palago_growth import joint_predictions, series_of
from batchenum.solvers.series import analyse, ratio_estimates, ratios

# OEIS A001168, fixed polyominoes, n = 0..28 (a(0) = 0 here: the series counts animals of n >= 1 cells)
POLYOMINOES = [
    0,
    1,
    2,
    6,
    19,
    63,
    216,
    760,
    2725,
    9910,
    36446,
    135268,
    505861,
    1903890,
    7204874,
    27394666,
    104592937,
    400795844,
    1540820542,
    5940738676,
    22964779660,
    88983512783,
    345532572678,
    1344372335524,
    5239988770268,
    20457802016011,
    79992676367108,
    313224032098244,
    1228088671826973,
]


def motzkin(count: int) -> list[int]:
    """Motzkin numbers by their recurrence (n+2) M(n) = (2n+1) M(n-1) + 3(n-1) M(n-2)."""
    values = [1, 1]
    for n in range(2, count):
        values.append(((2 * n + 1) * values[-1] + 3 * (n - 1) * values[-2]) // (n + 2))
    return values[:count]


@pytest.mark.parametrize(
    "name, series, lam, theta",
    [
        ("central binomial, ~ 4^n / sqrt(pi n)", [math.comb(2 * n, n) for n in range(30)], 4, 0.5),
        ("Catalan, ~ 4^n n^(-3/2) / sqrt(pi)", [math.comb(2 * n, n) // (n + 1) for n in range(30)], 4, 1.5),
        ("Motzkin, ~ 3^n n^(-3/2), a second singularity at x = -1", motzkin(30), 3, 1.5),
    ],
)
def test_closed_forms_are_exact(name, series, lam, theta):
    assert motzkin(8) == [1, 1, 2, 4, 9, 21, 51, 127]  # OEIS A001006
    result = analyse(series)
    for method in (result.first_order, result.second_order):
        assert len(method.approximants) >= 10, (name, method.name)
        for approximant in method.approximants:
            assert approximant.lam == pytest.approx(lam, abs=1e-9), approximant
            assert approximant.theta == pytest.approx(theta, abs=1e-9), approximant
    assert result.lam.estimate == pytest.approx(lam, abs=1e-9) and result.lam.spread < 1e-9
    assert result.theta.estimate == pytest.approx(theta, abs=1e-9) and result.theta.spread < 1e-9


def test_ratio_method_within_its_truncation_error():
    # central binomials: r(n) = 4 - 2/n exactly, so every fit is exact
    for estimate in ratio_estimates([math.comb(2 * n, n) for n in range(30)]):
        assert estimate.lam == pytest.approx(4, abs=1e-9) and estimate.theta == pytest.approx(0.5, abs=1e-9)
    # Catalan: r(n) = 4 - 6/(n+1) = 4 - 6/n + 6/n^2 - ...: a fit of degree d misses 6/n^(d+1)
    catalan = [math.comb(2 * n, n) // (n + 1) for n in range(30)]
    estimates = ratio_estimates(catalan)
    assert len(estimates) == 5
    for estimate in estimates:
        degree = int(estimate.label.split("degree ")[1].split()[0])
        first = int(estimate.label.split("n = ")[1].split("..")[0])
        assert abs(estimate.lam - 4) <= 6 / first ** (degree + 1), estimate


def test_scaling_the_series_scales_lambda_past_int64():
    # b(n) = 2^n a(n) has generating function f(2x): lam doubles, theta stays; b(28) is about 3e23
    scaled = [2**n * a for n, a in enumerate(POLYOMINOES)]
    assert scaled[-1] > 2**63
    plain, doubled = analyse(POLYOMINOES), analyse(scaled)
    assert doubled.lam.estimate == pytest.approx(2 * plain.lam.estimate, rel=1e-9)
    assert doubled.theta.estimate == pytest.approx(plain.theta.estimate, abs=1e-7)
    assert len(doubled.second_order.approximants) == len(plain.second_order.approximants)


@pytest.mark.parametrize(
    "series, message",
    [
        (POLYOMINOES[:10], "nonzero terms"),
        ([*POLYOMINOES[:5], -1, *POLYOMINOES[6:]], "a(5) = -1 is negative"),
        ([*POLYOMINOES[:5], 63.0, *POLYOMINOES[6:]], "a(5) = 63.0 is not an integer"),
    ],
)
def test_bad_series_named(series, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        analyse(series)


def test_ratios_skip_zero_terms():
    assert ratios([0, 0, 0, 1, 0, 3, 1, 9]) == [(6, 1 / 3), (7, 9.0)]


# ---------------------------------------------------------------------------------------- CLI


def growth(*args: str, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "batchenum", "palago", "growth", *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )


def committed_lengths() -> dict[str, int]:
    lengths = {}
    for source in ("results/transfer", "results/extended", "results"):
        path = REPO / source / "palago" / "creature_counts.parquet"
        if path.exists():
            lengths[source] = pq.read_metadata(path).num_rows
    return lengths


@pytest.mark.slow  # minutes of CPU on a loaded machine: an end-to-end run
def test_cli_json_defaults_to_the_longest_committed_table_and_draws_the_plot(tmp_path):
    svg = tmp_path / "plots" / "ratio.svg"
    result = growth("--json", "--svg", str(svg))
    assert_exit(result, 0)
    document = json.loads(result.stdout)
    lengths = committed_lengths()
    longest = max(lengths, key=lengths.get)
    assert document["location"].endswith(f"{longest}/palago/creature_counts.parquet")
    assert document["max_n"] == lengths[longest]
    table = pq.read_table(REPO / longest / "palago" / "creature_counts.parquet")
    for part, column in ((document, "fixed"), (document["free"], "free")):
        series = [0, *(int(v) for v in table.column(column).to_pylist())]  # int64 or decimal strings
        expected = analyse(series)
        assert part["lambda"] == {"estimate": expected.lam.estimate, "spread": expected.lam.spread}
        assert part["theta"] == {"estimate": expected.theta.estimate, "spread": expected.theta.spread}
        assert set(part["methods"]) == {"ratio", "first_order", "second_order"}
        # the ratios climb towards lambda: it lies above the last one
        assert part["lambda"]["estimate"] > series[-1] / series[-2]
    picture = ElementTree.parse(svg).getroot()
    circles = picture.findall("{http://www.w3.org/2000/svg}circle")
    plotted = [c for c in circles if c.get("class") == "fixed"]
    assert len(plotted) == lengths[longest] - max(2, lengths[longest] // 4) + 1  # every n from a quarter on
    assert [c for c in circles if c.get("class") == "estimate"]


def test_cli_text_from_a_given_folder(tmp_path):
    source = tmp_path / "run"
    (source / "palago").mkdir(parents=True)
    shutil.copy(REPO / "results" / "extended" / "palago" / "creature_counts.parquet", source / "palago")
    result = growth("--from", str(source))
    assert_exit(result, 0)
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"growth analysis of {source}/palago/creature_counts.parquet (n = 1..28)")
    assert lines[1].startswith("fixed: lambda = ") and any(line.startswith("free: lambda = ") for line in lines)


def test_cli_errors_name_what_to_do(tmp_path):
    missing = growth("--from", str(tmp_path / "nothing"))
    assert_exit(missing, 1)
    assert "no count table at" in missing.stderr and "--from" in missing.stderr
    short = tmp_path / "short"
    (short / "palago").mkdir(parents=True)
    pq.write_table(
        pq.read_table(REPO / "results" / "palago" / "creature_counts.parquet")
        .slice(0, 10)
        .replace_schema_metadata(None),
        short / "palago" / "creature_counts.parquet",
    )
    too_short = growth("--from", str(short))
    assert_exit(too_short, 1)
    assert "fixed series" in too_short.stderr and "nonzero terms" in too_short.stderr


# ------------------------------------------------------------------------- predicting the next terms

PREDICTED = 4  # terms predicted at a time, as docs/palago_growth.md states them


def longest_table():
    lengths = committed_lengths()
    return pq.read_table(REPO / max(lengths, key=lengths.get) / "palago" / "creature_counts.parquet")


@pytest.mark.parametrize("held_back", [1, 2, 3])
def test_predicting_counted_terms_lands_inside_the_error_bars(held_back):
    # the committed table's last 4, 8, 12 terms held back (n <= 52 predicts a(53..56) first): the
    # rule of docs/palago_growth.md, computed here, must cover the counts it did not see
    table = longest_table()
    fixed, free = series_of(table, "fixed"), series_of(table, "free")
    last = len(fixed) - 1 - PREDICTED * held_back
    predictions = joint_predictions(fixed[: last + 1], free[: last + 1], PREDICTED)
    for column, series in (("fixed", fixed), ("free", free)):
        assert [p.n for p in predictions[column]] == list(range(last + 1, last + 1 + PREDICTED))
        for prediction in predictions[column]:
            assert prediction.value.covers(series[prediction.n]), (column, prediction)
            assert prediction.relative_spread < 1e-3, prediction  # a bar that says something


def test_joint_bars_cover_both_series_predictions():
    # free(n) is fixed(n)/6 but for the symmetric creatures: each joint bar reaches the other's estimate
    table = longest_table()
    fixed, free = series_of(table, "fixed"), series_of(table, "free")
    predictions = joint_predictions(fixed, free, PREDICTED)
    for one, other in zip(predictions["fixed"], predictions["free"]):
        scaled = one.value.estimate * free[-1] / fixed[-1]
        assert abs(other.value.estimate - scaled) <= other.value.spread
        assert one.relative_spread == pytest.approx(other.relative_spread, rel=1e-12)


def test_cli_predicts_both_series(tmp_path):
    source = tmp_path / "run"
    (source / "palago").mkdir(parents=True)
    shutil.copy(REPO / "results" / "extended" / "palago" / "creature_counts.parquet", source / "palago")
    result = growth("--from", str(source), "--json", "--predict", "2")
    assert_exit(result, 0)
    document = json.loads(result.stdout)
    table = pq.read_table(source / "palago" / "creature_counts.parquet")
    expected = joint_predictions(series_of(table, "fixed"), series_of(table, "free"), 2)
    for part, column in ((document, "fixed"), (document["free"], "free")):
        assert part["predictions"] == [prediction_json(p) for p in expected[column]]
    # n <= 26 gives no second-order approximant, so no backtest: the bar is unbounded, null in JSON
    assert document["predictions"][0]["spread"] is None and document["predictions"][0]["backtest_error"] is None


@pytest.mark.parametrize(
    "up_to, first",
    [(52, (53, "+9.0e-07", "0.22")), (56, (57, "-1.7e-07", "0.09"))],
    ids=["a53-a56", "a57-a60"],
)
def test_cli_up_to_n_prints_the_documented_check_of_the_next_four(up_to, first):
    # docs/palago_growth.md's record of the bars: from n <= 52, a(53) of the fixed series was
    # predicted +9.0e-7 off, 0.22 of its bar; from n <= 56 (the prediction made before the n = 60
    # run), a(57) -1.7e-7 off, 0.09 of it.  The command gives those tables from the committed one
    result = growth("--from", str(REPO / "results" / "transfer"), "--up-to", str(up_to), "--predict", "4", "--json")
    assert_exit(result, 0)
    document = json.loads(result.stdout)
    table = pq.read_table(REPO / "results" / "transfer" / "palago" / "creature_counts.parquet")
    fixed, free = series_of(table, "fixed"), series_of(table, "free")
    expected = joint_predictions(fixed[: up_to + 1], free[: up_to + 1], 4)
    for part, column, series in ((document, "fixed", fixed), (document["free"], "free", free)):
        assert part["predictions"] == [prediction_json(p, series[p.n]) for p in expected[column]]
        assert all(shown["error_over_bar"] < 1 for shown in part["predictions"])  # every term inside its bar
    shown = document["predictions"][0]
    assert (shown["n"], f"{shown['error']:+.1e}", f"{shown['error_over_bar']:.2f}") == first
