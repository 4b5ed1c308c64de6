"""Judge agreement on SciFact: does the candidate pool hold the human-relevant documents, and does the LLM judge
agree with the human labels inside it?

1. Pool recall: the share of human-relevant (query, document) pairs of SciFact's 300 test queries that reach the
   pool, at each depth, for BM25, dense (when the dense extra is installed), their RRF fusion and the union pool
   that ``propose`` builds (each retriever's top k plus the fused top k).
2. The judge: ``propose`` on a seeded sample of test queries at ``--judge-depth``; its grades against the human
   labels inside the pool. SciFact's labels are binary and only cover documents the annotators saw, so a pool
   member without a label counts as NOT relevant (that makes the judge's precision a lower bound). Precision,
   recall and Cohen's kappa on relevant (grade >= 1) vs not; ROC AUC of the judge's P(relevant) where the provider
   gives log-probabilities; calls, tokens, cost and time.
3. The relevance estimate (testset_builder/labels/estimate.py) on the same pairs: ROC AUC and kappa of the LLM
   alone, dense alone, the shipped prior, and the estimate refitted after 50, 100 and 200 verdicts drawn by the
   review queue's own selection (human qrels answering as the reviewer) from half the queries, measured on the
   other half's pairs.

Runs with the embedded local model by default; pass any provider's config (``--config configs/openai.yaml``) to
measure a real judge. The workspace is kept (``--workspace``), so a rerun reads every answer from the cache.

    python benchmarks/judge_agreement.py [--queries 40] [--judge-depth 10] [--config FILE] [--depths 5,10,20,50,100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"

from testset_builder.config import ChunkingConfig, ProposeConfig, resolve_config  # noqa: E402
from testset_builder.corpus.ingest import ingest  # noqa: E402
from testset_builder.corpus.loaders import load_sources  # noqa: E402
from testset_builder.export import read_qrels  # noqa: E402
from testset_builder.export.queries import QueryFile  # noqa: E402
from testset_builder.labels.agreement import cohen_kappa, precision_recall  # noqa: E402
from testset_builder.labels.judge import Judge, JudgePair  # noqa: E402
from testset_builder.llm.roles import open_roles  # noqa: E402
from testset_builder.records import Query, QueryOrigin  # noqa: E402
from testset_builder.retrieval import dense_available  # noqa: E402
from testset_builder.retrieval.fusion import reciprocal_rank_fusion  # noqa: E402
from testset_builder.retrieval.indexes import WorkspaceIndexes  # noqa: E402
from testset_builder.retrieval.pool import pool, pool_recall  # noqa: E402
from testset_builder.stages.propose import propose  # noqa: E402
from testset_builder.store import open_workspace, rows  # noqa: E402


def roc_auc(scores: list[float], labels: list[bool]) -> float | None:
    """Probability that a random relevant pair scores above a random non-relevant one (ties count half)."""
    positives = [s for s, y in zip(scores, labels) if y]
    negatives = [s for s, y in zip(scores, labels) if not y]
    if not positives or not negatives:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in positives for n in negatives)
    return wins / (len(positives) * len(negatives))


def fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=SCIFACT)
    parser.add_argument("--workspace", type=Path, default=ROOT / "benchmarks" / ".cache" / "judge-agreement")
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="provider config (default: from the environment; the local model without keys)",
    )
    parser.add_argument("--queries", type=int, default=40, help="test queries to judge (a seeded sample)")
    parser.add_argument("--judge-depth", type=int, default=10)
    parser.add_argument("--depths", default="5,10,20,50,100")
    parser.add_argument("--no-dense", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    depths = [int(d) for d in args.depths.split(",")]
    qrels = read_qrels(args.data / "qrels" / "test.tsv").to_dict()
    texts = {q["_id"]: q["text"] for q in map(json.loads, (args.data / "queries.jsonl").open(encoding="utf-8"))}
    test_ids = sorted(qrels, key=lambda q: int(q) if q.isdigit() else q)
    relevant = {q: {d for d, g in qrels[q].items() if g >= 1} for q in test_ids}
    names = ("bm25", "dense") if dense_available() and not args.no_dense else ("bm25",)
    report: dict = {"retrievers": names}

    with open_workspace(args.workspace) as ws:
        started = time.perf_counter()
        ingest(ws, load_sources([args.data]), ChunkingConfig(chunker="prechunked", size=1, overlap=0), [args.data])
        retrievers = WorkspaceIndexes(ws, names)
        queries = [Query(query_id=q, text=texts[q], origin=QueryOrigin.real) for q in test_ids]
        runs = retrievers.runs(queries, k=max(depths))
        print(
            f"SciFact: {len(retrievers.chunk_ids)} documents, {len(test_ids)} test queries; indexed and retrieved in "
            f"{time.perf_counter() - started:.1f} s"
        )

        # 1. pool recall --------------------------------------------------------------------------------------
        fused = reciprocal_rank_fusion(list(runs.values())) if len(runs) > 1 else None
        header = ["depth", *names, *(["rrf"] if fused else []), "pool", "pool size/query"]
        print("\nPool recall (share of human-relevant pairs in the pool)")
        print(" | ".join(header))
        report["pool_recall"] = []
        for depth in depths:
            row = {"depth": depth}
            for name, run in runs.items():
                row[name] = pool_recall(pool({name: run}, depth), relevant)
            if fused is not None:
                row["rrf"] = pool_recall(pool({"rrf": fused}, depth), relevant)
            union = pool(runs, depth, depth)
            row["pool"] = pool_recall(union, relevant)
            row["pool_size"] = len({(c.query_id, c.chunk_id) for c in union}) / len(test_ids)
            report["pool_recall"].append(row)
            print(" | ".join([str(depth), *(f"{row[n]:.3f}" for n in header[1:-1]), f"{row['pool_size']:.1f}"]))

        # 2. the judge ----------------------------------------------------------------------------------------
        settings = resolve_config(args.config)
        sample = sorted(
            random.Random(args.seed).sample(test_ids, min(args.queries, len(test_ids))),
            key=lambda q: int(q) if q.isdigit() else q,
        )
        query_file = QueryFile(queries=[q for q in queries if q.query_id in set(sample)])

        async def judge_sample():
            async with open_roles(settings, ws, "bench-judge") as roles:
                judge = Judge(roles.judge, settings.judging)
                pool_settings = ProposeConfig(
                    retrievers=list(names), depth=args.judge_depth, fused_depth=args.judge_depth
                )
                return await propose(ws, query_file, judge, pool_settings), judge

        clock = time.perf_counter()
        summary, judge = asyncio.run(judge_sample())
        seconds = time.perf_counter() - clock
        pairs = {
            (c[0], c[1])
            for c in ws.db.execute(
                f"SELECT query_id, chunk_id FROM candidates WHERE query_id IN ({','.join('?' * len(sample))})", sample
            )
        }
        judgments = list(
            rows.iter_judgments_by_id(
                ws.db,
                (judge.judgment_id(JudgePair(q, texts[q], c, retrievers.passages[c])) for q, c in sorted(pairs)),
            )
        )
        human = [j.chunk_id in relevant[j.query_id] for j in judgments]
        judged = [j.grade >= 1 for j in judgments]
        precision, recall = precision_recall(judged, human)
        probabilities = [j.p_relevant for j in judgments if j.grade_probs]
        auc = (
            roc_auc(probabilities, [h for h, j in zip(human, judgments) if j.grade_probs])
            if len(probabilities) == len(judgments)
            else None
        )
        in_pool = sum(human)
        pool_hits = sum(len(relevant[q]) for q in sample)
        report["judge"] = {
            "provider": settings.judge_role().kind,
            "model": settings.judge_role().model_name,
            "queries": len(sample),
            "depth": args.judge_depth,
            "pairs": len(judgments),
            "human_relevant_in_pool": in_pool,
            "human_relevant_total": pool_hits,
            "judged_relevant": sum(judged),
            "precision": precision,
            "recall": recall,
            "kappa": cohen_kappa(judged, human),
            "auc": auc,
            "calls": summary.judging.calls,
            "cache_hits": summary.judging.cache_hits,
            "failed": summary.judging.failed,
            "input_tokens": summary.judging.input_tokens,
            "output_tokens": summary.judging.output_tokens,
            "cost_usd": summary.judging.cost_usd,
            "seconds": round(seconds, 1),
        }
        r = report["judge"]
        print(
            f"\nJudge {r['provider']}:{r['model']} on {r['queries']} sampled test queries, pool depth {r['depth']} "
            f"({r['pairs']} pairs)"
        )
        print(
            f"human-relevant in the pool: {in_pool} of {pool_hits}; pool members without a human label count as not "
            "relevant"
        )
        print(
            f"judged relevant (grade >= 1): {r['judged_relevant']}; precision {fmt(precision)}, recall "
            f"{fmt(recall)}, Cohen's kappa {fmt(r['kappa'])}, ROC AUC of P(relevant) {fmt(auc)}"
        )
        print(
            f"grades 0/1/2: {summary.judging.grades[0]}/{summary.judging.grades[1]}/{summary.judging.grades[2]}; "
            f"{r['calls']} calls ({r['cache_hits']} cached, {r['failed']} failed), "
            f"{r['input_tokens']} input + {r['output_tokens']} output tokens, ${r['cost_usd']:.4f}, {r['seconds']} s"
        )
        if judgments and all(j.grade_probs for j in judgments):
            mean_expected = sum(j.expected_grade for j in judgments) / len(judgments)
            print(f"mean expected grade {mean_expected:.3f}")

        # 3. the relevance estimate on the same pairs ------------------------------------------------------------
        report["estimate"] = estimate_section(retrievers, queries, sample, relevant, judgments, args)
    return report


def estimate_section(retrievers, queries, sample, relevant, judgments, args) -> dict:
    """ROC AUC and kappa on the judged pairs of: the LLM alone, dense alone, the shipped prior, and the estimate
    (the LLM's P(relevant) among its features) refitted after 50, 100 and 200 verdicts drawn by the review queue's
    own selection from half the queries, measured on the other half's pairs (mean over 5 seeds)."""
    from relevance_estimate import mean, pairs_and_features, roc_auc, simulate

    import testset_builder.labels.features
    import testset_builder.labels.prior
    from testset_builder.labels import estimate
    from testset_builder.labels.model import REFIT_STRENGTH

    chosen = [q for q in queries if q.query_id in set(sample)]
    x, y, keys = pairs_and_features(retrievers, chosen, relevant, args.judge_depth)
    llm = estimate.llm_p_relevant(judgments)
    for i, key in enumerate(keys):
        x[i, testset_builder.labels.features.FEATURES.index("llm")] = llm.get(key, 0.5)
        x[i, testset_builder.labels.features.FEATURES.index("llm_missing")] = 0.0 if key in llm else 1.0
    section: dict = {"pairs": len(y), "relevant": int(y.sum()), "auc": {}, "kappa": {}}
    prior = testset_builder.labels.prior.PRIOR.p_relevant(x)
    rows = {
        "LLM alone": x[:, testset_builder.labels.features.FEATURES.index("llm")],
        "dense alone": x[:, 0],
        "prior estimate": prior,
    }
    print(f"\nRelevance estimate on the same {len(y)} pooled pairs ({int(y.sum())} human-relevant)")
    for label, scores in rows.items():
        section["auc"][label] = roc_auc(scores, y)
        section["kappa"][label] = cohen_kappa(list(scores >= 0.5), list(y >= 0.5))
        print(f"  {label:<28} AUC {fmt(section['auc'][label])}, kappa at 0.5 {fmt(section['kappa'][label])}")
    for budget in (50, 100, 200):
        results = [
            simulate(x, y, keys, testset_builder.labels.prior.PRIOR, budget, "selection", seed, REFIT_STRENGTH)
            for seed in range(5)
        ]
        label = f"refit on {budget} verdicts"
        for key in ("auc", "kappa"):
            section[key][label] = mean([r[key] for r in results])
        section["auc"][f"prior, same held-out queries ({budget})"] = mean([r["auc_before"] for r in results])
        print(
            f"  {label:<28} AUC {fmt(section['auc'][label])} on held-out queries (the prior there: "
            f"{fmt(section['auc'][f'prior, same held-out queries ({budget})'])}), kappa at 0.5 "
            f"{fmt(section['kappa'][label])}"
        )
    return section


if __name__ == "__main__":
    main(sys.argv[1:])
