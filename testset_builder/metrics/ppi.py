"""Prediction-powered estimates of retrieval metrics: most labels estimated, a few given by humans on pairs drawn
with known probabilities (:mod:`~testset_builder.stages.selection`).

Each pooled pair i of query q has an estimate p_i = P(relevant) and, if the draw took it (with probability pi_i), a
human grade g_i in {0, 1, 2}, relevant (y_i = 1) from 1 on. The figure is the mean of a per-query metric over the
queries. Precision, recall and DCG (which ``score`` does not offer) count relevant pairs; nDCG's gain is the grade,
as trec_eval's ``ndcg_cut``. The estimate-only nDCG takes the share of grade 2 from the verdicts too: the estimate
says relevant or not, never how much.

- Linear metrics (precision@k, DCG@k): M_q = sum_i c_i y_i over the run's top k (c_i = 1 / k, or 1 / log2(rank + 1)).
  The difference estimator sum_i c_i f_i + sum_{i drawn} c_i (y_i - f_i) / pi_i is unbiased under the draw however
  biased the estimates are (the humans correct them: Horvitz-Thompson on the residual), as long as no f_i depends on
  pair i's own draw. f is the estimate recalibrated as below, which is cross-fitted so: the better it predicts the
  labels, the smaller the residuals. Out of domain it lifted precision@10's coverage on CISI from 0.90 to 0.92 and
  on Cranfield from 0.88 to 0.92 at the same widths (``benchmarks/estimate_transfer.py``).
- Normalised metrics (nDCG@k = DCG@k / IDCG@k(R_q), recall@k = hits@k / R_q, with R_q the query's relevant pairs):
  first the estimates are recalibrated on the drawn verdicts (weighted by 1 / pi): for each fold of queries, one
  log-odds shift and an offset per fifth of the estimate's range, fitted on the other folds' verdicts; then per
  query, an offset of its own, fitted on the verdicts of the other half of its pairs, pulled towards 0 by a normal
  prior whose spread the verdicts choose (:class:`_Calibration`). Then per query, the metric's expectation when each
  label nobody gave is relevant with its recalibrated estimate (independently; certain labels fixed), computed
  exactly (:func:`expected_ratio`); then for each drawn pair, the change its verdict makes to that expectation, over
  its inclusion probability. The expectation is linear in each label's probability and equals the metric on 0/1
  labels, so each verdict's own effect is corrected without bias. For nDCG each relevant pair is of grade 2 with one
  chance s, the share the verdicts drawn at random found (:func:`grade_share`), so the expectation stays exact over
  gains 0, 1 and 2 (:func:`graded_values`) and a verdict's grade, not only its relevance, corrects it; with binary
  gains the figure would aim at another target than the qrels' nDCG. Independent labels give a query the chance
  prod(1 - p_i) of having no relevant pair at all (recall 0), where test sets mostly hold queries that have one:
  the figures weigh, by the drawn verdicts' likelihood, how much of that chance is real (:func:`answerable_weights`,
  :func:`query_outcomes`), and the interval carries the spread between the shares the verdicts leave open. What is
  left is the interaction of several unseen errors within one query, which the recalibration keeps small.
  Measured: plugging the estimates into the ratio instead (dividing by the expected count of relevant pairs) came
  out 0.10-0.14 too high on SciFact, since the mean of 1 / R_q is not 1 / (mean R_q); with one recalibration for
  every query, nDCG@10 came out 0.04-0.09 low for every system on CISI, whose queries hold 1 to 28 relevant pairs
  of about 56 (``benchmarks/estimate_transfer.py``).

Intervals: the estimate +- 1.96 standard errors, the variance by linearisation (the delta method) under Poisson
sampling: sum over drawn pairs of (1 - pi_i) / pi_i^2 z_i^2, z_i being the pair's effect on the figure (its
weighted residual, or the change its verdict makes to the query's expected metric), and at least the variance the
draw is expected to have under the recalibrated estimates, summed over every pair whose label is not certain
(:func:`_expected_variance`, with each label's exact slope, :func:`ratio_slopes`). No figure or limit leaves the
metric's range. The human-only figure uses the labels alone (p = 0, per-query counts; for precision and DCG with
the same floor on its variance, the draw's expected variance under the recalibrated estimates, so that a draw that
missed a system's relevant pairs does not give it a zero-width interval); for recall and nDCG it has no interval: a
ratio of a query's few weighted verdicts is biased (it covered recall@100 in 0.00-0.25 of simulated draws on four
collections), and where a query holds one relevant verdict its linearised variance is 0, which printed intervals
such as [0.169, 0.169] on SciFact. The estimate-only one uses p alone (no interval). The target is the metric of
*these* queries on complete labels of their pools: the interval covers what labelling every pooled pair would have
given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .._hashing import fold_of

METRICS = ("precision", "dcg", "ndcg", "recall")
FOLDS = 5  # folds of queries for the cross-fitted recalibration
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
    inclusion: float | None = None  # the design's probability of drawing this pair, drawn or not (None: no round)
    grade: int | None = None  # the human grade (0, 1 or 2) behind ``label``, nDCG's gain; None: the label is the gain

    @property
    def gain(self) -> int:
        """nDCG's gain for this pair's label: its grade (trec_eval's linear gain), else the binary label."""
        if self.grade is None:
            return int(self.label or 0)
        if self.grade > 2:
            raise ValueError(
                f"a grade of query {self.query_id} is {self.grade}: prediction-powered nDCG knows grades up to 2 "
                "(the tool's scale); map the collection's grades onto 0, 1, 2 first"
            )
        return max(0, self.grade)  # a negative grade gains nothing, as in trec_eval


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
    labelled: bool  # False for a figure without an interval: estimate-only, or human-only recall and nDCG
    # index -> (inclusion probability, the figure's deviation for each outcome of the label, each outcome's chance):
    # see _expected_variance
    expected: dict[int, tuple[float, tuple[float, ...], tuple[float, ...]]] = field(default_factory=dict)
    # (fold, a) -> (its weight, the fold's queries' part of the figure were a their answerable share): the spread
    # between them is variance too
    by_answerable: dict[tuple[int, float], tuple[float, float]] = field(default_factory=dict)

    def variance(self, other: _Linearised | None = None) -> float:
        """The larger of the design-based variance (from the drawn pairs' influences) and the variance the draw is
        expected to have given the recalibrated estimates (:func:`_expected_variance`): the first alone is smallest
        exactly in the draws that missed the relevant pairs a figure rests on, which is where intervals lied."""
        total = 0.0
        for i, probability in self.probability.items():
            z = self.influence.get(i, 0.0) - (other.influence.get(i, 0.0) if other else 0.0)
            total += (1.0 - probability) / probability**2 * z**2
        return max(total, self._expected(other)) + self._between(other)

    def _between(self, other: _Linearised | None) -> float:
        """The spread of the figure over the answerable shares the verdicts leave open (law of total variance): per
        fold of queries, the deviation of its part of the figure over its shares' weights; the folds' deviations
        are added as if they moved together (they weigh the same unknown), the most they can spread."""
        if not self.by_answerable or (other is not None and set(other.by_answerable) != set(self.by_answerable)):
            return 0.0
        folds: dict[int, list[tuple[float, float]]] = {}
        for (fold, a), (weight, value) in self.by_answerable.items():
            folds.setdefault(fold, []).append((weight, value - (other.by_answerable[(fold, a)][1] if other else 0.0)))
        deviation = 0.0
        for shares in folds.values():
            mean = sum(weight * value for weight, value in shares)
            deviation += math.sqrt(sum(weight * (value - mean) ** 2 for weight, value in shares))
        return deviation**2

    def _expected(self, other: _Linearised | None) -> float:
        total = 0.0
        for i, (probability, deviations, chances) in self.expected.items():
            if other is not None and i in other.expected:
                deviations = tuple(a - b for a, b in zip(deviations, other.expected[i][1]))
            total += (1.0 - probability) / probability * sum(w * d * d for w, d in zip(chances, deviations))
        if other is not None:  # pairs only the other figure depends on
            for i, (probability, deviations, chances) in other.expected.items():
                if i not in self.expected:
                    total += (1.0 - probability) / probability * sum(w * d * d for w, d in zip(chances, deviations))
        return total


def _linearise(pairs: Sequence[PooledPair], metric: str, k: int, use: str) -> _Linearised:
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; prediction-powered estimates know {', '.join(METRICS)}")
    if use not in ("ppi", "human", "estimate"):
        raise ValueError("use is ppi, human or estimate")
    pairs, by_query, labelled = _grouped(pairs)
    if not by_query:
        raise ValueError("no pairs")
    if use == "estimate":
        labelled = []
    for i in labelled:
        _check(pairs[i])
    linear = metric in ("precision", "dcg")
    # an interval: the prediction-powered figure's, and the human-only one of a linear metric (recall's and nDCG's
    # would not be one, see the module), which takes the same floor on its variance from the recalibrated estimates
    # (its own draws that missed the relevant pairs gave it zero-width intervals)
    bounded = use == "ppi" or (use == "human" and linear)
    calibration = _Calibration.of(pairs, by_query, labelled) if use == "ppi" or (bounded and labelled) else None
    by_answerable: dict[tuple[int, float], tuple[float, float]] = {}
    if linear:
        point, influence = _linear(pairs, by_query, labelled, metric, k, use, calibration)
    else:
        point, influence, by_answerable = _ratio(pairs, by_query, labelled, metric, k, use, calibration)
    queries = len(by_query)
    expected = _expected_variance(pairs, by_query, labelled, metric, k, calibration, use) if calibration else {}
    return _Linearised(
        point / queries,
        {i: z / queries for i, z in influence.items()},
        {i: pairs[i].probability for i in labelled},
        bounded,
        {i: (pi, tuple(d / queries for d in deviations), chances) for i, (pi, deviations, chances) in expected.items()},
        {key: (weight, total / queries) for key, (weight, total) in by_answerable.items()},
    )


def _expected_variance(
    pairs, by_query, labelled, metric: str, k: int, calibration: _Calibration, use: str = "ppi"
) -> dict[int, tuple[float, tuple[float, ...], tuple[float, ...]]]:
    """For each pair whose label rests on the draw (not known for sure): its inclusion probability, how far the
    figure would move from what it plugs in for each outcome of the label, and each outcome's chance under the
    recalibrated estimate. Summed as (1 - pi) / pi sum_o chance_o deviation_o^2, that is the Poisson design's
    variance of the figure *expected* under the estimates, whichever pairs this draw took: for a binary label of
    slope c, estimate p and recalibrated q, c^2 (q (1 - q) + (q - p)^2). Recall's and nDCG's deviations are what the
    label moves the query's expected figure by (:func:`ratio_slopes`, :func:`graded_values`), from the same
    recalibrated estimates the figure starts from. A pair no round considered takes the smallest inclusion
    probability of any pair (its error is never corrected: the least a fair interval allows). For the human-only
    figure of a linear metric (``use`` "human") a label's deviation is its whole weight, c^2 q: it plugs in 0."""
    known = [pair.inclusion or pair.probability for pair in pairs if (pair.inclusion or pair.probability)]
    smallest = min(known) if known else None
    if smallest is None:
        return {}
    out = {}
    for query_id, members in by_query.items():
        sure, shifted = calibration.estimates[query_id]
        c = np.array([_weight(metric, pairs[i].rank, k) for i in members])
        if metric in ("recall", "ndcg"):
            base, uncertain, values, chances = query_outcomes(
                metric,
                k,
                shifted,
                sure,
                c,
                [pairs[i] for i in members],
                calibration.share(query_id),
                calibration.mean_answerable(query_id),
            )
            for row, j in enumerate(uncertain):
                deviations = tuple(float(v - base) for v in values[row])
                out[members[j]] = (_probability(pairs[members[j]], smallest), deviations, tuple(chances[row]))
            continue
        for j, i in enumerate(members):  # precision and DCG: slope c, plugged and recalibrated alike
            if sure[j]:
                continue
            q = shifted[j]
            plugged = q if use == "ppi" else 0.0  # the human-only figure plugs in nothing: a label counts in full
            deviations = (float(-c[j] * plugged), float(c[j] * (1.0 - plugged)))  # label 0, label 1
            out[i] = (_probability(pairs[i], smallest), deviations, (1.0 - q, q))
    return out


def _probability(pair: PooledPair, smallest: float) -> float:
    return min(1.0, pair.inclusion or pair.probability or smallest)


def estimate(pairs: Sequence[PooledPair], metric: str, k: int, use: str = "ppi") -> Interval:
    """The mean of ``metric``@``k`` over the queries of ``pairs``: ``use`` = "ppi" (estimates corrected by the
    human labels), "human" (human labels only, weighted by 1 / pi) or "estimate" (estimates only, no interval)."""
    figure = _linearise(pairs, metric, k, use)
    return _interval(figure.point, figure.variance() if figure.labelled else None, _bounds(metric))


def difference(
    pairs_a: Sequence[PooledPair], pairs_b: Sequence[PooledPair], metric: str, k: int, use: str = "ppi"
) -> Interval:
    """The difference of two runs' figures (a minus b) over the same pooled pairs, listed in the same order with
    each run's ranks: paired, so the labels both figures share cancel in its variance."""
    if [(p.query_id, p.p, p.label, p.grade, p.probability, p.inclusion) for p in pairs_a] != [
        (p.query_id, p.p, p.label, p.grade, p.probability, p.inclusion) for p in pairs_b
    ]:
        raise ValueError("a paired difference needs the same pooled pairs, in the same order, for both runs")
    a, b = _linearise(pairs_a, metric, k, use), _linearise(pairs_b, metric, k, use)
    low, high = _bounds(metric)
    inside = lambda point: min(max(point, low), high)  # noqa: E731  (the figures as each run's own are printed)
    return _interval(inside(a.point) - inside(b.point), a.variance(b) if a.labelled else None)


def _certain(pair: PooledPair) -> bool:
    """A label known for sure: given outright (probability 1), not drawn at random."""
    return pair.label is not None and pair.probability is not None and pair.probability >= 1.0


def _linear(
    pairs, by_query, labelled, metric: str, k: int, use: str, calibration: _Calibration | None
) -> tuple[float, dict[int, float]]:
    """Precision and DCG: the difference estimator sum_i c_i f_i + sum_{i drawn} c_i (y_i - f_i) / pi_i, f being 0
    (human-only), the estimate (estimate-only) or, for "ppi", the recalibrated estimate (:class:`_Calibration`).
    Each f_i is cross-fitted (no verdict moves its own pair's f), so the figure stays design-unbiased, and the
    better f predicts the labels, the smaller the residuals the interval rests on."""
    plugged = _plugged(pairs, by_query, calibration) if use == "ppi" else None
    total = sum(_weight(metric, p.rank, k) * _plug(p, i, use, plugged) for i, p in enumerate(pairs))
    influence = {}
    for i in labelled:
        pair = pairs[i]
        residual = _weight(metric, pair.rank, k) * (pair.label - _plug(pair, i, use, plugged))
        total += residual / pair.probability
        influence[i] = residual
    return total, influence


def recalibrated(pairs: Sequence[PooledPair]) -> np.ndarray:
    """Each pair's estimate as the prediction-powered figures plug it in: recalibrated on the verdicts drawn at random
    (:class:`_Calibration`; cross-fitted, so no verdict moved its own pair's value), the label where it is certain."""
    pairs, by_query, labelled = _grouped(pairs)
    return _plugged(pairs, by_query, _Calibration.of(pairs, by_query, labelled))


def assumptions(pairs: Sequence[PooledPair]) -> dict:
    """What the verdicts drawn at random made of the two things the estimate does not say, for a report: the share
    of relevant pairs that are grade 2 (nDCG's gains) and how much of independent labels' chance that a query has
    no relevant pair the verdicts found real (0: all of it, 1: every query has one; the mean over the queries of
    what their folds' weights say), each as the figures use it."""
    pairs, by_query, labelled = _grouped(pairs)
    calibration = _Calibration.of(pairs, by_query, labelled)
    heard = any(calibration.answerable_of(q) != INDEPENDENT for q in by_query)
    answerable = float(np.mean([calibration.mean_answerable(q) for q in by_query])) if heard else None
    return {
        "grade_2_share": round(grade_share(pairs, labelled), 4),
        "answerable": None if answerable is None else round(answerable, 4),
    }


def _grouped(pairs: Sequence[PooledPair]) -> tuple[Sequence[PooledPair], dict[str, list[int]], list[int]]:
    """The pairs, their positions by query, and the positions of the labelled ones."""
    by_query: dict[str, list[int]] = {}
    for i, pair in enumerate(pairs):
        by_query.setdefault(pair.query_id, []).append(i)
    return pairs, by_query, [i for i, pair in enumerate(pairs) if pair.label is not None]


def _plugged(pairs, by_query, calibration: _Calibration) -> np.ndarray:
    """Every pair's recalibrated estimate (its label where it is certain), in the pairs' order."""
    out = np.array([pair.p for pair in pairs], dtype=float)
    for query_id, members in by_query.items():
        out[members] = calibration.estimates[query_id][1]
    return out


def _plug(pair: PooledPair, i: int, use: str, plugged: np.ndarray | None) -> float:
    if use == "human":
        return 0.0
    return float(plugged[i]) if plugged is not None else pair.p


def _ratio(
    pairs, by_query, labelled, metric: str, k: int, use: str, calibration: _Calibration | None
) -> tuple[float, dict[int, float], dict[tuple[int, float], tuple[float, float]]]:
    """Recall and nDCG: per query, the metric's expectation with every label not known drawn from its estimate
    (certain labels fixed; for "ppi" recalibrated, :class:`_Calibration`), plus, for each randomly drawn pair, the
    change its verdict makes to that expectation over its inclusion probability; for "ppi", averaged over how many
    of the queries the estimate would leave without a relevant pair really have one (:func:`answerable_weights`,
    per fold of queries), the figures of each (fold, share) returned too, with its weight. The human-only figure
    counts the labels alone, weighted by 1 / pi."""
    if use == "human":
        total, influence = _ratio_from_labels(pairs, by_query, labelled, metric, k)
        return total, influence, {}
    drawn = set(labelled)
    if calibration is None:  # the estimate-only figure: the grade-2 share of every verdict drawn at random
        overall = grade_share(pairs, [i for i, pair in enumerate(pairs) if pair.label is not None])
    totals: dict[tuple[int, float], float] = {}  # (fold, a) -> its queries' figures were a their answerable share
    weight: dict[tuple[int, float], float] = {}
    influence: dict[int, float] = {}
    for query_id, members in by_query.items():
        fold = fold_of(query_id, FOLDS)
        weights = calibration.answerable_of(query_id) if calibration is not None else INDEPENDENT
        if calibration is not None:
            known, p = calibration.estimates[query_id]
        else:
            known, p = _query_estimates(pairs, members, drawn, _Recalibration())
        c = np.array([_weight(metric, pairs[i].rank, k) for i in members])
        share = calibration.share(query_id) if calibration is not None else overall
        outcomes = {}
        for a, w in weights:
            if a and outcomes and not _mixed(p, known):
                outcomes[a] = outcomes[next(iter(outcomes))]  # the estimate gives this query a relevant pair: as a = 0
            else:
                outcomes[a] = query_outcomes(metric, k, p, known, c, [pairs[i] for i in members], share, a)
            base, uncertain, values, _ = outcomes[a]
            weight[(fold, a)] = w
            total = base
            for row, j in enumerate(uncertain):
                i = members[j]
                if use == "ppi" and i in drawn:
                    change = float(values[row, _outcome(metric, pairs[i])]) - base
                    total += change / pairs[i].probability
                    influence[i] = influence.get(i, 0.0) + w * change
            totals[(fold, a)] = totals.get((fold, a), 0.0) + total
    point = sum(weight[key] * total for key, total in totals.items())
    mixed = calibration is not None and any(len(weights) > 1 for weights in calibration.answerable)
    return point, influence, {key: (weight[key], total) for key, total in totals.items()} if mixed else {}


def _outcome(metric: str, pair: PooledPair) -> int:
    """The column of a label's outcome: the grade for nDCG, relevant or not for recall."""
    return pair.gain if metric == "ndcg" else int(pair.label)


def _mixed(p: np.ndarray, known: Sequence[bool]) -> bool:
    """Whether a query can be left without a relevant pair by its estimates: none is certain, and all its
    uncertain ones may be not relevant (the answerable share then matters to it)."""
    return not any(k and q >= 1.0 for k, q in zip(known, p)) and float(np.prod(1.0 - p)) > 1e-9


def query_outcomes(metric: str, k: int, p: np.ndarray, known, c: np.ndarray, members, share: float, a: float):
    """One query's expected figure and, for each uncertain pair (their positions), the figure with its label fixed
    at each outcome (0 or 1 for recall; grade 0, 1, 2 for nDCG) and each outcome's chance.

    Independent labels (``a`` = 0), or the answerable mixture: with probability alpha = 1 - (1 - a) P0 the query has
    a relevant pair (P0 being the independent labels' chance of none), and then its labels are independent with
    estimates p' (the uncertain ones moved by one log-odds shift) given at least one is relevant, so that the
    expected count of relevant pairs stays the estimates' sum; else it has none. a = 0 is the independent model
    exactly; a = 1 says every such query has a relevant pair. Its figure is alpha E'[M] / (1 - P0'), a relevant
    verdict's value is that under p' alone, and a not-relevant one's is alpha (1 - p'_j) E'[M | y_j = 0] /
    ((1 - P0') P(y_j = 0))."""
    p = np.asarray(p, dtype=float)
    uncertain = [j for j in range(len(p)) if not known[j]]
    mixture = a > 0.0 and bool(uncertain) and _mixed(p, known)
    alpha, q = _answerable(p, uncertain, a) if mixture else (1.0, p)
    qu = q[uncertain]
    if metric == "ndcg":
        fixed = [(c[j], members[j].gain) for j in range(len(p)) if known[j]]
        base, values = graded_values(k, qu, c[uncertain], fixed, share)
        chances = np.column_stack([1.0 - qu, qu * (1.0 - share), qu * share]) if len(qu) else np.zeros((0, 3))
    else:
        base = expected_ratio(metric, k, q, c)
        slopes = ratio_slopes(metric, k, q, c)[uncertain]
        values = np.column_stack([base - qu * slopes, base + (1.0 - qu) * slopes]) if len(qu) else np.zeros((0, 2))
        chances = np.column_stack([1.0 - qu, qu])
    if not mixture:
        return base, uncertain, values, chances
    logs = np.log1p(-np.minimum(qu, 1.0 - 1e-16))
    scale = alpha / _some(logs.sum())
    some_without = np.maximum(-np.expm1(logs.sum() - logs), 1e-300)
    not_relevant = scale * (1.0 - qu) * some_without + (1.0 - alpha)
    values = values.copy()
    values[:, 0] = scale * (1.0 - qu) * values[:, 0] / not_relevant
    chances = np.column_stack([not_relevant, scale * chances[:, 1:]])
    return scale * base, uncertain, values, chances


def _log_none(q: np.ndarray) -> float:
    """log P(no relevant pair) when each is relevant with its own ``q``, independently (a certain one, q = 1, is
    held just below 1 so the logarithm stays finite)."""
    return float(np.log1p(-np.minimum(q, 1.0 - 1e-16)).sum())


def _some(log_none: float) -> float:
    """1 - P(no relevant pair) from log P(no relevant pair), without the cancellation 1 - prod(1 - q) suffers when
    every q is tiny (the mixture's shift can make them so)."""
    return max(-math.expm1(log_none), 1e-300)


def _answerable(p: np.ndarray, uncertain: list[int], a: float) -> tuple[float, np.ndarray]:
    """alpha and p' of :func:`query_outcomes`'s mixture (:func:`_answerable_shift`). Kept for the last few thousand
    queries: every run scored over a pool asks the same."""
    mine = np.asarray(p, dtype=float)[uncertain]
    key = (len(mine), mine.tobytes(), a)
    if key not in _ANSWERABLE_CACHE:
        if len(_ANSWERABLE_CACHE) >= 20_000:
            _ANSWERABLE_CACHE.clear()
        _ANSWERABLE_CACHE[key] = _answerable_shift(mine, a)
    alpha, shifted = _ANSWERABLE_CACHE[key]
    out = np.array(p, dtype=float)
    out[uncertain] = shifted
    return alpha, out


_ANSWERABLE_CACHE: dict[tuple[int, bytes, float], tuple[float, np.ndarray]] = {}


SHIFT_FLOOR = -4.0  # the mixture shrinks a query's odds by at most e^4: below, it would say "exactly one relevant"


def _answerable_shift(p: np.ndarray, a: float) -> tuple[float, np.ndarray]:
    """alpha and the shifted estimates for :func:`_answerable`. The shift keeps the expected count; it is not taken
    below :data:`SHIFT_FLOOR`, where alpha is lowered instead until the count is kept. Unbounded, a query whose sum
    of estimates is below alpha went to "exactly one relevant pair", under which two relevant verdicts in one query
    had a likelihood near 0, and that one query decided a for every other."""
    z = _logits(p)
    total = float(p.sum())
    alpha = 1.0 - (1.0 - a) * float(np.prod(1.0 - p))

    def shifted(delta: float) -> tuple[np.ndarray, float]:
        q = 1.0 / (1.0 + np.exp(-(z + delta)))
        return q, float(q.sum()) / _some(_log_none(q))  # E'[R | R >= 1]

    q, given_some = shifted(SHIFT_FLOOR)
    given_some = max(given_some, 1.0)  # E[R | R >= 1] is at least 1 (all the estimates may underflow to 0)
    if alpha * given_some >= total:
        return min(alpha, total / given_some), q
    low, high = SHIFT_FLOOR, 30.0
    for _ in range(50):
        middle = (low + high) / 2
        q, given_some = shifted(middle)
        low, high = (low, middle) if alpha * given_some > total else (middle, high)
    return alpha, shifted((low + high) / 2)[0]


ANSWERABLE = (0.0, 0.25, 0.5, 0.75, 1.0)  # the shares of the estimate's "no relevant pair" the verdicts weigh
INDEPENDENT = ((0.0, 1.0),)  # the shares' weights without evidence: all on a = 0, labels independent


def answerable_weights(
    pairs, by_query, drawn: set[int], random: list[int], recalibrated: list[_Recalibration], spreads: tuple[float, ...]
) -> tuple[tuple[tuple[float, float], ...], ...]:
    """How far to believe, for each a in :data:`ANSWERABLE`, that a query the estimates might leave without a
    relevant pair has one after all (:func:`query_outcomes`): per fold of queries, the mixing weights of the shares
    that make the *other* folds' randomly drawn verdicts likeliest, under the estimates as that fold's recalibration
    and spread make them (EM: each query is of some share, which one unknown). So no single query can veto a share
    for all the others, and no verdict moves the share its own query's figure is weighed by (cross-fitted, as the
    recalibration is). The independent model (a = 0) gave SciFact's queries, each of which has a relevant pair, a
    chance of about a quarter of having none, so its recall came out 0.2 low; the verdicts seldom tell a from a'
    sharply, and the interval then carries the spread between them."""
    out = []
    for fold in range(FOLDS):
        others = {q: members for q, members in by_query.items() if fold_of(q, FOLDS) != fold}
        calibrate, spread = recalibrated[fold], spreads[fold]
        estimates = {q: _query_estimates(pairs, members, drawn, calibrate, spread) for q, members in others.items()}
        out.append(_mixing_weights(list(_answerable_likelihoods(pairs, others, estimates, random).values())))
    return tuple(out)


def _answerable_likelihoods(pairs, by_query, estimates, random: list[int]) -> dict[str, np.ndarray]:
    """query -> the log-likelihood of its randomly drawn verdicts under each share of :data:`ANSWERABLE`, for every
    query the estimates might leave without a relevant pair and that has a verdict."""
    drawn = set(random)
    rows = {}
    for query_id, members in by_query.items():
        known, p = estimates[query_id]
        if not _mixed(p, known):
            continue
        given = [j for j, i in enumerate(members) if i in drawn and not known[j]]
        if not given:  # alike under every share (its likelihood is 1): no evidence
            continue
        labels = np.array([pairs[members[j]].label for j in given], dtype=float)
        uncertain = [j for j in range(len(members)) if not known[j]]
        rest = sorted(set(uncertain) - set(given))
        all_zero = not labels.any()
        logs = np.zeros(len(ANSWERABLE))
        for slot, a in enumerate(ANSWERABLE):
            alpha, q = (1.0 - float(np.prod(1.0 - p[uncertain])), p) if a == 0.0 else _answerable(p, uncertain, a)
            if all_zero:  # the seen pairs all 0 and some other pair relevant: P(seen 0) P(another relevant)
                seen = float(np.prod(1.0 - q[given])) * _some(_log_none(q[rest]))
            else:
                seen = float(np.prod(np.where(labels == 1, q[given], 1.0 - q[given])))
            likelihood = alpha * seen / _some(_log_none(q[uncertain]))
            likelihood += (1.0 - alpha) * all_zero
            logs[slot] = math.log(max(likelihood, 1e-300))
        rows[query_id] = logs
    return rows


def _mixing_weights(rows: list[np.ndarray]) -> tuple[tuple[float, float], ...]:
    """The shares' mixing weights that make ``rows`` (queries' log-likelihoods per share) likeliest, by EM; the
    independent model alone without any."""
    if not rows:
        return INDEPENDENT
    likelihoods = np.exp(np.array(rows) - np.max(rows, axis=1, keepdims=True))  # each query's, up to a factor
    weights = np.full(len(ANSWERABLE), 1.0 / len(ANSWERABLE))
    for _ in range(200):  # EM for the shares' mixing weights: each query is of one share, which one unknown
        belongs = likelihoods * weights
        belongs /= belongs.sum(axis=1, keepdims=True)
        weights = belongs.mean(axis=0)
    kept = weights > 1e-6
    weights = np.where(kept, weights, 0.0) / weights[kept].sum()
    return tuple((a, float(w)) for a, w, keep in zip(ANSWERABLE, weights, kept) if keep)


@dataclass(frozen=True)
class _Calibration:
    """What the drawn verdicts make of the estimates before a figure uses them: each fold's recalibration
    (:func:`_fold_recalibrations`), the spread of the queries' own offsets (:func:`_query_spread`), and per query
    which labels are certain and every pair's recalibrated estimate (:func:`_query_estimates`). The same for every
    run scored over one pool, so :meth:`of` keeps the last few."""

    spreads: tuple[float, ...]  # per fold of queries: from the other folds' verdicts
    estimates: dict[str, tuple[list[bool], np.ndarray]]
    shares: tuple[float, ...] = (0.0,) * FOLDS  # per fold: a relevant pair's chance of grade 2 (:func:`grade_share`)
    # per fold of queries, (a, weight) for each share a: :func:`answerable_weights`
    answerable: tuple[tuple[tuple[float, float], ...], ...] = (INDEPENDENT,) * FOLDS

    def share(self, query_id: str) -> float:
        return self.shares[fold_of(query_id, FOLDS)]

    def answerable_of(self, query_id: str) -> tuple[tuple[float, float], ...]:
        """The answerable shares' weights a query's figure is weighed by (from the other folds' verdicts)."""
        return self.answerable[fold_of(query_id, FOLDS)]

    def mean_answerable(self, query_id: str) -> float:
        return sum(a * weight for a, weight in self.answerable_of(query_id))

    @staticmethod
    def of(pairs, by_query, labelled) -> _Calibration:
        key = tuple((pair.query_id, pair.p, pair.probability, pair.label, pair.grade) for pair in pairs)
        if key in _CALIBRATIONS:
            return _CALIBRATIONS[key]
        drawn = set(labelled)
        random = [i for i in labelled if not _certain(pairs[i])]
        recalibrated = _fold_recalibrations(pairs, random)
        spreads = tuple(_query_spread(pairs, by_query, drawn, recalibrated, fold) for fold in range(FOLDS))
        estimates = {}
        for query_id, members in by_query.items():
            fold = fold_of(query_id, FOLDS)
            estimates[query_id] = _query_estimates(pairs, members, drawn, recalibrated[fold], spreads[fold])
        calibration = _Calibration(
            spreads,
            estimates,
            _fold_shares(pairs, random),
            answerable_weights(pairs, by_query, drawn, random, recalibrated, spreads),
        )
        if len(_CALIBRATIONS) >= 4:
            _CALIBRATIONS.pop(next(iter(_CALIBRATIONS)))
        _CALIBRATIONS[key] = calibration
        return calibration


_CALIBRATIONS: dict[tuple, _Calibration] = {}  # the last few pools' calibrations (every run over a pool shares one)


SPREADS = (0.25, 0.5, 1.0, 2.0)  # the spreads (sd in log-odds) of the queries' offsets the verdicts choose from


def _query_spread(pairs, by_query, drawn, recalibrated, left_out: int | None = None) -> float:
    """How far queries' own offsets from the recalibrated estimate spread (the sd in log-odds of the normal prior
    :func:`_query_offset` pulls each offset with), chosen from :data:`SPREADS` by the verdicts' marginal likelihood
    (Laplace's approximation, summed over queries): empirical Bayes. Queries whose relevant counts the estimate
    misjudges each in its own way (CISI) choose a wide spread, so each query's verdicts move its estimates; where
    they differ little (SciFact, a relevant pair or two a query) a narrow one keeps a few verdicts from emptying a
    query (with one spread of 1 for all, SciFact's recall@100 intervals covered in 0.64 of cases, with 0.5 CISI's
    nDCG@10 in 0.85). Without the queries of fold ``left_out``: the spread its queries' offsets are pulled with
    comes from the other folds' verdicts, so no verdict moves its own pair's estimate through it."""
    queries = []
    for query_id, members in by_query.items():
        if fold_of(query_id, FOLDS) == left_out:
            continue
        calibrate = recalibrated[fold_of(query_id, FOLDS)]
        given = [i for i in members if i in drawn and not _certain(pairs[i])]
        if given:
            z = _logits([calibrate(pairs[i].p) for i in given])
            y = np.array([pairs[i].label for i in given], dtype=float)
            w = np.array([1.0 / pairs[i].probability for i in given])
            queries.append((z, y, w * (len(w) / w.sum())))
    if not queries:
        return SPREADS[0]

    def evidence(spread: float) -> float:
        total = 0.0
        for z, y, w in queries:
            u = _query_offset(z, y, w, spread)
            q = np.clip(1.0 / (1.0 + np.exp(-(z + u))), 1e-12, 1 - 1e-12)
            fit = float(w @ (y * np.log(q) + (1.0 - y) * np.log(1.0 - q)))
            curvature = float(w @ (q * (1.0 - q)))
            total += fit - u**2 / (2 * spread**2) - 0.5 * math.log(1.0 + spread**2 * curvature)
        return total

    return max(SPREADS, key=evidence)


def _query_estimates(pairs, members, drawn, calibrate, spread: float | None = None) -> tuple[list[bool], np.ndarray]:
    """A query's labels known for sure and each pair's estimate: the label where it is certain; else the fold's
    recalibration, then (given a ``spread``) moved by the query's own offset in log-odds, fitted on the verdicts of the
    *other* half of its pairs (alternate pairs in pool order; :func:`_query_offset`).

    Queries differ in how many of their pairs are relevant (on CISI 1 to 28 of about 56) and the estimate does not
    follow, so a figure that divides by the query's relevant count came out 0.04-0.09 low for every system on nDCG@10
    with one recalibration for all queries. Each half's offset comes from verdicts its own pairs did not give, so a
    verdict's correction is not shrunk by an offset that already absorbed it (fitted on all of the query's verdicts,
    the figure was unbiased but the intervals covered recall@100 in 0.65 of cases on CISI, not 0.95)."""
    known = [i in drawn and _certain(pairs[i]) for i in members]
    p = np.array([float(pairs[i].label) if sure else calibrate(pairs[i].p) for i, sure in zip(members, known)])
    if spread is None:
        return known, p
    z = _logits(p)
    uncertain = ~np.array(known, dtype=bool)
    half = np.arange(len(members)) % 2
    verdicts = np.array([i in drawn and not sure for i, sure in zip(members, known)], dtype=bool)
    for h in (0, 1):
        given = np.flatnonzero(verdicts & (half != h))
        offset = _query_offset(
            z[given],
            np.array([pairs[members[j]].label for j in given], dtype=float),
            np.array([1.0 / pairs[members[j]].probability for j in given]),
            spread,
        )
        mine = uncertain & (half == h)
        p[mine] = 1.0 / (1.0 + np.exp(-(z[mine] + offset)))
    return known, p


def _query_offset(z: np.ndarray, y: np.ndarray, w: np.ndarray, spread: float) -> float:
    """The maximum a posteriori offset u in log-odds for verdicts ``y`` on pairs at log-odds ``z``, weighted by
    1 / pi scaled to the number of verdicts (the design's weights, a verdict's worth of information each), under a
    normal prior of sd ``spread``: the root of sum w (y - sigmoid(z + u)) - u / spread^2. 0 without verdicts."""
    if not len(z):
        return 0.0
    w = w * (len(w) / w.sum())
    u = 0.0
    for _ in range(50):  # Newton's method on a strictly concave objective, steps capped at 2 so it cannot overshoot
        q = 1.0 / (1.0 + np.exp(-(z + u)))
        step = (float(w @ (y - q)) - u / spread**2) / (float(w @ (q * (1.0 - q))) + 1.0 / spread**2)
        u += max(-2.0, min(2.0, step))
        if abs(step) < 1e-10:
            break
    return u


@dataclass(frozen=True)
class _Recalibration:
    """Estimates recalibrated on verdicts: one log-odds shift, then an offset per band of the estimate (bands cut at
    quantiles of its log-odds over every pair), each offset pulled towards the shift by :data:`BAND_PSEUDO`
    verdicts' worth. One shift cannot repair an estimate that is right at the top and confidently wrong further
    down (P about 0.01 on pairs a tenth of which are relevant, where every system's recall reaches); the bands can,
    where the verdicts show it."""

    shift: float = 0.0
    edges: tuple[float, ...] = ()
    offsets: tuple[float, ...] = ()

    def __call__(self, p: float) -> float:
        if p <= 0.0 or p >= 1.0 or (self.shift == 0.0 and not self.offsets):
            return p
        z = math.log(p / (1.0 - p))
        offset = self.offsets[int(np.searchsorted(self.edges, z))] if self.offsets else self.shift
        return 1.0 / (1.0 + math.exp(-(z + offset)))


BANDS = 5
BAND_PSEUDO = 4.0


def _logits(p) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=float), 1e-6, 1 - 1e-6)
    return np.log(p / (1 - p))


