"""Review priority: which proposals a reviewer should see first.

``priority = P(relevant) + uncertainty``, both in [0, 1], so the most likely relevant *and* most uncertain come
first: a confident "irrelevant" is the last thing worth a human minute, a coin-flip "relevant" the first.
``P(relevant)`` is P(grade >= 1) from the grade probabilities; ``uncertainty`` is their entropy over the three
grades divided by log 3 (for the relevance estimate's P(relevant), its binary entropy divided by log 2). Without
probabilities (a provider with no log-probabilities) the sampled grade stands in for P(relevant) (1 or 0) and the
uncertainty is unknown, taken as 0.5. Disagreements found by an audit get a bonus of 2, so they head the queue.

:func:`queued_pairs` and :func:`synthetic_questions` are what ``queue`` shows: the queue's head with the judge's and
the estimate's view of each pair, and the synthetic questions with their review status.
"""

from __future__ import annotations

import math

from ..records import Judgment, JudgmentSource
from ..store import rows

UNKNOWN_UNCERTAINTY = 0.5
DISAGREEMENT_BONUS = 2.0  # above any other priority (at most 2)


def uncertainty(grade_probs: dict[int, float]) -> float:
    entropy = -sum(p * math.log(p) for p in grade_probs.values() if p > 0)
    return min(1.0, entropy / math.log(3))


def review_priority(judgment: Judgment, disagreement: bool = False) -> float:
    if judgment.grade_probs:
        value = judgment.p_relevant + uncertainty(judgment.grade_probs)
    else:
        value = (1.0 if judgment.grade >= 1 else 0.0) + UNKNOWN_UNCERTAINTY
    return round(value + (DISAGREEMENT_BONUS if disagreement else 0.0), 6)


def estimate_priority(p_relevant: float) -> float:
    """The same rule for a pair the relevance estimate proposes: P(relevant) + its binary entropy / log 2."""
    p = min(1.0, max(0.0, p_relevant))
    entropy = -sum(x * math.log(x) for x in (p, 1.0 - p) if x > 0)
    return round(p + entropy / math.log(2), 6)


def queued_pairs(workspace, limit: int = 20, text_chars: int | None = 200) -> tuple[list[dict], int]:
    """The first ``limit`` queued (query, chunk) pairs, highest priority first, each with the judge's latest
    grade and P(relevant) and the estimate's; the chunk's text cut to ``text_chars`` (None: whole). Also the
    queue's size."""
    from ..store import estimates as stored_estimates
    from ..store import review as review_store

    db = workspace.db
    entries = review_store.queued_items(db, limit=limit, kind="pair")
    estimated = stored_estimates.estimates(db)
    queries = {q: rows.get_query(db, q) for q in {e.query_id for e in entries}}
    items = []
    for entry in entries:
        latest = llm_proposal(workspace, entry.query_id, entry.chunk_id)
        chunk_text = rows.get_chunk(db, entry.chunk_id).text
        estimate = estimated.get((entry.query_id, entry.chunk_id))
        items.append(
            {
                "item_id": entry.item_id,
                "priority": entry.priority,
                "reason": entry.reason,
                "query_id": entry.query_id,
                "query": queries[entry.query_id].text,
                "chunk_id": entry.chunk_id,
                "grade": latest.grade if latest else None,
                "p_relevant": round(latest.p_relevant, 3) if latest and latest.grade_probs else None,
                "estimate": estimate.p_relevant if estimate is not None else None,
                "rationale": latest.rationale if latest else None,
                "chunk": chunk_text if text_chars is None else chunk_text[:text_chars],
            }
        )
    return items, review_store.queue_size(db, kind="pair")


def question_status(query_id: str, dropped: set[str], kept: set[str], doubted: set[str], waiting: set[str]) -> str:
    """A synthetic question's review status: ``dropped`` or ``kept`` by reviewers; ``doubted, waiting`` or
    ``held, waiting`` when a release holds it back until a reviewer answers it (``waiting``: no reviewer has), its
    source label doubted or its writer weak (or ``release.hold_unreviewed`` on); else ``not reviewed``."""
    if query_id in dropped:
        return "dropped"
    if query_id in kept:
        return "kept"
    if query_id in waiting:
        return "doubted, waiting" if query_id in doubted else "held, waiting"
    return "not reviewed"


def synthetic_questions(workspace, limit: int = 20) -> tuple[list[dict], int]:
    """The first ``limit`` synthetic questions with style, source chunk and review status
    (:func:`question_status`); and how many there are."""
    from ..store import review as review_store
    from .policy import release_gate

    dropped, kept = review_store.dropped_queries(workspace.db), review_store.kept_queries(workspace.db)
    doubted = set(review_store.doubted_questions(workspace.db))
    waiting = {query_id for query_id, answered in release_gate(workspace.db).items() if not answered}
    ids = rows.synthetic_query_ids(workspace.db)
    listed = []
    for query_id in ids[:limit]:
        query = rows.get_query(workspace.db, query_id)
        listed.append(
            {
                "query_id": query_id,
                "text": query.text,
                "style": query.style,
                "source_chunk_id": query.source_chunk_id,
                "status": question_status(query_id, dropped, kept, doubted, waiting),
                "edited_from": query.metadata.get("edited_from"),
            }
        )
    return listed, len(ids)


def llm_proposal(workspace, query_id: str, chunk_id: str) -> Judgment | None:
    """The LLM judge's latest proposal on a pair (what a reviewer is shown, or a tool gets, as its suggestion)."""
    proposals = [
        j
        for j in rows.iter_judgments(workspace.db, query_id)
        if j.chunk_id == chunk_id and j.source is JudgmentSource.llm
    ]
    return proposals[-1] if proposals else None
