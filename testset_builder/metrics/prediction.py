"""Prediction-powered figures of runs on a release that carries estimates (its ``estimates.jsonl``, see
:mod:`testset_builder.stages.release.estimated`), by :mod:`.ppi`. ``guides/statistics.md`` states the method.

Each release pair becomes a :class:`~.ppi.PooledPair`, relevant from grade 1 on (nDCG's gain is the grade):

- a pair the latest review round drew at random (its sample stratum) and a human answered: its label, drawn with
  the round's inclusion probability times the stratum's answer rate (the unanswered drawn pairs are taken as
  missing at random within the stratum; finish the round for the exact design);
- a pair the round took for sure (its take-all stratum) and a human answered: a certain label, when every take-all
  pair was answered; else drawn with the stratum's answer rate, as above;
- a pair the latest round considered and did not draw: the estimate alone, even if a reviewer labelled it since
  (the round's draw already corrects the estimate over every pair it considered);
- any other pair with a human label (earlier rounds' included: each round drew anew from the pairs still
  unlabelled, so the latest one is the design) or a synthetic question's source: a certain label;
- the rest (estimated only, LLM-unverified, drawn but unanswered): the estimate alone.

Where every pair is labelled, every label is certain and the figure is exact.

The prediction plugged in is ``p_heldout`` where the release has it (the refit that did not see the pair's fold of
queries, so no verdict moves its own pair's prediction), else ``p_relevant``. A run's results outside the release's
pairs count as not relevant (the pooling assumption, as trec_eval counts unjudged chunks); each run's
``pool_coverage`` says how much of its top k that assumption covers.

One figure applies per metric (:func:`applies`): exact on complete labels, prediction-powered where some labels are
estimated and verdicts were drawn at random, the estimate's alone (no interval) where none were. The others are
kept under ``details``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..tables import Run
from . import ppi
from .spec import MetricSpec

CERTAIN_ORIGINS = ("human", "synthetic-source")
TAKE_ALL = "take-all"
DESIGN = {  # what each prediction-powered figure rests on
    "precision": "design-unbiased: a total of labels, estimated by the difference estimator",
    "recall": "design-unbiased totals in a ratio (delta method): hits over the relevant pairs the pool holds "
    "(trec_eval's convention: a relevant chunk no pooled retriever or run found is not counted)",
    "ndcg": "design-unbiased totals in a ratio (delta method): DCG over the ideal DCG of the estimated counts of "
    "grade-2 and relevant pairs",
}
KINDS = {"ppi": "prediction-powered", "qrels": "exact", "estimate": "estimate-only"}


def covered(spec: MetricSpec) -> bool:
    """Whether prediction-powered scoring gives ``spec`` (precision, recall and nDCG, at a cutoff)."""
    return spec.k is not None and spec.name in ("precision", "recall", "ndcg")


def latest_round(rows: Sequence[dict]) -> int | None:
    """The last review round that considered any of the release's pairs: the design the figures rest on."""
    return max((row["draw"]["round"] for row in rows if row["draw"]), default=None)


def stratum_of(row: dict) -> str:
    """The stratum of a row's draw: ``take-all`` or ``sample`` (a release written before strata: every draw
    sampled)."""
    return row["draw"].get("stratum") or "sample"


def answer_rates(rows: Sequence[dict]) -> dict[str, float]:
    """Per stratum of the latest round, the share of its drawn pairs a human answered."""
    latest = latest_round(rows)
    asked: dict[str, int] = {}
    answered: dict[str, int] = {}
    for row in rows:
        draw = row["draw"]
        if draw and draw["drawn"] and draw["round"] == latest:
            stratum = stratum_of(row)
            asked[stratum] = asked.get(stratum, 0) + 1
            answered[stratum] = answered.get(stratum, 0) + (row["origin"] == "human")
    return {stratum: answered[stratum] / asked[stratum] for stratum in asked}