def _band_edges(pairs) -> tuple[float, ...]:
    """Cuts of the estimate's log-odds into :data:`BANDS` bands of equal numbers of pairs (all pairs: the design's
    population, not only the drawn)."""
    uncertain = [pair.p for pair in pairs if not _certain(pair)]
    if len(uncertain) < BANDS:
        return ()
    return tuple(float(e) for e in np.unique(np.quantile(_logits(uncertain), np.linspace(0, 1, BANDS + 1)[1:-1])))


def _recalibration(pairs, random: list[int], edges: tuple[float, ...]) -> _Recalibration:
    """The shift (:func:`_calibration_shift`) and each band's offset, from ``random`` verdicts weighted by 1 / pi."""
    shift = _calibration_shift(pairs, random)
    if not random or not edges:
        return _Recalibration(shift)
    z = _logits([pairs[i].p for i in random])
    y = np.array([pairs[i].label for i in random], dtype=float)
    w = np.array([1.0 / pairs[i].probability for i in random])
    band = np.searchsorted(edges, z)
    offsets = []
    for b in range(len(edges) + 1):
        inside = band == b
        if not inside.any():
            offsets.append(shift)
            continue
        pull = BAND_PSEUDO * float(w[inside].mean()) * 0.25  # the information of that many verdicts at p = 1/2

        def excess(delta: float, inside=inside, pull=pull) -> float:
            return float(w[inside] @ (y[inside] - 1.0 / (1.0 + np.exp(-(z[inside] + delta))))) - pull * (delta - shift)

        offsets.append(_root(excess))
    return _Recalibration(shift, edges, tuple(offsets))


