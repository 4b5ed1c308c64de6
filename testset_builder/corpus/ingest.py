"""Ingest loaded documents into a workspace, chunked, incrementally, streaming.

A document whose text and chunker config are unchanged since the last run is skipped (a rerun on an unchanged
corpus does almost nothing); a file read as one document whose size and mtime are those recorded when it was last
chunked is not even read (``source_files``; as git's index, a file modified within :data:`RACY_NS` of that record
is read again; ``rehash`` reads all), nor is a JSONL file read whole without a skip whose documents are all still
live with the texts it gave (``record_files``: its documents count as unchanged without a line parsed; one whose
stat cannot tell, as a file touched since or one written within :data:`RACY_NS` of its recording, is hashed instead,
and unchanged when its bytes are those it was read from). A changed
document is re-chunked: its new chunks are added and its old ones are marked removed, never deleted (judgments may
point at them).

Documents stream through in bounded batches (:data:`BATCH_DOCUMENTS` documents or :data:`BATCH_CHARACTERS`
characters): an engine (:data:`~.batches.Engine`; in-process: :func:`~.batches.local_engine`) chunks and signs each
batch (the local engine in worker processes while this one writes the previous batch), and each batch is written
in its own transaction, so memory does not grow with the corpus and a run killed
at any point leaves a consistent workspace that a rerun completes (the documents already written are unchanged then;
their chunks wait in ``chunk_dedup_pending`` until grouped). What is held for the whole run is ids and hashes.
Duplicate groups are kept by :mod:`.regroup`, in work proportional to the change.

A document is marked removed only when its own source file was read in full and no longer holds it, or when its
file is gone from a folder this run walked; a file that could not be read, or one of a source not given this time,
removes nothing. Marking more than ``max_removal_share`` of the live documents removed (and more than
:data:`SMALL_REMOVAL` of them) is refused unless allowed: a slip in the sources given must not shrink the corpus.
The guard is judged once the load is read (the documents it found new or changed are stored by then); when it
trips nothing is marked removed.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..config import ChunkingConfig
from ..errors import LargeRemovalError
from ..records import Document
from ..store import corpus as stored
from ..store import duplicates
from ..store.history import record_stage_run
from ..store.rows import content_sha256, put_document_records
from ..store.workspace import Workspace, utc_timestamp
from .backfill import run_due_backfills
from .batches import ChunkedBatch, Engine, Record, document_record, local_engine
from .boilerplate import REPEATED, repeated_across, text_reason
from .loaders import LoadResult, UnreadFiles, nothing_loaded
from .regroup import regroup_after_removal, settle_pending

SMALL_REMOVAL = 3  # removing this many documents or fewer never needs --allow-removal
BATCH_DOCUMENTS = 1000
BATCH_CHARACTERS = 8_000_000
CACHE_MB = 64  # SQLite's page cache while batches are written (its default is 2 MB)
BULK_CHUNKS = 200_000  # a run adding more chunks than this (or filling an empty workspace) builds the LSH index once


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
    chunks_unchanged: int = 0
    skipped: int = 0
    skipped_by_reason: dict[str, int] = field(default_factory=dict)
    duplicate_groups: int = 0
    duplicate_chunks: int = 0
    boilerplate_chunks: int = 0  # live chunks marked as page furniture (searchable, never a question's source)
    boilerplate_by_reason: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def _resolved(source: str) -> Path:
    return Path(source).expanduser().resolve()


def documents_gone(db, loaded: LoadResult, loaded_ids: set[str]) -> dict[str, str]:
    """doc_id -> source of the live documents this load shows to be gone: their source was read in full and no
    longer holds them, or their file no longer exists under a root that was walked. Only the documents the load did
    not give are looked up (a rerun's common case: none)."""
    partly_read = {str(_resolved(s.source)) for s in loaded.skipped}
    gone = {}
    not_loaded = [doc_id for doc_id in stored.document_ids(db) if doc_id not in loaded_ids]
    for doc_id, document in stored.known_documents(db, not_loaded).items():
        if document.removed or not document.source:
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
    engine: Engine = local_engine,
    rehash: bool = False,
) -> IngestSummary:
    """Chunk ``loaded`` into ``workspace`` (``sources`` is accepted for older callers; ``loaded`` says what was read;
    its ``documents`` may be a list or a stream, as :func:`~.loaders.stream_sources` gives). ``engine`` chunks and
    signs the batches. A file read as one document whose stat is unchanged since it was last chunked is not read
    again (its document counts as unchanged) unless ``rehash``. Raises :class:`LargeRemovalError`, having marked
    nothing removed, when the removal guard trips and removal is not allowed."""
    with workspace.exclusive("chunk"):
        run_due_backfills(workspace)  # an upgraded workspace's old chunks signed before new ones join them
        return _ingest(workspace, loaded, config, progress, allow_removal, engine, rehash)


