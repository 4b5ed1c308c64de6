"""The audit draw: each new synthetic question the release would ship without review is drawn at random, with a
probability recorded whether it is drawn or not, and a drawn one is queued for question review. The reviewers'
verdicts on the drawn ones estimate the share of wrong labels among the unchecked (:mod:`~...labels.audit`)."""

from __future__ import annotations

from collections.abc import Sequence

from ...labels.audit import audit_probability, drawn
from ...store import audit as audit_store
from ...store import review as review_store
from ...store.workspace import Workspace, utc_timestamp

AUDIT_PRIORITY = 2.4  # after the doubted questions (2.5), before the other questions; below drawn pairs (3)


def draw_audit(workspace: Workspace, query_ids: Sequence[str], skip: set[str], expected: int, seed: int) -> int:
    """Draw about ``expected`` of the questions in ``query_ids`` the audit has not considered yet, leaving out
    ``skip`` (the doubted ones: reviewed anyway, so no random sample of the unchecked); returns how many were
    drawn."""
    with workspace.transaction() as db:
        known = audit_store.recorded(db)
        new = [q for q in dict.fromkeys(query_ids) if q not in known and q not in skip]
        probability = audit_probability(expected, len(new))
        draws = [(q, probability, drawn(q, probability, seed)) for q in new]
        audit_store.record(db, draws, utc_timestamp())
        reason = f"audit: drawn at random (probability {probability:.2f}) to estimate the unchecked labels' errors"
        review_store.enqueue(
            db,
            (
                review_store.QueuedItem(
                    review_store.question_item_id(q), "question", q, None, AUDIT_PRIORITY, reason, 1
                )
                for q, _, taken in draws
                if taken
            ),
            utc_timestamp(),
        )
    return sum(taken for _, _, taken in draws)
