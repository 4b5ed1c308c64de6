"""BM25 over chunks (bm25s: Lucene-style BM25, Snowball stemming, English stop words), cached on disk.

An index is keyed by the sha256 of its chunk ids, texts and settings, so the same corpus is indexed once per
workspace and a changed corpus gets a fresh index.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..corpus.language import tokenize
from ..tables import Run
from ._common import corpus_key, top_k_run

K1, B = 1.5, 0.75  # bm25s's (and Lucene's) defaults


class BM25Index:
    """``language`` (ISO 639-1) picks the tokens: CJK bigrams, the language's stop words and Snowball stemmer (see
    :mod:`~testset_builder.corpus.language`); queries are cut the same way. ``k1`` (term-frequency saturation) and
    ``b`` (length normalisation) are BM25's two parameters."""

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
    def key(
        chunk_ids: Sequence[str], texts: Sequence[str], stem: bool, language: str = "en", k1: float = K1, b: float = B
    ) -> str:
        tuned = "" if (k1, b) == (K1, B) else f" k1={k1} b={b}"  # the defaults keep the keys indexes were cached by
        return corpus_key(f"bm25s stem={stem} language={language} cjk=bigrams{tuned}", chunk_ids, texts)

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
        """Load the index for exactly these chunks from ``directory``, building and saving it if absent.

        The index is built under a name of this process's own and renamed into place, so a reader never sees half
        an index; when two processes build it at once, the second rename finds the first's index and keeps it. A
        cache that cannot be written (read-only media) only costs the rebuild next time."""
        path = Path(directory) / f"bm25-{cls.key(chunk_ids, texts, stem, language, k1, b)}"
        if (path / "chunk_ids.json").exists():
            return cls._load(path, stem, language)
        index = cls(chunk_ids, texts, stem, language, k1, b)
        partial = path.with_name(f"{path.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            index._model.save(str(partial), show_progress=False)
            (partial / "chunk_ids.json").write_text(json.dumps(index.chunk_ids), encoding="utf-8")
            os.rename(partial, path)
        except OSError:
            # another process finished the same index first (theirs is identical: same key), or the cache cannot
            # be written (a read-only workspace): either way the index in hand serves
            pass
        finally:
            shutil.rmtree(partial, ignore_errors=True)
        return index

    @classmethod
    def _load(cls, path: Path, stem: bool, language: str) -> BM25Index:
        import bm25s

        index = cls.__new__(cls)
        index.chunk_ids = json.loads((path / "chunk_ids.json").read_text(encoding="utf-8"))
        index.stem, index.language = stem, language
        index._model = bm25s.BM25.load(str(path), show_progress=False)
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
        """Top ``k`` chunks per query as a Run (chunks scoring 0 are left out)."""
        k = min(k, len(self.chunk_ids))
        documents, scores = self._model.retrieve(tokenize(queries, self.language, self.stem), k=k, show_progress=False)
        return top_k_run(query_ids, self.chunk_ids, documents, scores, name, keep=scores > 0)
