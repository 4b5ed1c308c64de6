"""Prediction-powered nDCG with graded labels (0, 1, 2; the gain is the grade, as trec_eval's ``ndcg_cut``): the
expected figure is exact against every grading of a small pool, complete labels agree with pytrec_eval, binary
labels give what they gave before, and the interval covers graded truth where the estimate is miscalibrated."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import require

from testset_builder.metrics.ppi import PooledPair, estimate, exact, expected_ratio, grade_share, graded_values
from testset_builder.stages.selection import draw, inclusion_probabilities


def brute_ndcg(k: int, p, c, fixed, share: float) -> float:
    """E[nDCG@k] by summing over every grading of the uncertain pairs (grade 0, 1 or 2 with chances 1 - p,
    p (1 - share), p share), the certain pairs' (discount, grade) added as they are."""
    discounts = 1.0 / np.log2(np.arange(k) + 2)
    total = 0.0
    for grades in itertools.product([0, 1, 2], repeat=len(p)):
        chance = np.prod([(1 - q, q * (1 - share), q * share)[g] for q, g in zip(p, grades)])
        gains = [*grades, *(g for _, g in fixed)]
        weights = [*c, *(w for w, _ in fixed)]
        ideal = sum(g * d for g, d in zip(sorted(gains, reverse=True), discounts))
        if ideal > 0:
            total += chance * sum(w * g for w, g in zip(weights, gains)) / ideal
    return total


def test_the_graded_expectation_and_each_revealed_grade_equal_the_sum_over_every_grading():
    chance = np.random.default_rng(3)
    for _ in range(30):
        n = int(chance.integers(0, 7))
        k = int(chance.choice([1, 2, 3, 10]))
        p = chance.random(n)
        p[chance.random(n) < 0.15] = chance.choice([0.02, 0.98])  # both divisions of the count's distribution
        c = np.array([0.0 if rank > k else 1 / np.log2(rank + 1) for rank in chance.permutation(n + 3)[:n] + 1])
        fixed = [(float(chance.random() * (chance.random() < 0.6)), int(chance.integers(0, 3)))
                 for _ in range(int(chance.integers(0, 3)))]  # fmt: skip
        share = float(chance.choice([0.0, 0.3, 0.8, 1.0]))
        base, values = graded_values(k, p, c, fixed, share)
        assert base == pytest.approx(brute_ndcg(k, p, c, fixed, share), abs=1e-10)
        for j in range(n):
            others = np.delete(p, j)
            for grade in (0, 1, 2):
                known = brute_ndcg(k, others, np.delete(c, j), [*fixed, (float(c[j]), grade)], share)
                assert values[j, grade] == pytest.approx(known, abs=1e-10)
            chances = np.array([1 - p[j], p[j] * (1 - share), p[j] * share])
            assert chances @ values[j] == pytest.approx(base, abs=1e-10)


def test_with_no_grade_two_the_graded_expectation_is_the_binary_one():
    chance = np.random.default_rng(4)
    for _ in range(20):
        n = int(chance.integers(1, 40))
        p = chance.random(n)
        c = np.array([0.0 if rank > 10 else 1 / np.log2(rank + 1) for rank in chance.permutation(n) + 1])
        base, _ = graded_values(10, p, c, [], 0.0)
        assert base == pytest.approx(expected_ratio("ndcg", 10, p, c), abs=1e-12)


def graded_population(seed: int, queries: int = 40, pool: int = 20):
    """Pools with true grades (a fifth relevant, 40% of those highly), a run that ranks relevant pairs higher
    whatever their grade (noisily), and an estimate of P(relevant) leaning towards relevant by +1 in log-odds that
    knows nothing of grades."""
    chance = np.random.default_rng(seed)
    rows = []
    for q in range(queries):
        relevant = chance.random(pool) < 0.2
        grades = np.where(relevant, np.where(chance.random(pool) < 0.4, 2, 1), 0)
        score = relevant * 1.5 + chance.normal(size=pool)
        ranks = np.empty(pool, dtype=int)
        ranks[np.argsort(-score)] = np.arange(1, pool + 1)
        logit = 3.0 * (relevant - 0.5) + chance.normal(size=pool) + 1.0
        for i in range(pool):
            rows.append((f"q{q}", int(ranks[i]), int(grades[i]), float(1 / (1 + np.exp(-logit[i])))))
    return rows


