"""Production logs: import-logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from .app import ConfigOption, JsonOption, WorkspaceOption, app, err, open_workspace_for, out, settings


@app.command("import-logs")
def import_logs(
    log: Annotated[Path, typer.Argument(help="The production log: JSON lines, CSV or OpenTelemetry spans.")],
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    format: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="jsonl, csv, otel (OpenInference / OpenLLMetry spans) or a registered format. Config: logs.format.",
            show_default=False,
        ),
    ] = None,
    scrub_pii: Annotated[
        bool | None,
        typer.Option(
            "--scrub-pii/--no-scrub-pii",
            help="Replace e-mails, phone numbers and logs.pii_patterns before anything is stored. Config: "
            "logs.scrub_pii.",
            show_default=False,
        ),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Import a production RAG log: each record's query, what the live system retrieved, its answer, feedback,
    citations and clicks.

    Queries become real queries with their frequency and first and last seen; feedback and clicks are summed per
    query; the latest retrieval of each query is the production run, and its chunks join the query's candidate
    pool with their production rank. Retrieved results by id must name chunks of the workspace, results by text
    are matched exactly or normalised: an unknown id or an unmatched text is counted and listed with its line,
    never guessed. Field names are mapped by the config's `logs.fields` (dotted paths for nested JSON). The log
    streams in batches; importing the same file again adds nothing, and an interrupted import resumes where it
    stopped.

    Example: `testset-builder import-logs rag-log.jsonl --workspace testset --format jsonl`.
    """
    from .. import api

    resolved = settings(config, workspace, logs__format=format, logs__scrub_pii=scrub_pii)
    with open_workspace_for(resolved) as ws:
        summary = api.import_logs(resolved, log, workspace=ws)
    if json_output:
        print(json.dumps(summary.as_dict(), indent=2))
        return
    if summary.already_imported:
        out.print(f"{escape(log.name)} was imported before (same bytes): nothing added", highlight=False)
        return
    resumed = f" (resumed after line {summary.resumed_after_line})" if summary.resumed_after_line else ""
    out.print(
        f"imported {escape(log.name)}{resumed}: {summary.records} records, {summary.new_queries} new queries; "
        f"{summary.results} retrieved results: {summary.by_id} by id, {summary.by_exact_text} by exact and "
        f"{summary.by_normalised_text} by normalised text, {summary.unknown_ids} unknown ids, "
        f"{summary.unmatched_texts} unmatched texts; {summary.unreadable} lines unreadable"
        + (f"; scrubbed {', '.join(f'{n} {k}' for k, n in summary.scrubbed.items())}" if summary.scrubbed else ""),
        highlight=False,
    )
    for problem in summary.problems:
        err.print(f"[yellow]skipped[/] {escape(problem)}", highlight=False)
    hidden = summary.unreadable + summary.unknown_ids + summary.unmatched_texts - len(summary.problems)
    if hidden > 0:
        err.print(f"... and {hidden} more (counted above)")
