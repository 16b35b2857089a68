"""Growth constant and critical exponent of a counting series: the ratio method and differential
approximants (docs/palago_growth.md).

Convention: a(n) ~ C * lam**n * n**(-theta), so the generating function f(x) = sum a(n) x**n is
singular at x_c = 1/lam like (1 - x/x_c)**(theta - 1) (a logarithm when theta = 1: lattice animals
in two dimensions).  Pure arithmetic on Python integers: no files, no Ray.

- Ratio method: r(n) = a(n)/a(n-1) = lam * (1 - theta/n + O(1/n**2)).  A least-squares fit of r(n)
  against 1/n (straight line, and parabola) over windows of the last terms gives lam (the
  intercept) and theta (minus the slope over lam), one estimate per window and degree.
- Differential approximants (Guttmann): polynomials Q_0..Q_K, P of chosen degrees with
  sum_k Q_k(x) D^k f(x) = P(x) + O(x**U), D = x d/dx, Q_K(0) = 1 (with D rather than d/dx, series
  such as Catalan's, whose minimal equation has a zero of Q_K at 0, keep Q_K(0) = 1 possible).  The zero x_c of Q_K nearest the ratio
  estimate is the singularity; the indicial equation there gives the exponent.  Each choice of
  degrees is one approximant.  The linear system is solved exactly over the rationals, so an
  approximant's only rounding is in the roots of Q_K (numpy.roots on floats).

No maintained Python package computes differential approximants; the solver here is a fraction-free
(Bareiss) elimination on integers, which keeps the numbers exact at about 0.05 s per approximant of
45 unknowns (n = 44; 120 approximants of two series in 6.5 s of CPU, measured).
"""

from __future__ import annotations

import itertools
import math
import statistics
from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np

__all__ = ["Approximant", "Summary", "MethodResult", "GrowthAnalysis", "analyse", "ratios",
           "ratio_estimates", "differential_approximant", "differential_approximants", "MIN_TERMS"]

MIN_TERMS = 12  # fewer nonzero terms leave no room for approximants of any depth
RATIO_WINDOWS = (8, 12, 16)  # last ratios per least-squares fit
# Approximants use the deepest systems the series allows: U unknowns for U within DEPTHS of the
# maximum, inhomogeneous part of degree 0..MAX_L, degrees of the Q_k differing by at most one.
DEPTHS = 4
MAX_L = 3
# An approximant whose singularity lies further than this (relative) from the ratio method's is
# defective (a spurious zero of Q_K, or none on the positive axis) and is left out.
ACCEPT = 0.05
_MAD_TO_SIGMA = 1.4826  # the median absolute deviation of a normal sample, in standard deviations


@dataclass(frozen=True)
class Approximant:
    """One estimate: ``lam`` and ``theta``, and what produced it (``label``, e.g. 'K=2 L=1 N=(5,5,6)')."""

    lam: float
    theta: float
    label: str


@dataclass(frozen=True)
class Summary:
    """The median of a method's estimates and their spread: 1.4826 times the median absolute
    deviation, a standard deviation that a few defective approximants do not inflate."""

    estimate: float
    spread: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Summary:
        middle = statistics.median(values)
        return cls(middle, _MAD_TO_SIGMA * statistics.median(abs(v - middle) for v in values))


@dataclass(frozen=True)
class MethodResult:
    """One method's approximants and their summaries."""

    name: str
    approximants: tuple[Approximant, ...]
    lam: Summary | None  # None: no usable approximant
    theta: Summary | None

    @classmethod
    def of(cls, name: str, approximants: Sequence[Approximant]) -> MethodResult:
        if not approximants:
            return cls(name, (), None, None)
        return cls(name, tuple(approximants), Summary.of([a.lam for a in approximants]),
                   Summary.of([a.theta for a in approximants]))


@dataclass(frozen=True)
class GrowthAnalysis:
    """Every method's results.  ``lam`` and ``theta`` are the second-order differential approximants'
    (else the first-order ones', else the ratio method's): a second-order equation has room for a
    confluent correction to the leading singularity, which a first-order one must fake.  On the
    Palago series the first-order approximants settle near lam = 2.957, theta = 0.96, away from the
    second-order ones and the ratio method (docs/palago_growth.md); on the test series with known
    answers the two orders agree."""

    terms: int  # the series' last index n
    ratio: MethodResult
    first_order: MethodResult
    second_order: MethodResult
    lam: Summary
    theta: Summary


def analyse(series: Sequence[int]) -> GrowthAnalysis:
    """Estimate lam and theta of ``series`` (series[n] = a(n), n = 0, 1, ...; integers, leading zeros
    allowed) by the ratio method and differential approximants of orders 1 and 2.

    >>> from math import comb
    >>> result = analyse([comb(2 * n, n) for n in range(30)])  # ~ 4**n / sqrt(pi n)
    >>> round(result.lam.estimate, 6), round(result.theta.estimate, 6)
    (4.0, 0.5)
    """
    series = _checked(series)
    ratio = MethodResult.of("ratio", ratio_estimates(series))
    if ratio.lam is None:
        raise ValueError("the series' ratios a(n)/a(n-1) give no estimate: give more nonzero terms")
    reference = ratio.lam.estimate
    first = MethodResult.of("first_order", differential_approximants(series, 1, reference))
    second = MethodResult.of("second_order", differential_approximants(series, 2, reference))
    best = next(method for method in (second, first, ratio) if method.lam is not None)
    return GrowthAnalysis(len(series) - 1, ratio, first, second, best.lam, best.theta)


