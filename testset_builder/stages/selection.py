"""Which pairs humans review: real queries' likely relevant pairs for sure, the rest drawn at random with known,
never-zero inclusion probabilities.

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

Before the draw, a take-all stratum (as survey sampling names it): each real query's pending pairs the estimate calls
likely relevant (p_i >= 0.5), a few a query and at most a share of the budget, get pi_i = 1 (see :func:`take_all`).
A draw alone can miss them all: with a small budget over a large pool every pi_i is small. Taken for sure, they give
each real query its first labels; they weigh 1 in the estimates, and the draw over the rest keeps its known pi_i.
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


# the take-all stratum -----------------------------------------------------------------------------------------------

LIKELY_RELEVANT = 0.5  # the estimate calls the pair likelier relevant than not: its verdict most likely gives a label
TAKE_ALL_PER_QUERY = 3  # enough for a real query's first relevant labels, few enough to leave other queries room
TAKE_ALL_SHARE = 0.5  # the most of the budget taken for sure: the rest is the random draw that corrects the estimate


def take_all(
    query_ids: Sequence[str], p: Sequence[float], ranks: Sequence[float], real: set[str], per_query: int, limit: int
) -> list[int]:
    """The take-all stratum, as indices into the pending pairs: each real query's pairs with p >=
    :data:`LIKELY_RELEVANT`, the likeliest first (a tie to the better rank), at most ``per_query`` of them; at most
    ``limit`` in all, chosen round-robin across queries (every query's likeliest pair, by p, before any second one)."""

    def likeliest(i: int) -> tuple:
        return (-p[i], ranks[i], i)

    eligible = [i for i, query in enumerate(query_ids) if query in real and p[i] >= LIKELY_RELEVANT]
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
) -> Split:
    """The take-all part (:func:`take_all`, at most ``take_all_share`` of ``budget``), then Poisson sampling of the
    other pairs with the rest of the budget (:func:`inclusion_probabilities`), so their probabilities stay known."""
    if not 0.0 <= take_all_share < 1.0:
        raise ValueError("take_all_share must be in [0, 1): the random draw keeps part of the budget")
    certain = take_all(query_ids, p, ranks, real, per_query, int(take_all_share * budget))
    taken = set(certain)
    rest = [i for i in range(len(query_ids)) if i not in taken]
    left = budget - len(certain)
    probabilities = inclusion_probabilities([p[i] for i in rest], left, uniform_share, [ranks[i] for i in rest])
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


# the workspace ------------------------------------------------------------------------------------------------------


def best_rank(estimate) -> float:
    """A stored estimate's best rank by the tool's retrievers, from its features (log(1 + rank) each)."""
    from .estimate import FEATURES, STORED_LENGTHS

    features = estimate.features
    if len(features) not in STORED_LENGTHS:  # the ranks are among the first features either way
        return 1.0
    return float(min(math.expm1(features[FEATURES.index(name)]) for name in ("bm25_log_rank", "dense_log_rank")))


DRAWN_PRIORITY = 3.0  # above any estimate-driven priority (at most 2), below an audit disagreement (2 + 2)
TAKE_ALL_PRIORITY = 4.0  # plus p / 2 (at most 4.5): above drawn pairs and audit disagreements, in one priority band
TAKEN_FOR_SURE = " (taken for sure: likely relevant)"  # what a take-all item's reason adds to a drawn one's


@dataclass
class SelectionSummary:
    round: int
    considered: int  # pending pairs: every estimated pair no human has labelled
    reconsidered: int  # of them, pairs an earlier round considered and did not draw (their estimate refitted since)
    drawn: int  # taken for sure and drawn at random together
    budget: float
    uniform_share: float
    smallest_probability: float | None  # the random draw's (a pair taken for sure has 1)
    model: str
    take_all: int  # pairs taken for sure: real queries' likely relevant pairs
    take_all_queries: int  # real queries those pairs cover
    real_queries_without_likely: int  # real queries with pending pairs, none of them likely relevant
    sampled: int  # pairs the random draw drew
    sample_budget: float  # what the random draw spent: the budget less the pairs taken for sure
    take_all_share: float
    take_all_per_query: int
    doubted_questions_waiting: int  # synthetic questions queued as doubted (each for sure, outside the budget)
    why: str

    def as_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


