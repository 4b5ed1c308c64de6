"""Online signals against offline labels, for a release that carries production logs (``meta/logs.jsonl`` and
``runs/production.trec``).

The logged queries humans labelled were drawn failure-first, each with a known probability pi, so a plain mean over
them describes the failures, not the log. Every figure here is a ratio over the drawn queries weighted by 1 / pi
(Hajek's estimator: sum(y / pi) / sum(1 / pi)), which describes the whole log without bias to first order, with a
95% percentile interval from resampling the drawn queries (seeded). Figures:

- the logged system's recall@k on the labelled queries: the plain mean over them and the estimate for the log;
- how often a thumbs-down was a retrieval failure (the reviewers' failure tag), and the split of the tags;
- clicks against labels: whether a query with a clicked citation had a relevant chunk in the production top k.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from ..tables import Qrels, Run
from .evaluate import evaluate

TAGS = ("retrieval", "generation", "none", "unanswerable")


def hajek(values: np.ndarray, weights: np.ndarray) -> float:
    return float((values * weights).sum() / weights.sum()) if weights.sum() > 0 else float("nan")


def _interval(
    statistic: Callable[[np.ndarray], float], n: int, resamples: int, seed: int
) -> tuple[float | None, float | None]:
    """Percentile interval of ``statistic(indices)`` over resampled drawn queries."""
    if n < 2:
        return None, None
    rng = np.random.default_rng(seed)
    values = np.array([statistic(rng.integers(0, n, n)) for _ in range(resamples)])
    values = values[~np.isnan(values)]
    if not len(values):
        return None, None
    low, high = np.quantile(values, [0.025, 0.975])
    return float(low), float(high)


def _share(flags: np.ndarray, weights: np.ndarray, resamples: int, seed: int) -> dict:
    """A weighted share with its interval, and the plain share, over the rows given."""
    n = len(flags)
    if n == 0:
        return {"queries": 0, "estimate": None, "ci_low": None, "ci_high": None, "unweighted": None}
    low, high = _interval(lambda i: hajek(flags[i], weights[i]), n, resamples, seed)
    return {
        "queries": n, "estimate": hajek(flags, weights), "ci_low": low, "ci_high": high,
        "unweighted": float(flags.mean()),
    }  # fmt: skip


def online_signals(
    logs: Mapping[str, dict],
    qrels: Mapping[str, Mapping[str, int]],
    production: Run | None,
    k: int = 10,
    resamples: int = 1000,
    seed: int = 0,
) -> dict:
    """See the module docstring. ``logs``: meta/logs.jsonl's rows by query id; ``qrels``: the release's labels."""
    drawn = sorted(q for q, row in logs.items() if row.get("drawn") and row.get("probability"))
    result: dict = {"logged_queries": len(logs), "drawn": len(drawn), "k": k}
    if not drawn:
        result["note"] = "no logged query of this release was drawn (`select --from-logs`): nothing to weigh"
        return result
    weight = {q: 1.0 / logs[q]["probability"] for q in drawn}

    labelled = [q for q in drawn if any(g >= 1 for g in qrels.get(q, {}).values())]
    if production is not None and labelled:
        judged = Qrels.from_dict({q: dict(qrels[q]) for q in labelled})
        recall = evaluate(judged, production, f"recall@{k}").per_query_dict()
        values = np.array([recall[q][f"recall@{k}"] for q in labelled])
        found = (values > 0).astype(float)
        weights = np.array([weight[q] for q in labelled])
        result["recall"] = {**_share(values, weights, resamples, seed), "metric": f"recall@{k}"}
        clicked = np.array([float((logs[q].get("clicked") or 0) > 0) for q in labelled])
        cited = np.array([(logs[q].get("cited") or 0) > 0 for q in labelled])
        agree = (clicked == found).astype(float)[cited]
        result["clicks_vs_labels"] = {
            **_share(agree, weights[cited], resamples, seed),
            "meaning": f"a cited answer was clicked exactly when a relevant chunk was in the production top {k}",
            "clicked_and_found": int(((clicked == 1) & (found == 1))[cited].sum()),
            "clicked_not_found": int(((clicked == 1) & (found == 0))[cited].sum()),
            "not_clicked_found": int(((clicked == 0) & (found == 1))[cited].sum()),
            "not_clicked_not_found": int(((clicked == 0) & (found == 0))[cited].sum()),
        }

    tagged = [q for q in drawn if logs[q].get("failure") in TAGS]
    if tagged:
        weights = np.array([weight[q] for q in tagged])
        result["failures"] = {
            tag: _share(np.array([float(logs[q]["failure"] == tag) for q in tagged]), weights, resamples, seed)
            for tag in TAGS
        }
        down = [i for i, q in enumerate(tagged) if (logs[q].get("thumbs_down") or 0) > 0]
        retrieval = np.array([float(logs[tagged[i]]["failure"] == "retrieval") for i in down])
        result["thumbs_down_was_retrieval"] = _share(retrieval, weights[down], resamples, seed)
    return result
