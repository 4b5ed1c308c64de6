"""The corpus and what comes in from outside: ``chunk``, ``index``, ``export-chunks``, ``import-logs``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from ..errors import InputError
from .workspace import opened

if TYPE_CHECKING:
    from ..config import Config
    from ..corpus.ingest import IngestSummary
    from ..retrieval.prebuild import BuiltIndex
    from ..stages.logs.importer import LogImportSummary
    from ..store import Workspace


@dataclass
class ChunkResult:
    """What ``chunk`` did (``summary``) and what it could not read."""

    summary: IngestSummary
    skipped_files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {**self.summary.as_dict(), "skipped_files": self.skipped_files, "warnings": self.warnings}


def ingest_engine(engine: str | Callable | None, ray_address: str | None = None) -> Callable:
    """The ingest engine ``engine`` names (``local``, ``ray``: Ray is imported only for it), or the one given."""
    if ray_address and engine != "ray":
        raise InputError("a Ray address needs the ray engine (--engine ray)")
    if engine == "ray":
        from ..corpus.ray_engine import ray_engine

        return ray_engine(ray_address)
    if engine in (None, "local"):
        from ..corpus.batches import local_engine

        return local_engine
    if isinstance(engine, str):
        raise InputError(f"unknown engine {engine!r}: use local or ray")
    return engine


def chunk(
    config: Config,
    sources: Sequence[str | Path] | None = None,
    *,
    workspace: Workspace | None = None,
    strict: bool = False,
    allow_removal: bool = False,
    rehash: bool = False,
    engine: str | Callable | None = None,
    ray_address: str | None = None,
    progress=None,
    on_wait: Callable[[str], None] | None = None,
) -> ChunkResult:
    """Chunk ``sources`` (default: the config's ``run.sources``) into the workspace (created if missing):
    unchanged documents are skipped, changed ones re-chunked, vanished ones marked removed (a large removal raises
    :class:`~testset_builder.errors.LargeRemovalError` unless ``allow_removal``). ``engine``: ``local`` (default),
    ``ray`` (at ``ray_address``, else a private local Ray) or an engine function; it is checked before the
    workspace is made. ``on_wait`` as :func:`~.workspace.open_workspace` takes it."""
    from ..corpus.ingest import ingest
    from ..corpus.loaders import stream_sources

    sources = list(config.run.sources if sources is None else sources)
    if not sources:
        raise InputError("no sources to chunk: give files or folders (run.sources in the config)")
    engine = ingest_engine(engine, ray_address)
    chunking = config.chunking
    fields = {"id_field": chunking.id_field, "text_field": chunking.text_field, "title_field": chunking.title_field}
    loaded = stream_sources(sources, strict=strict, **fields)
    with opened(config, workspace, create=True, on_wait=on_wait) as ws:
        summary = ingest(
            ws, loaded, chunking, progress=progress, allow_removal=allow_removal, engine=engine, rehash=rehash
        )
    return ChunkResult(summary, [str(s) for s in loaded.skipped], [str(n) for n in loaded.notes])


@dataclass
class IndexResult:
    """The indexes ``index`` built or found cached, and the engine that encoded the dense ones."""

    engine: str
    indexes: list[BuiltIndex]

    def as_dict(self) -> dict:
        return {"engine": self.engine, "indexes": [built.as_dict() for built in self.indexes]}


def index(
    config: Config, *, engine: str = "local", ray_address: str | None = None, workspace: Workspace | None = None
) -> IndexResult:
    """Build the indexes of the workspace's live chunks that ``propose`` and ``run`` search (the config's
    ``propose.retrievers``), or find them cached; dense embeddings encoded here (``local``) or on Ray (``ray``)."""
    from ..retrieval.dense import encode_in_process
    from ..retrieval.indexes import retriever_names
    from ..retrieval.prebuild import build_indexes

    if ray_address and engine != "ray":
        raise InputError("a Ray address needs the ray engine (--engine ray)")
    names = retriever_names(config.propose.retrievers)
    encode_batches = encode_in_process
    if engine == "ray":
        from ..retrieval.ray_embed import ray_encoder

        encode_batches = ray_encoder(ray_address)
    with opened(config, workspace) as ws:
        return IndexResult(engine, build_indexes(ws, names, encode_batches))


def import_logs(
    config: Config, log: str | Path, *, workspace: Workspace | None = None, force: bool = False
) -> LogImportSummary:
    """Import a production log (JSON lines, CSV or OpenTelemetry traces of queries, what was retrieved, the answer,
    feedback). ``force`` imports again a file whose earlier import stored no record."""
    from ..stages.logs.importer import import_logs as importing

    with opened(config, workspace) as ws:
        return importing(ws, Path(log), config.logs, force=force)


@dataclass
class ChunksExportResult:
    """What ``export-chunks`` wrote: how many chunks, where (None: the stream given), in which format."""

    chunks: int
    out: str | None
    format: str

    def as_dict(self) -> dict:
        return asdict(self)


def export_chunks(
    config: Config, out: str | Path | TextIO, *, format: str = "jsonl", workspace: Workspace | None = None
) -> ChunksExportResult:
    """The workspace's live chunks (id, document, title, text) for an app to index with the tool's ids, written to
    ``out`` (a file, replaced whole only once written; or an open text stream) as JSON lines or CSV
    (:mod:`~testset_builder.export.chunks`)."""
    from ..export.chunks import CHUNK_FORMATS, write_chunks
    from ..store import rows

    if format not in CHUNK_FORMATS:
        raise InputError(f"unknown chunks format {format!r}: use {', '.join(CHUNK_FORMATS)}")
    with opened(config, workspace, readonly=True) as ws, contextlib.closing(rows.iter_live_chunks(ws.db)) as chunks:
        if not isinstance(out, str | Path):
            return ChunksExportResult(write_chunks(chunks, out, format), None, format)
        path = Path(out)
        partial = path.with_name(path.name + ".partial")
        try:
            with partial.open("w", encoding="utf-8", newline="") as handle:
                count = write_chunks(chunks, handle, format)
            partial.replace(path)
        except OSError as error:
            partial.unlink(missing_ok=True)
            raise InputError(f"cannot write the chunks ({error.strerror})", path=path) from None
    return ChunksExportResult(count, str(path), format)
