"""A baseline run over a release's own corpus and queries, to score against it (BM25, or dense with the extra)."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from ..records import passage_text
from ..tables import Run
from ._common import Corpus
from .bm25 import BM25Index
from .dense import DenseIndex, encode
from .indexes import languages_of


def baseline_run(
    corpus: dict[str, dict],
    queries: dict[str, str],
    retriever: str = "bm25",
    k: int = 100,
    cache_dir: Path | None = None,
) -> Run:
    """Top ``k`` chunks for every query; chunks are indexed as title then text, as ``propose`` indexes them."""
    ids = sorted(corpus)
    texts = [passage_text(corpus[i].get("title", ""), corpus[i]["text"]) for i in ids]
    corpus = Corpus.of(ids, texts)
    if retriever == "bm25":
        language = languages_of(cache_dir, corpus)[0]
        index = (
            BM25Index.for_corpus(cache_dir, corpus, language=language)
            if cache_dir
            else BM25Index(ids, texts, language=language)
        )
    elif retriever == "dense":
        index = DenseIndex.for_corpus(cache_dir, corpus) if cache_dir else DenseIndex(ids, encode(texts))
    else:
        raise InputError(f"unknown retriever {retriever!r}; use bm25 or dense")
    query_ids = sorted(queries)
    return index.search(query_ids, [queries[q] for q in query_ids], k=k, name=retriever)
