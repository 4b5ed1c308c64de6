"""Online signals from a release's logs: figures over the failure-first labelled queries, weighted by 1 / pi,
recover what was planted in the whole log."""

from __future__ import annotations

import numpy as np

from testset_builder.labels.design import draw, weighted_inclusion_probabilities
from testset_builder.metrics.online import online_signals
from testset_builder.tables import Run


def planted_log(seed: int, queries: int = 1500):
    """A log whose live system finds the relevant chunk for 70% of queries; a miss is a retrieval failure, and a
    found chunk still gives a generation failure 20% of the time; thumbs down follow failures (80%) with noise
    (5%). Returns the truth and what a failure-first draw of about 150 would hand the reviewers."""
    rng = np.random.default_rng(seed)
    found = rng.random(queries) < 0.7
    generation = found & (rng.random(queries) < 0.2)
    failed = ~found | generation
    down = np.where(failed, rng.random(queries) < 0.8, rng.random(queries) < 0.05)
    clicked = found & ~generation & (rng.random(queries) < 0.6)
    weights = 1.0 + 4.0 * down
    pi = weighted_inclusion_probabilities(weights, 150)
    chosen = np.array([d.drawn for d in draw(pi, seed + 7919)])  # not the planting seed: its stream would match
    logs, qrels, ranked = {}, {}, {}
    for i in range(queries):
        q = f"q{i}"
        row = {"frequency": 1, "thumbs_down": int(down[i]), "cited": 1, "clicked": int(clicked[i]),
               "probability": float(pi[i]), "drawn": bool(chosen[i])}  # fmt: skip
        if chosen[i]:  # reviewers label the drawn: the relevant chunk and the failure tag
            qrels[q] = {f"c{i}": 2}
            row["failure"] = "retrieval" if not found[i] else "generation" if generation[i] else "none"
        logs[q] = row
        ranked[q] = {f"c{i}" if found[i] else f"other{i}": 1.0, f"noise{i}": 0.5}
    truth = {
        "recall": found.mean(),
        "down_retrieval": (~found & down).sum() / down.sum(),
        "generation": generation.mean(),
    }
    return truth, logs, qrels, Run.from_dict(ranked, name="production")


def test_weighted_figures_recover_the_planted_log_and_the_plain_ones_do_not():
    truth, logs, qrels, production = planted_log(seed=4)
    signals = online_signals(logs, qrels, production, k=10, resamples=400)

    recall = signals["recall"]
    assert recall["ci_low"] <= truth["recall"] <= recall["ci_high"]
    assert recall["unweighted"] < truth["recall"] - 0.1  # failure-first: the plain mean over the drawn is too low
    down = signals["thumbs_down_was_retrieval"]
    assert down["ci_low"] <= truth["down_retrieval"] <= down["ci_high"]
    generation = signals["failures"]["generation"]
    assert generation["ci_low"] <= truth["generation"] <= generation["ci_high"]
    clicks = signals["clicks_vs_labels"]
    assert clicks["clicked_not_found"] == 0  # a click here needs the relevant chunk retrieved
    assert sum(v for key, v in clicks.items() if key.startswith(("clicked_", "not_clicked_"))) == clicks["queries"]


def test_the_intervals_cover_the_planted_recall_in_most_logs():
    covered = 0
    runs = 40
    for seed in range(runs):
        truth, logs, qrels, production = planted_log(seed=100 + seed, queries=800)
        recall = online_signals(logs, qrels, production, resamples=200, seed=seed)["recall"]
        covered += recall["ci_low"] <= truth["recall"] <= recall["ci_high"]
    assert covered / runs >= 0.85, covered


def test_a_release_whose_logged_queries_were_never_drawn_says_so():
    signals = online_signals({"q1": {"frequency": 3}}, {}, None)
    assert signals["drawn"] == 0 and "select --from-logs" in signals["note"]
