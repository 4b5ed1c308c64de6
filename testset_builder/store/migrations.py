"""Numbered schema migrations, applied in order and recorded in ``schema_migrations``.

Add a migration by writing the next ``mNNN_...`` function and decorating it with ``@migration(NNN)``; never edit
one that has shipped. A workspace whose highest recorded migration is above :data:`LATEST` was written by a newer
testset-builder and is refused.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import struct
from collections.abc import Callable

Migration = Callable[[sqlite3.Connection], None]
MIGRATIONS: dict[int, tuple[str, Migration]] = {}


def migration(number: int, rebuilds_a_parent: bool = False) -> Callable[[Migration], Migration]:
    """Register migration ``number``. ``rebuilds_a_parent``: it rebuilds a table other tables reference, which
    SQLite allows only with foreign keys off (its documented way to change a table); the runner turns them off
    around it and checks every reference before the migration commits."""

    def register(function: Migration) -> Migration:
        if number in MIGRATIONS:
            raise RuntimeError(f"migration {number} registered twice")
        function.rebuilds_a_parent = rebuilds_a_parent  # type: ignore[attr-defined]
        MIGRATIONS[number] = (function.__name__, function)
        return function

    return register


def run_script(db: sqlite3.Connection, script: str) -> None:
    """Execute a multi-statement script inside the caller's transaction (``executescript`` would commit first)."""
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            db.execute(statement)
            statement = ""
    if statement.strip():
        raise ValueError(f"incomplete SQL statement in migration: {statement.strip()[:80]}")


@migration(1)
def m001_create_tables(db: sqlite3.Connection) -> None:
    run_script(
        db,
        """
        CREATE TABLE documents (
            doc_id TEXT PRIMARY KEY,
            text TEXT NOT NULL,
            title TEXT NOT NULL DEFAULT '',
            metadata TEXT NOT NULL DEFAULT '{}',
            source TEXT NOT NULL DEFAULT '',
            content_sha256 TEXT NOT NULL,
            removed_at TEXT,
            created_at TEXT NOT NULL
        );
        CREATE TABLE chunks (
            chunk_id TEXT PRIMARY KEY,
            doc_id TEXT NOT NULL REFERENCES documents(doc_id),
            text TEXT NOT NULL,
            start INTEGER NOT NULL CHECK (start >= 0),
            "end" INTEGER NOT NULL CHECK ("end" >= start),
            metadata TEXT NOT NULL DEFAULT '{}',
            created_at TEXT NOT NULL
        );
        CREATE INDEX chunks_by_doc ON chunks(doc_id);
        CREATE TABLE queries (
            query_id TEXT PRIMARY KEY,
            text TEXT NOT NULL,
            origin TEXT NOT NULL CHECK (origin IN ('synthetic', 'real')),
            source_chunk_id TEXT REFERENCES chunks(chunk_id),
            style TEXT,
            lineage TEXT,
            created_at TEXT NOT NULL
        );
        CREATE TABLE candidates (
            query_id TEXT NOT NULL REFERENCES queries(query_id),
            chunk_id TEXT NOT NULL REFERENCES chunks(chunk_id),
            retriever TEXT NOT NULL,
            rank INTEGER NOT NULL CHECK (rank >= 1),
            score REAL,
            PRIMARY KEY (query_id, chunk_id, retriever)
        );
        CREATE TABLE judgments (
            judgment_id TEXT PRIMARY KEY,
            query_id TEXT NOT NULL REFERENCES queries(query_id),
            chunk_id TEXT NOT NULL REFERENCES chunks(chunk_id),
            grade INTEGER NOT NULL CHECK (grade BETWEEN 0 AND 2),
            source TEXT NOT NULL CHECK (source IN ('synthetic-source', 'llm', 'human')),
            confidence REAL CHECK (confidence IS NULL OR confidence BETWEEN 0 AND 1),
            grade_probs TEXT,
            rationale TEXT,
            reviewer TEXT,
            status TEXT NOT NULL,
            supersedes TEXT REFERENCES judgments(judgment_id),
            lineage TEXT,
            created_at TEXT NOT NULL
        );
        CREATE INDEX judgments_by_pair ON judgments(query_id, chunk_id);
        -- judgments are append-only: a new verdict supersedes an old one, nothing is changed in place
        CREATE TRIGGER judgments_no_update BEFORE UPDATE ON judgments
            BEGIN SELECT RAISE(ABORT, 'judgments are append-only; insert a superseding judgment instead'); END;
        CREATE TRIGGER judgments_no_delete BEFORE DELETE ON judgments
            BEGIN SELECT RAISE(ABORT, 'judgments are append-only; insert a superseding judgment instead'); END;
        CREATE TABLE review_assignments (
            query_id TEXT NOT NULL REFERENCES queries(query_id),
            chunk_id TEXT NOT NULL REFERENCES chunks(chunk_id),
            reviewer TEXT NOT NULL,
            priority REAL NOT NULL DEFAULT 0,
            assigned_at TEXT NOT NULL,
            PRIMARY KEY (query_id, chunk_id, reviewer)
        );
        CREATE TABLE llm_calls (
            request_sha256 TEXT PRIMARY KEY,
            stage TEXT NOT NULL,
            provider TEXT NOT NULL,
            model TEXT NOT NULL,
            request TEXT NOT NULL,
            response TEXT,
            usage TEXT,
            cost_usd REAL,
            latency_s REAL,
            attempts INTEGER NOT NULL DEFAULT 0,
            error TEXT,
            created_at TEXT NOT NULL
        );
        CREATE TABLE stage_runs (
            run_id INTEGER PRIMARY KEY AUTOINCREMENT,
            stage TEXT NOT NULL,
            config_sha256 TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('running', 'done', 'failed')),
            counts TEXT NOT NULL DEFAULT '{}',
            started_at TEXT NOT NULL,
            finished_at TEXT
        );
        CREATE INDEX stage_runs_by_stage ON stage_runs(stage, config_sha256);
        CREATE TABLE releases (
            version TEXT PRIMARY KEY,
            parent_version TEXT REFERENCES releases(version),
            content_sha256 TEXT NOT NULL,
            manifest TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        """,
    )


