"""The review queue in the workspace: items, leases and the verdict log.

An item is a (query, chunk) pair or a synthetic question, with a priority (it can only rise), a reason and a wanted
overlap (how many distinct reviewers should give it a verdict). A lease hands an item to one reviewer until it
expires; an expired lease simply stops counting. Verdicts are append-only: an undo is a verdict that names the one
it takes back. A verdict "counts" when its action does (:mod:`~testset_builder.review_actions`: a skip does not)
and nobody undid it. ``review_state`` holds each reviewer's standing verdict per item, kept in step with the log in
the same transaction, so serving work stays fast however long the log grows.

Writes take an open transaction's connection (``BEGIN IMMEDIATE``, see
:meth:`~testset_builder.store.Workspace.transaction`), so two reviewers asking for work at once are served one
after the other and never get the same last slot.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

from ..review_actions import counts
from .migrations import pair_item_id, question_item_id

__all__ = ["pair_item_id", "question_item_id"]


@dataclass(frozen=True)
class QueuedItem:
    item_id: str
    kind: str
    query_id: str
    chunk_id: str | None
    priority: float
    reason: str
    wanted_overlap: int


def enqueue(db: sqlite3.Connection, items: Iterable[QueuedItem], created_at: str) -> int:
    """Queue items; one already queued keeps its place unless the new priority is higher (an audit disagreement
    lifts an item), and its wanted overlap only grows. Returns how many were new."""
    before = db.execute("SELECT COUNT(*) FROM review_items").fetchone()[0]
    db.executemany(
        "INSERT INTO review_items (item_id, kind, query_id, chunk_id, priority, reason, wanted_overlap, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(item_id) DO UPDATE SET "
        "reason = CASE WHEN excluded.priority > review_items.priority THEN excluded.reason "
        "ELSE review_items.reason END, "
        "priority = MAX(review_items.priority, excluded.priority), "
        "wanted_overlap = MAX(review_items.wanted_overlap, excluded.wanted_overlap)",
        [
            (i.item_id, i.kind, i.query_id, i.chunk_id, i.priority, i.reason, i.wanted_overlap, created_at)
            for i in items
        ],
    )
    return db.execute("SELECT COUNT(*) FROM review_items").fetchone()[0] - before


def reorder_pairs(db: sqlite3.Connection, priorities: dict[tuple[str, str], float], below: float) -> int:
    """Set the priority of each queued (query, chunk) pair item whose priority is under ``below`` (neither drawn
    for review nor lifted by an audit disagreement): the estimate re-orders the rest of the queue as it refits.
    Returns how many items moved."""
    moved = 0
    for (query_id, chunk_id), priority in priorities.items():
        moved += db.execute(
            "UPDATE review_items SET priority = ? WHERE item_id = ? AND kind = 'pair' AND priority < ? "
            "AND priority != ?",
            (priority, pair_item_id(query_id, chunk_id), below, priority),
        ).rowcount
    return moved


DRAWN_FOR_REVIEW = "drawn for review"  # how a drawn pair's reason begins: what select writes and reads back


def demote_earlier_draws(db: sqlite3.Connection, priorities: dict[tuple[str, str], float], reason: str) -> int:
    """Move each queued pair item an earlier round drew (its reason says so) to ``priorities``' value and ``reason``:
    for the pairs a new round considered and did not draw. Returns how many moved."""
    moved = 0
    for (query_id, chunk_id), priority in priorities.items():
        moved += db.execute(
            "UPDATE review_items SET priority = ?, reason = ? WHERE item_id = ? AND kind = 'pair' "
            "AND reason LIKE ? || '%'",
            (priority, reason, pair_item_id(query_id, chunk_id), DRAWN_FOR_REVIEW),
        ).rowcount
    return moved


def item(db: sqlite3.Connection, item_id: str) -> QueuedItem | None:
    row = db.execute(
        "SELECT item_id, kind, query_id, chunk_id, priority, reason, wanted_overlap FROM review_items "
        "WHERE item_id = ?",
        (item_id,),
    ).fetchone()
    return QueuedItem(*row) if row else None


def queued_items(db: sqlite3.Connection, limit: int | None = None, kind: str | None = None) -> list[QueuedItem]:
    """Items, highest priority first (ties by id, so the order is stable)."""
    sql = "SELECT item_id, kind, query_id, chunk_id, priority, reason, wanted_overlap FROM review_items"
    args: tuple = ()
    if kind:
        sql, args = sql + " WHERE kind = ?", (kind,)
    sql += " ORDER BY priority DESC, item_id" + (f" LIMIT {int(limit)}" if limit else "")
    return [QueuedItem(*row) for row in db.execute(sql, args)]


def pending_items(db: sqlite3.Connection, overlap: int = 1, kind: str = "pair") -> list[QueuedItem]:
    """Items of ``kind`` with fewer counting verdicts than wanted (the item's overlap, or ``overlap`` when larger),
    highest priority first."""
    sql = (
        "SELECT i.item_id, i.kind, i.query_id, i.chunk_id, i.priority, i.reason, i.wanted_overlap FROM review_items i "
        "WHERE i.kind = ? AND (SELECT COUNT(*) FROM review_state s WHERE s.item_id = i.item_id AND s.counting = 1) "
        "< MAX(i.wanted_overlap, ?) ORDER BY i.priority DESC, i.item_id"
    )
    return [QueuedItem(*row) for row in db.execute(sql, (kind, overlap))]


def counting_verdicts_by_others(db: sqlite3.Connection, item_id: str, reviewer: str, before: str | None = None) -> int:
    """Reviewers other than this one whose standing verdict on the item counts towards its overlap (given no later
    than ``before``, when given)."""
    return db.execute(
        "SELECT COUNT(*) FROM review_state WHERE item_id = ? AND reviewer != ? AND counting = 1 "
        "AND (? IS NULL OR created_at <= ?)",
        (item_id, reviewer, before, before),
    ).fetchone()[0]


def leases_by_others(db: sqlite3.Connection, item_id: str, reviewer: str, now: str) -> list[tuple[str, str]]:
    """Other reviewers' live leases on the item that they have not answered: (reviewer, expires_at), soonest
    expiry first."""
    return db.execute(
        "SELECT l.reviewer, l.expires_at FROM review_leases l WHERE l.item_id = ? AND l.reviewer != ? "
        "AND l.expires_at > ? AND NOT EXISTS (SELECT 1 FROM review_state s WHERE s.item_id = l.item_id "
        "AND s.reviewer = l.reviewer) ORDER BY l.expires_at",
        (item_id, reviewer, now),
    ).fetchall()


def verdict_count(db: sqlite3.Connection, item_id: str, reviewer: str) -> int:
    """Verdicts (undos included) this reviewer has given on this item."""
    return db.execute(
        "SELECT COUNT(*) FROM review_verdicts WHERE item_id = ? AND reviewer = ?", (item_id, reviewer)
    ).fetchone()[0]


def queue_size(db: sqlite3.Connection, kind: str | None = None) -> int:
    if kind:
        return db.execute("SELECT COUNT(*) FROM review_items WHERE kind = ?", (kind,)).fetchone()[0]
    return db.execute("SELECT COUNT(*) FROM review_items").fetchone()[0]


def held_lease(db: sqlite3.Connection, reviewer: str, now: str) -> QueuedItem | None:
    """The item this reviewer holds an unexpired lease on and has not answered (a reload gets the same item)."""
    row = db.execute(
        "SELECT i.item_id, i.kind, i.query_id, i.chunk_id, i.priority, i.reason, i.wanted_overlap "
        "FROM review_leases l JOIN review_items i USING (item_id) WHERE l.reviewer = ? AND l.expires_at > ? "
        "AND NOT EXISTS (SELECT 1 FROM review_state s WHERE s.item_id = i.item_id AND s.reviewer = l.reviewer) "
        "ORDER BY l.leased_at DESC LIMIT 1",
        (reviewer, now),
    ).fetchone()
    return QueuedItem(*row) if row else None


# an item ``i`` has room for a reviewer's verdict: other reviewers' counting verdicts and live leases stay under its
# wanted overlap (the item's, or the one asked for when larger); its parameters: _room_args
_ROOM = (
    "(SELECT COUNT(*) FROM review_state c WHERE c.item_id = i.item_id AND c.counting = 1 AND c.reviewer != ?) "
    "+ (SELECT COUNT(*) FROM review_leases l WHERE l.item_id = i.item_id AND l.expires_at > ? AND l.reviewer != ?) "
    "< MAX(i.wanted_overlap, ?)"
)


def _room_args(reviewer: str, now: str, overlap: int) -> tuple:
    return (reviewer, now, reviewer, overlap)


def next_free(
    db: sqlite3.Connection,
    reviewer: str,
    now: str,
    kinds: tuple[str, ...],
    dropped: set[str],
    overlap: int = 1,
    only: set[str] | None = None,
    near_query: str | None = None,
    skipped: bool = False,
) -> QueuedItem | None:
    """The highest-priority item of ``kinds`` this reviewer has neither answered nor skipped, whose counting
    verdicts and other reviewers' live leases leave room under its wanted overlap (the item's, or ``overlap`` when
    larger); questions in ``dropped`` (and their pairs) are passed over. With ``only``, just those items, whatever
    their overlap (an adjudicator settles items others already graded). With ``near_query``, an item of that query
    comes first when one is in the same band of priority (the same whole part) as the highest: a reviewer reads one
    query's chunks together, and what was drawn or lifted for review still comes before the rest. With ``skipped``,
    the items this reviewer skipped (and others left room on) instead, the oldest skip first."""
    placeholders = ",".join("?" * len(kinds))
    columns = "i.item_id, i.kind, i.query_id, i.chunk_id, i.priority, i.reason, i.wanted_overlap"
    unanswered = "NOT EXISTS (SELECT 1 FROM review_state s WHERE s.item_id = i.item_id AND s.reviewer = ?)"
    if skipped:  # the oldest skip first: skipping one again sends it to the back
        sql = (
            f"SELECT {columns} FROM review_items i JOIN review_state s ON s.item_id = i.item_id AND s.reviewer = ? "
            f"AND s.action = 'skip' WHERE i.kind IN ({placeholders}) AND {_ROOM} ORDER BY s.created_at, i.item_id"
        )
        for row in db.execute(sql, (reviewer, *kinds, *_room_args(reviewer, now, overlap))):
            if row[2] not in dropped:
                return QueuedItem(*row)
        return None
    if only is not None:
        sql = (
            f"SELECT {columns} FROM review_items i WHERE i.kind IN ({placeholders}) AND {unanswered} "
            "ORDER BY i.priority DESC, i.item_id"
        )
        for row in db.execute(sql, (*kinds, reviewer)):
            if row[0] in only and row[2] not in dropped:
                return QueuedItem(*row)
        return None
    free = f"i.kind IN ({placeholders}) AND {unanswered} AND {_ROOM}"
    args = (*kinds, reviewer, *_room_args(reviewer, now, overlap))
    best = None
    ordered = f"SELECT {columns} FROM review_items i WHERE {free} ORDER BY i.priority DESC, i.item_id"
    for row in db.execute(ordered, args):
        if row[2] not in dropped:
            best = QueuedItem(*row)
            break
    if best is None or near_query is None or best.query_id == near_query or near_query in dropped:
        return best
    sql = (
        f"SELECT {columns} FROM review_items i WHERE i.query_id = ? AND i.priority >= ? AND {free} "
        "ORDER BY i.priority DESC, i.item_id LIMIT 1"
    )
    row = db.execute(sql, (near_query, float(int(best.priority)), *args)).fetchone()
    return QueuedItem(*row) if row else best


def has_room(db: sqlite3.Connection, item_id: str, reviewer: str, now: str, overlap: int) -> bool:
    """Whether the item still wants a verdict from this reviewer: others' counting verdicts and live leases leave
    room under its wanted overlap (as :func:`next_free` asks)."""
    sql = f"SELECT {_ROOM} FROM review_items i WHERE i.item_id = ?"
    return bool(db.execute(sql, (*_room_args(reviewer, now, overlap), item_id)).fetchone()[0])


def soonest_lease_end(
    db: sqlite3.Connection,
    reviewer: str,
    now: str,
    kinds: tuple[str, ...],
    overlap: int = 1,
    dropped: set[str] = frozenset(),
) -> str | None:
    """The soonest end of another reviewer's live lease on an item this reviewer has not answered and that still
    wants verdicts: when one may come back to them. Items of questions in ``dropped`` never come back (the queue
    passes them over), so their leases do not count."""
    placeholders = ",".join("?" * len(kinds))
    rows = db.execute(
        "SELECT l.expires_at, i.query_id FROM review_leases l JOIN review_items i USING (item_id) "
        f"WHERE l.expires_at > ? AND l.reviewer != ? AND i.kind IN ({placeholders}) "
        "AND NOT EXISTS (SELECT 1 FROM review_state s WHERE s.item_id = i.item_id AND s.reviewer = ?) "
        "AND (SELECT COUNT(*) FROM review_state s WHERE s.item_id = i.item_id AND s.counting = 1) "
        "< MAX(i.wanted_overlap, ?) ORDER BY l.expires_at",
        (now, reviewer, *kinds, reviewer, overlap),
    )
    return next((expires for expires, query_id in rows if query_id not in dropped), None)


def last_query_of(db: sqlite3.Connection, reviewer: str) -> str | None:
    """The query of the item this reviewer answered last (any verdict)."""
    row = db.execute(
        "SELECT i.query_id FROM review_verdicts v JOIN review_items i USING (item_id) WHERE v.reviewer = ? "
        "ORDER BY v.created_at DESC, v.verdict_id DESC LIMIT 1",
        (reviewer,),
    ).fetchone()
    return row[0] if row else None


def lease(db: sqlite3.Connection, item_id: str, reviewer: str, now: str, expires_at: str) -> None:
    db.execute(
        "INSERT INTO review_leases (item_id, reviewer, leased_at, expires_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(item_id, reviewer) DO UPDATE SET leased_at = excluded.leased_at, expires_at = excluded.expires_at",
        (item_id, reviewer, now, expires_at),
    )


def release_lease(db: sqlite3.Connection, item_id: str, reviewer: str) -> None:
    db.execute("DELETE FROM review_leases WHERE item_id = ? AND reviewer = ?", (item_id, reviewer))


def release_leases_of(db: sqlite3.Connection, reviewer: str) -> int:
    """Drop every lease this reviewer holds; returns how many."""
    return db.execute("DELETE FROM review_leases WHERE reviewer = ?", (reviewer,)).rowcount


def lease_times(db: sqlite3.Connection, item_id: str, reviewer: str) -> tuple[str, str] | None:
    """(leased_at, expires_at) of this reviewer's lease on the item, if any."""
    row = db.execute(
        "SELECT leased_at, expires_at FROM review_leases WHERE item_id = ? AND reviewer = ?", (item_id, reviewer)
    ).fetchone()
    return (row[0], row[1]) if row else None


