"""False-negative mining: a synthetic question labels only its source, which punishes a retriever for finding
another chunk that answers it. Each question's top-ranked *other* chunks (BM25, plus dense and their fusion when the
dense extra is installed) are pooled, then either the judge grades them (positive grades are queued for review as
``llm`` proposals) or the relevance estimate scores them, with no LLM call (pairs it puts at P(relevant) >= 0.5 are
queued, and every estimate is stored for ``queue``, ``select`` and releases). A chunk marked as page furniture is
never queued as a likely answer (:mod:`~testset_builder.corpus.boilerplate`)."""

from __future__ import annotations

from ...labels.estimate import described, estimate_workspace
from ...labels.judge import Judge, JudgePair
from ...labels.labelling import JudgingCounts, judge_and_queue
from ...labels.queue import estimate_priority
from ...records import JudgmentSource, Query
from ...retrieval.indexes import WorkspaceIndexes
from ...retrieval.pool import pool, pooled_pairs
from ...store import corpus as corpus_store
from ...store import estimates as stored_estimates
from ...store import review as review_store
from ...store import rows
from ...store.workspace import Workspace, utc_timestamp
from ...tables import Run

# an estimated pair at or above this P(relevant) is queued for review as a likely unlabelled answer. The five-domain
# prior is cautious (a chunk that matches a question in words and meaning, ranked first by both retrievers, gets
# about 0.4: in the classic collections such pairs are relevant about that often); a refit on verdicts moves it
MINED_RELEVANT = 0.3


def mining_pool(
    workspace: Workspace, indexes: WorkspaceIndexes, queries: list[Query], depth: int
) -> list[tuple[str, str]]:
    """Each retriever's top ``depth`` chunks other than a question's labelled ones (and the fused top ``depth``),
    stored as candidates with their ranks among all chunks; returns the (query id, chunk id) pairs, sorted."""
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
    candidates = [c for c in pool(runs, ranked_depth) if (c.query_id, c.chunk_id) in wanted]
    with workspace.transaction() as db:
        rows.put_candidates(db, candidates)  # with their ranks among all chunks, labelled ones included
    return sorted(wanted)


async def mine(
    workspace: Workspace,
    judge: Judge,
    indexes: WorkspaceIndexes,
    queries: list[Query],
    depth: int,
    progress=None,
    batch: bool = False,
) -> tuple[JudgingCounts, int]:
    """Judge each question's mining pool (:func:`mining_pool`); returns the judging counts and how many questions
    gained an extra relevant chunk."""
    texts = {q.query_id: q.text for q in queries}
    pairs = [JudgePair(q, texts[q], c, indexes.passages[c]) for q, c in mining_pool(workspace, indexes, queries, depth)]
    furniture = corpus_store.boilerplate_chunks(workspace.db)
    counts, every = await judge_and_queue(
        workspace,
        judge,
        pairs,
        batch=batch,
        progress=progress,
        queue_if=lambda j: j.grade >= 1 and j.chunk_id not in furniture,
        description="mining other chunks",
    )
    return counts, len({q for (q, _), j in every.items() if j.grade >= 1})


def mine_by_estimate(
    workspace: Workspace, indexes: WorkspaceIndexes, queries: list[Query], depth: int
) -> tuple[JudgingCounts, int, str]:
    """Estimate each question's mining pool with the workspace's current model (as ``estimate`` does, storing every
    estimate) and queue the pairs at P(relevant) >= :data:`MINED_RELEVANT`, by the estimate's priority. Returns the
    counts (pairs estimated, newly queued; no LLM call), how many questions gained a likely relevant chunk, and
    which estimate decided."""
    wanted = mining_pool(workspace, indexes, queries, depth)
    fitted = estimate_workspace(workspace, wanted, indexes=indexes)
    stored = stored_estimates.estimates(workspace.db)
    furniture = corpus_store.boilerplate_chunks(workspace.db)
    relevant = [
        stored[pair]
        for pair in wanted
        if pair in stored and stored[pair].p_relevant >= MINED_RELEVANT and pair[1] not in furniture
    ]
    items = [
        review_store.QueuedItem(
            review_store.pair_item_id(e.query_id, e.chunk_id), "pair", e.query_id, e.chunk_id,
            estimate_priority(e.p_relevant), "estimated relevant (mining)", 1,
        )
        for e in relevant
    ]  # fmt: skip
    with workspace.transaction() as db:
        queued = review_store.enqueue(db, items, utc_timestamp())
    counts = JudgingCounts(pairs=len(wanted), queued=queued)
    return counts, len({e.query_id for e in relevant}), described(fitted.model["name"], fitted.model["verdicts"])
