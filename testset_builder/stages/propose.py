"""Propose: candidate pools for real queries, graded by the LLM judge into ``llm`` proposals awaiting review.

``propose`` stores the queries, pools candidates from each retriever (and their RRF fusion), judges every pooled
pair not yet judged by the same judge, and queues the proposals for review by priority (see
:mod:`~testset_builder.stages.queue`). ``audit`` points the same judge at an existing qrels file and flags where
it disagrees. Both are resumable: judgments have deterministic ids and every answer is in the LLM cache, so a
rerun after a crash spends nothing twice and stores nothing twice.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, astuple, dataclass, field

from ..errors import BudgetExceededError, InputError
from ..metrics.agreement import cohen_kappa
from ..records import Judgment, Query
from ..retrieval import BM25Index, DenseIndex, dense_available
from ..retrieval.pool import pool, pooled_pairs
from ..store import rows
from ..store.workspace import Workspace, utc_timestamp
from ..tables import Qrels, Run
from .judge import Judge, JudgePair, judgment_id
from .queries import QueryFile, normalise
from .queue import review_priority

RETRIEVERS = ("bm25", "dense")


@dataclass(frozen=True)
class PoolSettings:
    """``retrievers``: "auto" is BM25 plus dense when the dense extra is installed. ``depth``: each retriever's top
    k in the pool; ``fused_depth``: the RRF fusion's top k (default ``depth``)."""

    retrievers: tuple[str, ...] | str = "auto"
    depth: int = 20
    fused_depth: int | None = None
    rrf_k: int = 60

    def names(self) -> tuple[str, ...]:
        if self.retrievers == "auto":
            return RETRIEVERS if dense_available() else ("bm25",)
        unknown = [name for name in self.retrievers if name not in RETRIEVERS]
        if unknown or not self.retrievers:
            raise InputError(f"unknown retriever {', '.join(unknown) or '(none)'}; use bm25, dense or both")
        return tuple(self.retrievers)


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


@dataclass
class ProposeSummary:
    queries: int = 0
    new_queries: int = 0
    merged_duplicates: int = 0
    skipped_lines: int = 0
    retrievers: tuple[str, ...] = ()
    candidates: int = 0
    pool_min: int = 0
    pool_mean: float = 0.0
    pool_max: int = 0
    judging: JudgingCounts = field(default_factory=JudgingCounts)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


class Retrievers:
    """The workspace's live chunks, indexed by the named retrievers (indexes cached under ``<workspace>/indexes``)."""

    def __init__(self, workspace: Workspace, names: Sequence[str]) -> None:
        self.chunk_ids, texts = rows.live_chunk_passages(workspace.db)
        if not self.chunk_ids:
            raise InputError(
                "the workspace has no chunks yet: run `testset-builder chunk SOURCE --workspace ...` first",
                path=workspace.root,
            )
        self.passages = dict(zip(self.chunk_ids, texts))
        directory = workspace.root / "indexes"
        self.indexes = {
            name: BM25Index.cached(directory, self.chunk_ids, texts)
            if name == "bm25"
            else DenseIndex.cached(directory, self.chunk_ids, texts)
            for name in names
        }

    def runs(self, queries: Sequence[Query], k: int) -> dict[str, Run]:
        ids, texts = [q.query_id for q in queries], [q.text for q in queries]
        return {name: index.search(ids, texts, k=k, name=name) for name, index in self.indexes.items()}


def store_queries(workspace: Workspace, queries: Sequence[Query]) -> int:
    """Insert new queries; an id already stored must carry the same text (else it is a different query)."""
    for query in queries:
        row = workspace.db.execute("SELECT text FROM queries WHERE query_id = ?", (query.query_id,)).fetchone()
        if row is not None and normalise(row[0]) != normalise(query.text):
            raise InputError(
                f"query id {query.query_id!r} is already in the workspace with another text: {row[0][:80]!r}"
            )
    with workspace.transaction() as db:
        return rows.put_queries(db, queries)


