"""Which pairs humans review: drawn at random with known, never-zero inclusion probabilities.

Reviewing the pairs likeliest to be relevant teaches the figures most (they rest on the relevant pairs, which are
rare), but a set reviewed only there says nothing unbiased about the rest. So the draw is Poisson sampling: each
pending pair is drawn independently with probability

    pi_i = min(1, u + c * w_i),   w_i = p_i (1 + 1 / log2(1 + r_i))

(p_i: the pair's estimated P(relevant); r_i: its best rank by the tool's retrievers; see :func:`review_weights`)

where ``u`` spreads ``uniform_share`` of the budget evenly over all pairs (the uniform slice, and the floor that keeps
every pi_i above zero) and ``c`` is set so that the expected number drawn, sum(pi_i), equals the budget. Each drawn
pair records its pi_i and the round that drew it: an estimate from verdicts weighted by 1/pi_i (Horvitz-Thompson,
and prediction-powered inference on top of it) stays unbiased however uneven the draw (Zrnic and Candès 2024;
Gligorić et al. 2024). Each round draws anew from every pair still unlabelled, with the refitted estimate.
"""

from __future__ import annotations

import math
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
    allocation, which is optimal only if the estimate is calibrated): the draw comes before any verdict, on a corpus
    the estimate has not seen, and relevant pairs are rare and carry every figure (recall and nDCG divide by them).
    With 100 verdicts on a SciFact pool of 2,254 pairs, 65 relevant, Neyman's weights drew 3.8 relevant pairs in
    expectation (the prior's p of 0.14 on the mass of pairs that are not relevant earned them nearly the same
    weight as 0.77 on those that are): a draw that found one put recall@10 at 0.30 [0.06, 0.54] for 0.81. In
    proportion to p they draw 15. Over 12 simulated draws of a tenth of the pool
    (``benchmarks/ppi_simulation.py``, five systems each) nDCG@10's coverage rose from 0.85 to 1.00 on Cranfield,
    0.80 to 0.93 on NPL and 0.92 to 0.98 on CISI, recall@100's from 0.88 to 0.95 on CISI and 0.90 to 0.93 on NPL,
    and precision@10's to 0.95-0.97, most standard errors smaller (recall@100's grew by a quarter to a third on
    Cranfield and NPL: fewer verdicts go to the deep ranks)."""
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


# the workspace ------------------------------------------------------------------------------------------------------


def best_rank(estimate) -> float:
    """A stored estimate's best rank by the tool's retrievers, from its features (log(1 + rank) each)."""
    from .estimate import FEATURES, STORED_LENGTHS

    features = estimate.features
    if len(features) not in STORED_LENGTHS:  # the ranks are among the first features either way
        return 1.0
    return float(min(math.expm1(features[FEATURES.index(name)]) for name in ("bm25_log_rank", "dense_log_rank")))


DRAWN_PRIORITY = 3.0  # above any estimate-driven priority (at most 2), below an audit disagreement (2 + 2)


@dataclass
class SelectionSummary:
    round: int
    considered: int  # pending pairs: every estimated pair no human has labelled
    reconsidered: int  # of them, pairs an earlier round considered and did not draw (their estimate refitted since)
    drawn: int
    budget: float
    uniform_share: float
    smallest_probability: float | None
    model: str

    def as_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


def select_for_review(workspace, budget: int, uniform_share: float = 0.2, seed: int = 0) -> SelectionSummary:
    """Refit the estimate, then draw from every pending pair (no human label yet, whether an earlier round considered
    it or not), with known probabilities (see the module docstring; the weights are :func:`review_weights`'s, from
    the refitted estimate and the pair's best rank by the tool's retrievers or the systems `propose --runs`
    pooled); drawn pairs go to the head of the review queue. Every
    considered pair's probability is recorded, drawn or not: the weights that keep estimates from the verdicts
    unbiased. Each round is a design of its own over its population: a later round draws where the refit now puts
    the relevant pairs, and the labels earlier rounds brought in count as known (see
    :mod:`~testset_builder.metrics.prediction`)."""
    from ..retrieval.pool import RUN_PREFIX
    from ..store import draws as store
    from ..store import estimates as stored_estimates
    from ..store import review as review_store
    from ..store import rows
    from ..store.workspace import utc_timestamp
    from .estimate import estimate_workspace

    if budget < 1:
        raise ValueError("a budget is at least one pair")
    fitted = estimate_workspace(workspace)
    estimates = stored_estimates.estimates(workspace.db)
    with workspace.transaction() as db:
        pending = store.undrawn_pending_pairs(db)
        earlier = set(store.pair_draws(db))
        round_number = store.next_round(db)
        p = [estimates[pair].p_relevant for pair in pending]
        systems = rows.best_ranks_by(db, RUN_PREFIX)  # the systems the set will score rank these pairs too
        ranks = [min(best_rank(estimates[x]), systems.get(x, math.inf)) for x in pending]
        probabilities = inclusion_probabilities(p, budget, uniform_share, ranks)
        outcome = draw(probabilities, seed * 1_000_003 + round_number)
        now = utc_timestamp()
        considered = [
            store.StoredDraw(*pending[d.index], round_number, d.probability, d.drawn, p[d.index], fitted.model["name"])
            for d in outcome
        ]
        store.put_draws(db, considered, now)
        chosen = [d for d in considered if d.drawn]
        reason = f"drawn for review, round {round_number}"
        review_store.enqueue(
            db,
            (
                review_store.QueuedItem(
                    d.item_id,
                    "pair",
                    d.query_id,
                    d.chunk_id,
                    DRAWN_PRIORITY + d.p_relevant * (1 - d.p_relevant),
                    reason,
                    1,
                )
                for d in chosen
            ),
            now,
        )
    return SelectionSummary(
        round_number, len(pending), sum(pair in earlier for pair in pending), len(chosen),
        float(min(budget, len(pending))), uniform_share,
        float(probabilities.min()) if len(pending) else None, fitted.model["name"],
    )  # fmt: skip