@migration(2)
def m002_llm_batches(db: sqlite3.Connection) -> None:
    run_script(
        db,
        """
        CREATE TABLE llm_batches (
            batch_id TEXT PRIMARY KEY,
            provider TEXT NOT NULL,
            stage TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('submitted', 'ended')),
            requests TEXT NOT NULL,
            submitted_at TEXT NOT NULL,
            ended_at TEXT
        );
        """,
    )


@migration(3)
def m003_chunk_lifecycle(db: sqlite3.Connection) -> None:
    """Chunks of a changed or removed document are marked, not deleted: judgments may point at them."""
    run_script(
        db,
        """
        ALTER TABLE chunks ADD COLUMN removed_at TEXT;
        ALTER TABLE chunks ADD COLUMN config_sha256 TEXT;
        CREATE INDEX chunks_live ON chunks(doc_id, removed_at);
        """,
    )


@migration(4)
def m004_chunk_duplicates(db: sqlite3.Connection) -> None:
    """Exact and near-duplicate chunk groups (derived data: recomputed when the live chunks change)."""
    run_script(
        db,
        """
        CREATE TABLE chunk_duplicates (
            chunk_id TEXT PRIMARY KEY REFERENCES chunks(chunk_id),
            group_id TEXT NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('exact', 'near'))
        );
        CREATE INDEX chunk_duplicates_by_group ON chunk_duplicates(group_id);
        """,
    )


@migration(5)
def m005_query_metadata(db: sqlite3.Connection) -> None:
    """Per-query facts a stage records: a synthetic question's lexical overlap with its source, its other sources."""
    run_script(db, "ALTER TABLE queries ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}';")


@migration(6)
def m006_batch_intents(db: sqlite3.Connection) -> None:
    """A batch is recorded as an intent ('submitting') before it is sent, so a crash between sending it and
    recording its id can never lead to paying for the same requests twice; 'abandoned' forgets such an intent."""
    run_script(
        db,
        """
        CREATE TABLE llm_batches_v6 (
            batch_id TEXT PRIMARY KEY,
            provider TEXT NOT NULL,
            stage TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('submitting', 'submitted', 'ended', 'abandoned')),
            requests TEXT NOT NULL,
            submitted_at TEXT NOT NULL,
            ended_at TEXT
        );
        INSERT INTO llm_batches_v6 SELECT * FROM llm_batches;
        DROP TABLE llm_batches;
        ALTER TABLE llm_batches_v6 RENAME TO llm_batches;
        """,
    )


@migration(7)
def m007_review_queue(db: sqlite3.Connection) -> None:
    """The review queue as items (a query-chunk pair, or a synthetic question) with a priority, a reason and a wanted
    overlap; leases that hand an item to a reviewer for a while; and the verdict log (append-only: grades also land as
    human judgments, skips and question verdicts only here). Replaces the '*' rows of review_assignments."""
    run_script(
        db,
        """
        CREATE TABLE review_items (
            item_id TEXT PRIMARY KEY,
            kind TEXT NOT NULL CHECK (kind IN ('pair', 'question')),
            query_id TEXT NOT NULL REFERENCES queries(query_id),
            chunk_id TEXT REFERENCES chunks(chunk_id),
            priority REAL NOT NULL DEFAULT 0,
            reason TEXT NOT NULL DEFAULT '',
            wanted_overlap INTEGER NOT NULL DEFAULT 1 CHECK (wanted_overlap >= 1),
            created_at TEXT NOT NULL
        );
        CREATE INDEX review_items_by_priority ON review_items(priority DESC, item_id);
        CREATE TABLE review_leases (
            item_id TEXT NOT NULL REFERENCES review_items(item_id),
            reviewer TEXT NOT NULL,
            leased_at TEXT NOT NULL,
            expires_at TEXT NOT NULL,
            PRIMARY KEY (item_id, reviewer)
        );
        CREATE TABLE review_verdicts (
            verdict_id TEXT PRIMARY KEY,
            item_id TEXT NOT NULL REFERENCES review_items(item_id),
            reviewer TEXT NOT NULL,
            action TEXT NOT NULL CHECK (action IN ('grade', 'skip', 'keep_question', 'drop_question',
                                                   'edit_question', 'undo')),
            grade INTEGER CHECK (grade IS NULL OR grade BETWEEN 0 AND 2),
            reason TEXT,
            comment TEXT,
            edited_text TEXT,
            judgment_id TEXT REFERENCES judgments(judgment_id),
            undoes TEXT REFERENCES review_verdicts(verdict_id),
            idempotency_key TEXT NOT NULL UNIQUE,
            seconds REAL,
            created_at TEXT NOT NULL
        );
        CREATE INDEX review_verdicts_by_item ON review_verdicts(item_id, reviewer);
        CREATE INDEX review_verdicts_by_reviewer ON review_verdicts(reviewer, created_at);
        CREATE INDEX review_verdicts_by_undoes ON review_verdicts(undoes);
        -- where each reviewer stands on each item (their latest verdict nobody undid): kept in step with the log in
        -- the same transaction, so handing out work never has to replay the whole log
        CREATE TABLE review_state (
            item_id TEXT NOT NULL REFERENCES review_items(item_id),
            reviewer TEXT NOT NULL,
            verdict_id TEXT NOT NULL REFERENCES review_verdicts(verdict_id),
            action TEXT NOT NULL,
            counting INTEGER NOT NULL CHECK (counting IN (0, 1)),
            created_at TEXT NOT NULL,
            PRIMARY KEY (item_id, reviewer)
        );
        CREATE INDEX review_state_by_item ON review_state(item_id, counting);
        CREATE INDEX review_leases_by_item ON review_leases(item_id, expires_at);
        CREATE TRIGGER review_verdicts_no_update BEFORE UPDATE ON review_verdicts
            BEGIN SELECT RAISE(ABORT, 'verdicts are append-only; an undo is a new verdict'); END;
        CREATE TRIGGER review_verdicts_no_delete BEFORE DELETE ON review_verdicts
            BEGIN SELECT RAISE(ABORT, 'verdicts are append-only; an undo is a new verdict'); END;
        """,
    )
    queued = db.execute("SELECT query_id, chunk_id, priority, assigned_at FROM review_assignments WHERE reviewer = '*'")
    db.executemany(
        "INSERT INTO review_items (item_id, kind, query_id, chunk_id, priority, reason, wanted_overlap, created_at) "
        "VALUES (?, 'pair', ?, ?, ?, 'llm proposal', 1, ?)",
        [(pair_item_id(q, c), q, c, p, at) for q, c, p, at in queued.fetchall()],
    )
    db.execute("DELETE FROM review_assignments WHERE reviewer = '*'")


