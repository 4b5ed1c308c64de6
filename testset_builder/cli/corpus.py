"""Corpus commands: config (the settings every command runs with) and chunk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.markup import escape

from ..api.stages import boilerplate_line
from .typer_app import (
    ConfigOption,
    JsonOption,
    RayAddressOption,
    WorkspaceOption,
    app,
    err,
    out,
    settings,
    shows_progress,
    waiting,
)


@app.command()
def init(
    directory: Annotated[Path, typer.Argument(help="The folder for the new test set (created if needed).")],
    starting_from: Annotated[
        str,
        typer.Option("--from", help="The bundled config to start from: quickstart (local model), openai, anthropic."),
    ] = "quickstart",
    force: Annotated[bool, typer.Option("--force", help="Overwrite the files if they are there.")] = False,
    json_output: JsonOption = False,
) -> None:
    """Start a new test set: a config with every setting, its value and what it does; a sample queries file; a
    README stub.

    Example: `testset-builder init my-set --from openai`, then edit my-set/testset-builder.yaml and pass
    `--config my-set/testset-builder.yaml` to every command. The workspace is my-set/testset.
    """
    from .. import api

    summary = api.init(directory, starting_from, force)
    if json_output:
        print(json.dumps(summary.as_dict(), indent=2))
        return
    config = directory / summary.files[0]
    out.print(
        f"wrote {', '.join(summary.files)} in {directory} (config started from {starting_from}); next: list your "
        f"documents under run: sources: in {config}, then `testset-builder run {config}`",
        highlight=False,
    )


@app.command("config")
def show_config(
    config: Annotated[
        str | None,
        typer.Argument(
            help="A config file or a bundled config (quickstart, openai, anthropic); default: the one commands use.",
            show_default=False,
        ),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Print a config with every setting and its default filled in: the settings commands run with.

    Example: `testset-builder config openai > testset-builder.yaml` starts your own from a bundled one; edit it and
    pass `--config testset-builder.yaml` to every command (or set TESTSET_BUILDER_CONFIG). Command-line flags
    override it.
    """
    from .. import api

    shown = api.describe_config(config)
    if json_output:
        print(json.dumps(shown.as_dict(), indent=2))
        return
    print(shown.yaml, end="")


