"""The features of a (query, chunk) pair that the relevance estimate reads: pure functions of a workspace's
scores, one row per pair in :data:`FEATURES`' order.

The signals are the ones a workspace already has, each cheap: the dense model's cosine similarity (and its gap to
the query's best chunk), the BM25 score normalised by the query's best, each retriever's rank (as log(1 + rank)),
both scores standardised over the query's top :data:`TOP` chunks and the two ranks' reciprocal-rank fusion
(per-query features: corpora differ in scale, a query's top does not), the share of the query's words found in the
chunk, and the LLM judge's P(relevant) when there is one. The pooled systems' columns are :mod:`.systems`'.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

import numpy as np

FEATURES = (
    "dense",  # cosine similarity of query and chunk (MiniLM)
    "dense_gap",  # that similarity minus the query's best chunk's
    "bm25",  # BM25 score over the query's best chunk's (0..1)
    "bm25_log_rank",  # log(1 + rank) by BM25 over the whole corpus
    "dense_log_rank",  # log(1 + rank) by cosine similarity
    "overlap",  # share of the query's words (3+ letters) found in the chunk
    "llm",  # the LLM judge's P(relevant); 0.5 when it gave none
    "llm_missing",  # 1 when the LLM judge gave no probability
    "dense_z",  # cosine similarity standardised over the query's top 100 chunks (mean 0, deviation 1 there)
    "bm25_z",  # BM25 standardised over the query's top 100 chunks
    "rrf",  # reciprocal-rank fusion of the BM25 and dense ranks, 60 / (60 + rank) each (0..2)
)


def vector(named: Mapping[str, float]) -> np.ndarray:
    """A stored pair's features, by name, as a row in :data:`FEATURES`' order (a name it lacks: 0; a name that is
    no longer a feature, as an older version's pooled systems' mean agreement: left out)."""
    return np.array([float(named.get(name, 0.0)) for name in FEATURES])


def by_name(row: Sequence[float]) -> dict[str, float]:
    """A row in :data:`FEATURES`' order as the store keeps it: by name."""
    return {name: float(value) for name, value in zip(FEATURES, row)}


TOP = 100  # the chunks a query's scores are standardised over: corpora differ in scale, a query's top does not


WORD = re.compile(r"\w{3,}", re.UNICODE)


Pair = tuple[str, str]  # (query id, chunk id)


def words(text: str) -> set[str]:
    return {w.lower() for w in WORD.findall(text)}


def query_features(
    dense_row: np.ndarray | None,
    bm25_row: np.ndarray,
    positions: Sequence[int],
    query_words: set[str],
    chunk_words: Sequence[set[str]],
    llm: Sequence[float | None],
) -> np.ndarray:
    """Features of one query's pairs: ``dense_row`` and ``bm25_row`` hold every chunk's score for the query
    (corpus order), ``positions`` the pairs' chunks in that order; ``llm`` each pair's P(relevant) or None. Without
    a dense model, the dense features are those of a chunk the model would call unrelated."""
    positions = np.asarray(positions, dtype=int)
    n = len(positions)
    out = np.zeros((n, len(FEATURES)))
    column = FEATURES.index
    bm25 = bm25_row[positions]
    best_bm25 = float(bm25_row.max()) if bm25_row.size else 0.0
    out[:, column("bm25")] = bm25 / best_bm25 if best_bm25 > 0 else 0.0
    bm25_ranks = _ranks(bm25_row, positions)
    out[:, column("bm25_log_rank")] = np.log1p(bm25_ranks)
    out[:, column("bm25_z")] = _standardised(bm25_row, bm25)
    if dense_row is not None:
        dense_ranks = _ranks(dense_row, positions)
        out[:, column("dense")] = dense_row[positions]
        out[:, column("dense_gap")] = dense_row[positions] - float(dense_row.max())
        out[:, column("dense_log_rank")] = np.log1p(dense_ranks)
        out[:, column("dense_z")] = _standardised(dense_row, dense_row[positions])
        out[:, column("rrf")] = 60.0 / (60.0 + bm25_ranks) + 60.0 / (60.0 + dense_ranks)
    else:
        out[:, column("rrf")] = 60.0 / (60.0 + bm25_ranks)
        out = without_dense(out, len(bm25_row))
    out[:, column("overlap")] = [len(query_words & w) / len(query_words) if query_words else 0.0 for w in chunk_words]
    out[:, column("llm")] = [0.5 if p is None else p for p in llm]
    out[:, column("llm_missing")] = [1.0 if p is None else 0.0 for p in llm]
    return out


def _standardised(row: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` as z-scores against the best :data:`TOP` scores of ``row`` (0 when those are all equal)."""
    if not row.size:
        return np.zeros(len(values))
    top = np.partition(row, len(row) - min(TOP, len(row)))[-min(TOP, len(row)) :].astype(float)
    spread = float(top.std())
    return (np.asarray(values, dtype=float) - float(top.mean())) / spread if spread > 0 else np.zeros(len(values))


def without_dense(features: np.ndarray, chunks: int) -> np.ndarray:
    """The features as they are without a dense model: those of a chunk it would call unrelated (cosine 0, a gap of
    1 to the best, ranked last of ``chunks``, three deviations below the query's top)."""
    out = np.array(features, dtype=float, copy=True)
    out[:, FEATURES.index("dense")] = 0.0
    out[:, FEATURES.index("dense_gap")] = -1.0
    out[:, FEATURES.index("dense_log_rank")] = math.log1p(chunks)
    out[:, FEATURES.index("dense_z")] = -3.0
    bm25_rank = np.expm1(out[:, FEATURES.index("bm25_log_rank")])
    out[:, FEATURES.index("rrf")] = 60.0 / (60.0 + bm25_rank) + 60.0 / (60.0 + chunks)
    return out


def _ranks(row: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """1-based rank of each position's score in ``row`` (ties share the best rank)."""
    ordered = np.sort(row)[::-1]
    return 1 + np.searchsorted(-ordered, -row[positions], side="left")
