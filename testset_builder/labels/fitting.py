"""The relevance model: a penalised logistic regression over per-query features, fitted so that it cannot do harm.

A fit here is a maximum a posteriori estimate: the log-likelihood of the labels (weighted) plus a Gaussian pull of
the coefficients towards a centre model (the shipped prior, or a model fitted in the domain). The objective is
strictly concave, so it has one maximum even when a feature separates the labels; it is found by Newton's method
with a backtracking line search (a step is halved until the objective rises), and the fit fails loudly
(:class:`FitError`) if the gradient has not vanished after :data:`MAX_ITERATIONS`. The undamped Newton step this
replaces fell into a 2-cycle from a far-off prior (bias alternating -94.8 / +9.2) and returned the last iterate.

:func:`validated_fit` keeps a refit only when its cross-validated log-loss on the labels (folds by query, so no
query's pairs are scored by a model that saw them) beats the centre model's: a refit that would make the estimate
worse is refused and the centre stays, and the caller is told why. :func:`cross_fitted` gives each query's pairs the
model fitted without that query's labels, which is what prediction-powered inference needs: a verdict that corrects
an estimate must not have made it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .._hashing import fold_of as hashed_fold
from ..errors import FitError

MAX_ITERATIONS = 100
TOLERANCE = 1e-7  # on the largest gradient entry, relative to the total weight
WEIGHT_CAP = 10.0  # stabilised inverse-probability weights: scaled to a mean of 1, none above this
FOLDS = 5
AUC_SLACK = 0.005  # how much worse than the model before it a full refit may rank held-out verdicts (noise)


@dataclass(frozen=True)
class Coefficients:
    bias: float
    weights: tuple[float, ...]

    def logits(self, features: np.ndarray) -> np.ndarray:
        return self.bias + np.asarray(features, dtype=float) @ np.asarray(self.weights, dtype=float)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -40, 40)))


def stabilised(weights: np.ndarray | None, n: int) -> np.ndarray:
    """Inverse-probability weights scaled to a mean of 1 and capped at :data:`WEIGHT_CAP` (then scaled again): one
    verdict drawn at probability 0.01 should not outweigh a hundred others in a fit (the fit only needs to rank and
    calibrate; unbiasedness is the job of the design-weighted estimators downstream)."""
    if weights is None or n == 0:
        return np.ones(n)
    w = np.asarray(weights, dtype=float)
    if np.any(~np.isfinite(w)) or np.any(w <= 0):
        raise ValueError("fit weights must be positive and finite")
    capped = np.zeros(n, dtype=bool)
    while True:  # cap the largest, scale the rest to keep the mean at 1; a rescale may push more over the cap
        scale = (n - WEIGHT_CAP * capped.sum()) / w[~capped].sum()
        over = ~capped & (w * scale > WEIGHT_CAP)
        if not over.any():
            return np.where(capped, WEIGHT_CAP, w * scale)
        capped |= over


def _objective(design, y, w, theta, centre, penalty) -> float:
    z = design @ theta
    # log-likelihood of logistic labels, stably: y z - log(1 + e^z)
    return float(w @ (y * z - np.logaddexp(0.0, z)) - 0.5 * penalty @ (theta - centre) ** 2)


def penalised_fit(
    features: np.ndarray,
    labels: np.ndarray,
    centre: Coefficients,
    penalty: np.ndarray,
    weights: np.ndarray | None = None,
) -> Coefficients:
    """The maximum of the weighted log-likelihood minus 1/2 sum penalty_j (theta_j - centre_j)^2 (theta = bias, then
    weights), by Newton's method with backtracking; raises :class:`FitError` when it does not converge."""
    x = np.asarray(features, dtype=float)
    y = np.asarray(labels, dtype=float)
    w = np.ones(len(y)) if weights is None else np.asarray(weights, dtype=float)
    design = np.hstack([np.ones((len(y), 1)), x])
    start = np.concatenate([[centre.bias], centre.weights])
    penalty = np.asarray(penalty, dtype=float)
    if np.any(penalty <= 0):
        raise ValueError("every coefficient needs a positive penalty (it is what makes the maximum unique)")
    theta = start.copy()
    value = _objective(design, y, w, theta, start, penalty)
    scale = max(1.0, float(w.sum()))
    for _ in range(MAX_ITERATIONS):
        p = sigmoid(design @ theta)
        gradient = design.T @ (w * (y - p)) - penalty * (theta - start)
        if np.max(np.abs(gradient)) <= TOLERANCE * scale:
            return Coefficients(float(theta[0]), tuple(float(t) for t in theta[1:]))
        hessian = (design.T * (w * p * (1 - p))) @ design + np.diag(penalty)  # the negative Hessian: positive definite
        step = np.linalg.solve(hessian, gradient)
        size = 1.0
        while size > 1e-10:
            candidate = theta + size * step
            new_value = _objective(design, y, w, candidate, start, penalty)
            if new_value >= value - 1e-12 * abs(value):
                break
            size /= 2.0
        else:
            break  # no step raises the objective: at its maximum to machine precision, or something is wrong
        theta, value = candidate, new_value
    p = sigmoid(design @ theta)
    gradient = design.T @ (w * (y - p)) - penalty * (theta - start)
    if np.max(np.abs(gradient)) <= 1e3 * TOLERANCE * scale:  # stalled at the optimum by rounding
        return Coefficients(float(theta[0]), tuple(float(t) for t in theta[1:]))
    raise FitError(
        f"the relevance model's fit did not converge in {MAX_ITERATIONS} iterations (largest gradient "
        f"{np.max(np.abs(gradient)):.3g} over {len(y)} labels); the estimate keeps its previous model"
    )


