"""Prediction-powered metric estimates (precision@k, DCG@k): with estimated labels biased on purpose and 10% of pairs
labelled by humans, drawn by the review queue's own selection, the 95% interval covers the truth and is narrower
than the human-only one."""

from __future__ import annotations

import numpy as np
import pytest

from testset_builder.metrics.ppi import PooledPair, estimate, exact
from testset_builder.stages.selection import draw, inclusion_probabilities


def population(seed: int, queries: int = 60, pool: int = 25):
    """Pools with true binary labels, a run that ranks relevant pairs higher (noisily), and an estimate of
    P(relevant) that knows something but leans towards relevant (a planted bias of +1 in log-odds)."""
    chance = np.random.default_rng(seed)
    rows = []
    for q in range(queries):
        truth = (chance.random(pool) < 0.2).astype(int)
        score = truth * 1.2 + chance.normal(size=pool)
        ranks = np.empty(pool, dtype=int)
        ranks[np.argsort(-score)] = np.arange(1, pool + 1)
        logit = 3.0 * (truth - 0.5) + chance.normal(size=pool) + 1.0
        for i in range(pool):
            rows.append((f"q{q}", int(ranks[i]), int(truth[i]), float(1 / (1 + np.exp(-logit[i])))))
    return rows


def test_on_complete_labels_the_metrics_match_their_definitions():
    rows = [("q", 1, 0), ("q", 2, 1), ("q", 3, 1), ("q", None, 1), ("r", 1, 1), ("r", 12, 1)]
    assert exact(rows, "dcg", 10) == pytest.approx((1 / np.log2(3) + 1 / np.log2(4) + 1.0) / 2)
    assert exact(rows, "precision", 2) == pytest.approx((1 / 2 + 1 / 2) / 2)
    with pytest.raises(ValueError, match="know precision, dcg"):
        exact(rows, "ndcg", 10)


@pytest.mark.parametrize("metric", ["dcg", "precision"])
def test_the_ppi_interval_covers_the_truth_and_is_narrower_than_human_labels_alone(metric):
    rows = population(seed=0)
    truth = exact([(q, rank, y) for q, rank, y, _ in rows], metric, 10)
    p = np.array([row[3] for row in rows])
    assert abs(estimate([PooledPair(q, r, pp) for q, r, _, pp in rows], metric, 10, "estimate").estimate - truth) > 0.02
    probabilities = inclusion_probabilities(p, budget=0.1 * len(rows))
    covered, widths, human_widths = 0, [], []
    for repetition in range(200):
        pairs = [
            PooledPair(q, rank, pp, float(pi), y) if d.drawn else PooledPair(q, rank, pp)
            for (q, rank, y, pp), d, pi in zip(rows, draw(probabilities, seed=repetition), probabilities)
        ]
        ppi = estimate(pairs, metric, 10, "ppi")
        human = estimate(pairs, metric, 10, "human")
        covered += ppi.low <= truth <= ppi.high
        widths.append(ppi.width)
        human_widths.append(human.width)
    assert covered / 200 >= 0.90, covered
    assert np.mean(widths) < np.mean(human_widths)
