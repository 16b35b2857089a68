"""Growth constant and critical exponent of any counting series, with error bars that are meant to
cover the true values: the ratio method, differential approximants, and the drift of both as terms
are added (docs/palago_growth.md).

Convention: a(n) ~ C * lam**n * n**(-theta), so the generating function f(x) = sum a(n) x**n is
singular at x_c = 1/lam like (1 - x/x_c)**(theta - 1) (a logarithm when theta = 1: lattice animals
in two dimensions).  Pure arithmetic on Python integers: no files, no Ray.

- Ratio method: r(n) = a(n)/a(n-1) = lam * (1 - theta/n + O(1/n**2)).  A least-squares fit of r(n)
  against 1/n (straight line, and parabola) over windows of the last terms gives lam (the
  intercept) and theta (minus the slope over lam), one estimate per window and degree.
- Differential approximants (Guttmann): polynomials Q_0..Q_K, P of chosen degrees with
  sum_k Q_k(x) D^k f(x) = P(x) + O(x**U), D = x d/dx, Q_K(0) = 1 (with D rather than d/dx, series
  such as Catalan's, whose minimal equation has a zero of Q_K at 0, keep Q_K(0) = 1 possible).  The
  zero x_c of Q_K nearest the ratio estimate is the singularity; the indicial equation there gives
  the exponent.  Each choice of degrees is one approximant.  The linear system is solved exactly
  over the rationals, so an approximant's only rounding is in the roots of Q_K (numpy.roots).
- Error bars: the approximants of one series agree with each other far better than with the true
  value (their corrections to scaling are shared), so the spread is the larger of SCATTER_FACTOR
  times their scatter and DRIFT_FACTOR times the drift of the median when the last fifth of the
  terms is added.  These two factors are the module's only calibration; tests/test_series.py checks
  on three published series, cut at several lengths, that the spread covers the published values.
- Biased estimates: with theta assumed (exactly known, or a hypothesis to test), the ratios
  r(n) * n / (n - theta) converge to lam with an O(1/n**2) error, fitted away the same way.

No maintained Python package computes differential approximants; the solver here is a fraction-free
(Bareiss) elimination on integers, which keeps the numbers exact.
"""

from __future__ import annotations

import itertools
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = [
    "Approximant",
    "Estimate",
    "Stage",
    "MethodResult",
    "GrowthAnalysis",
    "analyse",
    "ratios",
    "ratio_estimates",
    "biased_ratio_estimates",
    "biased_lambda",
    "ExponentCheck",
    "check_exponent",
    "differential_approximant",
    "differential_approximants",
    "Prediction",
    "predict",
    "MIN_TERMS",
    "SCATTER_FACTOR",
    "DRIFT_FACTOR",
]

MIN_TERMS = 12  # fewer nonzero terms leave no room for approximants of any depth
RATIO_WINDOWS = (8, 12, 16)  # last ratios per least-squares fit
# Approximants use the deepest systems the series allows: U unknowns for U within DEPTHS of the
# maximum, inhomogeneous part of degree 0..MAX_L, degrees of the Q_k differing by at most one.
DEPTHS = 4
MAX_L = 3
# The stated rule for defective approximants: one whose Q_K has no simple real zero within ACCEPT
# (relative) of the ratio method's singularity is left out.
ACCEPT = 0.05
_MAD_TO_SIGMA = 1.4826  # the median absolute deviation of a normal sample, in standard deviations
# The error bar: max(SCATTER_FACTOR * scatter, DRIFT_FACTOR * drift), the drift measured between the
# whole series and the series without its last DRIFT_FRACTION of terms (at least MIN_DRIFT_TERMS).
SCATTER_FACTOR = 2.0
DRIFT_FACTOR = 2.0
DRIFT_FRACTION = 1 / 5
MIN_DRIFT_TERMS = 2
# A predicted term is a float: its rounding, and a comparison's with the count, bound its bar below.
ROUNDING = 4 * sys.float_info.epsilon


@dataclass(frozen=True)
class Approximant:
    """One estimate: ``lam`` and ``theta``, and what produced it (``label``, e.g. 'K=2 L=1 N=(5,5,6)')."""

    lam: float
    theta: float
    label: str


