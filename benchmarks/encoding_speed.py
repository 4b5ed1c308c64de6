"""Dense encoding: today's PyTorch path (sentence-transformers) against ONNX Runtime with int8 weights, on SciFact.

For each encoder: texts a second over the corpus (title and abstract, 256 tokens at most), then what the switch
costs in quality, all measured in this run:
- dense retrieval on SciFact's test queries (recall@100, nDCG@10);
- the relevance estimate's ROC AUC on SciFact's pools (BM25, dense and their RRF fusion, top ``--depth`` each),
  the shipped prior scoring each encoder's own features.
The cosine between the two encoders' embeddings of each text is reported too. The issue's bar: recall@100 and the
estimate's AUC may drop by at most 0.005.

    python benchmarks/encoding_speed.py [--texts N] [--depth 30]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SCIFACT = Path(os.environ.get("TESTSET_BUILDER_SCIFACT", ROOT.parent / "shared" / "data" / "scifact"))

import testset_builder.labels.features  # noqa: E402
import testset_builder.labels.fitting  # noqa: E402
import testset_builder.labels.prior  # noqa: E402
from testset_builder.export import read_qrels  # noqa: E402
from testset_builder.metrics import evaluate  # noqa: E402
from testset_builder.retrieval import BM25Index, dense  # noqa: E402
from testset_builder.tables import Run  # noqa: E402

RRF_K = 60


def _top(scores: np.ndarray, k: int) -> np.ndarray:
    top = np.argpartition(-scores, min(k, len(scores) - 1))[:k]
    return top[np.argsort(-scores[top], kind="stable")]


def quality(name: str, ids, texts, queries, qrels, bm25_rows, depth: int) -> dict:
    """Encode with ``name``; dense retrieval figures and the prior's AUC on pools built with this encoder."""
    dense.encoder(name)  # loaded (and, for ONNX, exported once) before the clock starts
    started = time.perf_counter()
    corpus = dense.encode(texts, name)
    seconds = time.perf_counter() - started
    query_ids = sorted(queries)
    encoded = dense.encode([queries[q] for q in query_ids], name)
    scores = encoded @ corpus.T
    run = Run.from_dict(
        {q: {ids[j]: float(scores[i, j]) for j in _top(scores[i], 100)} for i, q in enumerate(query_ids)}
    )
    figures = evaluate(qrels, run, "recall@100,ndcg@10").per_query
    chunk_words = [testset_builder.labels.features.words(t) for t in texts]
    blocks, labels = [], []
    relevant = {q: {d for d, g in by.items() if g >= 1} for q, by in qrels.to_dict().items()}
    for i, q in enumerate(query_ids):
        bm25 = np.asarray(bm25_rows[i], dtype=float)
        by_bm25, by_dense = _top(bm25, depth), _top(scores[i], depth)
        fused = np.zeros(len(ids))
        for order in (_top(bm25, 100), _top(scores[i], 100)):
            fused[order] += 1.0 / (RRF_K + 1 + np.arange(len(order)))
        members = list(dict.fromkeys([*by_bm25.tolist(), *by_dense.tolist(), *_top(fused, depth).tolist()]))
        blocks.append(
            testset_builder.labels.features.query_features(
                scores[i].astype(float),
                bm25,
                members,
                testset_builder.labels.features.words(queries[q]),
                [chunk_words[j] for j in members],
                [None] * len(members),
            )
        )
        labels.extend(ids[j] in relevant.get(q, set()) for j in members)
    x = np.vstack(blocks)
    auc = testset_builder.labels.fitting.roc_auc(
        testset_builder.labels.prior.PRIOR.p_relevant(x), np.asarray(labels, dtype=float)
    )
    return {
        "texts_per_second": len(texts) / seconds,
        "recall@100": float(np.mean(figures["recall@100"])),
        "ndcg@10": float(np.mean(figures["ndcg@10"])),
        "estimate_auc": auc,
        "vectors": corpus,
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=0, help="encode only the first N documents (0: all)")
    parser.add_argument("--depth", type=int, default=30)
    args = parser.parse_args(argv)
    if not (SCIFACT / "corpus.jsonl").is_file() or not dense.dense_available():
        print(f"encoding speed: needs SciFact at {SCIFACT} and the dense extra; skipped")
        return {}
    documents = [json.loads(line) for line in (SCIFACT / "corpus.jsonl").open(encoding="utf-8")]
    if args.texts:
        documents = documents[: args.texts]
    ids = [d["_id"] for d in documents]
    texts = [(d.get("title", "") + "\n" + d["text"]).strip() for d in documents]
    qrels = read_qrels(SCIFACT / "qrels" / "test.tsv")
    known = set(ids)
    wanted = {q for q, by in qrels.to_dict().items() if set(by) & known}
    queries = {
        row["_id"]: row["text"]
        for row in map(json.loads, (SCIFACT / "queries.jsonl").open(encoding="utf-8"))
        if row["_id"] in wanted
    }
    bm25 = BM25Index(ids, texts)
    query_ids = sorted(queries)
    bm25_rows = bm25.scores([queries[q] for q in query_ids])
    print(f"SciFact: {len(texts)} documents, {len(queries)} queries; load {os.getloadavg()[0]:.1f}")
    results = {}
    for name in (dense.TORCH_MODEL, dense.ONNX_INT8_MODEL):
        results[name] = quality(name, ids, texts, queries, qrels, bm25_rows, args.depth)
    torch_run, onnx_run = results[dense.TORCH_MODEL], results[dense.ONNX_INT8_MODEL]
    cosines = np.sum(torch_run.pop("vectors") * onnx_run.pop("vectors"), axis=1)
    for name, figures in results.items():
        print(
            f"  {name:<32} {figures['texts_per_second']:6.1f} texts/s  recall@100 {figures['recall@100']:.4f}  "
            f"nDCG@10 {figures['ndcg@10']:.4f}  estimate AUC {figures['estimate_auc']:.4f}"
        )
    print(
        f"  ONNX int8 vs PyTorch: {onnx_run['texts_per_second'] / torch_run['texts_per_second']:.2f}x the texts/s; "
        f"recall@100 {onnx_run['recall@100'] - torch_run['recall@100']:+.4f}, nDCG@10 "
        f"{onnx_run['ndcg@10'] - torch_run['ndcg@10']:+.4f}, "
        f"AUC {onnx_run['estimate_auc'] - torch_run['estimate_auc']:+.4f}; "
        f"cosine between their embeddings: mean {cosines.mean():.4f}, min {cosines.min():.4f}"
    )
    return {"encoders": results, "cosine_mean": float(cosines.mean()), "cosine_min": float(cosines.min())}


if __name__ == "__main__":
    main(sys.argv[1:])
