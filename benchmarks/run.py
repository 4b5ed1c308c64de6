"""`make bench`: every benchmark, each reporting ratios against the peers measured in the same run."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chunking_speed
import encoding_speed
import estimate_transfer
import ingest_scale
import judge_agreement
import llm_throughput
import log_import_scale
import metrics_speed
import pool_scale
import synthetic_agreement
import vs_ragas

if __name__ == "__main__":
    print("== metrics: testset-builder vs pytrec_eval vs ranx ==")
    metrics_speed.main([])
    print("\n== chunking: testset-builder vs langchain-text-splitters vs semchunk on SciFact ==")
    chunking_speed.main([])
    print("\n== dense encoding: PyTorch vs ONNX Runtime int8 on SciFact (texts/s, retrieval and estimate quality) ==")
    encoding_speed.main([])
    print("\n== chunk at scale: a 1 GB generated corpus, then one file added and one changed (MB/s, peak RSS) ==")
    ingest_scale.main([])
    print("\n== LLM layer: throughput under a rate limit, vs sequential; local model speed ==")
    llm_throughput.main([])
    print("\n== propose: pool recall on SciFact, and the judge (local model by default) against the human labels ==")
    judge_agreement.main([])
    print("\n== import-logs: a 1 GB production log in bounded memory, planted faults counted exactly ==")
    log_import_scale.main([])
    print("\n== pools at 1M chunks: BM25 and dense build, 1,000 queries, peak RSS, vs today's in-memory paths ==")
    pool_scale.main([])
    print("\n== trust out of domain: the relevance estimate left out of its prior's fit, refits, PPI coverage ==")
    estimate_transfer.main([])
    print("\n== synthesize: does a synthetic SciFact set rank retrievers as the human labels do? ==")
    synthetic_agreement.main([])
    if os.environ.get("BENCH_SKIP_RAGAS"):
        print("\n== vs Ragas: skipped (BENCH_SKIP_RAGAS is set) ==")
    else:
        print("\n== synthesize vs Ragas TestsetGenerator: calls, tokens, time per question, source chunk ids ==")
        vs_ragas.main([])
