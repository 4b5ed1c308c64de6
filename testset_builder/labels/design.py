"""The review design: which pending pairs humans review, and with what inclusion probability.

1. **Take-all.** Each real query's pending pairs the estimate calls likely relevant (p_i >= :data:`LIKELY_RELEVANT`),
   a few a query and at most a share of the budget, get pi_i = 1 (:func:`take_all`). A draw alone can miss them all:
   with a small budget over a large pool every pi_i is small. Taken for sure, they give each real query its labels.
   A pair whose chunk is page furniture (:mod:`~testset_builder.corpus.boilerplate`) is never taken for sure.
2. **Poisson sample.** Every other pending pair is drawn independently with probability

       pi_i = min(1, u + c * w_i),   w_i = p_i (1 + 1 / log2(1 + r_i))

   (p_i: the pair's estimated P(relevant), 0 for a furniture chunk, which so gets only the even share; r_i: its best
   rank by the tool's retrievers or a pooled system; see :func:`review_weights`), where ``u`` spreads
   ``uniform_share`` of the rest of the budget evenly (so no pi_i is 0) and ``c`` makes sum(pi_i) equal that rest.

Each considered pair records its pi_i and stratum, drawn or not: estimates from the verdicts weighted by 1 / pi_i
(Horvitz-Thompson, and the difference estimator of :mod:`~testset_builder.metrics.ppi` on top of it) stay unbiased
however uneven the draw (Särndal, Swensson and Wretman 1992, ch. 3; Zrnic and Candès 2024).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Draw:
    """One pair's part in a round: whether it was drawn and with what probability."""

    index: int
    drawn: bool
    probability: float


def inclusion_probabilities(
    p_relevant: Sequence[float], budget: float, uniform_share: float = 0.2, best_ranks: Sequence[float] | None = None
) -> np.ndarray:
    """pi_i as in the module docstring; sum(pi) equals ``budget`` (all ones when the budget covers every pair).
    The weights are :func:`review_weights`'s, with ``best_ranks`` each pair's best rank by any of the tool's
    retrievers (without them, every pair ranked alike: weights in proportion to p)."""
    p = np.clip(np.asarray(p_relevant, dtype=float), 0.0, 1.0)
    weights = review_weights(p, np.ones_like(p) if best_ranks is None else best_ranks)
    return weighted_inclusion_probabilities(weights, budget, uniform_share)


def review_weights(p_relevant: Sequence[float], best_ranks: Sequence[float]) -> np.ndarray:
    """How much reviewing each pair is worth: its estimated chance of being relevant, p, times how much the pair can
    matter to a system's top ranks, 1 + 1 / log2(1 + best rank) (a pair some retriever ranks first counts twice what
    one ranked last does).

    In proportion to p rather than to the label's standard deviation under the estimate, sqrt(p (1 - p)) (Neyman's
    allocation, optimal only if the estimate is calibrated): the draw comes before any verdict, on a corpus the
    estimate has not seen, and relevant pairs are rare and carry every figure (recall and nDCG divide by them)."""
    p = np.clip(np.asarray(p_relevant, dtype=float), 0.0, 1.0)
    ranks = np.maximum(np.asarray(best_ranks, dtype=float), 1.0)
    return p * (1.0 + 1.0 / np.log2(1.0 + ranks))


def weighted_inclusion_probabilities(weights: Sequence[float], budget: float, uniform_share: float = 0.2) -> np.ndarray:
    """pi_i = min(1, u + c w_i) with sum(pi) = ``budget``: ``u`` spreads ``uniform_share`` of the budget evenly (so
    no item is ever impossible), the rest goes by weight (all ones when the budget covers every item)."""
    weights = np.asarray(weights, dtype=float)
    n = len(weights)
    if n == 0:
        return weights
    if budget >= n:
        return np.ones(n)
    if not 0.0 < uniform_share <= 1.0:
        raise ValueError("uniform_share must be in (0, 1]")
    floor = uniform_share * budget / n
    if weights.max() <= 1e-12 or uniform_share == 1.0:
        return np.full(n, budget / n)
    # scaled to a largest weight of 1, and never quite 0: so that some finite c reaches any budget below n (with
    # certain estimates, p = 0 or 1, the rest of the budget spreads over them too)
    weights = np.maximum(weights / weights.max(), 1e-9)

    def total(c: float) -> float:
        return float(np.minimum(1.0, floor + c * weights).sum())

    low, high = 0.0, 1.0
    while total(high) < budget:
        high *= 2.0
    for _ in range(100):  # bisection: total() is continuous and non-decreasing in c
        middle = (low + high) / 2.0
        low, high = (middle, high) if total(middle) < budget else (low, middle)
    return np.minimum(1.0, floor + high * weights)


def draw(probabilities: np.ndarray, seed: int) -> list[Draw]:
    """Poisson sampling: each pair drawn independently with its probability (seeded, so a rerun draws the same)."""
    chance = np.random.default_rng(seed).random(len(probabilities))
    return [Draw(i, bool(u < pi), float(pi)) for i, (u, pi) in enumerate(zip(chance, probabilities))]


def horvitz_thompson_mean(values: Sequence[float], probabilities: Sequence[float], population: int) -> float:
    """The population mean of a quantity observed on the drawn pairs only, each weighted by 1 / pi."""
    values, probabilities = np.asarray(values, dtype=float), np.asarray(probabilities, dtype=float)
    if population <= 0:
        raise ValueError("the population must hold at least one pair")
    return float((values / probabilities).sum() / population)


