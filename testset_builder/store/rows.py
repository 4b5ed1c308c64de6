"""Records to rows and back. Writes take an open transaction's connection, so callers choose what is atomic."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterable, Iterator, Sequence

from .._hashing import normalise
from ..errors import InputError, UnknownIdError
from ..records import Chunk, Document, Judgment, Lineage, Query, Span, passage_text
from .batched import rows_in
from .workspace import utc_timestamp


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def _lineage(row_value: str | None) -> Lineage | None:
    return Lineage.model_validate_json(row_value) if row_value else None


def content_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


_PUT_DOCUMENT = (
    "INSERT INTO documents (doc_id, text, title, metadata, source, content_sha256, created_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(doc_id) DO UPDATE SET text = excluded.text, title = excluded.title, "
    "metadata = excluded.metadata, source = excluded.source, content_sha256 = excluded.content_sha256, "
    "removed_at = NULL"
)


def put_documents(db: sqlite3.Connection, documents: Iterable[Document]) -> int:
    """Insert documents, or update those whose id exists (a changed document is a new version of it: the text it
    replaces is kept in ``document_versions`` by a trigger, so spans taken from it keep their referent)."""
    rows = [
        (d.doc_id, d.text, d.title, _json(d.metadata), d.source, content_sha256(d.text), utc_timestamp())
        for d in documents
    ]
    db.executemany(_PUT_DOCUMENT, rows)
    return len(rows)


def put_document_records(db: sqlite3.Connection, records: Sequence[dict], shas: Sequence[str]) -> int:
    """:func:`put_documents` for document records (:mod:`~testset_builder.corpus.batches`: metadata already JSON)
    whose texts' sha256 the caller has (ingest computed them to tell changed documents)."""
    now = utc_timestamp()
    rows = [
        (r["doc_id"], r["text"], r["title"], r["metadata"], r["source"], sha, now)
        for r, sha in zip(records, shas, strict=True)
    ]
    db.executemany(_PUT_DOCUMENT, rows)
    return len(rows)


def get_document(db: sqlite3.Connection, doc_id: str) -> Document:
    row = db.execute("SELECT * FROM documents WHERE doc_id = ?", (doc_id,)).fetchone()
    if row is None:
        raise UnknownIdError("document", doc_id)
    return Document(
        doc_id=row["doc_id"],
        text=row["text"],
        title=row["title"],
        metadata=json.loads(row["metadata"]),
        source=row["source"],
    )


CURRENT_DOCUMENT_SHA = "(SELECT content_sha256 FROM documents WHERE doc_id = ?)"
"""SQL for the sha256 of a document's current text: a chunk's span refers to the text its document had when the
chunk was cut (store the document first, in the same transaction)."""


def put_chunks(db: sqlite3.Connection, chunks: Iterable[Chunk]) -> int:
    """Insert chunks; a chunk id already present is kept as is (ids are derived from content). Each records the
    version (sha256) of its document's text that its span refers to."""
    rows = [
        (c.chunk_id, c.doc_id, c.text, c.start, c.end, _json(c.metadata), utc_timestamp(), c.doc_id) for c in chunks
    ]
    before = db.total_changes
    db.executemany(
        'INSERT INTO chunks (chunk_id, doc_id, text, start, "end", metadata, created_at, doc_sha256) '
        f"VALUES (?, ?, ?, ?, ?, ?, ?, {CURRENT_DOCUMENT_SHA}) ON CONFLICT(chunk_id) DO NOTHING",
        rows,
    )
    return db.total_changes - before


def _chunk(row: sqlite3.Row) -> Chunk:
    return Chunk(
        chunk_id=row["chunk_id"],
        doc_id=row["doc_id"],
        text=row["text"],
        start=row["start"],
        end=row["end"],
        metadata=json.loads(row["metadata"]),
    )


def get_chunk(db: sqlite3.Connection, chunk_id: str) -> Chunk:
    row = db.execute("SELECT * FROM chunks WHERE chunk_id = ?", (chunk_id,)).fetchone()
    if row is None:
        raise UnknownIdError("chunk", chunk_id)
    return _chunk(row)


def iter_chunks(db: sqlite3.Connection) -> Iterator[Chunk]:
    for row in db.execute("SELECT * FROM chunks ORDER BY chunk_id"):
        yield _chunk(row)


def put_queries(db: sqlite3.Connection, queries: Iterable[Query]) -> int:
    """Insert queries; an existing id is kept (a rerun does not duplicate or overwrite a query)."""
    rows = [
        (
            q.query_id,
            q.text,
            q.origin.value,
            q.source_chunk_id,
            q.style,
            _json(q.metadata),
            q.lineage.model_dump_json() if q.lineage else None,
            utc_timestamp(),
        )
        for q in queries
    ]
    before = db.total_changes
    db.executemany(
        "INSERT INTO queries (query_id, text, origin, source_chunk_id, style, metadata, lineage, created_at) VALUES "
        "(?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(query_id) DO NOTHING",
        rows,
    )
    return db.total_changes - before


