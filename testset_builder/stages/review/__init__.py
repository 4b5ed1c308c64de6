"""Review: humans verify proposals and synthetic questions, one queue for every face (web, terminal, scripts).

- :func:`next_item` leases the highest-priority item the reviewer has neither answered nor skipped, for
  ``lease_s`` seconds (an expired lease puts the item back); a reviewer who asks again while holding a lease gets
  the same item (a reload loses nothing). With ``overlap`` N each item goes to N distinct reviewers.
- :func:`submit` records a verdict in one transaction, before the next item is handed out. A grade (0, 1, 2: grade
  0 is the one way to say "not relevant") becomes a human judgment; a skip passes the item to others; a question is
  kept, dropped with a reason, or edited into a new query that supersedes the old one and carries its labels. A
  verdict sent twice with the same idempotency key (a double click, a retry after a network error) is stored once.
- :func:`undo` takes back the reviewer's own last verdict (a grade is withdrawn by a superseding judgment).
- In blind mode the LLM's grade and rationale are not shown before the reviewer answers.
- A pair whose query was logged in production also shows what the live system did (its answer, the feedback, what
  it retrieved, the reviewed chunk marked), and the reviewer tags the query once (:func:`tag_failure`):
  ``retrieval`` (no relevant chunk was retrieved), ``generation`` (one was, and the answer still failed), ``none``,
  or ``unanswerable`` from the corpus. A new tag supersedes the reviewer's earlier one; :func:`untag_failure` takes
  one back; the same idempotency key again returns the stored tag. Blind mode hides none of this: the answer and the
  feedback are what the reviewer judges.

- Reviewers as principals: :func:`add_reviewer` gives a reviewer a token of their own (its SHA-256 is stored, the
  token shown once); whoever holds it *is* that reviewer (:func:`principal`), whatever name a request gives. The
  workspace's token still lets its holder name any reviewer: for one person or a trusted script.

Which questions are dropped follows the reviewers' latest question verdicts (majority; a tie goes to the latest), and
a dropped or edited-away question leaves every release after it.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta

from ... import review_actions
from ...config import ReviewConfig
from ...errors import InputError, ReviewConflictError, UnknownIdError
from ...labels import policy
from ...labels.agreement import cohen_kappa, pairwise_agreement
from ...labels.queue import llm_proposal
from ...records import Judgment, JudgmentSource, JudgmentStatus, Query, reviewer_name
from ...store import draws, rows
from ...store import failure_tags as tag_store
from ...store import review as store
from ...store import reviewers as reviewer_store
from ...store.workspace import Workspace, utc_timestamp

DROP_REASONS = review_actions.DROP_REASONS
FAILURE_TAGS = tag_store.FAILURE_TAGS
FAILURE_TAG_HELP = {
    "retrieval": ("r", "retrieval failure", "no relevant chunk was retrieved"),
    "generation": ("g", "generation failure", "a relevant chunk was retrieved; the answer still failed"),
    "none": ("n", "no failure", "the answer was fine"),
    "unanswerable": ("a", "unanswerable", "the corpus cannot answer it"),
}  # tag -> (its key in both reviewers, label, meaning)
SNIPPET_CHARS = 280  # of each production result, enough to tell what it is about


@dataclass
class ReviewItem:
    """What a reviewer sees: the query, the chunk (for a pair), and the LLM's proposal unless blind."""

    item_id: str
    kind: str
    query: dict
    chunk: dict | None
    reason: str
    lease_expires_at: str
    suggestion: dict | None = None
    logged: dict | None = None  # what the live system did, when the query was logged (see logged_context)
    graded_by: dict[str, int] | None = None  # adjudicating: each reviewer's standing grade on the pair
    self_party: bool = False  # adjudicating a pair the admin graded too: settling it is "self-settled"
    comments: list[dict] | None = None  # adjudicating: what the reviewers said with their verdicts on it

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class SubmitResult:
    verdict: store.Verdict
    created: bool  # False when the idempotency key was seen before: nothing new was stored

    def as_dict(self) -> dict:
        return {**asdict(self.verdict), "created": self.created}


def _later(now: str, seconds: float) -> str:
    return (datetime.fromisoformat(now) + timedelta(seconds=seconds)).astimezone(UTC).isoformat(timespec="microseconds")


def dropped_questions(workspace: Workspace) -> set[str]:
    """Query ids the reviewers dropped or edited away (see :func:`~testset_builder.store.review.dropped_queries`)."""
    return store.dropped_queries(workspace.db)


HELD = (2.3, "held: released once a reviewer keeps it")  # after the audit's questions (2.4), above every
# estimate-driven pair (at most 2): what a release waits for comes before what is optional


def queue_questions(
    workspace: Workspace, query_ids: set[str] | None = None, priority: float = 1.0, reason: str = "synthetic question"
) -> int:
    """Put every synthetic question (or those of ``query_ids``) in the queue as an item of its own (keep, drop or
    edit it), at ``priority`` for ``reason`` (an item queued before keeps the higher of the two)."""
    with workspace.transaction() as db:
        items = [
            store.QueuedItem(store.question_item_id(q), "question", q, None, priority, reason, 1)
            for q in rows.synthetic_query_ids(db)
            if query_ids is None or q in query_ids
        ]
        return store.enqueue(db, items, utc_timestamp())


