"""The workspace store: migrations, transactions, append-only judgments, and refusing files it must not touch."""

from __future__ import annotations

import hashlib
import sqlite3

import pytest

from testset_builder.errors import SchemaTooNewError, UnknownIdError, WorkspaceCorruptError, WorkspaceError
from testset_builder.records import Chunk, Document, Judgment, JudgmentSource, Lineage, Query, QueryOrigin
from testset_builder.store import (
    DB_NAME,
    LATEST_SCHEMA,
    add_judgments,
    get_chunk,
    get_document,
    get_query,
    iter_judgments,
    open_workspace,
    put_chunks,
    put_documents,
    put_queries,
)
from testset_builder.store.migrations import MIGRATIONS


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def seed(workspace):
    doc = Document(doc_id="doc-1", text="Recall measures coverage. nDCG measures order.", title="Metrics")
    chunk = Chunk(chunk_id="doc-1#0", doc_id="doc-1", text=doc.text[:25], start=0, end=25)
    query = Query(
        query_id="q1",
        text="what does recall measure?",
        origin=QueryOrigin.synthetic,
        source_chunk_id=chunk.chunk_id,
        lineage=Lineage(
            provider="local",
            model="gemma-3-270m",
            prompt_name="synthesize/inpars",
            prompt_sha256="ab" * 32,
            temperature=0.0,
            seed=7,
        ),
    )
    with workspace.transaction() as db:
        put_documents(db, [doc])
        put_chunks(db, [chunk])
        put_queries(db, [query])
    return doc, chunk, query


