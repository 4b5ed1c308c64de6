"""Prediction-powered estimates of retrieval metrics: most labels estimated, a few given by humans on pairs drawn
with known probabilities (:mod:`~testset_builder.stages.selection`).

Binary relevance. Each pooled pair i of query q has an estimate p_i = P(relevant) and, if the draw took it (with
probability pi_i), a human label y_i in {0, 1}. The figure is the mean of a per-query metric over the queries.

- Linear metrics (precision@k, DCG@k): M_q = sum_i c_i y_i over the run's top k (c_i = 1 / k, or 1 / log2(rank + 1)).
  The difference estimator sum_i c_i p_i + sum_{i drawn} c_i (y_i - p_i) / pi_i is unbiased under the draw however
  biased the estimates are (the humans correct them: Horvitz-Thompson on the residual).
- Normalised metrics (nDCG@k = DCG@k / IDCG@k(R_q), recall@k = hits@k / R_q, with R_q the query's relevant pairs):
  the numerator as above; the denominator from R_q = kappa * sum_i p_i with one correction kappa = (sum_{drawn}
  y_i / pi_i) / (sum_{drawn} p_i / pi_i) shared by all queries (a ratio estimator). A per-query Horvitz-Thompson
  count from the two or three labels a query gets swings wildly (interval widths in the thousands in simulation);
  the shared ratio is stable and close to unbiased when the estimates rank queries' relevant counts about right,
  which is the model assumption these two metrics add.

Intervals: the estimate +- 1.96 standard errors, the variance by linearisation (the delta method) under Poisson
sampling: sum over drawn pairs of (1 - pi_i) / pi_i^2 z_i^2, z_i being the pair's residual times the metric's
derivative (and, for normalised metrics, its share in kappa). The human-only figure uses the labels alone (p = 0,
per-query counts); the estimate-only one uses p alone (no interval). The target is the metric of *these* queries on
complete labels of their pools: the interval covers what labelling every pooled pair would have given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

METRICS = ("precision", "dcg", "ndcg", "recall")
Z95 = 1.959963984540054


@dataclass(frozen=True)
class PooledPair:
    """One pooled (query, chunk) pair: its rank in the run (None when not in the run), the estimate, and, when the
    draw took it, the inclusion probability and the human label (0 or 1)."""

    query_id: str
    rank: int | None
    p: float
    probability: float | None = None
    label: int | None = None


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float | None
    high: float | None
    std_error: float | None

    @property
    def width(self) -> float | None:
        return None if self.low is None or self.high is None else self.high - self.low


def _weight(metric: str, rank: int | None, k: int) -> float:
    if rank is None or rank > k:
        return 0.0
    if metric == "precision":
        return 1.0 / k
    return 1.0 if metric == "recall" else 1.0 / math.log2(rank + 1)


def ideal_dcg(relevant: float, k: int) -> float:
    """IDCG@k for ``relevant`` relevant pairs, linear between whole numbers (so that it has a slope)."""
    return sum(min(1.0, max(0.0, relevant - i)) / math.log2(i + 2) for i in range(k))


def _ideal_slope(relevant: float, k: int) -> float:
    whole = math.floor(relevant)
    return 0.0 if relevant < 0 or whole >= k else 1.0 / math.log2(whole + 2)


def _normalised(metric: str, d: float, r: float, k: int) -> tuple[float, float, float]:
    """f(D, R) and its derivatives by D and R (0 where the query has no relevant pair)."""
    if metric == "recall":
        return (0.0, 0.0, 0.0) if r <= 1e-12 else (d / r, 1.0 / r, -d / r**2)
    ideal = ideal_dcg(r, k)
    if ideal <= 1e-12:
        return 0.0, 0.0, 0.0
    return d / ideal, 1.0 / ideal, -d * _ideal_slope(r, k) / ideal**2


def _check(pair: PooledPair) -> None:
    if not pair.probability or not 0.0 < pair.probability <= 1.0:
        raise ValueError(f"a labelled pair of query {pair.query_id} needs its inclusion probability")


def estimate(pairs: Sequence[PooledPair], metric: str, k: int, use: str = "ppi") -> Interval:
    """The mean of ``metric``@``k`` over the queries of ``pairs``: ``use`` = "ppi" (estimates corrected by the
    human labels), "human" (human labels only, weighted by 1 / pi) or "estimate" (estimates only, no interval)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; prediction-powered estimates know {', '.join(METRICS)}")
    if use not in ("ppi", "human", "estimate"):
        raise ValueError("use is ppi, human or estimate")
    by_query: dict[str, list[PooledPair]] = {}
    for pair in pairs:
        by_query.setdefault(pair.query_id, []).append(pair)
        if use != "estimate" and pair.label is not None:
            _check(pair)
    if not by_query:
        raise ValueError("no pairs")
    queries = len(by_query)
    labelled = [pair for pair in pairs if use != "estimate" and pair.label is not None]
    if metric in ("precision", "dcg"):
        return _linear(pairs, labelled, metric, k, use, queries)
    return _ratio(by_query, labelled, metric, k, use, queries)


