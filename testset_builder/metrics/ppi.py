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


@dataclass(frozen=True)
class _Linearised:
    """A figure and each labelled pair's influence on it (its term in the linearised estimator, already divided by
    the number of queries): the variance of a difference of two figures over the same pairs comes from the
    differences of their influences."""

    point: float
    influence: dict[int, float]  # index in the pairs -> influence
    probability: dict[int, float]  # index in the pairs -> inclusion probability
    labelled: bool  # False for an estimate-only figure (no interval)

    def variance(self, other: _Linearised | None = None) -> float:
        total = 0.0
        for i, probability in self.probability.items():
            z = self.influence.get(i, 0.0) - (other.influence.get(i, 0.0) if other else 0.0)
            total += (1.0 - probability) / probability**2 * z**2
        return total


def _linearise(pairs: Sequence[PooledPair], metric: str, k: int, use: str) -> _Linearised:
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; prediction-powered estimates know {', '.join(METRICS)}")
    if use not in ("ppi", "human", "estimate"):
        raise ValueError("use is ppi, human or estimate")
    by_query: dict[str, list[int]] = {}
    for i, pair in enumerate(pairs):
        by_query.setdefault(pair.query_id, []).append(i)
        if use != "estimate" and pair.label is not None:
            _check(pair)
    if not by_query:
        raise ValueError("no pairs")
    labelled = [] if use == "estimate" else [i for i, pair in enumerate(pairs) if pair.label is not None]
    if metric in ("precision", "dcg"):
        point, influence = _linear(pairs, labelled, metric, k, use)
    else:
        point, influence = _ratio(pairs, by_query, labelled, metric, k, use)
    queries = len(by_query)
    return _Linearised(
        point / queries,
        {i: z / queries for i, z in influence.items()},
        {i: pairs[i].probability for i in labelled},
        use != "estimate",
    )


def estimate(pairs: Sequence[PooledPair], metric: str, k: int, use: str = "ppi") -> Interval:
    """The mean of ``metric``@``k`` over the queries of ``pairs``: ``use`` = "ppi" (estimates corrected by the
    human labels), "human" (human labels only, weighted by 1 / pi) or "estimate" (estimates only, no interval)."""
    figure = _linearise(pairs, metric, k, use)
    return _interval(figure.point, figure.variance() if figure.labelled else None)


def difference(
    pairs_a: Sequence[PooledPair], pairs_b: Sequence[PooledPair], metric: str, k: int, use: str = "ppi"
) -> Interval:
    """The difference of two runs' figures (a minus b) over the same pooled pairs, listed in the same order with
    each run's ranks: paired, so the labels both figures share cancel in its variance."""
    if [(p.query_id, p.label, p.probability) for p in pairs_a] != [
        (p.query_id, p.label, p.probability) for p in pairs_b
    ]:
        raise ValueError("a paired difference needs the same pooled pairs, in the same order, for both runs")
    a, b = _linearise(pairs_a, metric, k, use), _linearise(pairs_b, metric, k, use)
    return _interval(a.point - b.point, a.variance(b) if a.labelled else None)


def _certain(pair: PooledPair) -> bool:
    """A label known for sure: given outright (probability 1), not drawn at random."""
    return pair.label is not None and pair.probability is not None and pair.probability >= 1.0


def _linear(pairs, labelled, metric: str, k: int, use: str) -> tuple[float, dict[int, float]]:
    total = sum(_weight(metric, p.rank, k) * (0.0 if use == "human" else p.p) for p in pairs)
    influence = {}
    for i in labelled:
        pair = pairs[i]
        residual = _weight(metric, pair.rank, k) * (pair.label - (0.0 if use == "human" else pair.p))
        total += residual / pair.probability
        influence[i] = residual
    return total, influence


def _ratio(pairs, by_query, labelled, metric: str, k: int, use: str) -> tuple[float, dict[int, float]]:
    """Pairs with a certain label count it; the others' share of R_q is kappa times their estimates, kappa from the
    pairs drawn at random (certain labels say nothing about how the estimates err on the rest)."""
    drawn = set(labelled)
    random = [i for i in labelled if not _certain(pairs[i])]
    kappa, spread = 1.0, 0.0
    if use == "ppi" and random:
        observed = sum(pairs[i].label / pairs[i].probability for i in random)
        spread = sum(pairs[i].p / pairs[i].probability for i in random)
        kappa = observed / spread if spread > 0 else 1.0
    total, slope_kappa = 0.0, 0.0
    influence: dict[int, float] = {}
    for members in by_query.values():
        base = {i: 0.0 if use == "human" else pairs[i].p for i in members}
        weight = {i: _weight(metric, pairs[i].rank, k) for i in members}
        d = sum(weight[i] * base[i] for i in members)
        d += sum(weight[i] * (pairs[i].label - base[i]) / pairs[i].probability for i in members if i in drawn)
        if use == "human":
            r = sum(pairs[i].label / pairs[i].probability for i in members if i in drawn)
        else:
            known = {i for i in members if i in drawn and _certain(pairs[i])} if use == "ppi" else set()
            unknown = sum(pairs[i].p for i in members if i not in known)
            r = sum(pairs[i].label for i in known) + kappa * unknown
            slope_kappa_q = unknown
        value, by_d, by_r = _normalised(metric, d, r, k)
        total += value
        for i in members:
            if i in drawn:
                share = by_d * weight[i] * (pairs[i].label - base[i])
                influence[i] = share + (by_r * pairs[i].label if use == "human" else 0.0)
        if use == "ppi":
            slope_kappa += by_r * slope_kappa_q
    if use == "ppi" and spread > 0:
        for i in random:
            influence[i] = influence.get(i, 0.0) + slope_kappa * (pairs[i].label - kappa * pairs[i].p) / spread
    return total, influence


def _interval(point: float, variance: float | None) -> Interval:
    if variance is None:
        return Interval(point, None, None, None)
    error = math.sqrt(variance)
    return Interval(point, point - Z95 * error, point + Z95 * error, error)


def exact(labels: Sequence[tuple[str, int | None, int]], metric: str, k: int) -> float:
    """The metric on complete labels, (query, rank, label) for every pooled pair: what the estimates aim at."""
    return estimate([PooledPair(q, rank, float(label)) for q, rank, label in labels], metric, k, "estimate").estimate
