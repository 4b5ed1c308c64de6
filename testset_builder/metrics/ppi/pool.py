"""The pooled pairs as the estimator reads them: one array per field, built once per pool and shared by every run
scored over it, with the predictions the difference estimator plugs in (:class:`Predictions`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..._hashing import fold_of
from ...labels.fitting import Coefficients, penalised_fit, sigmoid

FOLDS = 5  # folds of queries: a pair's prediction is fitted on the other folds' verdicts only
USES = ("ppi", "human", "estimate")


@dataclass(frozen=True)
class PooledPair:
    """One pooled (query, chunk) pair: its rank in a run (None when the run does not hold it), the estimate of
    P(relevant), and, for a reviewed pair, the probability the design drew it with (1 for a label known for sure:
    a take-all verdict, an earlier round's, a synthetic question's source) and its label (0 or 1) and grade."""

    query_id: str
    rank: int | None
    p: float
    probability: float | None = None
    label: int | None = None
    grade: int | None = None  # the human grade (0, 1 or 2) behind ``label``: nDCG's gain; None: the label is the gain

    @property
    def gain(self) -> int:
        """nDCG's gain: the grade (trec_eval's linear gain), else the binary label."""
        if self.grade is None:
            return int(self.label or 0)
        if self.grade > 2:
            raise ValueError(
                f"a grade of query {self.query_id} is {self.grade}: prediction-powered nDCG knows grades up to 2 "
                "(the tool's scale); map the collection's grades onto 0, 1, 2 first"
            )
        return max(0, self.grade)  # a negative grade gains nothing, as in trec_eval


@dataclass(frozen=True)
class Predictions:
    """What the estimator plugs in for each pair's label where nobody gave it: ``relevant`` is P(relevant) and
    ``high`` P(grade 2). A label's expected gain is relevant + high (grade 1 or 2)."""

    relevant: np.ndarray
    high: np.ndarray

    @property
    def gain(self) -> np.ndarray:
        return self.relevant + self.high

    @staticmethod
    def of(relevant: np.ndarray, share: np.ndarray) -> Predictions:
        """P(relevant), and P(grade 2) as each pair's share of grade 2 among its relevant ones."""
        return Predictions(relevant, relevant * share)


class Pool:
    """Every pooled pair of every query, as arrays in the pairs' order. A run's ranks come separately
    (:meth:`ranks_of`), so one pool serves every run.

    ``calibrate``: "none" plugs in the estimates as given (the textbook difference estimator); "platt" first refits
    a log-odds intercept and slope on the verdicts drawn at random in the *other* folds of queries (cross-fitted, so
    no verdict moves its own pair's prediction). Either way each total stays design-unbiased."""

    def __init__(self, pairs: Sequence[PooledPair], calibrate: str = "none"):
        if not pairs:
            raise ValueError("no pairs")
        if calibrate not in CALIBRATIONS:
            raise ValueError(f"calibrate is one of {', '.join(CALIBRATIONS)}")
        index: dict[str, int] = {}
        self.query = np.array([index.setdefault(pair.query_id, len(index)) for pair in pairs], dtype=np.int64)
        self.query_ids = list(index)
        self.p = np.clip(np.array([pair.p for pair in pairs], dtype=float), 0.0, 1.0)
        labelled = np.array([pair.label is not None for pair in pairs])
        for pair in pairs:
            if pair.label is not None and not (pair.probability and 0.0 < pair.probability <= 1.0):
                raise ValueError(f"a labelled pair of query {pair.query_id} needs its inclusion probability")
        self.probability = np.array([pair.probability if pair.label is not None else 1.0 for pair in pairs])
        self.relevant = np.array([float(pair.label or 0) >= 1 for pair in pairs], dtype=float)
        self.gain = np.array([pair.gain if pair.label is not None else 0 for pair in pairs], dtype=float)
        self.certain = labelled & (self.probability >= 1.0)
        self.sampled = labelled & (self.probability < 1.0)
        self.fold = np.array([fold_of(q, FOLDS) for q in self.query_ids], dtype=np.int64)[self.query]
        self.calibrate = calibrate
        share = grade_shares(self)[self.fold]
        self.plugged = Predictions.of(CALIBRATIONS[calibrate](self), share)
        self.raw = Predictions.of(self.p, share)

    @property
    def queries(self) -> int:
        return len(self.query_ids)

    def __len__(self) -> int:
        return len(self.p)

    def ranks_of(self, pairs: Sequence[PooledPair]) -> np.ndarray:
        """A run's rank of each pair, in the pool's order (inf where the run does not hold it)."""
        if len(pairs) != len(self):
            raise ValueError("a run's pairs must be the pool's, in the same order")
        return np.array([np.inf if pair.rank is None else float(pair.rank) for pair in pairs])

    def predictions(self, use: str) -> Predictions:
        """What ``use`` plugs in: the (calibrated) estimates, nothing (human-only), or the raw estimates."""
        if use == "human":
            zero = np.zeros(len(self))
            return Predictions(zero, zero)
        return self.raw if use == "estimate" else self.plugged