@migration(8)
def m008_estimates(db: sqlite3.Connection) -> None:
    """The relevance estimate of each (query, chunk) pair: P(relevant), the model that made it and how many verdicts
    that model saw, and the features it read (so a refit needs no retrieval). Derived data: recomputed, replaced."""
    run_script(
        db,
        """
        CREATE TABLE estimates (
            query_id TEXT NOT NULL REFERENCES queries(query_id),
            chunk_id TEXT NOT NULL REFERENCES chunks(chunk_id),
            p_relevant REAL NOT NULL CHECK (p_relevant BETWEEN 0 AND 1),
            model TEXT NOT NULL,
            verdicts INTEGER NOT NULL CHECK (verdicts >= 0),
            features TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (query_id, chunk_id)
        );
        """,
    )


@migration(9)
def m009_review_draws(db: sqlite3.Connection) -> None:
    """Each pair a selection round considered for review: its inclusion probability, whether it was drawn, and the
    estimate behind the probability (the weights that keep estimates from verdicts unbiased). Append-only."""
    run_script(
        db,
        """
        CREATE TABLE review_draws (
            item_id TEXT PRIMARY KEY REFERENCES review_items(item_id),
            round INTEGER NOT NULL CHECK (round >= 1),
            probability REAL NOT NULL CHECK (probability > 0 AND probability <= 1),
            drawn INTEGER NOT NULL CHECK (drawn IN (0, 1)),
            p_relevant REAL NOT NULL CHECK (p_relevant BETWEEN 0 AND 1),
            model TEXT NOT NULL,
            created_at TEXT NOT NULL
        );
        CREATE TRIGGER review_draws_no_update BEFORE UPDATE ON review_draws
            BEGIN SELECT RAISE(ABORT, 'draws are append-only: a probability once used stays as it was'); END;
        CREATE TRIGGER review_draws_no_delete BEFORE DELETE ON review_draws
            BEGIN SELECT RAISE(ABORT, 'draws are append-only: a probability once used stays as it was'); END;
        """,
    )


@migration(10)
def m010_draws_by_pair(db: sqlite3.Connection) -> None:
    """A round draws from every estimated pair, queued or not (the population prediction-powered scoring needs):
    draws name their (query, chunk) pair, and the item a drawn pair becomes is derived from it, so a draw no longer
    needs a queued item. Rows are carried over; still append-only."""
    run_script(
        db,
        """
        CREATE TABLE review_draws_by_pair (
            query_id TEXT NOT NULL REFERENCES queries(query_id),
            chunk_id TEXT NOT NULL REFERENCES chunks(chunk_id),
            item_id TEXT NOT NULL UNIQUE,
            round INTEGER NOT NULL CHECK (round >= 1),
            probability REAL NOT NULL CHECK (probability > 0 AND probability <= 1),
            drawn INTEGER NOT NULL CHECK (drawn IN (0, 1)),
            p_relevant REAL NOT NULL CHECK (p_relevant BETWEEN 0 AND 1),
            model TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (query_id, chunk_id)
        );
        INSERT INTO review_draws_by_pair
            SELECT i.query_id, i.chunk_id, d.item_id, d.round, d.probability, d.drawn, d.p_relevant, d.model,
                d.created_at
            FROM review_draws d JOIN review_items i USING (item_id);
        DROP TRIGGER review_draws_no_update;
        DROP TRIGGER review_draws_no_delete;
        DROP TABLE review_draws;
        ALTER TABLE review_draws_by_pair RENAME TO review_draws;
        CREATE TRIGGER review_draws_no_update BEFORE UPDATE ON review_draws
            BEGIN SELECT RAISE(ABORT, 'draws are append-only: a probability once used stays as it was'); END;
        CREATE TRIGGER review_draws_no_delete BEFORE DELETE ON review_draws
            BEGIN SELECT RAISE(ABORT, 'draws are append-only: a probability once used stays as it was'); END;
        """,
    )


