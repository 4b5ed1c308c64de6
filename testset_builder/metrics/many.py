"""Many runs at once: recall@k curves (k = 1..100), the smallest k reaching a target recall, and each run's
significance against the best run of each metric.

The course's rule of thumb for a first-stage retriever: recall@10 >= 0.9 and recall@20 >= 0.95, so the default
targets are 0.9 and 0.95, and the question per run is how deep it must go to reach them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..tables import Qrels, Run
from .evaluate import Evaluation, required_depth, score_matrix
from .matrix import GradeMatrix, build_grade_matrix
from .spec import MetricSpec
from .stats import holm, randomization_tests

CURVE_DEPTH = 100
DEFAULT_TARGETS = (0.9, 0.95)
RANDOMIZATION = "paired randomization test"


def evaluate_with_curve(
    qrels: Qrels, run: Run, specs: list[MetricSpec], max_k: int = CURVE_DEPTH, relevance_level: int = 1
) -> tuple[Evaluation, np.ndarray]:
    """Score ``run`` on ``specs`` and its mean recall@k for k = 1..max_k, from one grade matrix."""
    depth = required_depth(specs)
    matrix = build_grade_matrix(
        qrels, run, depth=None if depth is None else max(depth, max_k), relevance_level=relevance_level
    )
    return score_matrix(matrix, specs, run_name=run.name), recall_curve(matrix, max_k)


def recall_curve(matrix: GradeMatrix, max_k: int = CURVE_DEPTH) -> np.ndarray:
    """Mean recall@k over the evaluated queries for k = 1..max_k (trec_eval's ``recall.k``, a query without a
    relevant chunk counting 0): one weighted sum of the relevant-so-far counts, ``sum_i cum[i, k] / (R_i n)``."""
    n = len(matrix.query_ids)
    curve = np.zeros(max_k)
    width = min(matrix.depth, max_k)
    if n == 0 or width == 0:
        return curve
    weights = np.zeros(n)
    np.divide(1.0 / n, matrix.num_relevant, out=weights, where=matrix.num_relevant > 0)
    curve[:width] = weights @ matrix.relevant_cumsum[:, :width]
    curve[width:] = curve[width - 1]  # nothing retrieved below the deepest rank: recall stays where it was
    return curve


def smallest_k(curve: np.ndarray, target: float) -> int | None:
    """The first k whose mean recall@k reaches ``target`` (None: not within the curve's depth)."""
    reached = np.flatnonzero(curve >= target - 1e-12)
    return int(reached[0]) + 1 if len(reached) else None


def against_best(
    evaluations: list[Evaluation],
    clusters: np.ndarray | None = None,
    alpha: float = 0.05,
    resamples: int = 10_000,
    seed: int = 0,
) -> dict[str, dict]:
    """Per metric: the best run (highest mean; the first listed on a tie) and every other run's paired difference
    from it with its randomization-test p-value (cluster sign flips under ``clusters``), Holm-adjusted over the
    other runs of that metric; ``significant`` when the adjusted p is below ``alpha``. One set of sign flips
    serves every test."""
    metrics = [str(spec) for spec in evaluations[0].metrics]
    best = {name: max(evaluations, key=lambda e: e.mean(name)) for name in metrics}
    pairs = [(name, e) for name in metrics for e in evaluations if e is not best[name]]
    if not pairs:
        return {name: {"best": best[name].run_name, "test": RANDOMIZATION, "runs": {}} for name in metrics}
    differences = np.column_stack([e.per_query[name] - best[name].per_query[name] for name, e in pairs])
    p = randomization_tests(differences, clusters, resamples=resamples, seed=seed)
    result = {name: {"best": best[name].run_name, "test": RANDOMIZATION, "runs": {}} for name in metrics}
    for name in metrics:
        columns = [i for i, (metric, _) in enumerate(pairs) if metric == name]
        adjusted = holm(p[columns])
        for i, p_holm in zip(columns, adjusted):
            run = pairs[i][1]
            result[name]["runs"][run.run_name] = {
                "difference": float(differences[:, i].mean()) if len(differences) else 0.0,
                "p_randomization": float(p[i]),
                "p_adjusted": float(p_holm),
                "significant": bool(p_holm < alpha),
            }
    return result


def named_apart(runs: Sequence[Run], paths: Sequence[Path | None]) -> list[Run]:
    """The runs with names told apart: runs sharing a tag are called by their files' names (then their paths), and
    what still clashes by its place (``name-1``, ``name-2``); ``paths[i]`` is the file run ``i`` was read from
    (None for a run made in memory)."""
    made = list(runs)
    for name_of in (lambda r, p: p.stem if p else r.name, lambda r, p: str(p) if p else r.name):
        if len({r.name for r in made}) < len(made):
            made = [replace(r, name=name_of(r, p)) for r, p in zip(made, paths)]
    if len({r.name for r in made}) < len(made):
        made = [replace(r, name=f"{r.name}-{n + 1}") for n, r in enumerate(made)]
    return made