def _fold_recalibrations(pairs, random: list[int]) -> list[_Recalibration]:
    """The recalibration of each fold of queries, fitted on the other folds' verdicts only: a verdict that corrects
    a query's expected figure has not moved the estimates that figure started from (cross-fitting; with one shift
    fitted on every verdict, the corrections came out too small, and the intervals too narrow)."""
    edges = _band_edges(pairs)
    folds = [fold_of(pairs[i].query_id, FOLDS) for i in random]
    return [_recalibration(pairs, [i for i, f in zip(random, folds) if f != fold], edges) for fold in range(FOLDS)]


def _root(excess) -> float:
    """The root of a decreasing function on [-20, 20], by bisection."""
    low, high = -20.0, 20.0
    for _ in range(80):
        middle = (low + high) / 2
        if excess(middle) > 0:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def _calibration_shift(pairs, random: list[int]) -> float:
    """The shift in log-odds that makes the estimates agree on average with the randomly drawn verdicts, each
    weighted by 1 / pi (so the agreement is over the whole pool, not the pairs the draw favoured): the
    root of sum w (y - sigmoid(logit p + b)) = 0, by bisection; 0 without verdicts of both kinds."""
    labels = [pairs[i].label for i in random]
    if not random or min(labels) == max(labels):
        return 0.0
    logits = _logits([pairs[i].p for i in random])
    weights = np.array([1.0 / pairs[i].probability for i in random])
    y = np.array(labels, dtype=float)
    return _root(lambda b: float(weights @ (y - 1.0 / (1.0 + np.exp(-(logits + b))))))


