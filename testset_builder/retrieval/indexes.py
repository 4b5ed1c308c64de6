"""The workspace's live chunks, indexed for pooling and mining: BM25, and dense with the extra. Indexes are cached
under ``<workspace>/indexes`` and rebuilt only when the live chunks change."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from ..corpus.language import corpus_languages
from ..errors import InputError
from ..records import Query
from ..store import rows
from ..store.workspace import Workspace
from ..tables import Run
from ._common import BATCH, Corpus, corpus_key
from .bm25 import BM25Index
from .dense import DenseIndex, EncodeBatches, encode_in_process, reporting

LANGUAGE_SAMPLE = 60  # texts language detection reads (see corpus_languages)


def languages_of(directory: Path | None, corpus: Corpus) -> list[str]:
    """The corpus's languages (see :func:`~testset_builder.corpus.language.corpus_languages`, over an even sample of
    its texts), cached beside the indexes under the corpus's key, since detection takes a second and the corpus
    rarely changes."""
    path = Path(directory) / f"languages-{corpus_key('languages', corpus)}.json" if directory else None
    if path is not None and path.exists():
        return json.loads(path.read_text(encoding="utf-8"))
    found = corpus_languages(corpus.sample(LANGUAGE_SAMPLE))
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(found), encoding="utf-8")
        except OSError:  # a read-only workspace: detect again next time
            pass
    return found


class StoredPassages(Mapping[str, str]):
    """chunk id -> passage (title and text) of the workspace's live chunks, read from the store when asked: a
    judge reads only the pooled chunks, so the corpus's texts are never all in memory."""

    def __init__(self, workspace: Workspace, chunk_ids: Sequence[str]) -> None:
        self._workspace, self._chunk_ids = workspace, chunk_ids

    def __getitem__(self, chunk_id: str) -> str:
        found = rows.live_chunk_passages_of(self._workspace.db, [chunk_id])
        if chunk_id not in found:
            raise KeyError(chunk_id)
        return found[chunk_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._chunk_ids)

    def __len__(self) -> int:
        return len(self._chunk_ids)

    def of(self, chunk_ids: Sequence[str]) -> dict[str, str]:
        """Many passages at once (those of ``chunk_ids`` that are live)."""
        return rows.live_chunk_passages_of(self._workspace.db, chunk_ids)


def live_corpus(workspace: Workspace) -> Corpus:
    """The workspace's live chunks as the indexes' corpus (read in batches), or an error when there are none."""
    corpus = Corpus.streamed(
        lambda: rows.iter_live_chunk_passages(workspace.db, BATCH),
        lambda wanted: rows.live_chunk_passages_of(workspace.db, wanted),
    )
    if not corpus.chunk_ids:
        raise InputError(
            "the workspace has no chunks yet: run `testset-builder chunk SOURCE --workspace ...` first",
            path=workspace.root,
        )
    return corpus


def indexes_directory(workspace: Workspace) -> Path:
    return workspace.root / "indexes"


def index_path(name: str, directory: Path, corpus: Corpus, language: str) -> Path:
    """Where :func:`open_index` keeps retriever ``name``'s index of ``corpus``."""
    if name == "bm25":
        return BM25Index.path_for(directory, corpus, language=language)
    return DenseIndex.path_for(directory, corpus)


def encoding_bar(progress, what: str = "encoding chunks (once: later runs read them back)"):
    """``on_texts(done, total)`` for :func:`~.dense.reporting` that shows the encoding on ``progress`` (a
    ``rich.progress.Progress``, as the LLM stages' bar is): a task made when encoding starts."""
    task = []

    def on_texts(done: int, total: int) -> None:
        if not task:
            task.append(progress.add_task(f"{what}", total=total, cost=0.0, cached=0))
        progress.update(task[0], completed=done)

    return on_texts


def open_index(
    name: str, directory: Path, corpus: Corpus, language: str, encode_batches: EncodeBatches = encode_in_process
) -> BM25Index | DenseIndex:
    """Retriever ``name``'s index of ``corpus`` (BM25 tokenizing in ``language``), from the cache in ``directory``
    or built there; dense embeddings are encoded with ``encode_batches``."""
    if name == "bm25":
        return BM25Index.for_corpus(directory, corpus, language=language)
    return DenseIndex.for_corpus(directory, corpus, encode_batches=encode_batches)


class WorkspaceIndexes:
    """``names`` (bm25, dense) over the workspace's live chunks; ``passages`` maps chunk id -> title and text.
    BM25 tokenizes in the corpus's main language (``languages[0]``).

    The live chunks are read from the store in batches: once for their ids and fingerprint (the indexes' cache
    key), and again only to build an index the cache lacks; the indexes are memory-mapped from
    ``<workspace>/indexes``, and a passage is read from the store when asked for."""

    def __init__(self, workspace: Workspace, names: Sequence[str], progress=None) -> None:
        corpus = live_corpus(workspace)
        self.chunk_ids = corpus.chunk_ids
        self.passages = StoredPassages(workspace, self.chunk_ids)
        directory = indexes_directory(workspace)
        self.languages = languages_of(directory, corpus)
        on_texts = encoding_bar(progress) if progress is not None else (lambda done, total: None)
        encoding = reporting(encode_in_process, on_texts, len(corpus.chunk_ids))  # the rate is kept for the plan
        self.indexes = {name: open_index(name, directory, corpus, self.languages[0], encoding) for name in names}

    def runs(self, queries: Sequence[Query], k: int) -> dict[str, Run]:
        ids, texts = [q.query_id for q in queries], [q.text for q in queries]
        return {name: index.search(ids, texts, k=k, name=name) for name, index in self.indexes.items()}


RETRIEVERS = ("bm25", "dense")


def retriever_names(setting: str | Sequence[str]) -> tuple[str, ...]:
    """The retrievers a ``propose.retrievers`` setting names: ``auto`` is BM25, plus dense when installed."""
    from .dense import INSTALL_HINT, dense_available

    if setting == "auto":
        return RETRIEVERS if dense_available() else ("bm25",)
    names = tuple(dict.fromkeys(setting))
    if "dense" in names and not dense_available():
        from ..errors import DenseUnavailableError

        raise DenseUnavailableError(f"the dense retriever needs the dense extra: {INSTALL_HINT}")
    return names