def lease_expiry(db: sqlite3.Connection, item_id: str, reviewer: str) -> str | None:
    held = lease_times(db, item_id, reviewer)
    return held[1] if held else None


@dataclass(frozen=True)
class Verdict:
    verdict_id: str
    item_id: str
    reviewer: str
    action: str
    grade: int | None
    reason: str | None
    comment: str | None
    edited_text: str | None
    judgment_id: str | None
    undoes: str | None
    idempotency_key: str
    seconds: float | None
    created_at: str
    source_at: str | None = None  # imported: when the annotator gave it, by their tool's export (UTC)

    @property
    def given_at(self) -> str:
        """When the reviewer gave it: the source's time for an imported verdict, else when it was stored."""
        return self.source_at or self.created_at


_VERDICT_COLUMNS = (
    "verdict_id, item_id, reviewer, action, grade, reason, comment, edited_text, judgment_id, undoes, "
    "idempotency_key, seconds, created_at, source_at"
)
_VERDICT_FIELDS = len(_VERDICT_COLUMNS.split(","))


def verdict_by_key(db: sqlite3.Connection, idempotency_key: str) -> Verdict | None:
    row = db.execute(
        f"SELECT {_VERDICT_COLUMNS} FROM review_verdicts WHERE idempotency_key = ?", (idempotency_key,)
    ).fetchone()
    return Verdict(*row) if row else None


