"""Uncertainty of scores and significance of differences, over queries or over clusters of queries.

* :func:`bootstrap_ci` / :func:`bootstrap_intervals`: percentile bootstrap confidence intervals of means (seeded),
  resampling queries, or whole clusters when ``clusters`` is given (the mean of a resample is its total over its
  query count: the ratio estimator, since clusters differ in size).
* :func:`paired_t_test` / :func:`paired_t_tests`: two-sided paired t-tests on per-query differences; with clusters,
  the cluster-robust variance of the mean and G - 1 degrees of freedom (G clusters).
* :func:`randomization_test` / :func:`randomization_tests`: two-sided paired randomization (sign-flip) tests, seeded,
  with the +1 correction ``p = (1 + #{|mean diff*| >= |mean diff|}) / (1 + resamples)`` so p is never 0 (Smucker et
  al., CIKM 2007). With clusters, each cluster's summed difference flips sign as one.
* :func:`mean_variance`, :func:`design_effects`: the variance of a mean under clustering, and its ratio to the
  variance under independence (Kish's design effect), from cluster totals.
* :func:`holm`: Holm-Bonferroni step-down adjustment across the hypotheses tested together.

``clusters`` is always an integer code per query (0..G-1), or None for "each query is its own cluster"; None and
all-singleton codes give the same figures, and None takes the plain (fast) path. The ``*s`` forms take a
(queries x columns) matrix and share one set of resamples across its columns: with one seed every column sees the
same draws, as separate seeded calls would, at the cost of one draw.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

# resampling is done in blocks of at most this many cells, so memory stays flat whatever the query count
_BLOCK_CELLS = 4_000_000


def _blocks(total: int, n: int, cells: int = _BLOCK_CELLS):
    size = max(1, cells // max(n, 1))
    for start in range(0, total, size):
        yield min(size, total - start)


def _columns(values) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return values[:, None] if values.ndim == 1 else values


def cluster_totals(values: np.ndarray, clusters: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Each cluster's sum of ``values`` (clusters x columns) and its query count; the values themselves and ones
    when ``clusters`` is None."""
    values = _columns(values)
    if clusters is None:
        return values, np.ones(len(values))
    groups = int(clusters.max()) + 1 if len(clusters) else 0
    totals = np.zeros((groups, values.shape[1]))
    np.add.at(totals, clusters, values)
    return totals, np.bincount(clusters, minlength=groups).astype(np.float64)


def _counts(draws: np.ndarray, groups: int) -> np.ndarray:
    """How many times each of ``groups`` units is drawn in each resample, from a block of draws (size x groups):
    ``rng.integers(0, groups, (size, groups))``, the same a gather of resampled indices would use, counted so that a
    resample's sums become one matrix product; a resample at a time, where the counts stay in cache."""
    counts = np.empty(draws.shape)
    for row in range(len(draws)):
        counts[row] = np.bincount(draws[row], minlength=groups)
    return counts


def _draws(rng: np.random.Generator, groups: int, sizes: list[int]):
    """Each block's draws in turn; the next block is drawn on a second thread while the caller counts this one (the
    generator releases the GIL), from the one generator in the same order, so the draws are those of a single thread."""
    if len(sizes) < 2:
        yield from (rng.integers(0, groups, size=(size, groups)) for size in sizes)
        return
    with ThreadPoolExecutor(max_workers=1) as drawer:
        pending = drawer.submit(rng.integers, 0, groups, (sizes[0], groups))
        for following in [*sizes[1:], None]:
            draws = pending.result()
            if following is not None:
                pending = drawer.submit(rng.integers, 0, groups, (following, groups))
            yield draws


