"""The whole job from one config: ``plan`` (what it will spend) and ``run`` (every stage, each skipping what is
done, stopping while pairs wait for a reviewer)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .labelling import judges_pools
from .workspace import open_workspace, opened

if TYPE_CHECKING:
    from ..config import Config
    from ..stages.plan import Plan
    from ..store import Workspace
    from ..tables import Run

NO_SOURCES = "the config's run.sources lists no documents to chunk (files or folders)"


def plan(config: Config, *, workspace: Workspace | None = None, review: bool = True) -> Plan:
    """What :func:`run` will spend (LLM calls, tokens, cost, time per step, from the settings, the corpus and what
    this workspace and machine measured): over the chunks of an open ``workspace`` (a run, once chunked), else over
    ``run.sources`` chunked in memory (a dry run: nothing is written). With ``review`` (as :func:`run` takes it),
    what the run will wait for a reviewer to answer too."""
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
        logged_done=proposed if logged else 0, review=review,
    )  # fmt: skip


def checks_questions(config: Config) -> bool:
    """With question review on, or unset with a weak generator such as the embedded one (many of its questions
    unusable, some labelled on a chunk that does not answer them), :func:`run` waits for the doubted questions before
    it releases; the reviewers are served them unless question review is off."""
    from ..registry import abilities

    if config.review.questions is not None:
        return config.review.questions
    return abilities(config.generator_role().kind).weak


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
        return RunResult({"plan": plan(config, review=review)}, status="planned")
    if not config.run.sources:
        raise InputError(NO_SOURCES)
    result = RunResult({})
    try:
        return _run_stages(config, result, review, progress, on_stage)
    except BaseException as error:  # a stage failed: the error carries what the stages before it did (run --json)
        with contextlib.suppress(Exception):  # an exception that takes no attributes keeps its own message
            error.run_so_far = result
        raise


@dataclass
class RunStep:
    """What a stage's ``run`` (:class:`~testset_builder.registry.Stage`) is given by :func:`run`: the config with
    what is left of the run's budget, the workspace ``run`` holds open (None for a stage that runs outside it),
    whether a review round may stop the run, the run so far (``result.stages``: each earlier stage's result), and
    its progress bars."""

    config: Config
    workspace: Workspace | None
    review: bool
    result: RunResult
    progress: Callable[[str], contextlib.AbstractContextManager] | None = None

    def bar(self, stage: str) -> contextlib.AbstractContextManager:
        """The progress bar of ``stage`` (a context manager giving the bar, or None for none)."""
        return self.progress(stage) if self.progress is not None else contextlib.nullcontext()

    def wait_for_review(self, waiting: int, doubted: int, held: bool = False) -> None:
        """Stop the run here: ``waiting`` pairs drawn for review and ``doubted`` synthetic questions wait for a
        human (review them, then run again); ``held``: those questions are every one no reviewer answered, which
        the release holds back, not only the doubted."""
        self.result.status, self.result.waiting, self.result.doubted = "review", waiting, doubted
        questions = (
            f"{doubted} synthetic questions no reviewer has checked, which the release holds back "
            "(release.hold_unreviewed; keep, drop or edit each)"
            if held
            else f"{doubted} synthetic questions whose source label the estimate doubts (keep, drop or edit each)"
        )
        what = " and ".join(
            part for part in (f"{waiting} pairs drawn for review" if waiting else "", questions if doubted else "")
            if part
        )  # fmt: skip
        self.result.message = f"{what} wait for a human"


def _run_stages(config: Config, result: RunResult, review: bool, progress, on_stage) -> RunResult:
    """:func:`run`'s stages (:func:`~testset_builder.registry.run_stages`), in order, filling ``result`` as each
    ends; a stage that fell short or stopped for review ends the run."""
    from ..registry import run_stages

    limit, spent = config.limits.max_cost_usd, 0.0
    with contextlib.ExitStack() as held:
        workspace = None
        for stage in run_stages():
            if stage.workspace and workspace is None:
                workspace = held.enter_context(open_workspace(config))
            elif not stage.workspace and workspace is not None:
                held.close()  # the chunking opens the workspace itself; the report reads the release it wrote
                workspace = None
            budgeted = _budgeted(config, limit, spent)
            value = stage.run(RunStep(budgeted, workspace, review, result, progress))
            if value is not None:
                fell_short = stage.fell_short(value)
                result.stages[stage.name] = value
                if fell_short:
                    result.short.append(stage.name)
                if on_stage is not None:
                    on_stage(stage.name, value)
                if fell_short:
                    result.status = "incomplete"
                    result.message = f"{stage.name} fell short: what it made is kept; run again"
                spent += stage.cost_usd(value)
            if result.status != "done":
                return result
    released, reported = result.stages.get("release"), result.stages.get("report")
    if released is not None and reported is not None:
        result.release, result.report = released.version, reported.path
        result.message = f"release {released.version}: {released.path}; report: {reported.path}"
    return result


def _budgeted(config: Config, limit: float | None, spent: float) -> Config:
    """The config with what is left of the run's budget for the next stage."""
    if limit is None:
        return config
    left = max(0.0, limit - spent)
    return config.model_copy(update={"limits": config.limits.model_copy(update={"max_cost_usd": left})})


def report_runs(baselines: Sequence[Path], runs: Sequence[Path]) -> list[Run]:
    """The runs ``run``'s report scores: the config's runs named as propose pooled them, and the baselines by their
    retriever, called "NAME (baseline)" where a run of the config has that name."""
    from ..export import read_run, read_runs

    mine = read_runs(runs)
    taken = {run.name for run in mine}
    theirs = [read_run(path) for path in baselines]
    return [replace(r, name=f"{r.name} (baseline)") if r.name in taken else r for r in theirs] + mine
