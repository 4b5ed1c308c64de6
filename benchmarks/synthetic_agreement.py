"""Does a synthetic test set rank retrievers the way human labels do?

Builds a synthetic set from the SciFact corpus with ``synthesize`` (one chunk per abstract, so chunk ids are SciFact
document ids), then scores the same retrievers on it and on SciFact's human test qrels, and prints both nDCG@10
columns and Kendall's tau between the two rankings. Retrievers: BM25 (Snowball stemming, title + abstract), BM25
without stemming, BM25 on titles only, BM25 on abstracts only, dense all-MiniLM-L6-v2 and the RRF hybrid of BM25
and dense (the last two when the dense extra is installed).

Runs with the embedded local model by default; any provider's config can be passed (``--config
configs/openai.yaml``). The workspace is kept, so a rerun reads every answer from the cache.

    python benchmarks/synthetic_agreement.py [--questions 100] [--config FILE] [--mine]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

from scipy.stats import kendalltau

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "data" / "scifact"

from testset_builder.config import ChunkingConfig, resolve_config  # noqa: E402
from testset_builder.corpus.ingest import ingest  # noqa: E402
from testset_builder.corpus.loaders import load_sources  # noqa: E402
from testset_builder.export import read_qrels  # noqa: E402
from testset_builder.llm.roles import open_roles  # noqa: E402
from testset_builder.metrics import evaluate  # noqa: E402
from testset_builder.records import passage_text  # noqa: E402
from testset_builder.retrieval import BM25Index, DenseIndex, dense_available, reciprocal_rank_fusion  # noqa: E402
from testset_builder.stages.synthesize import synthesize  # noqa: E402
from testset_builder.store import open_workspace  # noqa: E402
from testset_builder.tables import Qrels  # noqa: E402


def synthetic_qrels(db, include_mined: bool) -> tuple[Qrels, dict[str, str]]:
    """Source labels (grade 2) of the synthetic queries, plus the judge's positive mined proposals if asked."""
    labels: dict[str, dict[str, int]] = {}
    for query_id, chunk_id, grade, source in db.execute(
        "SELECT j.query_id, j.chunk_id, j.grade, j.source FROM judgments j JOIN queries q USING (query_id) WHERE "
        "q.origin = 'synthetic'"
    ):
        if source == "synthetic-source" or (include_mined and source == "llm" and grade >= 1):
            labels.setdefault(query_id, {})[chunk_id] = max(grade, labels.get(query_id, {}).get(chunk_id, 0))
    texts = dict(db.execute("SELECT query_id, text FROM queries WHERE origin = 'synthetic'").fetchall())
    return Qrels.from_dict(labels), {q: texts[q] for q in labels}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=SCIFACT)
    parser.add_argument("--workspace", type=Path, default=ROOT / "benchmarks" / ".cache" / "synthetic-agreement")
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="provider config (default: from the environment; the local model without keys)",
    )
    parser.add_argument("--questions", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--mine",
        action="store_true",
        help="also mine other relevant chunks and score a second synthetic column with them",
    )
    args = parser.parse_args(argv)

    corpus = [json.loads(line) for line in (args.data / "corpus.jsonl").open(encoding="utf-8")]
    ids = [d["_id"] for d in corpus]
    human = read_qrels(args.data / "qrels" / "test.tsv")
    texts = {q["_id"]: q["text"] for q in map(json.loads, (args.data / "queries.jsonl").open(encoding="utf-8"))}
    human_ids = human.query_ids()

    overrides = {"synthesize.questions": args.questions, "synthesize.seed": args.seed, "synthesize.mine": args.mine}
    settings = resolve_config(args.config, overrides)
    with open_workspace(args.workspace) as ws:
        ingest(ws, load_sources([args.data]), ChunkingConfig(chunker="prechunked", size=1, overlap=0), [args.data])

        async def build():
            async with open_roles(settings, ws, "bench-synthesize") as roles:
                return await synthesize(ws, roles, settings.synthesize, judging=settings.judging)

        clock = time.perf_counter()
        summary = asyncio.run(build())
        seconds = time.perf_counter() - clock
        sets = {"synthetic": synthetic_qrels(ws.db, include_mined=False)}
        if args.mine:
            sets["synthetic+mined"] = synthetic_qrels(ws.db, include_mined=True)
    made = summary.made + summary.already_made
    print(
        f"synthetic set: {made} of {args.questions} questions with "
        f"{settings.generator_role().kind}:{settings.generator_role().model_name} in {seconds:.1f} s "
        f"({summary.calls} calls, {summary.cache_hits} cached); styles {summary.styles}; removed {summary.removed}"
    )
    if summary.shortfall:
        print(f"  fewer than asked: {summary.shortfall}")
    if args.mine:
        print(
            f"  mining: {summary.mining.pairs} other pairs judged, {summary.questions_with_extra_relevant} questions "
            "gained extra relevant chunks"
        )

    cache = args.workspace / "indexes"
    full = [passage_text(d["title"], d["text"]) for d in corpus]  # as the workspace indexes them
    indexes = {
        "bm25": BM25Index.cached(cache, ids, full),
        "bm25-nostem": BM25Index.cached(cache, ids, full, stem=False),
        "bm25-title": BM25Index.cached(cache, ids, [d["title"] for d in corpus]),
        "bm25-abstract": BM25Index.cached(cache, ids, [d["text"] for d in corpus]),
    }
    if dense_available():
        indexes["dense-minilm"] = DenseIndex.cached(cache, ids, full)
    query_sets = {"human": (human, {q: texts[q] for q in human_ids}), **sets}
    scores: dict[str, dict[str, float]] = {}
    for set_name, (qrels, query_texts) in query_sets.items():
        qids = list(query_texts)
        runs = {
            name: index.search(qids, [query_texts[q] for q in qids], k=100, name=name)
            for name, index in indexes.items()
        }
        if "dense-minilm" in runs:
            runs["rrf(bm25,dense)"] = reciprocal_rank_fusion([runs["bm25"], runs["dense-minilm"]], name="rrf")
        for name, run in runs.items():
            scores.setdefault(name, {})[set_name] = evaluate(qrels, run, "ndcg@10").mean("ndcg@10")

    columns = list(query_sets)
    print(f"\nnDCG@10 on SciFact: human test qrels ({len(human_ids)} queries) vs synthetic ({made} questions)")
    print(" | ".join(["retriever", *columns]))
    for name in sorted(scores, key=lambda n: -scores[n]["human"]):
        print(" | ".join([name, *(f"{scores[name][c]:.4f}" for c in columns)]))
    report = {"scores": scores, "questions": made, "calls": summary.calls, "seconds": round(seconds, 1)}
    for column in columns[1:]:
        names = list(scores)
        tau, p = kendalltau([scores[n]["human"] for n in names], [scores[n][column] for n in names])
        report[f"kendall_tau_{column}"] = tau
        print(
            f"Kendall's tau between the human and {column} rankings of {len(names)} retrievers: {tau:.3f} (p = {p:.3f})"
        )
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