def _linear(pairs, labelled, metric: str, k: int, use: str, queries: int) -> Interval:
    total = sum(_weight(metric, p.rank, k) * (0.0 if use == "human" else p.p) for p in pairs)
    variance = 0.0
    for pair in labelled:
        residual = _weight(metric, pair.rank, k) * (pair.label - (0.0 if use == "human" else pair.p))
        total += residual / pair.probability
        variance += (1.0 - pair.probability) / pair.probability**2 * residual**2
    return _interval(total / queries, None if use == "estimate" else variance, queries)


def _ratio(by_query, labelled, metric: str, k: int, use: str, queries: int) -> Interval:
    kappa, spread = 1.0, 0.0
    if use == "ppi" and labelled:
        observed = sum(p.label / p.probability for p in labelled)
        spread = sum(p.p / p.probability for p in labelled)
        kappa = observed / spread if spread > 0 else 1.0
    total, slope_kappa = 0.0, 0.0
    influence: dict[int, float] = {}
    drawn = {id(p) for p in labelled}
    for members in by_query.values():
        base = [0.0 if use == "human" else p.p for p in members]
        weight = [_weight(metric, p.rank, k) for p in members]
        d = sum(c * b for c, b in zip(weight, base))
        d += sum(c * (p.label - b) / p.probability for p, c, b in zip(members, weight, base) if id(p) in drawn)
        if use == "human":
            r = sum(p.label / p.probability for p in members if id(p) in drawn)
        else:
            r = kappa * sum(p.p for p in members)
        value, by_d, by_r = _normalised(metric, d, r, k)
        total += value
        for p, c, b in zip(members, weight, base):
            if id(p) in drawn:
                share = by_d * c * (p.label - b) + (by_r * p.label if use == "human" else 0.0)
                influence[id(p)] = influence.get(id(p), 0.0) + share
        if use == "ppi":
            slope_kappa += by_r * sum(p.p for p in members)
    variance = 0.0
    for pair in labelled:
        z = influence.get(id(pair), 0.0)
        if use == "ppi" and spread > 0:
            z += slope_kappa * (pair.label - kappa * pair.p) / spread
        variance += (1.0 - pair.probability) / pair.probability**2 * z**2
    return _interval(total / queries, None if use == "estimate" else variance, queries)


def _interval(point: float, variance: float | None, queries: int) -> Interval:
    if variance is None:
        return Interval(point, None, None, None)
    error = math.sqrt(variance) / queries
    return Interval(point, point - Z95 * error, point + Z95 * error, error)


def exact(labels: Sequence[tuple[str, int | None, int]], metric: str, k: int) -> float:
    """The metric on complete labels, (query, rank, label) for every pooled pair: what the estimates aim at."""
    return estimate([PooledPair(q, rank, float(label)) for q, rank, label in labels], metric, k, "estimate").estimate