@dataclass(frozen=True)
class Estimate:
    """A value and its error bar ``spread`` = max(SCATTER_FACTOR * scatter, DRIFT_FACTOR * drift, and
    for the ratio method the distance to its cruder straight-line fits).

    estimate: the median of a method's approximants on the whole series;
    scatter: 1.4826 times their median absolute deviation (a standard deviation that a few outlying
        approximants do not inflate): how well they agree with each other;
    drift: how far the median moved when the last terms were added: what agreement cannot show.
    """

    estimate: float
    spread: float
    scatter: float
    drift: float

    @classmethod
    def of(cls, values: Sequence[float], earlier: float | None, variant: float | None = None) -> Estimate:
        """The estimate of ``values`` (the approximants on the whole series), ``earlier`` the median
        on the shorter series (None: no shorter series gave one, so the drift is unknown: inf),
        ``variant`` the median of a cruder variant of the method, whose distance from the estimate
        bounds the error from below (None: no such variant)."""
        middle = statistics.median(values)
        scatter = _MAD_TO_SIGMA * statistics.median(abs(v - middle) for v in values)
        drift = math.inf if earlier is None else abs(middle - earlier)
        crude = 0.0 if variant is None else abs(middle - variant)
        return cls(middle, max(SCATTER_FACTOR * scatter, DRIFT_FACTOR * drift, crude), scatter, drift)

    def covers(self, value: float) -> bool:
        return abs(value - self.estimate) <= self.spread


@dataclass(frozen=True)
class Stage:
    """A method's medians on the series cut after a(last): how the estimate drifts with more terms."""

    last: int
    approximants: int
    lam: float | None
    theta: float | None


@dataclass(frozen=True)
class MethodResult:
    """One method's approximants on the whole series, its estimates and their history."""

    name: str
    approximants: tuple[Approximant, ...]
    lam: Estimate | None  # None: no usable approximant
    theta: Estimate | None
    history: tuple[Stage, ...]  # the shorter series first

    @classmethod
    def of(
        cls,
        name: str,
        stages: Sequence[tuple[int, Sequence[Approximant]]],
        crude: Callable[[Approximant], bool] | None = None,
    ) -> MethodResult:
        """From (last index, approximants) per cut of the series, the shorter first.  ``crude`` marks
        the approximants of a cruder variant: the estimate is the others' median, and its distance
        to the crude ones' joins the error bar."""
        is_crude = crude or (lambda approximant: False)
        split = [
            (last, [a for a in found if not is_crude(a)] or list(found), [a for a in found if is_crude(a)])
            for last, found in stages
        ]
        history = tuple(Stage(last, len(kept), _median(kept, "lam"), _median(kept, "theta")) for last, kept, _ in split)
        _, final, rough = split[-1]
        if not final:
            return cls(name, (), None, None, history)
        earlier = history[-2] if len(history) > 1 else None
        lam, theta = (
            Estimate.of(
                [getattr(a, field) for a in final], getattr(earlier, field) if earlier else None, _median(rough, field)
            )
            for field in ("lam", "theta")
        )
        return cls(name, tuple(final), lam, theta, history)

    def estimates(self) -> tuple[Estimate, Estimate]:
        """(lam, theta); ValueError naming the method when it has no usable approximant."""
        if self.lam is None or self.theta is None:
            raise ValueError(f"the {self.name} method has no usable approximant, so no estimate")
        return self.lam, self.theta


def _median(approximants: Sequence[Approximant], field: str) -> float | None:
    return statistics.median(getattr(a, field) for a in approximants) if approximants else None


