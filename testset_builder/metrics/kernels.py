"""Per-query metric kernels over a :class:`~testset_builder.metrics.matrix.GradeMatrix`.

Each function returns one value per evaluated query (a numpy vector), computed for all queries at once: no Python
loop over queries. Conventions are trec_eval's (see :mod:`testset_builder.metrics.matrix` for ranking and query
matching): relevant means grade >= 1; a query with no relevant chunks scores 0 on every metric.
"""

from __future__ import annotations

import numpy as np

from .matrix import GradeMatrix


def _safe_divide(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    numerator = np.asarray(numerator, dtype=np.float64)
    denominator = np.asarray(denominator, dtype=np.float64)
    out = np.zeros(np.broadcast(numerator, denominator).shape, dtype=np.float64)
    np.divide(numerator, denominator, out=out, where=denominator > 0)
    return out


def _top(matrix: GradeMatrix, k: int | None) -> int:
    return matrix.depth if k is None else min(k, matrix.depth)


def recall(matrix: GradeMatrix, k: int | None = None) -> np.ndarray:
    """Recall@k = |relevant in top k| / |relevant|. trec_eval ``recall.k``; 0 when the query has no relevant chunk."""
    return _safe_divide(matrix.relevant_at(k), matrix.num_relevant)


def precision(matrix: GradeMatrix, k: int) -> np.ndarray:
    """Precision@k = |relevant in top k| / k. Divides by k even when fewer than k were retrieved (trec_eval ``P.k``)."""
    return matrix.relevant_at(k) / float(k)


def reciprocal_rank(matrix: GradeMatrix, k: int | None = None) -> np.ndarray:
    """1 / rank of the first relevant chunk within the top k, else 0. Its mean is MRR (trec_eval ``recip_rank``)."""
    top = _top(matrix, k)
    if top == 0:
        return np.zeros(len(matrix.query_ids))
    relevant = matrix.relevant[:, :top]
    first = np.argmax(relevant, axis=1)
    return np.where(relevant.any(axis=1), 1.0 / (first + 1.0), 0.0)


def hit_rate(matrix: GradeMatrix, k: int | None = None) -> np.ndarray:
    """1 if any relevant chunk is in the top k, else 0 (trec_eval ``success.k``)."""
    return (matrix.relevant_at(k) > 0).astype(np.float64)


def complete(matrix: GradeMatrix, k: int | None = None) -> np.ndarray:
    """1 if every relevant chunk of the query is in the top k, else 0: all the evidence a question needs, retrieved.

    Beside recall@k for questions that need several chunks: recall gives a question half its credit for half its
    evidence, complete@k gives none, as a reader who needs both chunks gets nothing useful from one. Equal to
    recall@k where a question has one relevant chunk; 0 when it has none. Not a trec_eval measure.
    """
    found = matrix.relevant_at(k)
    return ((found == matrix.num_relevant) & (matrix.num_relevant > 0)).astype(np.float64)


def average_precision(matrix: GradeMatrix, k: int | None = None) -> np.ndarray:
    """AP@k = sum over relevant ranks r <= k of precision@r, divided by |relevant| (not by min(k, |relevant|)).

    Its mean is MAP (trec_eval ``map`` / ``map_cut.k``). Relevant chunks never retrieved contribute 0.
    """
    top = _top(matrix, k)
    relevant = matrix.relevant[:, :top]
    precision_at_rank = matrix.relevant_cumsum[:, :top] / np.arange(1, top + 1, dtype=np.float64)
    return _safe_divide(np.sum(precision_at_rank, axis=1, where=relevant), matrix.num_relevant)


def r_precision(matrix: GradeMatrix) -> np.ndarray:
    """Precision at rank R, R = |relevant| for the query (trec_eval ``Rprec``); 0 when R = 0."""
    n = len(matrix.query_ids)
    if matrix.depth == 0:
        return np.zeros(n)
    column = np.clip(matrix.num_relevant, 1, matrix.depth) - 1
    hits = matrix.relevant_cumsum[np.arange(n), column]
    return _safe_divide(hits, matrix.num_relevant)


def _discount(length: int) -> np.ndarray:
    return 1.0 / np.log2(np.arange(2, length + 2, dtype=np.float64))


def _gain(grades: np.ndarray, gain: str) -> np.ndarray:
    positive = np.clip(grades, 0, None).astype(np.float64)
    if gain == "linear":
        return positive
    if gain == "exponential":
        return np.exp2(positive) - 1.0
    raise ValueError(f"gain must be 'linear' or 'exponential', got {gain!r}")


def ndcg(matrix: GradeMatrix, k: int | None = None, gain: str = "linear") -> np.ndarray:
    """nDCG@k = DCG@k / IDCG@k with DCG@k = sum_{r<=k} gain(grade_r) / log2(r + 1).

    ``gain='linear'`` uses the grade itself (trec_eval ``ndcg_cut.k``); ``'exponential'`` uses 2^grade - 1
    (Burges et al.). Negative grades count as 0. The ideal ranking sorts *all* the query's judged chunks by grade,
    retrieved or not, and is cut at k too. 0 when the query has no positive grade.
    """
    top = _top(matrix, k)
    dcg = _gain(matrix.grades[:, :top], gain) @ _discount(top)
    ideal_top = matrix.ideal.shape[1] if k is None else min(k, matrix.ideal.shape[1])
    idcg = _gain(matrix.ideal[:, :ideal_top], gain) @ _discount(ideal_top)
    return _safe_divide(dcg, idcg)
