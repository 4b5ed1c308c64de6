"""Selection for review: each real query's likely relevant pairs taken for sure, the rest drawn at random with likely
relevant pairs more often, every pair possible, and estimates from the drawn pairs unbiased when weighted by their
known probabilities."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import queue_every_chunk
from hypothesis import given, settings
from hypothesis import strategies as st

from testset_builder.labels.design import (
    LIKELY_RELEVANT,
    draw,
    horvitz_thompson_mean,
    inclusion_probabilities,
    split_budget,
    take_all,
    weighted_inclusion_probabilities,
)
from testset_builder.stages.selection import split_draws

RANK_FEATURES = ("bm25_log_rank", "dense_log_rank")  # the features a pair's best rank is read from


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

    ws = pair_queue
    assert main(["select", "--budget", "10", "--workspace", str(ws.root), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    recorded = stored.draws(ws.db)
    assert first["round"] == 1 and first["considered"] == len(ws.items) == len(recorded)
    taken = {item_id for item_id, d in recorded.items() if d.stratum == stored.TAKE_ALL}
    assert first["take_all"] == len(taken) > 0  # the prior puts one pair of a real query above 0.5
    assert all(recorded[i].probability == 1.0 and recorded[i].drawn for i in taken)
    sampled = [i for i in ws.items if i.item_id not in taken]  # the random draw's, with what the take-all part left
    assert sum(recorded[i.item_id].probability for i in sampled) == pytest.approx(10 - len(taken))
    stored_estimates = estimates.estimates(ws.db)
    p = np.array([stored_estimates[(i.query_id, i.chunk_id)].p_relevant for i in sampled])
    log_ranks = np.array(
        [[stored_estimates[(i.query_id, i.chunk_id)].features[n] for n in RANK_FEATURES] for i in sampled]
    )
    best = np.expm1(log_ranks.min(axis=1))
    weights = p * (1 + 1 / np.log2(1 + best))  # the likely relevant, by how high a pair ranks
    expected = weighted_inclusion_probabilities(weights, 10 - len(taken), 0.2)
    assert [recorded[i.item_id].probability for i in sampled] == pytest.approx(expected)
    drawn = {item_id for item_id, d in recorded.items() if d.drawn}
    assert first["drawn"] == len(drawn) == first["take_all"] + first["sampled"] and first["sampled"] > 0
    head = review_store.queued_items(ws.db, limit=len(drawn))
    assert {i.item_id for i in head} == drawn and all(i.reason.startswith("drawn for review, round 1") for i in head)
    assert {i.item_id for i in head[: len(taken)]} == taken  # taken for sure first, then drawn at random

    served = review.next_item(ws, "ann")
    review.submit(ws, "ann", served.item_id, "grade", "k1", grade=1)
    assert main(["select", "--budget", "5", "--workspace", str(ws.root), "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    # the next round draws anew from every pair still unlabelled, with the refitted estimate: the loop keeps learning
    assert second["round"] == 2 and second["considered"] == second["reconsidered"] == len(ws.items) - 1
    assert second["drawn"] > 0
    again = {(q, c): round_ for q, c, round_ in ws.db.execute("SELECT query_id, chunk_id, round FROM review_draws")}
    assert len(ws.db.execute("SELECT * FROM review_draws WHERE round = 2").fetchall()) == len(ws.items) - 1
    assert (served.query["query_id"], served.chunk["chunk_id"]) in again  # round 1's row stays as it was
    with pytest.raises(Exception, match="append-only"):
        with ws.transaction() as db:
            db.execute("UPDATE review_draws SET probability = 1")


def test_pairs_the_scored_systems_rank_high_are_likelier_drawn_as_their_rank_says(pair_queue, capsys):
    import json

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
    assert main(["select", "--budget", "10", "--workspace", str(ws.root), "--json", "--take-all-share", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["take_all"] == 0  # the random draw alone, over every pending pair
    stored_estimates = estimates.estimates(ws.db)
    p = np.array([stored_estimates[(i.query_id, i.chunk_id)].p_relevant for i in items])
    log_ranks = np.array(
        [[stored_estimates[(i.query_id, i.chunk_id)].features[n] for n in RANK_FEATURES] for i in items]
    )
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
    from testset_builder.labels.queue import estimate_priority
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


def test_a_pairs_best_rank_is_read_from_its_features_by_name_and_a_row_that_names_no_rank_counts_as_the_top():
    import math

    from testset_builder.stages.selection import best_rank
    from testset_builder.store.estimates import StoredEstimate

    named = {"bm25_log_rank": math.log1p(4), "dense_log_rank": math.log1p(9), "dense": 0.3}
    assert best_rank(StoredEstimate("q", "c", 0.5, "prior", 0, named)) == pytest.approx(4.0)
    lexical = {"bm25_log_rank": math.log1p(6)}
    assert best_rank(StoredEstimate("q", "c", 0.5, "prior", 0, lexical)) == pytest.approx(6.0)
    assert best_rank(StoredEstimate("q", "c", 0.5, "prior", 0, {})) == 1.0  # unreadable: the top, to be safe


def test_migration_25_names_the_features_of_rows_stored_by_position_in_each_earlier_version(tmp_path):
    import json
    import sqlite3

    from testset_builder.labels.features import FEATURES, vector
    from testset_builder.store import migrations

    stored_then = (  # the order every earlier version stored, by position
        "dense", "dense_gap", "bm25", "bm25_log_rank", "dense_log_rank", "overlap", "llm", "llm_missing", "dense_z",
        "bm25_z", "rrf", "runs", "runs_missing", "scores",
    )  # fmt: skip
    db = sqlite3.connect(tmp_path / "old.db")
    db.execute("CREATE TABLE estimates (query_id TEXT, chunk_id TEXT, features TEXT)")
    row = [float(i) for i in range(len(stored_then))]
    for length in (14, 13, 11, 5):  # three versions' rows, and a row nothing can read
        db.execute("INSERT INTO estimates VALUES (?, ?, ?)", ("q", f"c{length}", json.dumps(row[:length])))
    migrations.m025_estimate_features_by_name(db)
    migrations.m025_estimate_features_by_name(db)  # a second run changes nothing
    stored = {c: json.loads(f) for c, f in db.execute("SELECT chunk_id, features FROM estimates")}
    assert stored["c14"] == dict(zip(stored_then, row)) and stored["c5"] == {}
    assert stored["c11"] == dict(zip(stored_then[:11], row[:11]))
    # read back by name: today's features, in today's order; names that are features no more are left out
    today = [row[stored_then.index(name)] for name in FEATURES]
    assert list(vector(stored["c14"])) == today and list(vector(stored["c11"])) == today


# the take-all stratum -----------------------------------------------------------------------------------------------

QUERIES = ["a", "a", "a", "a", "b", "b", "c", "d", "d"]  # d is synthetic
LIKELY = [0.9, 0.8, 0.7, 0.6, 0.6, 0.55, 0.95, 0.99, 0.2]
RANKS = [1.0] * len(QUERIES)
REAL = {"a", "b", "c"}


def test_only_real_queries_likely_pairs_are_taken_at_most_three_a_query_and_round_robin_when_the_share_is_full():
    assert take_all(QUERIES, LIKELY, RANKS, REAL, per_query=3, limit=100) == [6, 0, 4, 1, 5, 2]  # a's 0.6 left out
    # room for four: every real query's likeliest pair (by p) before any query's second one
    assert take_all(QUERIES, LIKELY, RANKS, REAL, per_query=3, limit=4) == [6, 0, 4, 1]
    assert take_all(QUERIES, LIKELY, RANKS, REAL, per_query=3, limit=2) == [6, 0]
    assert take_all(QUERIES, [0.49] * len(QUERIES), RANKS, REAL, per_query=3, limit=100) == []  # none likely
    assert take_all(QUERIES, LIKELY, RANKS, REAL, per_query=0, limit=100) == []  # turned off
    tied = take_all(["a", "a"], [0.7, 0.7], [9.0, 2.0], {"a"}, per_query=1, limit=1)
    assert tied == [1]  # of two as likely, the better placed


@pytest.mark.parametrize("seed", range(20))
def test_a_pair_taken_for_sure_is_always_drawn_with_probability_one_whatever_the_seed(seed):
    pending = [(q, f"chunk-{i}") for i, q in enumerate(QUERIES)]
    split = split_budget(QUERIES, LIKELY, RANKS, REAL, 6, uniform_share=0.2, take_all_share=0.5, per_query=3, seed=seed)
    assert split.certain == [6, 0, 4]
    stored = split_draws(pending, LIKELY, split, 1, "prior")
    certain = [d for d in stored if d.stratum == "take-all"]
    assert [(d.query_id, d.chunk_id) for d in certain] == [pending[i] for i in split.certain]
    assert all(d.probability == 1.0 and d.drawn for d in certain)
    assert {(d.query_id, d.chunk_id) for d in stored} == set(pending)  # every pending pair recorded once


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from("abcdefgh"), st.floats(0.0, 1.0)), min_size=1, max_size=200),
    st.integers(1, 60),
    st.floats(0.0, 0.9),
    st.integers(0, 4),
)
def test_the_random_draw_spends_what_the_take_all_part_leaves_and_no_other_pair_is_impossible(
    pairs, budget, share, per_query
):
    queries, p = [q for q, _ in pairs], [value for _, value in pairs]
    split = split_budget(
        queries, p, [1.0] * len(p), set("abcde"), budget, uniform_share=0.2, take_all_share=share,
        per_query=per_query, seed=0,
    )  # fmt: skip
    assert len(split.certain) <= int(share * budget) and sorted(split.certain + split.rest) == list(range(len(p)))
    assert all(queries[i] in "abcde" and p[i] >= LIKELY_RELEVANT for i in split.certain)
    assert all(sum(queries[i] == q for i in split.certain) <= per_query for q in "abcde")
    left = min(budget - len(split.certain), len(split.rest))
    assert split.probabilities.sum() == pytest.approx(left, rel=1e-6) and split.sample_budget == left
    assert (split.probabilities > 0).all() and (split.probabilities <= 1).all()
    # each pending pair's inclusion probability and whether it is reviewed, in the pending pairs' order
    inclusion, drawn = split.inclusion(), split.drawn()
    assert (inclusion[split.certain] == 1.0).all() and list(inclusion[split.rest]) == list(split.probabilities)
    assert set(np.flatnonzero(drawn)) == set(split.certain) | {split.rest[d.index] for d in split.outcome if d.drawn}


def test_the_take_all_share_keeps_part_of_the_budget_for_the_random_draw():
    with pytest.raises(ValueError, match="take_all_share"):
        split_budget(QUERIES, LIKELY, RANKS, REAL, 6, uniform_share=0.2, take_all_share=1.0, per_query=3, seed=0)


@pytest.fixture
def likely_pairs_queue(docs_workspace):
    """Seven real queries, each a run of words from one chunk of the docs corpus (the estimate finds that chunk
    likely relevant), a real query about nothing in the corpus, and a synthetic question copied from a chunk with no
    label on it; each query paired with every chunk in the review queue. ``truth`` says the copied chunk answers."""
    from testset_builder.records import Query, QueryOrigin
    from testset_builder.store import rows

    ws = docs_workspace
    chunks = rows.live_chunk_rows(ws.db)
    sources = {f"real-{i}": (c, text) for i, (c, _, text) in enumerate(chunks[::4])}
    sources["synthetic-copy"] = chunks[1][0], chunks[1][2]
    queries = [
        Query(query_id=q, text=" ".join(text.split()[5:17]), origin=QueryOrigin.real)
        for q, (_, text) in sources.items()
    ]
    queries[-1] = queries[-1].model_copy(update={"origin": QueryOrigin.synthetic, "source_chunk_id": chunks[1][0]})
    queries.append(Query(query_id="real-off-topic", text="when do bananas ripen in the sun", origin=QueryOrigin.real))
    queue_every_chunk(ws, queries, chunks)
    ws.truth = {(q, c) for q, (c, _) in sources.items()}
    return ws


def test_after_a_round_is_answered_every_real_query_with_a_likely_pair_holds_a_human_label_and_the_release_says_so(
    likely_pairs_queue,
):
    import json

    from testset_builder import api
    from testset_builder.stages import review
    from testset_builder.store import draws as stored
    from testset_builder.store import rows

    ws = likely_pairs_queue
    config = api.load_config(workspace=str(ws.root))
    summary = api.select(config, 20, workspace=ws)
    considered = stored.pair_draws(ws.db)
    real = rows.real_query_ids(ws.db)
    likely = {q for (q, _), d in considered.items() if q in real and d.p_relevant >= LIKELY_RELEVANT}
    taken = {pair for pair, d in considered.items() if d.stratum == stored.TAKE_ALL}
    assert len(likely) >= 5 and "synthetic-copy" not in {q for q, _ in taken}
    assert (summary.take_all, summary.take_all_queries) == (len(taken), len(likely))
    assert summary.real_queries_without_likely == 1 and summary.take_all <= 10  # half the budget at most
    assert summary.sample_budget == 20 - summary.take_all and summary.why.startswith(f"{summary.take_all} likely")

    served = []
    while (item := review.next_item(ws, "ann")) is not None and item.reason.startswith("drawn for review"):
        pair = (item.query["query_id"], item.chunk["chunk_id"])
        review.submit(ws, "ann", item.item_id, "grade", f"k-{len(served)}", grade=2 if pair in ws.truth else 0)
        served.append(pair)
    review.leave(ws, "ann")
    assert len(served) == summary.drawn and set(served[: len(taken)]) == taken  # taken for sure come first
    labelled = {j.query_id for j in rows.iter_judgments(ws.db) if j.source.value == "human"}
    assert likely <= labelled  # every real query with a likely pair now holds a human label

    released = api.release(config, workspace=ws)
    qrels = (released.path / "beir" / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]
    grades = {(q, c): int(g) for q, c, g in (line.split("\t") for line in qrels)}
    rows_by_pair = {
        (row["query-id"], row["corpus-id"]): row
        for row in map(json.loads, (released.path / "estimates.jsonl").read_text(encoding="utf-8").splitlines())
    }
    for pair in taken:
        assert grades[pair] == (2 if pair in ws.truth else 0)  # the verdict is the released label
        assert rows_by_pair[pair]["draw"] == {"round": 1, "probability": 1.0, "drawn": True, "stratum": "take-all"}
        assert rows_by_pair[pair]["origin"] == "human"
    assert {row["draw"]["stratum"] for row in rows_by_pair.values() if row["draw"]} == {"take-all", "sample"}


def test_migration_24_gives_every_earlier_draw_the_sample_stratum(docs_workspace):
    import sqlite3

    from testset_builder.records import Query, QueryOrigin
    from testset_builder.store import draws as stored
    from testset_builder.store import open_workspace, rows
    from testset_builder.store.workspace import DB_NAME

    chunk = rows.live_chunk_rows(docs_workspace.db)[0][0]
    with docs_workspace.transaction() as db:
        rows.put_queries(db, [Query(query_id="r0", text="how is ndcg computed", origin=QueryOrigin.real)])
    db = sqlite3.connect(docs_workspace.root / DB_NAME, isolation_level=None)
    db.execute("BEGIN")
    db.execute("ALTER TABLE review_draws DROP COLUMN stratum")  # schema 23's table
    db.execute(
        "INSERT INTO review_draws (query_id, chunk_id, item_id, round, probability, drawn, p_relevant, model, "
        "created_at) VALUES ('r0', ?, 'p-old', 1, 0.25, 1, 0.4, 'prior', 'then')",
        (chunk,),
    )
    db.execute("DELETE FROM schema_migrations WHERE version >= 24")
    db.execute("COMMIT")
    db.close()
    with open_workspace(docs_workspace.root) as again:  # migration 24 runs
        assert [d.stratum for d in stored.pair_draws(again.db).values()] == ["sample"]
        with pytest.raises(sqlite3.IntegrityError):
            again.db.execute(
                "INSERT INTO review_draws (query_id, chunk_id, item_id, round, probability, drawn, p_relevant, model, "
                "created_at, stratum) VALUES ('r0', ?, 'p-new', 2, 1.0, 1, 0.9, 'prior', 'now', 'other')",
                (chunk,),
            )


def test_a_pair_an_earlier_round_drew_and_a_later_one_passed_over_leaves_the_drawn_band_and_waits_no_more(
    pair_queue,
):
    from testset_builder.stages.selection import DRAWN_PRIORITY, PASSED_OVER, select_for_review
    from testset_builder.store import draws as stored
    from testset_builder.store import review as review_store

    ws = pair_queue
    first = select_for_review(ws, 6, seed=1, take_all_share=0.0)
    drawn_first = {d.item_id for d in stored.pair_draws(ws.db).values() if d.drawn and d.round == first.round}
    second = select_for_review(ws, 6, seed=2, take_all_share=0.0)  # nobody answered the first round
    latest = stored.pair_draws(ws.db)
    drawn_second = {d.item_id for d in latest.values() if d.drawn and d.round == second.round}
    passed_over = drawn_first - drawn_second
    assert passed_over, "the two rounds drew the same pairs: pick other seeds"
    queued = {item.item_id: item for item in review_store.queued_items(ws.db)}
    for item_id in passed_over:
        assert queued[item_id].priority < DRAWN_PRIORITY and queued[item_id].reason.startswith(PASSED_OVER)
    for item_id in drawn_second:
        assert queued[item_id].priority >= DRAWN_PRIORITY
    assert stored.waiting_pairs(ws.db) == len(drawn_second)  # the passed-over pairs wait no more