def _ratio_from_labels(pairs, by_query, labelled, metric: str, k: int) -> tuple[float, dict[int, float]]:
    """Each query's figure from its labels alone, every count and sum weighted by 1 / pi (nDCG's gains are the
    grades, its ideal DCG that of the estimated counts of grade-2 and grade-1 pairs), linearised for the variance."""
    drawn = set(labelled)
    total, influence = 0.0, {}
    for members in by_query.values():
        mine = [i for i in members if i in drawn]
        if metric == "ndcg":
            d = sum(_weight(metric, pairs[i].rank, k) * pairs[i].gain / pairs[i].probability for i in mine)
            high = sum((pairs[i].gain == 2) / pairs[i].probability for i in mine)
            low = sum((pairs[i].gain == 1) / pairs[i].probability for i in mine)
            ideal = ideal_dcg(high, k) + ideal_dcg(high + low, k)
            if ideal <= 1e-12:
                continue
            by_high = -d * (_ideal_slope(high, k) + _ideal_slope(high + low, k)) / ideal**2
            by_low = -d * _ideal_slope(high + low, k) / ideal**2
            total += d / ideal
            for i in mine:
                gain = pairs[i].gain
                influence[i] = (
                    _weight(metric, pairs[i].rank, k) * gain / ideal + by_high * (gain == 2) + by_low * (gain == 1)
                )
            continue
        d = sum(_weight(metric, pairs[i].rank, k) * pairs[i].label / pairs[i].probability for i in mine)
        r = sum(pairs[i].label / pairs[i].probability for i in mine)
        value, by_d, by_r = _normalised(metric, d, r, k)
        total += value
        for i in mine:
            influence[i] = by_d * _weight(metric, pairs[i].rank, k) * pairs[i].label + by_r * pairs[i].label
    return total, influence