def _guard_removal(gone: dict[str, str], live: int, share: float) -> None:
    if len(gone) > SMALL_REMOVAL and len(gone) > share * live:
        raise LargeRemovalError(len(gone), live, share, dict(Counter(gone.values()).most_common()))


PROGRESS_EVERY = 1000
RACY_NS = 2_000_000_000  # a file modified this close to (or after) the stat that recorded it is read again


class _Run:
    """One ingest's state: what the store knew of the documents read, what the load showed (ids only), the counts.
    Nothing is read per known document up front: a rerun over a hundred thousand unchanged files reads their stat
    records (:attr:`files`) and the documents' ids at the end."""

    def __init__(self, workspace: Workspace, config: ChunkingConfig, progress) -> None:
        self.workspace, self.config, self.progress = workspace, config, progress
        self.started_ns = time.time_ns()
        self.config_hash = config.chunker_sha256()
        self.live_before = stored.live_document_count(workspace.db)  # what the removal guard judges a share of
        self.empty = not self.live_before  # a first load: nothing to look up
        self.previous: dict[str, stored.KnownDocument | None] = {}  # of the documents read, until written
        self.files = stored.current_source_files(workspace.db, self.config_hash)
        self.record_files = {} if self.empty else stored.current_record_files(workspace.db, self.config_hash)
        self.loaded_ids: set[str] = set()
        self.summary = IngestSummary()
        self.task = progress.add_task("chunking", total=None) if progress else None
        self.unshown = 0  # documents done and not yet shown on the progress bar
        self.bulk = self.empty
        self.verified_files: list[tuple[str, stored.SourceFile]] = []  # files of unchanged documents, read this run
        self.batch_files: dict[str, tuple[str, stored.SourceFile]] = {}  # doc_id -> its file, until it is written
        self.shas: dict[str, list[str]] = {}  # doc_id -> its texts' sha256 in the order given, until written
        self.restamped: list[tuple[str, int, int]] = []  # files of records found unchanged by their bytes: new stats

    def file_unchanged(self, path: str, doc_id: str, size: int, mtime_ns: int) -> bool:
        """Whether a file need not be read (the loader's :data:`~.loaders.FileCheck`): its stat is the one recorded
        when it last gave this document's live text, cut with this config (:func:`~..store.corpus.current_source_files`
        keeps only such records). As git's index does, a file whose mtime is not clearly before the recording stat
        ('racy': it could have changed within the same tick) is read again."""
        seen = self.files.get(path)
        return (
            seen is not None
            and seen[0] == doc_id
            and seen[1] == size
            and seen[2] == mtime_ns
            and mtime_ns < seen[3] - RACY_NS
        )

    def records_unchanged(
        self, path: str, size: int, mtime_ns: int, reading: str, digest: Callable[[], str]
    ) -> list[str] | None:
        """The ids of the documents a JSONL file gave if it need not be parsed (the loader's
        :data:`~.loaders.RecordsCheck`): it is read with the fields it was last read whole with, whose documents are
        all live with the texts it gave then, cut with this config; and its stat is the one recorded then (the racy
        rule as :meth:`file_unchanged`'s) or, failing that, its size is and its bytes hash (``digest()``) to those
        it was read from. Such a file gets its new stat recorded (:attr:`restamped`): the next run need not hash
        it."""
        seen = self.record_files.get(path)
        if seen is None or seen.reading != reading or seen.size != size:
            return None
        if mtime_ns != seen.mtime_ns or mtime_ns >= seen.checked_ns - RACY_NS:
            if seen.sha256 is None or digest() != seen.sha256:
                return None
            self.restamped.append((path, size, mtime_ns))
        return stored.record_file_documents(self.workspace.db, path)

    def unchanged(self, document: Document, sha256: str) -> bool:
        """Whether a document read has the text and chunker config of its live chunks (what the store knew of it
        is kept for :meth:`write`'s counts)."""
        known = {} if self.empty else stored.known_documents(self.workspace.db, [document.doc_id])
        previous = self.previous[document.doc_id] = known.get(document.doc_id)
        return (
            previous is not None
            and not previous.removed
            and previous.content_sha256 == sha256
            and stored.chunker_of(self.workspace.db, document.doc_id) == self.config_hash
        )

    def to_chunk(self, documents: Iterable[Document | UnreadFiles], file_stats: dict) -> Iterator[list[Record]]:
        """The new and changed documents in bounded batches; the unchanged ones (and unread files) counted and
        passed over."""
        batch: list[Record] = []
        characters = 0
        for document in documents:
            if isinstance(document, UnreadFiles):
                self.loaded_ids.update(document.doc_ids)
                self.summary.documents += len(document.doc_ids)
                self.summary.unchanged += len(document.doc_ids)
                self.advance(len(document.doc_ids))
                continue
            self.loaded_ids.add(document.doc_id)
            self.summary.documents += 1
            sha256 = content_sha256(document.text)
            stat = file_stats.pop(document.doc_id, None)
            if self.unchanged(document, sha256):
                del self.previous[document.doc_id]
                self.summary.unchanged += 1
                if stat:
                    self.verified_files.append(self.source_file(document.doc_id, sha256, stat))
                self.advance()
                continue
            if stat:
                self.batch_files[document.doc_id] = self.source_file(document.doc_id, sha256, stat)
            self.shas.setdefault(document.doc_id, []).append(sha256)
            batch.append(document_record(document))
            characters += len(document.text)
            if len(batch) >= BATCH_DOCUMENTS or characters >= BATCH_CHARACTERS:
                yield batch
                batch, characters = [], 0
        if batch:
            yield batch

    def sha_of(self, document: Record) -> str:
        """The sha256 of a document record's text, computed when it was read (a document given twice in one load
        has its texts' in the order given)."""
        shas = self.shas[document["doc_id"]]
        sha256 = shas.pop(0)
        if not shas:
            del self.shas[document["doc_id"]]
        return sha256

    def source_file(self, doc_id: str, sha256: str, stat: tuple[str, int, int]) -> tuple[str, stored.SourceFile]:
        path, size, mtime_ns = stat
        return path, stored.SourceFile(doc_id, size, mtime_ns, sha256, self.config_hash, self.started_ns)

    def files_to_record(self, documents: Iterable[Record] = ()) -> list[tuple[str, stored.SourceFile]]:
        """The files to record with a transaction: those of its documents (never before the documents' chunks are
        written: a recorded file is trusted to have been chunked) and of the unchanged documents read so far."""
        files = [self.batch_files.pop(d["doc_id"]) for d in documents if d["doc_id"] in self.batch_files]
        files += self.verified_files
        self.verified_files = []
        return files

    def advance(self, n: int = 1) -> None:
        """Count ``n`` documents done on the progress bar, which is redrawn every :data:`PROGRESS_EVERY` of them (a
        rerun passes over a hundred thousand unchanged files in a second; an update each cost a fifth of that)."""
        self.unshown += n
        if self.progress and self.unshown >= PROGRESS_EVERY:
            self.show_progress()

    def show_progress(self) -> None:
        if self.progress and self.unshown:
            self.progress.update(self.task, advance=self.unshown)
        self.unshown = 0

    def write(self, batch: ChunkedBatch) -> None:
        """One batch in one transaction: documents, chunks, signatures; groups the removed chunks were in."""
        documents, chunks, signatures = batch
        normalised = {s["chunk_id"]: s["normalised_sha256"] for s in signatures}
        with self.workspace.transaction() as tx:
            shas = [self.sha_of(d) for d in documents]
            put_document_records(tx, documents, shas)
            stored.forget_record_files(tx, [d["doc_id"] for d in documents])
            for document in documents:
                if document["doc_id"] not in self.previous:  # given twice in this load, written already
                    self.summary.changed += 1
                    continue
                previous = self.previous.pop(document["doc_id"])
                if previous is None or previous.removed:
                    self.summary.new += 1
                else:
                    self.summary.changed += 1
            current = {d["doc_id"]: sha for d, sha in zip(documents, shas, strict=True)}  # the last copy's is stored
            added, removed, rewritten = stored.put_document_chunks(tx, current, chunks, normalised, self.config_hash)
            self.summary.chunks_added += len(added)
            self.summary.chunks_removed += len(removed)
            duplicates.put_signatures(tx, signatures)
            stored.put_source_files(tx, self.files_to_record(documents))
            regroup_after_removal(tx, removed + rewritten)
            if not self.bulk and self.summary.chunks_added > BULK_CHUNKS:
                self.bulk = True
            if self.bulk:
                duplicates.drop_key_index(tx)
        self.advance(len(documents))
        self.show_progress()


