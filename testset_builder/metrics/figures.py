"""One figure per metric for a run scored on a release that carries estimates: the one that applies.

:func:`~.prediction.prediction_report` says which applies to the release's labels. Where labels are partly
estimated and verdicts were drawn at random, precision@k, recall@k and nDCG@k are prediction-powered; where nothing
was drawn they are the estimate's alone, with no interval; where every pair is labelled they are the labelled pairs'
exact figures. The metrics the estimator does not cover (MRR, MAP, hit rate, R-precision) come from the labelled
pairs and say so. The other figures stay under ``details``.

The best run of a prediction-powered metric is the one with the highest figure, and each other run is tested
against it by the paired prediction-powered difference: the verdicts both figures rest on cancel in its variance.
Its p-value is the normal one (the estimator is asymptotically normal), Holm-corrected over the other runs of the
metric, as :func:`~.many.against_best` corrects its randomization tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..tables import Run
from . import ppi
from .prediction import KINDS, ReleasePool, covered, covered_depth, rank_array, run_ranks
from .spec import MetricSpec
from .stats import holm

LABELLED_ONLY = "labelled pairs only"
EXACT = KINDS["qrels"]
PAIRED_TEST = "paired prediction-powered difference, normal p-value"
NO_TEST = "none: the estimate alone has no interval to test with"


def one_figure(report: dict, predicted: dict) -> dict:
    """``report`` (a run's :func:`~.report.score_dicts` entry) with each metric's figure the one that applies,
    marked by ``kind``; the labelled pairs' figures and the estimator's others move under ``details``, and what
    the release's labels are (which figure applies, why, the run's diagnostics) under ``estimates``."""
    labelled = report["metrics"]
    metrics = {}
    for name, entry in labelled.items():
        figures = predicted["metrics"].get(name)
        if predicted["applies"] == "qrels":
            metrics[name] = {**entry, "kind": EXACT}
        elif figures is None:
            metrics[name] = {**entry, "kind": LABELLED_ONLY}
        else:
            metrics[name] = {**figures["figure"], "more_verdicts_to_halve": figures["more_verdicts_to_halve"]}
    details = {
        "labelled_pairs": labelled,
        "estimator": {
            name: {"design": figures["design"], **figures["details"]} for name, figures in predicted["metrics"].items()
        },
    }
    estimates = {key: value for key, value in predicted.items() if key != "metrics"}
    return {**report, "metrics": metrics, "estimates": estimates, "details": details}


def runs_ranks(pool: ReleasePool, runs: Sequence[Run], k: int) -> list[np.ndarray]:
    return [rank_array(pool.pairs, run_ranks(run, pool.query_ids, k)) for run in runs]


def against_best_by_figure(
    pool: ReleasePool, runs: Sequence[Run], reports: Sequence[dict], specs: Sequence[MetricSpec], alpha: float
) -> dict[str, dict]:
    """Per covered metric: the best run by the figure that applies (the first listed on a tie) and each other run's
    paired difference from it, as :func:`~.many.against_best` gives them for the labelled pairs."""
    use = "estimate" if pool.applies == "estimate" else "ppi"
    ranks = runs_ranks(
        pool, runs, covered_depth(specs)
    )  # read once at the deepest cutoff: each metric cuts at its own k
    result = {}
    for spec in specs:
        if not covered(spec):
            continue
        name = str(spec)
        means = [report["metrics"][name]["mean"] for report in reports]
        best = int(np.argmax(means))
        figures = [ppi.figure(pool.pool, r, spec.name, spec.k, use) for r in ranks]
        others = [i for i in range(len(runs)) if i != best]
        intervals = [ppi.paired(figures[i], figures[best], spec.name) for i in others]
        p = [normal_p(interval) for interval in intervals]
        adjusted = holm(p) if use == "ppi" else [1.0] * len(p)
        entry = {"best": runs[best].name, "test": PAIRED_TEST if use == "ppi" else NO_TEST, "runs": {}}
        for i, interval, p_one, p_holm in zip(others, intervals, p, adjusted):
            entry["runs"][runs[i].name] = {
                "difference": interval.estimate,
                "ci_low": interval.low,
                "ci_high": interval.high,
                "p_normal": p_one,
                "p_adjusted": float(p_holm),
                "significant": bool(use == "ppi" and p_holm < alpha),
            }
        result[name] = entry
    return result


def normal_p(interval: ppi.Interval) -> float:
    """Two-sided p-value of a difference of zero, from its standard error; 1 without one, or when it is 0: the
    estimated variance is 0 when no drawn verdict falls where the runs differ, which is no evidence either way."""
    if interval.std_error is None or interval.std_error == 0:
        return 1.0
    return math.erfc(abs(interval.estimate) / interval.std_error / math.sqrt(2))