def keep_release_gate(workspace: Workspace, hold: bool | None) -> None:
    """Record the release's ``hold_unreviewed`` (decided from a config by
    :func:`~testset_builder.labels.policy.holds_unreviewed`), so every reviewer and command counts the same items as
    what the release waits for; queue the questions it holds for review."""
    value = {True: "1", False: "0", None: "auto"}[hold]
    with workspace.transaction() as db:
        if store.review_setting(db, policy.HOLDS_UNREVIEWED) != value:
            store.set_review_setting(db, policy.HOLDS_UNREVIEWED, value, utc_timestamp())
    queue_held(workspace)


def queue_held(workspace: Workspace) -> int:
    """Queue for review the questions a release holds back that no reviewer has answered, by the recorded policy
    (:func:`~testset_builder.labels.policy.release_gate`), ahead of the optional items: the web and terminal
    reviewers call it as they start, so questions made since the last ``run`` (or before any) are served too.
    Returns how many were newly queued."""
    waiting = policy.unanswered_questions(workspace.db, policy.recorded_hold(workspace.db))
    return queue_questions(workspace, waiting, *HELD) if waiting else 0


def workspace_overlap(workspace: Workspace, settings: ReviewConfig | None = None) -> int:
    """Distinct reviewers each item wants: ``settings.overlap`` when given (for this call), else the workspace's
    (:func:`keep_overlap`), 1 until one is kept."""
    if settings is not None and settings.overlap is not None:
        return settings.overlap
    kept = store.review_setting(workspace.db, "overlap")
    return int(kept) if kept is not None else 1


def keep_overlap(workspace: Workspace, wanted: int) -> int | None:
    """Make ``wanted`` the workspace's overlap, which every reviewer and command then counts with; returns the
    one it replaces (None when it was not changed)."""
    if not isinstance(wanted, int) or isinstance(wanted, bool) or wanted < 1:
        raise InputError(f"overlap is a whole number of reviewers, at least 1 (not {wanted!r})")
    with workspace.transaction() as db:
        before = store.review_setting(db, "overlap")
        if before is None or int(before) != wanted:
            store.set_review_setting(db, "overlap", str(wanted), utc_timestamp())
    current = int(before) if before is not None else 1
    return current if current != wanted else None


def next_item(
    workspace: Workspace,
    reviewer: str,
    settings: ReviewConfig | None = None,
    adjudicate: bool = False,
    skipped: bool = False,
) -> ReviewItem | None:
    """Lease the next item for ``reviewer`` (the one they already hold, if any); None when nothing is left. Items of
    the query the reviewer answered last come first within a band of priority (see
    :func:`~testset_builder.store.review.next_free`). With ``adjudicate``, only the pairs other reviewers graded
    differently, each with their grades (the reviewer is the release's adjudicator); with ``skipped``, the items this
    reviewer skipped, to answer them after all."""
    settings = settings or ReviewConfig()
    reviewer = reviewer_name(reviewer)
    if adjudicate:
        return _next_to_settle(workspace, reviewer, settings)
    kinds = _kinds(settings)
    dropped = dropped_questions(workspace)
    overlap = workspace_overlap(workspace, settings)
    with workspace.transaction() as db:
        now = utc_timestamp()
        chosen = None if skipped else store.held_lease(db, reviewer, now)
        if chosen is not None and not store.has_room(db, chosen.item_id, reviewer, now, overlap):
            chosen = None  # held for adjudication: the queue has no place for this reviewer's verdict on it
        if chosen is None or chosen.kind not in kinds:
            chosen = store.next_free(
                db, reviewer, now, kinds, dropped, overlap, None,
                near_query=None if skipped else store.last_query_of(db, reviewer), skipped=skipped,
            )  # fmt: skip
            if chosen is None:
                return None
            store.lease(db, chosen.item_id, reviewer, now, _later(now, settings.lease_s))
        expires = store.lease_expiry(db, chosen.item_id, reviewer)
    return _describe(workspace, chosen, expires, settings.blind, reviewer)


def _next_to_settle(workspace: Workspace, admin: str, settings: ReviewConfig) -> ReviewItem | None:
    """The next open disagreement for an admin to settle, leased to them: the one they hold, else the first no
    other admin holds, those the admin did not grade before those they did (which another admin had better settle:
    settled by a party, it counts as self-settled). Each comes with every reviewer's grade and comments."""
    graded = disagreements_graded(workspace)
    dropped = dropped_questions(workspace)
    with workspace.transaction() as db:
        now = utc_timestamp()
        held = store.held_lease(db, admin, now)
        open_items = [store.item(db, item_id) for item_id in graded]
        open_items = [i for i in open_items if i is not None and i.query_id not in dropped]
        if held is not None and held.item_id in graded:
            chosen = held
        else:
            taken = store.live_leases_of_others(db, admin, now)
            free = [i for i in open_items if i.item_id not in taken]
            if not free:
                return None
            chosen = min(free, key=lambda i: (admin in graded[i.item_id], -i.priority, i.item_id))
            store.lease(db, chosen.item_id, admin, now, _later(now, settings.lease_s))
        expires = store.lease_expiry(db, chosen.item_id, admin)
    item = _describe(workspace, chosen, expires, settings.blind, admin)
    item.graded_by = graded[chosen.item_id]
    item.self_party = admin in item.graded_by
    item.comments = comments(workspace, chosen.item_id)
    return item