async def judge_and_queue(
    workspace: Workspace,
    judge: Judge,
    pairs: list[JudgePair],
    *,
    batch: bool = False,
    progress=None,
    disagreement=None,
    queue_if=None,
    description: str = "judging",
) -> tuple[JudgingCounts, dict[tuple[str, str], Judgment]]:
    """Judge the pairs not yet judged by this judge, store the judgments and queue them for review.

    Returns the counts and every judgment of these pairs by this judge (earlier ones included).
    ``disagreement(judgment) -> bool`` marks judgments that should head the queue (the audit's use);
    ``queue_if(judgment) -> bool`` limits the queue to some judgments (false-negative mining queues the positives).
    """
    counts = JudgingCounts(pairs=len(pairs))
    client = judge.client
    before = client.spend()
    ids = {(p.query_id, p.chunk_id): judgment_id(p, judge.identity) for p in pairs}
    done = rows.existing_judgment_ids(workspace.db, ids.values())
    todo = [p for p in pairs if ids[(p.query_id, p.chunk_id)] not in done]
    counts.already_judged = len(pairs) - len(todo)
    if batch:  # submit what the cache cannot answer and stop; once every answer is cached, judge from the cache
        counts.batch_id = await client.submit_missing([judge.request(p) for p in todo])
        if counts.batch_id is not None:
            return counts, {}
    outcomes = await judge.judge_many(todo, progress=progress, description=description)
    made = []
    for pair, outcome in zip(todo, outcomes):
        if isinstance(outcome, Judgment):
            made.append(outcome)
        elif isinstance(outcome, BudgetExceededError):
            counts.not_judged_budget += 1
        else:
            counts.failed += 1
            if len(counts.failures) < 10:
                counts.failures.append(f"{pair.query_id} / {pair.chunk_id}: {outcome}")
    with workspace.transaction() as db:  # judgments and their queue entries land together
        rows.add_judgments(db, made)
        every = {(j.query_id, j.chunk_id): j for j in rows.iter_judgments_by_id(db, ids.values())}
        queued = [j for j in every.values() if queue_if is None or queue_if(j)]
        counts.queued = rows.enqueue_for_review(
            db, [(j.query_id, j.chunk_id, review_priority(j, bool(disagreement and disagreement(j)))) for j in queued]
        )
    counts.judged = len(made)
    for judgment in every.values():
        counts.grades[judgment.grade] += 1
    spent = client.spend() - before
    counts.calls, counts.cache_hits, counts.input_tokens, counts.output_tokens, counts.cost_usd = astuple(spent)
    return counts, every


def record_stage(workspace: Workspace, stage: str, settings: dict, counts: dict, started: str) -> None:
    config_sha = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()
    with workspace.transaction() as db:
        db.execute(
            "INSERT INTO stage_runs (stage, config_sha256, status, counts, started_at, finished_at) VALUES (?, ?, "
            "'done', ?, ?, ?)",
            (stage, config_sha, json.dumps(counts, default=str), started, utc_timestamp()),
        )


async def propose(
    workspace: Workspace,
    query_file: QueryFile,
    judge: Judge | None,
    settings: PoolSettings = PoolSettings(),
    *,
    batch: bool = False,
    progress=None,
) -> ProposeSummary:
    """Pool and judge candidates for real queries; ``judge=None`` pools only."""
    started, clock = utc_timestamp(), time.perf_counter()
    summary = ProposeSummary(
        queries=len(query_file.queries), merged_duplicates=query_file.merged, skipped_lines=len(query_file.skipped)
    )
    summary.retrievers = settings.names()
    retrievers = Retrievers(workspace, summary.retrievers)
    summary.new_queries = store_queries(workspace, query_file.queries)
    runs = retrievers.runs(query_file.queries, k=max(settings.depth, settings.fused_depth or 0, 100))
    candidates = pool(runs, settings.depth, settings.fused_depth, settings.rrf_k)
    with workspace.transaction() as db:
        summary.candidates = rows.put_candidates(db, candidates)
    pairs = pooled_pairs(candidates)
    sizes = Counter(q for q, _ in pairs)
    per_query = [sizes.get(q.query_id, 0) for q in query_file.queries]
    summary.pool_min, summary.pool_max = min(per_query), max(per_query)
    summary.pool_mean = round(sum(per_query) / len(per_query), 2)
    if judge is not None:
        texts = {q.query_id: q.text for q in query_file.queries}
        judge_pairs = [JudgePair(q, texts[q], c, retrievers.passages[c]) for q, c in pairs]
        summary.judging, _ = await judge_and_queue(workspace, judge, judge_pairs, batch=batch, progress=progress)
    summary.seconds = round(time.perf_counter() - clock, 3)
    record_stage(
        workspace,
        "propose",
        {"pool": asdict(settings), "judge": judge.identity if judge else None},
        summary.as_dict(),
        started,
    )
    return summary


