"""Ingest loaded documents into a workspace, chunked, incrementally.

A document whose text and chunker config are unchanged since the last run is skipped (a rerun on an unchanged
corpus does almost nothing). A changed document is re-chunked: its new chunks are added and its old ones are
marked removed, never deleted (judgments may point at them). A document that was loaded from the same sources
before and is gone now is marked removed too.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..config import ChunkingConfig
from ..store import corpus as stored
from ..store.history import record_stage_run
from ..store.rows import content_sha256, put_documents
from ..store.workspace import Workspace, utc_timestamp
from .chunkers import chunk_document
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
    workspace: Workspace, loaded: LoadResult, config: ChunkingConfig, sources: list[str | Path], progress=None
) -> IngestSummary:
    with workspace.exclusive("chunk"):
        return _ingest(workspace, loaded, config, sources, progress)


def _ingest(
    workspace: Workspace, loaded: LoadResult, config: ChunkingConfig, sources: list[str | Path], progress
) -> IngestSummary:
    started, now = time.perf_counter(), utc_timestamp()
    summary = IngestSummary(documents=len(loaded.documents), skipped=len(loaded.skipped))
    summary.skipped_by_reason = dict(Counter(s.reason.split(" (")[0] for s in loaded.skipped))
    config_hash = config.chunker_sha256()
    known = stored.known_documents(workspace.db)
    chunked_with = stored.chunker_by_document(workspace.db)
    task = progress.add_task("chunking", total=len(loaded.documents)) if progress else None
    with workspace.transaction() as tx:
        for document in loaded.documents:
            previous = known.get(document.doc_id)
            unchanged = (
                previous is not None
                and previous.content_sha256 == content_sha256(document.text)
                and not previous.removed
                and chunked_with.get(document.doc_id) == config_hash
            )
            if unchanged:
                summary.unchanged += 1
            else:
                if previous is None or previous.removed:
                    summary.new += 1
                else:
                    summary.changed += 1
                put_documents(tx, [document])
                added, removed = stored.put_document_chunks(
                    tx, document.doc_id, chunk_document(document, config), config_hash
                )
                summary.chunks_added += added
                summary.chunks_removed += removed
            if progress:
                progress.update(task, advance=1)
        roots = [Path(s) for s in sources]
        loaded_ids = {d.doc_id for d in loaded.documents}
        skipped_sources = {s.source for s in loaded.skipped}
        for doc_id, known_document in known.items():
            gone = doc_id not in loaded_ids and known_document.source not in skipped_sources
            if not known_document.removed and gone and _covered(known_document.source, roots):
                summary.chunks_removed += stored.remove_document(tx, doc_id)
                summary.removed += 1
        if summary.new or summary.changed or summary.removed:  # duplicate groups only move when live chunks do
            live = stored.live_chunk_texts(tx)
            stored.replace_duplicate_groups(tx, duplicate_groups([r[0] for r in live], [r[1] for r in live]))
        summary.duplicate_groups, summary.duplicate_chunks = stored.duplicate_counts(tx)
        summary.seconds = time.perf_counter() - started
        record_stage_run(tx, "chunk", config_hash, summary.as_dict(), now)
    return summary
