"""Real data: a BM25 run over the SciFact corpus scores exactly as trec_eval scores it."""

from __future__ import annotations

import json
import math

import pytest
import pytrec_eval
from conftest import require

from testset_builder.export import read_qrels, read_run, write_trec_run
from testset_builder.metrics import evaluate
from testset_builder.tables import Run

bm25s = require("bm25s")
Stemmer = require("Stemmer")

MEASURES = {"ndcg_cut.10", "recall.10,100", "P.10", "recip_rank", "map", "Rprec", "success.5", "ndcg"}
OURS_TO_TREC = {
    "ndcg@10": "ndcg_cut_10",
    "recall@10": "recall_10",
    "recall@100": "recall_100",
    "precision@10": "P_10",
    "mrr": "recip_rank",
    "map": "map",
    "r_precision": "Rprec",
    "hit_rate@5": "success_5",
    "ndcg": "ndcg",
}


@pytest.fixture(scope="module")
def scifact_bm25_run(tmp_path_factory, request):
    scifact = request.getfixturevalue("scifact_dir")
    corpus = [json.loads(line) for line in (scifact / "corpus.jsonl").open(encoding="utf-8")]
    queries = {q["_id"]: q["text"] for q in map(json.loads, (scifact / "queries.jsonl").open(encoding="utf-8"))}
    qrels = read_qrels(scifact / "qrels" / "test.tsv")
    test_ids = qrels.query_ids()
    stemmer = Stemmer.Stemmer("english")
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(
            [f"{d['title']} {d['text']}" for d in corpus], stopwords="en", stemmer=stemmer, show_progress=False
        ),
        show_progress=False,
    )
    tokens = bm25s.tokenize([queries[q] for q in test_ids], stopwords="en", stemmer=stemmer, show_progress=False)
    docs, scores = retriever.retrieve(tokens, k=100, show_progress=False)
    run = {
        query_id: {corpus[int(d)]["_id"]: float(s) for d, s in zip(docs[i], scores[i])}
        for i, query_id in enumerate(test_ids)
    }
    path = tmp_path_factory.mktemp("scifact") / "bm25.trec"
    write_trec_run(Run.from_dict(run, name="bm25"), path)
    return scifact / "qrels" / "test.tsv", path


def test_scifact_bm25_scores_match_trec_eval_exactly_from_files(scifact_bm25_run):
    qrels_path, run_path = scifact_bm25_run
    ours = evaluate(read_qrels(qrels_path), read_run(run_path), list(OURS_TO_TREC))
    with run_path.open() as handle:
        trec_run = pytrec_eval.parse_run(handle)
    reference = pytrec_eval.RelevanceEvaluator(read_qrels(qrels_path).to_dict(), MEASURES).evaluate(trec_run)
    assert len(reference) == len(ours.query_ids) == 300
    for query, values in ours.per_query_dict().items():
        for metric, value in values.items():
            assert math.isclose(value, reference[query][OURS_TO_TREC[metric]], abs_tol=1e-12), (query, metric)


def test_scifact_bm25_lands_on_the_published_bm25_figures(scifact_bm25_run):
    qrels_path, run_path = scifact_bm25_run
    result = evaluate(read_qrels(qrels_path), read_run(run_path), "ndcg@10,recall@100,mrr")
    assert result.mean("ndcg@10") == pytest.approx(0.686, abs=0.005)
    assert result.mean("recall@100") == pytest.approx(0.913, abs=0.005)
    assert result.mean("mrr") == pytest.approx(0.653, abs=0.005)
