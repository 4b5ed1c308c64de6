"""Agreement figures checked against reference implementations: scikit-learn's quadratic-weighted Cohen's kappa and
the krippendorff package's ordinal alpha, on random gradings with gaps; and the report built from them."""

from __future__ import annotations

import krippendorff
import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from testset_builder.labels.agreement import agreement_report, krippendorff_alpha_ordinal, weighted_kappa


@pytest.mark.parametrize("seed", range(40))
def test_weighted_kappa_equals_scikit_learns_quadratic_kappa(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 200))
    a = rng.integers(0, 3, n)
    b = np.where(rng.random(n) < rng.random(), a, rng.integers(0, 3, n))  # agreement from none to much
    expected = cohen_kappa_score(a, b, labels=[0, 1, 2], weights="quadratic")
    assert weighted_kappa(a.tolist(), b.tolist()) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("seed", range(40))
def test_krippendorff_alpha_equals_the_krippendorff_packages_ordinal_alpha_with_missing_grades(seed):
    rng = np.random.default_rng(seed)
    coders, units = int(rng.integers(2, 6)), int(rng.integers(5, 120))
    truth = rng.integers(0, 3, units)
    data = np.where(rng.random((coders, units)) < 0.7, truth, rng.integers(0, 3, (coders, units))).astype(float)
    data[rng.random((coders, units)) < 0.35] = np.nan  # not every coder grades every unit
    expected = krippendorff.alpha(reliability_data=data, level_of_measurement="ordinal", value_domain=[0, 1, 2])
    columns = [[int(v) for v in data[:, u] if not np.isnan(v)] for u in range(units)]
    ours = krippendorff_alpha_ordinal(columns)
    assert ours is None if np.isnan(expected) else ours == pytest.approx(expected, abs=1e-12)


def test_figures_are_undefined_rather_than_made_up_when_there_is_nothing_to_compare():
    assert weighted_kappa([], []) is None
    assert weighted_kappa([2, 2, 2], [2, 2, 2]) is None  # no disagreement to expect by chance
    assert krippendorff_alpha_ordinal([[1], [2]]) is None  # no unit graded twice
    assert krippendorff_alpha_ordinal([[0, 0], [2, 2]]) == 1.0
    with pytest.raises(ValueError, match="3 grades against 2"):
        weighted_kappa([0, 1, 2], [0, 1])


def test_the_report_pairs_reviewers_on_shared_items_and_counts_the_llm_against_the_resolved_grade():
    grades = {
        ("q1", "c1"): {"ann": 2, "bob": 2},
        ("q1", "c2"): {"ann": 0, "bob": 1, "cid": 1},
        ("q2", "c1"): {"ann": 1, "cid": 1},
        ("q2", "c2"): {"bob": 0},
    }
    llm = {("q1", "c1"): 2, ("q1", "c2"): 2, ("q2", "c2"): 0}
    resolved = {("q1", "c1"): 2, ("q1", "c2"): 1, ("q2", "c1"): 1, ("q2", "c2"): 0}
    report = agreement_report(grades, llm, resolved)
    assert report["reviewers"] == ["ann", "bob", "cid"] and (report["items"], report["verdicts"]) == (4, 8)
    by_pair = {(p["a"], p["b"]): p for p in report["pairwise"]}
    assert by_pair[("ann", "bob")]["shared"] == 2 and by_pair[("ann", "bob")]["agreement"] == 0.5
    assert by_pair[("ann", "bob")]["weighted_kappa"] == pytest.approx(
        cohen_kappa_score([2, 0], [2, 1], labels=[0, 1, 2], weights="quadratic")
    )
    assert by_pair[("ann", "cid")]["shared"] == 2 and by_pair[("bob", "cid")]["agreement"] == 1.0
    assert report["agreement"] == pytest.approx(3 / 5)  # 5 reviewer pairings on shared items, 3 of them the same
    assert report["krippendorff_alpha"] == pytest.approx(
        krippendorff.alpha(
            reliability_data=[[2, 0, 1, np.nan], [2, 1, np.nan, 0], [np.nan, 1, 1, np.nan]],
            level_of_measurement="ordinal",
            value_domain=[0, 1, 2],
        )
    )
    assert [d["chunk_id"] for d in report["disagreements"]] == ["c2"] and report["disagreements"][0]["query_id"] == "q1"
    judge = report["llm_vs_human"]
    assert judge["items"] == 3 and judge["agreement"] == pytest.approx(2 / 3)
    assert judge["confusion"] == [[1, 0, 0], [0, 0, 0], [0, 1, 1]]  # rows the LLM's grade, columns the human one