def get_query(db: sqlite3.Connection, query_id: str) -> Query:
    row = db.execute("SELECT * FROM queries WHERE query_id = ?", (query_id,)).fetchone()
    if row is None:
        raise UnknownIdError("query", query_id)
    return Query(
        query_id=row["query_id"],
        text=row["text"],
        origin=row["origin"],
        source_chunk_id=row["source_chunk_id"],
        style=row["style"],
        metadata=json.loads(row["metadata"]),
        lineage=_lineage(row["lineage"]),
    )


def add_judgments(db: sqlite3.Connection, judgments: Iterable[Judgment]) -> int:
    """Append judgments; returns how many were new. They are never updated or deleted (the schema's triggers refuse
    both). Ids derive from content, so a judgment already stored is the same judgment and is not added twice."""
    judgments = list(judgments)
    rows = [
        (
            j.judgment_id,
            j.query_id,
            j.chunk_id,
            j.grade,
            j.source.value,
            j.confidence,
            _json({str(k): v for k, v in j.grade_probs.items()}) if j.grade_probs is not None else None,
            j.rationale,
            j.reviewer,
            j.status.value,
            j.supersedes,
            j.lineage.model_dump_json() if j.lineage else None,
            j.created_at.isoformat(),
        )
        for j in judgments
    ]
    before = db.total_changes
    db.executemany(
        "INSERT INTO judgments (judgment_id, query_id, chunk_id, grade, source, confidence, grade_probs, rationale, "
        "reviewer, status, supersedes, lineage, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(judgment_id) DO NOTHING",
        rows,
    )
    added = db.total_changes - before
    _add_judgment_spans(db, judgments)
    return added


def _add_judgment_spans(db: sqlite3.Connection, judgments: list[Judgment]) -> None:
    """Each judgment's span: its chunk's document, text version and offsets now, and its evidence when known."""
    rows = [
        (
            j.judgment_id,
            *((j.evidence.start, j.evidence.end, j.evidence.text) if j.evidence else (None, None, None)),
            j.chunk_id,
        )
        for j in judgments
    ]
    db.executemany(
        'INSERT INTO judgment_spans (judgment_id, doc_id, doc_sha256, start, "end", evidence_start, evidence_end, '
        'evidence_text) SELECT ?, c.doc_id, c.doc_sha256, c.start, c."end", ?, ?, ? FROM chunks c WHERE c.chunk_id = ? '
        "ON CONFLICT(judgment_id) DO NOTHING",
        rows,
    )


def _judgments(cursor: Iterable[sqlite3.Row]) -> Iterator[Judgment]:
    for row in cursor:
        probs = json.loads(row["grade_probs"]) if row["grade_probs"] else None
        yield Judgment(
            judgment_id=row["judgment_id"],
            query_id=row["query_id"],
            chunk_id=row["chunk_id"],
            grade=row["grade"],
            source=row["source"],
            confidence=row["confidence"],
            grade_probs={int(k): v for k, v in probs.items()} if probs is not None else None,
            rationale=row["rationale"],
            reviewer=row["reviewer"],
            status=row["status"],
            supersedes=row["supersedes"],
            created_at=row["created_at"],
            lineage=_lineage(row["lineage"]),
            evidence=_evidence(row),
        )


def _evidence(row: sqlite3.Row) -> Span | None:
    if row["evidence_start"] is None:
        return None
    return Span(
        doc_id=row["span_doc_id"],
        start=row["evidence_start"],
        end=row["evidence_end"],
        doc_sha256=row["span_doc_sha256"],
        text=row["evidence_text"],
    )


JUDGMENTS_WITH_EVIDENCE = (
    "SELECT j.*, s.doc_id AS span_doc_id, s.doc_sha256 AS span_doc_sha256, s.evidence_start, s.evidence_end, "
    "s.evidence_text FROM judgments j LEFT JOIN judgment_spans s USING (judgment_id)"
)


def iter_judgments(db: sqlite3.Connection, query_id: str | None = None) -> Iterator[Judgment]:
    sql, args = JUDGMENTS_WITH_EVIDENCE, ()
    if query_id is not None:
        sql, args = sql + " WHERE j.query_id = ?", (query_id,)
    yield from _judgments(db.execute(sql + " ORDER BY j.created_at, j.judgment_id", args))


