"""Confidence intervals and significance tests: checked against scipy and against their definitions."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from testset_builder.metrics.stats import bootstrap_ci, holm, paired_t_test, randomization_test


def test_paired_t_test_matches_scipy_ttest_rel():
    rng = np.random.default_rng(3)
    a = rng.random(50)
    b = a + rng.normal(0.05, 0.1, 50)
    assert paired_t_test(a, b) == pytest.approx(scipy_stats.ttest_rel(b, a).pvalue, rel=1e-12)


def test_identical_runs_are_not_different():
    a = np.linspace(0, 1, 20)
    assert paired_t_test(a, a) == 1.0
    assert randomization_test(a, a, resamples=999) == 1.0


def test_randomization_p_is_never_zero_thanks_to_the_plus_one_correction():
    a, b = np.zeros(200), np.ones(200)
    assert randomization_test(a, b, resamples=999, seed=1) == pytest.approx(1 / 1000)


def test_randomization_test_is_exact_for_a_small_case_enumerated_by_hand():
    # diffs (1, 2, 3): of the 8 sign patterns, |mean| >= 2 only for all-plus and all-minus -> exact p = 2/8
    a, b = np.zeros(3), np.array([1.0, 2.0, 3.0])
    assert randomization_test(a, b, resamples=200_000, seed=5) == pytest.approx(0.25, abs=0.005)


def test_randomization_test_is_reproducible_with_a_seed_and_varies_without():
    rng = np.random.default_rng(0)
    a, b = rng.random(40), rng.random(40)
    assert randomization_test(a, b, seed=11) == randomization_test(a, b, seed=11)
    assert randomization_test(a, b, resamples=2000, seed=1) != randomization_test(a, b, resamples=2000, seed=2)


def test_bootstrap_interval_covers_the_mean_and_matches_scipy_percentile_bootstrap():
    rng = np.random.default_rng(7)
    values = rng.random(300)
    low, high = bootstrap_ci(values, resamples=4000, seed=1)
    assert low < values.mean() < high
    reference = scipy_stats.bootstrap(
        (values,), np.mean, n_resamples=4000, method="percentile", random_state=2
    ).confidence_interval
    assert low == pytest.approx(reference.low, abs=0.01) and high == pytest.approx(reference.high, abs=0.01)


def test_bootstrap_memory_stays_bounded_for_many_queries():
    import tracemalloc

    tracemalloc.start()  # numpy reports its buffers to tracemalloc
    try:
        low, high = bootstrap_ci(np.ones(200_000), resamples=1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert low == high == 1.0
    naive = 1000 * 200_000 * 8  # every resample at once: 1.6 GB of float64 (and as much again of indices)
    assert peak < 128 * 2**20 < naive / 10, f"peak {peak / 2**20:.0f} MB"  # blocks of resamples, not all at once


def test_holm_adjusts_step_down_and_stays_monotone():
    adjusted = holm([0.01, 0.04, 0.03, 0.005])
    # sorted: 0.005*4=0.02, 0.01*3=0.03, 0.03*2=0.06, 0.04*1=0.04 -> monotone max -> 0.06
    assert adjusted.tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.9, 0.8]).tolist() == [1.0, 1.0]
