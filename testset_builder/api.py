"""The library under every command: what a notebook or a script calls, and what the CLI and ``run`` call.

Each stage is one function from a :class:`~testset_builder.config.Config` (and, optionally, a workspace you hold
open) to a result object with ``as_dict()``; none calls the CLI, none prints::

    from testset_builder import api

    config = api.load_config("my-set/testset-builder.yaml")   # or api.load_config(None, workspace="ws")
    result = api.run(config)                                     # the whole job: chunk ... release, report
    print(result.stopped_for_review, result.release)
    scored = api.score("my-set/testset@latest", my_retriever, ["recall@10", "ndcg@10"])
    print(scored.metrics["recall@10"]["mean"])

``my_retriever`` is any callable from a query's text to its ranked results: (chunk id, score) pairs, or chunk ids
alone (ranked first to last). :func:`langchain_retriever` and :func:`llamaindex_retriever` wrap those libraries'
retrievers (importing nothing of them until called).

Stages that call an LLM take ``progress`` (a ``rich.progress.Progress``, or None for none). A stage function opens
the config's workspace itself unless ``workspace`` is given; a process waiting for another to finish with the
workspace waits silently (the CLI says so on stderr).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InputError

if TYPE_CHECKING:
    from .config import Config

Retriever = Callable[[str], Iterable[Any]]
DEFAULT_METRICS = "recall@10,precision@10,mrr,ndcg@10,hit_rate@5,map"  # what `score` reports unless told


def load_config(source: str | Path | Config | None = None, **overrides: Any) -> Config:
    """A config: a file, a bundled config's name, or (None) the default one, with settings replaced by keyword
    (dotted keys spelled with ``__``: ``load_config("c.yaml", synthesize__questions=5, workspace="ws")``); an
    override of None changes nothing. A :class:`Config` given is returned with the overrides applied."""
    from .config import Config, override, resolve_config

    dotted = {key.replace("__", "."): value for key, value in overrides.items()}
    if isinstance(source, Config):
        return override(source, dotted)
    return resolve_config(source, dotted)


def open_workspace(config: Config | str | Path, create: bool = False, readonly: bool = False, on_wait=None):
    """The workspace of ``config`` (or at a path), opened: use ``with``. It is created with ``create``."""
    from .store import open_workspace as opening

    root = Path(config) if isinstance(config, str | Path) else config.workspace
    return opening(root, create=create, readonly=readonly, on_wait=on_wait)


@contextlib.contextmanager
def _opened(config: Config, workspace, create: bool = False, readonly: bool = False) -> Iterator:
    if workspace is not None:
        yield workspace
        return
    with open_workspace(config, create=create, readonly=readonly) as opened:
        yield opened


def run_async(awaitable):
    """Run a coroutine to its end from synchronous code, also where an event loop already runs (a notebook): then
    in a thread of its own."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(awaitable)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, awaitable).result()


def with_roles(config: Config, workspace, stage: str, work, progress=None):
    """``await work(roles, progress)`` with the config's generator and judge opened for ``stage`` (their clients
    share the config's budget, cache and limits); returns what ``work`` returned."""
    from .llm import roles as llm_roles

    async def go():
        async with llm_roles.open_roles(config, workspace, stage) as roles:
            return await work(roles, progress)

    return run_async(go())


def prompt_library(config: Config):
    """The prompts the config's stages use: its ``prompts_dir``, the bundled ones filling the gaps."""
    from .prompts import PromptLibrary

    return PromptLibrary(config.prompts_dir)


# the stages ----------------------------------------------------------------------------------------------------------


@dataclass
class ChunkResult:
    """What ``chunk`` did (:class:`~testset_builder.corpus.ingest.IngestSummary`) and what it could not read."""

    summary: Any
    skipped_files: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {**self.summary.as_dict(), "skipped_files": self.skipped_files, "warnings": self.warnings}

    def __getattr__(self, name: str):  # the summary's fields read through: result.chunks_added
        if name == "summary":
            raise AttributeError(name)
        return getattr(self.summary, name)