def comments(workspace: Workspace, item_id: str) -> list[dict]:
    """What reviewers said with their verdicts on an item, oldest first: reviewer, action, comment, when."""
    said = store.comments_on(workspace.db, [item_id]).get(item_id, [])
    return [{"reviewer": r, "action": a, "comment": c, "at": at} for r, a, c, at in said]


def free_again_at(workspace: Workspace, reviewer: str, settings: ReviewConfig | None = None) -> str | None:
    """When nothing is left for ``reviewer`` but others hold items they could take: the soonest time one comes back
    if its holder does not answer (ISO 8601, UTC); None when no such item is out."""
    settings = settings or ReviewConfig()
    return store.soonest_lease_end(
        workspace.db,
        reviewer_name(reviewer),
        utc_timestamp(),
        _kinds(settings),
        workspace_overlap(workspace, settings),
        store.dropped_queries(workspace.db),
    )


def _kinds(settings: ReviewConfig) -> tuple[str, ...]:
    """The item kinds reviewers are served: pairs, and the synthetic questions queued (all of them with
    ``questions``; unset, those queued as doubted, which a release waits for), unless ``questions`` is false."""
    return ("pair",) if settings.questions is False else ("pair", "question")


def leave(workspace: Workspace, reviewer: str) -> int:
    """The reviewer stops: the items they hold go back to the queue now, not when their leases end; returns how
    many."""
    reviewer = reviewer_name(reviewer)
    with workspace.transaction() as db:
        return store.release_leases_of(db, reviewer)


def _describe(workspace: Workspace, chosen: store.QueuedItem, expires: str, blind: bool, reviewer: str) -> ReviewItem:
    db = workspace.db
    query = rows.get_query(db, chosen.query_id)
    chunk, suggestion = None, None
    if chosen.chunk_id is not None:
        found = rows.get_chunk(db, chosen.chunk_id)
        title = rows.get_document(db, found.doc_id).title
        chunk = {"chunk_id": found.chunk_id, "text": found.text, "title": title, "doc_id": found.doc_id}
        latest = None if blind else llm_proposal(workspace, query.query_id, found.chunk_id)
        if latest is not None:
            suggestion = {"grade": latest.grade, "confidence": latest.confidence, "rationale": latest.rationale}
    question = {"query_id": query.query_id, "text": query.text, "style": query.style, "origin": query.origin.value}
    if chosen.kind == "question" and query.source_chunk_id:
        source = rows.get_chunk(db, query.source_chunk_id)
        chunk = {
            "chunk_id": source.chunk_id,
            "text": source.text,
            "title": rows.get_document(db, source.doc_id).title,
            "doc_id": source.doc_id,
        }
    logged = logged_context(workspace, query.query_id, chosen.chunk_id, reviewer) if chosen.kind == "pair" else None
    return ReviewItem(chosen.item_id, chosen.kind, question, chunk, chosen.reason, expires, suggestion, logged)


def logged_context(workspace: Workspace, query_id: str, chunk_id: str | None, reviewer: str) -> dict | None:
    """What the live system did for a logged query (None when it was never logged): its latest answer and comment,
    the feedback summed over its records (thumbs, mean rating, answers with citations and those clicked), what it
    retrieved (rank, chunk, score, title, the text's start; ``reviewed`` marks ``chunk_id``) and ``tag``, this
    reviewer's standing failure tag."""
    db = workspace.db
    summary = tag_store.logged_summary(db, query_id)
    if summary is None:
        return None
    results = [
        {"rank": rank, "chunk_id": chunk, "score": score, "title": title, "reviewed": chunk == chunk_id,
         "snippet": text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS].rstrip() + "…"}
        for rank, chunk, score, text, title in tag_store.logged_results(db, query_id)
    ]  # fmt: skip
    standing = tag_store.standing_tag(db, query_id, reviewer_name(reviewer))
    ratings = summary["ratings"]
    return {
        "query_id": query_id, "answer": summary["last_answer"], "comment": summary["last_comment"],
        "frequency": summary["frequency"], "thumbs_up": summary["thumbs_up"], "thumbs_down": summary["thumbs_down"],
        "rating": round(summary["rating_sum"] / ratings, 2) if ratings else None, "ratings": ratings,
        "cited": summary["cited"], "clicked": summary["clicked"], "results": results,
        "reviewed_rank": next((r["rank"] for r in results if r["reviewed"]), None),
        "tag": standing.tag if standing else None,
    }  # fmt: skip


DOCUMENT_CHARS = 60_000  # of a document shown whole on the page; a longer one is cut to this much around the chunk


