"""Release commands: release, diff, export, push, import."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from .. import api
from .typer_app import (
    ConfigOption,
    JsonOption,
    VersionArgument,
    WorkspaceOption,
    app,
    open_workspace_for,
    out,
    settings,
)


@app.command()
def release(
    version: Annotated[
        str | None,
        typer.Option(
            "--version",
            "-v",
            help="The new version, semantic (1.0.0); an existing version is refused.",
            show_default=False,
        ),
    ] = None,
    bump: Annotated[
        str | None,
        typer.Option(
            "--bump",
            help="Instead of --version: raise the latest release's major, minor or patch number.",
            show_default=False,
        ),
    ] = None,
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    include_unverified: Annotated[
        bool | None,
        typer.Option(
            "--include-unverified/--verified-only",
            help="Also release LLM proposals no human has verified (marked llm-unverified). "
            "Config: release.include_unverified.",
            show_default=False,
        ),
    ] = None,
    hold_unreviewed: Annotated[
        bool | None,
        typer.Option(
            "--hold-unreviewed/--release-unreviewed",
            help="Leave out the synthetic questions no reviewer kept, or release them with their labels unchecked "
            "(the card then states the audit's estimate of how many are wrong). Without either: those a weak "
            "generator such as the embedded model wrote are left out. Config: release.hold_unreviewed.",
            show_default=False,
        ),
    ] = None,
    estimates: Annotated[
        bool | None,
        typer.Option(
            "--estimates/--no-estimates",
            help="Carry each pooled pair's relevance estimate and review draw (estimates.jsonl) and the queries they "
            "cover, so `score --release` can give prediction-powered figures (default). Config: release.estimates.",
            show_default=False,
        ),
    ] = None,
    adjudicator: Annotated[
        str | None,
        typer.Option(
            "--adjudicator", help="Reviewer whose verdict breaks a tie between reviewers.", show_default=False
        ),
    ] = None,
    parent: Annotated[
        str | None,
        typer.Option("--parent", help="Parent version (default: the highest lower version).", show_default=False),
    ] = None,
    notes: Annotated[str, typer.Option("--notes", help="Release notes, kept in the manifest.")] = "",
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="The set's name in the dataset card (default: the workspace's directory name).",
            show_default=False,
        ),
    ] = None,
    license_id: Annotated[
        str | None,
        typer.Option(
            "--license",
            help="License identifier for the dataset card (the corpus's license decides it; default other).",
            show_default=False,
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="With --bump, write the next version even when its content equals the latest release's (new notes, "
            "name or license).",
        ),
    ] = False,
    json_output: JsonOption = False,
) -> None:
    """Resolve the judgments into qrels and write an immutable, versioned release.

    releases/VERSION/ holds the Hugging Face layout (hf/: corpus, queries, default = qrels), BEIR files, TREC
    qrels, manifest.json (file hashes, counts, lineage, policy) and a dataset card (README.md).

    Policy (the config's `release:` section; these flags override it): a human verdict wins (a pair an admin
    settled takes the settled grade; else the reviewers' majority, ties to --adjudicator's own grade where they
    graded the pair, and the card counts those); synthetic source chunks are grade 2; unverified LLM proposals are
    left out unless --include-unverified. With estimates (the default), estimates.jsonl carries every estimated
    pair of the released queries, labelled or not, for prediction-powered scoring. The same workspace state always
    gives the same bytes and content hash. With --bump and nothing changed since the latest release, nothing is
    written (as `run` does; --force writes it); a release whose content equals its parent's says so.

    Example: `testset-builder release --bump minor --workspace testset --notes "second review round"`.
    """
    from ..errors import InputError

    if (version is None) == (bump is None):
        raise InputError("give exactly one of --version X.Y.Z or --bump major|minor|patch")
    resolved = settings(config, workspace)
    with open_workspace_for(resolved) as ws:
        made = api.release(
            resolved, workspace=ws, version=version, bump=bump, if_changed=not force, notes=notes, parent=parent,
            name=name, license=license_id, include_unverified=include_unverified, estimates=estimates,
            adjudicator=adjudicator, hold_unreviewed=hold_unreviewed,
        )  # fmt: skip
    summary = made.summary
    if summary is None:  # --bump with nothing changed: the latest release holds the content
        if json_output:
            print(json.dumps(made.as_dict(), indent=2))
            return
        out.print(
            f"nothing changed since {made.version}: no release written ({made.path}; --force writes the next version)",
            highlight=False,
        )
        return
    if json_output:
        print(json.dumps({**summary.as_dict(), **({"coverage": made.coverage} if made.coverage else {})}, indent=2))
        return
    counts = summary.counts
    origins = ", ".join(f"{n} {o}" for o, n in counts["qrels_by_origin"].items() if n)
    out.print(
        f"released {summary.version} -> {summary.path}: {counts['corpus']} chunks, {counts['queries']} queries, "
        f"{counts['qrels']} qrels ({origins}); content sha256 {summary.content_sha256[:16]}; "
        f"parent {summary.parent_version or 'none'}",
        highlight=False,
    )
    if "estimates" in counts:
        carried = counts["estimates"]
        out.print(
            f"estimates: {carried['pairs']} pairs of {carried['queries']} queries in {carried['file']}, "
            f"{carried['estimated_only']} on the estimate alone; {carried['drawn']} drawn for review, "
            f"{carried['drawn_answered']} answered",
            highlight=False,
        )
    if summary.estimates_refit:
        out.print(f"estimate before release: {summary.estimates_refit['why']}", highlight=False)
    settled = summary.adjudication
    if settled and (settled["adjudicated"] or settled["open"]):
        who = settled["adjudicator"]
        own = f", {settled['tie_to_adjudicator']} ties given to {who}'s own grade" if who else ""
        out.print(
            f"disagreements: {settled['adjudicated']} settled by an admin ({settled['self_settled']} self-settled); "
            f"{settled['open']} left open: {settled['majority']} by majority{own}, {settled['tie_to_latest']} ties to "
            "the latest grade (the card says so)",
            highlight=False,
        )
    if summary.same_as_parent:
        out.print(
            f"[yellow]note:[/] the content equals its parent {summary.parent_version}'s: nothing changed since then"
        )
    if made.coverage is not None:
        from ..metrics.coverage import traffic_coverage_lines

        for line in traffic_coverage_lines(made.coverage):
            out.print(line, highlight=False, markup=False)


@app.command()
def diff(
    old: VersionArgument,
    new: VersionArgument,
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    json_output: JsonOption = False,
) -> None:
    """What changed between two releases: queries and qrels added, removed and regraded.

    Example: `testset-builder diff 1.0.0 latest --workspace testset`.
    """
    result = api.diff(settings(config, workspace), old, new)
    if json_output:
        print(json.dumps(result.as_dict(), indent=2))
        return
    if result.unchanged:
        out.print(f"{old} -> {new}: no change")
        return
    out.print(
        f"{old} -> {new}: queries +{len(result.queries_added)} -{len(result.queries_removed)} "
        f"~{len(result.queries_changed)} (text changed); "
        f"qrels +{len(result.qrels_added)} -{len(result.qrels_removed)}, {len(result.qrels_regraded)} regraded; "
        f"corpus +{result.corpus_added} -{result.corpus_removed}"
    )
    for query_id, chunk_id, before, after in result.qrels_regraded[:20]:
        out.print(f"  regraded {query_id} {chunk_id}: {before} -> {after}", highlight=False)


@app.command("export")
def export_release(
    version: Annotated[str, typer.Option("--version", "-v", help="The release to export.", show_default=False)],
    out_dir: Annotated[
        Path,
        typer.Option(
            "--out", "-o", help="Directory to write (created; must be empty if it exists).", show_default=False
        ),
    ],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help="hf (parquet + dataset card), beir, trec (qrels.trec), jsonl (qrels, queries, corpus as JSONL), or "
            "a format registered with export.register_release_export.",
        ),
    ] = "hf",
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    json_output: JsonOption = False,
) -> None:
    """Copy a release out in one format (the release itself stays as it is).

    Example: `testset-builder export --version 1.0.0 --format beir --out beir/ --workspace testset`.
    """
    exported = api.export_release(settings(config, workspace), version, fmt, out_dir)
    if json_output:
        print(json.dumps(exported.as_dict(), indent=2))
        return
    out.print(f"exported {exported.version} as {fmt}: {len(exported.files)} files -> {out_dir}", highlight=False)


@app.command()
def push(
    version: Annotated[str, typer.Option("--version", "-v", help="The release to push.", show_default=False)],
    repo_id: Annotated[
        str,
        typer.Option("--repo-id", help="The dataset repository on the Hugging Face hub: ORG/NAME.", show_default=False),
    ],
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    private: Annotated[bool, typer.Option("--private", help="Create the repository private.")] = False,
    json_output: JsonOption = False,
) -> None:
    """Upload a release to the Hugging Face hub and tag that revision vVERSION. The token comes from HF_TOKEN.

    Example: `HF_TOKEN=... testset-builder push --version 1.0.0 --repo-id acme/support-set --workspace testset`.
    """
    pushed = api.push(settings(config, workspace), version, repo_id, private=private)
    if json_output:
        print(json.dumps(pushed.as_dict(), indent=2))
        return
    out.print(f"pushed {version} to {pushed.repo_url} at {pushed.commit[:12]}, tagged {pushed.tag}", highlight=False)


@app.command("import")
def import_set(
    source: Annotated[
        Path,
        typer.Argument(
            help="A BEIR folder, an MTEB-layout dataset directory (e.g. a release), or a TREC/BEIR qrels file.",
            show_default=False,
        ),
    ],
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    queries: Annotated[
        Path | None,
        typer.Option(
            "--queries", "-Q", help="Query texts, for a qrels file (JSONL, CSV or one per line).", show_default=False
        ),
    ] = None,
    version: Annotated[
        str | None,
        typer.Option("--version", "-v", help="Also release the imported state as this version.", show_default=False),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Import an existing labelled set into a workspace (labels become human verdicts), to extend it.

    Documents become one chunk each and keep their ids; a qrels file needs the chunks in the workspace already
    (chunk the corpus with --chunker prechunked) and --queries. With --version the imported state is released.

    Example: `testset-builder import beir-folder/ --workspace testset --version 1.0.0`.
    """
    resolved = settings(config, workspace)
    with open_workspace_for(resolved, create=True) as ws:
        imported = api.import_set(resolved, source, queries=queries, version=version, workspace=ws)
    summary, released = imported.summary, imported.release
    if json_output:
        print(json.dumps(imported.as_dict(), indent=2))
        return
    out.print(
        f"imported {summary.kind} {source}: {summary.documents} documents, {summary.queries} queries "
        f"({summary.new_queries} new), "
        f"{summary.labels} labels ({summary.new_labels} new, {summary.clamped_grades} grades clamped to 0-2) -> "
        f"{resolved.workspace}",
        highlight=False,
    )
    if released:
        out.print(f"released {released.version} -> {released.path}", highlight=False)