def chunk(
    config: Config,
    sources: Sequence[str | Path] | None = None,
    *,
    workspace=None,
    strict: bool = False,
    allow_removal: bool = False,
    rehash: bool = False,
    engine=None,
    progress=None,
) -> ChunkResult:
    """Chunk ``sources`` (default: the config's ``run.sources``) into the workspace (created if missing):
    unchanged documents are skipped, changed ones re-chunked, vanished ones marked removed (a large removal raises
    :class:`~testset_builder.errors.LargeRemovalError` unless ``allow_removal``)."""
    from .corpus.batches import local_engine
    from .corpus.ingest import ingest
    from .corpus.loaders import stream_sources

    sources = list(config.run.sources if sources is None else sources)
    if not sources:
        raise InputError("no sources to chunk: give files or folders (run.sources in the config)")
    chunking = config.chunking
    fields = {"id_field": chunking.id_field, "text_field": chunking.text_field, "title_field": chunking.title_field}
    loaded = stream_sources(sources, strict=strict, **fields)
    with _opened(config, workspace, create=True) as ws:
        summary = ingest(
            ws, loaded, chunking, progress=progress, allow_removal=allow_removal, engine=engine or local_engine,
            rehash=rehash,
        )  # fmt: skip
    return ChunkResult(summary, [str(s) for s in loaded.skipped], [str(n) for n in loaded.notes])


def synthesize(config: Config, *, workspace=None, progress=None, batch: bool = False):
    """Make the config's synthetic questions (``synthesize``), each labelled on its source chunk; returns a
    :class:`~testset_builder.stages.synthesize.SynthesizeSummary` (``incomplete`` when it fell short)."""
    from .stages.synthesize import synthesize as synthesizing

    prompts = prompt_library(config)
    with _opened(config, workspace) as ws:
        return with_roles(
            config, ws, "synthesize",
            lambda roles, bar: synthesizing(
                ws, roles, config.synthesize, judging=config.judging, prompts=prompts, progress=bar, batch=batch
            ),
            progress,
        )  # fmt: skip


@dataclass
class ProposeResult:
    """What ``propose`` did (:class:`~testset_builder.stages.propose.ProposeSummary`) and the query lines it
    skipped."""

    summary: Any
    skipped: list[str] = field(default_factory=list)

    @property
    def incomplete(self) -> bool:
        return self.summary.judging.incomplete

    def as_dict(self) -> dict:
        return {**self.summary.as_dict(), "skipped": self.skipped}

    def __getattr__(self, name: str):
        if name == "summary":
            raise AttributeError(name)
        return getattr(self.summary, name)


def propose(
    config: Config,
    queries=None,
    *,
    from_logs: bool = False,
    judge: bool = True,
    workspace=None,
    progress=None,
    batch: bool = False,
    strict: bool = False,
    id_field: str | None = None,
    text_field: str | None = None,
    runs=(),
) -> ProposeResult:
    r"""Pool candidates for real queries and estimate each pair's relevance (with ``judge``, the config's judge
    grades them too). ``queries``: a file of queries (JSONL, CSV, TSV or text), or a
    :class:`~testset_builder.export.queries.QueryFile`; ``from_logs``: the logged queries a failure-first draw chose
    instead. ``runs``: the systems the set will score (run files or :class:`~testset_builder.tables.Run`\ s), whose
    top ``propose.run_depth`` join the pool."""
    from .export import read_runs
    from .export.queries import QueryFile, read_queries
    from .stages.judge import Judge
    from .stages.logs.failures import drawn_queries
    from .stages.propose import propose as proposing
    from .tables import Run

    if (queries is None) == (not from_logs):
        raise InputError("give a queries file or from_logs (the logged queries a failure-first draw chose)")
    with _opened(config, workspace) as ws:
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
    return ProposeResult(summary, [str(s) for s in query_file.skipped])


def import_logs(config: Config, log: str | Path, *, workspace=None, force: bool = False):
    """Import a production log (JSON lines, CSV or OpenTelemetry traces of queries, what was retrieved, the answer,
    feedback); returns a :class:`~testset_builder.stages.logs.importer.LogImportSummary`. ``force`` imports again a
    file whose earlier import stored no record."""
    from .stages.logs.importer import import_logs as importing

    with _opened(config, workspace) as ws:
        return importing(ws, Path(log), config.logs, force=force)


def select(
    config: Config,
    budget: int,
    *,
    uniform_share: float = 0.2,
    seed: int = 0,
    take_all_share: float = 0.5,
    take_all_per_query: int = 3,
    workspace=None,
):
    """Pick about ``budget`` pairs for review (the estimate refit first): each real query's likely relevant pairs
    for sure (at most ``take_all_per_query`` a query, ``take_all_share`` of the budget), the rest drawn at random,
    each with a known probability; returns a :class:`~testset_builder.stages.selection.SelectionSummary`, which
    says how the budget split and why."""
    from .stages.selection import select_for_review

    with _opened(config, workspace) as ws:
        return select_for_review(ws, budget, uniform_share, seed, take_all_share, take_all_per_query)


def select_logs(config: Config, limit: int, *, uniform_share: float = 0.2, seed: int = 0, workspace=None):
    """Draw about ``limit`` logged queries to label, likely failures likelier; returns a
    :class:`~testset_builder.stages.logs.failures.LogSelectionSummary`."""
    from .stages.logs.failures import select_logged

    with _opened(config, workspace) as ws:
        return select_logged(ws, limit, uniform_share, seed)