LIKELY_RELEVANT = 0.5  # the estimate calls the pair likelier relevant than not: its verdict most likely gives a label


TAKE_ALL_PER_QUERY = 3  # enough for a real query's first relevant labels, few enough to leave other queries room


TAKE_ALL_SHARE = 0.5  # the most of the budget taken for sure: the rest is the random draw that corrects the estimate


def take_all(
    query_ids: Sequence[str],
    p: Sequence[float],
    ranks: Sequence[float],
    real: set[str],
    per_query: int,
    limit: int,
    furniture: Sequence[bool] | None = None,
) -> list[int]:
    """The take-all stratum, as indices into the pending pairs: each real query's pairs with p >=
    :data:`LIKELY_RELEVANT`, the likeliest first (a tie to the better rank), at most ``per_query`` of them; at most
    ``limit`` in all, chosen round-robin across queries (every query's likeliest pair, by p, before any second one).
    A pair whose ``furniture`` flag is set (its chunk is page furniture) is never taken."""

    def likeliest(i: int) -> tuple:
        return (-p[i], ranks[i], i)

    eligible = [
        i
        for i, query in enumerate(query_ids)
        if query in real and p[i] >= LIKELY_RELEVANT and not (furniture is not None and furniture[i])
    ]
    by_query: dict[str, list[int]] = {}
    for i in sorted(eligible, key=likeliest):
        by_query.setdefault(query_ids[i], []).append(i)
    turns = [
        sorted((pairs[turn] for pairs in by_query.values() if len(pairs) > turn), key=likeliest)
        for turn in range(per_query)
    ]
    return [i for turn in turns for i in turn][:limit]


@dataclass(frozen=True)
class Split:
    """A round's budget split: the pairs taken for sure, and the random draw over the rest."""

    certain: list[int]  # indices into the pending pairs, probability 1
    rest: list[int]  # the other pending pairs' indices
    probabilities: np.ndarray  # the rest's inclusion probabilities, in its order
    outcome: list[Draw]  # the rest's draw (each index into ``rest``)
    sample_budget: float  # what the draw spent: the budget less the pairs taken for sure, at most the rest

    def inclusion(self) -> np.ndarray:
        """Every pending pair's inclusion probability, in the pending pairs' order (1 for a pair taken for sure)."""
        out = np.ones(len(self.certain) + len(self.rest))
        out[self.rest] = self.probabilities
        return out

    def drawn(self) -> np.ndarray:
        """Whether each pending pair is reviewed: taken for sure, or drawn at random."""
        out = np.zeros(len(self.certain) + len(self.rest), dtype=bool)
        out[self.certain] = True
        out[[self.rest[d.index] for d in self.outcome if d.drawn]] = True
        return out


def split_budget(
    query_ids: Sequence[str],
    p: Sequence[float],
    ranks: Sequence[float],
    real: set[str],
    budget: int,
    *,
    uniform_share: float,
    take_all_share: float,
    per_query: int,
    seed: int,
    furniture: Sequence[bool] | None = None,
) -> Split:
    """The take-all part (:func:`take_all`, at most ``take_all_share`` of ``budget``), then Poisson sampling of the
    other pairs with the rest of the budget (:func:`inclusion_probabilities`), so their probabilities stay known.
    A pair flagged ``furniture`` is never taken for sure and is weighted as if p were 0 in the draw: it keeps the
    even share's probability, known and above 0, so the estimates stay unbiased without spending reviews on it."""
    if not 0.0 <= take_all_share < 1.0:
        raise ValueError("take_all_share must be in [0, 1): the random draw keeps part of the budget")
    certain = take_all(query_ids, p, ranks, real, per_query, int(take_all_share * budget), furniture)
    taken = set(certain)
    rest = [i for i in range(len(query_ids)) if i not in taken]
    left = budget - len(certain)
    weighted_p = [0.0 if furniture is not None and furniture[i] else p[i] for i in rest]
    probabilities = inclusion_probabilities(weighted_p, left, uniform_share, [ranks[i] for i in rest])
    return Split(certain, rest, probabilities, draw(probabilities, seed), float(min(left, len(rest))))


def likely_coverage(query_ids: Sequence[str], p: Sequence[float], real: set[str]) -> tuple[int, int]:
    """Of the real queries among the pending pairs: how many have a likely relevant pair, and how many have none."""
    pending = {q for q in query_ids if q in real}
    likely = {q for q, value in zip(query_ids, p) if q in real and value >= LIKELY_RELEVANT}
    return len(likely), len(pending - likely)


def why_split(taken: int, covered: int, likely_queries: int, sample_budget: float) -> str:
    """One sentence: why the budget split as it did."""
    rest = f"the other {sample_budget:g} of the budget go to the random draw, whose verdicts correct the estimate"
    if not likely_queries:
        return f"No real query has a pending pair the estimate calls likely relevant (P >= {LIKELY_RELEVANT}); {rest}."
    if not taken:
        return f"The take-all share leaves no room to take pairs for sure; {rest}."
    left = likely_queries - covered
    missed = f" ({left} more have one, beyond the take-all share)" if left else ""
    return (
        f"{taken} likely relevant pairs (P >= {LIKELY_RELEVANT}) are reviewed for sure, so {covered} real queries get "
        f"labels{missed}; {rest}."
    )