def release_pairs(rows: Sequence[dict]) -> list[tuple[str, str, float, float | None, int | None]]:
    """(query, chunk, prediction, inclusion probability, grade) for each row, run-independent (see the module).

    Two rules keep the totals unbiased. Where every pair is labelled, every label is certain: there is nothing to
    estimate. Otherwise a label on a pair the latest round considered and did not draw is left out (the pair counts
    as estimated): the round's drawn verdicts already correct the estimate over every pair it considered, so
    taking that label as certain too would correct the pair twice (reviewers may answer a queued pair the round did
    not draw). Such a label still ships in the qrels."""
    latest = latest_round(rows)
    rates = answer_rates(rows)
    complete = all(row["origin"] in CERTAIN_ORIGINS for row in rows)
    out = []
    for row in rows:
        grade = row["label"] if row["origin"] in CERTAIN_ORIGINS else None
        p = row.get("p_heldout", row["p_relevant"])
        p = p if p is not None else float((grade or 0) >= 1)
        probability, draw = None, row["draw"]
        in_round = bool(draw) and draw["round"] == latest
        if grade is not None and complete:
            probability = 1.0
        elif grade is not None and in_round and draw["drawn"] and row["origin"] == "human":
            probability = min(1.0, draw["probability"] * rates[stratum_of(row)])
        elif grade is not None and in_round and row["origin"] == "human":
            grade = None  # considered, not drawn: the round's draw stands for it
        elif grade is not None:
            probability = 1.0  # a synthetic source, or a label from before the round or outside its population
        out.append((row["query-id"], row["corpus-id"], p, probability, grade))
    return out


def drawn_at_random(pairs) -> int:
    """How many labels came from a draw at random (inclusion probability below 1): what corrects the estimates."""
    return sum(grade is not None and probability < 1.0 for *_, probability, grade in pairs)


def covered_depth(specs: Sequence[MetricSpec]) -> int:
    """How deep a run must be read for the covered metrics."""
    return max((s.k for s in specs if covered(s)), default=10)


def run_ranks(run: Run, query_ids: set[str], depth: int) -> dict[tuple[str, str], int]:
    return {(q, c): rank for q, c, _, rank in run.ranked_rows() if rank <= depth and q in query_ids}


def pooled(pairs, ranks: dict[tuple[str, str], int]) -> list[ppi.PooledPair]:
    """The release's pairs with one run's ranks."""
    return [
        ppi.PooledPair(q, ranks.get((q, c)), p, probability, None if grade is None else int(grade >= 1), grade)
        for q, c, p, probability, grade in pairs
    ]


def rank_array(pairs, ranks: dict[tuple[str, str], int]) -> np.ndarray:
    return np.array([ranks.get((q, c), np.inf) for q, c, *_ in pairs], dtype=float)


def _figure(interval: ppi.Interval) -> dict:
    if interval.low is None:
        return {"mean": interval.estimate}
    return {"mean": interval.estimate, "ci_low": interval.low, "ci_high": interval.high}


def applies(pairs) -> tuple[str, str]:
    """Which figure stands for the release's labels, and why."""
    estimated_only = sum(grade is None for *_, grade in pairs)
    drawn = drawn_at_random(pairs)
    if not estimated_only:
        return "qrels", "every pair is labelled: the figure is exact"
    if not drawn:
        return "estimate", (
            f"{estimated_only} pairs stand on the estimate alone and no verdict was drawn at random to correct it: "
            "run `select` and review the drawn pairs for a prediction-powered interval. The estimate knows only its "
            "features, so it can rate low what a stronger system finds and rank that system below weaker ones"
        )
    return "ppi", (
        f"{estimated_only} pairs stand on the estimate alone; {drawn} human verdicts on pairs drawn at random "
        "correct it"
    )


class ReleasePool:
    """A release's pairs as the estimator reads them, built once and shared by every run scored on it."""

    def __init__(self, rows: Sequence[dict]):
        self.pairs = release_pairs(rows)
        self.query_ids = {q for q, *_ in self.pairs}
        self.applies, self.why = applies(self.pairs)
        self.random = drawn_at_random(self.pairs) > 0
        self.pool = ppi.Pool(pooled(self.pairs, {}), ppi.CALIBRATION)

    def figures(self, ranks: np.ndarray, spec: MetricSpec) -> dict[str, ppi.Figure]:
        return {use: ppi.figure(self.pool, ranks, spec.name, spec.k, use) for use in ppi.USES}

    def halving(self, figure: ppi.Figure) -> int | None:
        """About how many more verdicts drawn at random would halve the interval's width: the variance falls
        roughly as one over the verdicts, so three times as many again."""
        drawn = int(self.pool.sampled.sum())
        return 3 * drawn if drawn and figure.variance() > 0 else None