@dataclass
class EstimateResult:
    """The refit (:class:`~testset_builder.stages.estimate.EstimateSummary`), the estimate rows asked for (query
    id, chunk id, P(relevant), model, verdicts) and the pairs asked for whose chunk is not live."""

    summary: Any
    rows: list[dict]
    not_live: list[tuple[str, str]]
    asked: bool = False  # pairs were named (their rows are what was asked, not every pair's)

    def as_dict(self) -> dict:
        document = self.summary.as_dict()
        if self.asked:
            document["exported"] = {"pairs": len(self.rows), "not_live": [list(p) for p in self.not_live]}
        return document

    def __getattr__(self, name: str):
        if name == "summary":
            raise AttributeError(name)
        return getattr(self.summary, name)


def estimate(config: Config, *, workspace=None, pairs: Sequence[tuple[str, str]] = ()) -> EstimateResult:
    """Refit the relevance estimate on the verdicts so far (no LLM call), estimating ``pairs`` too; the rows are
    those of ``pairs``, or of every estimated pair when none are given."""
    from .stages.estimate import estimates_of

    with _opened(config, workspace) as ws:
        summary, rows, not_live = estimates_of(ws, list(pairs))
    return EstimateResult(summary, rows, not_live, bool(pairs))


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
    config: Config, *, limit: int = 20, questions: bool = False, full: bool = False, workspace=None
) -> QueueResult:
    """What reviewers see next: the first ``limit`` queued pairs with the judge's and the estimate's view (chunk
    texts cut to 200 characters unless ``full``), or with ``questions`` the synthetic questions. Reads only."""
    from .stages.queue import queued_pairs, synthetic_questions

    with _opened(config, workspace, readonly=True) as ws:
        if questions:
            listed, total = synthetic_questions(ws, limit)
            return QueueResult(total, questions=listed)
        items, total = queued_pairs(ws, limit, None if full else 200)
    return QueueResult(total, items)


@dataclass
class ReleaseResult:
    version: str
    new: bool
    path: Path
    summary: Any = None  # the new release's ReleaseSummary (None when the content was released already)

    def as_dict(self) -> dict:
        return {"version": self.version, "new": self.new}


def release(config: Config, *, workspace=None, bump: str = "minor") -> ReleaseResult:
    """Release the next version when the workspace's content differs from the latest release's (else nothing)."""
    from .stages.release import release_dir, release_if_changed

    with _opened(config, workspace) as ws:
        made, version = release_if_changed(ws, config.release, bump)
        return ReleaseResult(version, made is not None, release_dir(ws.root, version), made)


def load_release(release):
    """A release: a :class:`~testset_builder.stages.release.LoadedRelease` (returned as is), a release directory,
    or ``WORKSPACE@VERSION`` (VERSION may be ``latest``); its files are checked against their manifest's hashes. A
    release on the Hugging Face hub: :func:`testset_builder.load`."""
    from .stages.release import LoadedRelease, release_dir
    from .stages.release import load_release as loading

    if isinstance(release, LoadedRelease):
        return release
    root = _workspace_of(release)
    return loading(release_dir(root, str(release).rsplit("@", 1)[1]) if root is not None else str(release))


def _workspace_of(release) -> Path | None:
    """The workspace a ``WORKSPACE@VERSION`` names (None for a release directory or a loaded release): where its
    baseline indexes are cached and its reports go."""
    spec = str(release)
    if "@" in spec and not Path(spec).exists():
        return Path(spec.rsplit("@", 1)[0])
    return None


@dataclass
class BaselineResult:
    run: Any  # the Run
    retriever: str
    version: str
    k: int
    path: Path | None = None
    chunks: int = 0  # of the release's corpus the run searched
    queries: int = 0

    def as_dict(self) -> dict:
        return {"run": str(self.path) if self.path else None, "retriever": self.retriever, "version": self.version,
                "k": self.k}  # fmt: skip


def baseline(release, retriever: str = "bm25", k: int = 100, out: str | Path | None = None) -> BaselineResult:
    """A baseline run (``bm25``, or ``dense`` with the dense extra) over a release's own corpus and queries;
    written to ``out`` (TREC) when given."""
    from .export import write_trec_run
    from .retrieval.baseline import baseline_run

    loaded, root = load_release(release), _workspace_of(release)
    made = baseline_run(loaded.corpus, loaded.queries, retriever, k, root / "indexes" if root is not None else None)
    if out is not None:
        write_trec_run(made, Path(out))
    return BaselineResult(
        made, retriever, loaded.version, k, Path(out) if out is not None else None, len(loaded.corpus),
        len(loaded.queries),
    )  # fmt: skip


