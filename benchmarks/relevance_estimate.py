"""The relevance estimate on SciFact: how well does it separate human-relevant pairs from the rest, before any
verdict and after 50, 100 and 200 simulated ones?

Pairs are each query's pool (BM25 top k, dense top k, their RRF fusion top k; k = ``--depth``, 10 by default).
SciFact's labels are binary and only cover documents the annotators saw, so a pool member without a label counts
as NOT relevant. Figures on the 300 *test* queries: ROC AUC and Cohen's kappa (at P >= 0.5) of dense alone, BM25
alone, the shipped prior (``testset_builder.stages.estimate.PRIOR``), and the estimate refitted on simulated
verdicts (human qrels answering as the reviewer): drawn uniformly, and drawn with probability favouring uncertain
estimates (p(1-p) + 0.05); AUC measured on the pairs no verdict covered, averaged over ``--repeats`` seeds.

``--fit`` refits the prior on the 809 *train* queries and prints the coefficients to ship.

    python benchmarks/relevance_estimate.py [--fit] [--depth 10] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"

from testset_builder.config import ChunkingConfig  # noqa: E402
from testset_builder.corpus.ingest import ingest  # noqa: E402
from testset_builder.corpus.loaders import load_sources  # noqa: E402
from testset_builder.export import read_qrels  # noqa: E402
from testset_builder.metrics.agreement import cohen_kappa  # noqa: E402
from testset_builder.records import Query, QueryOrigin  # noqa: E402
from testset_builder.retrieval.indexes import WorkspaceIndexes  # noqa: E402
from testset_builder.retrieval.pool import pool  # noqa: E402
from testset_builder.stages.estimate import FEATURES, PRIOR, fit, query_features, refit, words  # noqa: E402
from testset_builder.store import open_workspace  # noqa: E402


def roc_auc(scores, labels) -> float | None:
    """Mann-Whitney: P(a relevant pair scores above a non-relevant one), ties half."""
    from scipy.stats import rankdata

    scores, labels = np.asarray(scores, dtype=float), np.asarray(labels, dtype=bool)
    positives, negatives = labels.sum(), (~labels).sum()
    if not positives or not negatives:
        return None
    ranks = rankdata(scores)
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def pairs_and_features(indexes: WorkspaceIndexes, queries: list[Query], relevant: dict, depth: int):
    """The pooled pairs of ``queries``, their feature matrix and human labels."""
    runs = indexes.runs(queries, k=depth)
    pooled: dict[str, list[str]] = {}
    for candidate in pool(runs, depth, depth):
        pooled.setdefault(candidate.query_id, [])
        if candidate.chunk_id not in pooled[candidate.query_id]:
            pooled[candidate.query_id].append(candidate.chunk_id)
    position = {c: i for i, c in enumerate(indexes.chunk_ids)}
    chunk_words: dict[str, set[str]] = {}
    dense = indexes.indexes.get("dense")
    dense_rows = dense.scores([q.text for q in queries]) if dense is not None else None
    bm25_rows = indexes.indexes["bm25"].scores([q.text for q in queries])
    blocks, labels, keys = [], [], []
    for row, query in enumerate(queries):
        chunks = pooled.get(query.query_id, [])
        if not chunks:
            continue
        for c in chunks:
            if c not in chunk_words:
                chunk_words[c] = words(indexes.passages[c])
        blocks.append(
            query_features(
                None if dense_rows is None else dense_rows[row], bm25_rows[row], [position[c] for c in chunks],
                words(query.text), [chunk_words[c] for c in chunks], [None] * len(chunks),
            )
        )  # fmt: skip
        labels.extend(c in relevant.get(query.query_id, set()) for c in chunks)
        keys.extend((query.query_id, c) for c in chunks)
    return np.vstack(blocks), np.asarray(labels, dtype=float), keys


def simulate(x, y, model, budget: int, strategy: str, seed: int) -> tuple[float | None, float | None]:
    """Draw ``budget`` verdicts, refit, and measure AUC and kappa on the pairs left."""
    chance = np.random.default_rng(seed)
    n = len(y)
    if strategy == "uniform":
        weights = np.ones(n)
    else:
        p = model.p_relevant(x)
        weights = p * (1 - p) + 0.05
    chosen = chance.choice(n, size=budget, replace=False, p=weights / weights.sum())
    refitted = refit(x[chosen], y[chosen], model)
    rest = np.setdiff1d(np.arange(n), chosen)
    p_rest = refitted.p_relevant(x[rest])
    return roc_auc(p_rest, y[rest]), cohen_kappa(list(p_rest >= 0.5), list(y[rest] >= 0.5))


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=SCIFACT)
    parser.add_argument("--workspace", type=Path, default=ROOT / "benchmarks" / ".cache" / "judge-agreement")
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--fit", action="store_true", help="refit the prior on the train queries and print it")
    args = parser.parse_args(argv)
    if not args.data.is_dir():
        sys.exit(f"SciFact not found at {args.data}")

    texts = {q["_id"]: q["text"] for q in map(json.loads, (args.data / "queries.jsonl").open(encoding="utf-8"))}
    report: dict = {"depth": args.depth, "features": list(FEATURES)}
    with open_workspace(args.workspace) as ws:
        started = time.perf_counter()
        ingest(ws, load_sources([args.data]), ChunkingConfig(chunker="prechunked", size=1, overlap=0), [args.data])
        indexes = WorkspaceIndexes(ws, ("bm25", "dense"))
        split: dict = {}
        for name in ("train", "test"):
            qrels = read_qrels(args.data / "qrels" / f"{name}.tsv").to_dict()
            relevant = {q: {d for d, g in by.items() if g >= 1} for q, by in qrels.items()}
            queries = [Query(query_id=q, text=texts[q], origin=QueryOrigin.real) for q in sorted(qrels)]
            split[name] = pairs_and_features(indexes, queries, relevant, args.depth)
        print(f"features of {sum(len(s[1]) for s in split.values())} pairs in {time.perf_counter() - started:.1f} s")

    model = PRIOR
    if args.fit:
        x, y, _ = split["train"]
        x = x.copy()
        x[:, FEATURES.index("llm")] = 0.0  # the prior gives the LLM no weight (the embedded judge is at chance)
        x[:, FEATURES.index("llm_missing")] = 0.0
        model = fit(x, y, PRIOR.name)
        print("fitted on train:", json.dumps(model.as_dict(), indent=2))
        print(f"    bias={model.bias:.4f},\n    weights=({', '.join(f'{w:.4f}' for w in model.weights)}),")
        report["fitted"] = model.as_dict()

    x, y, _ = split["test"]
    positive = int(y.sum())
    print(
        f"\nSciFact test: {len(y)} pooled pairs (depth {args.depth} per retriever and fused), {positive} human-relevant"
    )
    rows = {
        "dense alone": x[:, FEATURES.index("dense")],
        "bm25 alone": x[:, FEATURES.index("bm25")],
        f"estimate ({model.name})": model.p_relevant(x),
    }
    report["auc"] = {}
    for label, scores in rows.items():
        auc = roc_auc(scores, y)
        report["auc"][label] = auc
        kappa = cohen_kappa(list(model.p_relevant(x) >= 0.5), list(y >= 0.5)) if "estimate" in label else None
        shown = f", kappa at 0.5 {kappa:.3f}" if kappa is not None else ""
        print(f"  {label:<40} AUC {auc:.3f}{shown}")
    report["refit"] = []
    for strategy in ("uniform", "uncertain"):
        for budget in (50, 100, 200):
            results = [simulate(x, y, model, budget, strategy, seed) for seed in range(args.repeats)]
            aucs = [a for a, _ in results if a is not None]
            kappas = [k for _, k in results if k is not None]
            row = {
                "strategy": strategy, "verdicts": budget, "auc": float(np.mean(aucs)), "auc_min": float(min(aucs)),
                "kappa": float(np.mean(kappas)) if kappas else None,
            }  # fmt: skip
            report["refit"].append(row)
            print(
                f"  refit on {budget:>3} verdicts drawn {strategy:<9}: AUC {row['auc']:.3f} (min {row['auc_min']:.3f} "
                f"over {args.repeats} seeds), kappa {row['kappa']:.3f}"
            )
    random.seed(0)
    return report


if __name__ == "__main__":
    main()
