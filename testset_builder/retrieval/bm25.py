"""BM25 over chunks (bm25s: Lucene-style BM25, Snowball stemming, English stop words), cached on disk.

An index is keyed by the sha256 of its settings and of its corpus's fingerprint (every chunk id and text), so the
same corpus is indexed once per workspace and a changed corpus gets a fresh index. A cached index is built in
bounded memory (:mod:`.bm25_build`) and served memory-mapped from disk: at a million chunks and more, the process
holds only the pages the queries touch.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..corpus.language import tokenize
from ..tables import Run
from ._common import Corpus, corpus_key, top_k_run
from .bm25_build import write_bm25

K1, B = 1.5, 0.75  # bm25s's (and Lucene's) defaults


class BM25Index:
    """``language`` (ISO 639-1) picks the tokens: CJK bigrams, the language's stop words and Snowball stemmer (see
    :mod:`~testset_builder.corpus.language`); queries are cut the same way. ``k1`` (term-frequency saturation) and
    ``b`` (length normalisation) are BM25's two parameters.

    Built directly, the index is bm25s's own, in memory (the reference the cached index is checked against);
    :meth:`cached` and :meth:`for_corpus` build it in bounded memory and memory-map it."""

    def __init__(
        self,
        chunk_ids: Sequence[str],
        texts: Sequence[str],
        stem: bool = True,
        language: str = "en",
        k1: float = K1,
        b: float = B,
    ) -> None:
        import bm25s

        self.chunk_ids = list(chunk_ids)
        self.stem = stem
        self.language = language
        self._model = bm25s.BM25(k1=k1, b=b)
        self._model.index(tokenize(texts, language, stem), show_progress=False)

    @staticmethod
    def settings(stem: bool, language: str = "en", k1: float = K1, b: float = B) -> str:
        tuned = "" if (k1, b) == (K1, B) else f" k1={k1} b={b}"
        return f"bm25s stem={stem} language={language} cjk=bigrams{tuned}"

    @classmethod
    def key(
        cls,
        chunk_ids: Sequence[str],
        texts: Sequence[str],
        stem: bool,
        language: str = "en",
        k1: float = K1,
        b: float = B,
    ) -> str:
        return corpus_key(cls.settings(stem, language, k1, b), Corpus.of(chunk_ids, texts))

    @classmethod
    def cached(
        cls,
        directory: Path,
        chunk_ids: Sequence[str],
        texts: Sequence[str],
        stem: bool = True,
        language: str = "en",
        k1: float = K1,
        b: float = B,
    ) -> BM25Index:
        """The index of exactly these chunks from ``directory``: see :meth:`for_corpus`."""
        return cls.for_corpus(directory, Corpus.of(chunk_ids, texts), stem, language, k1, b)

    @classmethod
    def path_for(
        cls, directory: Path, corpus: Corpus, stem: bool = True, language: str = "en", k1: float = K1, b: float = B
    ) -> Path:
        """Where :meth:`for_corpus` keeps the index of ``corpus`` (a directory)."""
        return Path(directory) / f"bm25-{corpus_key(cls.settings(stem, language, k1, b), corpus)}"

    @classmethod
    def for_corpus(
        cls, directory: Path, corpus: Corpus, stem: bool = True, language: str = "en", k1: float = K1, b: float = B
    ) -> BM25Index:
        """Load the index of ``corpus`` from ``directory`` (memory-mapped), building and saving it if absent.

        The index is built under a name of this process's own and renamed into place, so a reader never sees half
        an index; when two processes build it at once, the second rename finds the first's index and keeps it. A
        cache that cannot be written (read-only media) costs an index built in memory, and the rebuild next time."""
        path = cls.path_for(directory, corpus, stem, language, k1, b)
        if not (path / "params.index.json").exists():
            partial = path.with_name(f"{path.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
            try:
                write_bm25(partial, corpus.text_batches(), language, stem, k1, b)
                os.rename(partial, path)
            except OSError:
                # another process finished the same index first (theirs is identical: same key), or the cache
                # cannot be written (a read-only workspace)
                pass
            finally:
                shutil.rmtree(partial, ignore_errors=True)
        if not (path / "params.index.json").exists():
            texts = [text for batch in corpus.text_batches() for text in batch]
            return cls(corpus.chunk_ids, texts, stem, language, k1, b)
        return cls._load(path, corpus.chunk_ids, stem, language)

    @classmethod
    def _load(cls, path: Path, chunk_ids: list[str], stem: bool, language: str) -> BM25Index:
        import bm25s

        index = cls.__new__(cls)
        index.chunk_ids = chunk_ids
        index.stem, index.language = stem, language
        index._model = bm25s.BM25.load(str(path), mmap=True, show_progress=False)
        if index._model.scores["num_docs"] != len(chunk_ids):
            raise ValueError(
                f"the index at {path} holds {index._model.scores['num_docs']} chunks, not {len(chunk_ids)}"
            )
        return index

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """Every chunk's BM25 score for each query: an array of shape (queries, chunks), in ``chunk_ids`` order."""
        tokenized = tokenize(queries, self.language, self.stem)
        words = {i: w for w, i in tokenized.vocab.items()}
        known = self._model.vocab_dict
        out = np.zeros((len(queries), len(self.chunk_ids)), dtype=np.float32)
        for row, ids in enumerate(tokenized.ids):
            tokens = [words[i] for i in ids if words[i] in known]
            if tokens:
                out[row] = self._model.get_scores(tokens)
        return out

    def search(self, query_ids: Sequence[str], queries: Sequence[str], k: int = 100, name: str = "bm25") -> Run:
        """Top ``k`` chunks per query as a Run (chunks scoring 0 are left out). One query's scores are held at a
        time (4 bytes a chunk), whatever the number of queries."""
        k = min(k, len(self.chunk_ids))
        documents, scores = self._model.retrieve(tokenize(queries, self.language, self.stem), k=k, show_progress=False)
        return top_k_run(query_ids, self.chunk_ids, documents, scores, name, keep=scores > 0)