def log_loss(p: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> float:
    p = np.clip(np.asarray(p, dtype=float), 1e-12, 1 - 1e-12)
    y = np.asarray(y, dtype=float)
    w = np.ones(len(y)) if w is None else np.asarray(w, dtype=float)
    return float(-(w @ (y * np.log(p) + (1 - y) * np.log(1 - p))) / w.sum())


def roc_auc(scores: Sequence[float], labels: Sequence[float]) -> float | None:
    """Mann-Whitney: P(a relevant pair scores above a non-relevant one), ties counted half; None with one class."""
    from scipy.stats import rankdata

    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if not positives or not negatives:
        return None
    ranks = rankdata(scores)
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def expected_calibration_error(p: Sequence[float], labels: Sequence[float], bins: int = 10) -> float | None:
    """Mean |share relevant - mean estimate| over ten equal-width bins of the estimate, weighted by the bins' sizes."""
    p, y = np.asarray(p, dtype=float), np.asarray(labels, dtype=float)
    if not len(p):
        return None
    which = np.minimum((p * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        inside = which == b
        if inside.any():
            total += inside.sum() * abs(y[inside].mean() - p[inside].mean())
    return float(total / len(p))


def fold_of(query_id: str, folds: int = FOLDS) -> int:
    """A query's fold, from its id alone: stable across runs and machines, so a rerun scores a pair the same way."""
    return hashed_fold(query_id, folds)


@dataclass(frozen=True)
class Validation:
    """What the cross-validation of a refit found, on the labels it was given (each scored by a model that did not
    see its query's labels): log-loss, ROC AUC and calibration error of the centre model and of the refit."""

    labels: int
    relevant: int
    folds: int
    kept: bool  # the refit replaced the centre model
    reason: str
    centre_log_loss: float | None = None
    refit_log_loss: float | None = None
    centre_auc: float | None = None
    refit_auc: float | None = None
    centre_ece: float | None = None
    refit_ece: float | None = None
    held_out: dict[int, float] = field(default_factory=dict, repr=False)  # label index -> cross-fitted P(relevant)

    def as_dict(self) -> dict:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "held_out"}
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}

    @property
    def auc(self) -> float | None:
        return self.refit_auc if self.kept else self.centre_auc

    @property
    def ece(self) -> float | None:
        return self.refit_ece if self.kept else self.centre_ece


def validated_fit(
    features: np.ndarray,
    labels: np.ndarray,
    groups: Sequence[str],
    centre: Coefficients,
    penalty: np.ndarray,
    weights: np.ndarray | None = None,
    min_labels: int = 20,
    folds: int = FOLDS,
) -> tuple[Coefficients, Validation, dict[int, Coefficients]]:
    """Refit towards ``centre`` on ``labels`` (grouped by query in ``groups``) and keep the refit only if its
    cross-validated log-loss beats the centre's. Returns the model to use, the validation, and the model of each
    fold (fitted without that fold's labels; the centre for every fold when the refit is not kept): the one that
    should score the pairs of that fold's queries."""
    x = np.asarray(features, dtype=float)
    y = np.asarray(labels, dtype=float)
    w = stabilised(weights, len(y))
    centre_only = {f: centre for f in range(folds)}
    relevant = int(y.sum())
    if len(y) < min_labels or relevant in (0, len(y)):
        why = f"{len(y)} verdicts" if len(y) < min_labels else "verdicts of one grade only"
        return centre, Validation(len(y), relevant, 0, False, f"{why}: the model stays as it was"), centre_only
    fold = np.array([fold_of(g, folds) for g in groups])
    centre_p = sigmoid(centre.logits(x))
    candidates = {"refit": penalty, "recalibration": _bias_only(penalty)}
    held: dict[str, np.ndarray] = {}
    models: dict[str, dict[int, Coefficients]] = {}
    for name, pull in candidates.items():
        held[name], models[name] = _cross_fitted(x, y, w, fold, folds, centre, pull)
    loss = {name: log_loss(p, y, w) for name, p in held.items()}
    centre_loss = log_loss(centre_p, y, w)
    centre_auc = roc_auc(centre_p, y)
    # a full refit must rank the held-out verdicts no worse than the model before it: log-loss alone rewards a refit
    # that fixes the base rate and spoils the order
    if centre_auc is not None and (roc_auc(held["refit"], y) or 0.0) < centre_auc - AUC_SLACK:
        del loss["refit"]
    best = min(loss, key=loss.get)
    kept = loss[best] < centre_loss
    refit_loss = loss[best]
    described = "refit" if best == "refit" else "recalibration (the base rate alone)"
    validation = Validation(
        labels=len(y), relevant=relevant, folds=folds, kept=kept,
        reason=(
            f"{described} kept: cross-validated log-loss {refit_loss:.3f} against {centre_loss:.3f} before it"
            if kept else
            f"refit refused: its cross-validated log-loss {refit_loss:.3f} is no better than {centre_loss:.3f} "
            "before it, so the model stays as it was"
        ),
        centre_log_loss=centre_loss, refit_log_loss=refit_loss,
        centre_auc=centre_auc, refit_auc=roc_auc(held[best], y),
        centre_ece=expected_calibration_error(centre_p, y), refit_ece=expected_calibration_error(held[best], y),
        held_out=dict(enumerate((held[best] if kept else centre_p).tolist())),
    )  # fmt: skip
    if not kept:
        return centre, validation, centre_only
    return penalised_fit(x, y, centre, candidates[best], w), validation, models[best]


def _bias_only(penalty: np.ndarray) -> np.ndarray:
    """The penalty of a recalibration: the bias as free as in the refit, the weights held at the centre's. It moves
    every log-odds by one shift, so it cannot change how the pairs rank: where a full refit would rank worse on
    held-out verdicts, the base rate alone still gets corrected."""
    out = np.full(len(penalty), 1e9)
    out[0] = penalty[0]
    return out


def _cross_fitted(x, y, w, fold, folds: int, centre: Coefficients, penalty: np.ndarray):
    """Each label's P(relevant) by the model fitted without its fold, and the fold models."""
    held_out = np.zeros(len(y))
    models: dict[int, Coefficients] = {}
    for f in range(folds):
        inside = fold == f
        train = ~inside
        if not train.any() or y[train].min() == y[train].max():  # a complement of one grade only learns nothing
            models[f] = centre
        else:
            models[f] = penalised_fit(x[train], y[train], centre, penalty, w[train])
        if inside.any():
            held_out[inside] = sigmoid(models[f].logits(x[inside]))
    return held_out, models


def penalties(count: int, strength: float, bias_share: float = 0.1) -> np.ndarray:
    """The Gaussian prior's precision per coefficient: ``strength`` on each weight, a tenth of it on the bias (a
    workspace's share of relevant pairs is its own, so the base rate moves freely)."""
    out = np.full(count + 1, float(strength))
    out[0] = strength * bias_share
    return out


def logit(p: float) -> float:
    p = min(max(p, 1e-12), 1 - 1e-12)
    return math.log(p / (1 - p))


GOOD_AUC, GOOD_ECE, FAIR_AUC = 0.85, 0.1, 0.7  # the one scale every command and the report judge the estimate by
CONSEQUENCES = {
    "good": "estimated labels carry much of the figures",
    "fair": "the verdicts' corrections matter, and intervals are wider",
    "poor": "figures rest on the verdicts, and intervals widen accordingly; review more pairs",
}


def quality(auc: float | None, ece: float | None) -> str | None:
    """The estimate's quality in one word, from its ranking (ROC AUC) and its probabilities (ECE) on verdicts it did
    not see: good (AUC >= 0.85 and ECE <= 0.1), fair (AUC >= 0.7), poor below; None when either is unknown. Every
    place that names the quality calls this, so a command and the report never disagree on the word."""
    if auc is None or ece is None:
        return None
    if auc >= GOOD_AUC and ece <= GOOD_ECE:
        return "good"
    return "fair" if auc >= FAIR_AUC else "poor"


def in_words(auc: float | None, ece: float | None, labels: int) -> str:
    """How good the estimate is on ``labels`` verdicts it did not see, for a reader: its ranking (ROC AUC) and its
    probabilities (ECE), the word :func:`quality` gives, and what follows for the intervals."""
    word = quality(auc, ece)
    if word is None:
        return f"on {labels} held-out verdicts of one grade only, the estimate's quality cannot be told yet"
    return (
        f"on {labels} verdicts it did not see, the estimate ranks a relevant pair above an irrelevant one "
        f"{auc:.0%} of the time (AUC {auc:.2f}; 0.5 is chance) and its P(relevant) is off by {ece:.2f} on average "
        f"(ECE): {word}: {CONSEQUENCES[word]}"
    )


def held_out_verdicts(rows: Sequence[dict]) -> list[tuple[float, int]]:
    """(held-out prediction, relevant) for each row of a release's ``estimates.jsonl`` a human labelled and the
    estimate scored. The prediction is the one the figures plug in: ``p_heldout`` where the release has it (the model
    fitted without the verdicts of the pair's fold of queries), else ``p_relevant``."""
    out = []
    for row in rows:
        p = row.get("p_heldout", row["p_relevant"])
        if row["origin"] == "human" and row["label"] is not None and p is not None:
            out.append((float(p), int(row["label"] >= 1)))
    return out


def release_quality(rows: Sequence[dict]) -> dict | None:
    """The estimate's held-out AUC and ECE on a release's human verdicts, its :func:`quality` and the sentence
    :func:`in_words` gives; None when no human verdict falls on an estimated pair. Every human verdict counts, drawn
    or taken for sure, as :func:`validated_fit` counts them, so `score`, the report and `estimate` read the same
    verdicts."""
    verdicts = held_out_verdicts(rows)
    if not verdicts:
        return None
    p, y = [p for p, _ in verdicts], [y for _, y in verdicts]
    auc, ece = roc_auc(p, y), expected_calibration_error(p, y)
    return {
        "verdicts": len(verdicts),
        "auc": None if auc is None else round(auc, 4),
        "ece": None if ece is None else round(ece, 4),
        "quality": quality(auc, ece),
        "in_words": in_words(auc, ece, len(verdicts)),
    }
