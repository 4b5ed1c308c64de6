"""Ingest loaded documents into a workspace, chunked, incrementally.

A document whose text and chunker config are unchanged since the last run is skipped (a rerun on an unchanged
corpus does almost nothing). A changed document is re-chunked: its new chunks are added and its old ones are
marked removed, never deleted (judgments may point at them). A document that was loaded from the same sources
before and is gone now is marked removed too.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..store.rows import content_sha256, put_documents
from ..store.workspace import Workspace, utc_timestamp
from .chunkers import ChunkerConfig, chunk_document
from .dedup import duplicate_groups
from .loaders import LoadResult


@dataclass
class IngestSummary:
    documents: int = 0
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    removed: int = 0
    chunks_added: int = 0
    chunks_removed: int = 0
    skipped: int = 0
    skipped_by_reason: dict[str, int] = field(default_factory=dict)
    duplicate_groups: int = 0
    duplicate_chunks: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def _covered(source: str, roots: list[Path]) -> bool:
    path = Path(source)
    return any(path == root or root in path.parents for root in roots)


def ingest(
    workspace: Workspace, loaded: LoadResult, config: ChunkerConfig, sources: list[str | Path], progress=None
) -> IngestSummary:
    started = time.perf_counter()
    summary = IngestSummary(documents=len(loaded.documents), skipped=len(loaded.skipped))
    summary.skipped_by_reason = dict(Counter(s.reason.split(" (")[0] for s in loaded.skipped))
    config_hash = config.sha256()
    db = workspace.db
    known = {
        row["doc_id"]: (row["content_sha256"], row["removed_at"], row["source"])
        for row in db.execute("SELECT doc_id, content_sha256, removed_at, source FROM documents")
    }
    chunked_with = {
        row[0]: row[1]
        for row in db.execute("SELECT doc_id, MAX(config_sha256) FROM chunks WHERE removed_at IS NULL GROUP BY doc_id")
    }
    task = progress.add_task("chunking", total=len(loaded.documents)) if progress else None
    now = utc_timestamp()
    with workspace.transaction() as tx:
        for document in loaded.documents:
            previous = known.get(document.doc_id)
            digest = content_sha256(document.text)
            if (
                previous
                and previous[0] == digest
                and previous[1] is None
                and chunked_with.get(document.doc_id) == config_hash
            ):
                summary.unchanged += 1
            else:
                if previous is None or previous[1] is not None:
                    summary.new += 1
                else:
                    summary.changed += 1
                put_documents(tx, [document])
                chunks = chunk_document(document, config)
                new_ids = [c.chunk_id for c in chunks]
                before = tx.total_changes
                tx.executemany(
                    'INSERT INTO chunks (chunk_id, doc_id, text, start, "end", metadata, created_at, config_sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?) '
                    "ON CONFLICT(chunk_id) DO UPDATE SET removed_at = NULL, config_sha256 = excluded.config_sha256, "
                    'start = excluded.start, "end" = excluded."end", metadata = excluded.metadata',
                    [
                        (
                            c.chunk_id,
                            c.doc_id,
                            c.text,
                            c.start,
                            c.end,
                            json.dumps(c.metadata, sort_keys=True),
                            now,
                            config_hash,
                        )
                        for c in chunks
                    ],
                )
                summary.chunks_added += tx.total_changes - before
                placeholders = ",".join("?" * len(new_ids)) or "''"
                cursor = tx.execute(
                    "UPDATE chunks SET removed_at = ? WHERE doc_id = ? AND removed_at IS NULL AND chunk_id NOT IN "
                    f"({placeholders})",
                    (now, document.doc_id, *new_ids),
                )
                summary.chunks_removed += cursor.rowcount
            if progress:
                progress.update(task, advance=1)
        roots = [Path(s) for s in sources]
        loaded_ids = {d.doc_id for d in loaded.documents}
        skipped_sources = {s.source for s in loaded.skipped}
        for doc_id, (_, removed_at, source) in known.items():
            if (
                removed_at is None
                and doc_id not in loaded_ids
                and source not in skipped_sources
                and _covered(source, roots)
            ):
                tx.execute("UPDATE documents SET removed_at = ? WHERE doc_id = ?", (now, doc_id))
                summary.chunks_removed += tx.execute(
                    "UPDATE chunks SET removed_at = ? WHERE doc_id = ? AND removed_at IS NULL", (now, doc_id)
                ).rowcount
                summary.removed += 1
        if summary.new or summary.changed or summary.removed:  # duplicate groups only move when live chunks do
            _refresh_duplicates(tx)
        summary.duplicate_groups, summary.duplicate_chunks = tx.execute(
            "SELECT COUNT(DISTINCT group_id), COUNT(*) FROM chunk_duplicates"
        ).fetchone()
        summary.seconds = time.perf_counter() - started
        tx.execute(
            "INSERT INTO stage_runs (stage, config_sha256, status, counts, started_at, finished_at) VALUES ('chunk', "
            "?, 'done', ?, ?, ?)",
            (config_hash, json.dumps(summary.as_dict()), now, utc_timestamp()),
        )
    return summary


def _refresh_duplicates(tx) -> None:
    rows = tx.execute("SELECT chunk_id, text FROM chunks WHERE removed_at IS NULL ORDER BY chunk_id").fetchall()
    tx.execute("DELETE FROM chunk_duplicates")
    groups = duplicate_groups([r[0] for r in rows], [r[1] for r in rows])
    tx.executemany(
        "INSERT INTO chunk_duplicates (chunk_id, group_id, kind) VALUES (?, ?, ?)",
        [(chunk_id, members[0], kind) for kind, members in groups for chunk_id in members],
    )
