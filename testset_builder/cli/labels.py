"""Labelling commands: synthesize, propose, audit, and the LLM ledger (costs, resume)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from .app import (
    EXIT_PARTIAL,
    LOCAL_JUDGE_WARNING,
    BatchOption,
    ConfigOption,
    IdFieldOption,
    JsonOption,
    MaxCostOption,
    QrelsOption,
    QueriesOption,
    TextFieldOption,
    WorkspaceOption,
    _exit_for,
    _judging_lines,
    _llm_settings,
    _run_with_llm,
    app,
    err,
    out,
)


@app.command()
def synthesize(
    workspace: WorkspaceOption = Path("testset"),
    config: ConfigOption = None,
    questions: Annotated[
        int | None,
        typer.Option(
            "--questions",
            "-n",
            min=1,
            help="Questions to make: exactly this many, or a statement of why fewer (default: the config's, 100).",
            show_default=False,
        ),
    ] = None,
    per_chunk: Annotated[
        int | None,
        typer.Option(
            "--per-chunk", min=1, help="Questions asked of each sampled chunk (default 1).", show_default=False
        ),
    ] = None,
    styles: Annotated[
        str | None,
        typer.Option(
            "--styles",
            help="Style shares, e.g. natural=0.4,keyword=0.2,paraphrase=0.2,multi=0.2 (multi: two related chunks, both labelled).",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            help="Seed for sampling and generation (default 0); another seed makes another set.",
            show_default=False,
        ),
    ] = None,
    critic: Annotated[
        bool | None,
        typer.Option(
            "--critic/--no-critic",
            help="The judge checks that the source chunk answers each question (default on).",
            show_default=False,
        ),
    ] = None,
    round_trip: Annotated[
        int | None,
        typer.Option(
            "--round-trip",
            min=1,
            help="Keep a question only if BM25 ranks its source in the top K. Biases the set toward BM25: off by default.",
            show_default=False,
        ),
    ] = None,
    mine: Annotated[
        bool | None,
        typer.Option(
            "--mine/--no-mine",
            help="Judge each question's top other chunks and queue the relevant ones for review (default on).",
            show_default=False,
        ),
    ] = None,
    max_cost_usd: MaxCostOption = None,
    batch: BatchOption = False,
    json_output: JsonOption = False,
) -> None:
    """Generate questions from sampled chunks; each labels its source chunk (and the source's duplicates) grade 2.

    Chunks are sampled across documents (short, boilerplate and duplicate chunks skipped), questions come in the
    configured styles, and the filters (validation, answerability critic, optional round trip, near-duplicates)
    each count what they removed. False-negative mining then has the judge grade each question's top other chunks,
    and queues the relevant ones for review. The `synthesize:` section of a config holds every setting; the flags
    override it. Rerunning the same settings pays for nothing twice and stores nothing twice.
    """

    from ..config import with_overrides
    from ..errors import InputError
    from ..stages.synthesize import synthesize as run_synthesize
    from ..store import open_workspace

    settings = _llm_settings(config, max_cost_usd)
    overrides = {
        k: v
        for k, v in {
            "questions": questions,
            "per_chunk": per_chunk,
            "seed": seed,
            "critic": critic,
            "round_trip_k": round_trip,
            "mine": mine,
        }.items()
        if v is not None
    }
    if styles:
        try:
            overrides["styles"] = {
                name.strip(): float(share) for name, share in (part.split("=") for part in styles.split(","))
            }
        except ValueError:
            raise InputError(f"--styles wants name=share pairs separated by commas, not {styles!r}") from None
    synth = with_overrides(settings.synthesize, overrides)
    with open_workspace(workspace, create=False) as ws:
        summary, local_model = _run_with_llm(
            ws,
            settings,
            "synthesize",
            json_output,
            lambda client, progress: run_synthesize(
                ws, client, settings.llm.provider.model, synth, progress=progress, batch=batch
            ),
        )
    if json_output:
        print(json.dumps(summary.as_dict(), indent=2))
    elif summary.batch_id and summary.made + summary.already_made == 0:
        out.print(
            f"waiting for batch {summary.batch_id} ({summary.batch_step}): run `testset-builder resume`, then this "
            "command again",
            highlight=False,
        )
        return
    else:
        styles_made = ", ".join(
            f"{n} {s} (overlap {summary.mean_overlap.get(s, 0):.2f})" for s, n in sorted(summary.styles.items())
        )
        removed = ", ".join(f"{n} by {name.replace('_', ' ')}" for name, n in summary.removed.items())
        skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(summary.chunks_skipped.items())) or "none"
        lines = [
            f"{summary.made + summary.already_made} of {summary.requested} questions ({summary.made} new, "
            f"{summary.already_made} already made): {styles_made or 'none'}",
            f"chunks: {summary.chunks_eligible} eligible (skipped: {skipped}); {summary.chunks_sampled} sampled from "
            f"{summary.documents_covered} documents in {summary.rounds} rounds",
            f"generated {summary.generated} ({summary.generation_failed} failed); removed {removed}; "
            f"{summary.surplus} surplus dropped",
            f"labels: {summary.source_labels} source chunks and {summary.twin_labels} duplicate twins, grade 2",
        ]
        if synth.mine:
            lines.append(
                f"mining: {summary.mining.pairs} other chunks judged ({summary.mining.already_judged} before), "
                f"{summary.mining.queued} judged relevant and newly queued for review; "
                f"{summary.questions_with_extra_relevant} questions gained extra relevant chunks"
            )
        lines.append(
            f"LLM: {summary.calls} calls ({summary.cache_hits} from the cache), {summary.input_tokens} input and "
            f"{summary.output_tokens} output tokens, ${summary.cost_usd:.4f}; {summary.seconds:.1f} s -> {workspace}"
        )
        for line in lines:
            out.print(line, highlight=False)
        if summary.shortfall:
            err.print(f"[yellow]fewer than asked:[/] {escape(summary.shortfall)}")
        if local_model:
            err.print(LOCAL_JUDGE_WARNING)
    if summary.batch_id:
        if not json_output:
            out.print(
                f"waiting for batch {summary.batch_id} ({summary.batch_step}): run `testset-builder resume`, then "
                "this command again",
                highlight=False,
            )
        return
    if summary.shortfall or summary.generation_failed or summary.mining.failed or summary.mining.not_judged_budget:
        raise typer.Exit(EXIT_PARTIAL)


@app.command()
def propose(
    queries: QueriesOption,
    workspace: WorkspaceOption = Path("testset"),
    config: ConfigOption = None,
    id_field: IdFieldOption = None,
    text_field: TextFieldOption = None,
    retrievers: Annotated[
        str,
        typer.Option(
            "--retrievers",
            help="auto (BM25, plus dense when the dense extra is installed), bm25, dense, or bm25,dense.",
        ),
    ] = "auto",
    depth: Annotated[int, typer.Option("--depth", min=1, help="Each retriever's top k in the pool.")] = 20,
    fused_depth: Annotated[
        int | None,
        typer.Option(
            "--fused-depth",
            min=1,
            help="The RRF fusion's top k in the pool, with two or more retrievers (default: --depth).",
            show_default=False,
        ),
    ] = None,
    judge: Annotated[
        bool, typer.Option("--judge/--no-judge", help="Grade the pool with the LLM judge, or only pool.")
    ] = True,
    max_cost_usd: MaxCostOption = None,
    batch: BatchOption = False,
    strict: Annotated[
        bool,
        typer.Option("--strict", help="Stop at the first unreadable line of the queries file instead of skipping it."),
    ] = False,
    json_output: JsonOption = False,
) -> None:
    """Pool candidate chunks for real queries and have the LLM judge grade them (0, 1, 2).

    Each query's pool is the union of every retriever's top --depth and the RRF fusion's top --fused-depth; each
    candidate keeps the retriever and rank that found it. Each pair is judged once per judge (provider, model,
    prompt): the grade, its probabilities where the provider gives log-probabilities, and a rationale become a
    pending `llm` proposal in the review queue, the most uncertain and most likely relevant first. A rerun after a
    crash pays for nothing twice.
    """
    import asyncio

    from ..stages.judge import Judge
    from ..stages.propose import PoolSettings
    from ..stages.propose import propose as run_propose
    from ..stages.queries import read_queries
    from ..store import open_workspace

    query_file = read_queries(queries, id_field=id_field, text_field=text_field, strict=strict)
    names = retrievers if retrievers == "auto" else tuple(n.strip() for n in retrievers.split(",") if n.strip())
    pool_settings = PoolSettings(retrievers=names, depth=depth, fused_depth=fused_depth)
    settings = _llm_settings(config, max_cost_usd) if judge else None
    with open_workspace(workspace, create=False) as ws:
        if settings is None:
            summary, local_judge = asyncio.run(run_propose(ws, query_file, None, pool_settings)), False
        else:
            summary, local_judge = _run_with_llm(
                ws,
                settings,
                "propose",
                json_output,
                lambda client, progress: run_propose(
                    ws,
                    query_file,
                    Judge(client, settings.llm.provider.model),
                    pool_settings,
                    batch=batch,
                    progress=progress,
                ),
            )
    if json_output:
        print(json.dumps({**summary.as_dict(), "skipped": [str(s) for s in query_file.skipped]}, indent=2))
        _exit_for(summary.judging)
        return
    for skipped in query_file.skipped[:10]:
        err.print(f"[yellow]skipped[/] {escape(str(skipped))}", highlight=False)
    out.print(
        f"{summary.queries} queries ({summary.new_queries} new, {summary.merged_duplicates} duplicates merged, "
        f"{summary.skipped_lines} lines skipped); pool from {' + '.join(summary.retrievers)}"
        f"{' + rrf' if len(summary.retrievers) > 1 else ''}: {summary.pool_min}-{summary.pool_max} chunks per query "
        f"(mean {summary.pool_mean}), {summary.candidates} candidate rows"
    )
    if judge:
        for line in _judging_lines(summary.judging):
            out.print(line, highlight=False)
        if local_judge:
            err.print(LOCAL_JUDGE_WARNING)
    out.print(f"{summary.seconds:.1f} s -> {workspace}")
    _exit_for(summary.judging)


@app.command()
def audit(
    qrels: QrelsOption,
    queries: QueriesOption,
    workspace: WorkspaceOption = Path("testset"),
    config: ConfigOption = None,
    id_field: IdFieldOption = None,
    text_field: TextFieldOption = None,
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Write the disagreements to this TSV file.", show_default=False)
    ] = None,
    max_cost_usd: MaxCostOption = None,
    json_output: JsonOption = False,
) -> None:
    """Audit an existing labelled set: the LLM judge grades every labelled pair and the disagreements are listed.

    The qrels' document ids must be chunk ids of the workspace (chunk a BEIR corpus with --chunker prechunked to
    keep its ids). A disagreement is a pair the labels call relevant (grade >= 1) and the judge does not, or the
    reverse; they head the review queue. Reports agreement and Cohen's kappa.
    """
    import csv

    from ..export import read_qrels
    from ..stages.judge import Judge
    from ..stages.propose import audit as run_audit
    from ..stages.queries import read_queries
    from ..store import open_workspace

    labels = read_qrels(qrels)
    query_file = read_queries(queries, id_field=id_field, text_field=text_field)
    settings = _llm_settings(config, max_cost_usd)
    with open_workspace(workspace, create=False) as ws:
        summary, local_judge = _run_with_llm(
            ws,
            settings,
            "audit",
            json_output,
            lambda client, progress: run_audit(
                ws, labels, query_file, Judge(client, settings.llm.provider.model), progress=progress
            ),
        )
    if out_file:
        with out_file.open("w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
            writer.writerow(["query-id", "corpus-id", "label", "judge", "confidence", "rationale"])
            for d in summary.disagreements:
                writer.writerow(
                    [
                        d["query_id"],
                        d["chunk_id"],
                        d["label"],
                        d["judge"],
                        "" if d["confidence"] is None else f"{d['confidence']:.3f}",
                        d["rationale"] or "",
                    ]
                )
    if json_output:
        print(json.dumps(summary.as_dict(), indent=2))
        _exit_for(summary.judging)
        return
    fmt = lambda v: "n/a" if v is None else f"{v:.3f}"
    out.print(
        f"{summary.pairs} labelled pairs ({summary.labelled_relevant} labelled relevant), {summary.judged} judged: "
        f"agreement on relevant/not {fmt(summary.agreement)}, same grade {fmt(summary.exact_agreement)}, "
        f"Cohen's kappa {fmt(summary.kappa)}; {len(summary.disagreements)} disagreements queued first for review"
        + (f", written to {out_file}" if out_file else ""),
        highlight=False,
    )
    for line in _judging_lines(summary.judging):
        out.print(line, highlight=False)
    if local_judge:
        err.print(LOCAL_JUDGE_WARNING)
    _exit_for(summary.judging)


@app.command()
def costs(
    workspace: Annotated[Path, typer.Option("--workspace", "-w", help="The workspace directory.")] = Path("testset"),
    json_output: JsonOption = False,
) -> None:
    """What the LLM calls recorded in a workspace cost, by stage and model (from the llm_calls ledger)."""
    from rich.table import Table

    from ..llm.ledger import cost_summary
    from ..store import open_workspace

    with open_workspace(workspace, create=False) as ws:
        rows = cost_summary(ws.db)
    if json_output:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title=f"LLM costs in {workspace}", title_justify="left")
    for column in ("stage", "model", "calls", "failed", "attempts", "input tok", "output tok", "cost USD"):
        table.add_column(column, justify="left" if column in ("stage", "model") else "right")
    for row in rows:
        cost = f"{row['cost_usd']:.4f}" + (f" (+{row['unpriced_calls']} unpriced)" if row["unpriced_calls"] else "")
        table.add_row(
            row["stage"],
            row["model"],
            str(row["calls"]),
            str(row["failed"]),
            str(row["attempts"]),
            str(row["input_tokens"]),
            str(row["output_tokens"]),
            cost,
        )
    out.print(table)
    total = sum(r["cost_usd"] for r in rows)
    out.print(f"total ${total:.4f} over {sum(r['calls'] for r in rows)} answered calls")


@app.command()
def resume(
    workspace: Annotated[Path, typer.Option("--workspace", "-w", help="The workspace directory.")] = Path("testset"),
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="Config naming the provider (default: from the environment)."),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Poll the batches submitted with --batch and cache the answers of those that ended.

    Then rerun the command that submitted them: it goes on from the cache without new calls.
    """
    import asyncio

    from ..config import default_config, load_config, make_client
    from ..store import open_workspace

    settings = load_config(config) if config else default_config()
    with open_workspace(workspace, create=False) as ws:

        async def poll() -> dict[str, int]:
            async with make_client(settings.llm, ws, "resume") as client:
                return await client.resume_batches()

        counts = asyncio.run(poll())
    if json_output:
        print(json.dumps(counts))
        return
    out.print(
        f"{counts['ended']} batches ended ({counts['answered']} answers cached, {counts['failed']} failed); "
        f"{counts['running']} still running"
    )


