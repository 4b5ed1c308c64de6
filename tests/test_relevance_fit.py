"""The relevance model's refit cannot do harm: it converges from a far-off prior where the old undamped Newton step
fell into a 2-cycle, fails loudly when it cannot converge, is refused when it does not beat the prior on held-out
verdicts, and scores each query by a model that never saw that query's verdicts."""

from __future__ import annotations

import numpy as np
import pytest

from testset_builder.errors import FitError
from testset_builder.labels import fitting as relevance
from testset_builder.labels.features import FEATURES
from testset_builder.labels.fitting import (
    Coefficients,
    fold_of,
    penalised_fit,
    penalties,
    roc_auc,
    sigmoid,
    stabilised,
    validated_fit,
)


def far_off_verdicts(n: int = 300, seed: int = 0):
    """Verdicts of a domain unlike the prior's: log-ranks up to 9.3 (a corpus of 11,000 chunks), relevance nearly
    separated by cosine similarity alone, and the relevant pairs at prior logits of -12 to -4."""
    chance = np.random.default_rng(seed)
    dense = chance.uniform(0.05, 0.75, n)
    x = np.column_stack(
        [
            dense,
            dense - 0.8,
            chance.uniform(0, 1, n),
            np.log1p(chance.integers(1, 11_000, n)),
            np.log1p(chance.integers(1, 11_000, n)),
            chance.uniform(0, 1, n),
            np.full(n, 0.5),
            np.ones(n),
            (dense - 0.5) / 0.1,
            chance.normal(size=n),
            chance.uniform(0, 2, n),
        ]
    )
    assert x.shape[1] == len(FEATURES)
    y = ((dense > 0.45) ^ (chance.random(n) < 0.03)).astype(float)
    queries = [f"q{i}" for i in chance.integers(0, 40, n)]
    return x, y, queries


# the SciFact-only prior this project shipped before (no weight on the three per-query features it lacked), its base
# rate four log-odds lower: far off in a domain whose verdicts follow cosine similarity alone
FAR_PRIOR = Coefficients(-8.4685, (0.4615, 9.5617, 4.2288, -0.2695, -0.3840, 1.9477, 0.0, 0.0, 0.0, 0.0, 0.0))


def undamped_newton(x, y, centre: Coefficients, strength: float = 10.0):
    """The refit this module replaced, step for step: full Newton steps, 50 of them at most, the last iterate."""
    design = np.hstack([np.ones((len(y), 1)), x])
    start = np.concatenate([[centre.bias], centre.weights])
    penalty = penalties(len(centre.weights), strength)
    theta, path = start.copy(), []
    for _ in range(50):
        p = sigmoid(design @ theta)
        gradient = design.T @ (y - p) - penalty * (theta - start)
        step = np.linalg.solve(-(design.T * (p * (1 - p))) @ design - np.diag(penalty), gradient)
        theta = theta - step
        path.append(theta[0])
        if np.max(np.abs(step)) < 1e-8:
            break
    return theta, path


def test_the_undamped_step_collapses_on_these_verdicts_and_the_refit_does_not():
    x, y, _ = far_off_verdicts()
    relevant_logits = FAR_PRIOR.logits(x)[y == 1]
    assert relevant_logits.min() < -9  # the case reported: relevant verdicts far below the prior's threshold

    theta, path = undamped_newton(x, y, FAR_PRIOR)
    assert abs(path[-1] - path[-3]) < 1e-6 and abs(path[-1] - path[-2]) > 50  # a 2-cycle of the bias
    collapsed = sigmoid(np.hstack([np.ones((len(y), 1)), x]) @ theta)
    assert roc_auc(collapsed, y) == 0.5 and collapsed.max() < 1e-6  # every pair the same P, near 0

    fitted = penalised_fit(x, y, FAR_PRIOR, penalties(len(FEATURES), 10.0))
    p = sigmoid(fitted.logits(x))
    assert roc_auc(p, y) > roc_auc(sigmoid(FAR_PRIOR.logits(x)), y)
    assert p.min() < 0.05 and p.max() > 0.95
    design = np.hstack([np.ones((len(y), 1)), x])
    start = np.concatenate([[FAR_PRIOR.bias], FAR_PRIOR.weights])
    theta = np.concatenate([[fitted.bias], fitted.weights])
    gradient = design.T @ (y - p) - penalties(len(FEATURES), 10.0) * (theta - start)
    assert np.max(np.abs(gradient)) < 1e-4  # a true stationary point of the penalised likelihood


