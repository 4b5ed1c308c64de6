"""Building a workspace's indexes ahead of the stages that use them (``testset-builder index``): the same indexes,
at the same paths, that :class:`~.indexes.WorkspaceIndexes` opens for propose and run, each reported as built or
found cached, with its time and size on disk."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from ..store.workspace import Workspace
from .dense import EncodeBatches, encode_in_process
from .indexes import index_path, indexes_directory, languages_of, live_corpus, open_index


@dataclass(frozen=True)
class BuiltIndex:
    retriever: str
    chunks: int
    cached: bool  # found under the corpus's key, not built by this call
    seconds: float
    bytes: int  # on disk (0 when the cache could not be written)
    path: str

    def as_dict(self) -> dict:
        return asdict(self)


def build_indexes(
    workspace: Workspace, names: Sequence[str], encode_batches: EncodeBatches = encode_in_process
) -> list[BuiltIndex]:
    """Each retriever of ``names``' index of the workspace's live chunks, built unless cached; dense embeddings are
    encoded with ``encode_batches``."""
    corpus = live_corpus(workspace)
    directory = indexes_directory(workspace)
    language = languages_of(directory, corpus)[0] if "bm25" in names else ""  # only BM25 tokenizes by language
    built = []
    for name in names:
        path = index_path(name, directory, corpus, language)
        cached = path.exists()
        started = time.perf_counter()
        open_index(name, directory, corpus, language, encode_batches)
        seconds = time.perf_counter() - started
        built.append(BuiltIndex(name, len(corpus.chunk_ids), cached, seconds, size_on_disk(path), str(path)))
    return built


def size_on_disk(path: Path) -> int:
    """Bytes in a file, or in the files under a directory (0 when there is nothing there)."""
    if path.is_file():
        return path.stat().st_size
    return sum(part.stat().st_size for part in path.rglob("*") if part.is_file()) if path.is_dir() else 0
