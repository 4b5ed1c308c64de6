"""score over many runs (one table, significance against the best run with Holm, recall@k curves and the smallest k
reaching a target recall) and compare's regression gate, checked against pytrec_eval, scipy and real SciFact runs."""

from __future__ import annotations

import json

import numpy as np
import pytest
import pytrec_eval
from conftest import require
from scipy import stats as scipy_stats

from testset_builder.cli import main
from testset_builder.cli.output import EXIT_REGRESSION
from testset_builder.export import read_qrels, write_beir_qrels, write_trec_run
from testset_builder.tables import Qrels, Run


def graded_set(rng, queries: int = 60, relevant: int = 4, corpus: int = 400):
    return {
        f"q{i:03d}": {f"d{j:04d}": int(rng.integers(1, 3)) for j in rng.choice(corpus, relevant, replace=False)}
        for i in range(queries)
    }


def noisy_run(rng, qrels: dict, quality: float, corpus: int = 400, depth: int = 120) -> dict:
    """Scores: relevant documents get a boost of ``quality`` over uniform noise; 120 results per query."""
    run = {}
    for query, judged in qrels.items():
        docs = rng.choice(corpus, depth, replace=False)
        ids = [f"d{d:04d}" for d in docs]
        ids = list(dict.fromkeys(list(judged)[: 3 if quality > 0.5 else 2] + ids))[:depth]
        run[query] = {doc: float(rng.random() + (quality if doc in judged else 0.0)) for doc in ids}
    return run


@pytest.fixture
def three_runs(tmp_path):
    rng = np.random.default_rng(12)
    qrels = graded_set(rng)
    qrels_path = tmp_path / "qrels.tsv"
    write_beir_qrels(Qrels.from_dict(qrels), qrels_path)
    (tmp_path / "runs").mkdir()
    runs = {}
    for name, quality in (("strong", 0.9), ("middle", 0.5), ("weak", 0.1)):
        runs[name] = noisy_run(rng, qrels, quality)
        write_trec_run(Run.from_dict(runs[name], name=name), tmp_path / "runs" / f"{name}.trec")
    return qrels, qrels_path, runs


def holm_by_hand(p: list[float]) -> list[float]:
    order = sorted(range(len(p)), key=lambda i: p[i])
    adjusted, running = [0.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, (len(p) - rank) * p[i])
        adjusted[i] = min(1.0, running)
    return adjusted


