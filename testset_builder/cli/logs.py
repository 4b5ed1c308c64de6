"""Production logs: import-logs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..api.stages import skipped_text
from .typer_app import ConfigOption, JsonOption, WorkspaceOption, app, err, open_workspace_for, out, settings


@app.command("import-logs")
def import_logs(
    log: Annotated[Path, typer.Argument(help="The production log: JSON lines, CSV or OpenTelemetry spans.")],
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    format: Annotated[
        str | None,
        typer.Option(
            "--format",
            help="jsonl, csv, otel (OpenTelemetry spans with OpenInference or GenAI retrieval attributes), "
            "langfuse (its exports) or a registered format. Config: logs.format.",
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
    force: Annotated[
        bool,
        typer.Option("--force", help="Import again a file recorded as imported although its import stored no record."),
    ] = False,
    json_output: JsonOption = False,
) -> None:
    """Import a production RAG log: each record's query, what the live system retrieved, its answer, feedback,
    citations and clicks.

    Queries become real queries with their frequency and first and last seen; feedback and clicks are summed per
    query; the latest retrieval of each query is the production run, and its chunks join the query's candidate
    pool with their production rank. Retrieved results by id must name chunks of the workspace, results by text
    are matched exactly or normalised, and an unknown id (a framework's node id) is matched by its text when the
    log has it: what matches nothing is counted and listed with its line, never guessed. Field names are mapped by
    the config's `logs.fields` (dotted paths for nested JSON). OpenTelemetry traces (--format otel) are read as
    the SDK's and the Collector's exporters write them: OTLP JSON, hex or base64 ids, and the console exporter;
    Langfuse's exports (--format langfuse) as trace and session downloads, table exports and API pages.

    A log whose first lines give no record, or more unreadable lines than records, is refused before anything is
    stored (exit 1), so it can be imported again with the right --format. The log streams in batches; importing
    the same file again adds nothing, and an interrupted import resumes where it stopped.

    Example: `testset-builder import-logs rag-log.jsonl --workspace testset --format jsonl`.
    """
    from .. import api

    resolved = settings(config, workspace, logs__format=format, logs__scrub_pii=scrub_pii)
    with open_workspace_for(resolved) as ws:
        summary = api.import_logs(resolved, log, workspace=ws, force=force)
    if json_output:
        print(json.dumps(summary.as_dict(), indent=2))
        return
    if summary.already_imported:
        out.print(f"{escape(log.name)} was imported before (same bytes): nothing added", highlight=False)
        return
    resumed = f" (resumed after line {summary.resumed_after_line})" if summary.resumed_after_line else ""
    out.print(
        f"imported {escape(log.name)}{resumed}: {summary.records} records, {summary.new_queries} new queries, "
        f"{summary.records_with_retrieval} with a retrieval, "
        f"{summary.feedback} with feedback"
        + (f", feedback added to {summary.late_feedback} requests imported before" if summary.late_feedback else "")
        + (
            f", feedback of {summary.feedback_attached} traces without a retrieval added to their session's retrieval"
            if summary.feedback_attached
            else ""
        )
        + (
            f", {summary.completed_traces} traces completed from the part an earlier file held"
            if summary.completed_traces
            else ""
        )
        + (f"; skipped {skipped_text(summary.skipped)}" if summary.skipped else "")
        + "; "
        f"{summary.results} retrieved results: {summary.by_id} by id, {summary.by_exact_text} by exact and "
        f"{summary.by_normalised_text} by normalised text, {summary.unknown_ids} unknown ids "
        f"({summary.unknown_ids_by_text} of them matched by their text), "
        f"{summary.unmatched_texts} unmatched texts"
        + (f", {summary.results_folded} folded into a result for the same chunk" if summary.results_folded else "")
        + f"; {summary.unreadable} lines unreadable"
        + (f"; scrubbed {', '.join(f'{n} {k}' for k, n in summary.scrubbed.items())}" if summary.scrubbed else ""),
        highlight=False,
    )
    for note in summary.notes:
        out.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    for problem in summary.problems:
        err.print(f"[yellow]skipped[/] {escape(problem)}", highlight=False)
    listed = summary.unreadable + summary.unknown_ids - summary.unknown_ids_by_text + summary.unmatched_texts
    hidden = listed - len(summary.problems)
    if hidden > 0:
        err.print(f"... and {hidden} more (counted above)")


@app.command("export-chunks")
def export_chunks(
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    destination: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="The file to write (default: standard output).", show_default=False),
    ] = None,
    format: Annotated[str, typer.Option("--format", help="jsonl or csv.")] = "jsonl",
    json_output: JsonOption = False,
) -> None:
    """Write the workspace's chunks for your app to index: each chunk's id, document id, title and text.

    Index these texts and keep each chunk's id with it (LangChain: metadata={"chunk_id": ...}). Your logs then
    import by id, and your retriever scores through the LangChain and LlamaIndex adapters without text matching.
    The chunks are the ones a release will label, so export them after `chunk` and before your app logs traffic.

    Example: `testset-builder export-chunks --workspace testset --out chunks.jsonl`.
    """
    import sys

    from .. import api

    resolved = settings(config, workspace)
    with open_workspace_for(resolved, readonly=True) as ws:
        result = api.export_chunks(resolved, destination or sys.stdout, format=format, workspace=ws)
    if destination is None:
        return
    if json_output:
        print(json.dumps(result.as_dict(), indent=2))
        return
    out.print(f"wrote {result.chunks} chunks to {escape(str(destination))} ({result.format})", highlight=False)