@dataclass
class ReportResult:
    path: Path
    version: str
    runs: list[str]
    online: Any = None

    def as_dict(self) -> dict:
        document = {"report": str(self.path), "version": self.version, "runs": self.runs}
        return {**document, **({"online": self.online} if self.online else {})}


def report(release, runs: Sequence = (), out: str | Path | None = None) -> ReportResult:
    """One self-contained HTML page about a release and the runs scored on it (``Run`` objects or run files);
    written to ``out``, by default ``WORKSPACE/reports/VERSION.html`` for a workspace's release."""
    from .export import read_run
    from .report import build_report, render

    loaded = load_release(release)
    if out is None:
        root = _workspace_of(release)
        if root is None:
            raise InputError("give out=FILE.html for a release directory")
        out = root / "reports" / f"{loaded.version}.html"
    read = [r if hasattr(r, "table") else read_run(r) for r in runs]
    built = build_report(loaded, read)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(built), encoding="utf-8")
    return ReportResult(out, loaded.version, [r.name for r in read], built.online)


# the whole job -------------------------------------------------------------------------------------------------------

EXIT_PARTIAL, EXIT_REVIEW = 3, 4  # a stage fell short (what it made is kept); drawn pairs wait for a reviewer
NO_SOURCES = "the config's run.sources lists no documents to chunk (files or folders)"


def plan(config: Config, *, workspace=None):
    """What :func:`run` will spend (LLM calls, tokens, cost, time per step, from the settings, the corpus and what
    this workspace and machine measured): over the chunks of an open ``workspace`` (a run, once chunked), else over
    ``run.sources`` chunked in memory (a dry run: nothing is written). A :class:`~testset_builder.stages.plan.Plan`."""
    from .corpus.chunkers import chunk_document
    from .corpus.loaders import load_sources
    from .export.queries import read_queries
    from .stages.plan import measurements, plan_run
    from .stages.sampling import SourceChunk
    from .store import rows

    known = workspace is not None or (Path(config.workspace) / "testset.db").exists()
    with _opened(config, workspace, readonly=True) if known else contextlib.nullcontext() as ws:
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


def judges_pools(config: Config) -> bool:
    """Whether :func:`run` has the judge grade the pools: not with the embedded local model (near chance on
    relevance; the estimate grades instead)."""
    return config.judge_role().kind != "local"


def checks_questions(config: Config) -> bool:
    """With question review on, or unset with the embedded generator (many of its questions unusable, some labelled
    on a chunk that does not answer them), :func:`run` waits for the doubted questions before it releases; the
    reviewers are served them unless question review is off."""
    if config.review.questions is not None:
        return config.review.questions
    return config.generator_role().kind == "local"


@dataclass
class RunResult:
    """What :func:`run` did: each stage's result by name (in order), and how it ended: ``done`` (released and
    reported), ``review`` (pairs drawn for review, or doubted questions, wait for a human: review them, then run
    again) or ``incomplete`` (a stage fell short: its failures, or the budget's stop; what it made is kept)."""

    stages: dict[str, Any]
    status: str = "done"
    message: str = ""
    waiting: int = 0
    doubted: int = 0
    release: str | None = None
    report: Path | None = None
    baselines: list[Path] = field(default_factory=list)

    @property
    def code(self) -> int:
        return {"done": 0, "review": EXIT_REVIEW, "incomplete": EXIT_PARTIAL}[self.status]

    @property
    def stopped_for_review(self) -> bool:
        return self.status == "review"

    def as_dict(self) -> dict:
        stages = {
            name: {"exit_code": EXIT_PARTIAL if _fell_short(result) else 0, "result": result.as_dict()}
            for name, result in self.stages.items()
        }
        document = {"exit_code": self.code, "message": self.message, "stages": stages}
        if self.status == "review":
            document.update(waiting=self.waiting, doubted=self.doubted)
        if self.status == "done":
            document.update(release=self.release, report=str(self.report))
        return document


def _fell_short(result) -> bool:
    """Whether a stage left work a rerun can do (``run`` stops there): failed LLM calls, the budget's stop. One
    that did less than asked for want of material (synthesize: every chunk used) did what it could, and ``run``
    goes on, its summary saying so."""
    if getattr(result, "batch_id", None) or not getattr(result, "incomplete", False):
        return False
    return bool(getattr(result, "retryable", True))


