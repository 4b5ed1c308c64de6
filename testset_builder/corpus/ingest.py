"""Ingest loaded documents into a workspace, chunked, incrementally.

A document whose text and chunker config are unchanged since the last run is skipped (a rerun on an unchanged
corpus does almost nothing). A changed document is re-chunked: its new chunks are added and its old ones are
marked removed, never deleted (judgments may point at them).

A document is marked removed only when its own source file was read in full and no longer holds it, or when its
file is gone from a folder this run walked; a file that could not be read, or one of a source not given this time,
removes nothing. Marking more than ``max_removal_share`` of the live documents removed (and more than
:data:`SMALL_REMOVAL` of them) is refused unless allowed: a slip in the sources given must not shrink the corpus.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..config import ChunkingConfig
from ..errors import LargeRemovalError
from ..store import corpus as stored
from ..store.history import record_stage_run
from ..store.rows import content_sha256, put_documents
from ..store.workspace import Workspace, utc_timestamp
from .chunkers import chunk_document
from .dedup import duplicate_groups
from .loaders import LoadResult, nothing_loaded

SMALL_REMOVAL = 3  # removing this many documents or fewer never needs --allow-removal


@dataclass
class IngestSummary:
    documents: int = 0
    new: int = 0
    changed: int = 0
    unchanged: int = 0
    removed: int = 0
    removed_by_source: dict[str, int] = field(default_factory=dict)
    chunks_added: int = 0
    chunks_removed: int = 0
    skipped: int = 0
    skipped_by_reason: dict[str, int] = field(default_factory=dict)
    duplicate_groups: int = 0
    duplicate_chunks: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def _resolved(source: str) -> Path:
    return Path(source).expanduser().resolve()


def documents_gone(known: dict[str, stored.KnownDocument], loaded: LoadResult) -> dict[str, str]:
    """doc_id -> source of the live documents this load shows to be gone: their source was read in full and no
    longer holds them, or their file no longer exists under a root that was walked."""
    loaded_ids = {d.doc_id for d in loaded.documents}
    partly_read = {str(_resolved(s.source)) for s in loaded.skipped}
    gone = {}
    for doc_id, document in known.items():
        if document.removed or doc_id in loaded_ids or not document.source:
            continue
        path = _resolved(document.source)
        if str(path) in partly_read:
            continue
        read_whole = str(path) in loaded.read
        file_gone = not path.exists() and any(root == path or root in path.parents for root in loaded.roots)
        if read_whole or file_gone:
            gone[doc_id] = document.source
    return gone


def ingest(
    workspace: Workspace,
    loaded: LoadResult,
    config: ChunkingConfig,
    sources: list[str | Path] | None = None,
    progress=None,
    allow_removal: bool = False,
) -> IngestSummary:
    """Chunk ``loaded`` into ``workspace`` (``sources`` is accepted for older callers; ``loaded`` says what was read).
    Raises :class:`LargeRemovalError` before writing anything when the removal guard trips and removal is not
    allowed."""
    with workspace.exclusive("chunk"):
        return _ingest(workspace, loaded, config, progress, allow_removal)


def _guard_removal(gone: dict[str, str], live: int, share: float) -> None:
    if len(gone) > SMALL_REMOVAL and len(gone) > share * live:
        raise LargeRemovalError(len(gone), live, share, dict(Counter(gone.values()).most_common()))


def _ingest(
    workspace: Workspace, loaded: LoadResult, config: ChunkingConfig, progress, allow_removal: bool
) -> IngestSummary:
    started, now = time.perf_counter(), utc_timestamp()
    summary = IngestSummary(documents=len(loaded.documents), skipped=len(loaded.skipped))
    summary.skipped_by_reason = dict(Counter(s.reason.split(" (")[0] for s in loaded.skipped))
    config_hash = config.chunker_sha256()
    known = stored.known_documents(workspace.db)
    chunked_with = stored.chunker_by_document(workspace.db)
    gone = documents_gone(known, loaded)
    if not loaded.documents and not gone:  # an empty load that removes nothing: a mistyped or empty source
        raise nothing_loaded(loaded, [str(root) for root in loaded.roots])
    if not allow_removal:
        _guard_removal(gone, sum(not d.removed for d in known.values()), config.max_removal_share)
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
        for doc_id, source in sorted(gone.items()):
            summary.chunks_removed += stored.remove_document(tx, doc_id)
            summary.removed += 1
            summary.removed_by_source[source] = summary.removed_by_source.get(source, 0) + 1
        if summary.new or summary.changed or summary.removed:  # duplicate groups only move when live chunks do
            live = stored.live_chunk_texts(tx)
            stored.replace_duplicate_groups(tx, duplicate_groups([r[0] for r in live], [r[1] for r in live]))
        summary.duplicate_groups, summary.duplicate_chunks = stored.duplicate_counts(tx)
        summary.seconds = time.perf_counter() - started
        record_stage_run(tx, "chunk", config_hash, summary.as_dict(), now)
    return summary
