"""A workspace written before the duplicate index (schema 13) is upgraded when opened, and the corpus layer then
backfills the index (the store imports no corpus code): every live chunk gets its text and normalised-text hashes
and its LSH keys, the duplicate groups become the reference's, nothing is left pending, and the index then serves
incremental ingest."""

from __future__ import annotations

import hashlib
import sqlite3
from collections import Counter

from testset_builder.config import ChunkingConfig
from testset_builder.corpus.backfill import run_due_backfills
from testset_builder.corpus.dedup import duplicate_groups, normalised_sha256
from testset_builder.corpus.ingest import ingest
from testset_builder.corpus.loaders import stream_sources
from testset_builder.records import Chunk, Document
from testset_builder.store import corpus as stored
from testset_builder.store import duplicates, open_workspace, rows
from testset_builder.store.migrations import MIGRATIONS
from testset_builder.store.workspace import DB_NAME

TEXTS = {
    "a": "Recall at k measures the share of relevant chunks the retriever places among the top k results",
    "b": "RECALL at k measures the share of relevant chunks the retriever places among the top k results",
    "c": "Recall at k measures the share of relevant chunks the retriever places among the top k result",
    "d": "Graded gains in nDCG reward a highly relevant chunk at rank one more than a marginal one",
    "e": "Graded gains in nDCG reward a highly relevant chunk at rank one more than a marginal one",
}


def schema_13_workspace(root):
    root.mkdir()
    db = sqlite3.connect(root / DB_NAME, isolation_level=None)
    db.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT)")
    db.execute("BEGIN")
    for number in range(1, 14):
        name, function = MIGRATIONS[number]
        function(db)
        db.execute("INSERT INTO schema_migrations VALUES (?, ?, 'then')", (number, name))
    rows.put_documents(db, [Document(doc_id=f"{k}.txt", text=t) for k, t in TEXTS.items()])
    rows.put_chunks(db, [Chunk(chunk_id=f"{k}.txt", doc_id=f"{k}.txt", text=t, start=0, end=len(t))
                         for k, t in TEXTS.items()])  # fmt: skip
    db.execute("UPDATE chunks SET removed_at = 'then' WHERE chunk_id = 'e.txt'")
    db.execute("COMMIT")
    db.close()


def groups(db):
    found: dict[str, tuple[str, list[str]]] = {}
    for chunk_id, (group_id, kind) in sorted(rows.live_duplicate_groups(db).items()):
        found.setdefault(group_id, (kind, []))[1].append(chunk_id)
    return sorted(found.values(), key=lambda g: g[1])


def test_a_schema_13_workspace_is_upgraded_when_opened_and_the_corpus_layer_backfills_its_duplicate_index(tmp_path):
    schema_13_workspace(tmp_path / "old")
    with open_workspace(tmp_path / "old") as ws:
        unsigned = ws.db.execute("SELECT COUNT(*) FROM chunks WHERE text_sha256 IS NULL AND removed_at IS NULL")
        assert unsigned.fetchone()[0] == 4 and stored.backfill_due(ws.db, "duplicate_index")
        assert run_due_backfills(ws)
        assert not stored.backfill_due(ws.db, "duplicate_index") and not run_due_backfills(ws)  # once only
        hashes = ws.db.execute(
            "SELECT chunk_id, text_sha256, normalised_sha256 FROM chunks WHERE removed_at IS NULL ORDER BY chunk_id"
        ).fetchall()
        assert [tuple(h) for h in hashes] == [
            (f"{k}.txt", hashlib.sha256(t.encode()).hexdigest(), normalised_sha256(t))
            for k, t in sorted(TEXTS.items())
            if k != "e"
        ]
        keyed = Counter(chunk_id for _, chunk_id in duplicates.key_entries(ws.db))
        assert keyed == {"a.txt": 16, "b.txt": 16, "c.txt": 16, "d.txt": 16}
        live = stored.live_chunk_texts(ws.db)
        assert groups(ws.db) == duplicate_groups([c for c, _ in live], [t for _, t in live])
        assert groups(ws.db) == [("near", ["a.txt", "b.txt", "c.txt"])]
        assert ws.db.execute("SELECT COUNT(*) FROM chunk_dedup_pending").fetchone()[0] == 0


def test_after_the_backfill_an_ingested_twin_joins_the_backfilled_group(tmp_path):
    schema_13_workspace(tmp_path / "old")
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "twin.txt").write_text(TEXTS["d"].upper(), encoding="utf-8")
    with open_workspace(tmp_path / "old") as ws:
        ingest(ws, stream_sources([folder]), ChunkingConfig(chunker="prechunked", size=1, overlap=0))
        assert ("exact", ["d.txt", "twin.txt"]) in groups(ws.db)  # the ingest ran the backfill first
        assert not stored.backfill_due(ws.db, "duplicate_index")


def test_a_workspace_made_today_has_no_backfill_due(tmp_path):
    with open_workspace(tmp_path / "new") as ws:
        assert not stored.backfill_due(ws.db, "duplicate_index") and not run_due_backfills(ws)
