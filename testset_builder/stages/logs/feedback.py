"""Feedback that comes apart from its request: given after the request was imported, or recorded on another trace.

Each request the workspace recorded keeps the feedback counted for it (:class:`~...store.logs.TraceFeedback`). A
later import that reads the request again with feedback adds only what changed: a thumbs or a rating given since
(one that changed replaces the one counted), a first comment. So the same feedback imported twice counts once.

An app that retrieves in one trace and generates in another records the user's feedback on the generation trace.
That trace has no retrieval of its own. Its feedback goes to the retrieval of the same session that came last
before it (:func:`nearest_retrieval`), when exactly one did.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

from ...store.logs import QueryLog, TraceFeedback

WITHOUT_RETRIEVAL = "feedback without a retrieval"  # the summary's reason for feedback placed on no request


def feedback_change(
    held: TraceFeedback, thumbs: int | None, rating: float | None, comment: str | None
) -> QueryLog | None:
    """What feedback read now adds to the query of a request whose counted feedback is ``held`` (updated in place
    to the feedback now counted); None when it adds nothing."""
    change, changed = QueryLog(held.query_id or ""), False
    if thumbs is not None and thumbs != held.thumbs:
        change.thumbs_up = int(thumbs == 1) - int(held.thumbs == 1)
        change.thumbs_down = int(thumbs == -1) - int(held.thumbs == -1)
        held.thumbs, changed = thumbs, True
    if rating is not None and rating != held.rating:
        change.rating_sum = rating - (held.rating or 0.0)
        change.ratings = int(held.rating is None)
        held.rating, changed = rating, True
    if comment and not held.commented:
        change.comments, change.last_comment = 1, comment
        held.commented, changed = True, True
    return change if changed else None


def add_change(target: QueryLog, change: QueryLog) -> None:
    """Add a feedback change to a query's sums."""
    target.thumbs_up += change.thumbs_up
    target.thumbs_down += change.thumbs_down
    target.rating_sum += change.rating_sum
    target.ratings += change.ratings
    target.comments += change.comments
    target.last_comment = change.last_comment or target.last_comment


def nearest_retrieval(candidates: Iterable[TraceFeedback], at: str | None) -> TraceFeedback | None:
    """The retrieval (of one session) that feedback given at ``at`` belongs to: the latest at or before it; None
    when two share that time, or none came before. Without times (``at`` or every retrieval's), only a session's
    one retrieval is unambiguous."""
    candidates = [c for c in candidates if c.query_id is not None]
    timed = [c for c in candidates if c.seen_at is not None]
    if at is None or not timed:
        return candidates[0] if len(candidates) == 1 else None
    moment = _moments([at, *(c.seen_at for c in timed)])
    before = [c for c in timed if moment(c.seen_at) <= moment(at)]
    if not before:
        return None
    latest = max(moment(c.seen_at) for c in before)
    found = [c for c in before if moment(c.seen_at) == latest]
    return found[0] if len(found) == 1 else None


def _moments(texts: list[str]):
    """How to order these times: as instants when each reads as ISO 8601 (a time without a zone taken as UTC: the
    digits of ``...:05Z`` and ``...:05.5Z`` do not sort as text), else as the text itself."""
    found = {}
    for text in texts:
        try:
            moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return lambda text: text
        found[text] = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return found.__getitem__
