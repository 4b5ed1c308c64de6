"""Propose: candidate pools for real queries, graded by the LLM judge into ``llm`` proposals awaiting review.

``propose`` stores the queries, pools candidates from each retriever (and their RRF fusion), judges every pooled
pair not yet judged by the same judge, and queues the proposals for review by priority (see
:mod:`~testset_builder.labels.queue`). ``audit`` points the same judge at an existing qrels file and flags where
it disagrees. Both are resumable: judgments have deterministic ids and every answer is in the LLM cache, so a
rerun after a crash spends nothing twice and stores nothing twice.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from ..config import ProposeConfig
from ..errors import InputError
from ..export.queries import QueryFile
from ..labels.agreement import cohen_kappa
from ..labels.estimate import estimate_workspace
from ..labels.judge import Judge, JudgePair
from ..labels.labelling import JudgingCounts, judge_and_queue, store_queries
from ..records import Judgment
from ..retrieval import dense_available
from ..retrieval.indexes import WorkspaceIndexes, retriever_names
from ..retrieval.pool import RUN_PREFIX, PooledRun, pool, pooled_pairs, run_candidates
from ..store import estimates as stored_estimates
from ..store import history, rows
from ..store import logs as stored_logs
from ..store.workspace import Workspace, utc_timestamp
from ..tables import Qrels, Run


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
    no_results: dict[str, list[str]] = field(default_factory=dict)  # retriever -> queries it found nothing for
    runs: list[PooledRun] = field(default_factory=list)  # the external runs pooled (`propose --runs`)
    languages: list[str] = field(default_factory=list)  # the corpus's, detected; BM25 cuts text in the first
    judging: JudgingCounts = field(default_factory=JudgingCounts)
    estimate: dict | None = None  # the relevance estimate made at the end: model, pairs, verdicts
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


async def propose(
    workspace: Workspace,
    query_file: QueryFile,
    judge: Judge | None,
    settings: ProposeConfig | None = None,
    *,
    batch: bool = False,
    progress=None,
    runs: Sequence[Run] = (),
) -> ProposeSummary:
    """Pool and judge candidates for real queries; ``judge=None`` pools only. ``runs``: the systems the set will
    score, whose top ``settings.run_depth`` join the pool (TREC pooling), so their figures rest on estimates and
    verdicts rather than on counting what the pool missed as not relevant."""
    with workspace.exclusive("propose"):
        return await _propose(workspace, query_file, judge, settings or ProposeConfig(), batch, progress, runs)


async def _propose(
    workspace: Workspace,
    query_file: QueryFile,
    judge: Judge | None,
    settings: ProposeConfig,
    batch: bool,
    progress,
    external: Sequence[Run] = (),
) -> ProposeSummary:
    started, clock = utc_timestamp(), time.perf_counter()
    summary = ProposeSummary(
        queries=len(query_file.queries), merged_duplicates=query_file.merged, skipped_lines=len(query_file.skipped)
    )
    summary.retrievers = retriever_names(settings.retrievers)
    pooled: list = []
    if external:  # checked before anything is stored or encoded
        query_ids, depth = {q.query_id for q in query_file.queries}, settings.run_depth
        pooled, summary.runs = run_candidates(
            list(external), depth, query_ids, lambda named: stored_logs.live_chunk_ids_among(workspace.db, named)
        )
        for run, took in zip(external, summary.runs):
            _check_pooled(run, took, depth)
    indexes = WorkspaceIndexes(workspace, summary.retrievers, progress)
    summary.new_queries = store_queries(workspace, query_file.queries)
    runs = indexes.runs(query_file.queries, k=max(settings.depth, settings.fused_depth or 0, 100))
    candidates = pool(runs, settings.depth, settings.fused_depth, settings.rrf_k)
    with workspace.transaction() as db:  # pooling only adds, as for every retriever: a pair once pooled stays
        summary.candidates = rows.put_candidates(db, candidates + pooled)
    candidates += pooled
    pairs = pooled_pairs(candidates)
    sizes = Counter(q for q, _ in pairs)
    per_query = [sizes.get(q.query_id, 0) for q in query_file.queries]
    found = {name: set(run.query_ids()) for name, run in runs.items()}
    summary.no_results = {
        name: [q.query_id for q in query_file.queries if q.query_id not in ids] for name, ids in found.items()
    }
    summary.no_results = {name: ids for name, ids in summary.no_results.items() if ids}
    summary.languages = indexes.languages
    summary.pool_min, summary.pool_max = min(per_query), max(per_query)
    summary.pool_mean = round(sum(per_query) / len(per_query), 2)
    if judge is not None:
        texts = {q.query_id: q.text for q in query_file.queries}
        judge_pairs = [JudgePair(q, texts[q], c, indexes.passages[c]) for q, c in pairs]
        summary.judging, _ = await judge_and_queue(workspace, judge, judge_pairs, batch=batch, progress=progress)
    if "dense" in summary.retrievers or not dense_available():  # every signal at hand: no extra encoding
        estimated = estimate_workspace(workspace)
        summary.estimate = {"model": estimated.model["name"], "pairs": estimated.pairs, "verdicts": estimated.verdicts}
    summary.seconds = round(time.perf_counter() - clock, 3)
    judged_by = (
        {"provider": judge.role.provider, "model": judge.model, "prompt": judge.prompt.sha256} if judge else None
    )
    history.record_stage(
        workspace, "propose", {"pool": settings.model_dump(), "judge": judged_by}, summary.as_dict(), started
    )
    return summary


def _check_pooled(run: Run, took: PooledRun, depth: int) -> None:
    """A run that pooled nothing is a mistake to say, not to pass over: its ids are not these queries' or not the
    workspace's chunks'."""
    name = took.name.removeprefix(RUN_PREFIX)
    if not took.queries:
        shown = ", ".join(list(dict.fromkeys(run.query_ids()))[:3])
        raise InputError(
            f"run {name!r} has results for none of these queries (its query ids: {shown or 'none'}): its ids must "
            "be the queries file's (a plain-text file's ids are derived from each text: give JSONL or CSV with "
            "your ids)"
        )
    if not took.candidates:
        raise InputError(
            f"run {name!r} names none of this workspace's chunks in its top {depth} for these queries "
            f"({took.unknown_chunks} results): is it a run over another corpus or chunking? Its ids must be the "
            "workspace's chunk ids"
        )


@dataclass
class AuditSummary:
    pairs: int = 0
    labelled_relevant: int = 0
    judged: int = 0
    agreement: float | None = None  # share of pairs where both say relevant or both say not (grade >= 1)
    exact_agreement: float | None = None  # share with the same grade
    kappa: float | None = None  # Cohen's kappa on relevant / not relevant
    disagreements: list[dict] = field(default_factory=list)
    audited: list[dict] = field(default_factory=list)  # every pair: its label, the judge's grade, the estimate
    estimate_model: str | None = None
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
    with workspace.exclusive("audit"):
        return await _audit(workspace, qrels, query_file, judge, progress)


async def _audit(workspace: Workspace, qrels: Qrels, query_file: QueryFile, judge: Judge, progress) -> AuditSummary:
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
    estimated = estimate_workspace(workspace, [(p.query_id, p.chunk_id) for p in pairs])
    summary.estimate_model = estimated.model["name"]
    stored = stored_estimates.estimates(workspace.db)
    summary.audited = [
        {
            "query_id": p.query_id, "chunk_id": p.chunk_id, "label": labels[p.query_id][p.chunk_id],
            "judge": every[key].grade if (key := (p.query_id, p.chunk_id)) in every else None,
            "p_relevant": stored[key].p_relevant if key in stored else None,
        }
        for p in pairs
    ]  # fmt: skip
    summary.seconds = round(time.perf_counter() - clock, 3)
    history.record_stage(
        workspace,
        "audit",
        {
            "judge": {"provider": judge.role.provider, "model": judge.model, "prompt": judge.prompt.sha256},
            "pairs": len(pairs),
        },
        {k: v for k, v in summary.as_dict().items() if k not in ("disagreements", "audited")},
        started,
    )
    return summary
