"""Production logs in the workspace: imports (resumable by line), per-query aggregates and the logged retrieval.
Writes take an open transaction's connection, as in :mod:`~testset_builder.store.rows`."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field

from .batched import rows_in
from .workspace import utc_timestamp


@dataclass
class QueryLog:
    """What a batch of records says about one query: counts to add, the latest answer and retrieval seen."""

    query_id: str
    frequency: int = 0
    first_seen: str | None = None
    last_seen: str | None = None
    thumbs_up: int = 0
    thumbs_down: int = 0
    rating_sum: float = 0.0
    ratings: int = 0
    comments: int = 0
    cited: int = 0
    clicked: int = 0
    last_answer: str | None = None
    last_comment: str | None = None
    retrieved_at: str | None = None  # the timestamp (or "line N") of the record whose retrieval is kept
    session: str | None = None  # the session (a hash) of the earliest record that gave one: see session_order
    session_seen: str | None = None  # that record's timestamp
    retrieval: list[tuple[int, str, float | None]] = field(default_factory=list)  # (rank, chunk id, score)

    def keep_session(self, session: str, seen: str | None) -> None:
        """Keep ``session`` if its record comes before the one whose session is kept (:func:`session_order`)."""
        if self.session is None or session_order(session, seen) < session_order(self.session, self.session_seen):
            self.session, self.session_seen = session, seen


def session_order(session: str, seen: str | None) -> tuple:
    """Which of a query's sessions is its own: the earliest record's (by timestamp; records without one after every
    record with one), then the smaller hash. The same whatever the order of the lines, batches and imports."""
    return (seen is None, seen or "", session)


def import_state(db: sqlite3.Connection, import_id: str) -> tuple[str, int] | None:
    """(status, lines done) of an import of the file with this sha256, if one began."""
    row = db.execute("SELECT status, lines_done FROM log_imports WHERE import_id = ?", (import_id,)).fetchone()
    return (row[0], row[1]) if row else None


def begin_import(db: sqlite3.Connection, import_id: str, source: str, format: str) -> None:
    db.execute(
        "INSERT INTO log_imports (import_id, source, format, status, started_at) VALUES (?, ?, ?, 'running', ?) "
        "ON CONFLICT(import_id) DO NOTHING",
        (import_id, source, format, utc_timestamp()),
    )


def advance_import(db: sqlite3.Connection, import_id: str, lines_done: int, counts: dict) -> None:
    db.execute(
        "UPDATE log_imports SET lines_done = ?, counts = ? WHERE import_id = ?",
        (lines_done, json.dumps(counts), import_id),
    )


def forget_import(db: sqlite3.Connection, import_id: str) -> None:
    """Drop an import's record, so the file can be imported again (only for one that stored no record)."""
    db.execute("DELETE FROM log_traces WHERE import_id = ?", (import_id,))
    db.execute("DELETE FROM log_imports WHERE import_id = ?", (import_id,))


def finish_import(db: sqlite3.Connection, import_id: str, counts: dict) -> None:
    db.execute(
        "UPDATE log_imports SET status = 'done', counts = ?, finished_at = ? WHERE import_id = ?",
        (json.dumps(counts), utc_timestamp(), import_id),
    )


def import_counts(db: sqlite3.Connection, import_id: str) -> dict:
    row = db.execute("SELECT counts FROM log_imports WHERE import_id = ?", (import_id,)).fetchone()
    return json.loads(row[0]) if row else {}


@dataclass
class TraceFeedback:
    """What the workspace counted for one request (a trace, by the hash of its id): the logged query it went to, and
    the feedback counted for it. ``kind``: ``request`` (the record of a retrieval) or ``feedback`` (a trace with
    feedback alone, counted on its session's retrieval). ``session`` and ``seen_at``: the request's session (a hash)
    and time, which find a session's retrievals. ``query_id`` is None for a request recorded before schema 31."""

    trace_key: str
    query_id: str | None
    kind: str = "request"
    thumbs: int | None = None
    rating: float | None = None
    commented: bool = False
    session: str | None = None
    seen_at: str | None = None


_TRACE_COLUMNS = "trace_key, query_id, kind, thumbs, rating, commented, session, seen_at"


def _trace(row: tuple) -> TraceFeedback:
    key, query_id, kind, thumbs, rating, commented, session, seen_at = row
    return TraceFeedback(key, query_id, kind or "request", thumbs, rating, bool(commented), session, seen_at)