@dataclass(frozen=True)
class GrowthAnalysis:
    """Every method's results.  ``lam`` and ``theta`` are the second-order differential approximants'
    (else the first-order ones', else the ratio method's): a second-order equation has room for a
    confluent correction to the leading singularity, which a first-order one must fake."""

    terms: int  # the series' last index n
    ratio: MethodResult
    first_order: MethodResult
    second_order: MethodResult
    lam: Estimate
    theta: Estimate
    method: str  # the name of the method behind lam and theta

    def disagreements(self) -> list[str]:
        """Each pair of methods whose error bars on lam or theta do not overlap, in words: then at
        least one of the two bars is too narrow, and the reader should know."""
        methods = [m for m in (self.ratio, self.first_order, self.second_order) if m.lam is not None]
        found = []
        for one, other in itertools.combinations(methods, 2):
            for symbol, a, b in zip(("lambda", "theta"), one.estimates(), other.estimates()):
                if abs(a.estimate - b.estimate) > a.spread + b.spread:
                    found.append(
                        f"{one.name} and {other.name} disagree on {symbol}: {a.estimate:.6g} ± {a.spread:.2g} "
                        f"against {b.estimate:.6g} ± {b.spread:.2g}"
                    )
        return found


def analyse(series: Sequence[int]) -> GrowthAnalysis:
    """Estimate lam and theta of ``series`` (series[n] = a(n), n = 0, 1, ...; integers, leading zeros
    allowed) by the ratio method and differential approximants of orders 1 and 2, each on the whole
    series and without its last fifth, whose difference (the drift) enters the error bar.

    >>> from math import comb
    >>> result = analyse([comb(2 * n, n) for n in range(30)])  # ~ 4**n / sqrt(pi n)
    >>> round(result.lam.estimate, 6), round(result.theta.estimate, 6)
    (4.0, 0.5)
    """
    series = _checked(series)
    cuts = _cuts(series)
    ratio = MethodResult.of("ratio", [(last, ratio_estimates(series[: last + 1])) for last in cuts], _straight_line)
    if ratio.lam is None:
        raise ValueError("the series' ratios a(n)/a(n-1) give no estimate: give more nonzero terms")
    references = {stage.last: stage.lam for stage in ratio.history}

    def approximants(order: int) -> MethodResult:
        def at(last: int) -> list[Approximant]:  # none where the ratio method gave no reference
            reference = references[last]
            return differential_approximants(series[: last + 1], order, reference) if reference else []

        return MethodResult.of(("first_order", "second_order")[order - 1], [(last, at(last)) for last in cuts])

    first, second = approximants(1), approximants(2)
    best = next(method for method in (second, first, ratio) if method.lam is not None)
    return GrowthAnalysis(len(series) - 1, ratio, first, second, *best.estimates(), best.name)


def _straight_line(fit: Approximant) -> bool:
    """A ratio fit of degree 1: it leaves the O(1/n**2) term in its bias, so the parabolas estimate
    and the distance between the two kinds bounds their error."""
    return "degree 1" in fit.label


def _cuts(series: Sequence[int]) -> list[int]:
    """The last indices the series is analysed to: without its last fifth (when what is left still
    has MIN_TERMS nonzero terms), then whole."""
    last = len(series) - 1
    shorter = last - max(MIN_DRIFT_TERMS, round(last * DRIFT_FRACTION))
    if sum(1 for v in series[: shorter + 1] if v) < MIN_TERMS:
        return [last]
    return [shorter, last]


def _checked(series: Sequence[int]) -> list[int]:
    values = list(series)
    for n, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(
                f"a({n}) = {value!r} is not an integer: give exact counts (Python ints for values past int64)"
            )
        if value < 0:
            raise ValueError(f"a({n}) = {value} is negative: counts cannot be")
    values = [int(v) for v in values]
    while values and values[-1] == 0:
        values.pop()
    if sum(1 for v in values if v) < MIN_TERMS:
        raise ValueError(
            f"the series has {sum(1 for v in values if v)} nonzero terms: growth analysis needs at least {MIN_TERMS}"
        )
    return values


# ---------------------------------------------------------------------------------- ratio method


def ratios(series: Sequence[int]) -> list[tuple[int, float]]:
    """(n, a(n)/a(n-1)) for every n whose a(n-1) and a(n) are both nonzero."""
    return [
        (n, float(Fraction(series[n], series[n - 1]))) for n in range(1, len(series)) if series[n] and series[n - 1]
    ]


