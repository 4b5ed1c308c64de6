"""What the labelling stages share: judge pairs not yet judged, store the judgments, queue them for review.

Used by ``propose`` (real queries' pools), ``audit`` (an existing qrels file) and synthesize's false-negative
mining, so "already judged", the review priority and the counts mean the same thing in each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import astuple, dataclass, field

from ..errors import BudgetExceededError
from ..records import Judgment, Query
from ..store import review as review_store
from ..store import rows
from ..store.workspace import Workspace, utc_timestamp
from .judge import Judge, JudgePair
from .queue import review_priority


@dataclass
class JudgingCounts:
    pairs: int = 0
    already_judged: int = 0
    judged: int = 0
    failed: int = 0
    not_judged_budget: int = 0
    grades: dict[int, int] = field(default_factory=lambda: {0: 0, 1: 0, 2: 0})
    queued: int = 0
    calls: int = 0
    cache_hits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    failures: list[str] = field(default_factory=list)
    batch_id: str | None = None

    @property
    def incomplete(self) -> bool:
        """Some pairs were left unjudged (a failure, or the budget's stop): a rerun goes on with them."""
        return bool(self.failed or self.not_judged_budget)


async def judge_and_queue(
    workspace: Workspace,
    judge: Judge,
    pairs: Sequence[JudgePair],
    *,
    batch: bool = False,
    progress=None,
    disagreement: Callable[[Judgment], bool] | None = None,
    queue_if: Callable[[Judgment], bool] | None = None,
    description: str = "judging",
) -> tuple[JudgingCounts, dict[tuple[str, str], Judgment]]:
    """Judge the pairs not yet judged by this judge, store the judgments and queue them for review.

    Returns the counts and every judgment of these pairs by this judge (earlier ones included).
    ``disagreement(judgment) -> bool`` marks judgments that should head the queue (the audit's use);
    ``queue_if(judgment) -> bool`` limits the queue to some judgments (false-negative mining queues the positives).
    """
    counts = JudgingCounts(pairs=len(pairs))
    before = judge.client.spend()
    ids = {(p.query_id, p.chunk_id): judge.judgment_id(p) for p in pairs}
    done = rows.existing_judgment_ids(workspace.db, ids.values())
    todo = [p for p in pairs if ids[(p.query_id, p.chunk_id)] not in done]
    counts.already_judged = len(pairs) - len(todo)
    if batch:  # submit what the cache cannot answer and stop; once every answer is cached, judge from the cache
        counts.batch_id = await judge.client.submit_missing([judge.request(p) for p in todo])
        if counts.batch_id is not None:
            return counts, {}
    made = []
    for pair, outcome in zip(todo, await judge.judge_many(todo, progress=progress, description=description)):
        if isinstance(outcome, Judgment):
            made.append(outcome)
        elif isinstance(outcome, BudgetExceededError):
            counts.not_judged_budget += 1
        else:
            counts.failed += 1
            if len(counts.failures) < 10:
                counts.failures.append(f"{pair.query_id} / {pair.chunk_id}: {outcome}")
    with workspace.transaction() as db:  # judgments and their queue entries land together
        counts.judged = rows.add_judgments(db, made)
        every = {(j.query_id, j.chunk_id): j for j in rows.iter_judgments_by_id(db, ids.values())}
        queued = [j for j in every.values() if queue_if is None or queue_if(j)]
        counts.queued = review_store.enqueue(
            db, [_queue_item(j, bool(disagreement and disagreement(j))) for j in queued], utc_timestamp()
        )
    for judgment in every.values():
        counts.grades[judgment.grade] += 1
    spent = judge.client.spend() - before
    counts.calls, counts.cache_hits, counts.input_tokens, counts.output_tokens, counts.cost_usd = astuple(spent)
    return counts, every


def _queue_item(judgment: Judgment, disagreement: bool) -> review_store.QueuedItem:
    reason = "audit disagreement" if disagreement else "llm proposal"
    return review_store.QueuedItem(
        review_store.pair_item_id(judgment.query_id, judgment.chunk_id), "pair", judgment.query_id, judgment.chunk_id,
        review_priority(judgment, disagreement), reason, 1,
    )  # fmt: skip


def store_queries(workspace: Workspace, queries: Sequence[Query]) -> int:
    """Insert new queries in one transaction; an id already stored must keep its text."""
    with workspace.transaction() as db:
        return rows.put_queries_checked(db, queries)
