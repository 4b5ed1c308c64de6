"""Score a run against qrels: per-query values for each metric, their means, and how the queries matched."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..tables import Qrels, Run
from . import kernels
from .matrix import GradeMatrix, MatchSummary, build_grade_matrix
from .spec import MetricSpec, parse_metrics

_KERNELS: dict[str, Callable[[GradeMatrix, int | None], np.ndarray]] = {
    "recall": kernels.recall,
    "precision": kernels.precision,
    "mrr": kernels.reciprocal_rank,
    "ndcg": lambda m, k: kernels.ndcg(m, k, gain="linear"),
    "ndcg_exp": lambda m, k: kernels.ndcg(m, k, gain="exponential"),
    "hit_rate": kernels.hit_rate,
    "map": kernels.average_precision,
    "r_precision": lambda m, k: kernels.r_precision(m),
    "complete": kernels.complete,
}


@dataclass(frozen=True)
class Evaluation:
    """Per-query scores of one run. ``per_query[name][i]`` belongs to ``query_ids[i]``."""

    run_name: str
    metrics: tuple[MetricSpec, ...]
    query_ids: np.ndarray
    per_query: dict[str, np.ndarray]
    summary: MatchSummary

    def mean(self, metric: str | MetricSpec) -> float:
        values = self.per_query[str(metric)]
        return float(values.mean()) if len(values) else 0.0

    def means(self) -> dict[str, float]:
        return {str(spec): self.mean(spec) for spec in self.metrics}

    def per_query_dict(self) -> dict[str, dict[str, float]]:
        """``{query_id: {metric: value}}``, the shape pytrec_eval returns."""
        names = [str(spec) for spec in self.metrics]
        return {
            query_id: {name: float(self.per_query[name][i]) for name in names}
            for i, query_id in enumerate(self.query_ids)
        }


def required_depth(metrics: list[MetricSpec]) -> int | None:
    """Ranks the grade matrix must keep: the largest cutoff, or all of them if a metric has none."""
    if any(spec.k is None for spec in metrics):
        return None
    return max(spec.k for spec in metrics)


def evaluate(
    qrels: Qrels, run: Run, metrics: str | list[str] | list[MetricSpec], relevance_level: int = 1
) -> Evaluation:
    """Score ``run`` against ``qrels`` on ``metrics`` (``"ndcg@10,recall@100"`` or parsed specs).

    The mean of each metric is over every query of the qrels: queries the run missed score 0, run queries the
    qrels lack are dropped (``evaluation.summary`` counts both). ``relevance_level``: the grade the binary metrics
    count as relevant (trec_eval's ``-l``; nDCG's gains are the grades whatever it is).
    """
    specs = (
        metrics
        if metrics and isinstance(metrics, list) and isinstance(metrics[0], MetricSpec)
        else parse_metrics(metrics)
    )
    matrix = build_grade_matrix(qrels, run, depth=required_depth(specs), relevance_level=relevance_level)
    return score_matrix(matrix, specs, run_name=run.name)


def score_matrix(matrix: GradeMatrix, specs: list[MetricSpec], run_name: str = "run") -> Evaluation:
    per_query = {str(spec): _KERNELS[spec.name](matrix, spec.k) for spec in specs}
    return Evaluation(
        run_name=run_name,
        metrics=tuple(specs),
        query_ids=matrix.query_ids,
        per_query=per_query,
        summary=matrix.summary,
    )