def test_a_new_workspace_is_created_in_wal_mode_with_foreign_keys_and_every_migration(tmp_path):
    with open_workspace(tmp_path / "ws") as workspace:
        assert workspace.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert workspace.db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert workspace.schema_version == LATEST_SCHEMA
        tables = {r[0] for r in workspace.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {
        "documents",
        "chunks",
        "queries",
        "candidates",
        "judgments",
        "review_assignments",
        "llm_calls",
        "stage_runs",
        "releases",
    } <= tables


def test_reopening_applies_no_migration_twice(tmp_path):
    open_workspace(tmp_path).close()
    with open_workspace(tmp_path) as workspace:
        assert workspace.migrate() == []
        applied = workspace.db.execute("SELECT COUNT(*) FROM schema_migrations").fetchone()[0]
        assert applied == len(MIGRATIONS)  # each once (numbers other branches hold may leave gaps)


def test_records_round_trip_through_the_store(tmp_path):
    with open_workspace(tmp_path) as workspace:
        doc, chunk, query = seed(workspace)
        assert get_document(workspace.db, "doc-1") == doc
        assert get_chunk(workspace.db, chunk.chunk_id) == chunk
        assert get_query(workspace.db, "q1") == query


def test_unknown_ids_are_named_in_the_error(tmp_path):
    with open_workspace(tmp_path) as workspace:
        with pytest.raises(UnknownIdError, match="unknown chunk id 'nope'"):
            get_chunk(workspace.db, "nope")


def test_a_failed_transaction_leaves_nothing_behind(tmp_path):
    with open_workspace(tmp_path) as workspace:
        with pytest.raises(RuntimeError):
            with workspace.transaction() as db:
                put_documents(db, [Document(doc_id="doc-2", text="half written")])
                raise RuntimeError("crash mid-write")
        with pytest.raises(UnknownIdError):
            get_document(workspace.db, "doc-2")


def test_a_commit_that_fails_is_rolled_back_and_the_workspace_takes_the_next_transaction(tmp_path):
    with open_workspace(tmp_path) as workspace:
        with pytest.raises(sqlite3.IntegrityError):
            with workspace.transaction() as db:
                db.execute("PRAGMA defer_foreign_keys = ON")  # the violation surfaces at COMMIT, not at the insert
                put_chunks(db, [Chunk(chunk_id="c", doc_id="missing", text="x", start=0, end=1)])
        assert not workspace.db.in_transaction
        with workspace.transaction() as db:
            put_documents(db, [Document(doc_id="doc-3", text="after the failed commit")])
        assert get_document(workspace.db, "doc-3").text == "after the failed commit"
        assert workspace.db.execute("SELECT COUNT(*) FROM chunks WHERE chunk_id = 'c'").fetchone()[0] == 0


def test_a_chunk_of_an_unknown_document_is_refused_by_the_foreign_key(tmp_path):
    with open_workspace(tmp_path) as workspace:
        with pytest.raises(sqlite3.IntegrityError):
            with workspace.transaction() as db:
                put_chunks(db, [Chunk(chunk_id="c", doc_id="missing", text="x", start=0, end=1)])


def test_judgments_are_append_only_and_supersede_by_id(tmp_path):
    with open_workspace(tmp_path) as workspace:
        _, chunk, _ = seed(workspace)
        proposal = Judgment(
            judgment_id="j1",
            query_id="q1",
            chunk_id=chunk.chunk_id,
            grade=1,
            source=JudgmentSource.llm,
            grade_probs={0: 0.2, 1: 0.5, 2: 0.3},
            confidence=0.5,
        )
        verdict = Judgment(
            judgment_id="j2",
            query_id="q1",
            chunk_id=chunk.chunk_id,
            grade=2,
            source=JudgmentSource.human,
            reviewer="ana",
            status="regraded",
            supersedes="j1",
        )
        with workspace.transaction() as db:
            add_judgments(db, [proposal])
        with workspace.transaction() as db:
            add_judgments(db, [verdict])
        assert [j.judgment_id for j in iter_judgments(workspace.db, "q1")] == ["j1", "j2"]
        assert next(iter(iter_judgments(workspace.db))) == proposal
        for statement in ("UPDATE judgments SET grade = 0", "DELETE FROM judgments"):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                with workspace.transaction() as db:
                    db.execute(statement)
        assert len(list(iter_judgments(workspace.db))) == 2


def test_a_workspace_from_a_newer_schema_is_refused_and_left_untouched(tmp_path):
    open_workspace(tmp_path).close()
    db = sqlite3.connect(tmp_path / DB_NAME)
    db.execute("INSERT INTO schema_migrations VALUES (?, 'm999_future', '2030-01-01')", (LATEST_SCHEMA + 1,))
    db.commit()
    db.close()
    before = sha256(tmp_path / DB_NAME)
    with pytest.raises(SchemaTooNewError, match="newer than this testset-builder supports"):
        open_workspace(tmp_path)
    assert sha256(tmp_path / DB_NAME) == before


@pytest.mark.parametrize("content", [b"this is not a database at all\n" * 50, b"SQLite format 3\x00" + b"\xff" * 4000])
def test_a_corrupt_database_file_is_refused_and_left_untouched(tmp_path, content):
    path = tmp_path / DB_NAME
    path.write_bytes(content)
    with pytest.raises(WorkspaceCorruptError, match="left untouched"):
        open_workspace(tmp_path)
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == [DB_NAME]


def test_an_sqlite_file_that_is_not_a_workspace_is_refused(tmp_path):
    db = sqlite3.connect(tmp_path / DB_NAME)
    db.execute("CREATE TABLE something_else (x)")
    db.commit()
    db.close()
    with pytest.raises(WorkspaceError, match="not a testset-builder workspace"):
        open_workspace(tmp_path)


def test_opening_a_missing_workspace_without_create_is_a_clear_error(tmp_path):
    with pytest.raises(WorkspaceError, match="no workspace here"):
        open_workspace(tmp_path / "nothing", create=False)


def test_each_thread_gets_its_own_connection_and_their_writes_all_land(tmp_path):
    import threading

    from testset_builder.records import Document

    seen = []
    with open_workspace(tmp_path) as workspace:

        def write(n: int) -> None:
            seen.append(id(workspace.db))
            with workspace.transaction() as db:
                put_documents(db, [Document(doc_id=f"doc-{n}", text=f"text {n}")])

        threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(set(seen)) == 4 and id(workspace.db) not in seen
        assert [get_document(workspace.db, f"doc-{n}").text for n in range(4)] == [f"text {n}" for n in range(4)]


def test_commits_under_background_checkpoints_land_and_the_wal_stays_bounded(tmp_path):
    """A bulk writer's commits leave checkpoints to a thread; every row is in the database file for a new
    connection afterwards, the WAL never grows far past its limit, and the writer's auto-checkpoint comes back."""
    from testset_builder.store.workspace import DB_NAME

    blob = b"x" * 200_000
    with open_workspace(tmp_path / "ws") as ws:
        ws.db.execute("CREATE TABLE bulk (n INTEGER PRIMARY KEY, payload BLOB)")
        before = ws.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
        largest = 0
        with ws.background_checkpoints(wal_limit_mb=2) as pace:
            assert ws.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
            for n in range(60):  # 60 MB in all, 1 MB a transaction
                with ws.transaction() as tx:
                    tx.executemany("INSERT INTO bulk VALUES (?, ?)", [(n * 5 + i, blob) for i in range(5)])
                pace()
                largest = max(largest, (tmp_path / "ws" / f"{DB_NAME}-wal").stat().st_size)
        assert ws.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == before
        assert largest < 4 << 20, largest  # the limit, one transaction and slack; 60 MB were written
        ws.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with sqlite3.connect(tmp_path / "ws" / DB_NAME) as db:
        assert db.execute("SELECT COUNT(*), SUM(length(payload)) FROM bulk").fetchone() == (300, 300 * 200_000)
