"""Prediction-powered figures: on complete labels they are trec_eval's metrics; each total they rest on is unbiased
under the review's Poisson draw whatever the estimate says (checked over every possible draw of a small pool); and
their 95% intervals cover the truth in at least 90% of simulated reviews, also where the estimate is anti-calibrated
or barely better than chance and queries differ in how many relevant and grade-2 pairs they hold."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import require

from testset_builder.labels.design import draw, inclusion_probabilities
from testset_builder.metrics.ppi import Pool, PooledPair, difference, estimate, exact, figure, ideal_dcg, of
from testset_builder.metrics.ppi.totals import total


def population(seed: int, queries: int = 60, pool: int = 40, estimate_kind: str = "biased"):
    """(query, rank, grade, p) rows: each query has its own share of relevant pairs (2% to 50%) and its own share of
    grade 2 among them (0 to 0.9); a run that ranks relevant pairs higher, noisily; an estimate of P(relevant) that
    is ``biased`` (knows something, leans towards relevant by +1 in log-odds), ``weak`` (ROC AUC about 0.6) or
    ``anti`` (anti-calibrated: higher where the pair is not relevant)."""
    chance = np.random.default_rng(seed)
    rows = []
    for q in range(queries):
        rate, high = chance.uniform(0.02, 0.5), chance.uniform(0.0, 0.9)
        relevant = chance.random(pool) < rate
        grade = np.where(relevant, 1 + (chance.random(pool) < high), 0)
        score = grade * 0.9 + chance.normal(size=pool)
        ranks = np.empty(pool, dtype=int)
        ranks[np.argsort(-score)] = np.arange(1, pool + 1)
        signal = {"biased": 3.0, "weak": 0.5, "anti": -2.0}[estimate_kind]
        logit = signal * (relevant - 0.5) + chance.normal(size=pool) + (1.0 if estimate_kind == "biased" else -1.0)
        p = 1 / (1 + np.exp(-logit))
        rows += [(f"q{q}", int(ranks[i]), int(grade[i]), float(p[i])) for i in range(pool)]
    return rows


def reviewed(rows, drawn, probabilities) -> list[PooledPair]:
    return [
        PooledPair(q, rank, p, float(pi), int(g >= 1), g) if d.drawn else PooledPair(q, rank, p)
        for (q, rank, g, p), d, pi in zip(rows, drawn, probabilities)
    ]


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
    with pytest.raises(ValueError, match="grades up to 2"):
        exact([("q", 1, 3)], "ndcg", 10)


@pytest.mark.parametrize("k", [3, 10])
def test_graded_ndcg_recall_and_precision_on_complete_labels_agree_with_pytrec_eval(k):
    pytrec_eval = require("pytrec_eval")
    rows = population(seed=5, queries=20)
    qrels = {q: {f"d{i}": g for i, (qq, _, g, _) in enumerate(rows) if qq == q} for q in {r[0] for r in rows}}
    run = {q: {f"d{i}": 100.0 - rank for i, (qq, rank, _, _) in enumerate(rows) if qq == q} for q in qrels}
    names = {"ndcg": f"ndcg_cut_{k}", "recall": f"recall_{k}", "precision": f"P_{k}"}
    measures = {f"ndcg_cut.{k}", f"recall.{k}", f"P.{k}"}
    scores = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    for metric, name in names.items():
        expected = np.mean([scores[q][name] for q in sorted(qrels)])
        assert exact([(q, rank, g) for q, rank, g, _ in rows], metric, k) == pytest.approx(expected, abs=1e-12)


def test_every_total_is_unbiased_over_every_possible_draw_whatever_the_prediction():
    """The difference estimator's expectation over all 2^n Poisson draws equals the true total, exactly, for an
    adversarial prediction (high where the pair is not relevant) and uneven inclusion probabilities."""
    grades = np.array([2, 0, 1, 0, 0, 2, 1, 0])
    predicted = np.array([0.1, 0.9, 0.2, 0.8, 0.7, 0.05, 0.3, 0.95])  # anti-calibrated
    pi = np.array([0.9, 0.1, 0.3, 0.5, 0.2, 0.6, 0.4, 0.25])
    discount = 1 / np.log2(np.arange(len(grades)) + 2)
    truth = float(discount @ grades)
    expected = 0.0
    for drawn in itertools.product((0, 1), repeat=len(grades)):
        drawn = np.array(drawn, dtype=bool)
        chance = float(np.prod(np.where(drawn, pi, 1 - pi)))
        pairs = [
            PooledPair("q", i + 1, predicted[i], float(pi[i]), int(grades[i] >= 1), int(grades[i]))
            if drawn[i]
            else PooledPair("q", i + 1, predicted[i])
            for i in range(len(grades))
        ]
        pool = Pool(pairs)
        gain = pool.predictions("ppi").gain
        expected += chance * float(total(pool, discount, pool.gain, gain, True).per_query[0])
    assert expected == pytest.approx(truth, abs=1e-12)


@pytest.mark.parametrize("kind", ["biased", "weak", "anti"])
def test_intervals_cover_the_truth_in_at_least_90_percent_of_reviews_whatever_the_estimate(kind):
    rows = population(seed=1, queries=40, pool=100, estimate_kind=kind)
    p = np.array([row[3] for row in rows])
    probabilities = inclusion_probabilities(p, budget=0.15 * len(rows))
    metrics = (("ndcg", 10), ("recall", 20), ("precision", 10))
    truth = {m: exact([(q, r, g) for q, r, g, _ in rows], m, k) for m, k in metrics}
    hits = {m: [] for m, _ in metrics}
    errors = {m: [] for m, _ in metrics}
    widths = {m: [] for m, _ in metrics}
    for seed in range(80):
        pairs = reviewed(rows, draw(probabilities, seed), probabilities)
        pool = Pool(pairs)
        ranks = pool.ranks_of(pairs)
        for m, k in metrics:
            interval = of(figure(pool, ranks, m, k, "ppi"), m)
            hits[m].append(interval.low <= truth[m] <= interval.high)
            errors[m].append(interval.estimate - truth[m])
            widths[m].append(interval.width)
    for m, _ in metrics:
        coverage, bias, width = np.mean(hits[m]), np.mean(errors[m]), np.mean(widths[m])
        assert coverage >= 0.90, f"{kind} estimate: {m} covered in {coverage:.2f} of reviews (bias {bias:+.4f})"
        if kind != "anti":  # an anti-calibrated estimate's ratios read low, and their intervals say how unsure
            # a ratio of noisy totals is not exactly unbiased; its bias stays well inside the stated uncertainty
            assert abs(bias) < width / 4, f"{kind} estimate: {m} reads {bias:+.4f} off, intervals {width:.3f} wide"


def test_a_good_estimate_narrows_the_interval_well_below_the_human_only_one():
    rows = population(seed=2, estimate_kind="biased")
    p = np.array([row[3] for row in rows])
    probabilities = inclusion_probabilities(p, budget=0.15 * len(rows))
    ratios = []
    for seed in range(20):
        pairs = reviewed(rows, draw(probabilities, seed), probabilities)
        ppi, human = estimate(pairs, "precision", 10, "ppi"), estimate(pairs, "precision", 10, "human")
        ratios.append(ppi.width / human.width)
    assert np.median(ratios) < 0.7, f"median width ratio {np.median(ratios):.2f}"


def test_certain_labels_give_the_exact_figure_with_no_width():
    rows = population(seed=3, queries=10)
    pairs = [PooledPair(q, r, p, 1.0, int(g >= 1), g) for q, r, g, p in rows]
    for metric in ("ndcg", "recall", "precision"):
        interval = estimate(pairs, metric, 10)
        assert interval.estimate == pytest.approx(exact([(q, r, g) for q, r, g, _ in rows], metric, 10))
        assert interval.width == pytest.approx(0.0)


def test_no_estimated_count_falls_below_the_relevant_pairs_a_human_confirmed_and_no_figure_leaves_its_range():
    # the estimate says nothing is relevant; one drawn verdict says a deep pair is, with a large weight
    pairs = [PooledPair("q", 1, 0.0, 1.0, 1, 1)] + [PooledPair("q", r, 0.0) for r in range(2, 30)]
    pairs.append(PooledPair("q", 40, 0.0, 0.05, 1, 1))
    for metric in ("ndcg", "recall", "precision"):
        interval = estimate(pairs, metric, 10)
        assert 0.0 <= interval.low <= interval.estimate <= interval.high <= 1.0
    # the count is 1 + 20 (1 / 0.05), so recall@10 of the top pair is 1 / 21
    assert estimate(pairs, "recall", 10).estimate == pytest.approx(1 / 21)
    # a not-relevant verdict on a pair the estimate was sure of pulls the count below 0: it stays at what is verified
    pairs = [PooledPair("q", 1, 1.0, 1.0, 1, 1), PooledPair("q", 2, 0.9, 0.1, 0, 0), PooledPair("q", 3, 0.1)]
    assert estimate(pairs, "recall", 1).estimate == pytest.approx(1.0)


def test_a_paired_difference_is_narrower_than_its_two_figures_and_covers_the_true_difference():
    rows = population(seed=4)
    shuffled = np.random.default_rng(0)
    other = [(q, r + int(shuffled.integers(0, 3)), g, p) for q, r, g, p in rows]  # a slightly noisier run
    truth = exact([(q, r, g) for q, r, g, _ in rows], "ndcg", 10) - exact(
        [(q, r, g) for q, r, g, _ in other], "ndcg", 10
    )
    p = np.array([row[3] for row in rows])
    probabilities = inclusion_probabilities(p, budget=0.15 * len(rows))
    covered, narrower = [], []
    for seed in range(60):
        drawn = draw(probabilities, seed)
        a, b = reviewed(rows, drawn, probabilities), reviewed(other, drawn, probabilities)
        diff = difference(a, b, "ndcg", 10)
        covered.append(diff.low <= truth <= diff.high)
        narrower.append(diff.width < estimate(a, "ndcg", 10).width)
    assert np.mean(covered) >= 0.9, f"the paired difference covered in {np.mean(covered):.2f} of reviews"
    assert np.mean(narrower) >= 0.6, f"narrower than one run's own interval in {np.mean(narrower):.2f} of reviews"
    with pytest.raises(ValueError, match="same pooled pairs"):
        difference(a, b[:-1], "ndcg", 10)


def test_the_cross_fitted_calibration_never_moves_a_pairs_own_prediction_with_its_own_verdict():
    rows = population(seed=5, queries=30)
    p = np.array([row[3] for row in rows])
    probabilities = inclusion_probabilities(p, budget=0.3 * len(rows))
    pairs = reviewed(rows, draw(probabilities, 0), probabilities)
    i = next(j for j, pair in enumerate(pairs) if pair.label is not None)
    flipped = list(pairs)
    flipped[i] = PooledPair(pairs[i].query_id, pairs[i].rank, pairs[i].p, pairs[i].probability, 1 - pairs[i].label)
    before = Pool(pairs, "platt").plugged.relevant
    after = Pool(flipped, "platt").plugged.relevant
    assert not np.allclose(before, Pool(pairs).plugged.relevant)  # the calibration did move the predictions
    same_query = np.array([pair.query_id == pairs[i].query_id for pair in pairs])
    assert np.allclose(before[same_query], after[same_query])


def test_a_fully_labelled_releases_figure_is_the_qrels_ndcg_with_its_grades_and_says_it_is_exact():
    pytrec_eval = require("pytrec_eval")
    from testset_builder.metrics.prediction import prediction_report
    from testset_builder.metrics.spec import parse_metrics
    from testset_builder.tables import Run

    rows_in = population(seed=7, queries=12)
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
    figure_ = report["metrics"]["ndcg@10"]["figure"]
    assert figure_["kind"] == "exact" and figure_["mean"] == pytest.approx(expected, abs=1e-12)


def _rows(labels, p, pi, drawn, answered):
    """estimates.jsonl rows of one query: the latest round considered every pair."""
    return [
        {
            "query-id": "q", "corpus-id": f"c{i}", "p_relevant": p, "model": "m",
            "label": labels[i] if answered[i] else None, "origin": "human" if answered[i] else None,
            "draw": {"round": 1, "probability": pi, "drawn": bool(drawn[i]), "stratum": "sample"},
        }
        for i in range(len(labels))
    ]  # fmt: skip


def test_a_label_on_a_pair_the_round_considered_and_did_not_draw_does_not_bias_the_figure():
    """Reviewers may answer a queued pair the latest round did not draw; counting that label as certain would
    correct the pair twice (the round's drawn verdicts already stand for it). Averaged over many draws the figure
    stays on the truth when every relevant pair is answered whether drawn or not."""
    from testset_builder.metrics.prediction import ReleasePool, rank_array

    labels = [1] * 5 + [0] * 15
    truth = 5 / 20
    figures = []
    chance = np.random.default_rng(0)
    for _ in range(4000):
        drawn = chance.random(20) < 0.3
        answered = drawn | (np.array(labels) == 1)  # the relevant ones get answered anyway
        pool = ReleasePool(_rows(labels, 0.2, 0.3, drawn, answered))
        ranks = rank_array(pool.pairs, {("q", f"c{i}"): i + 1 for i in range(20)})
        figures.append(figure(pool.pool, ranks, "precision", 20).point)
    assert np.mean(figures) == pytest.approx(truth, abs=0.01)


def test_a_release_whose_every_pair_is_labelled_gives_the_exact_figure_even_where_labels_were_drawn():
    from testset_builder.metrics.prediction import ReleasePool, rank_array

    labels = [1, 1, 1, 1]
    pool = ReleasePool(_rows(labels, 0.1, 0.5, [True, True, False, False], [True] * 4))
    assert pool.applies == "qrels"
    ranks = rank_array(pool.pairs, {("q", f"c{i}"): i + 1 for i in range(4)})
    result = of(figure(pool.pool, ranks, "precision", 4), "precision")
    assert result.estimate == pytest.approx(1.0) and result.width == pytest.approx(0.0)


def test_a_strong_runs_ndcg_is_unbiased_where_each_querys_ideal_is_known_its_overshoots_kept():
    """With k grade-2 pairs confirmed, a query's ideal DCG is known, so its nDCG is linear in the estimated DCG and
    exactly unbiased over every possible draw. Clipping a query's value at 1 would drop the draws that overshoot
    and read a strong run low."""
    k = 3
    grades = np.array([2, 2, 2, 1, 0, 2, 0, 1])
    predicted = np.array([1.0, 1.0, 1.0, 0.1, 0.9, 0.05, 0.8, 0.2])  # anti-calibrated on the uncertain pairs
    pi = np.array([1.0, 1.0, 1.0, 0.3, 0.2, 0.4, 0.25, 0.5])
    ranks = [2, 3, 6, 1, 4, 5, 7, 8]  # a strong run: the truth is close to 1
    truth = exact([("q", r, int(g)) for r, g in zip(ranks, grades)], "ndcg", k)
    expected, overshoots = 0.0, 0
    for drawn in itertools.product((0, 1), repeat=5):
        drawn = np.array((1, 1, 1, *drawn), dtype=bool)
        chance = float(np.prod(np.where(drawn, pi, 1 - pi)))
        pairs = [
            PooledPair("q", ranks[i], predicted[i], float(pi[i]), int(grades[i] >= 1), int(grades[i]))
            if drawn[i]
            else PooledPair("q", ranks[i], predicted[i])
            for i in range(len(grades))
        ]
        pool = Pool(pairs)
        value = float(figure(pool, pool.ranks_of(pairs), "ndcg", k).per_query[0])
        overshoots += value > 1.0
        expected += chance * value
    assert overshoots > 0, "no draw overshoots: the check would not tell a clip apart"
    assert expected == pytest.approx(truth, abs=1e-12)


def test_beales_ratio_removes_most_of_the_bias_a_ratio_of_noisy_totals_has():
    """Beale's estimator against simulated totals whose variance and covariance are known: its mean is nearer the
    ratio of the means than the plain ratio's mean, and with a known denominator it is the plain ratio."""
    from testset_builder.metrics.ppi.ratios import beale

    chance = np.random.default_rng(0)
    mean = np.array([3.0, 4.0])
    cov = np.array([[1.0, 0.6], [0.6, 1.2]])
    x, y = chance.multivariate_normal(mean, cov, size=200_000).T
    kept = y > 0.5  # a denominator near 0 has no ratio to speak of
    x, y = x[kept], y[kept]
    target = mean[0] / mean[1]
    plain = float(np.mean(x / y))
    corrected = float(np.mean(beale(x, y, np.full(len(y), cov[1, 1]), np.full(len(y), cov[0, 1]))))
    assert abs(corrected - target) < abs(plain - target) / 3, (plain, corrected, target)
    assert beale(np.array([2.0]), np.array([5.0]), np.array([0.0]), np.array([0.0]))[0] == pytest.approx(0.4)
