"""Labelling: ``synthesize``, ``propose``, ``audit``, ``estimate``, ``select``, ``queue``, and the LLM ledger
(``costs``, ``resume``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import InputError
from .workspace import opened, prompt_library, run_async, with_roles

if TYPE_CHECKING:
    from ..config import Config
    from ..export.queries import QueryFile
    from ..labels.estimate import EstimateSummary
    from ..stages.logs.failures import LogSelectionSummary
    from ..stages.propose import AuditSummary, ProposeSummary
    from ..stages.selection import SelectionSummary
    from ..stages.synthesize import SynthesizeSummary
    from ..store import Workspace
    from ..tables import Run


def judges_pools(config: Config) -> bool:
    """Whether the judge grades the pools (``propose``'s and ``run``'s default): not with a weak model such as the
    embedded one (near chance on relevance; the estimate grades instead)."""
    from ..registry import abilities

    return not abilities(config.judge_role().kind).weak


def synthesize(
    config: Config, *, workspace: Workspace | None = None, progress=None, batch: bool = False
) -> SynthesizeSummary:
    """Make the config's synthetic questions (``synthesize``), each labelled on its source chunk; the summary says
    when it fell short (``incomplete``) and whether a rerun can make more (``retryable``)."""
    from ..labels.policy import holds_unreviewed, unanswered_questions
    from ..stages.synthesize import synthesize as synthesizing

    prompts = prompt_library(config)
    with opened(config, workspace) as ws:
        made = with_roles(
            config, ws, "synthesize",
            lambda roles, bar: synthesizing(
                ws, roles, config.synthesize, judging=config.judging, prompts=prompts, progress=bar, batch=batch
            ),
            progress,
        )  # fmt: skip
        made.held_waiting = len(unanswered_questions(ws.db, holds_unreviewed(config)))
        return made


@dataclass
class ProposeResult:
    """What ``propose`` did (``summary``), the query lines it skipped, and whether the judge graded the pools
    (``judged``; else they wait for the estimate and the reviewers)."""

    summary: ProposeSummary
    skipped: list[str] = field(default_factory=list)
    judged: bool = True

    @property
    def incomplete(self) -> bool:
        """Some pairs were left unjudged (a failure, or the budget's stop): a rerun goes on with them."""
        return self.summary.judging.incomplete

    def as_dict(self) -> dict:
        return {**self.summary.as_dict(), "skipped": self.skipped}


def propose(
    config: Config,
    queries: str | Path | QueryFile | None = None,
    *,
    from_logs: bool = False,
    judge: bool | None = None,
    workspace: Workspace | None = None,
    progress=None,
    batch: bool = False,
    strict: bool = False,
    id_field: str | None = None,
    text_field: str | None = None,
    runs: Sequence[str | Path | Run] | str | Path | Run = (),
) -> ProposeResult:
    r"""Pool candidates for real queries and estimate each pair's relevance; with ``judge`` the config's judge
    grades them too (None: unless it is the embedded local model, :func:`judges_pools`). ``queries``: a file of
    queries (JSONL, CSV, TSV or text), or a :class:`~testset_builder.export.queries.QueryFile`; ``from_logs``: the
    logged queries a failure-first draw chose instead. ``runs``: the systems the set will score (run files or
    :class:`~testset_builder.tables.Run`\ s), whose top ``propose.run_depth`` join the pool."""
    from ..export import read_runs
    from ..export.queries import QueryFile, read_queries
    from ..labels.judge import Judge
    from ..stages.logs.failures import drawn_queries
    from ..stages.propose import propose as proposing
    from ..tables import Run

    if (queries is None) == (not from_logs):
        raise InputError("give a queries file or from_logs (the logged queries a failure-first draw chose)")
    judge = judges_pools(config) if judge is None else judge
    with opened(config, workspace) as ws:
        if from_logs:
            query_file = drawn_queries(ws)
        elif isinstance(queries, QueryFile):
            query_file = queries
        else:
            query_file = read_queries(queries, id_field=id_field, text_field=text_field, strict=strict)
        runs = [runs] if isinstance(runs, (str, Path, Run)) else list(runs or ())
        runs = [run for run in runs if isinstance(run, Run)] + read_runs([r for r in runs if not isinstance(r, Run)])
        if not judge:
            summary = run_async(proposing(ws, query_file, None, config.propose, runs=runs))
        else:
            prompts = prompt_library(config)
            summary = with_roles(
                config, ws, "propose",
                lambda roles, bar: proposing(
                    ws, query_file, Judge(roles.judge, config.judging, prompts), config.propose, batch=batch,
                    progress=bar, runs=runs,
                ),
                progress,
            )  # fmt: skip
    return ProposeResult(summary, [str(s) for s in query_file.skipped], judge)


def audit(
    config: Config,
    qrels: str | Path,
    queries: str | Path,
    *,
    id_field: str | None = None,
    text_field: str | None = None,
    out: str | Path | None = None,
    workspace: Workspace | None = None,
    progress=None,
) -> AuditSummary:
    """The judge grades every labelled pair of an existing set (``qrels``, its ``queries``); the disagreements
    head the review queue and, with ``out``, are written to a TSV file. Its document ids must be chunk ids of the
    workspace."""
    from ..export import read_qrels
    from ..export.queries import read_queries
    from ..export.reports import write_audit_tsv
    from ..labels.judge import Judge
    from ..stages.propose import audit as auditing

    labels = read_qrels(qrels)
    query_file = read_queries(queries, id_field=id_field, text_field=text_field)
    if out is not None and not Path(out).parent.is_dir():
        raise InputError("--out: no such folder", path=Path(out).parent)
    prompts = prompt_library(config)
    with opened(config, workspace) as ws:
        summary = with_roles(
            config, ws, "audit",
            lambda roles, bar: auditing(ws, labels, query_file, Judge(roles.judge, config.judging, prompts),
                                        progress=bar),
            progress,
        )  # fmt: skip
    if out is not None:
        write_audit_tsv(summary.disagreements, out)
    return summary


@dataclass
class EstimateResult:
    """The refit (``summary``), the estimate rows asked for (query id, chunk id, P(relevant), model, verdicts) and
    the pairs asked for whose chunk is not live."""

    summary: EstimateSummary
    rows: list[dict]
    not_live: list[tuple[str, str]]
    asked: bool = False  # pairs were named, or the rows written (the document says how many)

    def as_dict(self) -> dict:
        document = self.summary.as_dict()
        if self.asked:
            document["exported"] = {"pairs": len(self.rows), "not_live": [list(p) for p in self.not_live]}
        return document


def estimate(
    config: Config,
    *,
    workspace: Workspace | None = None,
    pairs: Sequence[tuple[str, str]] = (),
    pairs_file: str | Path | None = None,
    out: str | Path | None = None,
) -> EstimateResult:
    """Refit the relevance estimate on the verdicts so far (no LLM call), estimating ``pairs`` (and those of a
    qrels file, ``pairs_file``: its grades are not read) too; the rows are those pairs', or every estimated pair's
    when none are given, written to ``out`` (.jsonl or .tsv) when given."""
    from ..export import read_qrels
    from ..export.reports import check_writable, write_estimates
    from ..labels.estimate import estimates_of

    wanted = list(pairs)
    if pairs_file is not None:
        wanted += [(q, c) for q, by in read_qrels(pairs_file).to_dict().items() for c in by]
    if out is not None:
        check_writable(out, "--output")
    with opened(config, workspace) as ws:
        summary, rows, not_live = estimates_of(ws, wanted)
    if out is not None:
        write_estimates(rows, out)
    return EstimateResult(summary, rows, not_live, bool(wanted) or out is not None)


def select(
    config: Config,
    budget: int,
    *,
    from_logs: bool = False,
    uniform_share: float = 0.2,
    seed: int = 0,
    take_all_share: float = 0.5,
    take_all_per_query: int = 3,
    workspace: Workspace | None = None,
) -> SelectionSummary | LogSelectionSummary:
    """Pick about ``budget`` pairs for review (the estimate refit first): each real query's likely relevant pairs
    for sure (at most ``take_all_per_query`` a query, ``take_all_share`` of the budget), the rest drawn at random,
    each with a known probability; the summary says how the budget split and why. With ``from_logs``: about
    ``budget`` logged queries to label instead (:func:`select_logs`)."""
    if from_logs:
        return select_logs(config, budget, uniform_share=uniform_share, seed=seed, workspace=workspace)
    from ..stages.selection import select_for_review

    with opened(config, workspace) as ws:
        return select_for_review(ws, budget, uniform_share, seed, take_all_share, take_all_per_query)


def select_logs(
    config: Config, limit: int, *, uniform_share: float = 0.2, seed: int = 0, workspace: Workspace | None = None
) -> LogSelectionSummary:
    """Draw about ``limit`` logged queries to label, likely failures likelier."""
    from ..stages.logs.failures import select_logged

    with opened(config, workspace) as ws:
        return select_logged(ws, limit, uniform_share, seed)


@dataclass
class QueueResult:
    """The review queue's head (``items``, highest priority first) and its size, or with ``questions`` the
    synthetic questions and how many there are."""

    total: int
    items: list[dict] = field(default_factory=list)
    questions: list[dict] | None = None

    def as_dict(self) -> dict:
        if self.questions is not None:
            return {"total": self.total, "questions": self.questions}
        return {"total": self.total, "items": self.items}


def queue(
    config: Config,
    *,
    limit: int = 20,
    questions: bool = False,
    full: bool = False,
    workspace: Workspace | None = None,
) -> QueueResult:
    """What reviewers see next: the first ``limit`` queued pairs with the judge's and the estimate's view (chunk
    texts cut to 200 characters unless ``full``), or with ``questions`` the synthetic questions. Reads only."""
    from ..labels.queue import queued_pairs, synthetic_questions

    with opened(config, workspace, readonly=True) as ws:
        if questions:
            listed, total = synthetic_questions(ws, limit)
            return QueueResult(total, questions=listed)
        items, total = queued_pairs(ws, limit, None if full else 200)
    return QueueResult(total, items)


@dataclass
class CostsResult:
    """What the recorded LLM calls cost: one row per (stage, provider, model) with calls answered, failed,
    attempts, tokens and cost."""

    rows: list[dict]

    @property
    def cost_usd(self) -> float:
        return sum(row["cost_usd"] for row in self.rows)

    @property
    def calls(self) -> int:
        return sum(row["calls"] for row in self.rows)

    def as_dict(self) -> dict:
        return {"rows": self.rows, "cost_usd": self.cost_usd, "calls": self.calls}


def costs(config: Config, *, workspace: Workspace | None = None) -> CostsResult:
    """The workspace's LLM ledger summed by stage, provider and model. Reads only."""
    from ..store.llm import cost_summary

    with opened(config, workspace, readonly=True) as ws:
        return CostsResult(cost_summary(ws.db))


@dataclass
class ResumeResult:
    """What polling the submitted batches found: batches still running and ended, answers cached, failures, and
    interrupted submissions forgotten."""

    running: int = 0
    ended: int = 0
    answered: int = 0
    failed: int = 0
    forgotten: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def resume(config: Config, *, forget_interrupted: bool = False, workspace: Workspace | None = None) -> ResumeResult:
    """Poll the batches the config's providers were sent (``--batch``) and cache the answers of those that ended;
    with ``forget_interrupted``, forget submissions interrupted before their id was recorded. Then the command
    that submitted them goes on from the cache."""

    async def poll(roles, progress) -> ResumeResult:
        counts = ResumeResult()
        for client in roles.clients:
            if forget_interrupted:
                counts.forgotten += client.forget_interrupted()
            for key, value in (await client.resume_batches()).items():
                setattr(counts, key, getattr(counts, key) + value)
        return counts

    with opened(config, workspace) as ws:
        return with_roles(config, ws, "resume", poll)