def ratio_estimates(series: Sequence[int]) -> list[Approximant]:
    """Least-squares fits of r(n) = b0 + b1/n (+ b2/n**2) over the last w ratios, w in RATIO_WINDOWS:
    lam = b0, theta = -b1/b0.  Windows longer than the ratios there are, and parabolas on fewer
    than 12 ratios (too little leverage in 1/n), are skipped."""
    return _window_fits(ratios(series), lambda n, r: r, (1,), lambda b: (b[0], -b[1] / b[0]))


def biased_ratio_estimates(series: Sequence[int], theta: float) -> list[Approximant]:
    """The ratio method with theta assumed: r(n) * n / (n - theta) = lam * (1 + O(1/n**2)), fitted by
    b0 + b2/n**2 (+ b3/n**3) over the last w ratios; lam = b0, theta as given."""
    points = [(n, r) for n, r in ratios(series) if n > theta + 1]
    return _window_fits(points, lambda n, r: r * n / (n - theta), (2,), lambda b: (b[0], theta))


def _window_fits(
    points: list[tuple[int, float]],
    value: Callable[[int, float], float],
    first_power: tuple[int],
    estimate: Callable[[np.ndarray], tuple[float, float]],
) -> list[Approximant]:
    """Fits of value(n, r) = b0 + sum_j b_j / n**j, j from first_power[0] on, one or two powers."""
    (power,) = first_power
    estimates = []
    for window in RATIO_WINDOWS:
        if window > len(points):
            continue
        tail = points[-window:]
        x = np.array([1.0 / n for n, _ in tail])
        y = np.array([value(n, r) for n, r in tail])
        for degree in (1, 2):
            if degree == 2 and window < 12:
                continue
            columns = [np.ones_like(x)] + [x ** (power + j) for j in range(degree)]
            b, *_ = np.linalg.lstsq(np.stack(columns, axis=1), y, rcond=None)
            b = np.array([b[0], *([0.0] * (power - 1)), *b[1:]])  # b[j]: the coefficient of 1/n**j
            lam, theta = estimate(b)
            estimates.append(
                Approximant(float(lam), float(theta), f"ratio fit degree {degree} over n = {tail[0][0]}..{tail[-1][0]}")
            )
    return estimates


@dataclass(frozen=True)
class ExponentCheck:
    """Whether an assumed theta fits the series: the biased lam it implies against the unbiased one."""

    theta: float
    biased: Estimate  # lam with theta assumed
    unbiased: Estimate  # lam from the analysis, theta free

    @property
    def consistent(self) -> bool:
        """The two error bars overlap: the data do not exclude theta."""
        return abs(self.biased.estimate - self.unbiased.estimate) <= self.biased.spread + self.unbiased.spread


def check_exponent(series: Sequence[int], theta: float, analysis: GrowthAnalysis) -> ExponentCheck:
    """Test the hypothesis theta against ``analysis`` (of the same series): a wrong theta biases the
    ratio method's lam away from the one the approximants find with theta free."""
    return ExponentCheck(theta, biased_lambda(series, theta), analysis.lam)


def biased_lambda(series: Sequence[int], theta: float) -> Estimate:
    """lam with theta assumed (biased ratio method), its error bar from the fits' scatter and their
    drift when the last fifth of the terms is added (as for ``analyse``)."""
    series = _checked(series)
    stages = [biased_ratio_estimates(series[: last + 1], theta) for last in _cuts(series)]
    if not stages[-1]:
        raise ValueError("the series' ratios a(n)/a(n-1) give no estimate: give more nonzero terms")
    earlier = _median(stages[0], "lam") if len(stages) > 1 else None
    return Estimate.of([a.lam for a in stages[-1]], earlier)


# ------------------------------------------------------------------ differential approximants


def differential_approximants(series: Sequence[int], order: int, lam_reference: float) -> list[Approximant]:
    """Every non-defective approximant of ``order`` (1 or 2) of the deepest kinds the series allows
    (see DEPTHS, MAX_L): those whose singularity lies within ACCEPT of 1/lam_reference."""
    return [approximant for approximant, _ in _approximant_equations(series, order, lam_reference)]