def document_around(workspace: Workspace, chunk_id: str) -> dict:
    """The chunk in its whole document (on demand): ``title``, ``before``, ``chunk`` and ``after`` (the document's
    text split at the chunk's span), and ``cut``, the characters left out of a document longer than
    :data:`DOCUMENT_CHARS` (shown around the chunk)."""
    db = workspace.db
    chunk = rows.get_chunk(db, chunk_id)
    document = rows.get_document(db, chunk.doc_id)
    text, start, end = document.text, chunk.start, chunk.end
    if text[start:end] != chunk.text:  # the document changed since this chunk was made: the chunk alone
        text, start, end = chunk.text, 0, len(chunk.text)
    room = max(0, DOCUMENT_CHARS - (end - start))
    lo = max(0, min(start - room // 2, len(text) - (end - start) - room))
    hi = min(len(text), lo + (end - start) + room)
    return {
        "title": document.title, "doc_id": document.doc_id, "before": text[lo:start], "chunk": text[start:end],
        "after": text[end:hi], "cut": len(text) - (hi - lo),
    }  # fmt: skip


def neighbours(workspace: Workspace, chunk_id: str) -> dict:
    """The chunks before and after ``chunk_id`` in its document (context on demand)."""
    chunk = rows.get_chunk(workspace.db, chunk_id)
    siblings = sorted((c for c in rows.live_chunks_of(workspace.db, chunk.doc_id)), key=lambda c: c.start)
    at = next((i for i, c in enumerate(siblings) if c.chunk_id == chunk_id), None)

    def text(index: int) -> str | None:
        return siblings[index].text if at is not None and 0 <= index < len(siblings) else None

    return {"before": text(at - 1) if at is not None else None, "after": text(at + 1) if at is not None else None}


ROLES = ("reviewer", "admin")


@dataclass(frozen=True)
class Principal:
    """Who a credential belongs to: a reviewer (``name`` set; ``role`` reviewer or admin, who may adjudicate), or
    the workspace's token (``name`` None: its holder names the reviewer in each request)."""

    name: str | None
    role: str

    def acting_as(self, claimed: str | None) -> str:
        """The reviewer a request acts as: the token's own, or (workspace token) the one it names."""
        if self.name is None:
            return reviewer_name(claimed or "")
        if claimed and " ".join(claimed.split()) != self.name:
            raise PermissionError(f"this token is {self.name}'s: it cannot act as {claimed!r}")
        return self.name


def add_reviewer(workspace: Workspace, name: str, role: str = "reviewer") -> str:
    """A new token for reviewer ``name`` (any earlier one of theirs stops working); returned once, stored only as
    its SHA-256."""
    name = reviewer_name(name)
    if role not in ROLES:
        raise InputError(f"a reviewer's role is one of {', '.join(ROLES)}, not {role!r}")
    token = "rv-" + secrets.token_urlsafe(24)
    with workspace.transaction() as db:
        store.set_reviewer_token(db, name, hashlib.sha256(token.encode()).hexdigest(), role, utc_timestamp())
    return token


def principal(workspace: Workspace, token: str, workspace_token: str) -> Principal | None:
    """Who holds ``token``: the workspace (its own token), a reviewer (one :func:`add_reviewer` gave), or nobody."""
    if token and hmac.compare_digest(token.encode(), workspace_token.encode()):  # constant time: no timing oracle
        return Principal(None, "admin")
    if not token:
        return None
    found = store.reviewer_of_token(workspace.db, hashlib.sha256(token.encode()).hexdigest())  # a hash: no oracle
    return Principal(*found) if found else None


def reviewers_with_tokens(workspace: Workspace) -> list[tuple[str, str]]:
    return store.reviewers_with_tokens(workspace.db)


def reviewers(workspace: Workspace) -> list[reviewer_store.ReviewerRow]:
    """Every reviewer of the workspace: role, the state of their token (active, revoked or none), standing verdicts
    by action, pairs settled, and their last verdict's time."""
    return reviewer_store.reviewer_rows(workspace.db)


def revoke_reviewer(workspace: Workspace, name: str) -> None:
    """Revoke ``name``'s own token: it stops working at once (the page and the API answer 401); their verdicts stay
    and count as before. ``add_reviewer`` gives them a new one."""
    name = reviewer_name(name)
    with workspace.transaction() as db:
        if not reviewer_store.revoke_token(db, name, utc_timestamp()):
            known = [row.name for row in reviewer_store.reviewer_rows(db) if row.token == "active"]
            raise InputError(f"{name!r} holds no token to revoke (tokens: {', '.join(known) or 'none'})")


def _check_key(idempotency_key: str, what: str) -> None:
    if not idempotency_key or len(idempotency_key) > 200:
        raise InputError(f"{what} needs an idempotency_key of 1 to 200 characters")


def _verdict_id(key: str) -> str:
    return "v-" + hashlib.sha256(key.encode()).hexdigest()[:24]


def submit(workspace: Workspace, reviewer: str, item_id: str, action: str, idempotency_key: str, **details):
    """Record one verdict (see the module docstring); the same idempotency key again returns what was stored.
    ``details``: ``grade``, ``reason``, ``comment``, ``edited_text``, ``seconds`` and ``overlap``, as
    :func:`record_verdict` takes them, which this calls in a transaction of its own.

    With ``overlap`` (the web and terminal reviewers pass theirs), a verdict that would give the item more reviewers
    than it wants is refused with :class:`ReviewConflictError`: its reviewer's lease ran out and others finished it
    meanwhile, or every place left is leased to other reviewers (a verdict is bound to the lease: only its holder
    may answer a leased item until the lease ends, so the holder is never refused for a place taken under it). An
    adjudicator's verdict and an import from another tool pass no overlap and are always taken. An admin settles a
    disagreement with :func:`settle`, not here."""
    if action == "adjudicate":
        raise InputError("a disagreement is settled by an admin (review.settle, or the adjudicate mode), not a verdict")
    with workspace.transaction() as db:
        return record_verdict(db, reviewer, item_id, action, idempotency_key, **details)


def settle(
    workspace: Workspace,
    admin: str,
    item_id: str,
    grade: int,
    idempotency_key: str,
    comment: str | None = None,
    seconds: float | None = None,
) -> SubmitResult:
    """An admin settles a pair reviewers graded differently: the adjudication is its own state, not a vote. The
    pair takes the settled grade in every release; the reviewers' grades stay as they were, so agreement figures
    (over independent grades only) do not move; the pair leaves the list of disagreements. An admin who graded the
    pair too may settle it: the adjudication then counts as self-settled. Who and when are the verdict's; undo
    takes it back. Only an open disagreement can be settled (one settled already is refused: undo first)."""
    with workspace.transaction() as db:
        return settle_in(db, admin, item_id, grade, idempotency_key, comment, seconds)


def settle_in(
    db,
    admin: str,
    item_id: str,
    grade: int,
    idempotency_key: str,
    comment: str | None = None,
    seconds: float | None = None,
    source_at: str | None = None,
) -> SubmitResult:
    """:func:`settle` inside a transaction the caller holds (an import settles a whole file's disagreements in
    one); ``source_at``, for a settlement made in another tool, when it says it was given."""
    seen = store.verdict_by_key(db, idempotency_key)
    if seen is None:
        target = store.item(db, item_id)
        if target is None or target.kind != "pair":
            raise UnknownIdError("pair item", item_id)
        judgments = list(rows.iter_judgments(db, target.query_id))
        pair = (target.query_id, target.chunk_id)
        if pair in policy.adjudications(judgments):
            raise ReviewConflictError(f"item {item_id} is settled already: nothing was stored (undo it first)")
        if len(set(policy.reviewer_grades(judgments).get(pair, {}).values())) < 2:
            raise ReviewConflictError(f"item {item_id} is not a disagreement to settle: nothing was stored")
    return record_verdict(
        db, admin, item_id, "adjudicate", idempotency_key, grade=grade, comment=comment, seconds=seconds,
        source_at=source_at,
    )  # fmt: skip


def record_verdict(
    db,
    reviewer: str,
    item_id: str,
    action: str,
    idempotency_key: str,
    grade: int | None = None,
    reason: str | None = None,
    comment: str | None = None,
    edited_text: str | None = None,
    seconds: float | None = None,
    overlap: int | None = None,
    source_at: str | None = None,
) -> SubmitResult:
    """:func:`submit` inside a transaction the caller holds (an import stores a whole file in one): ``grade`` for a
    grade; ``reason`` for a drop or a skip; ``edited_text`` for an edit; ``comment`` and ``seconds`` (time spent) for
    any; ``overlap`` as :func:`submit` says; ``source_at``, for an imported verdict, when its tool says it was
    given."""
    reviewer = reviewer_name(reviewer)
    _check_key(idempotency_key, "a verdict")
    _check_seconds(seconds)
    seen = store.verdict_by_key(db, idempotency_key)
    if seen is not None:
        if (seen.item_id, seen.reviewer) != (item_id, reviewer):  # a key reused: not the same verdict again
            raise ReviewConflictError(
                f"idempotency key {idempotency_key!r} was used for another verdict (item {seen.item_id}): nothing "
                "was stored; send each verdict with a key of its own"
            )
        sent = (action, grade if action in ("grade", "adjudicate") else None, reason or None, comment or None)
        if (seen.action, seen.grade, seen.reason or None, seen.comment or None) != sent:  # a retry sends the same
            raise ReviewConflictError(
                f"idempotency key {idempotency_key!r} was used for a different verdict on this item: nothing was "
                "stored; send a changed verdict with a key of its own (or undo the first)"
            )
        return SubmitResult(seen, created=False)
    target = store.item(db, item_id)
    if target is None:
        raise UnknownIdError("review item", item_id)
    _check_action(target, action, grade, reason, edited_text)
    wanted = None if overlap is None else max(overlap, target.wanted_overlap)
    now = utc_timestamp()
    if wanted is not None and review_actions.counts(action) and not _holds_place(db, item_id, reviewer, now, wanted):
        done = store.counting_verdicts_by_others(db, item_id, reviewer)
        if done >= wanted:
            raise ReviewConflictError(
                f"item {item_id} already has as many reviewers as it wants ({wanted}; your lease on it had run "
                "out): nothing was stored; take the next item"
            )
        holders = store.leases_by_others(db, item_id, reviewer, now)
        if done + len(holders) >= wanted:  # every place left is leased to someone else: theirs to answer
            raise ReviewConflictError(
                f"item {item_id} is leased to another reviewer (a place frees at "
                f"{holders[len(holders) - (wanted - done)][1]} if they do not answer; it wants {wanted}): "
                "nothing was stored; take the next item"
            )
    judgment_id = None
    if action in ("grade", "adjudicate"):
        judgment_id = "rev-" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:24]
        status = JudgmentStatus.final if action == "grade" else JudgmentStatus.adjudicated
        rows.add_judgments(db, [Judgment(
            judgment_id=judgment_id, query_id=target.query_id, chunk_id=target.chunk_id, grade=grade,
            source=JudgmentSource.human, reviewer=reviewer, status=status, rationale=comment or None,
        )])  # fmt: skip
    if action == "edit_question":
        _edit_question(db, target.query_id, edited_text, reviewer)
    verdict = store.Verdict(
        _verdict_id(idempotency_key), item_id, reviewer, action, grade if judgment_id else None,
        reason, comment, edited_text if action == "edit_question" else None, judgment_id, None, idempotency_key,
        seconds, now, source_at,
    )  # fmt: skip
    store.add_verdict(db, verdict)
    store.release_lease(db, item_id, reviewer)
    return SubmitResult(verdict, created=True)


def _check_action(
    target: store.QueuedItem, action: str, grade: int | None, reason: str | None, edited: str | None
) -> None:
    """The verdict as :mod:`~testset_builder.review_actions` declares it: a known action, for this kind of item,
    with the field it needs."""
    declared = review_actions.action(action)
    if declared is None:
        raise InputError(f"unknown action {action!r}; use one of {', '.join(review_actions.names())}")
    if target.kind not in declared.kinds:
        takes = [a.name for a in review_actions.ACTIONS.values() if target.kind in a.kinds]
        items = {"pair": "(query, chunk) pairs", "question": "question items"}
        what = "a (query, chunk) pair" if target.kind == "pair" else "a question item"
        for_kinds = " and ".join(items[k] for k in declared.kinds)
        raise InputError(f"{action} is for {for_kinds}; {what} takes {', '.join(takes)}")
    if declared.needs == "grade" and grade not in (0, 1, 2):
        raise InputError("a grade is 0 (not relevant), 1 (relevant) or 2 (highly relevant)")
    if action == "drop_question" and reason not in DROP_REASONS:
        raise InputError(f"{action} needs a reason: one of {', '.join(DROP_REASONS)}")
    if declared.needs == "reason" and not (reason and reason.strip()):
        raise InputError(f"{action} needs a reason")
    if declared.needs == "edited_text" and not (edited and edited.strip()):
        raise InputError(f"{action} needs the new text (edited_text)")


def _edit_question(db, query_id: str, text: str, reviewer: str) -> None:
    """The edited text becomes a new query that names the old one and carries its source labels."""
    old = rows.get_query(db, query_id)
    new_id = store.edited_query_id(query_id, text)
    metadata = {**old.metadata, "edited_from": query_id, "edited_by": reviewer}
    rows.put_queries(db, [Query(
        query_id=new_id, text=text.strip(), origin=old.origin, source_chunk_id=old.source_chunk_id, style=old.style,
        metadata=metadata, lineage=old.lineage,
    )])  # fmt: skip
    carried = [
        j.model_copy(
            update={
                "judgment_id": "carried-" + hashlib.sha256(f"{new_id}\x00{j.judgment_id}".encode()).hexdigest()[:24],
                "query_id": new_id,
            }
        )
        for j in rows.iter_judgments(db, query_id)
        if j.source is not JudgmentSource.llm
    ]
    rows.add_judgments(db, carried)


def _holds_place(db, item_id: str, reviewer: str, now: str, wanted: int) -> bool:
    """Whether the reviewer holds a live lease given while the item had room: a place an import took under it stays
    the holder's."""
    held = store.lease_times(db, item_id, reviewer)
    return (
        held is not None
        and held[1] > now
        and store.counting_verdicts_by_others(db, item_id, reviewer, before=held[0]) < wanted
    )


def undo(
    workspace: Workspace, reviewer: str, idempotency_key: str, settings: ReviewConfig | None = None
) -> SubmitResult | None:
    """Take back the reviewer's own last verdict and lease its item back to them, so that the next item they get is
    the one they undid (then the one they were holding); None when there is nothing to take back. The item is not
    leased back while another reviewer holds it: their verdict keeps its place (the undone one is still taken
    back). A key already used for another request (another reviewer's, or a verdict's) is refused."""
    settings = settings or ReviewConfig()
    reviewer = reviewer_name(reviewer)
    with workspace.transaction() as db:
        seen = store.verdict_by_key(db, idempotency_key)
        if seen is not None:
            if seen.reviewer != reviewer or seen.action != "undo":
                raise ReviewConflictError(
                    f"idempotency key {idempotency_key!r} was used for another request: nothing was undone; send "
                    "each undo with a key of its own"
                )
            return SubmitResult(seen, created=False)
        last = store.last_effective_verdict(db, reviewer)
        if last is None:
            return None
        if last.judgment_id is not None:
            taken = next(rows.iter_judgments_by_id(db, [last.judgment_id]))
            rows.add_judgments(db, [taken.model_copy(update={
                "judgment_id": "undo-" + last.judgment_id, "status": JudgmentStatus.withdrawn,
                "supersedes": last.judgment_id, "created_at": datetime.now(UTC),
            })])  # fmt: skip
        verdict = store.Verdict(
            _verdict_id(idempotency_key), last.item_id, reviewer, "undo", None, None, None, None, None,
            last.verdict_id, idempotency_key, None, utc_timestamp(),
        )  # fmt: skip
        store.add_verdict(db, verdict)
        if not store.leases_by_others(db, last.item_id, reviewer, verdict.created_at):
            store.lease(db, last.item_id, reviewer, verdict.created_at, _later(verdict.created_at, settings.lease_s))
    return SubmitResult(verdict, created=True)


@dataclass
class ReviewStats:
    total: int = 0
    done: int = 0
    leased: int = 0
    remaining: int = 0
    verdicts: int = 0  # counting verdicts given, each item's up to as many as it wants
    verdicts_wanted: int = 0  # what every item wants in all (overlap counted)
    per_reviewer: dict[str, dict[str, int]] = field(default_factory=dict)
    release_waits_for: int = 0  # items `run` waits for before it releases: drawn pairs and gating questions
    release_waiting: int = 0  # of them, those no reviewer has answered yet

    def given_by(self, reviewer: str) -> int:
        return sum(self.per_reviewer.get(reviewer, {}).values())

    def as_dict(self) -> dict:
        return asdict(self) | {"release_status": self.release_words()}

    def release_words(self, command: str = "testset-builder run") -> str:
        """What the progress line says of the items the release waits for ('' when it waits for none); ``command``:
        the run to start again (the terminal reviewer names its config)."""
        if not self.release_waits_for:
            return ""
        if not self.release_waiting:
            return (
                f"all {self.release_waits_for} items the release waits for are answered: run `{command}` "
                "again (what is left is optional)"
            )
        return f"{self.release_waiting} of the {self.release_waits_for} items the release waits for still to answer"


def stats(workspace: Workspace, settings: ReviewConfig | None = None) -> ReviewStats:
    settings = settings or ReviewConfig()
    db = workspace.db
    counts = store.queue_counts(db, utc_timestamp(), workspace_overlap(workspace, settings))
    gate = policy.release_gate(db) if settings.questions is not False else {}
    return ReviewStats(
        **counts,
        per_reviewer=store.verdicts_per_reviewer(db),
        release_waits_for=draws.drawn_pairs(db) + len(gate),
        release_waiting=draws.waiting_pairs(db) + sum(not answered for answered in gate.values()),
    )


def agreement(workspace: Workspace, adjudicator: str | None = None) -> dict:
    """The review's agreement figures (:func:`~testset_builder.labels.policy.agreement`) over every pair humans
    graded, ties resolved towards ``adjudicator``."""
    from ...config import ReleaseConfig

    return policy.agreement(list(rows.iter_judgments(workspace.db)), ReleaseConfig(adjudicator=adjudicator))


def lead_overview(workspace: Workspace, settings: ReviewConfig | None = None) -> dict:
    """What a review's lead watches, for the lead's page: ``stats`` (progress, :func:`stats`), ``reviewers`` (each
    one's verdicts, settlements and token, :func:`reviewers`), ``agreement`` (per pair of reviewers, alpha, over the
    independent grades; settlements apart, :func:`agreement`), and ``open``, the disagreements left with each
    reviewer's grade and what they said (comments), the query's text and the chunk's id."""
    db = workspace.db
    report = agreement(workspace)
    said = store.comments_on(db, [store.pair_item_id(d["query_id"], d["chunk_id"]) for d in report["disagreements"]])
    open_ = []
    for found in report["disagreements"]:
        item_id = store.pair_item_id(found["query_id"], found["chunk_id"])
        comments = [{"reviewer": r, "action": a, "comment": c, "at": at} for r, a, c, at in said.get(item_id, [])]
        query = rows.get_query(db, found["query_id"]).text
        open_.append({**found, "item_id": item_id, "query": query, "comments": comments})
    return {"stats": stats(workspace, settings), "reviewers": reviewers(workspace), "agreement": report, "open": open_}


def disagreements(workspace: Workspace) -> set[str]:
    """The pair items whose reviewers stand by different grades and no admin settled yet: the adjudicator's
    queue."""
    return set(disagreements_graded(workspace))


def disagreements_graded(workspace: Workspace) -> dict[str, dict[str, int]]:
    """:func:`disagreements` with each reviewer's standing grade on the item."""
    judgments = list(rows.iter_judgments(workspace.db))
    graded, settled = policy.reviewer_grades(judgments), policy.adjudications(judgments)
    return {
        store.pair_item_id(q, c): by
        for (q, c), by in graded.items()
        if len(set(by.values())) > 1 and (q, c) not in settled
    }


@dataclass
class TagResult:
    tag: tag_store.FailureTag
    created: bool  # False when the idempotency key was seen before: nothing new was stored

    def as_dict(self) -> dict:
        return {**asdict(self.tag), "created": self.created}


def _tag_id(key: str) -> str:
    return "t-" + hashlib.sha256(key.encode()).hexdigest()[:24]


def tag_failure(
    workspace: Workspace,
    reviewer: str,
    query_id: str,
    tag: str,
    idempotency_key: str,
    comment: str | None = None,
    seconds: float | None = None,
) -> TagResult:
    """Tag a logged query's failure (one of :data:`FAILURE_TAGS`); it supersedes this reviewer's earlier tag on the
    query. The same idempotency key again returns the stored tag and stores nothing."""
    reviewer = reviewer_name(reviewer)
    _check_key(idempotency_key, "a tag")
    _check_seconds(seconds)
    with workspace.transaction() as db:
        seen = tag_store.tag_by_key(db, idempotency_key)
        if seen is not None:
            _same_tag_request(seen, reviewer, query_id, idempotency_key, undo=False)
            return TagResult(seen, created=False)
        if tag not in FAILURE_TAGS:
            raise InputError(f"unknown failure tag {tag!r}; use one of {', '.join(FAILURE_TAGS)}")
        if not tag_store.is_logged(db, query_id):
            raise UnknownIdError("logged query", query_id)
        before = tag_store.standing_tag(db, query_id, reviewer)
        stored = tag_store.FailureTag(
            _tag_id(idempotency_key), query_id, reviewer, tag, before.tag_id if before else None, comment or None,
            idempotency_key, seconds, utc_timestamp(),
        )  # fmt: skip
        tag_store.add_tag(db, stored)
    return TagResult(stored, created=True)


def _check_seconds(seconds: float | None) -> None:
    """The time a reviewer spent: a finite number of seconds, 0 or more (NaN would be stored, then fail to show)."""
    if seconds is not None and not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds >= 0):
        raise InputError(f"seconds is the time spent on the item, 0 or more, not {seconds!r}")