def test_a_fit_that_does_not_converge_says_so_instead_of_returning_its_last_iterate(monkeypatch):
    x, y, _ = far_off_verdicts()
    monkeypatch.setattr(relevance, "MAX_ITERATIONS", 1)
    with pytest.raises(FitError, match="did not converge"):
        penalised_fit(x, y, FAR_PRIOR, penalties(len(FEATURES), 10.0))


def test_a_feature_that_separates_the_verdicts_exactly_still_gives_a_finite_fit():
    x, _, _ = far_off_verdicts()
    y = (x[:, 0] > 0.4).astype(float)  # perfectly separable: an unpenalised maximum would be at infinity
    fitted = penalised_fit(x, y, FAR_PRIOR, penalties(len(FEATURES), 1.0))
    assert np.all(np.isfinite(fitted.weights)) and abs(fitted.bias) < 100
    assert roc_auc(sigmoid(fitted.logits(x)), y) > 0.99


def test_a_refit_that_does_not_beat_the_prior_on_held_out_verdicts_is_refused():
    x, _, queries = far_off_verdicts()
    noise = (np.random.default_rng(5).random(len(x)) < 0.3).astype(float)  # verdicts unrelated to any feature
    good = Coefficients(-0.85, (0.0,) * len(FEATURES))  # already the right base rate: nothing left to learn
    model, validation, folds = validated_fit(x, noise, queries, good, penalties(len(FEATURES), 0.01))
    assert not validation.kept and model is good and set(folds.values()) == {good}
    assert validation.refit_log_loss >= validation.centre_log_loss and "refused" in validation.reason


def test_a_refit_that_helps_is_kept_and_reports_its_held_out_quality():
    x, y, queries = far_off_verdicts()
    model, validation, _ = validated_fit(x, y, queries, FAR_PRIOR, penalties(len(FEATURES), 10.0))
    assert validation.kept and model != FAR_PRIOR
    assert validation.refit_log_loss < validation.centre_log_loss
    assert validation.refit_auc > 0.85 and validation.refit_ece < validation.centre_ece


def test_each_fold_model_is_fitted_without_its_fold_and_scores_its_held_out_verdicts():
    x, y, queries = far_off_verdicts()
    weights = np.random.default_rng(2).uniform(1, 30, len(y))
    _, validation, folds = validated_fit(x, y, queries, FAR_PRIOR, penalties(len(FEATURES), 10.0), weights)
    fold = np.array([fold_of(q) for q in queries])
    w = stabilised(weights, len(y))
    for f, model in folds.items():
        outside = fold != f
        reference = penalised_fit(x[outside], y[outside], FAR_PRIOR, penalties(len(FEATURES), 10.0), w[outside])
        assert model.bias == pytest.approx(reference.bias) and model.weights == pytest.approx(reference.weights)
        inside = np.flatnonzero(fold == f)
        held_out = [validation.held_out[i] for i in inside]
        assert held_out == pytest.approx(sigmoid(reference.logits(x[inside])))


def test_stabilised_weights_keep_their_order_with_a_mean_of_one_and_none_above_the_cap():
    raw = np.r_[np.linspace(1.0, 3.0, 100), 10_000.0, 50_000.0]
    w = stabilised(raw, len(raw))
    assert w.mean() == pytest.approx(1.0, abs=0.05) and w.max() <= relevance.WEIGHT_CAP
    assert list(np.argsort(w, kind="stable")) == list(np.argsort(raw, kind="stable"))
    with pytest.raises(ValueError):
        stabilised(np.array([1.0, 0.0]), 2)


def test_a_query_keeps_its_fold_whatever_else_is_fitted():
    assert fold_of("q1") == fold_of("q1") and {fold_of(f"q{i}") for i in range(200)} == set(range(5))