def _existing(db: sqlite3.Connection, table: str, column: str, ids: Iterable[str]) -> set[str]:
    """Which of ``ids`` are already in ``table.column`` (looked up 500 at a time, under SQLite's variable limit)."""
    return {row[0] for row in rows_in(db, f"SELECT {column} FROM {table} WHERE {column} IN ({{marks}})", ids)}


def existing_judgment_ids(db: sqlite3.Connection, judgment_ids: Iterable[str]) -> set[str]:
    return _existing(db, "judgments", "judgment_id", judgment_ids)


def live_chunk_passages(db: sqlite3.Connection) -> tuple[list[str], list[str]]:
    """Ids and passages of the live chunks (what retrievers index and judges read); see :func:`live_chunk_rows`."""
    rows = live_chunk_rows(db)
    return [r[0] for r in rows], [r[2] for r in rows]


def put_candidates(db: sqlite3.Connection, candidates: Iterable) -> int:
    """Store pool members with the retriever and rank that pooled them; a re-pooled pair takes its new rank."""
    rows = [(c.query_id, c.chunk_id, c.retriever, c.rank, c.score) for c in candidates]
    db.executemany(
        "INSERT INTO candidates (query_id, chunk_id, retriever, rank, score) VALUES (?, ?, ?, ?, ?) "
        "ON CONFLICT(query_id, chunk_id, retriever) DO UPDATE SET rank = excluded.rank, score = excluded.score",
        rows,
    )
    return len(rows)


def best_ranks_by(db: sqlite3.Connection, prefix: str) -> dict[tuple[str, str], int]:
    """(query, chunk) -> its best rank by the pooled retrievers whose name starts with ``prefix`` (``run:``: the
    systems `propose --runs` pooled)."""
    return {
        (query_id, chunk_id): rank
        for query_id, chunk_id, rank in db.execute(
            "SELECT query_id, chunk_id, MIN(rank) FROM candidates WHERE substr(retriever, 1, ?) = ? "
            "GROUP BY query_id, chunk_id",
            (len(prefix), prefix),
        )
    }


def ranks_by(db: sqlite3.Connection, prefix: str) -> Iterator[tuple[str, str, str, int, float | None]]:
    """(query, chunk, retriever, rank, score) of every pair pooled by a retriever whose name starts with
    ``prefix``."""
    yield from db.execute(
        "SELECT query_id, chunk_id, retriever, rank, score FROM candidates WHERE substr(retriever, 1, ?) = ?",
        (len(prefix), prefix),
    )


def iter_judgments_by_id(db: sqlite3.Connection, judgment_ids: Iterable[str]) -> Iterator[Judgment]:
    ids = list(judgment_ids)
    for start in range(0, len(ids), 500):
        part = ids[start : start + 500]
        yield from _judgments(
            db.execute(
                f"{JUDGMENTS_WITH_EVIDENCE} WHERE j.judgment_id IN ({','.join('?' * len(part))}) "
                "ORDER BY j.judgment_id",
                part,
            )
        )