def _fold_shares(pairs, random: list[int]) -> tuple[float, ...]:
    """Each fold's grade-2 share from the other folds' verdicts; the whole pool's where they hold no relevant one."""
    pooled = grade_share(pairs, random)
    out = []
    for fold in range(FOLDS):
        others = [i for i in random if fold_of(pairs[i].query_id, FOLDS) != fold]
        out.append(grade_share(pairs, others) if any(pairs[i].label for i in others) else pooled)
    return tuple(out)


def grade_share(pairs, labelled) -> float:
    """The share of relevant pairs that are highly relevant (grade 2), what nDCG's expected gains rest on: from the
    verdicts among ``labelled`` drawn at random, weighted by 1 / pi (so it is the pool's share, not the draw's); 0
    (every relevant pair a 1, binary gains) when none of them is relevant. Certain labels do not count: a synthetic
    question's source is a 2 by construction, not a sample of the pool."""
    random = [i for i in labelled if pairs[i].label and not _certain(pairs[i])]
    if not random:
        return 0.0
    weights = np.array([1.0 / pairs[i].probability for i in random])
    high = np.array([(pairs[i].grade if pairs[i].grade is not None else 1) >= 2 for i in random], dtype=float)
    return float(weights @ high / weights.sum())


def _binomial(n: int, share: float) -> np.ndarray:
    """Row r, column m: P(M = m) for M ~ Binomial(r, share), r and m from 0 to n (kept for the last few)."""
    key = (n, share)
    if key not in _BINOMIALS:
        table = np.zeros((n + 1, n + 1))
        table[0, 0] = 1.0
        for r in range(1, n + 1):
            table[r, 1:] = table[r - 1, :-1] * share
            table[r, :] += table[r - 1, :] * (1.0 - share)
        if len(_BINOMIALS) >= 64:
            _BINOMIALS.pop(next(iter(_BINOMIALS)))
        _BINOMIALS[key] = table
    return _BINOMIALS[key]