@migration(11)
def m011_spans_and_document_versions(db: sqlite3.Connection) -> None:
    """Labels anchored to spans of a known document text, so they can outlive a chunking:

    - ``document_versions``: every text a document had before it changed (a trigger copies the old text whenever a
      document's text is replaced), so a span taken from an older text keeps its referent; the current text stays
      in ``documents``. Texts replaced before this migration are gone and cannot be recovered.
    - ``chunks.doc_sha256``: the document text (by sha256) a chunk's span refers to; existing chunks get the
      current text's when their span still holds in it, else NULL (unknown).
    - ``judgment_spans``: for each judgment, the span it is about (its chunk's document, text version, start and
      end when it was made) and, when known, the evidence inside it (document offsets and the quoted text).
      Append-only like the judgments; existing judgments get their chunk's span."""
    run_script(
        db,
        """
        CREATE TABLE document_versions (
            doc_id TEXT NOT NULL REFERENCES documents(doc_id),
            content_sha256 TEXT NOT NULL,
            text TEXT NOT NULL,
            title TEXT NOT NULL DEFAULT '',
            replaced_at TEXT NOT NULL,
            PRIMARY KEY (doc_id, content_sha256)
        );
        CREATE TRIGGER documents_keep_replaced_text BEFORE UPDATE OF text ON documents
            WHEN old.content_sha256 IS NOT new.content_sha256
            BEGIN
                INSERT OR IGNORE INTO document_versions (doc_id, content_sha256, text, title, replaced_at)
                VALUES (old.doc_id, old.content_sha256, old.text, old.title, strftime('%Y-%m-%dT%H:%M:%f+00:00'));
            END;
        ALTER TABLE chunks ADD COLUMN doc_sha256 TEXT;
        """,
    )
    _backfill_chunk_versions(db)
    run_script(
        db,
        """
        CREATE TABLE judgment_spans (
            judgment_id TEXT PRIMARY KEY REFERENCES judgments(judgment_id),
            doc_id TEXT NOT NULL,
            doc_sha256 TEXT,
            start INTEGER NOT NULL CHECK (start >= 0),
            "end" INTEGER NOT NULL CHECK ("end" >= start),
            evidence_start INTEGER,
            evidence_end INTEGER,
            evidence_text TEXT,
            CHECK ((evidence_start IS NULL) = (evidence_end IS NULL)),
            CHECK (evidence_end IS NULL OR evidence_end >= evidence_start)
        );
        INSERT INTO judgment_spans (judgment_id, doc_id, doc_sha256, start, "end")
            SELECT j.judgment_id, c.doc_id, c.doc_sha256, c.start, c."end"
            FROM judgments j JOIN chunks c USING (chunk_id);
        CREATE TRIGGER judgment_spans_no_update BEFORE UPDATE ON judgment_spans
            BEGIN SELECT RAISE(ABORT, 'judgment spans are append-only, as judgments are'); END;
        CREATE TRIGGER judgment_spans_no_delete BEFORE DELETE ON judgment_spans
            BEGIN SELECT RAISE(ABORT, 'judgment spans are append-only, as judgments are'); END;
        """,
    )


@migration(12)
def m012_production_logs(db: sqlite3.Connection) -> None:
    """Production RAG logs: ``log_imports`` (one row a log file, by its bytes' sha256, with the line its batches
    are committed through, so a killed import resumes without counting a record twice), ``log_queries`` (each
    logged query's frequency, first and last seen, feedback and clicks, summed over its records) and
    ``log_retrievals`` (what the live system retrieved for it, at its latest record: the production run) and
    ``log_draws`` (each logged query's part in a failure-first draw: its probability, whether it was drawn, why it
    weighed what it did, and the query it is a near-duplicate of)."""
    run_script(
        db,
        """
        CREATE TABLE log_imports (
            import_id TEXT PRIMARY KEY,
            source TEXT NOT NULL,
            format TEXT NOT NULL,
            status TEXT NOT NULL CHECK (status IN ('running', 'done')),
            lines_done INTEGER NOT NULL DEFAULT 0,
            counts TEXT NOT NULL DEFAULT '{}',
            started_at TEXT NOT NULL,
            finished_at TEXT
        );
        CREATE TABLE log_queries (
            query_id TEXT PRIMARY KEY REFERENCES queries(query_id),
            frequency INTEGER NOT NULL CHECK (frequency >= 1),
            first_seen TEXT,
            last_seen TEXT,
            thumbs_up INTEGER NOT NULL DEFAULT 0,
            thumbs_down INTEGER NOT NULL DEFAULT 0,
            rating_sum REAL NOT NULL DEFAULT 0,
            ratings INTEGER NOT NULL DEFAULT 0,
            comments INTEGER NOT NULL DEFAULT 0,
            cited INTEGER NOT NULL DEFAULT 0,
            clicked INTEGER NOT NULL DEFAULT 0,
            last_answer TEXT,
            last_comment TEXT,
            retrieved_at TEXT
        );
        CREATE TABLE log_retrievals (
            query_id TEXT NOT NULL REFERENCES queries(query_id),
            rank INTEGER NOT NULL CHECK (rank >= 1),
            chunk_id TEXT NOT NULL REFERENCES chunks(chunk_id),
            score REAL,
            PRIMARY KEY (query_id, rank)
        );
        CREATE TABLE log_draws (
            query_id TEXT PRIMARY KEY REFERENCES queries(query_id),
            round INTEGER NOT NULL CHECK (round >= 1),
            probability REAL NOT NULL CHECK (probability > 0 AND probability <= 1),
            drawn INTEGER NOT NULL CHECK (drawn IN (0, 1)),
            weight REAL NOT NULL,
            reasons TEXT NOT NULL DEFAULT '[]',
            duplicate_of TEXT REFERENCES queries(query_id),
            drawn_at TEXT NOT NULL
        );
        """,
    )


@migration(13)
def m013_failure_tags(db: sqlite3.Connection) -> None:
    """``failure_tags``: reviewers' tags on logged queries (what went wrong in production: ``retrieval``, no relevant
    chunk was retrieved; ``generation``, one was and the answer still failed; ``none``; ``unanswerable`` from the
    corpus). Append-only like the verdicts: a tag names the reviewer's standing tag it replaces (``supersedes``); an
    undo is a row without a tag that names the tag it takes back. Each row has its idempotency key."""
    run_script(
        db,
        """
        CREATE TABLE failure_tags (
            tag_id TEXT PRIMARY KEY,
            query_id TEXT NOT NULL REFERENCES queries(query_id),
            reviewer TEXT NOT NULL,
            tag TEXT CHECK (tag IN ('retrieval', 'generation', 'none', 'unanswerable')),
            supersedes TEXT REFERENCES failure_tags(tag_id),
            comment TEXT,
            idempotency_key TEXT NOT NULL UNIQUE,
            seconds REAL,
            created_at TEXT NOT NULL,
            CHECK (tag IS NOT NULL OR supersedes IS NOT NULL)
        );
        CREATE INDEX failure_tags_by_query ON failure_tags (query_id, reviewer, created_at);
        CREATE TRIGGER failure_tags_no_update BEFORE UPDATE ON failure_tags
            BEGIN SELECT RAISE(ABORT, 'failure tags are append-only: supersede a tag, never change it'); END;
        CREATE TRIGGER failure_tags_no_delete BEFORE DELETE ON failure_tags
            BEGIN SELECT RAISE(ABORT, 'failure tags are append-only: supersede a tag, never change it'); END;
        """,
    )