def _checked(series: Sequence[int]) -> list[int]:
    values = list(series)
    for n, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"a({n}) = {value!r} is not an integer: give exact counts (Python ints for values "
                             "past int64)")
        if value < 0:
            raise ValueError(f"a({n}) = {value} is negative: counts cannot be")
    values = [int(v) for v in values]
    while values and values[-1] == 0:
        values.pop()
    if sum(1 for v in values if v) < MIN_TERMS:
        raise ValueError(f"the series has {sum(1 for v in values if v)} nonzero terms: growth analysis needs at "
                         f"least {MIN_TERMS}")
    return values


# ---------------------------------------------------------------------------------- ratio method


def ratios(series: Sequence[int]) -> list[tuple[int, float]]:
    """(n, a(n)/a(n-1)) for every n whose a(n-1) and a(n) are both nonzero."""
    return [(n, float(Fraction(series[n], series[n - 1]))) for n in range(1, len(series))
            if series[n] and series[n - 1]]


def ratio_estimates(series: Sequence[int]) -> list[Approximant]:
    """Least-squares fits of r(n) = b0 + b1/n (+ b2/n**2) over the last w ratios, w in RATIO_WINDOWS:
    lam = b0, theta = -b1/b0.  Windows longer than the ratios there are, and parabolas on fewer
    than 12 ratios (too little leverage in 1/n), are skipped."""
    points = ratios(series)
    estimates = []
    for window in RATIO_WINDOWS:
        if window > len(points):
            continue
        tail = points[-window:]
        x = np.array([1.0 / n for n, _ in tail])
        y = np.array([r for _, r in tail])
        for degree in (1, 2):
            if degree == 2 and window < 12:
                continue
            b = np.polynomial.polynomial.polyfit(x, y, degree)
            estimates.append(Approximant(float(b[0]), float(-b[1] / b[0]),
                                         f"ratio fit degree {degree} over n = {tail[0][0]}..{tail[-1][0]}"))
    return estimates


# ------------------------------------------------------------------ differential approximants


def differential_approximants(series: Sequence[int], order: int, lam_reference: float) -> list[Approximant]:
    """Every non-defective approximant of ``order`` (1 or 2) of the deepest kinds the series allows
    (see DEPTHS, MAX_L): those whose singularity lies within ACCEPT of 1/lam_reference."""
    last = len(series) - 1
    most = last + 1  # unknowns: equations x^0..x^(U-1) read a(n) up to n = U - 1
    found = []
    for unknowns in range(most - DEPTHS + 1, most + 1):
        for inhomogeneous in range(MAX_L + 1):
            for degrees in _balanced_degrees(order + 1, unknowns - inhomogeneous - 1 - order):
                result = differential_approximant(series, degrees, inhomogeneous, 1 / lam_reference)
                if result is not None:
                    found.append(result)
    return found


def _balanced_degrees(count: int, total: int) -> list[tuple[int, ...]]:
    """Every tuple of ``count`` degrees >= 1 summing to ``total`` and differing by at most one."""
    low, extra = divmod(total, count)
    if low < 1:
        return []
    if extra == 0:
        return [(low,) * count]
    return sorted({p for p in itertools.permutations((low + 1,) * extra + (low,) * (count - extra))})


def differential_approximant(series: Sequence[int], degrees: Sequence[int], inhomogeneous: int,
                             x_reference: float) -> Approximant | None:
    """The approximant sum_k Q_k D^k f = P (D = x d/dx) with deg Q_k = degrees[k], deg P = inhomogeneous (-1:
    none) and Q_K(0) = 1, K = len(degrees) - 1: its singularity (the positive zero of Q_K nearest
    ``x_reference``) and exponent, or None when the system is inconsistent or the approximant defective.

    At a simple zero x_c of Q_K, f ~ (1 - x/x_c)**(-g) with g = Q_{K-1}(x_c)/(x_c Q_K'(x_c)) - (K - 1)
    (the indicial equation's nonzero root: near x_c, D^k f ~ x_c**k f^(k)), so a(n) ~ lam**n n**(g - 1):
    theta = 1 - g.
    """
    order = len(degrees) - 1
    polys = _solve_approximant([int(v) for v in series], list(degrees), inhomogeneous)
    if polys is None:
        return None
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
    solution: list[Fraction] = [Fraction(0)] * size
    for i in range(len(pivots) - 1, -1, -1):
        column, row = pivots[i], rows[i]
        total = Fraction(row[size]) - sum(row[c] * solution[c] for c in range(column + 1, size))
        solution[column] = total / row[column]
    return solution
