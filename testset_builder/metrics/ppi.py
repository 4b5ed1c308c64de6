"""Prediction-powered estimates of retrieval metrics: most labels estimated, a few given by humans on pairs drawn
with known probabilities (:mod:`~testset_builder.stages.selection`).

Binary relevance, and for now the metrics that are linear in the labels given the run: precision@k and DCG@k. Each
pooled pair i of query q has an estimate p_i = P(relevant) and, if the draw took it (with probability pi_i), a human
label y_i in {0, 1}. Per query the metric is a weighted sum over the run's top k, M_q = sum_i c_i y_i (c_i = 1 / k
for precision, 1 / log2(rank + 1) for DCG), and the figure is the mean over queries. The difference estimator

    M = (1 / Q) [ sum_i c_i p_i + sum_{i drawn} c_i (y_i - p_i) / pi_i ]

is unbiased under the draw however biased the estimates are (the humans correct them: Horvitz-Thompson on the
residual). Under Poisson sampling its variance is (1 / Q^2) sum_i (1 - pi_i) / pi_i (c_i (y_i - p_i))^2, estimated
from the drawn pairs as (1 / Q^2) sum_{i drawn} (1 - pi_i) / pi_i^2 (c_i (y_i - p_i))^2; the interval is the estimate
+- 1.96 standard errors. The human-only figure is the same estimator with p = 0, the estimate-only one uses p alone
(no interval). The target is the metric of *these* queries on complete labels of their pools: the interval covers
what labelling every pooled pair would have given.

Not yet: nDCG and recall, whose per-query normaliser depends on every label of the pool. With a tenth of the pairs
labelled (two or three per query), a per-query ratio of Horvitz-Thompson totals swings wildly (a simulation gave
interval widths in the thousands); they need a design of their own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

METRICS = ("precision", "dcg")
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
    return 1.0 / k if metric == "precision" else 1.0 / math.log2(rank + 1)


def estimate(pairs: Sequence[PooledPair], metric: str, k: int, use: str = "ppi") -> Interval:
    """The mean of ``metric``@``k`` over the queries of ``pairs``: ``use`` = "ppi" (estimates corrected by the
    human labels), "human" (human labels only, weighted by 1 / pi) or "estimate" (estimates only, no interval)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; prediction-powered estimates know {', '.join(METRICS)}")
    if use not in ("ppi", "human", "estimate"):
        raise ValueError("use is ppi, human or estimate")
    queries = len({pair.query_id for pair in pairs})
    if not queries:
        raise ValueError("no pairs")
    total, variance = 0.0, 0.0
    for pair in pairs:
        c = _weight(metric, pair.rank, k)
        base = 0.0 if use == "human" else pair.p
        total += c * base
        if use != "estimate" and pair.label is not None:
            if not pair.probability or not 0.0 < pair.probability <= 1.0:
                raise ValueError(f"a labelled pair of query {pair.query_id} needs its inclusion probability")
            residual = c * (pair.label - base)
            total += residual / pair.probability
            variance += (1.0 - pair.probability) / pair.probability**2 * residual**2
    point = total / queries
    if use == "estimate":
        return Interval(point, None, None, None)
    error = math.sqrt(variance) / queries
    return Interval(point, point - Z95 * error, point + Z95 * error, error)


def exact(labels: Sequence[tuple[str, int | None, int]], metric: str, k: int) -> float:
    """The metric on complete labels, (query, rank, label) for every pooled pair: what the estimates aim at."""
    return estimate([PooledPair(q, rank, float(label)) for q, rank, label in labels], metric, k, "estimate").estimate
