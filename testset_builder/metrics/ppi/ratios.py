"""Per-query metrics as functions of estimated totals, and their gradients for the delta method.

- precision@k = hits@k / k and DCG@k: linear in one total, so their figures are exactly design-unbiased.
- recall@k = H / R: H the relevant pairs in the run's top k, R the query's relevant pairs.
- nDCG@k = D / IDCG(N2, N): D the run's DCG with gain = grade, N2 the query's grade-2 pairs and N all its relevant
  pairs; the ideal ranking puts min(N2, k) twos first, then ones up to k: IDCG = F(N2) + F(N), F(n) the DCG of n
  gain-1 places (linear between whole numbers, flat from k on).

Guards, each stated because each trades a little bias for a denominator that stays meaningful: an estimated count
is never below the relevant (or grade-2) pairs a label confirmed, nor below the hits it is the denominator of; a
query whose estimated count is 0 scores 0 (trec_eval counts such a query as 0 too). Where a guard holds a count
fixed, that count's slope is 0. A query's value is kept in [0, 1]: a noisy total can read below 0 (a drawn
not-relevant pair the estimate rated high subtracts its estimate over pi), and one such query would drag the mean.
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
    """numerator / denominator per query (0 where the denominator is none), kept in [0, 1], and its slopes by each.
    The slopes are the unclipped ratio's: where a query's totals are noisy enough to leave the range, that noise
    still counts in the variance."""
    some = denominator > TINY
    safe = np.where(some, denominator, 1.0)
    value = np.where(some, numerator / safe, 0.0)
    value = np.clip(value, 0.0, 1.0)
    return value, np.where(some, 1.0 / safe, 0.0), np.where(some, -numerator / safe**2, 0.0)


def recall(hits: np.ndarray, relevant: np.ndarray, verified: np.ndarray):
    """recall per query and slopes by (H, R), R held at least max(H, the verified relevant pairs)."""
    floor = np.maximum(np.maximum(hits, 0.0), verified)
    count = np.maximum(relevant, floor)
    value, by_hits, by_count = ratio(hits, count)
    return value, by_hits, np.where(relevant >= floor, by_count, 0.0)


def ndcg(dcg: np.ndarray, high: np.ndarray, relevant: np.ndarray, verified: np.ndarray, verified_high: np.ndarray, k):
    """nDCG per query and slopes by (D, N2, N). N2 held at least the verified grade-2 pairs, N at least N2 and the
    verified relevant pairs."""
    n2 = np.maximum(high, verified_high)
    n = np.maximum(relevant, np.maximum(n2, verified))
    f2, slope2 = ideal_part(n2, k)
    f, slope = ideal_part(n, k)
    value, by_dcg, by_ideal = ratio(dcg, f2 + f)
    n_free = relevant >= np.maximum(n2, verified)
    by_n = np.where(n_free, by_ideal * slope, 0.0)
    # N2 enters F(N2), and F(N) too where it is N's floor; its own guard holds it where that binds
    n2_sets_n = ~n_free & (n2 >= verified)
    by_n2 = np.where(high >= verified_high, by_ideal * (slope2 + n2_sets_n * slope), 0.0)
    return value, by_dcg, by_n2, by_n


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
