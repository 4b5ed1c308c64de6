"""Paired comparison of runs scored on the same qrels: differences, their intervals, and which are significant."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

import numpy as np

from ..errors import InputError
from .evaluate import Evaluation
from .power import SetSize, set_size
from .stats import bootstrap_intervals, design_effects, holm, paired_t_tests, randomization_tests

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
    design_effect: float = 1.0  # variance of the mean difference under the clustering / under independence

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
    set_sizes: tuple[SetSize, ...] = ()  # one per row: what the set can detect on that (run, metric) pair

    def as_dict(self) -> dict:
        return {
            "baseline": self.baseline,
            "candidates": list(self.candidates),
            "test": self.test,
            "alpha": self.alpha,
            "queries": self.queries,
            "correction": "holm",
            "rows": [row.as_dict() for row in self.rows],
            "set_size": [size.as_dict() | {"candidate": row.candidate} for size, row in zip(self.set_sizes, self.rows)],
        }


def _check_paired(baseline: Evaluation, candidate: Evaluation) -> None:
    if not np.array_equal(baseline.query_ids, candidate.query_ids):
        raise InputError(
            f"runs {baseline.run_name!r} and {candidate.run_name!r} were scored on different query sets; "
            "compare needs both scored against the same qrels"
        )


def paired_differences(baseline: Evaluation, candidates: list[Evaluation]) -> tuple[list[tuple[str, str]], np.ndarray]:
    """Every (candidate, metric) pair and the matrix of its per-query differences (queries x pairs), candidate minus
    baseline, paired by query id."""
    pairs, columns = [], []
    for candidate in candidates:
        _check_paired(baseline, candidate)
        for spec in baseline.metrics:
            name = str(spec)
            if name not in candidate.per_query:
                raise InputError(f"run {candidate.run_name!r} was not scored on {name}")
            pairs.append((candidate.run_name, name))
            columns.append(candidate.per_query[name] - baseline.per_query[name])
    return pairs, np.column_stack(columns) if columns else np.zeros((len(baseline.query_ids), 0))


def compare(
    baseline: Evaluation,
    candidates: list[Evaluation],
    test: Test = "randomization",
    alpha: float = 0.05,
    resamples: int = 10_000,
    bootstrap_resamples: int = 1000,
    seed: int = 0,
    clusters: np.ndarray | None = None,
    detect: float | None = None,
) -> Comparison:
    """Compare each candidate with the baseline on every metric the baseline was scored on.

    Per-query values are paired by query id. Every (candidate, metric) test is one hypothesis; Holm's correction
    runs over all of them, and a difference is significant when its adjusted ``test`` p-value is below ``alpha``.
    With ``clusters`` (a code per query), the bootstrap resamples clusters, the randomization test flips the sign
    of each cluster's summed difference, and the t-test uses the cluster-robust variance; each row carries the
    design effect of its difference, and ``set_sizes`` what the set can detect (``detect``: queries needed).
    """
    if test not in ("randomization", "t"):
        raise InputError(f"unknown test {test!r}; use 'randomization' or 't'")
    pairs, differences = paired_differences(baseline, candidates)
    low, high = bootstrap_intervals(differences, clusters, resamples=bootstrap_resamples, seed=seed)
    p_t = paired_t_tests(differences, clusters)
    p_randomization = randomization_tests(differences, clusters, resamples=resamples, seed=seed)
    effects = design_effects(differences, clusters)
    adjusted = holm(p_randomization if test == "randomization" else p_t)
    by_name = {candidate.run_name: candidate for candidate in candidates}
    rows, sizes = [], []
    for i, (candidate, name) in enumerate(pairs):
        a, b = baseline.per_query[name], by_name[candidate].per_query[name]
        rows.append(
            MetricComparison(
                metric=name,
                candidate=candidate,
                baseline_mean=float(a.mean()) if len(a) else 0.0,
                candidate_mean=float(b.mean()) if len(b) else 0.0,
                difference=float(differences[:, i].mean()) if len(a) else 0.0,
                ci_low=float(low[i]),
                ci_high=float(high[i]),
                p_t=float(p_t[i]),
                p_randomization=float(p_randomization[i]),
                p_adjusted=float(adjusted[i]),
                significant=bool(adjusted[i] < alpha),
                design_effect=float(effects[i]),
            )
        )
        sizes.append(set_size(name, differences[:, i], clusters, alpha=alpha, detect=detect))
    return Comparison(
        baseline=baseline.run_name,
        candidates=tuple(c.run_name for c in candidates),
        test=test,
        alpha=alpha,
        queries=len(baseline.query_ids),
        rows=tuple(rows),
        set_sizes=tuple(sizes),
    )
