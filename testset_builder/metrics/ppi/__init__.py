"""Prediction-powered figures of retrieval metrics: most labels estimated, some given by humans on pairs drawn with
known probabilities (:mod:`~testset_builder.stages.selection`). ``guides/statistics.md`` states the estimand, the
estimator, its variance and its assumptions; this package follows it:

- :mod:`.pool`: the pairs as arrays, and the predictions plugged in (cross-fitted where they are refitted);
- :mod:`.totals`: each per-query total by the difference estimator, design-unbiased for any prediction;
- :mod:`.ratios`: each metric from its totals (recall and nDCG are ratios), with stated guards;
- :mod:`.variance`: the Poisson design's variance by the delta method, queries summed, and the interval.

The target is the metric of *these* queries on complete labels of their pools: what labelling every pooled pair
would have given (trec_eval's pooling convention: a result outside the pool counts as not relevant).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from . import ratios
from .pool import CALIBRATIONS, FOLDS, USES, Pool, PooledPair, Predictions, grade_shares
from .ratios import ideal_dcg
from .totals import Total, total
from .variance import Z95, Figure, Interval, interval, within_queries

METRICS = ("precision", "dcg", "ndcg", "recall")
CALIBRATION = "none"  # the textbook estimator: the estimates plugged in as given


def figure(pool: Pool, ranks: np.ndarray, metric: str, k: int, use: str = "ppi") -> Figure:
    """One run's figure over ``pool``: ``ranks`` its rank of each pair (inf where it does not hold it), ``use``
    "ppi" (estimates corrected by the drawn verdicts), "human" (the verdicts alone, nothing plugged in) or
    "estimate" (the estimates alone, no interval)."""
    totals = parts(pool, ranks, metric, k, use)
    # a floor biases upwards a total the figure is linear in: precision's hits, DCG and nDCG's DCG stay unfloored.
    # Recall's hits keep theirs: they share most of their pairs with R, and beside a floored R an unfloored H could
    # read far below 0
    floored = [metric == "recall" or (metric == "ndcg" and i > 0) for i in range(len(totals))]
    guarded = [np.maximum(t.per_query, t.verified) if floor else t.per_query for t, floor in zip(totals, floored)]
    value, *slopes = per_query(metric, k, guarded)
    influence = sum(slope[pool.query] * t.residual for slope, t in zip(slopes, totals))
    if metric == "ndcg" and use != "estimate":
        value = _beale_ndcg(pool, k, totals, guarded)
    return Figure(pool, value, influence / pool.queries, use != "estimate")


def _beale_ndcg(pool: Pool, k: int, totals: list[Total], guarded: list[np.ndarray]) -> np.ndarray:
    """nDCG per query by Beale's ratio estimator (:func:`.ratios.beale`) where the ideal DCG is the estimated
    counts' own: its residual term is each pair's residuals in N2 and N weighted by the ideal's slopes. Where a
    guard replaced a count with its bound (what the labels confirm, or 1), the denominator is no longer the noisy
    total Beale's correction is derived for, so the plain ratio stands."""
    dcg, high, relevant = totals
    best, by_high, by_relevant = ratios.ideal(guarded[1], guarded[2], k)
    residual = by_high[pool.query] * high.residual + by_relevant[pool.query] * relevant.residual
    corrected = ratios.beale(
        guarded[0], best, within_queries(pool, residual, residual), within_queries(pool, dcg.residual, residual)
    )
    count = np.maximum(guarded[2], guarded[1])
    bound = (guarded[1] > high.per_query) | (guarded[2] > relevant.per_query) | (guarded[2] < guarded[1])
    bound |= (count > ratios.TINY) & (count < 1)
    return np.where(bound, ratios.ndcg(guarded[0], guarded[1], guarded[2], k)[0], corrected)


