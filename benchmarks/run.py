"""`make bench`: every benchmark, each reporting ratios against the peers measured in the same run.

    python benchmarks/run.py                      # all of them, in this order
    python benchmarks/run.py metrics encoding     # some of them: `make bench BENCH="metrics encoding ingest"`

The load average is printed at the start and after each benchmark: on a shared machine wall times vary with it.
A benchmark whose ``main`` returns its figures has them kept in ``benchmarks/results/NAME.json`` with the date, the
CPU and the load; ``benchmarks/RESULTS.md`` is then written from every file there (``results_md.py``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results_md

# name: (title, module, arguments); in the order `make bench` runs them
BENCHMARKS = {
    "metrics": (
        "metrics: testset-builder vs pytrec_eval vs ranx, in process and whole processes",
        "metrics_speed",
        ["--repeat", "3"],
    ),
    "chunking": ("chunking: testset-builder vs langchain-text-splitters vs semchunk on SciFact", "chunking_speed", []),
    "encoding": (
        "dense encoding: PyTorch, ONNX fp32 and int8 on SciFact (texts/s, quality), the path chosen, `index` whole",
        "encoding_speed",
        [],
    ),
    "ingest": (
        "chunk at scale: a 1 GB generated corpus, then one file added and one changed (MB/s, peak RSS)",
        "ingest_scale",
        [],
    ),
    "ingest-jsonl": (
        "chunk at 100 MB in 200 JSONL files: first ingest (MB/s, peak RSS), one file added, nothing changed; "
        "a plain json.loads read of the files as the peer",
        "ingest_scale",
        ["--jsonl", "--size-mb", "100", "--files", "200"],
    ),
    "llm": ("LLM layer: throughput under a rate limit, vs sequential; local model speed", "llm_throughput", []),
    "judge": (
        "propose: pool recall on SciFact, and the judge (local model by default) against the human labels",
        "judge_agreement",
        [],
    ),
    "logs": (
        "import-logs: a 1 GB production log in bounded memory, planted faults counted exactly",
        "log_import_scale",
        [],
    ),
    "pools": (
        "pools at 1M chunks: BM25 and dense build, 1,000 queries, peak RSS, vs today's in-memory paths",
        "pool_scale",
        [],
    ),
    "transfer": (
        "trust out of domain: the relevance estimate left out of its prior's fit, refits, PPI coverage",
        "estimate_transfer",
        [],
    ),
    "workflow": (
        "the whole workflow through the CLI on held-out collections: propose --runs, select, review API, release, "
        "score; PPI coverage of the pool's figures and of the qrels'",
        "workflow_check",
        [],
    ),
    "workflow-knowing": (
        "the same with three systems besides that know part of the truth (the estimate cannot reproduce their "
        "figures): their coverage, and how the estimate-only figures rank the systems",
        "workflow_check",
        ["--knowing"],
    ),
    "shared-task": (
        "the workflow on a pool as a shared task's: BM25, the dense model and eleven systems that know more",
        "workflow_check",
        ["--shared-task", "--domains", "cisi,npl", "--draws", "10"],
    ),
    "coverage": (
        "prediction-powered intervals on held-out collections, 10 draws each, tool pool and runs pooled: coverage, "
        "bias and width of the difference estimator, its Platt refinement and the human-only figure",
        "interval_coverage",
        ["--draws", "10"],
    ),
    "synthetic": (
        "synthesize: do synthetic sets rank 15 retrievers as human labels do, with and without the question rules?",
        "synthetic_agreement",
        ["--collection", "scifact,cranfield", "--questions", "60"],
    ),
    "questions": (
        "synthesize: the embedded model's usable questions on three corpora, and the question checks",
        "question_quality",
        [],
    ),
    "ragas": (
        "synthesize vs Ragas TestsetGenerator: calls, tokens, time per question, source chunk ids",
        "vs_ragas",
        [],
    ),
}


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} cores"


def main(names: list[str]) -> None:
    import importlib

    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        raise SystemExit(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    print(f"== make bench: {_load()} ==")
    for name in names or list(BENCHMARKS):
        title, module, arguments = BENCHMARKS[name]
        if name == "ragas" and os.environ.get("BENCH_SKIP_RAGAS"):
            print("\n== vs Ragas: skipped (BENCH_SKIP_RAGAS is set) ==")
            continue
        print(f"\n== {title} ==", flush=True)
        figures = importlib.import_module(module).main(arguments)
        if isinstance(figures, dict):
            results_md.record(name, title, figures)
        print(f"   ({_load()})", flush=True)
    print(f"\n== written: {results_md.main()} ==")


if __name__ == "__main__":
    main(sys.argv[1:])
