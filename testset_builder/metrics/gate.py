"""The regression gate: fail a candidate that is significantly worse than the baseline by more than a margin.

The rule, one-sided on the paired difference ``d = candidate - baseline`` of each gated metric: the candidate fails
``metric:margin`` when the upper end of the one-sided ``1 - alpha / g`` confidence bound of mean(d) is below
``-margin`` (g: the gated (candidate, metric) pairs; Bonferroni, so the family-wise chance of failing a candidate
that is at most ``margin`` worse on every gated metric stays below alpha). That is a test of ``H0: mean(d) >= -margin``
against ``mean(d) < -margin``, at level alpha / g, by the paired percentile bootstrap, resampling clusters when the
queries are clustered. A candidate that is merely not significantly better, or worse by less than the margin,
passes; margin 0 fails any significant loss.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..errors import InputError
from .evaluate import Evaluation
from .spec import parse_metric
from .stats import resampled_means

LOST_MOST = 10


@dataclass(frozen=True)
class GateRule:
    metric: str
    margin: float


@dataclass(frozen=True)
class GateOutcome:
    metric: str
    margin: float
    candidate: str
    difference: float  # mean of candidate - baseline
    upper_bound: float  # one-sided upper confidence bound of the mean difference
    confidence: float
    failed: bool
    lost_most: list[dict]  # the queries whose values fell most: query_id, baseline, candidate, difference

    def as_dict(self) -> dict:
        return asdict(self)


def parse_gate(texts: list[str]) -> list[GateRule]:
    """``ndcg@10:0.01`` (repeatable, or comma-separated): a metric and the loss it tolerates (default 0)."""
    rules = []
    for text in (part.strip() for item in texts for part in item.split(",")):
        if not text:
            continue
        name, _, margin = text.partition(":")
        try:
            value = float(margin) if margin else 0.0
        except ValueError:
            raise InputError(f"--fail-if-worse {text!r}: the margin must be a number, e.g. ndcg@10:0.01") from None
        if not 0 <= value < 1 or value != value:
            raise InputError(f"--fail-if-worse {text!r}: the margin must be in [0, 1)")
        rules.append(GateRule(str(parse_metric(name)), value))
    return rules


def regression_gate(
    baseline: Evaluation,
    candidates: list[Evaluation],
    rules: list[GateRule],
    clusters: np.ndarray | None = None,
    alpha: float = 0.05,
    resamples: int = 10_000,
    seed: int = 0,
) -> list[GateOutcome]:
    """One outcome per (candidate, rule); see the module's docstring for the rule."""
    gated = [(candidate, rule) for candidate in candidates for rule in rules]
    if not gated:
        return []
    differences = np.column_stack([c.per_query[r.metric] - baseline.per_query[r.metric] for c, r in gated])
    confidence = 1.0 - alpha / len(gated)
    if len(differences):
        upper = np.quantile(resampled_means(differences, clusters, resamples, seed), confidence, axis=0)
    else:
        upper = np.zeros(len(gated))
    outcomes = []
    for i, (candidate, rule) in enumerate(gated):
        column = differences[:, i]
        worst = np.argsort(column, kind="stable")[:LOST_MOST]
        lost = [
            {
                "query_id": str(baseline.query_ids[j]),
                "baseline": float(baseline.per_query[rule.metric][j]),
                "candidate": float(candidate.per_query[rule.metric][j]),
                "difference": float(column[j]),
            }
            for j in worst
            if column[j] < 0
        ]
        outcomes.append(
            GateOutcome(
                metric=rule.metric,
                margin=rule.margin,
                candidate=candidate.run_name,
                difference=float(column.mean()) if len(column) else 0.0,
                upper_bound=float(upper[i]),
                confidence=confidence,
                failed=bool(upper[i] < -rule.margin),
                lost_most=lost,
            )
        )
    return outcomes