def _approximant_equations(
    series: Sequence[int], order: int, lam_reference: float
) -> list[tuple[Approximant, list[list[Fraction]]]]:
    """Each non-defective approximant with its equation's Q_0..Q_K, which can also extend the series."""
    last = len(series) - 1
    most = last + 1  # unknowns: equations x^0..x^(U-1) read a(n) up to n = U - 1
    found = []
    for unknowns in range(most - DEPTHS + 1, most + 1):
        for inhomogeneous in range(MAX_L + 1):
            for degrees in _balanced_degrees(order + 1, unknowns - inhomogeneous - 1 - order):
                polys = _solve_approximant([int(v) for v in series], list(degrees), inhomogeneous)
                if polys is None:
                    continue
                result = _singularity(polys, degrees, inhomogeneous, 1 / lam_reference)
                if result is not None:
                    found.append((result, polys))
    return found


def _balanced_degrees(count: int, total: int) -> list[tuple[int, ...]]:
    """Every tuple of ``count`` degrees >= 1 summing to ``total`` and differing by at most one."""
    low, extra = divmod(total, count)
    if low < 1:
        return []
    if extra == 0:
        return [(low,) * count]
    return sorted({p for p in itertools.permutations((low + 1,) * extra + (low,) * (count - extra))})


def differential_approximant(
    series: Sequence[int], degrees: Sequence[int], inhomogeneous: int, x_reference: float
) -> Approximant | None:
    """The approximant sum_k Q_k D^k f = P (D = x d/dx) with deg Q_k = degrees[k], deg P = inhomogeneous (-1:
    none) and Q_K(0) = 1, K = len(degrees) - 1: its singularity (the positive zero of Q_K nearest
    ``x_reference``) and exponent, or None when the system is inconsistent or the approximant defective.

    At a simple zero x_c of Q_K, f ~ (1 - x/x_c)**(-g) with g = Q_{K-1}(x_c)/(x_c Q_K'(x_c)) - (K - 1)
    (the indicial equation's nonzero root: near x_c, D^k f ~ x_c**k f^(k)), so a(n) ~ lam**n n**(g - 1):
    theta = 1 - g.
    """
    polys = _solve_approximant([int(v) for v in series], list(degrees), inhomogeneous)
    return None if polys is None else _singularity(polys, degrees, inhomogeneous, x_reference)


def _singularity(
    polys: list[list[Fraction]], degrees: Sequence[int], inhomogeneous: int, x_reference: float
) -> Approximant | None:
    """The approximant's singularity and exponent from its solved equation (see differential_approximant)."""
    order = len(degrees) - 1
    top = np.array([float(c) for c in polys[order]])
    roots = np.roots(top[::-1])  # numpy wants the highest power first
    real = [r.real for r in roots if r.real > 0 and abs(r.imag) <= 1e-9 * abs(r)]
    if not real:
        return None
    x_c = min(real, key=lambda r: abs(r - x_reference))
    if abs(x_c - x_reference) > ACCEPT * x_reference:
        return None
    derivative = np.polynomial.polynomial.polyval(x_c, np.polynomial.polynomial.polyder(top))
    below = np.polynomial.polynomial.polyval(x_c, np.array([float(c) for c in polys[order - 1]]))
    if derivative == 0 or not math.isfinite(below / derivative):
        return None
    g = below / (x_c * derivative) - (order - 1)
    label = f"K={order} L={inhomogeneous} N=({','.join(map(str, degrees))})"
    return Approximant(float(1 / x_c), float(1 - g), label)


