"""The corpus's bookkeeping in the workspace: which documents are known, how their chunks were cut, which chunks are
live, and the duplicate groups. Chunks of a changed or removed document are marked removed, never deleted
(judgments may point at them). Writes take an open transaction's connection, as in
:mod:`~testset_builder.store.rows`."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from . import duplicates
from .batched import rows_in
from .workspace import utc_timestamp


class KnownDocument(NamedTuple):  # a tuple: a rerun builds one per document, and a frozen dataclass costs more
    content_sha256: str
    removed: bool
    source: str


def known_documents(db: sqlite3.Connection, doc_ids: Sequence[str] | None = None) -> dict[str, KnownDocument]:
    """doc_id -> what the workspace knows of it, for every document or those of ``doc_ids`` it has."""
    sql = "SELECT doc_id, content_sha256, removed_at IS NOT NULL, source FROM documents"
    if doc_ids is None:
        rows: Iterable = db.execute(sql)
    else:
        rows = rows_in(db, sql + " WHERE doc_id IN ({marks})", doc_ids)
    return {doc_id: KnownDocument(sha, bool(removed), source) for doc_id, sha, removed, source in rows}


def document_ids(db: sqlite3.Connection) -> list[str]:
    """Every document's id, live or removed (read from the primary key's index alone)."""
    return [row[0] for row in db.execute("SELECT doc_id FROM documents")]


def live_document_count(db: sqlite3.Connection) -> int:
    return db.execute("SELECT COUNT(*) FROM documents WHERE removed_at IS NULL").fetchone()[0]


@dataclass(frozen=True)
class SourceFile:
    """A file read as one document, when it was last read or found unchanged: its stat then (``checked_ns``: a time
    before that stat), the document and text it gave, and the chunker config its chunks were cut with."""

    doc_id: str
    size: int
    mtime_ns: int
    content_sha256: str
    config_sha256: str
    checked_ns: int


CURRENT_SOURCE_FILES_SQL = (
    "SELECT f.path, f.doc_id, f.size, f.mtime_ns, f.checked_ns FROM source_files f JOIN documents d USING (doc_id) "
    "WHERE f.config_sha256 = ? AND d.removed_at IS NULL AND d.content_sha256 = f.content_sha256"
)  # the documents' side from the documents_state index (migration 17), not from rows that hold the texts


def current_source_files(db: sqlite3.Connection, config_sha256: str) -> dict[str, tuple[str, int, int, int]]:
    """Resolved path -> (doc_id, size, mtime_ns, checked_ns) of the files whose recorded read still stands: its
    document is live with the text the file gave, cut with ``config_sha256``. Checked here, in one query, so that
    a rerun compares a stat with a tuple per file."""
    return {
        path: (doc_id, size, mtime_ns, checked_ns)
        for path, doc_id, size, mtime_ns, checked_ns in db.execute(CURRENT_SOURCE_FILES_SQL, (config_sha256,))
    }


def put_source_files(db: sqlite3.Connection, files: Iterable[tuple[str, SourceFile]]) -> None:
    db.executemany(
        "INSERT OR REPLACE INTO source_files (path, doc_id, size, mtime_ns, content_sha256, config_sha256, checked_ns) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [(path, f.doc_id, f.size, f.mtime_ns, f.content_sha256, f.config_sha256, f.checked_ns) for path, f in files],
    )


CURRENT_RECORD_FILES_SQL = (
    "SELECT f.path, f.size, f.mtime_ns, f.checked_ns, f.reading, f.sha256 FROM record_files f "
    "WHERE f.config_sha256 = ? AND f.documents = (SELECT COUNT(*) FROM record_file_documents r "
    "JOIN documents d USING (doc_id) WHERE r.path = f.path AND d.removed_at IS NULL "
    "AND d.content_sha256 = r.content_sha256)"
)  # the documents' side from the documents_state index, as CURRENT_SOURCE_FILES_SQL


class RecordFile(NamedTuple):
    """A file of records (JSONL) when it was last read whole or found unchanged: its stat then (``checked_ns``: a
    time before that stat), the fields it was read with, and the sha256 of the bytes it gave its documents from
    (None: recorded before migration 34)."""

    size: int
    mtime_ns: int
    checked_ns: int
    reading: str
    sha256: str | None


def current_record_files(db: sqlite3.Connection, config_sha256: str) -> dict[str, RecordFile]:
    """Resolved path -> its :class:`RecordFile`, for the files of records (migration 33) whose recorded read still
    stands: every document it gave is live with the text it gave, cut with ``config_sha256`` (a document written
    since forgot the record: :func:`forget_record_files`)."""
    return {path: RecordFile(*rest) for path, *rest in db.execute(CURRENT_RECORD_FILES_SQL, (config_sha256,))}


def record_file_documents(db: sqlite3.Connection, path: str) -> list[str] | None:
    """The ids of the documents the file of records ``path`` gave when it was recorded; None when no whole record
    of it stands."""
    row = db.execute("SELECT documents FROM record_files WHERE path = ?", (path,)).fetchone()
    doc_ids = [r[0] for r in db.execute("SELECT doc_id FROM record_file_documents WHERE path = ?", (path,))]
    return doc_ids if row is not None and row[0] == len(doc_ids) else None


def put_record_files(
    db: sqlite3.Connection, files: Iterable[tuple[str, int, int, str, str, Sequence[str]]], config_sha256: str,
    checked_ns: int,
) -> None:  # fmt: skip
    """Record files of records read whole: (resolved path, size, mtime_ns, reading, sha256 of the bytes read, ids of
    the documents it gave), each document with its stored text's sha256 (store the documents first: a recorded
    file is trusted to have been chunked)."""
    for path, size, mtime_ns, reading, sha256, doc_ids in files:
        db.execute("DELETE FROM record_file_documents WHERE path = ?", (path,))
        db.execute(
            "INSERT OR REPLACE INTO record_files (path, size, mtime_ns, checked_ns, reading, config_sha256, documents, "
            "sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (path, size, mtime_ns, checked_ns, reading, config_sha256, len(doc_ids), sha256),
        )
        db.executemany(
            "INSERT OR IGNORE INTO record_file_documents (path, doc_id, content_sha256) "
            "SELECT ?, doc_id, content_sha256 FROM documents WHERE doc_id = ?",
            [(path, doc_id) for doc_id in doc_ids],
        )


def restamp_record_files(db: sqlite3.Connection, files: Iterable[tuple[str, int, int]], checked_ns: int) -> None:
    """Give recorded files of records a new stat, (resolved path, size, mtime_ns), found with the bytes recorded:
    the record (its documents, its digest) stands as it is, and a later run need not hash them again."""
    db.executemany(
        "UPDATE record_files SET size = ?, mtime_ns = ?, checked_ns = ? WHERE path = ?",
        [(size, mtime_ns, checked_ns, path) for path, size, mtime_ns in files],
    )


def forget_record_files(db: sqlite3.Connection, doc_ids: Iterable[str]) -> None:
    """Forget the records of the files of records that gave any of ``doc_ids`` (documents being written: their
    chunks may be cut with another config now, which the record would not show)."""
    sql = "SELECT DISTINCT path FROM record_file_documents WHERE doc_id IN ({marks})"
    paths = [(row[0],) for row in rows_in(db, sql, doc_ids)]
    db.executemany("DELETE FROM record_files WHERE path = ?", paths)
    db.executemany("DELETE FROM record_file_documents WHERE path = ?", paths)


def chunker_of(db: sqlite3.Connection, doc_id: str) -> str | None:
    """The chunker config hash the live chunks of ``doc_id`` were cut with (None: it has none)."""
    sql = "SELECT MAX(config_sha256) FROM chunks WHERE doc_id = ? AND removed_at IS NULL"
    return db.execute(sql, (doc_id,)).fetchone()[0]


def put_document_chunks(
    db: sqlite3.Connection,
    documents: dict[str, str],
    chunks: Sequence[dict],
    normalised: dict[str, str],
    config_sha256: str,
) -> tuple[list[str], list[str], list[str]]:
    """Make ``chunks`` (chunk records, see :mod:`~testset_builder.corpus.batches`) the live chunks of the documents
    ``documents`` (a batch of them: doc_id -> the sha256 of the text stored for it, which the chunks' spans refer
    to): new ones are added (a chunk id seen before comes back to life, its text, span and text version those of
    the document's current text), the documents' other live chunks are marked removed. ``normalised``: chunk id ->
    normalised-text sha256. Store the documents first. Returns the ids (added: not live before; marked removed;
    rewritten: live before with another text, as a prechunked document's one chunk whose text changed: it must
    leave the duplicate group it was in)."""
    now = utc_timestamp()
    sql = "SELECT chunk_id, text_sha256 FROM chunks WHERE doc_id IN ({marks}) AND removed_at IS NULL"
    live_before: dict[str, str | None] = dict(rows_in(db, sql, list(documents)))
    db.executemany(
        'INSERT INTO chunks (chunk_id, doc_id, text, start, "end", metadata, created_at, config_sha256, doc_sha256, '
        "text_sha256, normalised_sha256, boilerplate) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(chunk_id) DO UPDATE SET removed_at = NULL, text = excluded.text, "
        "config_sha256 = excluded.config_sha256, boilerplate = excluded.boilerplate, "
        'start = excluded.start, "end" = excluded."end", metadata = excluded.metadata, '
        "doc_sha256 = excluded.doc_sha256, text_sha256 = excluded.text_sha256, "
        "normalised_sha256 = excluded.normalised_sha256",
        [(c["chunk_id"], c["doc_id"], c["text"], c["start"], c["end"], c["metadata"], now, config_sha256,
          documents[c["doc_id"]], c["text_sha256"], normalised[c["chunk_id"]], c.get("boilerplate", ""))
         for c in chunks],
    )  # fmt: skip
    live = {c["chunk_id"]: c["text_sha256"] for c in chunks}
    added = [chunk_id for chunk_id in live if chunk_id not in live_before]
    rewritten = [c for c, sha in live.items() if c in live_before and live_before[c] not in (sha, None)]
    removed = sorted(c for c in live_before if c not in live)
    db.executemany("UPDATE chunks SET removed_at = ? WHERE chunk_id = ?", [(now, c) for c in removed])
    return added, removed, rewritten


def remove_document(db: sqlite3.Connection, doc_id: str) -> list[str]:
    """Mark a document and its live chunks removed; returns the ids of the chunks marked."""
    now = utc_timestamp()
    db.execute("UPDATE documents SET removed_at = ? WHERE doc_id = ?", (now, doc_id))
    sql = "UPDATE chunks SET removed_at = ? WHERE doc_id = ? AND removed_at IS NULL RETURNING chunk_id"
    return [row[0] for row in db.execute(sql, (now, doc_id))]


def chunks_by_text_sha256(db: sqlite3.Connection, hashes: Iterable[str]) -> dict[str, list[str]]:
    """text sha256 -> ids of the live chunks with exactly that text (hex sha256 of its UTF-8), for the hashes that
    have any."""
    return duplicates.live_by_text(db, sorted(set(hashes)))


def chunks_by_normalised_sha256(db: sqlite3.Connection, hashes: Iterable[str]) -> dict[str, list[str]]:
    """normalised-text sha256 (see :func:`~testset_builder.corpus.dedup.normalised_sha256`) -> ids of the live
    chunks whose text normalises to it, for the hashes that have any."""
    return duplicates.live_by_normalised(db, sorted(set(hashes)))


def live_chunk_texts(db: sqlite3.Connection) -> list[tuple[str, str]]:
    """(chunk_id, text) of every live chunk, by id (the whole corpus in memory: for checks against the reference,
    not for ingest)."""
    return db.execute("SELECT chunk_id, text FROM chunks WHERE removed_at IS NULL ORDER BY chunk_id").fetchall()


def live_chunks_after(db: sqlite3.Connection, after: str, limit: int) -> list[tuple[str, str]]:
    """(chunk_id, text) of up to ``limit`` live chunks whose id sorts after ``after``, by id: a bounded batch."""
    sql = "SELECT chunk_id, text FROM chunks WHERE removed_at IS NULL AND chunk_id > ? ORDER BY chunk_id LIMIT ?"
    return [tuple(row) for row in db.execute(sql, (after, limit))]


def put_chunk_hashes(db: sqlite3.Connection, hashes: Iterable[tuple[str, str, str]]) -> None:
    """(chunk_id, text sha256, normalised-text sha256) of chunks stored before the hashes were kept."""
    db.executemany(
        "UPDATE chunks SET text_sha256 = ?, normalised_sha256 = ? WHERE chunk_id = ?",
        [(text, normalised, chunk_id) for chunk_id, text, normalised in hashes],
    )


def clear_duplicate_groups(db: sqlite3.Connection) -> None:
    db.execute("DELETE FROM chunk_duplicates")


def backfill_due(db: sqlite3.Connection, name: str) -> bool:
    """Whether a migration left the backfill ``name`` to a higher layer and it has not run yet."""
    return db.execute("SELECT 1 FROM backfills_due WHERE name = ?", (name,)).fetchone() is not None


def backfill_done(db: sqlite3.Connection, name: str) -> None:
    db.execute("DELETE FROM backfills_due WHERE name = ?", (name,))


def live_chunk_count(db: sqlite3.Connection) -> int:
    return db.execute("SELECT COUNT(*) FROM chunks WHERE removed_at IS NULL").fetchone()[0]


def duplicate_counts(db: sqlite3.Connection) -> tuple[int, int]:
    """(groups, chunks in them)."""
    return tuple(db.execute("SELECT COUNT(DISTINCT group_id), COUNT(*) FROM chunk_duplicates").fetchone())


def iter_release_corpus(db: sqlite3.Connection) -> Iterator[tuple[str, str, str, bool, str, int, int, str | None]]:
    """(chunk_id, document title, chunk text, removed, doc_id, start, end, doc_sha256) of every chunk ever stored,
    by id; ``doc_sha256`` names the document text the span refers to (None: unknown, a chunk stored before
    versions were kept whose span no longer held)."""
    sql = (
        'SELECT c.chunk_id, d.title, c.text, c.removed_at, c.doc_id, c.start, c."end", c.doc_sha256 FROM chunks c '
        "JOIN documents d USING (doc_id) ORDER BY c.chunk_id"
    )
    for chunk_id, title, text, removed, doc_id, start, end, doc_sha in db.execute(sql):
        yield chunk_id, title, text, removed is not None, doc_id, start, end, doc_sha


def live_document(db: sqlite3.Connection, doc_id: str) -> tuple[str, str] | None:
    """(current text, its sha256) of a live document; None when the workspace lacks it or it was removed."""
    row = db.execute(
        "SELECT text, content_sha256 FROM documents WHERE doc_id = ? AND removed_at IS NULL", (doc_id,)
    ).fetchone()
    return (row[0], row[1]) if row else None


def document_text(db: sqlite3.Connection, doc_id: str, content_sha256: str) -> str | None:
    """The text document ``doc_id`` had when its text hashed to ``content_sha256``: its current text or one it
    replaced; None when the workspace never held that version."""
    row = db.execute(
        "SELECT text FROM documents WHERE doc_id = ? AND content_sha256 = ? UNION ALL "
        "SELECT text FROM document_versions WHERE doc_id = ? AND content_sha256 = ? LIMIT 1",
        (doc_id, content_sha256, doc_id, content_sha256),
    ).fetchone()
    return row[0] if row else None


def document_versions(db: sqlite3.Connection, doc_id: str) -> list[str]:
    """The sha256 of every text document ``doc_id`` has had that the workspace kept, the current one last."""
    replaced = [
        row[0]
        for row in db.execute(
            "SELECT content_sha256 FROM document_versions WHERE doc_id = ? ORDER BY replaced_at, content_sha256",
            (doc_id,),
        )
    ]
    current = db.execute("SELECT content_sha256 FROM documents WHERE doc_id = ?", (doc_id,)).fetchone()
    return [sha for sha in replaced if not current or sha != current[0]] + ([current[0]] if current else [])


def chunker_configs(db: sqlite3.Connection) -> list[str]:
    """The distinct chunker config hashes the stored chunks were cut with."""
    sql = "SELECT DISTINCT config_sha256 FROM chunks WHERE config_sha256 IS NOT NULL ORDER BY config_sha256"
    return [row[0] for row in db.execute(sql)]


def chunked_document_hashes(db: sqlite3.Connection) -> list[tuple[str, str]]:
    """(doc_id, content sha256) of every document that has chunks, by id: what a release's lineage hashes."""
    sql = (
        "SELECT doc_id, content_sha256 FROM documents WHERE doc_id IN (SELECT DISTINCT doc_id FROM chunks) "
        "ORDER BY doc_id"
    )
    return db.execute(sql).fetchall()


UNEXAMINED_CHUNKS_SQL = (
    "SELECT chunk_id, text FROM chunks WHERE removed_at IS NULL AND boilerplate IS NULL AND chunk_id > ? "
    "ORDER BY chunk_id LIMIT ?"
)  # from the partial index chunks_unexamined (migration 33): every run asks, and it is empty once marks are backfilled


def unexamined_chunks(db: sqlite3.Connection, after: str = "", limit: int = 10_000) -> list[tuple[str, str]]:
    """(chunk_id, text) of up to ``limit`` live chunks cut before boilerplate was marked, by id after ``after``."""
    return db.execute(UNEXAMINED_CHUNKS_SQL, (after, limit)).fetchall()


def mark_boilerplate(db: sqlite3.Connection, marks: Iterable[tuple[str, str]]) -> None:
    """Set each (chunk_id, reason) chunk's mark ('' for content)."""
    db.executemany("UPDATE chunks SET boilerplate = ? WHERE chunk_id = ?", [(reason, c) for c, reason in marks])


def mark_repeated(db: sqlite3.Connection, min_documents: int, reason: str) -> None:
    """Mark ``reason`` the live chunks (not marked otherwise) of the duplicate groups whose live members come from
    ``min_documents`` documents or more, and unmark the chunks so marked whose group no longer does."""
    db.execute("DROP TABLE IF EXISTS temp.repeated_chunks")
    db.execute(
        "CREATE TEMP TABLE repeated_chunks AS SELECT d.chunk_id FROM chunk_duplicates d JOIN chunks c USING (chunk_id) "
        "WHERE c.removed_at IS NULL AND d.group_id IN (SELECT d2.group_id FROM chunk_duplicates d2 "
        "JOIN chunks c2 USING (chunk_id) WHERE c2.removed_at IS NULL GROUP BY d2.group_id "
        "HAVING COUNT(DISTINCT c2.doc_id) >= ?)",
        (min_documents,),
    )
    db.execute(
        "UPDATE chunks SET boilerplate = '' WHERE boilerplate = ? AND boilerplate > '' AND chunk_id NOT IN "
        "(SELECT chunk_id FROM temp.repeated_chunks)",
        (reason,),
    )
    db.execute(
        "UPDATE chunks SET boilerplate = ? WHERE (boilerplate = '' OR boilerplate IS NULL) AND chunk_id IN "
        "(SELECT chunk_id FROM temp.repeated_chunks)",
        (reason,),
    )
    db.execute("DROP TABLE temp.repeated_chunks")


BOILERPLATE_COUNTS_SQL = (
    "SELECT boilerplate, COUNT(*) FROM chunks WHERE removed_at IS NULL AND boilerplate > '' GROUP BY boilerplate "
    "ORDER BY boilerplate"
)  # marked: a text after '' (the partial index chunks_marked, migration 33), not a walk over every chunk's row


def boilerplate_counts(db: sqlite3.Connection) -> dict[str, int]:
    """reason -> how many live chunks are marked with it."""
    return dict(db.execute(BOILERPLATE_COUNTS_SQL).fetchall())


def boilerplate_chunks(db: sqlite3.Connection) -> dict[str, str]:
    """chunk_id -> reason of every chunk marked as page furniture (live or removed: a judgment may name either)."""
    sql = "SELECT chunk_id, boilerplate FROM chunks WHERE boilerplate > ''"  # marked: index chunks_marked
    return dict(db.execute(sql).fetchall())