@migration(14)
def m014_duplicate_index(db: sqlite3.Connection) -> None:
    """The duplicate index, so a change to the corpus costs work proportional to it: per chunk its text sha256 and
    normalised-text sha256 (indexed over live chunks: exact duplicates, and text matching without holding texts),
    ``chunk_lsh`` (its MinHash LSH band keys, indexed by key) and ``chunk_dedup_pending`` (chunks signed but not yet
    grouped); ``source_files``: per file read as one document, its stat and the text it gave, so that a rerun need
    not read a file whose stat is unchanged. chunks_by_doc goes: chunks_live (doc_id, removed_at) serves its
    lookups, and a chunk written updates one index fewer. Existing live chunks are left to be signed and grouped by
    the corpus layer once every migration is applied (``backfills_due`` names the work; see migration 29)."""
    run_script(
        db,
        """
        ALTER TABLE chunks ADD COLUMN text_sha256 TEXT;
        ALTER TABLE chunks ADD COLUMN normalised_sha256 TEXT;
        DROP INDEX chunks_by_doc;
        CREATE INDEX chunks_live_by_text_sha256 ON chunks(text_sha256) WHERE removed_at IS NULL;
        CREATE INDEX chunks_live_by_normalised_sha256 ON chunks(normalised_sha256) WHERE removed_at IS NULL;
        CREATE TABLE chunk_lsh (key INTEGER NOT NULL, chunk_id TEXT NOT NULL);
        CREATE INDEX chunk_lsh_by_key ON chunk_lsh(key);
        CREATE TABLE chunk_dedup_pending (
            chunk_id TEXT PRIMARY KEY, band_keys BLOB NOT NULL DEFAULT x'', sketch BLOB NOT NULL DEFAULT x''
        );
        CREATE TABLE source_files (
            path TEXT PRIMARY KEY,
            doc_id TEXT NOT NULL,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            content_sha256 TEXT NOT NULL,
            config_sha256 TEXT NOT NULL,
            checked_ns INTEGER NOT NULL
        );
        """,
    )
    if db.execute("SELECT 1 FROM chunks WHERE removed_at IS NULL LIMIT 1").fetchone():
        run_script(db, _BACKFILLS_DUE)
        db.execute("INSERT OR IGNORE INTO backfills_due (name) VALUES ('duplicate_index')")


@migration(15)
def m015_versions_kept_when_a_text_returns(db: sqlite3.Connection) -> None:
    """A document whose text returns to one it had before and then changes again kept failing to store: the trigger
    that keeps replaced texts inserted OR IGNORE, but SQLite lets the conflict policy of the statement that fires a
    trigger override the trigger's own, and the documents upsert's is ABORT, so the text already kept raised a
    UNIQUE error (edit a file, revert it, edit it again: ``chunk`` stopped). The trigger now inserts only a text
    not kept yet, whatever statement fires it."""
    run_script(
        db,
        """
        DROP TRIGGER documents_keep_replaced_text;
        CREATE TRIGGER documents_keep_replaced_text BEFORE UPDATE OF text ON documents
            WHEN old.content_sha256 IS NOT new.content_sha256
            BEGIN
                INSERT INTO document_versions (doc_id, content_sha256, text, title, replaced_at)
                SELECT old.doc_id, old.content_sha256, old.text, old.title, strftime('%Y-%m-%dT%H:%M:%f+00:00')
                WHERE NOT EXISTS (
                    SELECT 1 FROM document_versions WHERE doc_id = old.doc_id AND content_sha256 = old.content_sha256
                );
            END;
        """,
    )


@migration(16)
def m016_lsh_keys_in_one_btree(db: sqlite3.Connection) -> None:
    """``chunk_lsh`` becomes one B-tree: (key, chunk_id) its primary key, WITHOUT ROWID, the key as the 8
    little-endian bytes it has in a signature's ``band_keys``. Pending chunks' keys are then copied into it by SQL
    alone (a ``substr`` of the blob a key) instead of a Python tuple a key, and a key costs one entry instead of a
    table row and an index entry (a 1 GB corpus has 26M keys)."""
    db.create_function("key_bytes", 1, _key_bytes, deterministic=True)
    run_script(
        db,
        """
        CREATE TABLE chunk_lsh_keys (key BLOB NOT NULL, chunk_id TEXT NOT NULL, PRIMARY KEY (key, chunk_id))
            WITHOUT ROWID;
        INSERT OR IGNORE INTO chunk_lsh_keys (key, chunk_id)
            SELECT key_bytes(key), chunk_id FROM chunk_lsh ORDER BY 1, 2;
        DROP TABLE chunk_lsh;
        ALTER TABLE chunk_lsh_keys RENAME TO chunk_lsh;
        """,
    )


@migration(17)
def m017_documents_state_index(db: sqlite3.Connection) -> None:
    """``documents_state``: what a rerun asks of every document (live or not, its text's sha256, its source) read
    from an index rather than from the rows, where these columns follow the text: reading them walked each text's
    overflow pages."""
    db.execute("CREATE INDEX documents_state ON documents (doc_id, removed_at, content_sha256, source)")


_KEY_BLOCKS = """
    CREATE TABLE IF NOT EXISTS chunk_lsh_blocks (
        first_key INTEGER NOT NULL, keys BLOB NOT NULL, chunks BLOB NOT NULL
    );
    CREATE INDEX IF NOT EXISTS chunk_lsh_blocks_by_first_key ON chunk_lsh_blocks (first_key);
"""


