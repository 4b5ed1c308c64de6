"""Failure tags on logged queries, and what a reviewer is shown of the live system's run (migration 13).

A reviewer tags each logged query once: what went wrong in production. The tags are append-only, as the verdicts
are: a new tag by the same reviewer names the one it replaces (``supersedes``) and stands from then on; an undo is a
row without a tag that names the tag it takes back, and the reviewer's tag before that one stands again. A
reviewer's *standing* tag is their latest tag that no undo took back. How the standing tags of several reviewers
resolve into one per query is the release policy's business
(:func:`~testset_builder.labels.policy.resolved_failure_tags`).

Writes take an open transaction's connection (see :meth:`~testset_builder.store.Workspace.transaction`).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

FAILURE_TAGS = ("retrieval", "generation", "none", "unanswerable")


@dataclass(frozen=True)
class FailureTag:
    tag_id: str
    query_id: str
    reviewer: str
    tag: str | None  # None: an undo, taking back the tag it supersedes
    supersedes: str | None
    comment: str | None
    idempotency_key: str
    seconds: float | None
    created_at: str


_COLUMNS = "tag_id, query_id, reviewer, tag, supersedes, comment, idempotency_key, seconds, created_at"
_STANDING = (
    f"SELECT {_COLUMNS} FROM failure_tags t WHERE t.tag IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM failure_tags u WHERE u.tag IS NULL AND u.supersedes = t.tag_id)"
)


def tag_by_key(db: sqlite3.Connection, idempotency_key: str) -> FailureTag | None:
    row = db.execute(f"SELECT {_COLUMNS} FROM failure_tags WHERE idempotency_key = ?", (idempotency_key,)).fetchone()
    return FailureTag(*row) if row else None


def add_tag(db: sqlite3.Connection, tag: FailureTag) -> None:
    db.execute(
        f"INSERT INTO failure_tags ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            tag.tag_id, tag.query_id, tag.reviewer, tag.tag, tag.supersedes, tag.comment, tag.idempotency_key,
            tag.seconds, tag.created_at,
        ),
    )  # fmt: skip


def standing_tag(db: sqlite3.Connection, query_id: str, reviewer: str) -> FailureTag | None:
    """This reviewer's standing tag on the query (their latest that no undo took back)."""
    row = db.execute(
        _STANDING + " AND t.query_id = ? AND t.reviewer = ? ORDER BY t.created_at DESC, t.rowid DESC LIMIT 1",
        (query_id, reviewer),
    ).fetchone()
    return FailureTag(*row) if row else None


def standing_tags(db: sqlite3.Connection) -> dict[str, dict[str, FailureTag]]:
    """query id -> reviewer -> that reviewer's standing tag, for every tagged query."""
    standing: dict[str, dict[str, FailureTag]] = {}
    for row in db.execute(_STANDING + " ORDER BY t.created_at, t.rowid"):
        tag = FailureTag(*row)
        standing.setdefault(tag.query_id, {})[tag.reviewer] = tag  # later rows replace earlier ones
    return standing


def is_logged(db: sqlite3.Connection, query_id: str) -> bool:
    return db.execute("SELECT 1 FROM log_queries WHERE query_id = ?", (query_id,)).fetchone() is not None


def logged_query_count(db: sqlite3.Connection) -> int:
    return db.execute("SELECT COUNT(*) FROM log_queries").fetchone()[0]


def logged_summary(db: sqlite3.Connection, query_id: str) -> dict | None:
    """What production logged for one query: its sums, latest answer and comment; None when it was never logged."""
    cursor = db.execute(
        "SELECT frequency, first_seen, last_seen, thumbs_up, thumbs_down, rating_sum, ratings, comments, cited, "
        "clicked, last_answer, last_comment FROM log_queries WHERE query_id = ?",
        (query_id,),
    )
    row = cursor.fetchone()
    return dict(zip([d[0] for d in cursor.description], row)) if row else None


def logged_results(db: sqlite3.Connection, query_id: str) -> list[tuple[int, str, float | None, str, str]]:
    """The live system's latest retrieval for one query: (rank, chunk id, score, chunk text, document title)."""
    return db.execute(
        "SELECT r.rank, r.chunk_id, r.score, c.text, d.title FROM log_retrievals r JOIN chunks c USING (chunk_id) "
        "JOIN documents d ON d.doc_id = c.doc_id WHERE r.query_id = ? ORDER BY r.rank",
        (query_id,),
    ).fetchall()