def test_score_many_runs_gives_one_table_holm_against_the_best_and_the_smallest_k_reaching_each_target(
    three_runs, capsys
):
    qrels, qrels_path, runs = three_runs
    metrics = "ndcg@10,recall@10"
    argv = ["score", "--qrels", str(qrels_path), "--runs", str(qrels_path.parent / "runs" / "*.trec"), "-m", metrics]
    assert main([*argv, "--target-recall", "0.5,0.9,0.99", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert [r["run"] for r in document["runs"]] == ["middle", "strong", "weak"]  # the glob, sorted

    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall." + ",".join(map(str, range(1, 101)))})
    per_query = {name: evaluator.evaluate(run) for name, run in runs.items()}
    for report in document["runs"]:
        scored = per_query[report["run"]]
        curve = [np.mean([scored[q][f"recall_{k}"] for q in qrels]) for k in range(1, 101)]
        assert report["recall_curve"] == pytest.approx(curve, abs=1e-12)
        for target in (0.5, 0.9, 0.99):
            expected = next((k for k in range(1, 101) if curve[k - 1] >= target - 1e-12), None)
            assert report["target_recall"][str(target)] == expected
    assert any(r["target_recall"]["0.99"] is None for r in document["runs"])  # "not reached by 100" exists here

    for metric, trec_name in (("ndcg@10", "ndcg_cut_10"), ("recall@10", "recall_10")):
        means = {name: np.mean([per_query[name][q][trec_name] for q in qrels]) for name in runs}
        best = max(means, key=means.get)
        assert document["against_best"][metric]["best"] == best
        others = document["against_best"][metric]["runs"]
        raw = [others[name]["p_randomization"] for name in others]
        assert [others[name]["p_adjusted"] for name in others] == pytest.approx(holm_by_hand(raw), abs=1e-12)
        for name, row in others.items():
            differences = np.array([per_query[name][q][trec_name] - per_query[best][q][trec_name] for q in qrels])
            reference = scipy_stats.permutation_test(
                (differences,), np.mean, permutation_type="samples", n_resamples=20_000, random_state=1
            ).pvalue
            assert row["p_randomization"] == pytest.approx(reference, abs=0.01)
            assert row["difference"] == pytest.approx(differences.mean(), abs=1e-12)
    assert document["against_best"]["ndcg@10"]["runs"]["weak"]["significant"]

    assert main([*argv, "--target-recall", "0.5,0.99"]) == 0
    printed = capsys.readouterr().out
    assert "3 runs (60 queries)" in printed and "▼" in printed and "k for 0.99" in printed
    assert "not reached by 100" in printed and "set size: 60 queries" in printed


def test_unquoted_globs_expanded_by_the_shell_and_repeated_runs_both_work(three_runs, capsys):
    _, qrels_path, _ = three_runs
    files = sorted(str(p) for p in (qrels_path.parent / "runs").glob("*.trec"))
    assert main(["score", "--qrels", str(qrels_path), "--runs", *files, "-m", "mrr", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["runs"]) == 3
    assert main(["score", "--qrels", str(qrels_path), "--runs", str(qrels_path.parent / "none*.trec")]) == 1
    assert "no file matches" in capsys.readouterr().err


@pytest.fixture(scope="module")
def scifact_runs(tmp_path_factory, scifact_dir):
    """BM25 over SciFact's test queries; the same run under another tag; and BM25 with the results of a random half
    of the queries shuffled (the degraded candidate)."""
    bm25s = require("bm25s")
    stemmer_module = require("Stemmer")
    scifact = scifact_dir
    corpus = [json.loads(line) for line in (scifact / "corpus.jsonl").open(encoding="utf-8")]
    queries = {q["_id"]: q["text"] for q in map(json.loads, (scifact / "queries.jsonl").open(encoding="utf-8"))}
    qrels_path = scifact / "qrels" / "test.tsv"
    test_ids = read_qrels(qrels_path).query_ids()
    stemmer = stemmer_module.Stemmer("english")
    texts = [f"{d['title']} {d['text']}" for d in corpus]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    tokens = bm25s.tokenize([queries[q] for q in test_ids], stopwords="en", stemmer=stemmer, show_progress=False)
    docs, scores = retriever.retrieve(tokens, k=100, show_progress=False)
    bm25 = {q: {corpus[int(d)]["_id"]: float(s) for d, s in zip(docs[i], scores[i])} for i, q in enumerate(test_ids)}
    rng = np.random.default_rng(0)
    shuffled = set(rng.choice(test_ids, len(test_ids) // 2, replace=False).tolist())
    degraded = {
        q: dict(zip(results, rng.permutation(list(results.values())))) if q in shuffled else results
        for q, results in bm25.items()
    }
    folder = tmp_path_factory.mktemp("gate")
    paths = {}
    for name, run in (("bm25", bm25), ("bm25-again", bm25), ("degraded", degraded)):
        paths[name] = folder / f"{name}.trec"
        write_trec_run(Run.from_dict(run, name=name), paths[name])
    return qrels_path, paths, bm25, degraded, shuffled


def test_the_gate_fails_a_deliberately_degraded_bm25_on_scifact_and_lists_the_queries_that_lost_most(
    scifact_runs, capsys
):
    qrels_path, paths, bm25, degraded, shuffled = scifact_runs
    argv = ["compare", "--qrels", str(qrels_path), str(paths["bm25"]), str(paths["degraded"])]
    assert main([*argv, "--fail-if-worse", "ndcg@10:0.01", "--json"]) == EXIT_REGRESSION
    gate = json.loads(capsys.readouterr().out)["gate"]
    assert gate["failed"] and gate["exit_code"] == EXIT_REGRESSION
    (outcome,) = gate["outcomes"]
    assert outcome["metric"] == "ndcg@10" and outcome["upper_bound"] < -0.01 < 0 and outcome["failed"]

    qrels = read_qrels(qrels_path).to_dict()
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"})
    before, after = evaluator.evaluate(bm25), evaluator.evaluate(degraded)
    loss = {q: after[q]["ndcg_cut_10"] - before[q]["ndcg_cut_10"] for q in qrels}
    lost = outcome["lost_most"]
    assert len(lost) == 10 and {row["query_id"] for row in lost} <= shuffled
    assert [row["difference"] for row in lost] == pytest.approx(sorted(loss.values())[:10], abs=1e-12)
    assert all(row["difference"] == pytest.approx(loss[row["query_id"]], abs=1e-12) for row in lost)

    assert main([*argv, "--fail-if-worse", "ndcg@10:0.01"]) == EXIT_REGRESSION
    captured = capsys.readouterr()
    assert "FAILED" in captured.out and "queries that lost most on ndcg@10" in captured.out
    assert "regression:" in captured.err and f"exit {EXIT_REGRESSION}" in captured.err


def test_the_gate_passes_an_equal_run_and_a_better_one(scifact_runs, capsys):
    qrels_path, paths, *_ = scifact_runs
    gate = ["--fail-if-worse", "ndcg@10:0.01,recall@100:0"]
    equal = ["compare", "--qrels", str(qrels_path), str(paths["bm25"]), str(paths["bm25-again"]), *gate, "--json"]
    assert main(equal) == 0
    outcomes = json.loads(capsys.readouterr().out)["gate"]["outcomes"]
    assert [o["failed"] for o in outcomes] == [False, False] and outcomes[0]["difference"] == 0.0
    better = ["compare", "--qrels", str(qrels_path), str(paths["degraded"]), str(paths["bm25"]), *gate]
    assert main(better) == 0
    assert "passed" in capsys.readouterr().out


def test_a_malformed_gate_is_bad_input_naming_the_flag(capsys):
    from conftest import EXAMPLES

    argv = [
        "compare",
        "--qrels",
        str(EXAMPLES / "qrels.tsv"),
        str(EXAMPLES / "bm25.trec"),
        str(EXAMPLES / "dense.trec"),
    ]
    assert main([*argv, "--fail-if-worse", "ndcg@10:lots"]) == 1
    assert "--fail-if-worse 'ndcg@10:lots'" in capsys.readouterr().err