@migration(18)
def m018_lsh_key_blocks(db: sqlite3.Connection) -> None:
    """``chunk_lsh_blocks``: a large load's LSH keys sorted by key and kept in blocks of (key, chunk rowid) arrays,
    16 bytes an entry, built by sorting in numpy (at 1 GB of corpus, 26M keys: 1.6 GB and a 30 s sort by SQLite as
    rows of ``chunk_lsh``, which keeps the keys of small loads). An existing workspace's ``chunk_lsh`` stays as it
    is: it is read with the blocks, and the next large load moves it into them."""
    run_script(db, _KEY_BLOCKS)


@migration(19)
def m019_draws_by_round(db: sqlite3.Connection) -> None:
    """A pair may be considered by several review rounds: each round draws anew, with the refitted estimate's
    probabilities, from every pair no human has labelled (the pairs an earlier round considered and did not draw
    included), so one row per (pair, round). Rows are carried over; still append-only."""
    run_script(
        db,
        """
        CREATE TABLE review_draws_by_round (
            query_id TEXT NOT NULL REFERENCES queries(query_id),
            chunk_id TEXT NOT NULL REFERENCES chunks(chunk_id),
            item_id TEXT NOT NULL,
            round INTEGER NOT NULL CHECK (round >= 1),
            probability REAL NOT NULL CHECK (probability > 0 AND probability <= 1),
            drawn INTEGER NOT NULL CHECK (drawn IN (0, 1)),
            p_relevant REAL NOT NULL CHECK (p_relevant BETWEEN 0 AND 1),
            model TEXT NOT NULL,
            created_at TEXT NOT NULL,
            PRIMARY KEY (query_id, chunk_id, round)
        );
        INSERT INTO review_draws_by_round
            SELECT query_id, chunk_id, item_id, round, probability, drawn, p_relevant, model, created_at
            FROM review_draws;
        DROP TRIGGER review_draws_no_update;
        DROP TRIGGER review_draws_no_delete;
        DROP TABLE review_draws;
        ALTER TABLE review_draws_by_round RENAME TO review_draws;
        CREATE INDEX review_draws_by_item ON review_draws (item_id, drawn);
        CREATE INDEX review_draws_by_round_number ON review_draws (round);
        CREATE TRIGGER review_draws_no_update BEFORE UPDATE ON review_draws
            BEGIN SELECT RAISE(ABORT, 'draws are append-only: a probability once used stays as it was'); END;
        CREATE TRIGGER review_draws_no_delete BEFORE DELETE ON review_draws
            BEGIN SELECT RAISE(ABORT, 'draws are append-only: a probability once used stays as it was'); END;
        """,
    )


@migration(20)
def m020_reviewer_tokens(db: sqlite3.Connection) -> None:
    """``reviewer_tokens``: a reviewer's own credential for the web reviewer (stored as its SHA-256, never the
    token), so a verdict's reviewer comes from who holds the token, not from a name the request gives; the role is
    ``reviewer`` or ``admin`` (may adjudicate)."""
    run_script(
        db,
        """
        CREATE TABLE IF NOT EXISTS reviewer_tokens (
            reviewer TEXT PRIMARY KEY,
            token_sha256 TEXT NOT NULL UNIQUE,
            role TEXT NOT NULL CHECK (role IN ('reviewer', 'admin')),
            created_at TEXT NOT NULL
        );
        """,
    )


@migration(21)
def m021_review_settings(db: sqlite3.Connection) -> None:
    """``review_settings``: what every reviewer of the workspace shares (``overlap``: distinct reviewers each item
    wants), so one workspace's queue and progress read the same whoever asks; and items by query, so a reviewer is
    served one query's items together."""
    run_script(
        db,
        """
        CREATE TABLE IF NOT EXISTS review_settings (
            key TEXT PRIMARY KEY,
            value TEXT NOT NULL,
            set_at TEXT NOT NULL
        );
        CREATE INDEX IF NOT EXISTS review_items_by_query ON review_items(query_id, priority DESC);
        """,
    )


@migration(22, rebuilds_a_parent=True)
def m022_verdict_actions_declared_in_one_place(db: sqlite3.Connection) -> None:
    """``review_verdicts`` without its CHECK on the action: the actions are declared once, in
    :mod:`testset_builder.review_actions` (which the review stage checks every verdict against), so a new kind of
    verdict needs no table rebuilt again. The table is rebuilt this once, its rows, indexes and append-only triggers
    as they were; ``review_state`` keeps pointing at the same verdict ids (every reference is checked before the
    migration commits)."""
    run_script(
        db,
        """
        CREATE TABLE review_verdicts_v22 (
            verdict_id TEXT PRIMARY KEY,
            item_id TEXT NOT NULL REFERENCES review_items(item_id),
            reviewer TEXT NOT NULL,
            action TEXT NOT NULL,
            grade INTEGER CHECK (grade IS NULL OR grade BETWEEN 0 AND 2),
            reason TEXT,
            comment TEXT,
            edited_text TEXT,
            judgment_id TEXT REFERENCES judgments(judgment_id),
            undoes TEXT REFERENCES review_verdicts(verdict_id),
            idempotency_key TEXT NOT NULL UNIQUE,
            seconds REAL,
            created_at TEXT NOT NULL
        );
        INSERT INTO review_verdicts_v22 SELECT verdict_id, item_id, reviewer, action, grade, reason, comment,
            edited_text, judgment_id, undoes, idempotency_key, seconds, created_at FROM review_verdicts;
        DROP TRIGGER review_verdicts_no_update;
        DROP TRIGGER review_verdicts_no_delete;
        DROP TABLE review_verdicts;
        ALTER TABLE review_verdicts_v22 RENAME TO review_verdicts;
        CREATE INDEX review_verdicts_by_item ON review_verdicts(item_id, reviewer);
        CREATE INDEX review_verdicts_by_reviewer ON review_verdicts(reviewer, created_at);
        CREATE INDEX review_verdicts_by_undoes ON review_verdicts(undoes);
        CREATE TRIGGER review_verdicts_no_update BEFORE UPDATE ON review_verdicts
            BEGIN SELECT RAISE(ABORT, 'verdicts are append-only; an undo is a new verdict'); END;
        CREATE TRIGGER review_verdicts_no_delete BEFORE DELETE ON review_verdicts
            BEGIN SELECT RAISE(ABORT, 'verdicts are append-only; an undo is a new verdict'); END;
        """,
    )


