"""A workspace whose LSH keys were stored as integers (schema 15: a table and an index) gets them as the 8-byte keys
of one B-tree when opened, and they still find near-duplicates: a chunk ingested afterwards joins the group of a
chunk signed before the migration."""

from __future__ import annotations

import sqlite3
import struct

from testset_builder.config import ChunkingConfig
from testset_builder.corpus.batches import signature_batch
from testset_builder.corpus.ingest import ingest
from testset_builder.corpus.loaders import stream_sources
from testset_builder.store import open_workspace
from testset_builder.store.migrations import MIGRATIONS
from testset_builder.store.workspace import DB_NAME

PRECHUNKED = ChunkingConfig(chunker="prechunked", size=1, overlap=0)
TEXT = "Recall at k measures the share of relevant chunks the retriever places among the top k results of a query"


def schema_15_workspace(tmp_path, corpus):
    """A workspace chunked from ``corpus``, then taken back to schema 15 with its keys as schema 15 wrote them: a
    signed 64-bit integer a row, in a rowid table with an index on the key."""
    with open_workspace(tmp_path / "ws") as ws:
        ingest(ws, stream_sources([corpus]), PRECHUNKED)
        chunks = [{"chunk_id": c, "text": t} for c, t in ws.db.execute("SELECT chunk_id, text FROM chunks")]
    keys = [
        (key, record["chunk_id"])
        for record in signature_batch(chunks)
        for key in struct.unpack(f"<{len(record['band_keys']) // 8}q", record["band_keys"])
    ]
    db = sqlite3.connect(tmp_path / "ws" / DB_NAME, isolation_level=None)
    db.execute("BEGIN")
    db.execute("DROP TABLE chunk_lsh")
    db.execute("CREATE TABLE chunk_lsh (key INTEGER NOT NULL, chunk_id TEXT NOT NULL)")
    db.execute("CREATE INDEX chunk_lsh_by_key ON chunk_lsh(key)")
    db.executemany("INSERT INTO chunk_lsh VALUES (?, ?)", keys)
    db.execute("DROP INDEX documents_state")  # what migration 17 adds
    db.execute("DROP TABLE chunk_lsh_blocks")  # what migration 18 adds (the first load kept its keys there)
    db.execute("DELETE FROM schema_migrations WHERE version > 15")
    db.execute("COMMIT")
    db.close()
    return keys


def test_integer_lsh_keys_become_the_8_byte_keys_of_one_btree_and_still_find_near_duplicates(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text(TEXT, encoding="utf-8")
    for i in range(9):  # so that one chunk added is looked up key by key, not found by a scan of every key
        (corpus / f"other{i}.txt").write_text(f"an unrelated note number {i} on topic {i * 7} for the index", "utf-8")
    keys = schema_15_workspace(tmp_path, corpus)
    assert len(keys) == 16 * 10 and all(isinstance(key, int) for key, _ in keys)

    (corpus / "b.txt").write_text(TEXT.replace("query", "question"), encoding="utf-8")  # Jaccard 0.9 with a.txt
    with open_workspace(tmp_path / "ws") as ws:
        assert max(MIGRATIONS) >= 16 == ws.db.execute("SELECT MIN(version) FROM schema_migrations "
                                                       "WHERE version >= 16").fetchone()[0]  # fmt: skip
        stored = ws.db.execute("SELECT key, chunk_id FROM chunk_lsh ORDER BY key").fetchall()
        assert sorted((bytes(k), c) for k, c in stored) == sorted((struct.pack("<q", k), c) for k, c in keys)
        assert "WITHOUT ROWID" in ws.db.execute("SELECT sql FROM sqlite_master WHERE name = 'chunk_lsh'").fetchone()[0]
        assert ws.db.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'chunk_lsh_by_key'").fetchone()[0] == 0

        ingest(ws, stream_sources([corpus]), PRECHUNKED)
        grouped = ws.db.execute("SELECT chunk_id, group_id, kind FROM chunk_duplicates ORDER BY chunk_id").fetchall()
        assert [tuple(row) for row in grouped] == [("a.txt", "a.txt", "near"), ("b.txt", "a.txt", "near")]
        assert ws.db.execute("SELECT COUNT(*) FROM chunk_lsh").fetchone()[0] == 16 * 11
