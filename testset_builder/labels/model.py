"""The relevance model: a logistic regression over a pair's features (and, after a refit, each pooled system's
columns), P(relevant) = sigmoid(bias + weights . features). :func:`refit` pulls its coefficients towards a prior's;
:func:`fit` makes a prior from scratch."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .features import FEATURES
from .fitting import Coefficients, penalised_fit, penalties, sigmoid, stabilised

MIN_VERDICTS = 20  # fewer verdicts than this keep the prior: a refit on a handful would follow their noise


# the precision of the Gaussian prior on the coefficients, centred on the prior model's: a few dozen verdicts move a
# weight a little, a few hundred a lot (benchmarks/relevance_estimate.py --strengths compares values)
REFIT_STRENGTH = 10.0


@dataclass(frozen=True)
class RelevanceModel:
    """A logistic model over :data:`FEATURES`, and after a refit the pooled systems' columns besides
    (:func:`with_systems`, named in ``systems``): P(relevant) = sigmoid(bias + weights . features)."""

    name: str
    bias: float
    weights: tuple[float, ...]
    verdicts: int = 0
    systems: tuple[str, ...] = ()  # the names of the pooled systems' columns that follow FEATURES' in ``weights``

    def p_relevant(self, features: np.ndarray) -> np.ndarray:
        """P(relevant) of each row. Rows of :data:`FEATURES` only take 0 in each system's column (the mean of a
        column's reference pairs): right for a query no system was pooled for (a synthetic question's, as
        `synthesize` asks), not for a pooled query's pair, whose columns :func:`with_systems` gives. A model without
        systems' columns (the prior) gives those of wider rows no weight."""
        x = np.atleast_2d(np.asarray(features, dtype=float))
        if x.shape[1] < len(self.weights):
            x = np.hstack([x, np.zeros((len(x), len(self.weights) - x.shape[1]))])
        elif x.shape[1] > len(self.weights):
            if self.systems:
                raise ValueError(f"rows of {x.shape[1]} columns for a model of {len(self.weights)}")
            x = x[:, : len(self.weights)]
        return sigmoid(self.bias + x @ np.asarray(self.weights))

    def as_dict(self) -> dict:
        names = FEATURES + tuple(f"{RUN_COLUMN}{system}" for system in self.systems)
        return {
            "name": self.name,
            "verdicts": self.verdicts,
            "bias": self.bias,
            "weights": dict(zip(names, self.weights)),
        }


RUN_COLUMN = "system:"  # how a pooled system's own column is named among a model's weights


def refit(
    features: np.ndarray,
    labels: np.ndarray,
    prior: RelevanceModel,
    strength: float = REFIT_STRENGTH,
    weights: np.ndarray | None = None,
) -> RelevanceModel:
    """Refit on verdicts (``labels``: 1 relevant, 0 not), coefficients pulled towards ``prior`` with precision
    ``strength`` (maximum a posteriori, :func:`~.relevance.penalised_fit`: a line-searched Newton method that fails
    loudly rather than return a diverged iterate); the prior itself when there are too few verdicts or only one
    class of them. ``weights`` (1 / inclusion probability, for verdicts drawn by
    :mod:`~testset_builder.stages.selection`) make the likelihood that of the whole pool, not of the pairs the
    draw favoured; they are stabilised (:func:`~.relevance.stabilised`). This is the fit alone: the workspace
    keeps it only where it beats the prior on held-out verdicts (:func:`~.relevance.validated_fit`)."""
    x = np.asarray(features, dtype=float)
    y = np.asarray(labels, dtype=float)
    if len(y) < MIN_VERDICTS or y.min() == y.max():
        return prior
    fitted = penalised_fit(
        x, y, Coefficients(prior.bias, prior.weights), penalties(len(FEATURES), strength), stabilised(weights, len(y))
    )
    return RelevanceModel(f"refit:{prior.name}", fitted.bias, fitted.weights, len(y))


def fit(features: np.ndarray, labels: np.ndarray, name: str, l2: float = 1e-3) -> RelevanceModel:
    """A fresh fit with a weak ridge (what made :data:`PRIOR`), the bias as free as the weights."""
    start = Coefficients(0.0, (0.0,) * len(FEATURES))
    fitted = penalised_fit(features, labels, start, penalties(len(FEATURES), l2, 1e-3))
    return RelevanceModel(name, fitted.bias, fitted.weights, 0)