def run(
    config: Config,
    *,
    review: bool = True,
    progress: Callable[[str], contextlib.AbstractContextManager] | None = None,
    on_stage: Callable[[str, Any], None] | None = None,
) -> RunResult:
    """The whole job from one config (its ``run:`` section), each stage skipping what is done: chunk, plan,
    synthesize, propose (``run.queries``), production logs (``run.logs``: import, a failure-first draw, propose), a
    review round (``select``) and a stop while drawn pairs wait for a human (unless ``review`` is False: then it
    releases what needs no human), the estimate refit on the verdicts, release (when the content changed),
    baseline runs and a report. ``limits.max_cost_usd`` bounds the whole run. ``progress(stage)`` gives a context
    manager holding the stage's progress bar (or None); ``on_stage(name, result)`` hears of each stage as it
    ends. A rerun after a crash, a budget stop or a review goes on where it was and pays for nothing twice. When a
    stage raises, the error carries the stages before it as ``run_so_far`` (a :class:`RunResult`)."""
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
    from .retrieval import dense_available
    from .store import draws, estimates
    from .store import logs as stored_logs
    from .store import review as review_store

    limit, spent = config.limits.max_cost_usd, [0.0]

    def bar(stage: str):
        return progress(stage) if progress is not None else contextlib.nullcontext()

    def ended(name: str, value):
        result.stages[name] = value
        if on_stage is not None:
            on_stage(name, value)
        if _fell_short(value):
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
        ended("synthesize", made)
        spent[0] += made.cost_usd
        if result.status != "done":
            return result
        judge = judges_pools(config)
        if config.run.queries is not None:
            with bar("propose") as shown:
                proposed = propose(
                    budgeted(), config.run.queries, judge=judge, workspace=ws, progress=shown, runs=config.run.runs
                )
            ended("propose", proposed)
            spent[0] += proposed.judging.cost_usd
            if result.status != "done":
                return result
        if config.run.logs is not None:
            ended("import-logs", import_logs(config, config.run.logs, workspace=ws))
            if stored_logs.undrawn_count(ws.db):
                ended("select-logs", select_logs(config, config.run.log_limit, workspace=ws))
            with bar("propose") as shown:
                proposed = propose(budgeted(), from_logs=True, judge=judge, workspace=ws, progress=shown)
            ended("propose-logs", proposed)
            spent[0] += proposed.judging.cost_usd
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
    reported = ended("report", report(spec, _report_runs(result.baselines, config.run.runs)))
    result.release, result.report = released.version, reported.path
    result.message = f"release {released.version}: {released.path}; report: {reported.path}"
    return result


def _report_runs(baselines: Sequence[Path], runs: Sequence[Path]) -> list:
    """The runs ``run``'s report scores: the config's runs named as propose pooled them, and the baselines by their
    retriever, called "NAME (baseline)" where a run of the config has that name."""
    from .export import read_run, read_runs

    mine = read_runs(runs)
    taken = {run.name for run in mine}
    theirs = [read_run(path) for path in baselines]
    return [replace(r, name=f"{r.name} (baseline)") if r.name in taken else r for r in theirs] + mine


# scoring ------------------------------------------------------------------------------------------------------------


def retrieve(retriever: Retriever, queries: dict[str, str], k: int = 100, name: str | None = None):
    """The run a retriever makes on ``queries`` (id -> text): its top ``k`` results for each. A result is a
    (chunk id, score) pair, or a chunk id alone (then ranked by position: first is best)."""
    from .tables import Run

    scored: dict[str, dict[str, float]] = {}
    for query_id, text in queries.items():
        results = list(retriever(text))[:k]
        ranked: dict[str, float] = {}
        for position, result in enumerate(results):
            if isinstance(result, str):
                chunk_id, value = result, float(len(results) - position)
            elif isinstance(result, tuple | list) and len(result) == 2:
                chunk_id, value = str(result[0]), float(result[1])
            else:
                raise InputError(
                    f"the retriever gave {type(result).__name__} for query {query_id!r}: give chunk ids, or "
                    "(chunk id, score) pairs"
                )
            ranked.setdefault(chunk_id, value)  # a chunk given twice keeps its best place
        scored[query_id] = ranked
    return Run.from_dict(scored, name=name or getattr(retriever, "__name__", "retriever"))