def add_verdict(db: sqlite3.Connection, verdict: Verdict) -> None:
    """Append a verdict and bring the reviewer's standing on the item in step (an undo brings back what stood
    before the verdict it takes back)."""
    db.execute(
        f"INSERT INTO review_verdicts ({_VERDICT_COLUMNS}) VALUES ({', '.join('?' * _VERDICT_FIELDS)})",
        (
            verdict.verdict_id, verdict.item_id, verdict.reviewer, verdict.action, verdict.grade, verdict.reason,
            verdict.comment, verdict.edited_text, verdict.judgment_id, verdict.undoes, verdict.idempotency_key,
            verdict.seconds, verdict.created_at, verdict.source_at,
        ),
    )  # fmt: skip
    _restate(db, verdict.item_id, verdict.reviewer)


def _restate(db: sqlite3.Connection, item_id: str, reviewer: str) -> None:
    """The reviewer's standing verdict on the item: their latest one nobody undid. An adjudication is not one (it
    settles the item; an admin who also graded it still stands by their grade)."""
    latest = db.execute(
        "SELECT v.verdict_id, v.action, v.created_at FROM review_verdicts v WHERE v.item_id = ? AND v.reviewer = ? "
        "AND v.action NOT IN ('undo', 'adjudicate') "
        "AND NOT EXISTS (SELECT 1 FROM review_verdicts u WHERE u.undoes = v.verdict_id) "
        "ORDER BY v.created_at DESC, v.verdict_id DESC LIMIT 1",
        (item_id, reviewer),
    ).fetchone()
    db.execute("DELETE FROM review_state WHERE item_id = ? AND reviewer = ?", (item_id, reviewer))
    if latest is not None:
        verdict_id, action, created_at = latest
        db.execute(
            "INSERT INTO review_state (item_id, reviewer, verdict_id, action, counting, created_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (item_id, reviewer, verdict_id, action, int(counts(action)), created_at),
        )


