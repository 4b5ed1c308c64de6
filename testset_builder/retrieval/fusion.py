"""Reciprocal rank fusion (Cormack, Clarke & Buettcher, SIGIR 2009): score(d) = sum over runs of 1 / (k + rank_d)."""

from __future__ import annotations

from collections import defaultdict

from ..tables import Run


def reciprocal_rank_fusion(runs: list[Run], k: int = 60, depth: int | None = None, name: str = "rrf") -> Run:
    """Fuse runs by rank (ties ranked as trec_eval ranks them: score desc, then chunk id desc)."""
    fused: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for run in runs:
        for query_id, chunk_id, _, rank in run.ranked_rows():
            fused[query_id][chunk_id] += 1.0 / (k + rank)
    if depth is not None:
        fused = {q: dict(sorted(s.items(), key=lambda item: (-item[1], item[0]))[:depth]) for q, s in fused.items()}
    return Run.from_dict(fused, name=name)