def grade_shares(pool: Pool) -> np.ndarray:
    """Per fold of queries, the share of relevant pairs that are grade 2, from the verdicts drawn at random in the
    other folds, each weighted by 1 / pi (the pool's share, not the draw's). Where those hold no relevant verdict,
    from the certain labels (fixed before the draw); 0 without any (binary gains). Any share keeps the totals
    unbiased as long as no fold's share depends on its own draw: it only decides how much of an unseen pair's
    expected gain the verdicts have to correct."""
    relevant = pool.relevant > 0
    weight = np.where(pool.sampled, 1.0 / pool.probability, 0.0) * relevant
    high = pool.gain >= 2
    fallback = _share(high[relevant & pool.certain], None)
    out = np.empty(FOLDS)
    for fold in range(FOLDS):
        others = pool.fold != fold
        out[fold] = _share(high[others], weight[others], fallback)
    return out


def _share(high: np.ndarray, weight: np.ndarray | None, fallback: float = 0.0) -> float:
    if weight is None:
        return float(high.mean()) if len(high) else fallback
    total = float(weight.sum())
    return float(weight @ high / total) if total > 0 else fallback


def _identity(pool: Pool) -> np.ndarray:
    return pool.p


LOGIT_CLIP = 1e-6  # estimates of exactly 0 or 1 are held this far inside, so their log-odds stay finite
PLATT_PSEUDO = 2.0  # verdicts' worth of pull towards the estimate as given: a few verdicts cannot flip it
PLATT_PENALTY = np.full(2, PLATT_PSEUDO * 0.25)  # on (a, b): a verdict at p = 1/2 carries information 1/4
AS_GIVEN = Coefficients(0.0, (1.0,))  # a = 0, b = 1: the estimate as given, what the penalty pulls towards
MIN_PLATT = 10  # fewer verdicts drawn at random in the other folds: the estimate is plugged in as given


def logits(p: np.ndarray) -> np.ndarray:
    p = np.clip(p, LOGIT_CLIP, 1.0 - LOGIT_CLIP)
    return np.log(p / (1.0 - p))


def _platt(pool: Pool) -> np.ndarray:
    """Each fold's estimates through sigmoid(a + b logit p), a and b fitted on the other folds' verdicts drawn at
    random (weighted by 1 / pi, pulled towards a = 0, b = 1 by :data:`PLATT_PSEUDO` verdicts' worth), by the
    relevance model's own penalised logistic fit (:func:`~testset_builder.labels.fitting.penalised_fit`)."""
    z = logits(pool.p)
    out = pool.p.copy()
    for fold in range(FOLDS):
        train = pool.sampled & (pool.fold != fold)
        mine = pool.fold == fold
        if train.sum() < MIN_PLATT or pool.relevant[train].min() == pool.relevant[train].max():
            continue
        weight = 1.0 / pool.probability[train]
        fitted = penalised_fit(
            z[train, None], pool.relevant[train], AS_GIVEN, PLATT_PENALTY, weight * (train.sum() / weight.sum())
        )
        out[mine] = sigmoid(fitted.logits(z[mine, None]))
    return out


CALIBRATIONS = {"none": _identity, "platt": _platt}
