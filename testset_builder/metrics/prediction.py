"""Prediction-powered figures of runs on a release that carries estimates (its ``estimates.jsonl``, see
:mod:`testset_builder.stages.release.estimated`), by :mod:`.ppi`.

Each release pair becomes a :class:`~.ppi.PooledPair`, relevant from grade 1 on (nDCG's gain is the grade, as
trec_eval's; the estimate says P(relevant), and the share of relevant pairs that are grade 2 comes from the verdicts):

- a pair the latest review round drew and a human answered: its label, drawn with the round's inclusion
  probability times the round's answer rate (the unanswered drawn pairs are taken as missing at random within the
  round; finish the round for the exact design);
- any other pair with a human label (earlier rounds' included: each round drew anew from the pairs still
  unlabelled, so the latest one is the design) or a synthetic question's source: a certain label (probability 1);
- the rest (estimated only, LLM-unverified, drawn but unanswered): the estimate alone.

A run's results outside the release's pairs count as not relevant (the pooling assumption, as trec_eval counts
unjudged chunks); each run's ``pool_coverage`` says how much of its top k that assumption covers. The figures are
the mean over the queries the release estimated or labelled; they cover precision@k, recall@k and nDCG@k (graded
gain, so on complete labels they equal the qrels figure). Precision's figure is design-unbiased; recall's and
nDCG's are model-assisted (:mod:`.ppi` says how and what was measured): each metric's ``design`` says which kind
it is. Per run, ``calibration`` compares the humans' verdicts with the estimates on the drawn pairs in its own
top k: a shared calibration can err differently for different systems (arXiv 2605.06939), and this is where it
shows.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..tables import Run
from . import ppi
from .spec import MetricSpec

CERTAIN_ORIGINS = ("human", "synthetic-source")
DESIGN = {  # how far each prediction-powered figure can be trusted
    "precision": "design-unbiased: linear in the labels, the verdicts correct the estimates exactly in expectation",
    "recall": "model-assisted: the expected recall under the recalibrated estimates, corrected verdict by verdict; "
    "unbiased for each verdict's own effect, not for interactions of unseen errors within a query; out of the "
    "relevant pairs the pool holds (trec_eval's convention): a relevant chunk no pooled retriever or run found is "
    "not counted",
    "ndcg": "model-assisted: the expected nDCG under the recalibrated estimates, corrected verdict by verdict; "
    "unbiased for each verdict's own effect, not for interactions of unseen errors within a query",
}


def covered(spec: MetricSpec) -> bool:
    """Whether prediction-powered scoring gives ``spec`` (precision, recall and nDCG, at a cutoff)."""
    return spec.k is not None and spec.name in ("precision", "recall", "ndcg")


def latest_round(rows: Sequence[dict]) -> int | None:
    """The last review round that considered any of the release's pairs: the design the figures rest on."""
    return max((row["draw"]["round"] for row in rows if row["draw"]), default=None)


def release_pairs(rows: Sequence[dict]) -> list[tuple[str, str, float, float | None, int | None]]:
    """(query, chunk, estimate, inclusion probability, label) for each row, run-independent. Only the latest round's
    draws are random: each round drew anew from the pairs still unlabelled, so the labels earlier rounds brought in
    are known for sure by the latest one (the residuals of the pairs still unlabelled then are what it corrects)."""
    latest = latest_round(rows)
    drawn = [row for row in rows if row["draw"] and row["draw"]["drawn"] and row["draw"]["round"] == latest]
    asked = len(drawn)
    answered = sum(row["origin"] == "human" for row in drawn)
    out = []
    for row in rows:
        label = int(row["label"] >= 1) if row["origin"] in CERTAIN_ORIGINS else None
        p = row["p_relevant"] if row["p_relevant"] is not None else float(label or 0)
        probability, draw = None, row["draw"]
        if label is not None and draw and draw["drawn"] and draw["round"] == latest and row["origin"] == "human":
            probability = min(1.0, draw["probability"] * answered / asked)
        elif label is not None:
            probability = 1.0  # a synthetic source, a human label nobody drew, or one an earlier round brought in
        out.append((row["query-id"], row["corpus-id"], p, probability, label))
    return out


def drawn_at_random(pairs) -> int:
    """How many labels came from a draw at random (inclusion probability below 1): what corrects the estimates."""
    return sum(label is not None and probability < 1.0 for *_, probability, label in pairs)


def _depth(specs: Sequence[MetricSpec]) -> int:
    """How deep a run must be read for the covered metrics."""
    return max((s.k for s in specs if covered(s)), default=10)


def run_ranks(run: Run, query_ids: set[str], depth: int) -> dict[tuple[str, str], int]:
    return {(q, c): rank for q, c, _, rank in run.ranked_rows() if rank <= depth and q in query_ids}