@migration(23)
def m023_logged_sessions(db: sqlite3.Connection) -> None:
    """``log_queries.session``: the session of the earliest record that logged the query with one, as a hash (the
    logged id itself is not kept), and ``session_seen``, that record's timestamp; so real queries can resample by
    session in ``score``."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(log_queries)")}
    for column in ("session", "session_seen"):  # idempotent, as the migrations after 18 are
        if column not in columns:
            run_script(db, f"ALTER TABLE log_queries ADD COLUMN {column} TEXT;")


@migration(24)
def m024_draw_strata(db: sqlite3.Connection) -> None:
    """``review_draws.stratum``: ``take-all`` for a pair a round took for sure (probability 1: a real query's likely
    relevant pair), ``sample`` for one it considered in the random draw. Every earlier row was a sampled one."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(review_draws)")}
    if "stratum" not in columns:  # idempotent, as the migrations after 18 are
        run_script(
            db,
            "ALTER TABLE review_draws ADD COLUMN stratum TEXT NOT NULL DEFAULT 'sample' "
            "CHECK (stratum IN ('take-all', 'sample'));",
        )


# the features each earlier version stored, in order, by how many there were: frozen here, as a migration must be
_POSITIONAL_FEATURES = (
    "dense", "dense_gap", "bm25", "bm25_log_rank", "dense_log_rank", "overlap", "llm", "llm_missing", "dense_z",
    "bm25_z", "rrf", "runs", "runs_missing", "scores",
)  # fmt: skip


@migration(25)
def m025_estimate_features_by_name(db: sqlite3.Connection) -> None:
    """``estimates.features`` as a JSON object by feature name instead of a list by position: rows of 11, 13 or 14
    features (three versions) name theirs, so a reader no longer pads old rows by position. A row of any other
    length is left empty (its features are computed again)."""
    rows = db.execute("SELECT query_id, chunk_id, features FROM estimates").fetchall()
    updates = []
    for query_id, chunk_id, stored in rows:
        values = json.loads(stored) if stored else {}
        if isinstance(values, list):
            named = dict(zip(_POSITIONAL_FEATURES, values)) if len(values) in (11, 13, 14) else {}
            updates.append((json.dumps(named, sort_keys=True), query_id, chunk_id))
    db.executemany("UPDATE estimates SET features = ? WHERE query_id = ? AND chunk_id = ?", updates)


@migration(26)
def m026_logged_traces(db: sqlite3.Connection) -> None:
    """``log_traces``: every request (trace) an import recorded, by a hash of its id (the id itself is not kept),
    so a grown, rotated or overlapping log adds only the requests no import recorded before."""
    run_script(
        db,
        """
        CREATE TABLE IF NOT EXISTS log_traces (
            trace_key TEXT PRIMARY KEY,
            import_id TEXT NOT NULL REFERENCES log_imports(import_id)
        );
        """,
    )


@migration(27)
def m027_chunk_boilerplate(db: sqlite3.Connection) -> None:
    """``chunks.boilerplate``: why a chunk is page furniture (navigation, a table of contents, a repeated footer: one
    of :data:`~testset_builder.corpus.boilerplate.REASONS`), '' for content, NULL for a chunk cut before the mark
    existed (the next ``chunk`` run examines it). Marked chunks stay searchable; they are never a question's source
    nor taken for sure in review."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(chunks)")}
    if "boilerplate" not in columns:  # idempotent, as the migrations after 18 are
        run_script(db, "ALTER TABLE chunks ADD COLUMN boilerplate TEXT;")


@migration(28)
def m028_verdict_source_time(db: sqlite3.Connection) -> None:
    """``review_verdicts.source_at``: when the annotator gave a verdict imported from another tool, as that tool's
    export says (Label Studio's ``updated_at``, Argilla's response ``updated_at``), in UTC; NULL for a verdict given
    here, whose time is its ``created_at``. An import compares it with the reviewer's standing verdict, so an older
    export never replaces a newer grade."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(review_verdicts)")}
    if "source_at" not in columns:  # idempotent, as the migrations after 18 are
        run_script(db, "ALTER TABLE review_verdicts ADD COLUMN source_at TEXT;")


_BACKFILLS_DUE = """
    CREATE TABLE IF NOT EXISTS backfills_due (name TEXT PRIMARY KEY);
"""


@migration(29)
def m029_backfills_due(db: sqlite3.Connection) -> None:
    """``backfills_due``: work on existing rows that a migration leaves to a higher layer, because it needs that
    layer's code (the store imports none of it). Migration 14 names ``duplicate_index`` there: the corpus layer signs
    and groups the old live chunks (:func:`testset_builder.corpus.backfill.run_due_backfills`) and removes the name.
    Created by migration 14 already when an older workspace comes this way."""
    run_script(db, _BACKFILLS_DUE)


@migration(30)
def m030_synthetic_audit(db: sqlite3.Connection) -> None:
    """``synthetic_audit``: each synthetic question's part in the audit of unchecked labels (see
    :mod:`~testset_builder.labels.audit`): the probability it was drawn with and whether it was. Recorded drawn or
    not, once per question, so the estimate from the audited ones stays unbiased."""
    run_script(
        db,
        """
        CREATE TABLE IF NOT EXISTS synthetic_audit (
            query_id TEXT PRIMARY KEY,
            probability REAL NOT NULL,
            drawn INTEGER NOT NULL,
            drawn_at TEXT NOT NULL
        );
        """,
    )


