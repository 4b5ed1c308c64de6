"""Per-query metrics as functions of estimated totals, and their slopes for the delta method.

- precision@k = hits@k / k and DCG@k: linear in one total, so their figures are exactly design-unbiased.
- recall@k = H / R: H the relevant pairs in the run's top k, R the query's relevant pairs.
- nDCG@k = D / IDCG(N2, N): D the run's DCG with gain = grade, N2 the query's grade-2 pairs and N all its relevant
  pairs; the ideal ranking puts min(N2, k) twos first, then ones up to k: IDCG = F(N2) + F(N), F(n) the DCG of n
  gain-1 places (linear between whole numbers, flat from k on).

Guards, each moving an estimate towards what the truth is known to satisfy:

- no count (R, N2, N) and no recall hits total is below what the labels confirm (:mod:`.totals`); precision, DCG
  and nDCG's DCG are left unfloored, so the figures linear in them stay unbiased;
- N is at least N2 (recall's R is not held at least H: a query whose recall is 1 could then only read low);
- a count that is not 0 is at least 1;
- a query whose estimated count is 0 scores 0 (as trec_eval scores it).

A query's value is not clipped to [0, 1]: clipping a noisy, unbiased value biases it (a strong run's queries near
1 would lose their overshoots and keep their undershoots). Only the mean over queries is kept in range.

nDCG's ideal DCG saturates once a query holds k relevant pairs; below that, D / IDCG of noisy totals reads high
(the mean of 1 / x exceeds 1 over the mean of x). :func:`beale` removes that ratio's first-order bias with the
totals' own design variance (Beale 1962; Cochran 1977, section 6.8): no constant is fitted. It applies where the
denominator is the estimated counts' own; where a guard replaced a count with its bound, the plain ratio stands.

The slopes are those of the unguarded ratio at the guarded point: a guard moves the point, it does not remove the
totals' noise from the variance.
"""

from __future__ import annotations

import math

import numpy as np

TINY = 1e-12  # a count or an ideal DCG below this is none


def dcg_steps(k: int) -> np.ndarray:
    """F(n) at n = 0..k: the DCG of n gain-1 places."""
    return np.concatenate([[0.0], np.cumsum(1.0 / np.log2(np.arange(k) + 2.0))])


def ideal_part(n: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """F(n) linear between whole numbers and flat from k on, and its slope."""
    n = np.clip(np.asarray(n, dtype=float), 0.0, float(k))
    whole = np.minimum(np.floor(n).astype(np.int64), k)
    steps = dcg_steps(k)
    slope = np.where(whole < k, 1.0 / np.log2(np.minimum(whole, k - 1) + 2.0), 0.0)
    return steps[whole] + (n - whole) * slope, slope


def ideal_dcg(relevant: float, k: int) -> float:
    """IDCG@k of ``relevant`` gain-1 pairs, linear between whole numbers."""
    return float(ideal_part(np.array([relevant]), k)[0][0])


def ratio(numerator: np.ndarray, denominator: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """numerator / denominator per query (0 where the denominator is none) and the ratio's slopes by each."""
    some = denominator > TINY
    safe = np.where(some, denominator, 1.0)
    value = np.where(some, numerator / safe, 0.0)
    return value, np.where(some, 1.0 / safe, 0.0), np.where(some, -numerator / safe**2, 0.0)


def beale(numerator: np.ndarray, denominator: np.ndarray, variance: np.ndarray, covariance: np.ndarray) -> np.ndarray:
    """Beale's ratio estimator per query: (X Y + C) / (Y^2 + V), with V the estimated design variance of the
    denominator's total Y and C its covariance with the numerator's X. It equals X / Y times
    (1 + C / (X Y)) / (1 + V / Y^2), removing the first-order bias E[X / Y] - E[X] / E[Y]; where Y is known (V = 0)
    it is the plain ratio."""
    some = denominator > TINY
    scale = np.where(some, denominator**2 + variance, 1.0)
    return np.where(some, (numerator * denominator + covariance) / scale, 0.0)


def whole(count: np.ndarray) -> np.ndarray:
    """A count of pairs is 0 or at least 1: an estimate between them is held at 1."""
    return np.where(count > TINY, np.maximum(count, 1.0), count)


def recall(hits: np.ndarray, relevant: np.ndarray):
    """recall per query (R at least 1 where it is not 0) and its slopes by (H, R). R is not held at least H: a
    query whose recall is 1 would then only ever read low."""
    return ratio(hits, whole(relevant))


def ideal(high: np.ndarray, relevant: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """IDCG@k per query from its grade-2 and relevant counts (N held at least N2, and at least 1 where it is not
    0), and its slopes by (N2, N)."""
    n = whole(np.maximum(relevant, high))
    f2, slope2 = ideal_part(high, k)
    f, slope = ideal_part(n, k)
    return f2 + f, slope2 + (relevant < high) * slope, slope


def ndcg(dcg: np.ndarray, high: np.ndarray, relevant: np.ndarray, k: int):
    """nDCG per query and its slopes by (D, N2, N)."""
    best, by_high, by_relevant = ideal(high, relevant, k)
    value, by_dcg, by_ideal = ratio(dcg, best)
    return value, by_dcg, by_ideal * by_high, by_ideal * by_relevant


def rank_discount(ranks: np.ndarray, k: int, metric: str) -> np.ndarray:
    """A run's coefficient of each pair: 1 / k (precision), 1 (recall's hits) or 1 / log2(rank + 1) (DCG, nDCG)
    within its top k, 0 beyond it or where it does not hold the pair."""
    inside = ranks <= k
    if metric == "precision":
        return inside / float(k)
    if metric == "recall":
        return inside.astype(float)
    safe = np.where(inside, ranks, 1.0)
    return np.where(inside, 1.0 / np.log2(safe + 1.0), 0.0)


def bounds(metric: str) -> tuple[float, float]:
    """The range a figure can take: a point or a limit outside it moves to its edge."""
    return (0.0, math.inf) if metric == "dcg" else (0.0, 1.0)