def prediction_report(rows: Sequence[dict], run: Run, specs: Sequence[MetricSpec], pool: ReleasePool | None = None):
    """The figure that applies to each covered metric for ``run``, with its interval, the others under
    ``details``, which applies and why, and the run's diagnostics."""
    pool = pool or ReleasePool(rows)
    depth = covered_depth(specs)
    ranks = run_ranks(run, pool.query_ids, depth)
    positions = rank_array(pool.pairs, ranks)
    metrics = {}
    for spec in specs:
        if not covered(spec):
            continue
        figures = pool.figures(positions, spec)
        intervals = {use: ppi.of(f, spec.name) for use, f in figures.items()}
        details = {
            "ppi": _figure(intervals["ppi"]) if pool.random else None,
            "human_only": _figure(intervals["human"]) if pool.random else {"mean": intervals["human"].estimate},
            "estimate_only": {"mean": intervals["estimate"].estimate},
        }
        chosen = intervals["estimate"] if pool.applies == "estimate" else intervals["ppi"]
        metrics[str(spec)] = {
            "figure": {**_figure(chosen), "kind": KINDS[pool.applies]},
            "design": DESIGN[spec.name],
            "more_verdicts_to_halve": pool.halving(figures["ppi"]) if pool.applies == "ppi" else None,
            "details": details,
        }
    return {
        "applies": pool.applies,
        "why": pool.why,
        "relevance": "relevant from grade 1 on; nDCG's gain is the grade (0, 1, 2)",
        "grade_2_share": _grade_share(pool) if pool.random else None,
        "queries": len(pool.query_ids),
        "pairs": len(pool.pairs),
        "metrics": metrics,
        "diagnostics": diagnostics(pool.pairs, ranks, depth),
    }


def _grade_share(pool: ReleasePool) -> float:
    """The share of relevant pairs that are grade 2 the predictions assume, averaged over the folds of queries."""
    return round(float(np.mean(ppi.grade_shares(pool.pool))), 4)


def diagnostics(pairs, ranks: dict[tuple[str, str], int], depth: int) -> dict:
    """How far the pooling assumption and the estimate hold for this run: the share of its top ``depth`` the release
    estimated or labelled, and on the randomly drawn pairs in its top ``depth``, the share humans called relevant
    against the mean estimate."""
    known = {(q, c) for q, c, *_ in pairs}
    drawn = [
        (p, int(grade >= 1))
        for q, c, p, probability, grade in pairs
        if (q, c) in ranks and grade is not None and probability < 1.0
    ]
    return {
        f"pool_coverage@{depth}": round(sum(pair in known for pair in ranks) / len(ranks), 4) if ranks else None,
        "calibration": {
            f"drawn_in_top_{depth}": len(drawn),
            "human_relevant_share": round(sum(label for _, label in drawn) / len(drawn), 4) if drawn else None,
            "mean_estimate": round(sum(p for p, _ in drawn) / len(drawn), 4) if drawn else None,
        },
    }


def prediction_differences(rows: Sequence[dict], baseline: Run, others: Sequence[Run], specs) -> list[dict]:
    """Each other run minus the baseline, per covered metric: the paired difference of the figures that apply, and
    its 95% interval (the verdicts both figures share cancel)."""
    pool = ReleasePool(rows)
    depth = covered_depth(specs)
    base = rank_array(pool.pairs, run_ranks(baseline, pool.query_ids, depth))
    use = "estimate" if pool.applies == "estimate" else "ppi"
    out = []
    for run in others:
        mine = rank_array(pool.pairs, run_ranks(run, pool.query_ids, depth))
        for spec in specs:
            if covered(spec):
                a = ppi.figure(pool.pool, mine, spec.name, spec.k, use)
                b = ppi.figure(pool.pool, base, spec.name, spec.k, use)
                interval = ppi.paired(a, b, spec.name)
                out.append({"run": run.name, "metric": str(spec), "use": use, **_figure(interval)})
    return out
