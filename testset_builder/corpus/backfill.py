"""Work a migration leaves to the corpus layer: the store may not import corpus code, so migration 14 only names the
duplicate index's backfill in ``backfills_due``, and this module runs it once every migration is applied (an
ingest runs it first, as does a log import, whose matching reads the text hashes).

The backfill signs every live chunk in bounded batches and groups them with today's definitions of a duplicate
(:mod:`.batches`, :mod:`.regroup`), as a fresh load would."""

from __future__ import annotations

import sqlite3

from ..store import corpus as stored
from ..store.duplicates import put_signatures
from ..store.workspace import Workspace
from .batches import signature_batch, text_sha256
from .regroup import settle_pending

DUPLICATE_INDEX = "duplicate_index"


def run_due_backfills(workspace: Workspace) -> bool:
    """Run the backfills migrations left to the corpus layer, each in one transaction; whether any ran."""
    if not stored.backfill_due(workspace.db, DUPLICATE_INDEX):  # most opens: no write lock taken
        return False
    with workspace.transaction() as db:
        if not stored.backfill_due(db, DUPLICATE_INDEX):  # another process ran it meanwhile
            return False
        backfill_duplicate_index(db)
        stored.backfill_done(db, DUPLICATE_INDEX)
    return True


def backfill_duplicate_index(db: sqlite3.Connection, batch: int = 2000) -> None:
    """Sign every live chunk (its text hashes and LSH keys) and group them all anew."""
    after = ""
    while rows := stored.live_chunks_after(db, after, batch):
        chunks = [{"chunk_id": chunk_id, "text": text} for chunk_id, text in rows]
        signed = signature_batch(chunks)
        stored.put_chunk_hashes(
            db, [(c["chunk_id"], text_sha256(c["text"]), s["normalised_sha256"]) for c, s in zip(chunks, signed)]
        )
        put_signatures(db, signed)
        after = rows[-1][0]
    stored.clear_duplicate_groups(db)
    settle_pending(db)
