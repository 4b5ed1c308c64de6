"""The select stage: refit the estimate, then split the round's budget into the take-all part and the Poisson
sample (:mod:`~testset_builder.labels.design` says how and why), record every considered pair's inclusion probability
and stratum, and queue the drawn pairs for review."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..labels.design import (
    TAKE_ALL_PER_QUERY,
    TAKE_ALL_SHARE,
    Split,
    likely_coverage,
    split_budget,
    why_split,
)


def best_rank(estimate) -> float:
    """A stored estimate's best rank by the tool's retrievers, from its features (log(1 + rank) each); 1 where it
    names neither (the top: drawn the likeliest, to be safe)."""
    ranks = [estimate.features[name] for name in ("bm25_log_rank", "dense_log_rank") if name in estimate.features]
    return float(min(math.expm1(value) for value in ranks)) if ranks else 1.0


DRAWN_PRIORITY = 3.0  # above any estimate-driven priority (at most 2), below an audit disagreement (2 + 2)


TAKE_ALL_PRIORITY = 4.0  # plus p / 2 (at most 4.5): above drawn pairs and audit disagreements, in one priority band


# what a pair an earlier round drew and this one passed over reads in the queue: its verdict would be set aside by
# the figures (the latest round's draw stands for it), so it leaves the drawn pairs' band
PASSED_OVER = "drawn by an earlier round, not by round"
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
    furniture_pairs: int = 0  # pending pairs whose chunk is page furniture: never taken for sure, the even share only

    def over_budget(self) -> str:
        """Why more pairs were drawn than the budget, when they were ('' otherwise): the random draw takes each
        pair on its own with its probability, so its count varies around what it was given."""
        if self.drawn <= self.budget:
            return ""
        return (
            f"{self.drawn} drawn for a budget of {self.budget:g}: {self.take_all} taken for sure, and the random draw "
            f"took {self.sampled} where {self.sample_budget:g} were expected (it draws each pair on its own with a "
            "known probability, so its count varies around the budget; that is what keeps the figures unbiased)"
        )

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
    from ..labels.estimate import estimate_workspace
    from ..retrieval.pool import RUN_PREFIX
    from ..store import corpus as corpus_store
    from ..store import draws as store
    from ..store import estimates as stored_estimates
    from ..store import review as review_store
    from ..store import rows
    from ..store.workspace import utc_timestamp

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
        marked = corpus_store.boilerplate_chunks(db)
        furniture = [chunk_id in marked for _, chunk_id in pending]
        split = split_budget(
            query_ids, p, ranks, real, budget, uniform_share=uniform_share, take_all_share=take_all_share,
            per_query=take_all_per_query, seed=seed * 1_000_003 + round_number, furniture=furniture,
        )  # fmt: skip
        considered = split_draws(pending, p, split, round_number, fitted.model["name"])
        now = utc_timestamp()
        store.put_draws(db, considered, now)
        review_store.enqueue(db, drawn_items([d for d in considered if d.drawn], round_number), now)
        passed_over = {(d.query_id, d.chunk_id): d.p_relevant * (1 - d.p_relevant) for d in considered if not d.drawn}
        review_store.demote_earlier_draws(db, passed_over, f"{PASSED_OVER} {round_number}")
        doubted = sum(not answered for answered in review_store.doubted_questions(db).values())
    likely_queries, without_likely = likely_coverage(query_ids, p, real)
    covered = len({query_ids[i] for i in split.certain})
    return SelectionSummary(
        round_number, len(pending), sum(pair in earlier for pair in pending), sum(d.drawn for d in considered),
        float(min(budget, len(pending))), uniform_share,
        float(split.probabilities.min()) if split.rest else None, fitted.model["name"],
        len(split.certain), covered, without_likely, sum(d.drawn for d in split.outcome), split.sample_budget,
        take_all_share, take_all_per_query, doubted,
        why_split(len(split.certain), covered, likely_queries, split.sample_budget), sum(furniture),
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
    from ..store.review import DRAWN_FOR_REVIEW, QueuedItem

    for d in chosen:
        reason = f"{DRAWN_FOR_REVIEW}, round {round_number}"
        if d.stratum == TAKE_ALL:
            priority, reason = TAKE_ALL_PRIORITY + d.p_relevant / 2, reason + TAKEN_FOR_SURE
        else:
            priority = DRAWN_PRIORITY + d.p_relevant * (1 - d.p_relevant)
        yield QueuedItem(d.item_id, "pair", d.query_id, d.chunk_id, priority, reason, 1)