def design_probabilities(rows: Sequence[dict]) -> dict[tuple[str, str], float]:
    """The probability with which the latest review round could have drawn each pair it considered, drawn or not:
    what the intervals' expected variance weighs each pair's uncertainty by (:func:`~.ppi._expected_variance`)."""
    latest = latest_round(rows)
    return {
        (row["query-id"], row["corpus-id"]): row["draw"]["probability"]
        for row in rows
        if row["draw"] and row["draw"]["round"] == latest
    }


def grades_of(rows: Sequence[dict]) -> dict[tuple[str, str], int]:
    """The grade (0, 1 or 2) behind each label :func:`release_pairs` gives: nDCG's gain."""
    return {(row["query-id"], row["corpus-id"]): row["label"] for row in rows if row["origin"] in CERTAIN_ORIGINS}


def pooled(
    pairs, ranks: dict[tuple[str, str], int], design: dict | None = None, grades: dict | None = None
) -> list[ppi.PooledPair]:
    design, grades = design or {}, grades or {}
    return [
        ppi.PooledPair(q, ranks.get((q, c)), p, probability, label, design.get((q, c)), grades.get((q, c)))
        for q, c, p, probability, label in pairs
    ]


def _figure(interval: ppi.Interval) -> dict:
    if interval.low is None:
        return {"mean": interval.estimate}
    return {"mean": interval.estimate, "ci_low": interval.low, "ci_high": interval.high}


def applies(pairs) -> tuple[str, str]:
    """Which figure stands for the release's labels, and why."""
    estimated_only = sum(label is None for *_, label in pairs)
    drawn = drawn_at_random(pairs)
    if not estimated_only:
        return "qrels", "every pair is labelled: the qrels figure is exact and the others agree with it"
    if not drawn:
        return "estimate", (
            f"{estimated_only} pairs stand on the estimate alone and no verdict was drawn at random to correct it: "
            "run `select` and review the drawn pairs for a prediction-powered interval. The estimate knows only its "
            "features (the retrievers' scores, an LLM judge's, the pooled systems' ranks), weighed by what verdicts "
            "it saw, so it can rate low what a stronger system finds and rank that system below weaker ones"
        )
    return "ppi", (
        f"{estimated_only} pairs stand on the estimate alone; {drawn} human verdicts on pairs drawn at random "
        "correct it: the prediction-powered figure applies"
    )


def prediction_report(rows: Sequence[dict], run: Run, specs: Sequence[MetricSpec]) -> dict:
    """The prediction-powered, human-only and estimate-only figure of each covered metric for ``run``, which of them
    applies, and the run's diagnostics."""
    pairs = release_pairs(rows)
    query_ids = {q for q, *_ in pairs}
    depth = _depth(specs)
    ranks = run_ranks(run, query_ids, depth)
    members = pooled(pairs, ranks, design_probabilities(rows), grades_of(rows))
    random = drawn_at_random(pairs) > 0  # else no interval means anything
    metrics = {}
    for spec in specs:
        if covered(spec):
            figures = {use: ppi.estimate(members, spec.name, spec.k, use) for use in ("ppi", "human", "estimate")}
            metrics[str(spec)] = {
                "design": DESIGN[spec.name],
                "ppi": _figure(figures["ppi"]) if random else None,
                "human_only": _figure(figures["human"]) if random else {"mean": figures["human"].estimate},
                "estimate_only": _figure(figures["estimate"]),
            }
    which, why = applies(pairs)
    return {
        "applies": which,
        "why": why,
        "relevance": "relevant from grade 1 on; nDCG's gain is the grade (0, 1, 2)",
        "assumptions": ppi.assumptions(members) if random else None,
        "queries": len(query_ids),
        "pairs": len(pairs),
        "metrics": metrics,
        "diagnostics": diagnostics(pairs, ranks, depth),
    }


def diagnostics(pairs, ranks: dict[tuple[str, str], int], depth: int) -> dict:
    """How far the pooling assumption and the shared calibration hold for this run: the share of its top ``depth``
    the release estimated or labelled, and on the randomly drawn pairs in its top ``depth``, the share humans
    called relevant against the mean estimate."""
    known = {(q, c) for q, c, *_ in pairs}
    drawn = [
        (p, label)
        for q, c, p, probability, label in pairs
        if (q, c) in ranks and label is not None and probability < 1.0  # drawn at random, in its top k
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
    """Each other run minus the baseline, per covered metric: the paired prediction-powered difference and its 95%
    interval (the labels both figures share cancel)."""
    pairs = release_pairs(rows)
    query_ids = {q for q, *_ in pairs}
    depth = _depth(specs)
    design, grades = design_probabilities(rows), grades_of(rows)
    base = pooled(pairs, run_ranks(baseline, query_ids, depth), design, grades)
    random = drawn_at_random(pairs) > 0
    out = []
    for run in others:
        mine = pooled(pairs, run_ranks(run, query_ids, depth), design, grades)
        for spec in specs:
            if covered(spec):
                use = "ppi" if random else "estimate"
                interval = ppi.difference(mine, base, spec.name, spec.k, use)
                out.append({"run": run.name, "metric": str(spec), "use": use, **_figure(interval)})
    return out