@app.command()
def chunk(
    sources: Annotated[
        list[Path] | None,
        typer.Argument(
            help="Folders, files, globs, .jsonl or .parquet files, or BEIR folders (with corpus.jsonl). Default: the "
            "config's run.sources.",
            show_default=False,
        ),
    ] = None,
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    chunker: Annotated[
        str | None,
        typer.Option(
            "--chunker",
            help="recursive (default), sentence, markdown (sizes in characters), tokens (cl100k tokens), or "
            "prechunked (each record is a chunk and keeps its id). Config: chunking.chunker.",
            show_default=False,
        ),
    ] = None,
    size: Annotated[
        int | None,
        typer.Option(
            "--size",
            min=1,
            help="Largest chunk: characters, or tokens for --chunker tokens. Config: chunking.size.",
            show_default=False,
        ),
    ] = None,
    overlap: Annotated[
        int | None,
        typer.Option(
            "--overlap",
            min=0,
            help="Text repeated between neighbouring chunks, same unit as --size. Config: chunking.overlap.",
            show_default=False,
        ),
    ] = None,
    id_field: Annotated[
        str | None,
        typer.Option(
            "--id-field", help="JSONL/dataset field holding the document id (default _id).", show_default=False
        ),
    ] = None,
    text_field: Annotated[
        str | None,
        typer.Option("--text-field", help="JSONL/dataset field holding the text (default text).", show_default=False),
    ] = None,
    title_field: Annotated[
        str | None,
        typer.Option(
            "--title-field", help="JSONL/dataset field holding the title (default title).", show_default=False
        ),
    ] = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="Stop at the first unreadable file or line instead of skipping it.")
    ] = False,
    allow_removal: Annotated[
        bool,
        typer.Option(
            "--allow-removal",
            help="Allow marking more than chunking.max_removal_share (25%) of the documents removed "
            "(on a terminal you are asked instead).",
        ),
    ] = False,
    rehash: Annotated[
        bool,
        typer.Option(
            "--rehash",
            help="Read every file, even those whose size and modification time are unchanged since they were last "
            "chunked (skipped by default).",
        ),
    ] = False,
    engine: Annotated[
        Literal["local", "ray"],
        typer.Option(
            "--engine",
            help="local: chunk in this process; ray: chunk and sign duplicates with Ray Data, on a local Ray or "
            "the cluster at --ray-address (needs the ray extra; same chunks and ids; see guides/ray.md).",
        ),
    ] = "local",
    ray_address: RayAddressOption = None,
    json_output: JsonOption = False,
) -> None:
    """Load a corpus and chunk it into the workspace, incrementally.

    Unchanged documents are skipped on a rerun (a file whose size and modification time are unchanged is not even
    read; --rehash reads them all); changed ones are re-chunked (their old chunks are marked removed, not
    deleted). A document is marked removed only when its own file was read and no longer holds it, or its file is
    gone from a folder given; a large removal needs --allow-removal. A folder loads every supported format in it
    (text, Markdown, HTML, PDF, JSONL, Parquet, BEIR corpus.jsonl) and reports what it skipped; with two folders,
    ids start with the folder's name. Unreadable files and lines are reported with file and line and skipped (or
    fatal with --strict). The config's `chunking:` section gives the defaults.

    Example: `testset-builder chunk docs/ --workspace testset --chunker markdown --size 800 --overlap 80`.
    """
    import sys

    from .. import api
    from ..errors import LargeRemovalError
    from ..progress import LineProgress

    resolved = settings(
        config,
        workspace,
        chunking__chunker=chunker,
        chunking__size=size,
        chunking__overlap=overlap,
        chunking__id_field=id_field,
        chunking__text_field=text_field,
        chunking__title_field=title_field,
    )
    if ray_address and engine != "ray":
        raise typer.BadParameter("--ray-address needs --engine ray", param_hint="--ray-address")
    with LineProgress(console=err, transient=True, disable=not shows_progress(json_output)) as progress:
        given = {"strict": strict, "rehash": rehash, "engine": engine, "ray_address": ray_address}
        given.update(progress=progress, on_wait=waiting)
        try:
            chunked = api.chunk(resolved, sources, allow_removal=allow_removal, **given)
        except LargeRemovalError as refused:
            if json_output or not (sys.stdin.isatty() and sys.stderr.isatty()):
                raise
            progress.stop()
            err.print(f"[yellow]careful:[/] {escape(str(refused).split('; nothing')[0])}")
            if not typer.confirm("Mark them removed?", default=False, err=True):
                raise
            chunked = api.chunk(resolved, sources, allow_removal=True, **given)
    if json_output:
        print(json.dumps(chunked.as_dict(), indent=2))
        return
    summary = chunked.summary
    for skipped in chunked.skipped_files[:20]:
        err.print(f"[yellow]skipped[/] {escape(skipped)}", highlight=False)
    for note in chunked.warnings[:20]:
        err.print(f"[yellow]warning[/] {escape(note)}", highlight=False)
    if len(chunked.skipped_files) > 20:
        err.print(f"... and {len(chunked.skipped_files) - 20} more skipped (see --json)")
    out.print(
        f"{summary.documents} documents ({summary.new} new, {summary.changed} changed, {summary.unchanged} unchanged, "
        f"{summary.removed} removed); {summary.chunks_added} chunks added, {summary.chunks_removed} marked removed; "
        f"{summary.duplicate_chunks} chunks in {summary.duplicate_groups} duplicate groups; "
        f"{boilerplate_line(summary.boilerplate_by_reason)}; "
        f"{summary.skipped} skipped; {summary.seconds:.2f} s -> {resolved.workspace}"
    )
    for source, n in list(summary.removed_by_source.items())[:10]:
        out.print(f"  marked removed: {n} documents of {escape(source)}", highlight=False)