def test_graded_ndcg_on_complete_labels_agrees_with_pytrec_eval():
    pytrec_eval = require("pytrec_eval")
    rows = graded_population(seed=5, queries=20)
    qrels = {q: {f"d{i}": g for i, (qq, _, g, _) in enumerate(rows) if qq == q} for q in {r[0] for r in rows}}
    run = {q: {f"d{i}": 100.0 - rank for i, (qq, rank, _, _) in enumerate(rows) if qq == q} for q in qrels}
    for k in (3, 10):
        scores = pytrec_eval.RelevanceEvaluator(qrels, {f"ndcg_cut.{k}"}).evaluate(run)
        expected = np.mean([scores[q][f"ndcg_cut_{k}"] for q in sorted(qrels)])
        assert exact([(q, rank, g) for q, rank, g, _ in rows], "ndcg", k) == pytest.approx(expected, abs=1e-12)
    # the human-only figure on every pair labelled for sure is that same figure
    pairs = [PooledPair(q, rank, p, 1.0, int(g >= 1), grade=g) for q, rank, g, p in rows]
    labelled = estimate(pairs, "ndcg", 10, "human").estimate
    scores = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    assert labelled == pytest.approx(np.mean([scores[q]["ndcg_cut_10"] for q in sorted(qrels)]), abs=1e-12)


def test_the_grade_share_is_the_pools_share_weighted_by_the_draw():
    pairs = [PooledPair("q", 1, 0.5, 0.5, 1, grade=2), PooledPair("q", 2, 0.5, 0.1, 1, grade=1),
             PooledPair("q", 3, 0.5, 0.1, 0, grade=0), PooledPair("q", 4, 0.9, 1.0, 1, grade=2)]  # fmt: skip
    # the drawn relevant verdicts weigh 1 / pi: 2 (grade 2) against 10 (grade 1); the certain label is not drawn
    assert grade_share(pairs, [0, 1, 2, 3]) == pytest.approx(2 / 12)
    assert grade_share(pairs[3:], [0]) == 0.0  # a certain 2 (a synthetic source, say) is no sample of the pool
    assert grade_share([PooledPair("q", 1, 0.5)], []) == 0.0
    with pytest.raises(ValueError, match="grades up to 2"):
        exact([("q", 1, 3)], "ndcg", 10)
    assert exact([("q", 1, 3)], "precision", 1) == 1.0  # only nDCG reads the grade beyond relevant or not


@pytest.mark.slow
def test_the_graded_ppi_interval_covers_the_graded_truth_where_binary_gains_would_miss_it():
    rows = graded_population(seed=0, queries=60, pool=25)
    truth = exact([(q, rank, g) for q, rank, g, _ in rows], "ndcg", 10)
    binary_truth = exact([(q, rank, int(g >= 1)) for q, rank, g, _ in rows], "ndcg", 10)
    assert abs(truth - binary_truth) > 0.03  # the run ranks grade 1 as high as grade 2: the grades matter
    p = np.array([row[3] for row in rows])
    plain = estimate([PooledPair(q, r, pp) for q, r, _, pp in rows], "ndcg", 10, "estimate").estimate
    assert abs(plain - truth) > 0.02
    probabilities = inclusion_probabilities(p, budget=0.25 * len(rows))
    found = {"graded": [], "binary": []}
    for repetition in range(60):
        drawn = draw(probabilities, seed=repetition)
        for reading, found_here in found.items():
            pairs = [
                PooledPair(q, rank, pp, float(pi), int(g >= 1), float(pi), grade=g if reading == "graded" else None)
                if d.drawn
                else PooledPair(q, rank, pp, inclusion=float(pi))
                for (q, rank, g, pp), d, pi in zip(rows, drawn, probabilities)
            ]
            ppi = estimate(pairs, "ndcg", 10, "ppi")
            found_here.append((ppi.low <= truth <= ppi.high, ppi.estimate - truth))
    covered, errors = np.array(found["graded"]).T
    assert covered.mean() >= 0.90 and abs(errors.mean()) < 0.015, (covered.mean(), errors.mean())
    covered, errors = np.array(found["binary"]).T  # the same draws with grades read as relevant or not
    assert covered.mean() < 0.90 and errors.mean() > 0.025, (covered.mean(), errors.mean())


def test_a_fully_labelled_releases_ndcg_is_the_qrels_ndcg_with_its_grades():
    pytrec_eval = require("pytrec_eval")
    from testset_builder.metrics.prediction import prediction_report
    from testset_builder.metrics.spec import parse_metrics
    from testset_builder.tables import Run

    rows_in = graded_population(seed=7, queries=12)
    rows = [
        {"query-id": q, "corpus-id": f"d{i}", "p_relevant": p, "label": g, "origin": "human", "draw": None}
        for i, (q, _, g, p) in enumerate(rows_in)
    ]
    run = Run.from_dict(
        {q: {f"d{i}": 100.0 - rank for i, (qq, rank, _, _) in enumerate(rows_in) if qq == q} for q, *_ in rows_in},
        "run",
    )
    report = prediction_report(rows, run, parse_metrics("ndcg@10"))
    assert report["applies"] == "qrels"
    qrels = {q: {r["corpus-id"]: r["label"] for r in rows if r["query-id"] == q} for q in {r["query-id"] for r in rows}}
    scores = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run.to_dict())
    expected = np.mean([scores[q]["ndcg_cut_10"] for q in sorted(qrels)])
    assert report["metrics"]["ndcg@10"]["human_only"]["mean"] == pytest.approx(expected, abs=1e-12)
