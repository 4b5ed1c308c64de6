"""``run``: the whole job from one config, each stage through its own command, skipping what is done.

chunk the sources -> synthesize -> propose (when ``run.queries`` is set) -> import a production log, draw its likely
failures and propose them (when ``run.logs`` is set) -> a review round (``select``) and a stop
while drawn pairs wait for a reviewer (exit 4) -> release when the content changed -> baseline runs -> report.
Every stage is idempotent (unchanged documents are skipped, LLM answers come from the cache, a release is made only
when something changed), so ``run`` is also how a user goes on after a crash, a budget stop or a review.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Annotated

import typer

from .app import (
    EXIT_OK,
    JsonOption,
    MaxCostOption,
    app,
    err,
    judge_is_local,
    open_workspace_for,
    out,
    settings,
    stage_progress,
)

EXIT_REVIEW = 4  # drawn pairs wait for a reviewer: review them (serve or review), then run again


def _stage(argv: list[str], progress: bool = False) -> tuple[int, dict | list | None]:
    """One command, in process, with --json: its exit code and its JSON document (None when it printed none); with
    ``progress``, its progress bars show on stderr."""
    from . import main

    captured = io.StringIO()
    was, stage_progress["under_json"] = stage_progress["under_json"], progress
    try:
        with contextlib.redirect_stdout(captured):
            code = main([*argv, "--json"])
    finally:
        stage_progress["under_json"] = was
    text = captured.getvalue().strip()
    try:
        return code, json.loads(text) if text else None
    except ValueError:
        return code, None


def _propose_judges(resolved) -> bool:
    """``run`` pools only when the judge is the embedded local model (near chance: the estimate grades instead)."""
    return not judge_is_local(resolved)


def _checks_questions(resolved) -> bool:
    """With the embedded generator (about 3 of 10 of its questions usable, some labelled on a chunk that does not
    answer them), or question review on, ``run`` waits for the doubted questions before it releases."""
    return resolved.review.questions or resolved.generator_role().kind == "local"


def _waiting_doubted(ws) -> int:
    from ..store import review as review_store

    return sum(not answered for answered in review_store.doubted_questions(ws.db).values())


def _plan(resolved, ws):
    """The run's plan over the workspace's chunks, or (``ws`` None: a dry run) the sources chunked in memory."""
    from ..corpus.chunkers import chunk_document
    from ..corpus.loaders import load_sources
    from ..stages.plan import measurements, plan_run
    from ..stages.queries import read_queries
    from ..stages.sampling import SourceChunk
    from ..store import rows

    if ws is None:
        chunking = resolved.chunking
        loaded = load_sources(
            resolved.run.sources,
            id_field=chunking.id_field,
            text_field=chunking.text_field,
            title_field=chunking.title_field,
        )
        chunks = [
            SourceChunk(c.chunk_id, c.doc_id, c.text) for d in loaded.documents for c in chunk_document(d, chunking)
        ]
        known = (Path(resolved.workspace) / "testset.db").exists()
        with open_workspace_for(resolved, readonly=True) if known else contextlib.nullcontext() as existing:
            measured = measurements(existing)
    else:
        chunks = [SourceChunk(*row) for row in rows.live_chunk_rows(ws.db)]
        measured = measurements(ws)
    queries = read_queries(resolved.run.queries).queries if resolved.run.queries is not None else None
    drawn, proposed = measured.logged_drawn
    logged = (drawn or resolved.run.log_limit) if resolved.run.logs is not None else 0
    return plan_run(
        resolved,
        chunks,
        None if queries is None else [q.text for q in queries],
        measured,
        propose_judges=_propose_judges(resolved),
        query_ids=[q.query_id for q in queries or ()],
        logged=logged,
        logged_done=proposed if logged else 0,
    )


def _print_plan(planned) -> None:
    from rich.table import Table

    table = Table(title="plan", title_justify="left", show_edge=False)
    for name in ("stage", "step", "model", "calls", "cached", "input tok", "output tok", "cost", "time"):
        table.add_column(name, justify="right" if name not in ("stage", "step", "model") else "left")
    for s in planned.steps:
        if s.note:
            table.add_row(s.stage, s.step, "-", "0", "", "", "", "", "")
            continue
        cost = _cost(s.cost_usd)
        table.add_row(
            s.stage, s.step, s.model, f"{s.calls:,}", f"{s.cached:,}", f"{s.input_tokens:,}",
            f"{s.output_tokens:,}", cost, _duration(s.seconds),
        )  # fmt: skip
    table.add_row(
        "[bold]total[/]", "", "", f"{planned.calls:,}", "", f"{planned.input_tokens:,}", f"{planned.output_tokens:,}",
        _cost(planned.cost_usd), _duration(planned.seconds),
    )  # fmt: skip
    out.print(table)
    for s in planned.steps:
        if s.note:
            out.print(f"[dim]{s.stage} {s.step}: {s.note}[/]", highlight=False)
    for line in planned.timing:
        out.print(f"[dim]time: {line}[/]", highlight=False)
    for line in planned.warnings:
        err.print(f"[yellow]warning:[/] {line}", highlight=False)
    if planned.over_budget:
        err.print(
            f"[yellow]over budget:[/] the plan costs about ${planned.cost_usd:.4f}, above --max-cost-usd "
            f"${planned.max_cost_usd:.4f}: the run stops before passing it and keeps what it made",
            highlight=False,
        )


def _cost(usd: float | None) -> str:
    return "price unknown" if usd is None else "free" if usd == 0 else f"${usd:.4f}"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"~{seconds:.0f} s"
    if seconds < 5400:
        return f"~{seconds / 60:.0f} min"
    return f"~{seconds / 3600:.1f} h"


def said(stage: str, result) -> str:
    """One line of what a stage did, from its JSON document."""
    if not isinstance(result, dict):
        return "done"
    if stage == "chunk":
        return (
            f"{result['documents']} documents ({result['new']} new, {result['changed']} changed, "
            f"{result['unchanged']} unchanged), {result['chunks_added']} chunks added"
        )
    if stage == "synthesize":
        doubted = f"; {result['doubted']} doubted, held back until reviewed" if result.get("doubted") else ""
        return (
            f"{result['made']} questions made, {result['already_made']} already made; {result['calls']} LLM calls "
            f"({result['cache_hits']} from the cache){doubted}"
        )
    if stage in ("propose", "propose-logs"):
        return f"{result['queries']} queries, {result['candidates']} candidate rows pooled"
    if stage == "import-logs":
        if result["already_imported"]:
            return f"{result['source']} imported before: nothing added"
        return (
            f"{result['records']} records, {result['new_queries']} new queries; {result['unknown_ids']} unknown ids, "
            f"{result['unmatched_texts']} unmatched texts, {result['unreadable']} lines unreadable"
        )
    if stage == "select-logs":
        return (
            f"round {result['round']}: {result['drawn']} of {result['considered']} logged queries drawn, failures first"
        )
    if stage == "select":
        return f"round {result['round']}: {result['drawn']} of {result['considered']} pairs drawn for review"
    if stage == "report":
        return result["report"]
    if stage == "estimate":
        from .labels import quality_words

        quality = quality_words(result["validation"])
        return f"{result['pairs']} pairs re-estimated on {result['verdicts']} verdicts; {quality}"
    return "done"


@app.command()
def run(
    config: Annotated[
        str, typer.Argument(help="The config (from `testset-builder init`) whose `run:` section says what to do.")
    ],
    workspace: Annotated[
        Path | None, typer.Option("--workspace", "-w", help="Overrides the config's workspace.", show_default=False)
    ] = None,
    no_review: Annotated[
        bool, typer.Option("--no-review", help="Release what needs no human instead of stopping for review.")
    ] = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Print the plan (LLM calls, tokens, cost and time of each step) and stop: nothing is written, "
            "nothing is called.",
        ),
    ] = False,
    max_cost_usd: MaxCostOption = None,
    json_output: JsonOption = False,
) -> None:
    """Build the whole test set from one config, each stage skipping what is done: chunk, synthesize, propose,
    production logs (import, failure-first draw, propose), review, release, baselines, report.

    Every run prints its plan first (calls, tokens, cost and time of each LLM step, from the settings, the corpus
    and what this workspace and machine measured); `--dry-run` prints it and stops. While pairs drawn for review
    wait for a human, `run` stops with exit code 4 and the command to review them; run it again when they are
    answered. A rerun after a crash, a budget stop or a batch wait goes on where it was
    and pays for nothing twice.

    Example: `testset-builder init my-set`, list your documents under `run: sources:` in
    my-set/testset-builder.yaml, then `testset-builder run my-set/testset-builder.yaml --dry-run`, then without
    `--dry-run`.
    """
    from ..errors import InputError
    from ..retrieval import dense_available
    from ..stages.release import release_if_changed
    from ..store import draws, estimates
    from ..store import logs as stored_logs

    resolved = settings(config, workspace, limits__max_cost_usd=max_cost_usd)
    plan = resolved.run
    if not plan.sources:
        raise InputError("the config's run.sources lists no documents to chunk (files or folders)")
    root = str(resolved.workspace)  # the config's, or --workspace
    base = ["--config", config, "--workspace", root]
    stages: dict[str, dict] = {}
    if dry_run:
        planned = _plan(resolved, None)
        if json_output:
            print(json.dumps({"exit_code": EXIT_OK, "dry_run": True, "plan": planned.as_dict()}, indent=2))
        else:
            _print_plan(planned)
        return

    def step(name: str, argv: list[str]) -> dict:
        code, document = _stage(argv, progress=not json_output)
        stages[name] = {"exit_code": code, "result": document}
        if code != EXIT_OK:
            finish(code, f"{name} stopped with exit code {code}: fix what it said, then run again")
        if not json_output:
            out.print(f"[bold]{name}[/]: {said(name, document)}", highlight=False)
        return stages[name]

    def finish(code: int, message: str, **extra) -> None:
        if json_output:
            print(json.dumps({"exit_code": code, "message": message, "stages": stages, **extra}, indent=2))
        else:
            (out if code == EXIT_OK else err).print(message, highlight=False)
        raise typer.Exit(code)

    step("chunk", ["chunk", *map(str, plan.sources), *base])
    with open_workspace_for(resolved, readonly=True) as ws:
        planned = _plan(resolved, ws)
    stages["plan"] = {"exit_code": EXIT_OK, "result": planned.as_dict()}
    if not json_output:
        _print_plan(planned)
    spent = 0.0

    def budget() -> list[str]:
        """What is left of --max-cost-usd for the next stage (the limit bounds the whole run)."""
        limit = resolved.limits.max_cost_usd
        return [] if limit is None else ["--max-cost-usd", f"{max(0.0, limit - spent):.6f}"]

    spent += step("synthesize", ["synthesize", *base, *budget()])["result"]["cost_usd"]
    pools_only = [] if _propose_judges(resolved) else ["--no-judge"]
    if plan.queries is not None:
        proposed = step("propose", ["propose", "-Q", str(plan.queries), *base, *budget(), *pools_only])
        spent += proposed["result"]["judging"]["cost_usd"]
    if plan.logs is not None:
        step("import-logs", ["import-logs", str(plan.logs), *base])
        with open_workspace_for(resolved) as ws:
            undrawn = stored_logs.undrawn_count(ws.db)
        if undrawn:
            step("select-logs", ["select", "--from-logs", "--limit", str(plan.log_limit), *base])
        step("propose-logs", ["propose", "--from-logs", *base, *budget(), *pools_only])
    with open_workspace_for(resolved) as ws:
        first_round = draws.next_round(ws.db) == 1 and estimates.any_estimates(ws.db)
    if plan.review_budget and first_round and not no_review:
        step("select", ["select", "--budget", str(plan.review_budget), *base])
    with open_workspace_for(resolved) as ws:
        waiting = 0 if no_review else draws.waiting_pairs(ws.db)
        doubted = 0 if no_review or not _checks_questions(resolved) else _waiting_doubted(ws)
        if waiting or doubted:
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
            flag = " --questions" if doubted else ""
            finish(
                EXIT_REVIEW,
                f"{what} wait for a human: run `testset-builder serve{flag} --config {config}` (or `testset-builder "
                f"review{flag} --reviewer NAME --config {config}`), then `testset-builder run {config}` again",
                waiting=waiting,
                doubted=doubted,
            )
        graded = estimates.graded_estimated_pairs(ws.db)
    if graded:  # the review's verdicts refit the estimate before the release carries it (the README's advice)
        step("estimate", ["estimate", *base])
    with open_workspace_for(resolved) as ws:
        made, version = release_if_changed(ws, resolved.release)
    stages["release"] = {"exit_code": EXIT_OK, "result": {"version": version, "new": made is not None}}
    if not json_output:
        out.print(f"[bold]release[/]: {version}{' (new)' if made else ' (unchanged)'}", highlight=False)
    release = f"{root}@{version}"
    runs = []
    for retriever in plan.baselines:
        if retriever == "dense" and not dense_available():
            continue
        path = Path(root) / "reports" / "runs" / f"{retriever}-{version}.trec"
        path.parent.mkdir(parents=True, exist_ok=True)
        code, _ = _stage(["baseline", "--release", release, "--retriever", retriever, "--out", str(path)])
        if code != EXIT_OK:
            finish(code, f"the {retriever} baseline failed with exit code {code}")
        runs.append(path)
    report = step("report", ["report", "--release", release, *[a for r in runs for a in ("--run", str(r))]])
    page = report["result"]["report"]
    finish(
        EXIT_OK,
        f"release {version}: {Path(root) / 'releases' / version}; report: {page}",
        release=version,
        report=page,
    )