@migration(31)
def m031_trace_feedback(db: sqlite3.Connection) -> None:
    """``log_traces`` links each request to its logged query and keeps the feedback counted for it, so feedback
    given after the request was imported is added to it once. ``kind``: ``request`` for a retrieval's record,
    ``feedback`` for a trace with feedback alone (an app's generation trace) counted on its session's retrieval.
    ``session`` (hashed, as ``log_queries.session``) and ``seen_at`` find a session's nearest earlier retrieval.
    Rows recorded before have no query: their late feedback cannot be placed."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(log_traces)")}
    added = {
        "query_id": "TEXT", "kind": "TEXT", "session": "TEXT", "seen_at": "TEXT", "thumbs": "INTEGER",
        "rating": "REAL", "commented": "INTEGER NOT NULL DEFAULT 0",
    }  # fmt: skip
    for name, kind in added.items():
        if name not in columns:  # idempotent, as the migrations after 18 are
            db.execute(f"ALTER TABLE log_traces ADD COLUMN {name} {kind}")
    db.execute("CREATE INDEX IF NOT EXISTS log_traces_by_session ON log_traces(session, seen_at)")


@migration(32)
def m032_partial_traces(db: sqlite3.Connection) -> None:
    """``log_partial_traces``: the spans of a trace a file held only part of (its root elsewhere: a file rotated
    mid-trace), by the trace id's hash, until a later file's part completes it; their user text scrubbed as a query
    is. A completed trace's row goes in the transaction that records it."""
    db.execute(
        "CREATE TABLE IF NOT EXISTS log_partial_traces ("
        "trace_key TEXT PRIMARY KEY, import_id TEXT NOT NULL, spans TEXT NOT NULL, held_at TEXT NOT NULL)"
    )


@migration(33)
def m033_record_files(db: sqlite3.Connection) -> None:
    """``record_files``: per file of records (JSONL) read whole without a skip, its stat then (``checked_ns``: a
    time before that stat), the fields it was read with (``reading``), the chunker config and how many documents
    it gave; ``record_file_documents``: those documents and their texts' sha256. A rerun need not read such a file
    whose stat is unchanged while each of its documents is live with that text (as ``source_files`` for a file read
    as one document). Indexed by document too: writing a document forgets the records of the files that gave it.

    Two partial indexes, so that what every ``chunk`` run asks of the boilerplate marks costs work in proportion to
    the chunks it concerns, not a walk over every chunk's row (which holds its text): ``chunks_unexamined`` (live
    chunks not examined yet: none once marks are backfilled) and ``chunks_marked`` (chunks marked as furniture)."""
    run_script(
        db,
        """
        CREATE TABLE IF NOT EXISTS record_files (
            path TEXT PRIMARY KEY,
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,
            checked_ns INTEGER NOT NULL,
            reading TEXT NOT NULL,
            config_sha256 TEXT NOT NULL,
            documents INTEGER NOT NULL
        );
        CREATE TABLE IF NOT EXISTS record_file_documents (
            path TEXT NOT NULL,
            doc_id TEXT NOT NULL,
            content_sha256 TEXT NOT NULL,
            PRIMARY KEY (path, doc_id)
        ) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS record_file_documents_by_doc ON record_file_documents (doc_id);
        CREATE INDEX IF NOT EXISTS chunks_unexamined ON chunks (chunk_id)
            WHERE removed_at IS NULL AND boilerplate IS NULL;
        CREATE INDEX IF NOT EXISTS chunks_marked ON chunks (boilerplate) WHERE boilerplate > '';
        """,
    )


@migration(34)
def m034_record_file_sha256(db: sqlite3.Connection) -> None:
    """``record_files.sha256``: the sha256 of the bytes a file of records gave its documents from (NULL for a record
    written before). A file whose stat no longer proves it unchanged (modified within the racy window of its
    recording, or touched since) is hashed, not parsed, and counts as unchanged when its bytes are those."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(record_files)")}
    if "sha256" not in columns:  # idempotent, as the migrations after 18 are
        run_script(db, "ALTER TABLE record_files ADD COLUMN sha256 TEXT;")


def _key_bytes(key: int | bytes) -> bytes:
    """A key as migration 14 stored it (a signed 64-bit integer) as 8 little-endian bytes (one stored as bytes, as
    the backfill of migration 14 once did during the migration, is already)."""
    return key if isinstance(key, bytes) else struct.pack("<q", key)


def _backfill_chunk_versions(db: sqlite3.Connection) -> None:
    """Each existing chunk gets its document's current text version where its span still holds in it. Done a
    document at a time in Python: SQLite's substr walks UTF-8 text from its start, so a per-chunk substr over a
    document of megabytes with thousands of chunks took time quadratic in its length."""
    for doc_id, sha, text in db.cursor().execute("SELECT doc_id, content_sha256, text FROM documents"):  # one at a time
        chunks = db.execute('SELECT chunk_id, start, "end", text FROM chunks WHERE doc_id = ?', (doc_id,)).fetchall()
        holding = [(sha, chunk_id) for chunk_id, start, end, chunk in chunks if text[start:end] == chunk]
        db.executemany("UPDATE chunks SET doc_sha256 = ? WHERE chunk_id = ?", holding)


def pair_item_id(query_id: str, chunk_id: str) -> str:
    """The review item of a (query, chunk) pair: derived from the pair, so queueing it twice is one item."""
    return "p-" + hashlib.sha256(f"{query_id}\x00{chunk_id}".encode()).hexdigest()[:20]


def question_item_id(query_id: str) -> str:
    """The review item of a synthetic question itself (keep, drop or edit it)."""
    return "q-" + hashlib.sha256(query_id.encode()).hexdigest()[:20]


LATEST = max(MIGRATIONS)
