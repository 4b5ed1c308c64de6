"""Prediction-powered metric estimates: with estimated labels biased on purpose and 10% of pairs labelled by humans,
drawn by the review queue's own selection, the 95% interval covers the truth and is narrower than the human-only
one (precision@10, DCG@10, nDCG@10, recall@10; 200 draws each)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import require

from testset_builder.metrics.ppi import PooledPair, estimate, exact, ideal_dcg
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
    rows = [("q", 1, 0), ("q", 2, 1), ("q", 3, 1), ("q", None, 1), ("r", 1, 1), ("r", 12, 1), ("s", 1, 0)]
    dcg_q, dcg_r = 1 / np.log2(3) + 1 / np.log2(4), 1.0
    assert exact(rows, "dcg", 10) == pytest.approx((dcg_q + dcg_r + 0) / 3)
    assert exact(rows, "precision", 2) == pytest.approx((1 / 2 + 1 / 2 + 0) / 3)
    assert exact(rows, "recall", 10) == pytest.approx((2 / 3 + 1 / 2 + 0) / 3)  # s has none relevant: 0
    ideal_q, ideal_r = 1 + 1 / np.log2(3) + 1 / np.log2(4), 1 + 1 / np.log2(3)
    assert ideal_dcg(3, 10) == pytest.approx(ideal_q) and ideal_dcg(3, 2) == pytest.approx(ideal_r)
    assert exact(rows, "ndcg", 10) == pytest.approx((dcg_q / ideal_q + dcg_r / ideal_r + 0) / 3)
    with pytest.raises(ValueError, match="know precision, dcg, ndcg, recall"):
        exact(rows, "map", 10)


def test_the_ndcg_on_complete_labels_agrees_with_pytrec_eval():
    pytrec_eval = require("pytrec_eval")
    rows = population(seed=5, queries=20)
    qrels = {q: {f"d{i}": y for i, (qq, _, y, _) in enumerate(rows) if qq == q} for q in {r[0] for r in rows}}
    run = {q: {f"d{i}": 100.0 - rank for i, (qq, rank, _, _) in enumerate(rows) if qq == q} for q in qrels}
    scores = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.10"}).evaluate(run)
    for metric, name in (("ndcg", "ndcg_cut_10"), ("recall", "recall_10")):
        expected = np.mean([scores[q][name] for q in sorted(qrels)])
        assert exact([(q, rank, y) for q, rank, y, _ in rows], metric, 10) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("metric", ["dcg", "precision", "ndcg", "recall"])
def test_the_ppi_interval_covers_the_truth_and_is_narrower_than_human_labels_alone(metric):
    rows = population(seed=0)
    truth = exact([(q, rank, y) for q, rank, y, _ in rows], metric, 10)
    p = np.array([row[3] for row in rows])
    assert abs(estimate([PooledPair(q, r, pp) for q, r, _, pp in rows], metric, 10, "estimate").estimate - truth) > 0.02
    probabilities = inclusion_probabilities(p, budget=0.1 * len(rows))
    covered, human_covered, widths, human_widths, errors = 0, 0, [], [], []
    for repetition in range(200):
        pairs = [
            PooledPair(q, rank, pp, float(pi), y) if d.drawn else PooledPair(q, rank, pp)
            for (q, rank, y, pp), d, pi in zip(rows, draw(probabilities, seed=repetition), probabilities)
        ]
        ppi = estimate(pairs, metric, 10, "ppi")
        human = estimate(pairs, metric, 10, "human")
        covered += ppi.low <= truth <= ppi.high
        if human.low is not None:
            human_covered += human.low <= truth <= human.high
            human_widths.append(human.width)
        widths.append(ppi.width)
        errors.append(ppi.estimate - truth)
    assert covered / 200 >= 0.90, covered
    if metric in ("precision", "dcg"):  # design-unbiased with the recalibrated plug-in too: it is cross-fitted
        assert abs(np.mean(errors)) <= 3 * np.std(errors) / np.sqrt(len(errors)), (np.mean(errors), np.std(errors))
    if metric in ("recall", "ndcg"):  # per-query ratios of two or three labels: the human-only figure has none
        assert human_widths == []
    else:
        assert np.mean(widths) < np.mean(human_widths) and human_covered / 200 >= 0.85


def test_the_expected_ratio_equals_the_sum_over_every_labelling_of_the_pool():
    import itertools

    from testset_builder.metrics.ppi import expected_ratio

    chance = np.random.default_rng(0)
    for _ in range(20):
        n = int(chance.integers(1, 9))
        p = chance.random(n)
        p[chance.random(n) < 0.2] = chance.choice([0.0, 1.0])  # labels already known, both kinds
        c = chance.random(n) * (chance.random(n) < 0.7)  # pairs outside the run's top k weigh 0
        for metric in ("recall", "ndcg"):
            brute = 0.0
            for labels in itertools.product([0, 1], repeat=n):
                y = np.array(labels)
                if y.sum():
                    norm = y.sum() if metric == "recall" else ideal_dcg(y.sum(), 3)
                    brute += np.prod(np.where(y == 1, p, 1 - p)) * (c @ y) / norm
            assert expected_ratio(metric, 3, p, c) == pytest.approx(brute, abs=1e-10)


def test_each_labels_slope_is_what_revealing_it_moves_the_expected_figure_by():
    from testset_builder.metrics.ppi import expected_ratio, ratio_slopes

    chance = np.random.default_rng(1)
    for _ in range(40):
        n = int(chance.integers(1, 30))
        p = chance.random(n)
        p[chance.random(n) < 0.3] = chance.choice([0.0, 1.0])  # certain labels, both kinds, and the two divisions
        for metric, k in (("recall", 5), ("ndcg", 3), ("recall", 100), ("ndcg", 10)):
            c = np.array([0.0 if rank > k else (1.0 if metric == "recall" else 1 / np.log2(rank + 1))
                          for rank in chance.permutation(n) + 1])  # fmt: skip
            revealed = []
            for i in range(n):
                relevant, not_relevant = p.copy(), p.copy()
                relevant[i], not_relevant[i] = 1.0, 0.0
                revealed.append(expected_ratio(metric, k, relevant, c) - expected_ratio(metric, k, not_relevant, c))
            assert ratio_slopes(metric, k, p, c) == pytest.approx(revealed, abs=1e-10)
