"""Corpus commands: chunk."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from .app import JsonOption, app, err, out


@app.command()
def chunk(
    sources: Annotated[
        list[Path],
        typer.Argument(
            help="Folders, files, globs, .jsonl or .parquet files, or BEIR folders (with corpus.jsonl).",
            show_default=False,
        ),
    ],
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            "-w",
            help="The workspace directory (created if missing; default testset).",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config", "-c", help="A config whose `chunking:` section gives the defaults below.", show_default=False
        ),
    ] = None,
    chunker: Annotated[
        str | None,
        typer.Option(
            "--chunker",
            help="recursive (default), sentence, markdown (sizes in characters), tokens (cl100k tokens), or prechunked (each record is a chunk and keeps its id).",
            show_default=False,
        ),
    ] = None,
    size: Annotated[
        int | None,
        typer.Option(
            "--size",
            min=1,
            help="Largest chunk: characters, or tokens for --chunker tokens (default 1000).",
            show_default=False,
        ),
    ] = None,
    overlap: Annotated[
        int | None,
        typer.Option(
            "--overlap",
            min=0,
            help="Text repeated between neighbouring chunks, same unit as --size (default 100).",
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
    json_output: JsonOption = False,
) -> None:
    """Load a corpus and chunk it into the workspace, incrementally.

    Unchanged documents are skipped on a rerun; changed ones are re-chunked (their old chunks are marked removed, not
    deleted); documents gone from the sources are marked removed. Unreadable files and lines are reported with file
    and line and skipped (or fatal with --strict).
    """
    from rich.progress import Progress

    from ..config import ChunkingConfig, load_config
    from ..corpus.chunkers import ChunkerConfig
    from ..corpus.ingest import ingest
    from ..corpus.loaders import load_sources
    from ..errors import InputError
    from ..store import open_workspace

    settings = load_config(config) if config else None
    defaults = settings.chunking if settings else ChunkingConfig()
    workspace = workspace or (settings.workspace if settings else Path("testset"))
    chunker, size, overlap = (
        chunker or defaults.chunker,
        size or defaults.size,
        defaults.overlap if overlap is None else overlap,
    )
    if chunker not in ("recursive", "sentence", "markdown", "tokens", "prechunked"):
        raise InputError(f"unknown chunker {chunker!r}; use recursive, sentence, markdown, tokens or prechunked")
    if chunker != "prechunked" and overlap >= size:
        raise InputError(f"--overlap ({overlap}) must be smaller than --size ({size})")
    chunker_config = ChunkerConfig(chunker, size, overlap)
    loaded = load_sources(
        sources,
        strict=strict,
        id_field=id_field or defaults.id_field,
        text_field=text_field or defaults.text_field,
        title_field=title_field or defaults.title_field,
    )
    with open_workspace(workspace) as ws, Progress(console=err, transient=True, disable=json_output) as progress:
        summary = ingest(ws, loaded, chunker_config, sources, progress=progress)
    if json_output:
        print(json.dumps({**summary.as_dict(), "skipped_files": [str(s) for s in loaded.skipped]}, indent=2))
        return
    for skipped in loaded.skipped[:20]:
        err.print(f"[yellow]skipped[/] {escape(str(skipped))}", highlight=False)
    if len(loaded.skipped) > 20:
        err.print(f"... and {len(loaded.skipped) - 20} more skipped (see --json)")
    out.print(
        f"{summary.documents} documents ({summary.new} new, {summary.changed} changed, {summary.unchanged} unchanged, "
        f"{summary.removed} removed); {summary.chunks_added} chunks added, {summary.chunks_removed} marked removed; "
        f"{summary.duplicate_chunks} chunks in {summary.duplicate_groups} duplicate groups; "
        f"{summary.skipped} skipped; {summary.seconds:.2f} s -> {workspace}"
    )