def select_for_review(
    workspace,
    budget: int,
    uniform_share: float = 0.2,
    seed: int = 0,
    take_all_share: float = TAKE_ALL_SHARE,
    take_all_per_query: int = TAKE_ALL_PER_QUERY,
) -> SelectionSummary:
    """Refit the estimate, then split the budget (:func:`split_budget`): each real query's likeliest relevant
    pending pairs are taken for sure (probability 1), and the rest of the budget draws from every other pending pair
    (no human label yet, whether an earlier round considered it or not) with known probabilities (the weights are
    :func:`review_weights`'s, from the refitted estimate and the pair's best rank by the tool's retrievers or the
    systems `propose --runs` pooled). Pairs taken for sure head the review queue, the drawn ones next. Every
    considered pair's probability and stratum are recorded, drawn or not: the weights that keep estimates from the
    verdicts unbiased. Each round is a design of its own over its population: a later round draws where the refit
    now puts the relevant pairs, and the labels earlier rounds brought in count as known (see
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
        query_ids, real = [q for q, _ in pending], rows.real_query_ids(db)
        split = split_budget(
            query_ids, p, ranks, real, budget, uniform_share=uniform_share, take_all_share=take_all_share,
            per_query=take_all_per_query, seed=seed * 1_000_003 + round_number,
        )  # fmt: skip
        considered = split_draws(pending, p, split, round_number, fitted.model["name"])
        now = utc_timestamp()
        store.put_draws(db, considered, now)
        review_store.enqueue(db, drawn_items([d for d in considered if d.drawn], round_number), now)
        doubted = sum(not answered for answered in review_store.doubted_questions(db).values())
    likely_queries, without_likely = likely_coverage(query_ids, p, real)
    covered = len({query_ids[i] for i in split.certain})
    return SelectionSummary(
        round_number, len(pending), sum(pair in earlier for pair in pending), sum(d.drawn for d in considered),
        float(min(budget, len(pending))), uniform_share,
        float(split.probabilities.min()) if split.rest else None, fitted.model["name"],
        len(split.certain), covered, without_likely, sum(d.drawn for d in split.outcome), split.sample_budget,
        take_all_share, take_all_per_query, doubted,
        why_split(len(split.certain), covered, likely_queries, split.sample_budget),
    )  # fmt: skip


def split_draws(pending: Sequence[tuple[str, str]], p: Sequence[float], split: Split, round_number: int, model: str):
    """The draws a round records: each pair taken for sure (probability 1, drawn), then each other pending pair's."""
    from ..store.draws import SAMPLE, TAKE_ALL, StoredDraw

    certain = [StoredDraw(*pending[i], round_number, 1.0, True, p[i], model, TAKE_ALL) for i in split.certain]
    sampled = []
    for d in split.outcome:
        i = split.rest[d.index]
        sampled.append(StoredDraw(*pending[i], round_number, d.probability, d.drawn, p[i], model, SAMPLE))
    return certain + sampled


def drawn_items(chosen, round_number: int):
    """The review items of a round's drawn pairs, by priority: those taken for sure first (the likeliest first),
    then the rest (the likely relevant and uncertain first)."""
    from ..store.draws import TAKE_ALL
    from ..store.review import QueuedItem

    for d in chosen:
        reason = f"drawn for review, round {round_number}"
        if d.stratum == TAKE_ALL:
            priority, reason = TAKE_ALL_PRIORITY + d.p_relevant / 2, reason + TAKEN_FOR_SURE
        else:
            priority = DRAWN_PRIORITY + d.p_relevant * (1 - d.p_relevant)
        yield QueuedItem(d.item_id, "pair", d.query_id, d.chunk_id, priority, reason, 1)
