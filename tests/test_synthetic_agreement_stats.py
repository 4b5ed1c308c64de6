"""The pure statistics of benchmarks/synthetic_agreement.py: vectorised tau-b, bootstrap, pair agreement, cap."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import kendalltau

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import synthetic_agreement as sa


def test_tau_b_matches_scipy_row_by_row_with_ties():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 4, size=(50, 9)).astype(float)  # many ties
    y = rng.integers(0, 4, size=(50, 9)).astype(float)
    ours = sa.kendall_tau_b(x, y)
    for row in range(50):
        expected = kendalltau(x[row], y[row])[0]
        assert ours[row] == pytest.approx(expected, nan_ok=True)
    assert float(sa.kendall_tau_b(x[0], y[0])) == pytest.approx(kendalltau(x[0], y[0])[0])
    assert sa.kendall_tau_b(np.arange(5.0), np.arange(5.0)).shape == ()


def test_resampled_means_are_means_of_resamples():
    scores = np.arange(12.0).reshape(3, 4)
    means = sa.resampled_means(scores, 200, np.random.default_rng(0))
    assert means.shape == (200, 3)
    # each row's retrievers differ by exactly the per-retriever offset of 4: the same queries were drawn for all
    assert np.allclose(means[:, 1] - means[:, 0], 4.0) and np.allclose(means[:, 2] - means[:, 1], 4.0)
    assert means[:, 0].min() >= 0 and means[:, 0].max() <= 3


def test_bootstrap_tau_identical_rankings_is_one():
    rng = np.random.default_rng(0)
    human = np.linspace(0, 1, 6)[:, None] + rng.normal(0, 0.01, size=(6, 300))
    synthetic = np.linspace(0, 1, 6)[:, None] + rng.normal(0, 0.01, size=(6, 100))
    result = sa.bootstrap_tau(human, synthetic, resamples=300, seed=0)
    assert result["tau"] == pytest.approx(1.0)
    assert result["ci_low"] == pytest.approx(1.0) and result["share_at_least_0.9"] == 1.0
    reversed_result = sa.bootstrap_tau(human, synthetic[::-1], resamples=300, seed=0)
    assert reversed_result["tau"] == pytest.approx(-1.0)


def test_pair_agreement_counts():
    rng = np.random.default_rng(0)
    base = rng.normal(0, 0.05, size=400)
    human = np.vstack([base, base + 0.5, base + 0.5 + rng.normal(0, 0.05, size=400)])
    synthetic = np.vstack([base[:200] + 0.5, base[:200], base[:200] + 0.5 + rng.normal(0, 0.05, size=200)])
    h = sa.pairwise_tests(human, resamples=2000)
    s = sa.pairwise_tests(synthetic, resamples=2000)
    result = sa.pair_agreement(h, s)
    assert result["pairs"] == 3
    assert result["human_significant"] == 2  # 0<1 and 0<2; 1 vs 2 is noise
    assert result["same_order"] == 0 and result["synthetic_significant_opposite"] == 2


def test_split_tau_ceiling_high_for_well_separated_retrievers():
    rng = np.random.default_rng(0)
    human = np.linspace(0, 1, 8)[:, None] + rng.normal(0, 0.05, size=(8, 300))
    result = sa.split_tau(human, 100, draws=100)
    assert result["queries"] == 100 and result["median"] == pytest.approx(1.0)


def test_overlap_cap_default_and_ties():
    assert sa.overlap_cap(np.array([0.2, 0.4, 0.6, 0.8]), None) == pytest.approx(0.5)
    assert sa.overlap_cap(np.array([0.5, 1.0, 1.0, 1.0, 1.0]), None) == 0.5  # ties at the median: below it
    assert sa.overlap_cap(np.array([0.5, 1.0]), 0.7) == 0.7


def test_lead_body_and_first_words_work_with_and_without_titles():
    assert sa.lead_and_body("A title.\nOne claim holds. Two follows.") == ("A title.", "One claim holds. Two follows.")
    assert sa.lead_and_body("Values of 1.5 mg were used. Then more") == ("Values of 1.5 mg were used.", "Then more")
    tokenised = "wing in a slipstream .\nwing in a slipstream . an experimental study ."
    assert sa.lead_and_body(tokenised) == ("wing in a slipstream", "an experimental study .")  # title repeated
    unpunctuated = " ".join(f"w{i}" for i in range(30))
    assert sa.lead_and_body(unpunctuated) == (" ".join(f"w{i}" for i in range(24)), "w24 w25 w26 w27 w28 w29")
    assert sa.lead_and_body("one sentence only") == ("one sentence only", "one sentence only")
    assert sa.first_words("a b c d", 2) == "a b"
