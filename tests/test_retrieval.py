"""BM25 over chunks and reciprocal rank fusion."""

from __future__ import annotations

import json

import pytest

from testset_builder.export import read_qrels
from testset_builder.metrics import evaluate
from testset_builder.retrieval import BM25Index, reciprocal_rank_fusion
from testset_builder.tables import Run


def test_bm25_on_scifact_reaches_the_published_figures_and_is_cached(scifact_dir, tmp_path):
    corpus = [json.loads(line) for line in (scifact_dir / "corpus.jsonl").open(encoding="utf-8")]
    queries = {q["_id"]: q["text"] for q in map(json.loads, (scifact_dir / "queries.jsonl").open(encoding="utf-8"))}
    qrels = read_qrels(scifact_dir / "qrels" / "test.tsv")
    ids, texts = [d["_id"] for d in corpus], [f"{d['title']} {d['text']}" for d in corpus]
    index = BM25Index.cached(tmp_path / "indexes", ids, texts)
    test_ids = qrels.query_ids()
    run = index.search(test_ids, [queries[q] for q in test_ids], k=100)
    result = evaluate(qrels, run, "ndcg@10,recall@100")
    assert result.mean("ndcg@10") == pytest.approx(0.686, abs=0.005)
    assert result.mean("recall@100") == pytest.approx(0.913, abs=0.005)
    (cached_dir,) = [p for p in (tmp_path / "indexes").iterdir()]
    mtime = cached_dir.stat().st_mtime_ns
    again = BM25Index.cached(tmp_path / "indexes", ids, texts)
    assert cached_dir.stat().st_mtime_ns == mtime and again.chunk_ids == ids
    assert again.search(test_ids[:5], [queries[q] for q in test_ids[:5]], k=10).to_dict() == index.search(test_ids[:5], [queries[q] for q in test_ids[:5]], k=10).to_dict()


def test_rrf_adds_reciprocal_ranks_with_k_60():
    a = Run.from_dict({"q": {"x": 3.0, "y": 2.0, "z": 1.0}})
    b = Run.from_dict({"q": {"y": 0.9, "w": 0.5}})
    fused = reciprocal_rank_fusion([a, b]).to_dict()["q"]
    assert fused == pytest.approx({"x": 1 / 61, "y": 1 / 62 + 1 / 61, "z": 1 / 63, "w": 1 / 62})
    assert list(reciprocal_rank_fusion([a, b], depth=2).to_dict()["q"]) == ["y", "x"]
