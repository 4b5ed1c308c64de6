"""The whole job from one config: ``plan`` (what it will spend) and ``run`` (every stage, each skipping what is
done, stopping while pairs wait for a reviewer)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .corpus import chunk, import_logs
from .labelling import estimate, judges_pools, propose, select, select_logs, synthesize
from .releases import release
from .scoring import baseline, report
from .workspace import open_workspace, opened

if TYPE_CHECKING:
    from ..config import Config
    from ..stages.plan import Plan
    from ..store import Workspace
    from ..tables import Run

NO_SOURCES = "the config's run.sources lists no documents to chunk (files or folders)"


def plan(config: Config, *, workspace: Workspace | None = None) -> Plan:
    """What :func:`run` will spend (LLM calls, tokens, cost, time per step, from the settings, the corpus and what
    this workspace and machine measured): over the chunks of an open ``workspace`` (a run, once chunked), else over
    ``run.sources`` chunked in memory (a dry run: nothing is written)."""
    from ..corpus.chunkers import chunk_document
    from ..corpus.loaders import load_sources
    from ..corpus.sampling import SourceChunk
    from ..export.queries import read_queries
    from ..stages.plan import measurements, plan_run
    from ..store import rows

    known = workspace is not None or (Path(config.workspace) / "testset.db").exists()
    with opened(config, workspace, readonly=True) if known else contextlib.nullcontext() as ws:
        if workspace is not None:  # a run, after its chunk stage: the workspace's chunks
            chunks = [SourceChunk(*row) for row in rows.live_chunk_rows(ws.db)]
        else:  # a dry run: the sources as they are now, chunked in memory (what the workspace holds may be older)
            if not config.run.sources:
                raise InputError(NO_SOURCES)
            chunking = config.chunking
            loaded = load_sources(
                config.run.sources, id_field=chunking.id_field, text_field=chunking.text_field,
                title_field=chunking.title_field,
            )  # fmt: skip
            chunks = [
                SourceChunk(c.chunk_id, c.doc_id, c.text) for d in loaded.documents for c in chunk_document(d, chunking)
            ]
        measured = measurements(ws)
    queries = read_queries(config.run.queries).queries if config.run.queries is not None else None
    drawn, proposed = measured.logged_drawn
    logged = (drawn or config.run.log_limit) if config.run.logs is not None else 0
    return plan_run(
        config, chunks, None if queries is None else [q.text for q in queries], measured,
        propose_judges=judges_pools(config), query_ids=[q.query_id for q in queries or ()], logged=logged,
        logged_done=proposed if logged else 0,
    )  # fmt: skip


def checks_questions(config: Config) -> bool:
    """With question review on, or unset with the embedded generator (many of its questions unusable, some labelled
    on a chunk that does not answer them), :func:`run` waits for the doubted questions before it releases; the
    reviewers are served them unless question review is off."""
    if config.review.questions is not None:
        return config.review.questions
    return config.generator_role().kind == "local"


@dataclass
class RunResult:
    """What :func:`run` did: each stage's result by name (in order), the stages that fell short, and how it ended:
    ``done`` (released and reported), ``review`` (pairs drawn for review, or doubted questions, wait for a human:
    review them, then run again), ``incomplete`` (a stage fell short: its failures, or the budget's stop; what it
    made is kept) or ``planned`` (a dry run: the plan alone)."""

    stages: dict[str, Any]
    status: str = "done"
    message: str = ""
    waiting: int = 0
    doubted: int = 0
    release: str | None = None
    report: Path | None = None
    baselines: list[Path] = field(default_factory=list)
    short: list[str] = field(default_factory=list)  # the stages that fell short (a rerun can do more)

    @property
    def stopped_for_review(self) -> bool:
        return self.status == "review"

    def fell_short(self, stage: str) -> bool:
        return stage in self.short

    def as_dict(self) -> dict:
        stages = {
            name: {"fell_short": self.fell_short(name), "result": result.as_dict()}
            for name, result in self.stages.items()
        }
        document = {"status": self.status, "message": self.message, "stages": stages}
        if self.status == "review":
            document.update(waiting=self.waiting, doubted=self.doubted)
        if self.status == "done":
            document.update(release=self.release, report=str(self.report))
        return document


def run(
    config: Config,
    *,
    review: bool = True,
    dry_run: bool = False,
    progress: Callable[[str], contextlib.AbstractContextManager] | None = None,
    on_stage: Callable[[str, Any], None] | None = None,
) -> RunResult:
    """The whole job from one config (its ``run:`` section), each stage skipping what is done: chunk, plan,
    synthesize, propose (``run.queries``), production logs (``run.logs``: import, a failure-first draw, propose), a
    review round (``select``) and a stop while drawn pairs wait for a human (unless ``review`` is False: then it
    releases what needs no human), the estimate refit on the verdicts, release (when the content changed),
    baseline runs and a report. ``limits.max_cost_usd`` bounds the whole run. ``dry_run``: the plan alone, over the
    sources chunked in memory (nothing written, nothing called). ``progress(stage)`` gives a context manager
    holding the stage's progress bar (or None); ``on_stage(name, result)`` hears of each stage as it ends. A rerun
    after a crash, a budget stop or a review goes on where it was and pays for nothing twice. When a stage raises,
    the error carries the stages before it as ``run_so_far`` (a :class:`RunResult`)."""
    if dry_run:
        return RunResult({"plan": plan(config)}, status="planned")
    if not config.run.sources:
        raise InputError(NO_SOURCES)
    result = RunResult({})
    try:
        return _run_stages(config, result, review, progress, on_stage)
    except BaseException as error:  # a stage failed: the error carries what the stages before it did (run --json)
        with contextlib.suppress(Exception):  # an exception that takes no attributes keeps its own message
            error.run_so_far = result
        raise


def _run_stages(config: Config, result: RunResult, review: bool, progress, on_stage) -> RunResult:
    """:func:`run`'s stages, filling ``result`` as each ends."""
    from ..retrieval import dense_available
    from ..store import draws, estimates
    from ..store import logs as stored_logs
    from ..store import review as review_store

    limit, spent = config.limits.max_cost_usd, [0.0]

    def bar(stage: str):
        return progress(stage) if progress is not None else contextlib.nullcontext()

    def ended(name: str, value, fell_short: bool = False):
        result.stages[name] = value
        if fell_short:
            result.short.append(name)
        if on_stage is not None:
            on_stage(name, value)
        if fell_short:
            result.status, result.message = "incomplete", f"{name} fell short: what it made is kept; run again"
        return value

    def budgeted() -> Config:
        """The config with what is left of the run's budget for the next stage."""
        if limit is None:
            return config
        left = max(0.0, limit - spent[0])
        return config.model_copy(update={"limits": config.limits.model_copy(update={"max_cost_usd": left})})

    with bar("chunk") as shown:  # each stage's bar is closed before its line is told
        chunked = chunk(config, progress=shown)
    ended("chunk", chunked)
    with open_workspace(config) as ws:
        ended("plan", plan(config, workspace=ws))
        with bar("synthesize") as shown:
            made = synthesize(budgeted(), workspace=ws, progress=shown)
        # a stage waiting for a batch, or short for want of material (every chunk used), did what it could
        ended("synthesize", made, not made.batch_id and made.incomplete and made.retryable)
        spent[0] += made.cost_usd
        if result.status != "done":
            return result
        judge = judges_pools(config)
        if config.run.queries is not None:
            with bar("propose") as shown:
                proposed = propose(
                    budgeted(), config.run.queries, judge=judge, workspace=ws, progress=shown, runs=config.run.runs
                )
            ended("propose", proposed, proposed.incomplete)
            spent[0] += proposed.summary.judging.cost_usd
            if result.status != "done":
                return result
        if config.run.logs is not None:
            ended("import-logs", import_logs(config, config.run.logs, workspace=ws))
            if stored_logs.undrawn_count(ws.db):
                ended("select-logs", select_logs(config, config.run.log_limit, workspace=ws))
            with bar("propose") as shown:
                proposed = propose(budgeted(), from_logs=True, judge=judge, workspace=ws, progress=shown)
            ended("propose-logs", proposed, proposed.incomplete)
            spent[0] += proposed.summary.judging.cost_usd
            if result.status != "done":
                return result
        first_round = draws.next_round(ws.db) == 1 and estimates.any_estimates(ws.db)
        if config.run.review_budget and first_round and review:
            ended("select", select(config, config.run.review_budget, workspace=ws))
        waiting = draws.waiting_pairs(ws.db) if review else 0
        doubted = (
            sum(not answered for answered in review_store.doubted_questions(ws.db).values())
            if review and checks_questions(config)
            else 0
        )
        if waiting or doubted:
            result.status, result.waiting, result.doubted = "review", waiting, doubted
            what = " and ".join(
                part
                for part in (
                    f"{waiting} pairs drawn for review" if waiting else "",
                    f"{doubted} synthetic questions whose source label the estimate doubts (keep, drop or edit each)"
                    if doubted
                    else "",
                )
                if part
            )
            result.message = f"{what} wait for a human"
            return result
        if estimates.graded_estimated_pairs(ws.db):  # the verdicts refit the estimate before the release carries it
            ended("estimate", estimate(config, workspace=ws))
        released = ended("release", release(config, workspace=ws))
    spec = f"{config.workspace}@{released.version}"
    for retriever in config.run.baselines:
        if retriever == "dense" and not dense_available():
            continue
        path = Path(config.workspace) / "reports" / "runs" / f"{retriever}-{released.version}.trec"
        path.parent.mkdir(parents=True, exist_ok=True)
        baseline(spec, retriever, out=path)
        result.baselines.append(path)
    reported = ended("report", report(spec, report_runs(result.baselines, config.run.runs)))
    result.release, result.report = released.version, reported.path
    result.message = f"release {released.version}: {released.path}; report: {reported.path}"
    return result


def report_runs(baselines: Sequence[Path], runs: Sequence[Path]) -> list[Run]:
    """The runs ``run``'s report scores: the config's runs named as propose pooled them, and the baselines by their
    retriever, called "NAME (baseline)" where a run of the config has that name."""
    from ..export import read_run, read_runs

    mine = read_runs(runs)
    taken = {run.name for run in mine}
    theirs = [read_run(path) for path in baselines]
    return [replace(r, name=f"{r.name} (baseline)") if r.name in taken else r for r in theirs] + mine