def resampled_means(
    values: np.ndarray, clusters: np.ndarray | None = None, resamples: int = 1000, seed: int = 0
) -> np.ndarray:
    """Bootstrap means (resamples x columns) of each column of ``values``, resampling queries or clusters."""
    totals, sizes = cluster_totals(values, clusters)
    groups = len(totals)
    rng = np.random.default_rng(seed)
    means = []
    blocks = list(_blocks(resamples, groups, _BLOCK_CELLS // 4))  # draws, the next block's, counts: a block each
    for draws in _draws(rng, groups, blocks):
        counts = _counts(draws, groups)
        means.append((counts @ totals) / (counts @ sizes)[:, None])
    return np.concatenate(means)


def bootstrap_intervals(
    values: np.ndarray,
    clusters: np.ndarray | None = None,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap intervals of each column's mean; nan for no values."""
    values = _columns(values)
    if len(values) == 0:
        nan = np.full(values.shape[1], np.nan)
        return nan, nan.copy()
    means = resampled_means(values, clusters, resamples, seed)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha], axis=0)
    return low, high


def bootstrap_ci(
    values: np.ndarray,
    confidence: float = 0.95,
    resamples: int = 1000,
    seed: int = 0,
    clusters: np.ndarray | None = None,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``values.mean()`` (of clusters when given); (nan, nan) for no values."""
    low, high = bootstrap_intervals(values, clusters, confidence, resamples, seed)
    return float(low[0]), float(high[0])


def mean_variance(values: np.ndarray, clusters: np.ndarray | None = None) -> np.ndarray:
    """Estimated variance of each column's mean: ``s^2 / n`` for independent queries; with clusters the
    cluster-robust (linearised ratio) estimator ``G / (G - 1) * sum_g (T_g - n_g * mean)^2 / n^2``, which is
    ``s^2 / n`` again when every cluster holds one query."""
    values = _columns(values)
    n = len(values)
    if n < 2:
        return np.zeros(values.shape[1])
    if clusters is None:
        return values.var(axis=0, ddof=1) / n
    totals, sizes = cluster_totals(values, clusters)
    groups = len(totals)
    if groups < 2:
        return np.full(values.shape[1], np.inf)
    residual = totals - sizes[:, None] * values.mean(axis=0)
    return groups / (groups - 1) * (residual**2).sum(axis=0) / n**2


def design_effects(values: np.ndarray, clusters: np.ndarray | None) -> np.ndarray:
    """Variance of each column's mean under the clustering over its variance were the queries independent (1 for
    no clustering, and where the values do not vary). The interval widens by about its square root."""
    values = _columns(values)
    if clusters is None or len(values) < 2:
        return np.ones(values.shape[1])
    independent = mean_variance(values)
    clustered = mean_variance(values, clusters)
    out = np.ones(values.shape[1])
    np.divide(clustered, independent, out=out, where=independent > 0)
    return out


def paired_t_tests(differences: np.ndarray, clusters: np.ndarray | None = None) -> np.ndarray:
    """Two-sided p-values of mean(difference) = 0 for each column (cluster-robust with G - 1 df under clusters)."""
    from scipy import stats

    differences = _columns(differences)
    n, columns = differences.shape
    p = np.ones(columns)
    if n < 2:
        return p
    mean = differences.mean(axis=0)
    variance = mean_variance(differences, clusters)
    groups = n if clusters is None else int(clusters.max()) + 1
    constant = variance <= 1e-30 * np.maximum(1.0, mean**2)
    p[constant] = np.where(mean[constant] == 0, 1.0, 0.0)
    varying = ~constant & np.isfinite(variance)
    if clusters is None and varying.any():  # scipy's own test, so the plain case is exactly the textbook one
        p[varying] = stats.ttest_1samp(differences[:, varying], 0.0, axis=0).pvalue
    elif varying.any():
        t = mean[varying] / np.sqrt(variance[varying])
        p[varying] = 2.0 * stats.t.sf(np.abs(t), df=groups - 1)
    return p


def paired_t_test(a: np.ndarray, b: np.ndarray, clusters: np.ndarray | None = None) -> float:
    """Two-sided p-value of the paired t-test of mean(b - a) = 0. Identical inputs give p = 1."""
    diff = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    return float(paired_t_tests(diff, clusters)[0])


def randomization_tests(
    differences: np.ndarray, clusters: np.ndarray | None = None, resamples: int = 10_000, seed: int = 0
) -> np.ndarray:
    """Two-sided paired randomization test of each column: flip the sign of each query's (or cluster's summed)
    difference at random. The observed difference counts as one of the permutations (the +1 correction), so
    p >= 1 / (resamples + 1)."""
    differences = _columns(differences)
    n = len(differences)
    if n == 0:
        return np.ones(differences.shape[1])
    totals, _ = cluster_totals(differences, clusters)
    groups = len(totals)
    observed = np.abs(totals.sum(axis=0)) / n
    tolerance = 1e-12 * np.maximum(1.0, observed)
    rng = np.random.default_rng(seed)
    at_least_as_extreme = np.zeros(differences.shape[1], dtype=np.int64)
    for size in _blocks(resamples, groups):
        flips = rng.integers(0, 2, size=(size, groups), dtype=np.int8)
        for rows in _blocks(size, groups, _BLOCK_CELLS // 8):  # the signs as float64: BLAS's product, not int8's loop
            signs, flips = flips[:rows].astype(np.float64), flips[rows:]
            signs *= 2
            signs -= 1
            permuted = signs @ totals
            np.abs(permuted, out=permuted)
            permuted /= n
            at_least_as_extreme += np.count_nonzero(permuted >= observed - tolerance, axis=0)
    return (at_least_as_extreme + 1) / (resamples + 1)


def randomization_test(
    a: np.ndarray, b: np.ndarray, resamples: int = 10_000, seed: int = 0, clusters: np.ndarray | None = None
) -> float:
    """Two-sided paired randomization test of mean(b - a) = 0 (see :func:`randomization_tests`)."""
    diff = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    return float(randomization_tests(diff, clusters, resamples, seed)[0])


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
