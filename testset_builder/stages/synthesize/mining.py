"""False-negative mining: a synthetic question labels only its source, which punishes a retriever for finding
another chunk that answers it. The judge grades each question's top-ranked *other* chunks (BM25, plus dense and
their fusion when the dense extra is installed); positive grades are queued for review as ``llm`` proposals."""

from __future__ import annotations

from ...records import JudgmentSource, Query
from ...retrieval.indexes import WorkspaceIndexes
from ...retrieval.pool import pool, pooled_pairs
from ...store import rows
from ...store.workspace import Workspace
from ...tables import Run
from ..judge import Judge, JudgePair
from ..labelling import JudgingCounts, judge_and_queue


async def mine(
    workspace: Workspace,
    judge: Judge,
    indexes: WorkspaceIndexes,
    queries: list[Query],
    depth: int,
    progress=None,
    batch: bool = False,
) -> tuple[JudgingCounts, int]:
    """Judge each retriever's top ``depth`` chunks other than a question's labelled ones (and the fused top
    ``depth``); returns the judging counts and how many questions gained an extra relevant chunk."""
    labelled: dict[str, set[str]] = {}
    for query in queries:  # read back: twins labelled by earlier runs count as labelled too
        judgments = rows.iter_judgments(workspace.db, query.query_id)
        labelled[query.query_id] = {j.chunk_id for j in judgments if j.source is JudgmentSource.synthetic_source}
    ranked_depth = depth + max(len(v) for v in labelled.values())  # deep enough to hold k others
    runs = indexes.runs(queries, k=ranked_depth)
    others = {
        name: Run.from_dict(
            {q: {c: s for c, s in ranked.items() if c not in labelled[q]} for q, ranked in run.to_dict().items()},
            name=name,
        )
        for name, run in runs.items()
    }
    wanted = set(pooled_pairs(pool(others, depth)))
    texts = {q.query_id: q.text for q in queries}
    pairs = [JudgePair(q, texts[q], c, indexes.passages[c]) for q, c in sorted(wanted)]
    candidates = [c for c in pool(runs, ranked_depth) if (c.query_id, c.chunk_id) in wanted]
    with workspace.transaction() as db:
        rows.put_candidates(db, candidates)  # with their ranks among all chunks, labelled ones included
    counts, every = await judge_and_queue(
        workspace,
        judge,
        pairs,
        batch=batch,
        progress=progress,
        queue_if=lambda j: j.grade >= 1,
        description="mining other chunks",
    )
    return counts, len({q for (q, _), j in every.items() if j.grade >= 1})