@dataclass
class ScoreResult:
    """Each run's metrics (mean, 95% interval, per-query values in ``evaluations``), recall curve, and, with several
    runs, each against the best. On a release with estimates each metric's figure is the one that applies
    (``kind``: prediction-powered, exact, estimate-only, or labelled pairs only), the best run and the tests are
    decided on it, and the other figures are under each run's ``details``; ``quality`` is the estimate's."""

    reports: list[dict]
    evaluations: list[Any]
    against_best: dict | None
    cluster_design: Any  # how queries resample together (metrics.clusters)
    sizes: list[Any]  # what the set can detect per metric (metrics.power)
    alpha: float
    quality: dict | None = None  # the estimate's held-out AUC and ECE, in one word (labels.fitting)
    synthetic_audit: dict | None = None  # the release's unchecked synthetic labels and their estimated error rate

    @property
    def metrics(self) -> dict:
        """The first (or only) run's metrics: name -> {mean, ci_low, ci_high, ...}, the figure that applies."""
        return self.reports[0]["metrics"]

    def as_dict(self) -> dict:
        extra = {"clusters": self.cluster_design.as_dict(), "set_size": [s.as_dict() for s in self.sizes]}
        if self.quality is not None:
            extra["estimate_quality"] = self.quality
        if self.synthetic_audit is not None:
            extra["synthetic_audit"] = self.synthetic_audit
        if len(self.reports) == 1:
            return {**self.reports[0], **extra}
        return {"runs": self.reports, "against_best": self.against_best, "alpha": self.alpha, "correction": "holm",
                **extra}  # fmt: skip


def score(
    release,
    runs,
    metrics: Sequence[str] | str = DEFAULT_METRICS,
    *,
    qrels=None,
    k: int = 100,
    ci: bool = True,
    resamples: int = 1000,
    seed: int = 0,
    cluster_by: str = "auto",
    targets: Sequence[float] = (0.9, 0.95),
    detect: float | None = None,
    alpha: float = 0.05,
    relevance_level: int = 1,
    clusters=None,
    cluster_field: str = "cluster",
) -> ScoreResult:
    """Score runs against a release's labels (or ``qrels``, a file or a Qrels table, with ``release`` None) with
    trec_eval's conventions. ``runs``: one or a list of ``Run`` objects, run files (TREC or JSONL), or retriever
    callables (:func:`retrieve` runs them on the release's queries, top ``k``). ``relevance_level``: the grade the
    binary metrics (recall, precision, MAP, MRR, hit rate, R-precision) count as relevant, trec_eval's ``-l``;
    nDCG's gains are the grades. On a release with estimates each metric gets the figure that applies
    (:mod:`~.metrics.figures`); prediction-powered figures are for level 1 only, and left out otherwise.
    ``clusters``: a file (JSONL, CSV, TSV) or a mapping of each query's cluster (a session, a user) under
    ``cluster_field``, for ``cluster_by`` auto or given; ``cluster_by="relevant"`` joins queries that share a relevant
    document."""
    from .metrics import parse_metrics
    from .metrics.many import against_best as versus_best
    from .metrics.many import evaluate_with_curve, smallest_k
    from .metrics.report import score_dicts

    specs = parse_metrics(metrics if isinstance(metrics, str) else list(metrics))
    labels, estimates, loaded, queries, document_of = _labels(release, qrels)
    made = _runs(runs, queries, k)
    scored = [evaluate_with_curve(labels, r, specs, relevance_level=relevance_level) for r in made]
    evaluations = [evaluation for evaluation, _ in scored]
    clusters = _clusters_of(
        evaluations[0], labels, cluster_by, loaded, document_of, clusters, cluster_field, relevance_level
    )
    reports = score_dicts(evaluations, ci=ci, resamples=resamples, seed=seed, clusters=clusters.codes)
    for report_of, (_, curve) in zip(reports, scored):
        report_of["recall_curve"] = [float(v) for v in curve]
        report_of["target_recall"] = {str(t): smallest_k(curve, t) for t in targets}
        report_of["relevance_level"] = relevance_level
    best = versus_best(evaluations, clusters.codes, alpha=alpha, seed=seed) if len(evaluations) > 1 else None
    quality = None
    if estimates and relevance_level == 1:
        reports, best, quality = _applying_figures(estimates, made, specs, reports, best, alpha)
    sizes = set_sizes(evaluations, clusters.codes, alpha, detect)
    audit = ((loaded.manifest["counts"].get("checked_by_human") or {}).get("synthetic_audit")) if loaded else None
    return ScoreResult(reports, evaluations, best, clusters, sizes, alpha, quality, audit)


def _applying_figures(estimates, runs, specs, reports, best, alpha):
    """Each run's report with the figure that applies per metric, the best run of each metric by it, and the
    estimate's quality (:mod:`~.metrics.figures`)."""
    from .labels.fitting import release_quality
    from .metrics.figures import against_best_by_figure, one_figure
    from .metrics.prediction import ReleasePool, prediction_report

    pool = ReleasePool(estimates)
    reports = [
        one_figure(report, prediction_report(estimates, r, specs, pool=pool)) for report, r in zip(reports, runs)
    ]
    if best is not None and pool.applies != "qrels":
        best = {**best, **against_best_by_figure(pool, runs, reports, specs, alpha)}
    return reports, best, release_quality(estimates)


