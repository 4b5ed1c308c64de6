"""``run``: the whole job from one config, through the library's :func:`testset_builder.api.run` (no command
calls another command); this prints its plan, a line per stage as it ends, and how it ended.

chunk the sources -> synthesize -> propose (when ``run.queries`` is set) -> import a production log, draw its likely
failures and propose them (when ``run.logs`` is set) -> a review round (``select``) and a stop
while drawn pairs wait for a reviewer (exit 4) -> release when the content changed -> baseline runs -> report.
Every stage is idempotent (unchanged documents are skipped, LLM answers come from the cache, a release is made only
when something changed), so ``run`` is also how a user goes on after a crash, a budget stop or a review.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Annotated

import typer

from .. import api
from ..api.stages import summary_line
from .typer_app import (
    EXIT_OK,
    JsonOption,
    MaxCostOption,
    app,
    err,
    out,
    run_code,
    settings,
    shows_progress,
    stages_document,
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
    if planned.review:
        out.print(f"review: {planned.review}", highlight=False, markup=False)
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


def next_commands(config: str, workspace: Path | None) -> str:
    """What to run after `run` stopped for review: the reviewer, then `run` again, on the workspace this run used
    (the one --workspace named, else the config's). The reviewer serves the doubted questions with the pairs."""
    where = f" --config {config}" + (f" --workspace {workspace}" if workspace is not None else "")
    again = f" --workspace {workspace}" if workspace is not None else ""
    return (
        f": run `testset-builder serve{where}` (or `testset-builder review --reviewer NAME{where}`), then "
        f"`testset-builder run {config}{again}` again"
    )


def said(stage: str, result) -> str:
    """One line of what a stage did, from its result (or its JSON document), as its declaration words it."""
    return summary_line(stage, result)


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

    Exit codes: 0 released (or planned), 4 waiting for review, 3 a stage fell short (LLM calls failed, or the cost
    limit stopped it: what it made is kept, run again), 1 a mistake in the input, 130 interrupted.

    Example: `testset-builder init my-set`, list your documents under `run: sources:` in
    my-set/testset-builder.yaml, then `testset-builder run my-set/testset-builder.yaml --dry-run`, then without
    `--dry-run`.
    """
    resolved = settings(config, workspace, limits__max_cost_usd=max_cost_usd)

    def progress(stage: str):
        """Each stage's progress bar on stderr (none under --json or --quiet)."""
        if not shows_progress(json_output):
            return contextlib.nullcontext()
        if stage == "chunk":
            from ..llm.progress import LineProgress

            return LineProgress(console=err, transient=True)
        from ..llm.progress import llm_progress

        return llm_progress(err)

    def on_stage(name: str, result) -> None:
        if json_output:
            return
        if name == "plan":
            _print_plan(result)
        else:
            out.print(f"[bold]{name}[/]: {said(name, result)}", highlight=False)

    done = api.run(resolved, review=not no_review, dry_run=dry_run, progress=progress, on_stage=on_stage)
    if dry_run:
        planned = done.stages["plan"]
        if json_output:
            print(json.dumps({"exit_code": EXIT_OK, "dry_run": True, "plan": planned.as_dict()}, indent=2))
        else:
            _print_plan(planned)
        return
    code, message = run_code(done), done.message
    if done.status == "review":
        message += next_commands(config, workspace)
    if json_output:
        document = {"exit_code": code, "message": message, "stages": stages_document(done)}
        if done.status == "review":
            document.update(waiting=done.waiting, doubted=done.doubted)
        if done.status == "done":
            document.update(release=done.release, report=str(done.report))
        print(json.dumps(document, indent=2))
    else:
        (out if code == EXIT_OK else err).print(message, highlight=False)
    if code != EXIT_OK:
        raise typer.Exit(code)