_BINOMIALS: dict[tuple[int, float], np.ndarray] = {}


def _split_ideals(k: int, n: int, share: float, high: int, low: int) -> np.ndarray:
    """psi(r) for r = 0..n: E[1 / IDCG@k] when ``high`` grade-2 and ``low`` grade-1 pairs are certain and r more are
    relevant, each of grade 2 with chance ``share`` independently (so M of them, binomial); 0 where IDCG is 0."""
    steps = np.concatenate([[0.0], np.cumsum(1.0 / np.log2(np.arange(k) + 2))])  # DCG of t ideal gain-1 places
    m = np.arange(n + 1)
    binomial = _binomial(n, share)
    tops = np.minimum(m[None, :] + high, k)  # the grade-2 pairs fill the first places, the grade-1 ones the next
    ends = np.minimum(m[:, None] + high + low, k) + np.zeros((1, n + 1), dtype=int)
    ideal = steps[tops] + steps[ends]  # IDCG = 2 d(tops) + (d(ends) - d(tops))
    inverse = np.divide(1.0, ideal, out=np.zeros_like(ideal), where=ideal > 1e-12)
    return (binomial * inverse).sum(axis=1)


def graded_values(
    k: int, p: np.ndarray, c: np.ndarray, fixed: Sequence[tuple[float, int]], share: float
) -> tuple[float, np.ndarray]:
    """One query's nDCG@k expected under independent labels, and what it becomes when each uncertain pair's grade is
    known: ``p`` the uncertain pairs' P(relevant), ``c`` their discounts (1 / log2(rank + 1) in the run's top k, else
    0), ``fixed`` the (discount, grade) of the pairs whose grade is certain, ``share`` each relevant pair's chance of
    grade 2 (gain 2; else 1). Returns the expectation and a (pairs x 3) array: row j is the expectation with pair j
    of grade 0, 1 and 2; the expectation is sum_g P(g) times that row, for every row, and on certain grades it is
    the metric itself.

    Exact. Given which uncertain pairs are relevant (R of them), their grades are exchangeable, so each relevant
    pair's expected share of the query's figure is its discount times phi(R), phi(R) = (1 - s) psi_{+1}(R - 1) +
    2 s psi_{+2}(R - 1), psi being E[1 / IDCG] over the binomial split of the others (:func:`_split_ideals`), and
    the figure is sum_r E[C 1{R = r}] phi(r) plus the certain pairs' DCG times E[psi(R)]: the Poisson-binomial count
    and its weighted twin (:func:`_count_distribution`). Fixing pair j divides both by its factor
    (:func:`_without_each`) and shifts the certain counts by its grade."""
    p, c = np.asarray(p, dtype=float), np.asarray(c, dtype=float)
    n = len(p)
    fixed_dcg = float(sum(weight * gain for weight, gain in fixed))
    high = sum(gain == 2 for _, gain in fixed)
    low = sum(gain == 1 for _, gain in fixed)
    tables: dict[tuple[int, int], np.ndarray] = {}

    def psi(extra_high: int, extra_low: int) -> np.ndarray:
        key = (extra_high, extra_low)
        if key not in tables:
            tables[key] = _split_ideals(k, n + 1, share, high + extra_high, low + extra_low)
        return tables[key]

    def phi(extra_high: int, extra_low: int) -> np.ndarray:
        """phi(r) for r = 0..n: a relevant pair's expected gain over IDCG when r uncertain pairs are relevant."""
        out = np.zeros(n + 1)
        out[1:] = (1.0 - share) * psi(extra_high, extra_low + 1)[:n] + 2.0 * share * psi(extra_high + 1, extra_low)[:n]
        return out

    dist, weighted = _count_distribution(p, c)
    expectation = fixed_dcg * float(dist @ psi(0, 0)[: n + 1]) + float(weighted @ phi(0, 0))
    if n == 0:
        return expectation, np.zeros((0, 3))
    without, weighted_without = _without_each(dist, p, weighted, c)
    values = np.empty((n, 3))
    for grade, (extra_high, extra_low) in enumerate(((0, 0), (0, 1), (1, 0))):
        values[:, grade] = (fixed_dcg + grade * c) * (without @ psi(extra_high, extra_low)[:n]) + weighted_without @ (
            phi(extra_high, extra_low)[:n]
        )
    return expectation, values


