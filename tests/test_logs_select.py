"""Failure-first selection of logged queries: likely failures likelier, every query possible, every probability
kept, so figures over the labelled subset weighted by 1 / pi describe the whole log."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from testset_builder.cli import main
from testset_builder.labels.design import draw, weighted_inclusion_probabilities
from testset_builder.stages.logs.failures import collapse, failure_weight, select_logged
from testset_builder.stages.logs.importer import import_logs
from testset_builder.store import logs as stored_logs
from testset_builder.store import rows

WORDS = "recall ndcg ranking chunk release review judge corpus metric query label grade pool estimate".split()  # noqa: SIM905


def row(query_id, text, frequency=1, thumbs_down=0, cited=0, clicked=0, ratings=0, rating_sum=0.0, top_score=1.0):
    return dict(
        query_id=query_id, text=text, frequency=frequency, thumbs_up=0, thumbs_down=thumbs_down, cited=cited,
        clicked=clicked, ratings=ratings, rating_sum=rating_sum, top_score=top_score, retrieved_at="t", retrieved=1,
    )  # fmt: skip


def test_a_query_weighs_by_its_failure_signals_and_how_often_it_was_asked_and_says_why():
    calm, _ = failure_weight(row("a", "x"), None, None)
    down, why = failure_weight(row("b", "y", frequency=4, thumbs_down=2, cited=4, clicked=1), None, None)
    assert calm == 1.0
    assert down == pytest.approx((1 + 4 * 2 / 4 + 1.5 * 3 / 4) * (1 + 2))
    assert why == ["thumbs down 2 of 4", "cited sources not clicked 3 of 4", "asked 4 times"]
    low, why = failure_weight(row("c", "z", ratings=2, rating_sum=2.0, top_score=0.1), median_rating=3.0, low_score=0.2)
    assert low == 3.0 and len(why) == 2


def test_near_duplicate_queries_fold_into_the_most_frequent_with_their_signals():
    heads, member_of = collapse(
        [row("q1", "how is ndcg computed", frequency=5), row("q2", "how is the ndcg computed", thumbs_down=1),
         row("q3", "what does recall count")]
    )  # fmt: skip
    assert [h["query_id"] for h in heads] == ["q1", "q3"] and member_of == {"q2": "q1"}
    assert heads[0]["frequency"] == 6 and heads[0]["thumbs_down"] == 1


def test_weighted_draws_recorded_with_their_probabilities_estimate_the_whole_log_without_bias():
    """Horvitz-Thompson over many draws: failures are oversampled, yet the weighted share of failures in the drawn
    queries averages the true share of the population."""
    rng = np.random.default_rng(1)
    failing = rng.random(400) < 0.15
    weights = np.where(failing, 5.0, 1.0) * rng.uniform(0.5, 2.0, 400)  # signals point at failures, noisily
    pi = weighted_inclusion_probabilities(weights, 60)
    assert pi.sum() == pytest.approx(60) and pi.min() > 0
    estimates = []
    for seed in range(2000):
        drawn = np.array([d.drawn for d in draw(pi, seed)])
        estimates.append((failing[drawn] / pi[drawn]).sum() / len(failing))
        if seed == 0:
            assert failing[drawn].mean() > 2 * failing.mean()  # the draw does go failure-first
    assert np.mean(estimates) == pytest.approx(failing.mean(), abs=0.01)


@pytest.fixture
def logged(docs_workspace, tmp_path):
    """80 logged queries over the docs: the first 20 with thumbs down, the rest quiet."""
    ids = [chunk_id for chunk_id, _, _ in rows.live_chunk_rows(docs_workspace.db)]
    pick = random.Random(3)
    lines = []
    for i in range(80):
        text = f"{' '.join(pick.sample(WORDS, 4))} case {i}"
        lines.append({"query": text, "retrieved": pick.sample(ids, 3), "thumbs": "down" if i < 20 else "up"})
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    import_logs(docs_workspace, path)
    return docs_workspace


def test_select_from_logs_draws_likely_failures_first_and_a_second_round_considers_only_new_queries(logged):
    first = select_logged(logged, limit=15, seed=2)
    assert first.considered == 80 and 5 <= first.drawn <= 25
    down = [d for d in first.drawn_queries if any(r.startswith("thumbs down") for r in d["reasons"])]
    assert len(down) / first.drawn > 20 / 80  # failures are over-represented among the drawn
    stored = {q: p for q, p, _ in stored_logs.drawn_logged(logged.db)}
    assert stored == {d["query_id"]: pytest.approx(d["probability"]) for d in first.drawn_queries}
    again = select_logged(logged, limit=15, seed=2)
    assert again.considered == 0 and again.drawn == 0 and again.round == 2


def test_the_commands_draw_from_logs_and_propose_pools_the_drawn_queries(logged, capsys):
    root = str(logged.root)
    assert main(["select", "--from-logs", "--limit", "10", "--workspace", root, "--json"]) == 0
    drawn = json.loads(capsys.readouterr().out)["drawn_queries"]
    assert main(["propose", "--from-logs", "--no-judge", "--workspace", root, "--json"]) == 0
    proposed = json.loads(capsys.readouterr().out)
    assert proposed["queries"] == len(drawn) and proposed["candidates"] > 0
    retrievers = {r for (r,) in logged.db.execute("SELECT DISTINCT retriever FROM candidates")}
    assert "production" in retrievers and "bm25" in retrievers
    assert main(["select", "--from-logs", "--budget", "5", "--workspace", root, "--json"]) == 1
    assert "--limit" in json.loads(capsys.readouterr().out)["error"]


def test_a_log_without_timestamps_is_not_called_empty_handed(docs_workspace, tmp_path):
    """A logged query whose records retrieved chunks is not drawn for "nothing retrieved", timestamps or none."""
    ids = [chunk_id for chunk_id, _, _ in rows.live_chunk_rows(docs_workspace.db)]
    records = [{"query": "what is recall", "retrieved": ids[:2]}, {"query": "what is ndcg"}]
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    import_logs(docs_workspace, log)
    reasons = {r["text"]: failure_weight(r, None, None)[1] for r in stored_logs.undrawn_logged(docs_workspace.db)}
    empty = "nothing retrieved (or no logged result matched a chunk)"
    assert empty not in reasons["what is recall"] and empty in reasons["what is ndcg"]