EXIT_REGRESSION = 5  # compare's gate: a run is significantly worse than the baseline (the command's exit code)
GATE_RULE = "fail when the one-sided (1 - alpha/g) bootstrap upper bound of mean(run - baseline) < -margin"


def _labels(release, qrels):
    """(labels, estimates, the loaded release, queries, document_of) of a release, or of a qrels file or table
    (release None, and no loaded release): ``document_of`` gives a labelled chunk's document (a qrels file's ids are
    taken as documents)."""
    from .export import read_qrels

    if (qrels is None) == (release is None):
        raise InputError("give a release, or qrels (and no release)")
    if release is not None:
        loaded = load_release(release)

        def document_of(chunk_id: str) -> str:
            return loaded.chunk_spans.get(chunk_id, {}).get("doc_id") or chunk_id

        return loaded.qrels_table(), loaded.estimates, loaded, loaded.queries, document_of
    return (read_qrels(qrels) if isinstance(qrels, str | Path) else qrels), [], None, None, str


def _clusters_of(
    evaluation, labels, cluster_by: str, loaded, document_of, clusters, cluster_field: str,
    relevance_level: int = 1,
):  # fmt: skip
    """How queries resample together (:func:`~.metrics.clusters.resolve_clusters`): ``clusters`` a file (or a
    mapping) of each query's cluster under ``cluster_field``; the relevant documents from the labels; a release's
    (``loaded``) synthetic questions' source documents and logged queries' sessions."""
    from .metrics.clusters import RelevantPairs, resolve_clusters

    given = clusters
    if isinstance(clusters, str | Path):
        from .export.queries import read_query_clusters

        given = read_query_clusters(clusters, cluster_field)
    pairs = None  # only auto (to say how many share) and relevant read them
    if cluster_by in ("auto", "relevant"):
        pairs = RelevantPairs.from_table(labels.table, relevance_level, None if document_of is str else document_of)
    source_document, session = (loaded.source_document, loaded.session) if loaded is not None else (None, None)
    return resolve_clusters(evaluation.query_ids, cluster_by, source_document, pairs, given, session)


def _runs(runs, queries, k: int) -> list:
    """Run objects from Run objects, run files or retriever callables (run on ``queries``), named apart."""
    from .export import read_run

    made, paths = [], []
    for one in list(runs) if isinstance(runs, list | tuple) else [runs]:
        path = None
        if hasattr(one, "table"):
            made.append(one)
        elif isinstance(one, str | Path):
            path = Path(one)
            made.append(read_run(path))
        elif callable(one):
            if queries is None:
                raise InputError("a retriever needs the queries' texts: score it on a release")
            made.append(retrieve(one, queries, k))
        else:
            raise InputError(f"a run is a Run, a run file or a retriever callable, not {type(one).__name__}")
        paths.append(path)
    # runs sharing a tag are called by their files' names (then paths), the others by their order
    for name_of in (lambda r, p: p.stem if p else r.name, lambda r, p: str(p) if p else r.name):
        if len({r.name for r in made}) < len(made):
            made = [replace(r, name=name_of(r, p)) for r, p in zip(made, paths)]
    if len({r.name for r in made}) < len(made):
        made = [replace(r, name=f"{r.name}-{n + 1}") for n, r in enumerate(made)]
    return made


@dataclass
class CompareResult:
    """Each run against the first (the baseline): paired differences with intervals and Holm-corrected tests
    (``comparison``), the prediction-powered differences on a release with estimates, and the regression gate's
    outcomes (``failed``: some run is significantly worse by more than its margin)."""

    comparison: Any
    runs: list[Any]
    evaluations: list[Any]
    cluster_design: Any
    gate: list[Any]
    gated: bool
    differences: Any = None

    @property
    def failed(self) -> bool:
        return any(outcome.failed for outcome in self.gate)

    def as_dict(self) -> dict:
        document = {**self.comparison.as_dict(), "clusters": self.cluster_design.as_dict()}
        if self.differences is not None:
            document["prediction_powered"] = self.differences
        if self.gated:
            document["gate"] = {
                "failed": self.failed, "exit_code": EXIT_REGRESSION if self.failed else 0, "rule": GATE_RULE,
                "outcomes": [outcome.as_dict() for outcome in self.gate],
            }  # fmt: skip
        return document