def _ingest(
    workspace: Workspace,
    loaded: LoadResult,
    config: ChunkingConfig,
    progress,
    allow_removal: bool,
    engine: Engine,
    rehash: bool,
) -> IngestSummary:
    started, now = time.perf_counter(), utc_timestamp()
    run = _Run(workspace, config, progress)
    summary = run.summary
    if not rehash:
        loaded.unchanged_file, loaded.unchanged_records = run.file_unchanged, run.records_unchanged
    cache = duplicates.set_cache_mb(workspace.db, CACHE_MB)
    try:
        with workspace.background_checkpoints() as pace:
            for batch in engine(run.to_chunk(loaded.documents, loaded.file_stats), config):
                run.write(batch)
                pace()
    finally:
        duplicates.restore_cache(workspace.db, cache)
        run.show_progress()
    summary.skipped = len(loaded.skipped)
    summary.skipped_by_reason = dict(Counter(s.reason.split(" (")[0] for s in loaded.skipped))
    with workspace.transaction() as tx:
        stored.put_source_files(tx, run.files_to_record())
        records = [(r.path, r.size, r.mtime_ns, r.reading, r.sha256, r.doc_ids) for r in loaded.records_read]
        stored.put_record_files(tx, records, run.config_hash, run.started_ns)
        stored.restamp_record_files(tx, run.restamped, run.started_ns)
        settle_pending(tx)  # also what a killed run left
    gone = documents_gone(workspace.db, loaded, run.loaded_ids)
    if not summary.documents and not gone:  # an empty load that removes nothing: a mistyped or empty source
        raise nothing_loaded(loaded, [str(root) for root in loaded.roots])
    if not allow_removal:
        _guard_removal(gone, run.live_before, config.max_removal_share)
    with workspace.transaction() as tx:
        removed: list[str] = []
        for doc_id, source in sorted(gone.items()):
            removed.extend(stored.remove_document(tx, doc_id))
            summary.removed += 1
            summary.removed_by_source[source] = summary.removed_by_source.get(source, 0) + 1
        summary.chunks_removed += len(removed)
        regroup_after_removal(tx, removed)
        summary.duplicate_groups, summary.duplicate_chunks = stored.duplicate_counts(tx)
        mark_boilerplate(tx)
        summary.boilerplate_by_reason = stored.boilerplate_counts(tx)
        summary.boilerplate_chunks = sum(summary.boilerplate_by_reason.values())
        summary.chunks_unchanged = stored.live_chunk_count(tx) - summary.chunks_added
        summary.seconds = time.perf_counter() - started
        record_stage_run(tx, "chunk", run.config_hash, summary.as_dict(), now)
    return summary


def mark_boilerplate(tx) -> None:
    """The corpus-wide part of the boilerplate marks (:mod:`.boilerplate`), once the duplicate groups are settled:
    chunks cut before marks existed are examined by their text, and the chunks of groups repeated across many
    documents are marked ``repeated`` (and unmarked when their group no longer is)."""
    after = ""
    while batch := stored.unexamined_chunks(tx, after):
        stored.mark_boilerplate(tx, [(chunk_id, text_reason(text)) for chunk_id, text in batch])
        after = batch[-1][0]
    stored.mark_repeated(tx, repeated_across(stored.live_document_count(tx)), REPEATED)
