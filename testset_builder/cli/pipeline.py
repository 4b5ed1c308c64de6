"""``run``: the whole job from one config, each stage through its own command, skipping what is done.

chunk the sources -> synthesize -> propose (when ``run.queries`` is set) -> a review round (``select``) and a stop
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

from .app import EXIT_OK, JsonOption, app, err, judge_is_local, open_workspace_for, out, settings

EXIT_REVIEW = 4  # drawn pairs wait for a reviewer: review them (serve or review), then run again


def _stage(argv: list[str]) -> tuple[int, dict | list | None]:
    """One command, in process, with --json: its exit code and its JSON document (None when it printed none)."""
    from . import main

    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        code = main([*argv, "--json"])
    text = captured.getvalue().strip()
    try:
        return code, json.loads(text) if text else None
    except ValueError:
        return code, None


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
        return (
            f"{result['made']} questions made, {result['already_made']} already made; {result['calls']} LLM calls "
            f"({result['cache_hits']} from the cache)"
        )
    if stage == "propose":
        return f"{result['queries']} queries, {result['candidates']} candidate rows pooled"
    if stage == "select":
        return f"round {result['round']}: {result['drawn']} of {result['considered']} pairs drawn for review"
    if stage == "report":
        return result["report"]
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
    json_output: JsonOption = False,
) -> None:
    """Build the whole test set from one config, each stage skipping what is done: chunk, synthesize, propose,
    review, release, baselines, report.

    While pairs drawn for review wait for a human, `run` stops with exit code 4 and the command to review them;
    run it again when they are answered. A rerun after a crash, a budget stop or a batch wait goes on where it was
    and pays for nothing twice.

    Example: `testset-builder init my-set`, list your documents under `run: sources:` in
    my-set/testset-builder.yaml, then `testset-builder run my-set/testset-builder.yaml`.
    """
    from ..errors import InputError
    from ..retrieval import dense_available
    from ..stages.release import release_if_changed
    from ..store import draws, estimates

    resolved = settings(config, workspace)
    plan = resolved.run
    if not plan.sources:
        raise InputError("the config's run.sources lists no documents to chunk (files or folders)")
    root = str(resolved.workspace)  # the config's, or --workspace
    base = ["--config", config, "--workspace", root]
    stages: dict[str, dict] = {}

    def step(name: str, argv: list[str]) -> dict:
        code, document = _stage(argv)
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
    step("synthesize", ["synthesize", *base])
    if plan.queries is not None:
        step(
            "propose",
            ["propose", "-Q", str(plan.queries), *base, *(["--no-judge"] if judge_is_local(resolved) else [])],
        )
    with open_workspace_for(resolved) as ws:
        first_round = draws.next_round(ws.db) == 1 and estimates.any_estimates(ws.db)
    if plan.review_budget and first_round and not no_review:
        step("select", ["select", "--budget", str(plan.review_budget), *base])
    with open_workspace_for(resolved) as ws:
        waiting = 0 if no_review else draws.waiting_pairs(ws.db)
        if waiting:
            finish(
                EXIT_REVIEW,
                f"{waiting} pairs drawn for review wait for a human: run `testset-builder serve --config {config}` "
                f"(or `testset-builder review --reviewer NAME --config {config}`), then `testset-builder run {config}` "
                "again",
                waiting=waiting,
            )
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
