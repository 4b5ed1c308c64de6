"""Paired comparison of runs scored on the same qrels: differences, their intervals, and which are significant."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from ..errors import InputError
from .evaluate import Evaluation
from .stats import bootstrap_ci, holm, paired_t_test, randomization_test

Test = Literal["randomization", "t"]


@dataclass(frozen=True)
class MetricComparison:
    """One metric, one candidate against the baseline. ``p_adjusted`` is Holm-adjusted over the whole comparison."""

    metric: str
    candidate: str
    baseline_mean: float
    candidate_mean: float
    difference: float
    ci_low: float
    ci_high: float
    p_t: float
    p_randomization: float
    p_adjusted: float
    significant: bool

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Comparison:
    baseline: str
    candidates: tuple[str, ...]
    test: Test
    alpha: float
    queries: int
    rows: tuple[MetricComparison, ...]

    def as_dict(self) -> dict:
        return {
            "baseline": self.baseline,
            "candidates": list(self.candidates),
            "test": self.test,
            "alpha": self.alpha,
            "queries": self.queries,
            "correction": "holm",
            "rows": [row.as_dict() for row in self.rows],
        }


def _check_paired(baseline: Evaluation, candidate: Evaluation) -> None:
    if not np.array_equal(baseline.query_ids, candidate.query_ids):
        raise InputError(
            f"runs {baseline.run_name!r} and {candidate.run_name!r} were scored on different query sets; "
            "compare needs both scored against the same qrels"
        )


def compare(
    baseline: Evaluation,
    candidates: list[Evaluation],
    test: Test = "randomization",
    alpha: float = 0.05,
    resamples: int = 10_000,
    bootstrap_resamples: int = 1000,
    seed: int = 0,
) -> Comparison:
    """Compare each candidate with the baseline on every metric the baseline was scored on.

    Per-query values are paired by query id. Every (candidate, metric) test is one hypothesis; Holm's correction
    runs over all of them, and a difference is significant when its adjusted ``test`` p-value is below ``alpha``.
    """
    if test not in ("randomization", "t"):
        raise InputError(f"unknown test {test!r}; use 'randomization' or 't'")
    raw = []
    for candidate in candidates:
        _check_paired(baseline, candidate)
        for spec in baseline.metrics:
            name = str(spec)
            if name not in candidate.per_query:
                raise InputError(f"run {candidate.run_name!r} was not scored on {name}")
            a, b = baseline.per_query[name], candidate.per_query[name]
            diff_low, diff_high = bootstrap_ci(b - a, resamples=bootstrap_resamples, seed=seed)
            raw.append(
                dict(
                    metric=name,
                    candidate=candidate.run_name,
                    baseline_mean=float(a.mean()) if len(a) else 0.0,
                    candidate_mean=float(b.mean()) if len(b) else 0.0,
                    difference=float((b - a).mean()) if len(a) else 0.0,
                    ci_low=diff_low,
                    ci_high=diff_high,
                    p_t=paired_t_test(a, b),
                    p_randomization=randomization_test(a, b, resamples=resamples, seed=seed),
                )
            )
    adjusted = holm([row["p_randomization" if test == "randomization" else "p_t"] for row in raw])
    rows = tuple(
        MetricComparison(**row, p_adjusted=float(p), significant=bool(p < alpha)) for row, p in zip(raw, adjusted)
    )
    return Comparison(
        baseline=baseline.run_name,
        candidates=tuple(c.run_name for c in candidates),
        test=test,
        alpha=alpha,
        queries=len(baseline.query_ids),
        rows=rows,
    )