@dataclass
class AuditSummary:
    pairs: int = 0
    labelled_relevant: int = 0
    judged: int = 0
    agreement: float | None = None  # share of pairs where both say relevant or both say not (grade >= 1)
    exact_agreement: float | None = None  # share with the same grade
    kappa: float | None = None  # Cohen's kappa on relevant / not relevant
    disagreements: list[dict] = field(default_factory=list)
    judging: JudgingCounts = field(default_factory=JudgingCounts)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def _check_known(ids: set[str], known: set[str], kind: str, source: str) -> None:
    unknown = sorted(ids - known)
    if unknown:
        shown = ", ".join(repr(i) for i in unknown[:5])
        raise InputError(
            f"{len(unknown)} {kind} id(s) in the qrels are not in {source}: {shown}{' ...' if len(unknown) > 5 else ''}"
        )


async def audit(
    workspace: Workspace, qrels: Qrels, query_file: QueryFile, judge: Judge, *, progress=None
) -> AuditSummary:
    """Grade every labelled pair of ``qrels`` with the judge and report where the judge and the labels disagree
    about relevance (grade >= 1). The judge's verdicts are stored as proposals; disagreements head the queue."""
    started, clock = utc_timestamp(), time.perf_counter()
    labels = qrels.to_dict()
    texts = {q.query_id: q.text for q in query_file.queries}
    _check_known(set(labels), set(texts), "query", "the queries file")
    chunk_ids, passages = rows.live_chunk_passages(workspace.db)
    passage_of = dict(zip(chunk_ids, passages))
    _check_known(
        {c for chunks in labels.values() for c in chunks}, set(passage_of), "chunk", "the workspace's live chunks"
    )
    store_queries(workspace, [q for q in query_file.queries if q.query_id in labels])
    pairs = [JudgePair(q, texts[q], c, passage_of[c]) for q, chunks in labels.items() for c in chunks]

    def disagrees(judgment: Judgment) -> bool:
        return (labels[judgment.query_id][judgment.chunk_id] >= 1) != (judgment.grade >= 1)

    counts, every = await judge_and_queue(workspace, judge, pairs, progress=progress, disagreement=disagrees)
    summary = AuditSummary(
        pairs=len(pairs),
        labelled_relevant=sum(g >= 1 for chunks in labels.values() for g in chunks.values()),
        judging=counts,
    )
    judged = [(labels[q][c], j) for (q, c), j in every.items()]
    summary.judged = len(judged)
    if judged:
        summary.agreement = sum((g >= 1) == (j.grade >= 1) for g, j in judged) / len(judged)
        summary.exact_agreement = sum(min(g, 2) == j.grade for g, j in judged) / len(judged)
        summary.kappa = cohen_kappa([g >= 1 for g, _ in judged], [j.grade >= 1 for _, j in judged])
    summary.disagreements = sorted(
        (
            {
                "query_id": j.query_id,
                "chunk_id": j.chunk_id,
                "label": g,
                "judge": j.grade,
                "confidence": j.confidence,
                "rationale": j.rationale,
            }
            for g, j in judged
            if (g >= 1) != (j.grade >= 1)
        ),
        key=lambda d: (d["query_id"], d["chunk_id"]),
    )
    summary.seconds = round(time.perf_counter() - clock, 3)
    record_stage(
        workspace,
        "audit",
        {"judge": judge.identity, "pairs": len(pairs)},
        {k: v for k, v in summary.as_dict().items() if k != "disagreements"},
        started,
    )
    return summary