def live_chunk_rows(db: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """(chunk_id, doc_id, passage) of the live chunks, the passage prefixed by the document's title when it has one."""
    rows = db.execute(
        "SELECT c.chunk_id, c.doc_id, d.title, c.text FROM chunks c JOIN documents d USING (doc_id) WHERE "
        "c.removed_at IS NULL ORDER BY c.chunk_id"
    ).fetchall()
    return [(r[0], r[1], passage_text(r[2], r[3])) for r in rows]


def iter_live_chunks(db: sqlite3.Connection) -> Iterator[tuple[str, str, str, str]]:
    """(chunk_id, doc_id, the document's title, the chunk's text) of each live chunk by id, streamed."""
    yield from db.execute(
        "SELECT c.chunk_id, c.doc_id, COALESCE(d.title, ''), c.text FROM chunks c JOIN documents d USING (doc_id) "
        "WHERE c.removed_at IS NULL ORDER BY c.chunk_id"
    )


def live_duplicate_groups(db: sqlite3.Connection) -> dict[str, tuple[str, str]]:
    """chunk_id -> (group_id, kind) for live chunks that have exact or near twins."""
    sql = (
        "SELECT d.chunk_id, d.group_id, d.kind FROM chunk_duplicates d JOIN chunks c USING (chunk_id) "
        "WHERE c.removed_at IS NULL"
    )
    return {r[0]: (r[1], r[2]) for r in db.execute(sql)}


def existing_query_ids(db: sqlite3.Connection, query_ids: Iterable[str]) -> set[str]:
    return _existing(db, "queries", "query_id", query_ids)


def stored_query_text(db: sqlite3.Connection, query_id: str) -> str | None:
    row = db.execute("SELECT text FROM queries WHERE query_id = ?", (query_id,)).fetchone()
    return row[0] if row else None


def synthetic_query_texts(db: sqlite3.Connection) -> list[str]:
    return [
        row[0]
        for row in db.execute("SELECT text FROM queries WHERE origin = 'synthetic' ORDER BY created_at, query_id")
    ]


def put_queries_checked(db: sqlite3.Connection, queries: Iterable[Query]) -> int:
    """Insert new queries; an id already stored must carry the same text (else it is another query, an error).
    Texts are compared normalised (case, Unicode form and spacing do not make another query)."""
    queries = list(queries)
    for query in queries:
        stored = stored_query_text(db, query.query_id)
        if stored is not None and normalise(stored) != normalise(query.text):
            raise InputError(
                f"query id {query.query_id!r} is already in the workspace with another text: {stored[:80]!r}"
            )
    return put_queries(db, queries)


def synthetic_query_ids(db: sqlite3.Connection) -> list[str]:
    return [row[0] for row in db.execute("SELECT query_id FROM queries WHERE origin = 'synthetic' ORDER BY query_id")]


def synthetic_question_writers(db: sqlite3.Connection) -> dict[str, str | None]:
    """Each synthetic question's writer: the provider identity its lineage names (``kind:endpoint``), or None."""
    return dict(
        db.execute(
            "SELECT query_id, json_extract(lineage, '$.provider') FROM queries WHERE origin = 'synthetic' "
            "ORDER BY query_id"
        )
    )


def synthetic_question_slots(db: sqlite3.Connection) -> list[tuple[str, str, int]]:
    """(source chunk id, style, seed) of each stored synthetic question with a source and a seed in its lineage:
    what the synthesize stage needs to ask its slot again the same way."""
    return db.execute(
        "SELECT source_chunk_id, style, json_extract(lineage, '$.seed') FROM queries WHERE origin = 'synthetic' "
        "AND source_chunk_id IS NOT NULL AND style IS NOT NULL AND json_extract(lineage, '$.seed') IS NOT NULL "
        "ORDER BY query_id"
    ).fetchall()


def real_query_texts(db: sqlite3.Connection) -> list[tuple[str, str]]:
    """(query id, text) of the queries people asked (origin ``real``), by id."""
    return db.execute("SELECT query_id, text FROM queries WHERE origin = 'real' ORDER BY query_id").fetchall()


def real_query_ids(db: sqlite3.Connection) -> set[str]:
    """The queries people asked (origin ``real``: given to propose or imported from logs), not synthetic ones."""
    return {row[0] for row in db.execute("SELECT query_id FROM queries WHERE origin = 'real'")}


def live_chunks_of(db: sqlite3.Connection, doc_id: str) -> list[Chunk]:
    """A document's live chunks, in document order."""
    rows = db.execute('SELECT * FROM chunks WHERE doc_id = ? AND removed_at IS NULL ORDER BY start, "end"', (doc_id,))
    return [_chunk(row) for row in rows]


def pooled_query_ids(db: sqlite3.Connection) -> set[str]:
    """Queries with a candidate pool (proposed, or synthetic questions mined)."""
    return {row[0] for row in db.execute("SELECT DISTINCT query_id FROM candidates")}


def has_live_chunks(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT EXISTS (SELECT 1 FROM chunks WHERE removed_at IS NULL)").fetchone()[0] == 1


LIVE_PASSAGES_SQL = (
    "SELECT c.chunk_id, d.title, c.text FROM chunks c JOIN documents d USING (doc_id) WHERE c.removed_at IS NULL"
)


def iter_live_chunk_passages(db: sqlite3.Connection, batch_size: int = 10_000) -> Iterator[tuple[list[str], list[str]]]:
    """The live chunks' (ids, passages) in chunk id order, ``batch_size`` at a time: what
    :func:`live_chunk_passages` returns, for a corpus too large to hold in memory at once. One statement reads
    them all, so the batches come from one snapshot of the workspace."""
    cursor = db.execute(f"{LIVE_PASSAGES_SQL} ORDER BY c.chunk_id")
    while rows := cursor.fetchmany(batch_size):
        yield [r[0] for r in rows], [passage_text(r[1], r[2]) for r in rows]


def live_chunk_passages_of(db: sqlite3.Connection, chunk_ids: Iterable[str]) -> dict[str, str]:
    """chunk id -> passage for those of ``chunk_ids`` that are live (looked up 500 at a time)."""
    sql = LIVE_PASSAGES_SQL + " AND c.chunk_id IN ({marks})"
    return {r[0]: passage_text(r[1], r[2]) for r in rows_in(db, sql, dict.fromkeys(chunk_ids))}
