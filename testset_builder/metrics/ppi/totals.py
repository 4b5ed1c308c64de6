"""Per-query totals by the difference estimator (Särndal, Swensson and Wretman 1992, ch. 6; the prediction-powered
estimator of Angelopoulos et al. 2023 under a known sampling design, Zrnic and Candès 2024).

A total T_q = sum_i a_i x_i over query q's pooled pairs (a_i a run's rank discount or 1, x_i a label, a grade or
"is grade 2") is estimated by

    T_q^ = sum_{i certain} a_i x_i + sum_{i not certain} a_i f_i + sum_{i drawn} a_i (x_i - f_i) / pi_i

with f_i the prediction plugged in for pair i. Under Poisson sampling each pair is drawn independently with
probability pi_i, so E[T_q^] = T_q whatever f is, provided f_i does not depend on pair i's own draw. The better f
predicts x, the smaller the residuals x_i - f_i that the variance rests on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .pool import Pool


@dataclass(frozen=True)
class Total:
    """One total per query, each pair's residual term a_i (x_i - f_i) (0 unless drawn at random: the pair's part in
    the total's error, before division by pi_i), and per query what the labels confirm (every a_i and x_i is at
    least 0, so the true total is at least that)."""

    per_query: np.ndarray
    residual: np.ndarray
    verified: np.ndarray  # per query, sum of a_i x_i over the labelled pairs: the true total is at least this


def total(pool: Pool, coefficient: np.ndarray, observed: np.ndarray, predicted: np.ndarray, correct: bool) -> Total:
    """The difference estimator of sum_i a_i x_i per query: ``observed`` holds x where a label exists, ``predicted``
    f everywhere; without ``correct`` (the estimate-only figure) the drawn verdicts are not used."""
    residual = np.where(pool.sampled, coefficient * (observed - predicted), 0.0) if correct else np.zeros(len(pool))
    plugged = np.where(pool.certain, observed, predicted) * coefficient
    values = plugged + residual / pool.probability
    known = (pool.certain | pool.sampled) if correct else pool.certain
    confirmed = np.bincount(pool.query, np.where(known, coefficient * observed, 0.0), pool.queries)
    return Total(np.bincount(pool.query, values, pool.queries), residual, confirmed)
