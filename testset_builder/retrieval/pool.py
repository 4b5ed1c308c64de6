"""Candidate pools: the union of each retriever's top ``depth`` and the fused (RRF) top ``fused_depth``.

Each candidate keeps the retriever and rank that pooled it (one row per retriever that found it), so pool bias can
be studied later: which system contributed the relevant chunks, and at what depth.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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


RUN_PREFIX = "run:"  # the retriever name a pooled external run's candidates carry: run:<its tag>


@dataclass
class PooledRun:
    """What pooling one external run took: its name in the pool, the queries it gave results for, the pairs it added
    to the pool, and the results it named a chunk the workspace does not have (skipped)."""

    name: str
    queries: int = 0
    candidates: int = 0
    unknown_chunks: int = 0


def run_candidates(
    runs: list[Run], depth: int, query_ids: set[str], known: Callable[[set[str]], set[str]]
) -> tuple[list[Candidate], list[PooledRun]]:
    """Candidates from the systems a test set will score (TREC pooling): each run's top ``depth`` for the queries in
    ``query_ids``, as retriever ``run:<name>``, at the ranks ``score`` gives them (trec_eval's order). ``known`` gives
    which of the chunk ids those tops name the workspace has (asked once); a result naming another is skipped and
    counted: a run over another corpus or chunking names none of them."""
    tops = [[row for row in run.ranked_rows() if row[0] in query_ids and row[3] <= depth] for run in runs]
    live = known({chunk_id for top in tops for _, chunk_id, _, _ in top})
    candidates, pooled = [], []
    for run, top in zip(runs, tops):
        took = PooledRun(RUN_PREFIX + run.name, queries=len({q for q, *_ in top}))
        for q, c, score, rank in top:
            if c in live:
                candidates.append(Candidate(q, c, took.name, rank, score))
                took.candidates += 1
            else:
                took.unknown_chunks += 1
        pooled.append(took)
    return candidates, pooled


def pooled_pairs(candidates: list[Candidate]) -> list[tuple[str, str]]:
    """The distinct (query, chunk) pairs of a pool, in first-seen order."""
    return list(dict.fromkeys((c.query_id, c.chunk_id) for c in candidates))


def pool_recall(candidates: list[Candidate], relevant: Mapping[str, set[str]]) -> float:
    """Share of the relevant (query, chunk) pairs that reached the pool, over the queries in ``relevant``."""
    pooled = {(c.query_id, c.chunk_id) for c in candidates}
    total = sum(len(chunks) for chunks in relevant.values())
    found = sum((q, c) in pooled for q, chunks in relevant.items() for c in chunks)
    return found / total if total else 0.0