def _same_tag_request(seen, reviewer: str, query_id: str, idempotency_key: str, undo: bool) -> None:
    """A key seen before is the same request again only from the same reviewer, on the same query, of the same
    kind (a tag or its undo); anything else is refused, showing nothing of what the key stored."""
    if (seen.reviewer, seen.query_id, seen.tag is None) != (reviewer, query_id, undo):
        raise ReviewConflictError(
            f"idempotency key {idempotency_key!r} was used for another request: nothing was stored; send each with a "
            "key of its own"
        )


def untag_failure(workspace: Workspace, reviewer: str, query_id: str, idempotency_key: str) -> TagResult | None:
    """Take back this reviewer's standing tag on the query (their tag before it stands again); None when they
    have none. The same idempotency key again returns the stored undo."""
    reviewer = reviewer_name(reviewer)
    _check_key(idempotency_key, "a tag")
    with workspace.transaction() as db:
        seen = tag_store.tag_by_key(db, idempotency_key)
        if seen is not None:
            _same_tag_request(seen, reviewer, query_id, idempotency_key, undo=True)
            return TagResult(seen, created=False)
        standing = tag_store.standing_tag(db, query_id, reviewer)
        if standing is None:
            return None
        undone = tag_store.FailureTag(
            _tag_id(idempotency_key), query_id, reviewer, None, standing.tag_id, None, idempotency_key, None,
            utc_timestamp(),
        )  # fmt: skip
        tag_store.add_tag(db, undone)
    return TagResult(undone, created=True)