def traces_among(db: sqlite3.Connection, trace_keys: Iterable[str]) -> dict[str, TraceFeedback]:
    """Those of ``trace_keys`` (hashed trace ids) an import recorded already, with what was counted for each."""
    sql = f"SELECT {_TRACE_COLUMNS} FROM log_traces WHERE trace_key IN ({{marks}})"
    return {row[0]: _trace(row) for row in rows_in(db, sql, sorted(set(trace_keys)))}


def partial_traces_among(db: sqlite3.Connection, trace_keys: Iterable[str]) -> dict[str, list[dict]]:
    """The spans held of those of ``trace_keys`` (hashed trace ids) an earlier file held only part of."""
    sql = "SELECT trace_key, spans FROM log_partial_traces WHERE trace_key IN ({marks})"
    return {key: json.loads(spans) for key, spans in rows_in(db, sql, sorted(set(trace_keys)))}


def hold_partial_traces(db: sqlite3.Connection, import_id: str, parts: Iterable[tuple[str, list[dict]]]) -> None:
    """Keep the spans of traces a file held only part of (all the spans known of each, by hashed trace id)."""
    db.executemany(
        "INSERT INTO log_partial_traces (trace_key, import_id, spans, held_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT(trace_key) DO UPDATE SET import_id = excluded.import_id, spans = excluded.spans, "
        "held_at = excluded.held_at",
        [(key, import_id, json.dumps(spans, default=str), utc_timestamp()) for key, spans in parts],
    )


def drop_partial_traces(db: sqlite3.Connection, trace_keys: Iterable[str]) -> None:
    """Forget the held parts of traces now recorded."""
    db.executemany("DELETE FROM log_partial_traces WHERE trace_key = ?", [(key,) for key in trace_keys])


def retrievals_in_sessions(db: sqlite3.Connection, sessions: Iterable[str]) -> list[TraceFeedback]:
    """The recorded retrievals (requests) of ``sessions`` (hashed session ids)."""
    sql = f"SELECT {_TRACE_COLUMNS} FROM log_traces WHERE kind = 'request' AND session IN ({{marks}})"
    return [_trace(row) for row in rows_in(db, sql, sorted(set(sessions)))]


def add_traces(db: sqlite3.Connection, import_id: str, traces: Iterable[TraceFeedback]) -> None:
    """Record the requests an import recorded, with their query and the feedback counted for them."""
    db.executemany(
        "INSERT INTO log_traces (trace_key, import_id, query_id, kind, thumbs, rating, commented, session, seen_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(trace_key) DO NOTHING",
        [
            (t.trace_key, import_id, t.query_id, t.kind, t.thumbs, t.rating, int(t.commented), t.session, t.seen_at)
            for t in traces
        ],
    )


def update_trace_feedback(db: sqlite3.Connection, traces: Iterable[TraceFeedback]) -> None:
    """Keep the feedback now counted for requests recorded before."""
    db.executemany(
        "UPDATE log_traces SET thumbs = ?, rating = ?, commented = ? WHERE trace_key = ?",
        [(t.thumbs, t.rating, int(t.commented), t.trace_key) for t in traces],
    )


def add_feedback(db: sqlite3.Connection, changes: Iterable[QueryLog]) -> None:
    """Add feedback given late (``changes``: per query, the thumbs, ratings and comments to add, the comment to keep)
    to queries logged before."""
    db.executemany(
        "UPDATE log_queries SET thumbs_up = thumbs_up + ?, thumbs_down = thumbs_down + ?, "
        "rating_sum = rating_sum + ?, ratings = ratings + ?, comments = comments + ?, "
        "last_comment = COALESCE(?, last_comment) WHERE query_id = ?",
        [
            (c.thumbs_up, c.thumbs_down, c.rating_sum, c.ratings, c.comments, c.last_comment, c.query_id)
            for c in changes
        ],
    )


def _later(a: str | None, b: str | None) -> bool:
    """Whether timestamp ``a`` is at or after ``b`` (ISO text compares in order; a missing one is never later)."""
    return a is not None and (b is None or a >= b)


def _extreme(pick, *values: str | None) -> str | None:
    present = [v for v in values if v is not None]
    return pick(present) if present else None


def _stored_times(db: sqlite3.Connection, query_ids: list[str]) -> dict[str, tuple]:
    sql = (
        "SELECT query_id, first_seen, last_seen, retrieved_at, session, session_seen FROM log_queries "
        "WHERE query_id IN ({marks})"
    )
    return {row[0]: row[1:] for row in rows_in(db, sql, query_ids)}