def last_effective_verdict(db: sqlite3.Connection, reviewer: str) -> Verdict | None:
    """This reviewer's latest verdict that nobody undid (what "undo" takes back)."""
    row = db.execute(
        f"SELECT {_VERDICT_COLUMNS} FROM review_verdicts v WHERE v.reviewer = ? AND v.action != 'undo' "
        "AND NOT EXISTS (SELECT 1 FROM review_verdicts u WHERE u.undoes = v.verdict_id) "
        "ORDER BY v.created_at DESC, v.verdict_id DESC LIMIT 1",
        (reviewer,),
    ).fetchone()
    return Verdict(*row) if row else None


def effective_verdicts(db: sqlite3.Connection, kind: str | None = None) -> list[tuple[Verdict, QueuedItem]]:
    """Each reviewer's standing verdict per item (counting or skip), with its item, oldest first."""
    columns = ", ".join(f"v.{c.strip()}" for c in _VERDICT_COLUMNS.split(","))
    sql = (
        f"SELECT {columns}, i.item_id, i.kind, i.query_id, i.chunk_id, i.priority, i.reason, i.wanted_overlap "
        "FROM review_state s JOIN review_verdicts v USING (verdict_id) JOIN review_items i ON i.item_id = s.item_id"
    )
    args: tuple = ()
    if kind:
        sql, args = sql + " WHERE i.kind = ?", (kind,)
    rows = db.execute(sql + " ORDER BY v.created_at, v.verdict_id", args).fetchall()
    return [(Verdict(*row[:_VERDICT_FIELDS]), QueuedItem(*row[_VERDICT_FIELDS:])) for row in rows]


