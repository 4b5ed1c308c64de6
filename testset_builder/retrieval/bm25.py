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

from ..tables import Run
from ._common import corpus_key, top_k_run


def _tokenize(texts: Sequence[str], stem: bool):
    import bm25s

    stemmer = None
    if stem:
        import Stemmer

        stemmer = Stemmer.Stemmer("english")
    return bm25s.tokenize(list(texts), stopwords="en", stemmer=stemmer, show_progress=False)


class BM25Index:
    def __init__(self, chunk_ids: Sequence[str], texts: Sequence[str], stem: bool = True) -> None:
        import bm25s

        self.chunk_ids = list(chunk_ids)
        self.stem = stem
        self._model = bm25s.BM25()
        self._model.index(_tokenize(texts, stem), show_progress=False)

    @staticmethod
    def key(chunk_ids: Sequence[str], texts: Sequence[str], stem: bool) -> str:
        return corpus_key(f"bm25s stem={stem}", chunk_ids, texts)

    @classmethod
    def cached(cls, directory: Path, chunk_ids: Sequence[str], texts: Sequence[str], stem: bool = True) -> BM25Index:
        """Load the index for exactly these chunks from ``directory``, building and saving it if absent.

        The index is built under a name of this process's own and renamed into place, so a reader never sees half
        an index; when two processes build it at once, the second rename finds the first's index and keeps it. A
        cache that cannot be written (read-only media) only costs the rebuild next time."""
        path = Path(directory) / f"bm25-{cls.key(chunk_ids, texts, stem)}"
        if (path / "chunk_ids.json").exists():
            return cls._load(path, stem)
        index = cls(chunk_ids, texts, stem)
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
    def _load(cls, path: Path, stem: bool) -> BM25Index:
        import bm25s

        index = cls.__new__(cls)
        index.chunk_ids = json.loads((path / "chunk_ids.json").read_text(encoding="utf-8"))
        index.stem = stem
        index._model = bm25s.BM25.load(str(path), show_progress=False)
        return index

    def search(self, query_ids: Sequence[str], queries: Sequence[str], k: int = 100, name: str = "bm25") -> Run:
        """Top ``k`` chunks per query as a Run (chunks scoring 0 are left out)."""
        k = min(k, len(self.chunk_ids))
        documents, scores = self._model.retrieve(_tokenize(queries, self.stem), k=k, show_progress=False)
        return top_k_run(query_ids, self.chunk_ids, documents, scores, name, keep=scores > 0)
