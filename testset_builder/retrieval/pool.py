"""Candidate pools: the union of each retriever's top ``depth`` and the fused (RRF) top ``fused_depth``.

Each candidate keeps the retriever and rank that pooled it (one row per retriever that found it), so pool bias can
be studied later: which system contributed the relevant chunks, and at what depth.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..tables import Run
from .fusion import reciprocal_rank_fusion

FUSED = "rrf"


@dataclass(frozen=True)
class Candidate:
    query_id: str
    chunk_id: str
    retriever: str
    rank: int
    score: float


def pool(runs: Mapping[str, Run], depth: int, fused_depth: int | None = None, rrf_k: int = 60) -> list[Candidate]:
    """Candidates from ``runs`` (name -> run). With two or more runs the RRF fusion of them is pooled too, to
    ``fused_depth`` (default ``depth``). Ranks follow trec_eval's order (score desc, then chunk id desc)."""
    named = dict(runs)
    if len(named) > 1:
        named[FUSED] = reciprocal_rank_fusion(list(runs.values()), k=rrf_k, name=FUSED)
    candidates = []
    for name, run in named.items():
        limit = (fused_depth or depth) if name == FUSED else depth
        candidates.extend(
            Candidate(q, c, name, rank, score) for q, c, score, rank in run.ranked_rows() if rank <= limit
        )
    return candidates


def pooled_pairs(candidates: list[Candidate]) -> list[tuple[str, str]]:
    """The distinct (query, chunk) pairs of a pool, in first-seen order."""
    return list(dict.fromkeys((c.query_id, c.chunk_id) for c in candidates))


def pool_recall(candidates: list[Candidate], relevant: Mapping[str, set[str]]) -> float:
    """Share of the relevant (query, chunk) pairs that reached the pool, over the queries in ``relevant``."""
    pooled = {(c.query_id, c.chunk_id) for c in candidates}
    total = sum(len(chunks) for chunks in relevant.values())
    found = sum((q, c) in pooled for q, chunks in relevant.items() for c in chunks)
    return found / total if total else 0.0