def edited_query_id(query_id: str, text: str) -> str:
    """The id of the query a question's edit makes (derived, so the same edit is the same query)."""
    return "e-" + hashlib.sha256(f"{query_id}\x00{' '.join(text.split())}".encode()).hexdigest()[:16]


def dropped_queries(db: sqlite3.Connection) -> set[str]:
    """Query ids the reviewers dropped or edited away, and edited versions whose edit was undone. Each reviewer's
    latest question verdict is a vote (keep against drop or edit); the majority wins, a tie goes to the latest."""
    latest: dict[str, dict[str, Verdict]] = {}
    for verdict, queued in effective_verdicts(db, kind="question"):
        if verdict.action != "skip":
            latest.setdefault(queued.query_id, {})[verdict.reviewer] = verdict
    dropped = set()
    for query_id, by_reviewer in latest.items():
        away = sum(v.action != "keep_question" for v in by_reviewer.values())
        newest = max(by_reviewer.values(), key=lambda v: (v.created_at, v.verdict_id))
        if away * 2 > len(by_reviewer) or (away * 2 == len(by_reviewer) and newest.action != "keep_question"):
            dropped.add(query_id)
    standing = {v.verdict_id for v, _ in effective_verdicts(db, kind="question")}
    sql = (
        "SELECT v.verdict_id, i.query_id, v.edited_text FROM review_verdicts v JOIN review_items i USING (item_id) "
        "WHERE v.action = 'edit_question'"
    )
    for verdict_id, query_id, text in db.execute(sql):
        if verdict_id not in standing:
            dropped.add(edited_query_id(query_id, text))
    return dropped


