"""Uncertainty of scores and significance of differences, over queries.

* :func:`bootstrap_ci`: percentile bootstrap confidence interval of a mean, resampling queries (seeded).
* :func:`paired_t_test`: two-sided paired t-test on per-query differences.
* :func:`randomization_test`: two-sided paired randomization (sign-flip) test, seeded, with the +1 correction
  ``p = (1 + #{|mean diff*| >= |mean diff|}) / (1 + resamples)`` so p is never 0 (Smucker et al., CIKM 2007).
* :func:`holm`: Holm-Bonferroni step-down adjustment across the metrics compared.
"""

from __future__ import annotations

import numpy as np

# resampling is done in blocks of at most this many cells, so memory stays flat whatever the query count
_BLOCK_CELLS = 4_000_000


def _blocks(total: int, n: int):
    size = max(1, _BLOCK_CELLS // max(n, 1))
    for start in range(0, total, size):
        yield min(size, total - start)


def bootstrap_ci(
    values: np.ndarray, confidence: float = 0.95, resamples: int = 1000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``values.mean()``; (nan, nan) for no values."""
    values = np.asarray(values, dtype=np.float64)
    n = len(values)
    if n == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    means = np.concatenate([values[rng.integers(0, n, size=(size, n))].mean(axis=1) for size in _blocks(resamples, n)])
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return float(low), float(high)


def paired_t_test(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p-value of the paired t-test of mean(b - a) = 0. Identical inputs give p = 1."""
    from scipy import stats

    diff = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    if len(diff) < 2:
        return 1.0
    if np.all(diff == diff[0]):
        return 1.0 if diff[0] == 0 else 0.0
    return float(stats.ttest_1samp(diff, 0.0).pvalue)


def randomization_test(a: np.ndarray, b: np.ndarray, resamples: int = 10_000, seed: int = 0) -> float:
    """Two-sided paired randomization test: flip the sign of each query's difference at random.

    The observed difference counts as one of the permutations (the +1 correction), so p >= 1 / (resamples + 1).
    """
    diff = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    n = len(diff)
    if n == 0:
        return 1.0
    observed = abs(diff.mean())
    rng = np.random.default_rng(seed)
    at_least_as_extreme = 0
    tolerance = 1e-12 * max(1.0, observed)
    for size in _blocks(resamples, n):
        signs = rng.integers(0, 2, size=(size, n), dtype=np.int8) * 2 - 1
        permuted = np.abs(signs @ diff) / n
        at_least_as_extreme += int(np.count_nonzero(permuted >= observed - tolerance))
    return (at_least_as_extreme + 1) / (resamples + 1)


def holm(pvalues: list[float] | np.ndarray) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (monotone, capped at 1), in the input order."""
    p = np.asarray(pvalues, dtype=np.float64)
    m = len(p)
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    adjusted = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(adjusted, 1.0)
    return out
