"""The variance of a figure under the review's Poisson design, by linearisation (the delta method).

A figure is the mean over queries of h(T_q^), each T_q^ a difference-estimator total (:mod:`.totals`). To first
order its error is sum_{i drawn} u_i / pi_i, with u_i = (1 / Q) sum_t dh/dT_t a_{t,i} (x_{t,i} - f_{t,i}), the pair's
residual in every total its query's figure uses, weighted by that total's slope. Poisson sampling draws each pair
independently, so the variance is estimated by

    V^ = sum_{i drawn} (1 - pi_i) / pi_i^2 u_i^2

(Särndal, Swensson and Wretman 1992, eq. 5.5.11). A paired difference of two runs over the same draw uses
u_i(a) - u_i(b): the verdicts both figures rest on cancel. Certain labels (pi = 1) add no variance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .pool import Pool

Z95 = 1.959963984540054


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float | None
    high: float | None
    std_error: float | None

    @property
    def width(self) -> float | None:
        return None if self.low is None or self.high is None else self.high - self.low


@dataclass(frozen=True)
class Figure:
    """A figure over the pool's queries: its point (the mean of ``per_query``), each drawn pair's influence u_i, and
    whether it has an interval (the estimate-only figure has none)."""

    pool: Pool
    per_query: np.ndarray
    influence: np.ndarray
    bounded: bool

    @property
    def point(self) -> float:
        return float(self.per_query.mean())

    def variance(self, other: Figure | None = None) -> float:
        """V^ of this figure, or of this figure minus ``other`` (a figure over the same pool)."""
        u = self.influence - (other.influence if other is not None else 0.0)
        pi = self.pool.probability
        terms = np.where(self.pool.sampled, (1.0 - pi) / pi**2 * u**2, 0.0)
        return float(terms.sum())


def within_queries(pool: Pool, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per query, the estimated design covariance of two of its totals from their pairs' residual terms (the
    variance where ``a`` is ``b``): sum over drawn pairs of (1 - pi_i) / pi_i^2 a_i b_i."""
    pi = pool.probability
    terms = np.where(pool.sampled, (1.0 - pi) / pi**2 * a * b, 0.0)
    return np.bincount(pool.query, terms, pool.queries)


def interval(point: float, variance: float | None, bounds: tuple[float, float] = (-math.inf, math.inf)) -> Interval:
    """point +- 1.96 standard errors, the point and both limits kept inside ``bounds``."""
    low, high = bounds
    inside = min(max(point, low), high)
    if variance is None:
        return Interval(inside, None, None, None)
    error = math.sqrt(max(variance, 0.0))
    lower = min(max(low, point - Z95 * error), inside)
    upper = max(min(high, point + Z95 * error), inside)
    return Interval(inside, lower, upper, error)
