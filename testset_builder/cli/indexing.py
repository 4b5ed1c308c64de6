"""The index command: build the retrieval indexes propose and run use, ahead of them (on Ray, for dense)."""

from __future__ import annotations

import json
from typing import Annotated, Literal

import typer

from .. import api
from .typer_app import (
    ConfigOption,
    JsonOption,
    RayAddressOption,
    WorkspaceOption,
    app,
    open_workspace_for,
    out,
    settings,
)


@app.command()
def index(
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    retrievers: Annotated[
        str | None,
        typer.Option(
            "--retrievers",
            help="auto (BM25, plus dense when the dense extra is installed), bm25, dense, or bm25,dense. "
            "Config: propose.retrievers.",
            show_default=False,
        ),
    ] = None,
    engine: Annotated[
        Literal["local", "ray"],
        typer.Option(
            "--engine",
            help="local: encode the dense embeddings in this process; ray: on Ray Data actors that load the model "
            "once each, on a local Ray or the cluster at --ray-address (needs the ray extra; the same embeddings; "
            "see guides/ray.md). BM25 is always built here.",
        ),
    ] = "local",
    ray_address: RayAddressOption = None,
    json_output: JsonOption = False,
) -> None:
    """Build the indexes of the workspace's live chunks that propose and run search, or find them cached.

    They are the very indexes those commands open (under <workspace>/indexes, keyed by the live chunks), so running
    this after `chunk` moves the encoding out of them, onto Ray if you like. A rerun on unchanged chunks finds them
    cached; changed chunks get new indexes.

    Example: `testset-builder index --workspace testset --retrievers bm25,dense --engine ray`.
    """
    if ray_address and engine != "ray":
        raise typer.BadParameter("--ray-address needs --engine ray", param_hint="--ray-address")
    named = retrievers if retrievers in (None, "auto") else [n.strip() for n in retrievers.split(",") if n.strip()]
    resolved = settings(config, workspace, propose__retrievers=named)
    with open_workspace_for(resolved) as ws:
        made = api.index(resolved, engine=engine, ray_address=ray_address, workspace=ws)
    if json_output:
        print(json.dumps(made.as_dict(), indent=2))
        return
    for b in made.indexes:
        state = "cached" if b.cached else "built"
        out.print(
            f"{b.retriever}: {b.chunks} chunks, {state}, {b.seconds:.2f} s, {b.bytes / 1024:,.0f} KB on disk "
            f"({b.path})",
            highlight=False,
        )