@app.command()
def remap(
    release: Annotated[
        str,
        typer.Option(
            "--release",
            help="The release to project: WORKSPACE@VERSION (VERSION may be latest) or a release directory.",
            show_default=False,
        ),
    ],
    to_workspace: Annotated[
        Path,
        typer.Option(
            "--to-workspace",
            help="The workspace holding the same documents chunked another way (chunk them there first).",
            show_default=False,
        ),
    ],
    version: Annotated[
        str,
        typer.Option("--version", "-v", help="The new release of --to-workspace (semantic, new).", show_default=False),
    ],
    min_coverage: Annotated[
        float | None,
        typer.Option(
            "--min-coverage",
            min=0.0,
            max=1.0,
            help="A new chunk inherits a label when it covers at least this share of the label's evidence span, or "
            "of its old chunk's span when there is no evidence. Config: remap.min_coverage.",
            show_default=False,
        ),
    ] = None,
    config: ConfigOption = None,
    notes: Annotated[str, typer.Option("--notes", help="Release notes, kept in the manifest.")] = "",
    json_output: JsonOption = False,
) -> None:
    """Project a release's labels onto another chunking of the same corpus, as a new release of that workspace.

    Each label is anchored to a span of its document: the evidence the question was written from when the release
    has it (meta/evidence.jsonl), else its chunk's span (meta/chunks.jsonl). A chunk of --to-workspace inherits the
    label when it covers at least --min-coverage of that span (default 0.5). Where a document's text changed, the
    labelled text is looked for in the new text (verbatim, then whitespace-normalised, then by its first and last
    words when the text inside it was edited). Every label ends one-to-one, split (several new chunks inherit it),
    merged (its new chunk inherits other labels of the query too: the grade is the max), ambiguous (no new chunk
    covers enough of it, as when chunks get smaller, or its inside was edited: every new chunk overlapping it is
    queued for review in --to-workspace, so a reviewer's verdict labels it) or lost (nothing overlaps it any more),
    each counted and listed (all of them with --json and in the new release's meta/remap.jsonl). Lost and ambiguous
    labels do not fail the command.

    --to-workspace keeps the remapped labels as judgments with their origin (a human label becomes a human verdict
    of reviewer remap:WORKSPACE@VERSION, a synthetic source label stays one, an unverified LLM label stays an
    unverified proposal) and the queries under their own ids, so a later `release` there keeps them. The new
    release is that workspace's release (its own judgments included); its manifest's remap section names the parent
    (workspace name, version, content sha256) and the policy. Releases written before meta/ cannot be remapped.

    Example: `testset-builder remap --release testset@1.0.0 --to-workspace testset-512 --version 1.0.0`.
    """
    resolved = settings(config, to_workspace, remap__min_coverage=min_coverage)
    with open_workspace_for(resolved) as ws:
        summary = api.remap(release, resolved, version, notes=notes, workspace=ws)
    if json_output:
        print(json.dumps(summary.as_dict(), indent=2))
        return
    counts, parent = summary.counts, summary.parent
    out.print(
        f"remapped {parent['workspace'] or parent['name']}@{parent['version']} -> {summary.path}: "
        f"{counts['labels']} labels: {counts['one_to_one']} one-to-one, {counts['split']} split, "
        f"{counts['merged']} merged, {counts['ambiguous']} ambiguous ({counts['proposals_queued']} chunks queued for "
        f"review in {escape(str(to_workspace or ws.root.name))}), {counts['lost']} lost ({counts['lost_relevant']} of "
        f"them relevant); {counts['relocated']} relocated in changed documents; {counts['new_labels']} labels on new "
        f"chunks ({counts['new_labels_merged']} merged) for {counts['queries']} queries "
        f"({counts['queries_waiting_review']} more waiting for review, {counts['queries_lost']} lost)",
        highlight=False,
    )
    for row in summary.lost[:20]:
        out.print(
            f"  [yellow]lost[/] {escape(row['query_id'])} {escape(row['chunk_id'])} (grade {row['grade']}): "
            f"{escape(row['reason'])}",
            highlight=False,
        )
    if len(summary.lost) > 20:
        out.print(f"  ... and {len(summary.lost) - 20} more: see meta/remap.jsonl or --json", highlight=False)