@app.command()
def queue(
    workspace: WorkspaceOption = Path("testset"),
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="How many proposals to show.")] = 20,
    json_output: JsonOption = False,
) -> None:
    """The review queue, highest priority first: the LLM proposals a reviewer should look at next.

    Priority is P(relevant) + uncertainty of the judge's grade (audit disagreements first), so the likely relevant
    and uncertain come before the confidently irrelevant.
    """
    from rich.table import Table

    from ..store import open_workspace, rows

    with open_workspace(workspace, create=False) as ws:
        items = []
        for entry in rows.review_queue(ws.db, limit=limit):
            proposals = [
                j
                for j in rows.iter_judgments(ws.db, entry["query_id"])
                if j.chunk_id == entry["chunk_id"] and j.source.value == "llm"
            ]
            latest = proposals[-1] if proposals else None
            query = rows.get_query(ws.db, entry["query_id"])
            items.append(
                {
                    "priority": entry["priority"],
                    "query_id": query.query_id,
                    "query": query.text,
                    "chunk_id": entry["chunk_id"],
                    "grade": latest.grade if latest else None,
                    "p_relevant": None
                    if not (latest and latest.grade_probs)
                    else round(1.0 - latest.grade_probs.get(0, 0.0), 3),
                    "rationale": latest.rationale if latest else None,
                    "chunk": rows.get_chunk(ws.db, entry["chunk_id"]).text[:200],
                }
            )
        total = ws.db.execute("SELECT COUNT(*) FROM review_assignments").fetchone()[0]
    if json_output:
        print(json.dumps({"total": total, "items": items}, indent=2, ensure_ascii=False))
        return
    table = Table(title=f"review queue: {len(items)} of {total}, highest priority first", title_justify="left")
    for column in ("priority", "query", "chunk", "grade", "P(rel)"):
        table.add_column(column, justify="right" if column in ("priority", "grade", "P(rel)") else "left")
    for item in items:
        p_rel = "?" if item["p_relevant"] is None else f"{item['p_relevant']:.2f}"
        table.add_row(
            f"{item['priority']:.3f}",
            escape(item["query"][:60]),
            escape(f"{item['chunk_id']}: {' '.join(item['chunk'].split())[:60]}"),
            str(item["grade"]),
            p_rel,
        )
    out.print(table)