def parts(pool: Pool, ranks: np.ndarray, metric: str, k: int, use: str) -> list[Total]:
    """The per-query totals ``metric`` is made of (:mod:`.ratios`), each by the difference estimator."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; prediction-powered estimates know {', '.join(METRICS)}")
    if use not in USES:
        raise ValueError(f"use is one of {', '.join(USES)}")
    predicted, correct = pool.predictions(use), use != "estimate"
    coefficient = ratios.rank_discount(np.asarray(ranks, dtype=float), k, metric)
    ones = np.ones(len(pool))

    def count(observed: np.ndarray, prediction: np.ndarray) -> Total:
        return total(pool, ones, observed, prediction, correct)

    if metric == "ndcg":
        dcg = total(pool, coefficient, pool.gain, predicted.gain, correct)
        return [dcg, count((pool.gain >= 2).astype(float), predicted.high), count(pool.relevant, predicted.relevant)]
    hits = total(pool, coefficient, pool.relevant, predicted.relevant, correct)
    return [hits, count(pool.relevant, predicted.relevant)] if metric == "recall" else [hits]


def per_query(metric: str, k: int, totals: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """Each query's value from its totals, and the value's slope by each total."""
    if metric in ("precision", "dcg"):
        return totals[0], np.ones_like(totals[0])
    if metric == "recall":
        return ratios.recall(*totals)
    return ratios.ndcg(*totals, k)


def estimate(
    pairs: Sequence[PooledPair], metric: str, k: int, use: str = "ppi", calibrate: str = CALIBRATION
) -> Interval:
    """The mean of ``metric``@``k`` over the queries of ``pairs`` (each carrying one run's ranks), with its 95%
    interval (none for ``use`` "estimate")."""
    pool = Pool(pairs, calibrate)
    return of(figure(pool, pool.ranks_of(pairs), metric, k, use), metric)


def of(result: Figure, metric: str) -> Interval:
    """A figure's interval, kept inside the metric's range."""
    return interval(result.point, result.variance() if result.bounded else None, ratios.bounds(metric))


def difference(
    pairs_a: Sequence[PooledPair],
    pairs_b: Sequence[PooledPair],
    metric: str,
    k: int,
    use: str = "ppi",
    calibrate: str = CALIBRATION,
) -> Interval:
    """Run a's figure minus run b's over the same pooled pairs (listed in the same order, each with its run's
    ranks), paired: the verdicts both rest on cancel in the variance."""
    if [(p.query_id, p.p, p.label, p.grade, p.probability) for p in pairs_a] != [
        (p.query_id, p.p, p.label, p.grade, p.probability) for p in pairs_b
    ]:
        raise ValueError("a paired difference needs the same pooled pairs, in the same order, for both runs")
    pool = Pool(pairs_a, calibrate)
    a, b = pool.ranks_of(pairs_a), pool.ranks_of(pairs_b)
    return paired(figure(pool, a, metric, k, use), figure(pool, b, metric, k, use), metric)


def paired(a: Figure, b: Figure, metric: str) -> Interval:
    """a's figure minus b's, each kept inside the metric's range first, with the paired variance."""
    low, high = ratios.bounds(metric)
    point = min(max(a.point, low), high) - min(max(b.point, low), high)
    return interval(point, a.variance(b) if a.bounded else None)


def exact(labels: Sequence[tuple[str, int | None, int]], metric: str, k: int) -> float:
    """The metric on complete labels, (query, rank, grade) for every pooled pair: what the estimates aim at.
    Relevant from grade 1 on; the grade is nDCG's gain."""
    pairs = [PooledPair(q, rank, float(label >= 1), 1.0, int(label >= 1), label) for q, rank, label in labels]
    return estimate(pairs, metric, k, "ppi").estimate


__all__ = [
    "CALIBRATION",
    "CALIBRATIONS",
    "FOLDS",
    "METRICS",
    "Z95",
    "Figure",
    "Interval",
    "Pool",
    "PooledPair",
    "Predictions",
    "difference",
    "estimate",
    "exact",
    "figure",
    "grade_shares",
    "ideal_dcg",
    "interval",
    "of",
    "paired",
]  # fmt: skip