def failure_tag_stats(workspace: Workspace, adjudicator: str | None = None) -> dict:
    """The failure-tag split for ``review-stats``: logged queries, how many are tagged, the resolved tag's counts
    (:func:`~testset_builder.labels.policy.resolved_failure_tags`, ties towards ``adjudicator``), and how far
    reviewers agree where two or more tagged one query: the share of those queries all tagged alike, the share of
    reviewer pairs agreeing, and for each pair of reviewers their shared queries, agreement and Cohen's kappa."""
    db = workspace.db
    standing = tag_store.standing_tags(db)
    resolved = policy.resolve_failure_tags(standing, adjudicator)
    tags = {query_id: {r: t.tag for r, t in by.items()} for query_id, by in standing.items()}
    multi = {query_id: by for query_id, by in tags.items() if len(by) >= 2}
    pairwise, pairs_agreeing = pairwise_agreement(multi, "kappa", cohen_kappa)
    return {
        "logged_queries": tag_store.logged_query_count(db),
        "tagged": len(resolved),
        "tags": sum(len(by) for by in tags.values()),
        "split": {tag: sum(t == tag for t in resolved.values()) for tag in FAILURE_TAGS},
        "agreement": {
            "queries": len(multi),
            "unanimous": sum(len(set(by.values())) == 1 for by in multi.values()) / len(multi) if multi else None,
            "pairwise_agreement": pairs_agreeing,
            "pairwise": pairwise,
            "disagreements": [
                {"query_id": q, "tags": by} for q, by in sorted(multi.items()) if len(set(by.values())) > 1
            ],
        },
    }
