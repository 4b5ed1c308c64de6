"""A relevance estimate per (query, chunk) pair, apart from what any single judge said.

The signals are the ones a workspace already has, each cheap: the dense model's cosine similarity (and its gap to
the query's best chunk), the BM25 score normalised by the query's best, each retriever's rank (as log(1 + rank)),
the share of the query's words found in the chunk, and the LLM judge's P(relevant) when there is one. A logistic
model combines them into P(relevant).

- Before any verdict the shipped prior applies: coefficients fitted on SciFact's *train* qrels (pool depth 10 per
  retriever, pool members without a label counted as not relevant), by ``benchmarks/relevance_estimate.py --fit``.
  The LLM carries no weight in it: the embedded judge is at chance on SciFact.
- With verdicts the model is refitted per workspace (:func:`refit`): a logistic regression whose coefficients are
  pulled towards the prior's (a Gaussian prior, so twenty verdicts move it a little and two hundred a lot), which
  is also how the LLM's P(relevant) earns a weight, if the team's reviewers find it informative. Fewer than
  ``MIN_VERDICTS`` verdicts, or verdicts of one class only, keep the prior.

Every estimate names the model that made it and how many verdicts that model saw.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

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
)
MIN_VERDICTS = 20
WORD = re.compile(r"\w{3,}", re.UNICODE)


@dataclass(frozen=True)
class RelevanceModel:
    """A logistic model over :data:`FEATURES`: P(relevant) = sigmoid(bias + weights . features)."""

    name: str
    bias: float
    weights: tuple[float, ...]
    verdicts: int = 0

    def p_relevant(self, features: np.ndarray) -> np.ndarray:
        return _sigmoid(self.bias + np.asarray(features, dtype=float) @ np.asarray(self.weights))

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "verdicts": self.verdicts,
            "bias": self.bias,
            "weights": dict(zip(FEATURES, self.weights)),
        }


# Fitted on SciFact train (809 queries, pool depth 10 per retriever) by benchmarks/relevance_estimate.py --fit.
PRIOR = RelevanceModel(
    name="prior:scifact-train-v1",
    bias=-3.0,
    weights=(4.0, 4.0, 1.0, -0.3, -0.3, 1.0, 0.0, 0.0),
)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -40, 40)))


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
    bm25 = bm25_row[positions]
    best_bm25 = float(bm25_row.max()) if bm25_row.size else 0.0
    out[:, 2] = bm25 / best_bm25 if best_bm25 > 0 else 0.0
    out[:, 3] = np.log1p(_ranks(bm25_row, positions))
    if dense_row is not None:
        out[:, 0] = dense_row[positions]
        out[:, 1] = dense_row[positions] - float(dense_row.max())
        out[:, 4] = np.log1p(_ranks(dense_row, positions))
    else:
        out[:, 0], out[:, 1], out[:, 4] = 0.0, -1.0, math.log1p(len(bm25_row))
    out[:, 5] = [len(query_words & w) / len(query_words) if query_words else 0.0 for w in chunk_words]
    out[:, 6] = [0.5 if p is None else p for p in llm]
    out[:, 7] = [1.0 if p is None else 0.0 for p in llm]
    return out


def _ranks(row: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """1-based rank of each position's score in ``row`` (ties share the best rank)."""
    ordered = np.sort(row)[::-1]
    return 1 + np.searchsorted(-ordered, -row[positions], side="left")


def refit(
    features: np.ndarray, labels: np.ndarray, prior: RelevanceModel = PRIOR, strength: float = 1.0
) -> RelevanceModel:
    """Refit on verdicts (``labels``: 1 relevant, 0 not), coefficients pulled towards ``prior`` with precision
    ``strength`` (maximum a posteriori, by Newton's method); the prior itself when there are too few verdicts or
    only one class of them."""
    x = np.asarray(features, dtype=float)
    y = np.asarray(labels, dtype=float)
    if len(y) < MIN_VERDICTS or y.min() == y.max():
        return prior
    design = np.hstack([np.ones((len(y), 1)), x])
    centre = np.concatenate([[prior.bias], prior.weights])
    penalty = np.full(len(centre), strength)
    penalty[0] = strength * 0.1  # the base rate moves freely: a workspace's share of relevant pairs is its own
    theta = centre.copy()
    for _ in range(50):
        p = _sigmoid(design @ theta)
        gradient = design.T @ (y - p) - penalty * (theta - centre)
        hessian = -(design.T * (p * (1 - p))) @ design - np.diag(penalty)
        step = np.linalg.solve(hessian, gradient)
        theta -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    return RelevanceModel(f"refit:{prior.name}", float(theta[0]), tuple(float(t) for t in theta[1:]), len(y))


def fit(features: np.ndarray, labels: np.ndarray, name: str, l2: float = 1e-3) -> RelevanceModel:
    """A fresh fit with a weak ridge (what made :data:`PRIOR`)."""
    zero = RelevanceModel(name, 0.0, (0.0,) * len(FEATURES))
    model = refit(features, labels, zero, strength=l2)
    return RelevanceModel(name, model.bias, model.weights, 0)