def _count_distribution(p: np.ndarray, c: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """The distribution of the number of relevant pairs when each is relevant with its own probability (Poisson
    binomial): entry r is P(R = r); with weights ``c``, also its weighted twin, entry r being E[C 1{R = r}] with
    C = sum_i c_i y_i."""
    dist = np.zeros(len(p) + 1)
    dist[0] = 1.0
    weighted = None if c is None else np.zeros(len(p) + 1)
    for i, q in enumerate(p):
        if weighted is not None:
            weighted[1:] = weighted[1:] * (1.0 - q) + (weighted[:-1] + c[i] * dist[:-1]) * q
            weighted[0] *= 1.0 - q
        dist[1:] = dist[1:] * (1.0 - q) + dist[:-1] * q
        dist[0] *= 1.0 - q
    return dist, weighted


def _without_each(
    dist: np.ndarray, q: np.ndarray, weighted: np.ndarray | None = None, c: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray | None]:
    """The count's distribution with each pair in turn taken out (row i: without the pair relevant with probability
    ``q[i]``): the division of the generating polynomial by (1 - q + q z), for every pair at once, each run from the
    end whose divisor is at least 1/2, so errors shrink. Given the weighted twin (:func:`_count_distribution`) and
    the pairs' weights ``c``, that too without each pair."""
    n = len(dist) - 1
    out = np.zeros((len(q), n))
    twin = None if weighted is None else np.zeros((len(q), n))
    low = q <= 0.5
    if low.any():
        ql, carry = q[low], np.zeros(int(low.sum()))
        cl, carried = (None, None) if twin is None else (c[low], np.zeros(int(low.sum())))
        for r in range(n):
            if twin is not None:  # uses the count's entry below r, still in carry
                carried = (weighted[r] - ql * carried - ql * cl * carry) / (1.0 - ql)
                twin[low, r] = carried
            carry = (dist[r] - ql * carry) / (1.0 - ql)
            out[low, r] = carry
    if (~low).any():
        qh, carry = q[~low], np.zeros(int((~low).sum()))
        ch, carried = (None, None) if twin is None else (c[~low], np.zeros(int((~low).sum())))
        for r in range(n - 1, -1, -1):
            carry = (dist[r + 1] - (1.0 - qh) * carry) / qh
            out[~low, r] = carry
            if twin is not None:
                carried = (weighted[r + 1] - (1.0 - qh) * carried) / qh - ch * carry
                twin[~low, r] = carried
    return np.clip(out, 0.0, 1.0), twin


def _inverse_sizes(metric: str, k: int, n: int) -> np.ndarray:
    """1 / N(r) for r = 1..n relevant pairs: N(r) = r (recall) or IDCG@k of r relevant pairs (nDCG)."""
    counts = np.arange(1, n + 1)
    if metric == "recall":
        return 1.0 / counts
    ideal = np.cumsum(1.0 / np.log2(np.arange(k) + 2))
    return 1.0 / ideal[np.minimum(counts, k) - 1]


def expected_ratio(metric: str, k: int, p: np.ndarray, c: np.ndarray) -> float:
    """E[sum_i c_i y_i / N(R)] with y_i independent Bernoulli(p_i) and R = sum_i y_i, N(R) = R (recall) or
    IDCG@k of R relevant pairs (nDCG); 0 when R = 0. Exact: sum_i c_i p_i E[1 / N(1 + R without i)]. On 0/1 labels
    it is the metric itself, and it is linear in each p_i, so revealing one label moves it by a known amount."""
    p, c = np.asarray(p, dtype=float), np.asarray(c, dtype=float)
    dist, _ = _count_distribution(p)
    terms = np.flatnonzero((c > 0) & (p > 0))
    if not len(terms):
        return 0.0
    without, _ = _without_each(dist, p[terms])
    return float((c[terms] * p[terms]) @ (without @ _inverse_sizes(metric, k, len(p))))


def ratio_slopes(metric: str, k: int, p: np.ndarray, c: np.ndarray) -> np.ndarray:
    """What each label moves :func:`expected_ratio` by (its value with that pair relevant minus not relevant),
    exactly, for every pair at once. With C = sum_j c_j y_j and R = sum_j y_j, the figure is E[C f(R)] (f = 1 / N,
    f(0) = 0), so the slope in p_i is c_i E[f(1 + R')] + sum_r G'(r) (f(r + 1) - f(r)), R' being the count without
    pair i and G'(r) = E[C' 1{R' = r}] the same without it: both come from dividing the whole set's distributions by
    pair i's factor (:func:`_without_each`). The linearisation of the ratio at the expected counts it replaces said
    an unseen relevant pair takes all of a query's recall where it has one or two relevant pairs, and that no label
    moves a system that ranks every pooled pair, which left zero-width intervals."""
    p, c = np.asarray(p, dtype=float), np.asarray(c, dtype=float)
    n = len(p)
    if n == 0:
        return np.zeros(0)
    f = np.concatenate([[0.0], _inverse_sizes(metric, k, n)])
    dist, weighted = _count_distribution(p, c)
    without, weighted_without = _without_each(dist, p, weighted, c)
    return c * (without @ f[1:]) + weighted_without @ (f[1:] - f[:-1])


def _bounds(metric: str) -> tuple[float, float]:
    """The range a figure of ``metric`` can take: an estimate or a limit outside it is moved to its edge."""
    return (0.0, math.inf) if metric == "dcg" else (0.0, 1.0)


def _interval(point: float, variance: float | None, bounds: tuple[float, float] = (-math.inf, math.inf)) -> Interval:
    low, high = bounds
    inside = min(max(point, low), high)
    if variance is None:
        return Interval(inside, None, None, None)
    error = math.sqrt(variance)
    lower = min(max(low, point - Z95 * error), inside)  # a point past an edge sits at the edge, inside its interval
    upper = max(min(high, point + Z95 * error), inside)
    return Interval(inside, lower, upper, error)


def exact(labels: Sequence[tuple[str, int | None, int]], metric: str, k: int) -> float:
    """The metric on complete labels, (query, rank, label) for every pooled pair: what the estimates aim at. A label
    is a grade: relevant from 1 on, and nDCG's gain (0, 1 or 2)."""
    pairs = [PooledPair(q, rank, float(label >= 1), 1.0, int(label >= 1), grade=label) for q, rank, label in labels]
    return estimate(pairs, metric, k, "ppi").estimate
