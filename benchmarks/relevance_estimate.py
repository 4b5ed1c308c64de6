"""The relevance estimate on SciFact: how well does it separate human-relevant pairs from the rest, before any
verdict and after 50, 100 and 200 simulated ones?

Pairs are each query's pool (BM25 top k, dense top k, their RRF fusion top k; k = ``--depth``, 10 by default).
SciFact's labels are binary and only cover documents the annotators saw, so a pool member without a label counts
as NOT relevant. Figures on the 300 *test* queries: ROC AUC and Cohen's kappa (at P >= 0.5) of dense alone, BM25
alone, the shipped prior (``testset_builder.stages.prior.PRIOR``), and the estimate refitted on simulated
verdicts (human qrels answering as the reviewer): drawn uniformly, and drawn by the review queue's own selection
(likely relevant pairs likelier, known probabilities, verdicts weighted by 1 / probability in the refit), from half
the queries; AUC measured on the other half's pairs, before and after the refit, averaged over ``--repeats`` seeds.

``--fit`` refits the prior on the 809 *train* queries and prints the coefficients to ship.

    python benchmarks/relevance_estimate.py [--fit] [--depth 10] [--repeats 5]
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"

import testset_builder.labels.design  # noqa: E402
import testset_builder.labels.features  # noqa: E402
import testset_builder.labels.model  # noqa: E402
import testset_builder.labels.prior  # noqa: E402
from testset_builder.config import ChunkingConfig  # noqa: E402
from testset_builder.corpus.ingest import ingest  # noqa: E402
from testset_builder.corpus.loaders import load_sources  # noqa: E402
from testset_builder.export import read_qrels  # noqa: E402
from testset_builder.labels.agreement import cohen_kappa  # noqa: E402
from testset_builder.records import Query, QueryOrigin  # noqa: E402
from testset_builder.retrieval.indexes import WorkspaceIndexes  # noqa: E402
from testset_builder.retrieval.pool import pool  # noqa: E402
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
    runs = indexes.runs(queries, k=max(depth, 100))  # as propose pools: the fusion sees each retriever's top 100
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
                chunk_words[c] = testset_builder.labels.features.words(indexes.passages[c])
        blocks.append(
            testset_builder.labels.features.query_features(
                None if dense_rows is None else dense_rows[row], bm25_rows[row], [position[c] for c in chunks],
                testset_builder.labels.features.words(query.text), [chunk_words[c] for c in chunks],
                [None] * len(chunks),
            )
        )  # fmt: skip
        labels.extend(c in relevant.get(query.query_id, set()) for c in chunks)
        keys.extend((query.query_id, c) for c in chunks)
    return np.vstack(blocks), np.asarray(labels, dtype=float), keys


def mean(values) -> float | None:
    defined = [v for v in values if v is not None]
    return float(np.mean(defined)) if defined else None


def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def simulate(x, y, keys, model, budget: int, strategy: str, seed: int, strength: float) -> dict:
    """Split the queries in two at random; draw about ``budget`` verdicts from the first half's pairs, refit, and
    measure the refit and the starting model on the other half's pairs (held-out queries: the pairs a reviewer
    never saw, and a fair comparison however the draw favoured some pairs). ``uniform``: every pair alike;
    ``selection``: the review queue's own draw (stages/selection.py: likely relevant pairs likelier,
    known probabilities), the refit weighting each verdict by 1 / its probability."""
    chance = np.random.default_rng(seed)
    queries = sorted({q for q, _ in keys})
    first = set(chance.permutation(queries)[: len(queries) // 2])
    train = np.array([i for i, (q, _) in enumerate(keys) if q in first])
    test = np.array([i for i, (q, _) in enumerate(keys) if q not in first])
    share = 1.0 if strategy == "uniform" else 0.2
    probabilities = testset_builder.labels.design.inclusion_probabilities(model.p_relevant(x[train]), budget, share)
    drawn = np.array([d.index for d in testset_builder.labels.design.draw(probabilities, seed) if d.drawn], dtype=int)
    weights = None if strategy == "uniform" else 1.0 / probabilities[drawn]
    refitted = testset_builder.labels.model.refit(x[train][drawn], y[train][drawn], model, strength, weights)
    p = refitted.p_relevant(x[test])
    return {
        "auc": roc_auc(p, y[test]),
        "auc_before": roc_auc(model.p_relevant(x[test]), y[test]),
        "kappa": cohen_kappa(list(p >= 0.5), list(y[test] >= 0.5)),
        "verdicts": len(drawn),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=SCIFACT)
    parser.add_argument("--workspace", type=Path, default=ROOT / "benchmarks" / ".cache" / "judge-agreement")
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--fit", action="store_true", help="refit the prior on the train queries and print it")
    parser.add_argument(
        "--strengths",
        default=str(testset_builder.labels.model.REFIT_STRENGTH),
        help="the refit's pull towards the prior (comma-separated to compare)",
    )
    args = parser.parse_args(argv)
    if not args.data.is_dir():
        sys.exit(f"SciFact not found at {args.data}")

    texts = {q["_id"]: q["text"] for q in map(json.loads, (args.data / "queries.jsonl").open(encoding="utf-8"))}
    report: dict = {"depth": args.depth, "features": list(testset_builder.labels.features.FEATURES)}
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

    model = testset_builder.labels.prior.PRIOR
    if args.fit:
        x, y, _ = split["train"]
        x = x.copy()
        # the prior gives the LLM no weight (the embedded judge is at chance)
        x[:, testset_builder.labels.features.FEATURES.index("llm")] = 0.0
        x[:, testset_builder.labels.features.FEATURES.index("llm_missing")] = 0.0
        model = testset_builder.labels.model.fit(x, y, testset_builder.labels.prior.PRIOR.name)
        lexical_x = x.copy()  # dense columns at 0 while fitting: their weights stay 0, whatever constant they hold
        for column in ("dense", "dense_gap", "dense_log_rank"):
            lexical_x[:, testset_builder.labels.features.FEATURES.index(column)] = 0.0
        lexical = testset_builder.labels.model.fit(lexical_x, y, testset_builder.labels.prior.PRIOR_LEXICAL.name)
        for fitted in (model, lexical):
            print(f"fitted on train ({fitted.name}):", json.dumps(fitted.as_dict(), indent=2))
            print(f"    bias={fitted.bias:.4f},\n    weights=({', '.join(f'{w:.4f}' for w in fitted.weights)}),")
        report["fitted"] = [model.as_dict(), lexical.as_dict()]

    x, y, keys = split["test"]
    positive = int(y.sum())
    print(
        f"\nSciFact test: {len(y)} pooled pairs (depth {args.depth} per retriever and fused), {positive} human-relevant"
    )
    lexical_model = lexical if args.fit else testset_builder.labels.prior.PRIOR_LEXICAL
    rows = {
        f"estimate without dense ({lexical_model.name})": lexical_model.p_relevant(
            testset_builder.labels.features.without_dense(x, len(indexes.chunk_ids))
        ),
        "dense alone": x[:, testset_builder.labels.features.FEATURES.index("dense")],
        "bm25 alone": x[:, testset_builder.labels.features.FEATURES.index("bm25")],
        f"estimate ({model.name})": model.p_relevant(x),
    }
    report["auc"] = {}
    for label, scores in rows.items():
        auc = roc_auc(scores, y)
        report["auc"][label] = auc
        kappa = cohen_kappa(list(scores >= 0.5), list(y >= 0.5)) if "estimate" in label else None
        shown = f", kappa at 0.5 {kappa:.3f}" if kappa is not None else ""
        print(f"  {label:<40} AUC {auc:.3f}{shown}")
    # a prior that knows only dense similarity stands in for a corpus unlike SciFact, where the shipped prior is off
    weak = testset_builder.labels.model.RelevanceModel(
        "dense-only", -2.0, tuple(5.0 if f == "dense_gap" else 0.0 for f in testset_builder.labels.features.FEATURES)
    )
    print(f"  {'a weak prior (dense gap only)':<40} AUC {roc_auc(weak.p_relevant(x), y):.3f}")
    report["refit"] = []
    for start, strength, strategy, budget in itertools.product(
        (model, weak), [float(s) for s in args.strengths.split(",")], ("uniform", "selection"), (50, 100, 200)
    ):
        results = [simulate(x, y, keys, start, budget, strategy, seed, strength) for seed in range(args.repeats)]
        row = {
            "from": start.name, "strength": strength, "strategy": strategy, "verdicts": budget,
            **{key: mean([r[key] for r in results]) for key in ("auc", "auc_before", "kappa")},
        }  # fmt: skip
        report["refit"].append(row)
        print(
            f"  refit of {start.name} (strength {strength:g}) on {budget:>3} verdicts drawn {strategy:<9}: "
            f"AUC on held-out queries {fmt(row['auc'])} (before: {fmt(row['auc_before'])}), kappa {fmt(row['kappa'])}"
        )
    return report


if __name__ == "__main__":
    main()