def _solve_approximant(series: list[int], degrees: list[int], inhomogeneous: int) -> list[list[Fraction]] | None:
    """The coefficients of Q_0..Q_K (lowest power first), or None when the system is inconsistent.

    Unknowns: the coefficients of every Q_k but Q_K's constant (fixed at 1), and P's.  Equation m
    says that the coefficient of x^m in sum_k Q_k D^k f - P is 0; [x^i] D^k f = i**k a(i).
    """
    order = len(degrees) - 1
    columns = [(k, j) for k in range(order + 1) for j in range(degrees[k] + 1) if (k, j) != (order, 0)]
    size = len(columns) + inhomogeneous + 1
    if size > len(series):
        raise ValueError(f"an approximant of {size} unknowns needs a(n) up to n = {size - 1}")

    def derivative_coefficient(k: int, i: int) -> int:
        return i**k * series[i] if i >= 0 else 0

    matrix = []
    for m in range(size):
        row = [derivative_coefficient(k, m - j) for k, j in columns]
        row += [-1 if m == j else 0 for j in range(inhomogeneous + 1)]
        row.append(-derivative_coefficient(order, m))  # Q_K's constant 1, moved to the right
        matrix.append(row)
    solution = _solve_exact(matrix)
    if solution is None:
        return None
    polys = [[Fraction(0)] * (d + 1) for d in degrees]
    polys[order][0] = Fraction(1)
    for (k, j), value in zip(columns, solution):
        polys[k][j] = value
    return polys


def _solve_exact(augmented: list[list[int]]) -> list[Fraction] | None:
    """A solution of the square system whose augmented rows are given (integers), by Bareiss'
    fraction-free elimination: every intermediate entry is a minor of the matrix, an integer, so no
    gcd is taken until the back substitution.  A rank-deficient system that is consistent (an
    exactly D-finite series has a whole family of approximants of larger degrees) gets the solution
    whose free unknowns are 0; an inconsistent one gives None."""
    rows = [row[:] for row in augmented]
    size = len(rows)
    previous = 1
    pivots: list[int] = []  # pivots[i]: the column of row i's pivot
    for column in range(size):
        p = len(pivots)
        pivot = next((r for r in range(p, size) if rows[r][column]), None)
        if pivot is None:
            continue  # a free unknown: as if this column were moved past the others
        rows[p], rows[pivot] = rows[pivot], rows[p]
        head = rows[p]
        for r in range(p + 1, size):
            row = rows[r]
            factor = row[column]
            row[column] = 0
            for c in range(column + 1, size + 1):
                row[c] = (row[c] * head[column] - factor * head[c]) // previous
        previous = head[column]
        pivots.append(column)
    if any(rows[r][size] for r in range(len(pivots), size)):
        return None  # 0 = nonzero: inconsistent
    return _back_substitute(rows, pivots, size)


def _back_substitute(rows: list[list[int]], pivots: list[int], size: int) -> list[Fraction]:
    """The solution of the eliminated system, free unknowns 0.  By Cramer's rule every unknown is
    an integer over the last pivot (the determinant of the system the pivots span), so the
    substitution runs on integer numerators, each division exact, and makes one Fraction per
    unknown at the end: half the time of Fractions throughout, the same solution."""
    numerators = [0] * size
    common = rows[len(pivots) - 1][pivots[-1]] if pivots else 1
    for i in range(len(pivots) - 1, -1, -1):
        column, row = pivots[i], rows[i]
        total = row[size] * common - sum(row[c] * numerators[c] for c in range(column + 1, size))
        numerators[column], left = divmod(total, row[column])
        if left:
            raise ArithmeticError(f"an inexact division in the back substitution, unknown {column}: a bug")
    return [Fraction(n, common) for n in numerators]


# --------------------------------------------------------------------- predicting the next terms


@dataclass(frozen=True)
class Prediction:
    """a(n) before it is counted: ``value`` is an Estimate whose estimate is the median over the
    approximants' extensions of the series, scatter their agreement, and drift the error the same
    method made ``count`` terms earlier at the same horizon (the backtest), scaled to a(n); inf when
    the series is too short to backtest.  spread = max(SCATTER_FACTOR * scatter, DRIFT_FACTOR * drift),
    relative to a(n) at least the nearer terms' (the factors are those calibrated for lam and theta,
    not retuned: tests/test_series.py and tests/test_palago_growth.py check coverage)."""

    n: int
    value: Estimate
    approximants: int

    @property
    def relative_spread(self) -> float:
        return self.value.spread / self.value.estimate

    @property
    def backtest_error(self) -> float:
        """The backtest's relative error at this horizon (inf: none)."""
        return self.value.drift / self.value.estimate


