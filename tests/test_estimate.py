"""The relevance estimate: its features, its fit against scikit-learn's, and a refit that moves from the prior only
as far as the verdicts justify."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import rankdata

from testset_builder.labels.features import FEATURES, query_features, vector
from testset_builder.labels.fitting import fold_of
from testset_builder.labels.model import MIN_VERDICTS, RelevanceModel, fit, refit
from testset_builder.labels.prior import PRIOR


def test_features_follow_the_scores_of_the_whole_corpus():
    dense = np.array([0.9, 0.2, 0.5, 0.5, 0.1])
    bm25 = np.array([4.0, 0.0, 8.0, 2.0, 1.0])
    out = query_features(
        dense, bm25, [2, 3, 1], {"vitamin", "fracture"}, [{"vitamin", "fracture"}, {"vitamin"}, set()], [0.8, None, 0.1]
    )
    column = {name: out[:, i] for i, name in enumerate(FEATURES)}
    assert column["dense"] == pytest.approx([0.5, 0.5, 0.2])
    assert column["dense_gap"] == pytest.approx([-0.4, -0.4, -0.7])
    assert column["bm25"] == pytest.approx([1.0, 0.25, 0.0])
    expected_bm25_rank = rankdata(-bm25, method="min")[[2, 3, 1]]  # ties share the best rank
    assert column["bm25_log_rank"] == pytest.approx(np.log1p(expected_bm25_rank))
    assert column["dense_log_rank"] == pytest.approx(np.log1p(rankdata(-dense, method="min")[[2, 3, 1]]))
    assert column["overlap"] == pytest.approx([1.0, 0.5, 0.0])
    assert column["llm"] == pytest.approx([0.8, 0.5, 0.1]) and column["llm_missing"] == pytest.approx([0, 1, 0])


def test_without_a_dense_model_the_dense_features_say_unrelated():
    out = query_features(None, np.array([1.0, 0.0]), [0, 1], set(), [set(), set()], [None, None])
    assert out[:, FEATURES.index("dense")] == pytest.approx([0, 0])
    assert out[:, FEATURES.index("dense_gap")] == pytest.approx([-1, -1])
    assert out[:, FEATURES.index("overlap")] == pytest.approx([0, 0])


def synthetic(n: int, seed: int, bias: float = -1.0, weights=(2.0, -1.0, 0.5, 0, 0, 1.5, 0, 0, 0.5, 0, -0.5)):
    chance = np.random.default_rng(seed)
    x = chance.normal(size=(n, len(FEATURES)))
    p = 1 / (1 + np.exp(-(bias + x @ np.array(weights))))
    return x, (chance.random(n) < p).astype(float)


def test_a_fit_agrees_with_scikit_learns_logistic_regression():
    from sklearn.linear_model import LogisticRegression

    x, y = synthetic(3000, seed=1)
    ours = fit(x, y, "test", l2=1.0)
    theirs = LogisticRegression(C=1.0, tol=1e-10, max_iter=1000).fit(x, y)  # L2 with precision 1 on the weights
    assert ours.weights == pytest.approx(theirs.coef_[0], abs=2e-3)
    assert ours.p_relevant(x[:50]) == pytest.approx(theirs.predict_proba(x[:50])[:, 1], abs=2e-3)


def test_a_refit_keeps_the_prior_with_too_few_verdicts_or_one_class_of_them():
    x, y = synthetic(200, seed=2)
    assert refit(x[: MIN_VERDICTS - 1], y[: MIN_VERDICTS - 1], PRIOR) is PRIOR
    assert refit(x[:50], np.ones(50), PRIOR) is PRIOR


def test_a_refit_moves_towards_the_truth_as_verdicts_accumulate():
    truth = (2.0, -1.0, 0.5, 0, 0, 1.5, 0, 0, 0.5, 0, -0.5)
    x, y = synthetic(4000, seed=3, weights=truth)
    start = RelevanceModel("flat", 0.0, (0.0,) * len(FEATURES))
    distances = [
        np.linalg.norm(np.array(refit(x[:n], y[:n], start).weights) - truth) for n in (MIN_VERDICTS, 200, 4000)
    ]
    assert distances[0] > distances[1] > distances[2] and distances[2] < 0.35  # the pull keeps a little shrinkage
    assert refit(x[:200], y[:200], start).verdicts == 200


def test_the_prior_ranks_a_closer_chunk_above_a_farther_one():
    close = query_features(np.array([0.8, 0.3]), np.array([9.0, 1.0]), [0], {"a"}, [{"a"}], [None])
    far = query_features(np.array([0.8, 0.3]), np.array([9.0, 1.0]), [1], {"a"}, [set()], [None])
    assert PRIOR.p_relevant(close)[0] > PRIOR.p_relevant(far)[0]


def test_the_workspace_estimate_keeps_the_prior_until_reviewers_grade_enough_pairs(pair_queue, capsys):
    import json

    from testset_builder.cli import main
    from testset_builder.labels.estimate import estimate_workspace
    from testset_builder.labels.prior import PRIOR_LEXICAL
    from testset_builder.stages import review
    from testset_builder.store import estimates as stored

    ws, items = pair_queue, pair_queue.items
    first = estimate_workspace(ws)
    assert first.pairs == len(items) == first.new_features and first.verdicts == 0
    assert first.model["name"] in (PRIOR.name, PRIOR_LEXICAL.name)
    assert estimate_workspace(ws).new_features == 0  # features are stored: a rerun scores nothing again
    before = {k: e.p_relevant for k, e in stored.estimates(ws.db).items()}

    for item in items:  # reviewers who agree with the prior: it ranks their verdicts well already
        relevant = ws.truth(item.query_id, item.chunk_id)
        review.submit(ws, "ann", item.item_id, "grade", item.item_id, grade=1 if relevant else 0)
    assert main(["estimate", "--workspace", str(ws.root), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    validation = summary["validation"]
    assert summary["verdicts"] == len(items) and validation["labels"] == len(items)
    assert not validation["kept"] and validation["refit_log_loss"] >= validation["centre_log_loss"]
    assert summary["model"]["name"] == first.model["name"]  # the refit is refused: the prior stays, and says why
    assert {k: e.p_relevant for k, e in stored.estimates(ws.db).items()} == before


def test_a_kept_refit_scores_each_query_by_the_model_fitted_without_its_verdicts(pair_queue, capsys):
    import json

    from testset_builder.cli import main
    from testset_builder.labels.prior import PRIOR_LEXICAL
    from testset_builder.stages import review
    from testset_builder.store import estimates as stored

    ws, items = pair_queue, pair_queue.items
    for item in items:  # a notion of relevance the prior does not share: the chunks that do not name the metric
        relevant = not ws.truth(item.query_id, item.chunk_id)
        review.submit(ws, "ann", item.item_id, "grade", item.item_id, grade=1 if relevant else 0)
    assert main(["estimate", "--workspace", str(ws.root), "--json"]) == 0
    refitted = json.loads(capsys.readouterr().out)
    assert refitted["verdicts"] == len(items) and refitted["model"]["name"].startswith("refit:")
    assert refitted["validation"]["kept"] and refitted["validation"]["reason"].startswith("refit kept")
    saved = stored.estimates(ws.db)
    prior = PRIOR if refitted["model"]["name"] == f"refit:{PRIOR.name}" else PRIOR_LEXICAL
    for query_id in ("q-ndcg", "q-recall-at-k"):  # each query scored by the refit on the other query's verdicts only
        mine = sorted(k for k in saved if k[0] == query_id)
        others = sorted(k for k in saved if k[0] != query_id)
        features = lambda keys: np.array([vector(saved[k].features) for k in keys])  # noqa: E731
        labels = np.array([int(not ws.truth(q, c)) for q, c in others])
        fitted = refit(features(others), labels, prior)
        assert [saved[k].p_relevant for k in mine] == pytest.approx(fitted.p_relevant(features(mine)), abs=1e-4)
        assert {saved[k].model for k in mine} == {f"{refitted['model']['name']} fold {fold_of(query_id) + 1}/5"}
    assert saved[next(iter(saved))].verdicts == len(items)


def test_a_weighted_refit_agrees_with_scikit_learn_given_the_same_sample_weights():
    from sklearn.linear_model import LogisticRegression

    x, y = synthetic(2000, seed=4)
    weights = np.random.default_rng(4).uniform(1, 20, len(y))  # 1 / inclusion probability, say
    flat = RelevanceModel("flat", 0.0, (0.0,) * len(FEATURES))
    ours = refit(x, y, flat, strength=1.0, weights=weights)
    theirs = LogisticRegression(C=1.0, tol=1e-10, max_iter=2000).fit(x, y, sample_weight=weights / weights.mean())
    assert ours.weights == pytest.approx(theirs.coef_[0], abs=5e-3)
    assert refit(x, y, flat, 1.0, weights * 7).weights == pytest.approx(ours.weights)  # only relative weights count


def test_at_a_million_chunks_a_few_queries_are_scored_at_once_and_never_fewer_than_one():
    from testset_builder.labels.estimate import SCORES_MB, queries_at_once

    assert queries_at_once(5_000, 2) == 256
    at_a_million = queries_at_once(1_000_000, 2)
    assert at_a_million * 1_000_000 * 4 * 2 <= SCORES_MB * 2**20 < (at_a_million + 1) * 1_000_000 * 4 * 2
    assert queries_at_once(10**12, 2) == 1


def test_features_are_the_same_whether_queries_are_scored_one_at_a_time_or_many_at_once(pair_queue, monkeypatch):
    from testset_builder.labels import estimate
    from testset_builder.retrieval.indexes import WorkspaceIndexes
    from testset_builder.store import rows

    ws = pair_queue
    chunks: dict[str, list[str]] = {}
    for item in ws.items:
        chunks.setdefault(item.query_id, []).append(item.chunk_id)
    texts = {q: rows.get_query(ws.db, q).text for q in chunks}
    indexes = WorkspaceIndexes(ws, ("bm25",))
    many = estimate.pair_features(indexes, texts, chunks)
    monkeypatch.setattr(estimate, "queries_at_once", lambda *_: 1)
    one = estimate.pair_features(indexes, texts, chunks)
    assert len(chunks) > 1 and sorted(many) == sorted(one) == sorted((i.query_id, i.chunk_id) for i in ws.items)
    assert all(np.array_equal(many[pair], one[pair]) for pair in many)


def test_estimate_exports_the_estimate_of_the_pairs_of_a_qrels_file_without_any_llm(pair_queue, capsys, tmp_path):
    import json

    from testset_builder.cli import main
    from testset_builder.store import estimates as stored

    ws = pair_queue
    chosen = [i for i in ws.items if i.query_id == "q-ndcg"][:3]
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{i.query_id}\t{i.chunk_id}\t1\n" for i in chosen))
    out = tmp_path / "estimates.jsonl"
    args = ["estimate", "--workspace", str(ws.root), "--pairs", str(qrels), "--output", str(out), "--json"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    saved = stored.estimates(ws.db)
    assert [(r["query-id"], r["corpus-id"]) for r in rows] == sorted((i.query_id, i.chunk_id) for i in chosen)
    assert all(r["p_relevant"] == saved[(r["query-id"], r["corpus-id"])].p_relevant for r in rows)
    assert summary["exported"] == {"pairs": 3, "not_live": []}
    assert not ws.db.execute("SELECT COUNT(*) FROM llm_calls").fetchone()[0]  # no judge was asked

    qrels.write_text("query-id\tcorpus-id\tscore\nq-unknown\tdoc#0\t1\n")
    assert main(["estimate", "--workspace", str(ws.root), "--pairs", str(qrels)]) == 1
    assert "unknown query id 'q-unknown'" in capsys.readouterr().err


def test_the_shipped_priors_weigh_only_the_features_they_were_fitted_on_and_no_hand_set_bet():
    from testset_builder.labels.prior import PRIOR_FEATURES, PRIOR_LEXICAL, PRIOR_LEXICAL_FEATURES

    for model, features in ((PRIOR, PRIOR_FEATURES), (PRIOR_LEXICAL, PRIOR_LEXICAL_FEATURES)):
        weighed = {name for name, weight in zip(FEATURES, model.weights) if weight != 0.0}
        assert weighed == set(features), model.name  # the pooled systems' columns earn a weight from verdicts only


def test_a_pooled_system_that_knows_what_the_features_miss_earns_weight_from_the_verdicts(pair_queue, capsys):
    import zlib

    from testset_builder.labels.fitting import roc_auc
    from testset_builder.labels.prior import PRIOR_LEXICAL
    from testset_builder.store import estimates as stored
    from testset_builder.tables import Run

    ws, items = pair_queue, pair_queue.items
    relevant = lambda q, c: zlib.crc32(f"{q} {c}".encode()) % 3 == 0  # noqa: E731  nothing in the text says it
    scores = {}
    for query_id in ("q-ndcg", "q-recall-at-k"):
        order = sorted(
            (i.chunk_id for i in items if i.query_id == query_id), key=lambda c: (not relevant(query_id, c), c)
        )
        order[1], order[-2] = order[-2], order[1]  # a system that knows, with a mistake at each end
        scores[query_id] = {c: float(len(order) - r) for r, c in enumerate(order)}
    refitted = pooled_graded_and_estimated(ws, [Run.from_dict(scores, name="knows")], relevant, capsys)
    weights = refitted["model"]["weights"]
    assert refitted["validation"]["kept"] and weights["system:run:knows"] > 0, weights

    saved = stored.estimates(ws.db)
    keys = sorted(saved)
    labels = np.array([int(relevant(q, c)) for q, c in keys])
    with_run = roc_auc([saved[k].p_relevant for k in keys], labels)
    prior = PRIOR if refitted["model"]["name"] == f"refit:{PRIOR.name}" else PRIOR_LEXICAL
    blind = np.array([vector(saved[k].features) for k in keys])  # the same verdicts, the system not pooled
    without = np.zeros(len(keys))
    for query_id in ("q-ndcg", "q-recall-at-k"):  # cross-fitted as the workspace is: each query by the other's verdicts
        mine = np.array([q == query_id for q, _ in keys])
        without[mine] = refit(blind[~mine], labels[~mine], prior).p_relevant(blind[mine])
    assert with_run > roc_auc(without, labels) + 0.05  # 52 verdicts: the pull to the prior keeps the step small


def test_each_pooled_system_has_a_column_of_its_own_on_its_queries_scale():
    from testset_builder.labels.systems import system_columns, system_discounts

    rows = [("q1", "a", "run:x", 1), ("q1", "b", "run:x", 3), ("q1", "a", "run:y", 7), ("q2", "c", "run:y", 1)]
    reference = [("q1", "a"), ("q1", "b"), ("q1", "z"), ("q2", "c"), ("q2", "d")]
    keys = [("q1", "a"), ("q1", "z"), ("q2", "c"), ("q2", "d"), ("q3", "a")]
    systems, columns = system_columns(system_discounts(rows), keys, reference)
    assert systems == ("run:x", "run:y")

    def z(value: float, scale: list[float]) -> float:
        return (value - np.mean(scale)) / np.std(scale)

    x_q1 = [1.0, 1 / np.log2(4), 0.0]  # run:x's discounts of q1's reference pairs a, b, z
    y_q1, y_q2 = [1 / np.log2(8), 0.0, 0.0], [1.0, 0.0]
    assert columns[:, 0] == pytest.approx([z(1.0, x_q1), z(0.0, x_q1), 0.0, 0.0, 0.0])  # run:x not pooled for q2
    assert columns[:, 1] == pytest.approx([z(y_q1[0], y_q1), z(0.0, y_q1), z(1.0, y_q2), z(0.0, y_q2), 0.0])
    alike_rows = [("q5", "a", "run:x", 1), ("q5", "b", "run:x", 1)]
    _, alike = system_columns(system_discounts(alike_rows), [("q5", "a")], [("q5", "a"), ("q5", "b")])
    assert alike.tolist() == [[0.0]]  # every reference pair ranked alike: no spread to scale by
    model = RelevanceModel("m", 0.0, (0.0,) * len(FEATURES) + (1.0, 0.0), systems=systems)
    assert model.p_relevant(np.zeros((1, len(FEATURES))))[0] == pytest.approx(0.5)  # a query no system was pooled for
    assert "system:run:x" in model.as_dict()["weights"]
    with pytest.raises(ValueError):  # a row wider than the model: columns it was not fitted on
        model.p_relevant(np.zeros((1, len(FEATURES) + 3)))
    assert PRIOR.p_relevant(np.hstack([np.zeros((1, len(FEATURES))), columns[:1]]))[0] == pytest.approx(
        PRIOR.p_relevant(np.zeros((1, len(FEATURES))))[0]
    )  # the prior weighs no system's column


def test_each_pooled_systems_scores_are_a_column_on_one_scale_for_every_query():
    from testset_builder.labels.systems import SCORE_CLIP, score_columns, system_scores

    rows = [  # (query, chunk, system, rank, score), as the pool stores them
        ("q1", "a", "run:x", 1, 9.0), ("q1", "b", "run:x", 2, 6.0), ("q2", "c", "run:x", 1, 1.0),
        ("q2", "d", "run:x", 2, None), ("q1", "a", "run:flat", 1, 2.0), ("q2", "c", "run:flat", 1, 2.0),
    ]  # fmt: skip
    scores = system_scores(rows)
    assert scores["run:x"] == {("q1", "a"): 9.0, ("q1", "b"): 6.0, ("q2", "c"): 1.0}  # no score: left out
    reference = [("q1", "a"), ("q1", "b"), ("q1", "z"), ("q2", "c"), ("q2", "d")]
    keys = [("q1", "a"), ("q1", "z"), ("q2", "c"), ("q3", "a")]
    names, columns = score_columns(scores, keys, reference)
    assert names == ("score:run:flat", "score:run:x")
    # one scale for every query: the reference pairs of both queries, a left-out pair at its query's lowest score
    scale = np.array([9.0, 6.0, 6.0, 1.0, 1.0])  # q1: a, b, z (as b); q2: c, d (as c)
    scale = np.clip(scale, *np.quantile(scale, [0.01, 0.99]))
    z = lambda value: (value - scale.mean()) / scale.std()  # noqa: E731
    assert columns[:, 1] == pytest.approx([z(9.0), z(6.0), z(1.0), 0.0])  # q3: not pooled for it, the mean
    assert columns[:, 0].tolist() == [0.0] * 4  # every score alike: nothing to weigh
    outlying = {"run:o": {("q1", str(i)): float(i) for i in range(200)} | {("q1", "far"): -1e9}}
    everything = list(outlying["run:o"])
    _, clipped = score_columns(outlying, everything, everything)
    assert clipped[-1, 0] == -SCORE_CLIP  # a sentinel score weighs no more than a few deviations
    assert clipped[:-1, 0].std() > 0.9  # and leaves the others their spread


def test_a_refit_weighs_the_one_pooled_system_that_knows_above_the_many_that_do_not(pair_queue, capsys):
    import zlib

    from testset_builder.tables import Run

    ws, items = pair_queue, pair_queue.items
    relevant = lambda q, c: zlib.crc32(f"{q} {c}".encode()) % 3 == 0  # noqa: E731  nothing in the text says it
    runs = []
    for name in ("knows", "blind-1", "blind-2", "blind-3", "blind-4"):
        scores = {}
        for query_id in ("q-ndcg", "q-recall-at-k"):
            chunks = [i.chunk_id for i in items if i.query_id == query_id]
            if name == "knows":
                order = sorted(chunks, key=lambda c: (not relevant(query_id, c), c))
            else:  # an order unrelated to relevance, each blind system its own
                order = sorted(chunks, key=lambda c: zlib.crc32(f"{name} {query_id} {c}".encode()))
            scores[query_id] = {c: float(len(order) - r) for r, c in enumerate(order)}
        runs.append(Run.from_dict(scores, name=name))
    refitted = pooled_graded_and_estimated(ws, runs, relevant, capsys)
    assert refitted["validation"]["kept"], refitted["validation"]
    weights = refitted["model"]["weights"]
    knows = weights["system:run:knows"]
    assert knows > 0 and all(knows > abs(weights[f"system:run:blind-{n}"]) for n in range(1, 5)), weights


def test_a_refit_reads_the_pooled_systems_scores_from_the_pool_and_weighs_the_one_that_knows(pair_queue, capsys):
    import zlib

    from testset_builder.tables import Run

    ws, items = pair_queue, pair_queue.items
    relevant = lambda q, c: zlib.crc32(f"{q} {c}".encode()) % 3 == 0  # noqa: E731  nothing in the text says it
    jitter = lambda name, q, c: (zlib.crc32(f"{name} {q} {c}".encode()) % 1000) / 1000  # noqa: E731
    runs = []
    for name in ("knows", "blind"):
        scores = {}
        for query_id in ("q-ndcg", "q-recall-at-k"):
            chunks = [i.chunk_id for i in items if i.query_id == query_id]
            gain = (lambda c: 2.0 * relevant(query_id, c)) if name == "knows" else (lambda c: 0.0)  # noqa: B023
            scores[query_id] = {c: gain(c) + jitter(name, query_id, c) for c in chunks}
        runs.append(Run.from_dict(scores, name=name))
    refitted = pooled_graded_and_estimated(ws, runs, relevant, capsys)
    assert refitted["validation"]["kept"], refitted["validation"]
    weights = refitted["model"]["weights"]
    assert weights["system:score:run:knows"] > abs(weights["system:score:run:blind"]), weights


def pooled_graded_and_estimated(ws, runs, relevant, capsys) -> dict:
    """Pool ``runs`` into the workspace (as `propose --runs` does), grade every queued pair as ``relevant`` says,
    and return what `estimate --json` printed."""
    import json

    from testset_builder.cli import main
    from testset_builder.retrieval.pool import run_candidates
    from testset_builder.stages import review
    from testset_builder.store import rows

    depth = max(len(by) for run in runs for by in run.to_dict().values())
    queries = {q for run in runs for q in run.to_dict()}
    candidates, _ = run_candidates(runs, depth, queries, lambda ids: ids)
    with ws.transaction() as db:
        rows.put_candidates(db, candidates)
    for item in ws.items:
        review.submit(ws, "ann", item.item_id, "grade", item.item_id, grade=int(relevant(item.query_id, item.chunk_id)))
    assert main(["estimate", "--workspace", str(ws.root), "--json"]) == 0
    return json.loads(capsys.readouterr().out)
