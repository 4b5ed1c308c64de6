"""Selection for review: likely relevant pairs drawn more often, every pair possible, and estimates from the drawn pairs
unbiased when weighted by their known probabilities."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testset_builder.stages.selection import (
    draw,
    horvitz_thompson_mean,
    inclusion_probabilities,
    weighted_inclusion_probabilities,
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=300),
    st.floats(0.05, 1.0),
    st.floats(0.01, 1.0),
)
def test_probabilities_sum_to_the_budget_and_none_is_zero(p, fraction, uniform_share):
    budget = max(1.0, fraction * len(p))
    pi = inclusion_probabilities(p, budget, uniform_share)
    assert pi.sum() == pytest.approx(min(budget, len(p)), rel=1e-6)
    assert (pi > 0).all() and (pi <= 1).all()


def test_the_likelier_a_pair_is_relevant_the_likelier_it_is_drawn_in_proportion_beyond_the_even_slice():
    p = np.array([0.01, 0.2, 0.5, 0.8, 0.99] * 40)
    pi = inclusion_probabilities(p, budget=40, uniform_share=0.2)
    by_p = {value: pi[p == value][0] for value in (0.01, 0.2, 0.5, 0.8, 0.99)}
    assert by_p[0.99] > by_p[0.8] > by_p[0.5] > by_p[0.2] > by_p[0.01]
    floor = 0.2 * 40 / len(p)  # the uniform slice is every pair's floor
    assert by_p[0.01] >= floor - 1e-12
    assert (by_p[0.8] - floor) == pytest.approx(4 * (by_p[0.2] - floor))
    assert inclusion_probabilities(p, budget=len(p)).tolist() == [1.0] * len(p)


def test_a_draw_is_seeded_and_draws_about_the_budget():
    pi = inclusion_probabilities(np.linspace(0, 1, 2000), budget=200)
    first, again = draw(pi, seed=7), draw(pi, seed=7)
    assert first == again
    counts = [sum(d.drawn for d in draw(pi, seed)) for seed in range(50)]
    assert np.mean(counts) == pytest.approx(200, abs=3 * np.sqrt(200) / np.sqrt(50) + 1)


def test_weighted_by_their_probabilities_the_drawn_pairs_estimate_the_share_relevant_without_bias():
    chance = np.random.default_rng(0)
    n = 3000
    truth = chance.random(n) < 0.1  # one pair in ten relevant
    p = np.clip(np.where(truth, 0.6, 0.15) + chance.normal(0, 0.1, n), 0.01, 0.99)  # an estimate that leans right
    pi = inclusion_probabilities(p, budget=150, uniform_share=0.2)
    weighted, naive = [], []
    for seed in range(400):
        drawn = [d for d in draw(pi, seed) if d.drawn]
        index = np.array([d.index for d in drawn])
        weighted.append(horvitz_thompson_mean(truth[index], pi[index], n))
        naive.append(truth[index].mean())
    error = np.std(weighted) / np.sqrt(len(weighted))
    assert abs(np.mean(weighted) - truth.mean()) < 3 * error  # unbiased
    assert np.mean(naive) - truth.mean() > 10 * error  # the unweighted share of the drawn pairs is not


def test_a_selection_round_draws_with_recorded_probabilities_and_puts_the_drawn_first(pair_queue, capsys):
    import json

    from testset_builder.cli import main
    from testset_builder.stages import review
    from testset_builder.store import draws as stored
    from testset_builder.store import estimates
    from testset_builder.store import review as review_store

    ws, items = pair_queue, pair_queue.items
    assert main(["select", "--budget", "10", "--workspace", str(ws.root), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    recorded = stored.draws(ws.db)
    assert first["round"] == 1 and first["considered"] == len(items) == len(recorded)
    assert sum(d.probability for d in recorded.values()) == pytest.approx(10)
    stored_estimates = estimates.estimates(ws.db)
    p = np.array([stored_estimates[(i.query_id, i.chunk_id)].p_relevant for i in items])
    log_ranks = np.array([stored_estimates[(i.query_id, i.chunk_id)].features[3:5] for i in items])  # bm25, dense
    best = np.expm1(log_ranks.min(axis=1))
    weights = p * (1 + 1 / np.log2(1 + best))  # the likely relevant, by how high a pair ranks
    expected = weighted_inclusion_probabilities(weights, 10, 0.2)
    assert [recorded[i.item_id].probability for i in items] == pytest.approx(expected)
    drawn = {item_id for item_id, d in recorded.items() if d.drawn}
    assert first["drawn"] == len(drawn) > 0
    head = review_store.queued_items(ws.db, limit=len(drawn))
    assert {i.item_id for i in head} == drawn and all(i.reason == "drawn for review, round 1" for i in head)

    served = review.next_item(ws, "ann")
    review.submit(ws, "ann", served.item_id, "grade", "k1", grade=1)
    assert main(["select", "--budget", "5", "--workspace", str(ws.root), "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    # the next round draws anew from every pair still unlabelled, with the refitted estimate: the loop keeps learning
    assert second["round"] == 2 and second["considered"] == second["reconsidered"] == len(items) - 1
    assert second["drawn"] > 0
    again = {(q, c): round_ for q, c, round_ in ws.db.execute("SELECT query_id, chunk_id, round FROM review_draws")}
    assert len(ws.db.execute("SELECT * FROM review_draws WHERE round = 2").fetchall()) == len(items) - 1
    assert (served.query["query_id"], served.chunk["chunk_id"]) in again  # round 1's row stays as it was
    with pytest.raises(Exception, match="append-only"):
        with ws.transaction() as db:
            db.execute("UPDATE review_draws SET probability = 1")


def test_pairs_the_scored_systems_rank_high_are_likelier_drawn_as_their_rank_says(pair_queue, capsys):

    from testset_builder.cli import main
    from testset_builder.retrieval.pool import Candidate
    from testset_builder.store import draws as stored
    from testset_builder.store import estimates, rows

    ws, items = pair_queue, pair_queue.items
    mine = items[1::3]  # a system pooled by `propose --runs` ranks every third pair, in queue order
    with ws.transaction() as db:
        rows.put_candidates(
            db, [Candidate(i.query_id, i.chunk_id, "run:mine", r, 1.0 / r) for r, i in enumerate(mine, 1)]
        )
    assert main(["select", "--budget", "10", "--workspace", str(ws.root), "--json"]) == 0
    capsys.readouterr()
    stored_estimates = estimates.estimates(ws.db)
    p = np.array([stored_estimates[(i.query_id, i.chunk_id)].p_relevant for i in items])
    log_ranks = np.array([stored_estimates[(i.query_id, i.chunk_id)].features[3:5] for i in items])  # bm25, dense
    system = {(i.query_id, i.chunk_id): r for r, i in enumerate(mine, 1)}
    best = np.minimum(np.expm1(log_ranks.min(axis=1)), [system.get((i.query_id, i.chunk_id), np.inf) for i in items])
    assert (best < np.expm1(log_ranks.min(axis=1))).any()  # the system puts some pairs above both retrievers
    expected = weighted_inclusion_probabilities(p * (1 + 1 / np.log2(1 + best)), 10, 0.2)
    recorded = stored.draws(ws.db)
    assert [recorded[i.item_id].probability for i in items] == pytest.approx(expected)


def test_the_draw_goes_where_the_rare_relevant_pairs_probably_are_even_when_the_estimate_overstates_the_rest():
    """As on SciFact out of the box: 3% of pooled pairs relevant, the estimate right about which (0.75 on them) but
    0.15 on the mass of pairs that are not. A review of 100 must hold enough relevant verdicts to correct it."""
    chance = np.random.default_rng(3)
    n = 2250
    truth = chance.random(n) < 0.03
    p = np.clip(np.where(truth, 0.75, 0.15) + chance.normal(0, 0.08, n), 0.01, 0.99)
    ranks = np.where(truth, chance.integers(1, 10, n), chance.integers(1, 100, n))
    pi = inclusion_probabilities(p, 100, 0.2, best_ranks=ranks)
    found = float(pi[truth].sum())  # the expected number of relevant pairs among the drawn
    assert found >= 3.5 * 100 * truth.mean()  # an even draw finds about 3
    assert pi[truth].min() > pi[~truth].mean()  # every relevant pair likelier drawn than the average other
    assert pi.min() >= 0.2 * 100 / n - 1e-12  # and none impossible


@pytest.mark.parametrize("p, budget", [([0.0, 5e-324], 1.0), ([0.0, 0.0, 0.5], 2.0), ([1.0] * 5 + [0.3], 4.0)])
def test_certain_estimates_still_get_their_share_of_a_large_budget(p, budget):
    pi = inclusion_probabilities(p, budget, 0.2)
    assert np.isfinite(pi).all() and pi.sum() == pytest.approx(budget, rel=1e-6) and (pi > 0).all()


def test_the_rest_of_the_queue_follows_the_estimate_while_drawn_pairs_stay_ahead(pair_queue, capsys):
    from testset_builder.cli import main
    from testset_builder.stages.queue import estimate_priority
    from testset_builder.store import draws as stored
    from testset_builder.store import estimates
    from testset_builder.store import review as review_store

    ws = pair_queue
    assert {i.priority for i in review_store.queued_items(ws.db)} == {1.0}  # as queued, before any estimate
    assert main(["select", "--budget", "3", "--workspace", str(ws.root), "--json"]) == 0
    drawn = {item_id for item_id, d in stored.draws(ws.db).items() if d.drawn}
    p = estimates.estimates(ws.db)
    queue = review_store.queued_items(ws.db)
    head, rest = queue[: len(drawn)], queue[len(drawn) :]
    assert {i.item_id for i in head} == drawn
    assert [i.priority for i in rest] == pytest.approx(
        [estimate_priority(p[(i.query_id, i.chunk_id)].p_relevant) for i in rest]
    )
    assert len({round(i.priority, 3) for i in rest}) > 1  # an order, not a tie


def test_a_pairs_best_rank_is_read_from_features_stored_before_the_pooled_systems_columns_too():
    import math

    from testset_builder.stages.estimate import FEATURES, LEGACY_FEATURES
    from testset_builder.stages.selection import best_rank
    from testset_builder.store.estimates import StoredEstimate

    features = [0.0] * len(FEATURES)
    features[FEATURES.index("bm25_log_rank")], features[FEATURES.index("dense_log_rank")] = math.log1p(4), math.log1p(9)
    for stored in (features, features[:-1], features[:LEGACY_FEATURES]):  # as written by this version and two before
        assert best_rank(StoredEstimate("q", "c", 0.5, "prior", 0, tuple(stored))) == pytest.approx(4.0)
    assert best_rank(StoredEstimate("q", "c", 0.5, "prior", 0, (0.1, 0.2))) == 1.0  # unreadable: the top, to be safe