def add_query_logs(db: sqlite3.Connection, logs: Iterable[QueryLog]) -> None:
    """Add a batch's counts to each query's aggregate; keep the answer and the retrieval of the latest record.
    One statement per kind of change for the whole batch (a log of millions of records imports in minutes)."""
    logs = list(logs)
    stored = _stored_times(db, [log.query_id for log in logs])
    inserts, updates, retrievals = [], [], []
    for log in logs:
        row = stored.get(log.query_id)
        if row is None:
            inserts.append(
                (
                    log.query_id, log.frequency, log.first_seen, log.last_seen, log.thumbs_up, log.thumbs_down,
                    log.rating_sum, log.ratings, log.comments, log.cited, log.clicked, log.last_answer,
                    log.last_comment, log.retrieved_at if log.retrieval else None, log.session, log.session_seen,
                )
            )  # fmt: skip
            newer_retrieval = bool(log.retrieval)
        else:
            first, last, retrieved_at, session, session_seen = row
            newer = last is None or _later(log.last_seen, last)
            if session is not None:  # the stored session stays unless the batch's comes before it
                log.keep_session(session, session_seen)
            updates.append(
                (
                    log.frequency, log.thumbs_up, log.thumbs_down, log.rating_sum, log.ratings, log.comments,
                    log.cited, log.clicked, _extreme(min, first, log.first_seen), _extreme(max, last, log.last_seen),
                    newer, log.last_answer, newer, log.last_comment, log.last_comment, log.session,
                    log.session_seen, log.query_id,
                )
            )  # fmt: skip
            newer_retrieval = bool(log.retrieval) and (retrieved_at is None or _later(log.retrieved_at, retrieved_at))
        if newer_retrieval:
            retrievals.append(log)
    db.executemany(
        "INSERT INTO log_queries (query_id, frequency, first_seen, last_seen, thumbs_up, thumbs_down, "
        "rating_sum, ratings, comments, cited, clicked, last_answer, last_comment, retrieved_at, session, "
        "session_seen) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        inserts,
    )
    db.executemany(
        "UPDATE log_queries SET frequency = frequency + ?, thumbs_up = thumbs_up + ?, "
        "thumbs_down = thumbs_down + ?, rating_sum = rating_sum + ?, ratings = ratings + ?, "
        "comments = comments + ?, cited = cited + ?, clicked = clicked + ?, first_seen = ?, last_seen = ?, "
        "last_answer = CASE WHEN ? THEN ? ELSE last_answer END, "
        "last_comment = CASE WHEN ? AND ? IS NOT NULL THEN ? ELSE last_comment END, "
        "session = ?, session_seen = ? WHERE query_id = ?",
        updates,
    )
    db.executemany(
        "UPDATE log_queries SET retrieved_at = ? WHERE query_id = ?",
        [(log.retrieved_at, log.query_id) for log in retrievals],
    )
    db.executemany("DELETE FROM log_retrievals WHERE query_id = ?", [(log.query_id,) for log in retrievals])
    db.executemany(
        "INSERT INTO log_retrievals (query_id, rank, chunk_id, score) VALUES (?, ?, ?, ?)",
        [(log.query_id, rank, chunk_id, score) for log in retrievals for rank, chunk_id, score in log.retrieval],
    )


def logged_queries(db: sqlite3.Connection) -> list[dict]:
    """Every logged query's aggregate, by id."""
    cursor = db.execute("SELECT * FROM log_queries ORDER BY query_id")
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor]


def production_run(db: sqlite3.Connection) -> dict[str, list[tuple[int, str, float | None]]]:
    """query id -> the live system's ranked (rank, chunk id, score), from each query's latest logged record."""
    run: dict[str, list] = {}
    for query_id, rank, chunk_id, score in db.execute(
        "SELECT query_id, rank, chunk_id, score FROM log_retrievals ORDER BY query_id, rank"
    ):
        run.setdefault(query_id, []).append((rank, chunk_id, score))
    return run


@dataclass(frozen=True)
class LogDraw:
    query_id: str
    round: int
    probability: float
    drawn: bool
    weight: float
    reasons: tuple[str, ...]
    duplicate_of: str | None = None


_WITH_SIGNALS = (
    "SELECT l.*, q.text, (SELECT r.score FROM log_retrievals r WHERE r.query_id = l.query_id AND r.rank = 1) "
    "AS top_score, EXISTS (SELECT 1 FROM log_retrievals r WHERE r.query_id = l.query_id) AS retrieved "
    "FROM log_queries l JOIN queries q USING (query_id) "
)