def queue_counts(db: sqlite3.Connection, now: str, overlap: int = 1) -> dict[str, int]:
    """Items in all, done (as many counting verdicts as wanted), leased now, and remaining; and verdicts: those
    given that count (each item's up to as many as it wants) of all the items want (overlap counted)."""
    total, done, given, wanted = db.execute(
        "SELECT COUNT(*), COALESCE(SUM(n >= w), 0), COALESCE(SUM(MIN(n, w)), 0), COALESCE(SUM(w), 0) FROM "
        "(SELECT MAX(i.wanted_overlap, ?) AS w, (SELECT COUNT(*) FROM review_state s WHERE s.item_id = i.item_id "
        "AND s.counting = 1) AS n FROM review_items i)",
        (overlap,),
    ).fetchone()
    leased = db.execute("SELECT COUNT(DISTINCT item_id) FROM review_leases WHERE expires_at > ?", (now,)).fetchone()[0]
    return {
        "total": total, "done": done, "leased": leased, "remaining": total - done, "verdicts": given,
        "verdicts_wanted": wanted,
    }  # fmt: skip


def verdicts_per_reviewer(db: sqlite3.Connection) -> dict[str, dict[str, int]]:
    """Standing verdicts per reviewer and action."""
    out: dict[str, dict[str, int]] = {}
    for reviewer, action, n in db.execute(
        "SELECT reviewer, action, COUNT(*) FROM review_state GROUP BY reviewer, action"
    ):
        out.setdefault(reviewer, {})[action] = n
    return out


def kept_queries(db: sqlite3.Connection) -> set[str]:
    """Query ids a reviewer kept as questions (a standing keep verdict) and not dropped by the majority."""
    kept = {
        queued.query_id
        for verdict, queued in effective_verdicts(db, kind="question")
        if verdict.action == "keep_question"
    }
    return kept - dropped_queries(db)


def edited_questions(db: sqlite3.Connection) -> set[str]:
    """The questions a reviewer's edit made (each names the question it was edited from)."""
    return {
        row[0]
        for row in db.execute(
            "SELECT query_id FROM queries WHERE origin = 'synthetic' "
            "AND json_extract(metadata, '$.edited_from') IS NOT NULL"
        )
    }