def predict(series: Sequence[int], count: int, order: int = 2) -> list[Prediction]:
    """a(N+1)..a(N+count) of ``series`` (a(0)..a(N)) from every approximant of ``order``, each
    equation's recurrence run past the last term; the error bar from the approximants' scatter and
    from a backtest: the same prediction from a(0)..a(N-count), against the terms it predicted
    (and at least the float's rounding, ROUNDING; relative bars never narrow with the horizon).

    >>> from math import comb
    >>> central = [comb(2 * n, n) for n in range(30)]  # a first-order equation: every approximant exact
    >>> [(p.n, round(p.value.estimate / comb(2 * p.n, p.n), 12), p.relative_spread < 1e-15) for p in predict(central, 2)]
    [(30, 1.0, True), (31, 1.0, True)]
    """
    if count < 1:
        raise ValueError(f"predict {count} terms: give at least 1")
    series = _checked(series)
    extensions = _extensions(series, count, order)
    if not extensions:
        raise ValueError(f"no usable approximant of order {order} extends the series: give more nonzero terms")
    errors = _backtest_errors(series, count, order)
    predictions, widest = [], 0.0
    for step, actual_n in enumerate(range(len(series), len(series) + count)):
        values = [extension[step] for extension in extensions]
        middle = statistics.median(values)  # exact (Fractions): terms of 1e30 predicted to 1e-15 need it
        size = abs(float(middle))
        if not size:
            raise ValueError(f"a({actual_n}) is predicted 0: a relative error bar needs a nonzero prediction")
        scatter = _MAD_TO_SIGMA * float(statistics.median(abs(v - middle) for v in values))
        drift = errors[step] * size
        # a term further out is known no better than a nearer one: relative bars never narrow
        widest = max(widest, SCATTER_FACTOR * scatter / size, DRIFT_FACTOR * drift / size, ROUNDING)
        predictions.append(Prediction(actual_n, Estimate(float(middle), widest * size, scatter, drift), len(values)))
    return predictions


def _backtest_errors(series: list[int], count: int, order: int) -> list[float]:
    """|predicted / actual - 1| for the last ``count`` terms predicted without them; inf where the
    shorter series allows no prediction (too few terms, no approximant, or a zero term)."""
    shorter, known = series[: len(series) - count], series[len(series) - count :]
    if sum(1 for v in shorter if v) < MIN_TERMS:
        return [math.inf] * count
    extensions = _extensions(shorter, count, order)
    if not extensions:
        return [math.inf] * count
    medians = [statistics.median(extension[step] for extension in extensions) for step in range(count)]
    return [float(abs(m / actual - 1)) if actual else math.inf for m, actual in zip(medians, known)]


def _extensions(series: list[int], count: int, order: int) -> list[list[Fraction]]:
    """Each approximant's next ``count`` terms (approximants whose recurrence breaks down are left out)."""
    fits = [fit for fit in ratio_estimates(series) if not _straight_line(fit)] or ratio_estimates(series)
    if not fits:
        return []
    reference = statistics.median(fit.lam for fit in fits)
    found = []
    for _, polys in _approximant_equations(series, order, reference):
        extension = _extend(series, polys, count)
        if extension is not None:
            found.append(extension)
    return found


def _extend(series: list[int], polys: list[list[Fraction]], count: int) -> list[Fraction] | None:
    """The next ``count`` terms by the equation's recurrence, exact: the coefficient of x^m in
    sum_k Q_k D^k f = P is sum_k sum_j Q_k[j] (m - j)**k a(m - j) = 0 once m passes deg P (the system
    read every m below len(series) > deg P), solved for a(m); None when a(m)'s coefficient
    sum_k Q_k[0] m**k vanishes."""
    values: list[Fraction | int] = list(series)
    for m in range(len(series), len(series) + count):
        lead = sum(q[0] * m**k for k, q in enumerate(polys))
        if lead == 0:
            return None
        rest = sum(
            q[j] * (m - j) ** k * values[m - j] for k, q in enumerate(polys) for j in range(1, min(len(q), m + 1))
        )
        values.append(-rest / lead)
    return [Fraction(v) for v in values[len(series) :]]