def undrawn_logged(db: sqlite3.Connection) -> list[dict]:
    """Logged queries no draw has considered yet, with their aggregates and top production score and text."""
    cursor = db.execute(
        _WITH_SIGNALS + "WHERE l.query_id NOT IN (SELECT query_id FROM log_draws) ORDER BY l.frequency DESC, l.query_id"
    )
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor]


def logged_with_signals(db: sqlite3.Connection) -> list[dict]:
    """Every logged query with its aggregates, top production score and text, most frequent first."""
    cursor = db.execute(_WITH_SIGNALS + "ORDER BY l.frequency DESC, l.query_id")
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor]


def has_logged_queries(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM log_queries LIMIT 1").fetchone() is not None


def undrawn_count(db: sqlite3.Connection) -> int:
    """Logged queries no failure-first draw has considered yet."""
    sql = "SELECT COUNT(*) FROM log_queries WHERE query_id NOT IN (SELECT query_id FROM log_draws)"
    return db.execute(sql).fetchone()[0]


def drawn_counts(db: sqlite3.Connection) -> tuple[int, int]:
    """(logged queries drawn, of them already pooled by propose): what a plan of ``run`` counts."""
    drawn = db.execute("SELECT COUNT(*) FROM log_draws WHERE drawn = 1").fetchone()[0]
    pooled = db.execute(
        "SELECT COUNT(DISTINCT c.query_id) FROM candidates c JOIN log_draws d USING (query_id) "
        "WHERE d.drawn = 1 AND c.retriever != 'production'"
    ).fetchone()[0]
    return drawn, pooled


def next_draw_round(db: sqlite3.Connection) -> int:
    return (db.execute("SELECT MAX(round) FROM log_draws").fetchone()[0] or 0) + 1


def put_log_draws(db: sqlite3.Connection, draws: Iterable[LogDraw]) -> None:
    db.executemany(
        "INSERT INTO log_draws (query_id, round, probability, drawn, weight, reasons, duplicate_of, drawn_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (d.query_id, d.round, d.probability, int(d.drawn), d.weight, json.dumps(list(d.reasons)),
             d.duplicate_of, utc_timestamp())
            for d in draws
        ],
    )  # fmt: skip


def drawn_logged(db: sqlite3.Connection) -> list[tuple[str, float, list[str]]]:
    """(query id, probability, reasons) of every logged query a draw chose, by round then id."""
    sql = "SELECT query_id, probability, reasons FROM log_draws WHERE drawn = 1 ORDER BY round, query_id"
    return [(q, p, json.loads(r)) for q, p, r in db.execute(sql)]


def release_rows(db: sqlite3.Connection, query_ids: Iterable[str]) -> list[dict]:
    """For a release: each of ``query_ids`` that was logged, with its sums and its failure-first draw (probability
    and whether drawn; None when no draw considered it), by id."""
    wanted = set(query_ids)
    cursor = db.execute(
        "SELECT l.query_id, l.frequency, l.thumbs_up, l.thumbs_down, l.rating_sum, l.ratings, l.cited, l.clicked, "
        "l.session, d.probability, d.drawn, d.duplicate_of FROM log_queries l LEFT JOIN log_draws d USING (query_id) "
        "ORDER BY l.query_id"
    )
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor if row[0] in wanted]


def live_chunk_ids_among(db: sqlite3.Connection, chunk_ids: Iterable[str]) -> set[str]:
    """Those of ``chunk_ids`` that are live chunks of the workspace."""
    sql = "SELECT chunk_id FROM chunks WHERE chunk_id IN ({marks}) AND removed_at IS NULL"
    return {row[0] for row in rows_in(db, sql, sorted(set(chunk_ids)))}


def chunk_titles(db: sqlite3.Connection, chunk_ids: Iterable[str]) -> dict[str, str]:
    """chunk id -> its document's title (empty when it has none)."""
    sql = "SELECT c.chunk_id, d.title FROM chunks c JOIN documents d USING (doc_id) WHERE c.chunk_id IN ({marks})"
    return {chunk_id: title or "" for chunk_id, title in rows_in(db, sql, sorted(set(chunk_ids)))}


def duplicate_groups_of(db: sqlite3.Connection, chunk_ids: Iterable[str]) -> dict[str, str]:
    """chunk id -> its duplicate group, for those of ``chunk_ids`` that have twins."""
    sql = "SELECT chunk_id, group_id FROM chunk_duplicates WHERE chunk_id IN ({marks})"
    return dict(rows_in(db, sql, sorted(set(chunk_ids))))


def has_live_chunks(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM chunks WHERE removed_at IS NULL LIMIT 1").fetchone() is not None