def queued_questions(db: sqlite3.Connection, reason: str = "") -> dict[str, bool]:
    """Each question queued for review (those whose reason starts with ``reason``): whether a reviewer has answered
    it (keep, drop or edit; a skip does not count). Indexed: the review page asks on every item."""
    return {
        query_id: bool(answered)
        for query_id, answered in db.execute(
            "SELECT i.query_id, EXISTS (SELECT 1 FROM review_state s WHERE s.item_id = i.item_id AND s.counting = 1) "
            "FROM review_items i WHERE i.kind = 'question' AND i.reason LIKE ? || '%' ORDER BY 1",
            (reason,),
        )
    }


def reviewed_questions(db: sqlite3.Connection) -> set[str]:
    """The synthetic questions a reviewer has answered (:func:`queued_questions`), or a reviewer's edit made."""
    return {query_id for query_id, answered in queued_questions(db).items() if answered} | edited_questions(db)


def doubted_questions(db: sqlite3.Connection) -> dict[str, bool]:
    """Each question queued as doubted (its reason starts ``doubted:``, see stages/synthesize/doubt.py): whether a
    reviewer has answered it."""
    return queued_questions(db, "doubted:")


def set_reviewer_token(db: sqlite3.Connection, reviewer: str, token_sha256: str, role: str, now: str) -> None:
    """Give ``reviewer`` this token (a new one replaces the old, which stops working)."""
    db.execute(
        "INSERT INTO reviewer_tokens (reviewer, token_sha256, role, created_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(reviewer) DO UPDATE SET token_sha256 = excluded.token_sha256, role = excluded.role, "
        "created_at = excluded.created_at",
        (reviewer, token_sha256, role, now),
    )


def reviewer_of_token(db: sqlite3.Connection, token_sha256: str) -> tuple[str, str] | None:
    """(reviewer, role) holding the token with this SHA-256, if any."""
    row = db.execute("SELECT reviewer, role FROM reviewer_tokens WHERE token_sha256 = ?", (token_sha256,)).fetchone()
    return (row[0], row[1]) if row else None


def reviewers_with_tokens(db: sqlite3.Connection) -> list[tuple[str, str]]:
    return db.execute("SELECT reviewer, role FROM reviewer_tokens ORDER BY reviewer").fetchall()


def review_setting(db: sqlite3.Connection, key: str) -> str | None:
    row = db.execute("SELECT value FROM review_settings WHERE key = ?", (key,)).fetchone()
    return row[0] if row else None


def set_review_setting(db: sqlite3.Connection, key: str, value: str, now: str) -> None:
    db.execute(
        "INSERT INTO review_settings (key, value, set_at) VALUES (?, ?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value, set_at = excluded.set_at",
        (key, value, now),
    )


def review_settings_under(db: sqlite3.Connection, prefix: str) -> dict[str, str]:
    """Every review setting whose key starts with ``prefix``, by the rest of its key."""
    return {
        key[len(prefix) :]: value
        for key, value in db.execute(
            "SELECT key, value FROM review_settings WHERE substr(key, 1, ?) = ?", (len(prefix), prefix)
        )
    }


def verdicts_by(db: sqlite3.Connection, reviewer: str) -> int:
    return db.execute("SELECT COUNT(*) FROM review_verdicts WHERE reviewer = ?", (reviewer,)).fetchone()[0]


def live_leases_of_others(db: sqlite3.Connection, reviewer: str, now: str) -> set[str]:
    """Items another reviewer holds a live lease on."""
    return {
        row[0]
        for row in db.execute(
            "SELECT DISTINCT item_id FROM review_leases WHERE reviewer != ? AND expires_at > ?", (reviewer, now)
        )
    }


def comments_on(db: sqlite3.Connection, item_ids: Iterable[str]) -> dict[str, list[tuple[str, str, str, str]]]:
    """The comments given with verdicts on these items (undone ones too: what was said stays said), oldest first:
    item id -> [(reviewer, action, comment, created_at)]."""
    wanted, out = set(item_ids), {}
    for item_id, reviewer, action, comment, created_at in db.execute(
        "SELECT item_id, reviewer, action, comment, created_at FROM review_verdicts WHERE comment IS NOT NULL "
        "AND comment != '' ORDER BY created_at, verdict_id"
    ):
        if item_id in wanted:
            out.setdefault(item_id, []).append((reviewer, action, comment, created_at))
    return out