def compare(
    release,
    runs,
    metrics: Sequence[str] | str = "ndcg@10,recall@10",
    *,
    qrels=None,
    k: int = 100,
    test: str = "randomization",
    alpha: float = 0.05,
    resamples: int = 10_000,
    seed: int = 0,
    cluster_by: str = "auto",
    detect: float | None = None,
    fail_if_worse: Sequence[str] = (),
    relevance_level: int = 1,
    clusters=None,
    cluster_field: str = "cluster",
) -> CompareResult:
    """Compare runs (the first is the baseline) on a release's labels (or ``qrels``): paired differences, intervals,
    t and randomization tests, Holm-corrected; ``fail_if_worse`` (``"ndcg@10:0.01"``) gates regressions. ``runs``
    ``relevance_level`` and ``clusters`` as :func:`score` takes them, two or more runs."""
    from .metrics import evaluate, parse_metrics
    from .metrics.compare import compare as compare_runs
    from .metrics.gate import parse_gate, regression_gate
    from .metrics.prediction import prediction_differences

    specs = parse_metrics(metrics if isinstance(metrics, str) else list(metrics))
    rules = parse_gate(list(fail_if_worse))
    specs += [spec for spec in parse_metrics([r.metric for r in rules]) if spec not in specs] if rules else []
    labels, estimates, loaded, queries, document_of = _labels(release, qrels)
    made = _runs(runs, queries, k)
    if len(made) < 2:
        raise InputError("compare needs at least two runs (the first is the baseline)")
    evaluations = [evaluate(labels, r, specs, relevance_level=relevance_level) for r in made]
    clusters = _clusters_of(
        evaluations[0], labels, cluster_by, loaded, document_of, clusters, cluster_field, relevance_level
    )
    result = compare_runs(
        evaluations[0], evaluations[1:], test=test, alpha=alpha, resamples=resamples, seed=seed,
        clusters=clusters.codes, detect=detect,
    )  # fmt: skip
    gate = regression_gate(evaluations[0], evaluations[1:], rules, clusters.codes, alpha, resamples, seed)
    powered = estimates and relevance_level == 1
    differences = prediction_differences(estimates, made[0], made[1:], specs) if powered else None
    return CompareResult(result, made, evaluations, clusters, gate, bool(rules), differences)


def set_sizes(evaluations, clusters, alpha: float, detect: float | None):
    """What the set can detect per metric: from the per-query differences of the two best runs of the metric, or,
    with one run, from its own per-query variance doubled (a second run as variable and uncorrelated: the
    variance of a difference is at most that when runs correlate positively, as runs on one set do)."""
    from .metrics.power import set_size

    sizes = []
    for spec in evaluations[0].metrics:
        name = str(spec)
        ranked = sorted(evaluations, key=lambda e: e.mean(name), reverse=True)
        if len(ranked) > 1:
            differences = ranked[0].per_query[name] - ranked[1].per_query[name]
            sizes.append(
                set_size(name, differences, clusters, alpha=alpha, detect=detect, assumption="the two best runs")
            )
        else:
            assumption = "one run: a second as variable and uncorrelated assumed, an upper bound; compare measures it"
            values = ranked[0].per_query[name]
            sizes.append(
                set_size(name, values, clusters, alpha, detect=detect, variance_factor=2.0, assumption=assumption)
            )
    return sizes


def langchain_retriever(retriever, id_key: str = "chunk_id") -> Retriever:
    """A LangChain retriever as a callable :func:`score` takes: each ``Document``'s ``metadata[id_key]`` is its
    chunk id (ranked in the order LangChain returns them)."""

    def run(text: str) -> list[str]:
        return [document.metadata[id_key] for document in retriever.invoke(text)]

    run.__name__ = type(retriever).__name__
    return run


def llamaindex_retriever(retriever, id_key: str = "chunk_id") -> Retriever:
    """A LlamaIndex retriever as a callable :func:`score` takes: each node's ``metadata[id_key]`` (else its node
    id) is its chunk id, with the node's score."""

    def run(text: str) -> list:
        nodes = retriever.retrieve(text)
        ids = [node.node.metadata.get(id_key, node.node.node_id) for node in nodes]
        if any(node.score is None for node in nodes):  # no scores: the order LlamaIndex gave is the ranking
            return ids
        return [(chunk_id, float(node.score)) for chunk_id, node in zip(ids, nodes)]

    run.__name__ = type(retriever).__name__
    return run


__all__ = [
    "DEFAULT_METRICS", "BaselineResult", "ChunkResult", "CompareResult", "EstimateResult", "ProposeResult",
    "ReleaseResult", "ReportResult", "RunResult", "ScoreResult", "baseline", "chunk", "compare", "estimate",
    "import_logs", "langchain_retriever", "llamaindex_retriever", "load_config", "load_release", "open_workspace",
    "propose", "release", "report", "retrieve", "run", "run_async", "score", "select", "select_logs", "set_sizes",
    "synthesize", "with_roles",
]  # fmt: skip
