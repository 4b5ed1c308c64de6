"""Labelling commands: synthesize, propose, audit, the review queue, and the LLM ledger (costs, resume)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ..api.stages import quality_words
from ..errors import InputError
from .scoring_bodies import run_paths
from .typer_app import (
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
    app,
    err,
    exit_for,
    judge_is_weak,
    judging_lines,
    llm_bar,
    open_workspace_for,
    out,
    settings,
)


def _styles(text: str | None) -> dict[str, float] | None:
    if text is None:
        return None
    try:
        return {name.strip(): float(share) for name, share in (part.split("=") for part in text.split(","))}
    except ValueError:
        raise InputError(f"--styles wants name=share pairs separated by commas, not {text!r}") from None


def _retrievers(text: str | None) -> str | list[str] | None:
    if text is None or text == "auto":
        return text
    return [name.strip() for name in text.split(",") if name.strip()]


@app.command()
def synthesize(
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    questions: Annotated[
        int | None,
        typer.Option(
            "--questions",
            "-n",
            min=1,
            help="Questions to make: exactly this many, or a statement of why fewer. Config: synthesize.questions.",
            show_default=False,
        ),
    ] = None,
    per_chunk: Annotated[
        int | None,
        typer.Option(
            "--per-chunk",
            min=1,
            help="Questions asked of each sampled chunk. Config: synthesize.per_chunk.",
            show_default=False,
        ),
    ] = None,
    styles: Annotated[
        str | None,
        typer.Option(
            "--styles",
            help="Style shares, e.g. natural=0.4,keyword=0.2,paraphrase=0.2,multi=0.2 "
            "(multi: two related chunks, both labelled).",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            help="Seed for sampling and generation; another seed makes another set. Config: synthesize.seed.",
            show_default=False,
        ),
    ] = None,
    critic: Annotated[
        bool | None,
        typer.Option(
            "--critic/--no-critic",
            help="The judge checks that the source chunk answers each question. Config: synthesize.critic.",
            show_default=False,
        ),
    ] = None,
    round_trip: Annotated[
        int | None,
        typer.Option(
            "--round-trip",
            min=1,
            help="Keep a question only if BM25 ranks its source in the top K. Biases the set toward BM25: "
            "off by default.",
            show_default=False,
        ),
    ] = None,
    mine: Annotated[
        bool | None,
        typer.Option(
            "--mine/--no-mine",
            help="Find each question's other relevant chunks and queue them for review. Config: synthesize.mine.",
            show_default=False,
        ),
    ] = None,
    relevance_by: Annotated[
        str | None,
        typer.Option(
            "--relevance-by",
            help="Who decides for the critic and mining: estimate (the relevance estimate, no LLM call), llm (the "
            "judge), or auto (default): the estimate when the judge is the embedded local model, else the judge.",
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
    each count what they removed. False-negative mining then scores each question's top other chunks and queues the
    likely relevant ones for review. The generator role writes; the judge role criticises and mines, unless the
    relevance estimate does (--relevance-by; by default when the judge is the embedded local model). The
    `synthesize:` section of a config holds every setting; the flags override it. Rerunning the same settings pays
    for nothing twice and stores nothing twice. A cost-limit stop keeps what was made, prints the summary and exits 3.

    Example: `testset-builder synthesize --config my-set/testset-builder.yaml --questions 50`.
    """
    from .. import api

    resolved = settings(
        config,
        workspace,
        synthesize__questions=questions,
        synthesize__per_chunk=per_chunk,
        synthesize__styles=_styles(styles),
        synthesize__seed=seed,
        synthesize__critic=critic,
        synthesize__round_trip_k=round_trip,
        synthesize__mine=mine,
        synthesize__relevance_by=relevance_by,
        limits__max_cost_usd=max_cost_usd,
    )
    with open_workspace_for(resolved) as ws, llm_bar(json_output) as progress:
        summary = api.synthesize(resolved, workspace=ws, progress=progress, batch=batch)
    if json_output:
        print(json.dumps(summary.as_dict(), indent=2))
    elif summary.batch_id and summary.made + summary.already_made == 0:
        out.print(
            f"waiting for batch {summary.batch_id} ({summary.batch_step}): run `testset-builder resume`, "
            "then this command again",
            highlight=False,
        )
        return
    else:
        _print_synthesis(summary, resolved)
    if summary.batch_id:
        if not json_output:
            out.print(
                f"waiting for batch {summary.batch_id} ({summary.batch_step}): run `testset-builder resume`, "
                "then this command again",
                highlight=False,
            )
        return
    exit_for(summary.incomplete)


def _print_synthesis(summary, resolved) -> None:
    styles_made = ", ".join(
        f"{n} {s} (overlap {summary.mean_overlap.get(s, 0):.2f})" for s, n in sorted(summary.styles.items())
    )
    removed = ", ".join(f"{n} by {name.replace('_', ' ')}" for name, n in summary.removed.items())
    skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(summary.chunks_skipped.items())) or "none"
    made = summary.made + summary.already_made
    generated = f"generated {summary.generated} ({summary.generation_failed} failed"
    generated += f", {summary.retried} asked again after a rule rejected a question" if summary.retried else ""
    generated += (
        f", {summary.not_generated_budget} not asked for lack of budget)" if summary.not_generated_budget else ")"
    )
    held = f"; {summary.critic_failed} held back: their critic judgment failed" if summary.critic_failed else ""
    lines = [
        f"{made} of {summary.requested} questions ({summary.made} new, {summary.already_made} already made): "
        f"{styles_made or 'none'}",
        f"chunks: {summary.chunks_eligible} eligible (skipped: {skipped}); {summary.chunks_sampled} sampled from "
        f"{summary.documents_covered} documents in {summary.rounds} rounds",
        f"{generated}; removed {removed}; {summary.surplus} surplus dropped{held}",
        *(
            [f"rejected by rule: {', '.join(f'{n} {why}' for why, n in sorted(summary.validation_reasons.items()))}"]
            if summary.validation_reasons
            else []
        ),
        f"labels: {summary.source_labels} source chunks and {summary.twin_labels} duplicate twins, grade 2",
    ]
    if summary.critic_by:
        by_estimate = summary.critic_by.startswith("estimate")
        bar = (
            f"P(relevant) >= {resolved.synthesize.critic_min_estimate}"
            if by_estimate
            else f"grade >= {resolved.synthesize.critic_min_grade}"
        )
        lines.append(f"critic: {summary.critic_by}: each source's {bar}")
    if summary.mined_by:
        lines.append(f"mining by {summary.mined_by}: {_mining(summary)}")
    if summary.held_waiting > summary.doubted_waiting:
        lines.append(
            f"held: {summary.held_waiting} questions no reviewer has kept wait for question review (`serve`); "
            "releases hold them back until a reviewer keeps them (release.hold_unreviewed: a weak generator wrote "
            "them, or it is on)"
        )
    if summary.doubted_waiting:
        lines.append(
            f"doubted: {summary.doubted} questions whose source the estimate does not rank near the top; "
            f"{summary.doubted_waiting} wait for question review (`serve`); releases hold them back until a reviewer "
            "keeps them"
        )
    elif summary.doubted:
        lines.append(f"doubted: {summary.doubted} questions whose source the estimate doubts, all reviewed")
    if summary.audit_drawn:
        lines.append(
            f"audit: {summary.audit_drawn} questions drawn at random for question review; their verdicts estimate "
            "how many unchecked labels are wrong"
        )
    lines.append(
        f"LLM: {summary.calls} calls ({summary.cache_hits} from the cache), {summary.input_tokens} input and "
        f"{summary.output_tokens} output tokens, ${summary.cost_usd:.4f}; {summary.seconds:.1f} s -> "
        f"{resolved.workspace}"
    )
    for line in lines:
        out.print(line, highlight=False)
    if summary.budget_stopped:
        err.print(
            f"[yellow]stopped by the cost limit[/] (${resolved.limits.max_cost_usd:.4f}): what was made is kept; "
            "rerun with a larger --max-cost-usd to go on"
        )
    if summary.shortfall:
        err.print(f"[yellow]fewer than asked:[/] {escape(summary.shortfall)}")
    if judge_is_weak(resolved) and any(by and by.startswith("llm") for by in (summary.critic_by, summary.mined_by)):
        err.print(LOCAL_JUDGE_WARNING)


def _mining(summary) -> str:
    """What mining did: estimated (no LLM call) or judged, what it queued, which questions gained chunks."""
    from .. import api

    mining, gained = summary.mining, summary.questions_with_extra_relevant
    if summary.mined_by.startswith("estimate"):
        return (
            f"{mining.pairs} other chunks estimated (no LLM call), {mining.queued} at P(relevant) >= "
            f"{api.MINED_RELEVANT} newly queued for review; {gained} questions gained likely relevant chunks"
        )
    return (
        f"{mining.pairs} other chunks judged ({mining.already_judged} before, {mining.failed} failed"
        + (f", {mining.not_judged_budget} left for lack of budget" if mining.not_judged_budget else "")
        + f"), {mining.queued} judged relevant and newly queued for review; {gained} questions gained extra relevant "
        "chunks"
    )


@app.command()
def propose(
    queries: Annotated[
        Path | None,
        typer.Option(
            "--queries",
            "-Q",
            help="Real queries: JSONL, CSV/TSV with a header, or one query per line.",
            show_default=False,
        ),
    ] = None,
    from_logs: Annotated[
        bool,
        typer.Option("--from-logs", help="Propose for the logged queries `select --from-logs` drew, not a file."),
    ] = False,
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    id_field: IdFieldOption = None,
    text_field: TextFieldOption = None,
    retrievers: Annotated[
        str | None,
        typer.Option(
            "--retrievers",
            help="auto (BM25, plus dense when the dense extra is installed), bm25, dense, or bm25,dense.",
            show_default=False,
        ),
    ] = None,
    depth: Annotated[
        int | None,
        typer.Option(
            "--depth", min=1, help="Each retriever's top k in the pool. Config: propose.depth.", show_default=False
        ),
    ] = None,
    fused_depth: Annotated[
        int | None,
        typer.Option(
            "--fused-depth",
            min=1,
            help="The RRF fusion's top k in the pool, with two or more retrievers (default: --depth).",
            show_default=False,
        ),
    ] = None,
    runs: Annotated[
        list[str] | None,
        typer.Option(
            "--runs",
            help="The systems this set will score: run files (TREC or JSONL; a glob in quotes, or paths; repeatable) "
            "whose top --run-depth join the pool, as TREC pools the systems it judges.",
            show_default=False,
        ),
    ] = None,
    run_depth: Annotated[
        int | None,
        typer.Option(
            "--run-depth",
            min=1,
            help="Each --runs run's top k in the pool. Config: propose.run_depth (100).",
            show_default=False,
        ),
    ] = None,
    judge: Annotated[
        bool | None,
        typer.Option(
            "--judge/--no-judge",
            help="Grade the pool with the LLM judge, or only pool (default: the judge, unless it is the embedded "
            "local model, which is near chance: then the relevance estimate grades, as in `run`).",
            show_default=False,
        ),
    ] = None,
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
    candidate keeps the retriever and rank that found it. Each pair is judged once per judge request (provider,
    model, prompt, options): the grade, its probabilities where the provider gives log-probabilities, and a
    rationale become a pending `llm` proposal in the review queue, the most uncertain and most likely relevant
    first. The config's `propose:` and `judging:` sections give the defaults. A rerun after a crash pays for nothing
    twice.

    With --from-logs the queries are the logged ones a failure-first draw chose (`select --from-logs`); their
    production results are in the pool already (retriever `production`).

    --runs pools the systems you will score (TREC pooling): each run's top --run-depth joins the pool as retriever
    `run:<tag>`. `score --release` counts a run's results outside the pool as not relevant, and its 'pool
    coverage' line says how much of the run that is; pooled, the run's figures rest on estimates and verdicts
    instead. Its ids must be this workspace's chunk ids.

    Example: `testset-builder propose --queries queries.jsonl --config my-set/testset-builder.yaml --depth 20`, or
    `testset-builder propose --queries queries.jsonl --runs 'runs/*.trec'`.
    """
    from .. import api

    resolved = settings(
        config,
        workspace,
        propose__retrievers=_retrievers(retrievers),
        propose__depth=depth,
        propose__fused_depth=fused_depth,
        propose__run_depth=run_depth,
        limits__max_cost_usd=max_cost_usd,
    )
    if (queries is None) == (not from_logs):
        raise InputError("give --queries FILE or --from-logs (the logged queries a failure-first draw chose)")
    if judge is None and judge_is_weak(resolved) and not json_output:
        err.print(
            "judging: pools only (the embedded local judge is near chance; the relevance estimate grades): "
            "pass --judge to have it grade anyway"
        )
    with open_workspace_for(resolved) as ws:
        with llm_bar(json_output) as progress:  # the judge's calls, and the encoding of the chunks
            proposed = api.propose(
                resolved, queries, from_logs=from_logs, judge=judge, workspace=ws, progress=progress, batch=batch,
                strict=strict, id_field=id_field, text_field=text_field,
                runs=run_paths(None, runs, None) if runs else (),
            )  # fmt: skip
    summary = proposed.summary
    if json_output:
        print(json.dumps(proposed.as_dict(), indent=2))
        exit_for(proposed.incomplete)
        return
    for skipped in proposed.skipped[:10]:
        err.print(f"[yellow]skipped[/] {escape(str(skipped))}", highlight=False)
    out.print(
        f"{summary.queries} queries ({summary.new_queries} new, {summary.merged_duplicates} duplicates merged, "
        f"{summary.skipped_lines} lines skipped); pool from {' + '.join(summary.retrievers)}"
        f"{' + rrf' if len(summary.retrievers) > 1 else ''}: {summary.pool_min}-{summary.pool_max} chunks per query "
        f"(mean {summary.pool_mean}), {summary.candidates} candidate rows"
    )
    for took in summary.runs:
        out.print(
            f"pooled {escape(took.name)}: its top {resolved.propose.run_depth} for {took.queries} queries, "
            f"{took.candidates} candidate rows",
            highlight=False,
        )
        if took.unknown_chunks:
            err.print(
                f"[yellow]warning:[/] {escape(took.name)} names {took.unknown_chunks} chunks this workspace does not "
                "have (skipped; score counts them as not relevant)"
            )
    for name, missed in summary.no_results.items():
        shown = ", ".join(missed[:5]) + (" ..." if len(missed) > 5 else "")
        err.print(
            f"[yellow]warning:[/] {name} found nothing for {len(missed)} queries ({escape(shown)}): none of their "
            f"words is in its index (corpus language: {', '.join(summary.languages)}); are they in another language?"
        )
    if proposed.judged:
        for line in judging_lines(summary.judging):
            out.print(line, highlight=False)
        if judge_is_weak(resolved):
            err.print(LOCAL_JUDGE_WARNING)
    if summary.estimate:
        out.print(
            f"relevance estimate: P(relevant) for {summary.estimate['pairs']} pairs by {summary.estimate['model']} "
            f"({summary.estimate['verdicts']} human-graded pairs); `select --budget N` draws pairs for review",
            highlight=False,
        )
    out.print(f"{summary.seconds:.1f} s -> {resolved.workspace}")
    exit_for(summary.judging.incomplete)


@app.command()
def audit(
    qrels: QrelsOption,
    queries: QueriesOption,
    workspace: WorkspaceOption = None,
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

    Example: `testset-builder audit --qrels qrels.tsv --queries queries.jsonl --workspace testset --out disagree.tsv`.
    """
    from .. import api

    resolved = settings(config, workspace, limits__max_cost_usd=max_cost_usd)
    with open_workspace_for(resolved) as ws, llm_bar(json_output) as progress:
        summary = api.audit(
            resolved, qrels, queries, id_field=id_field, text_field=text_field, out=out_file, workspace=ws,
            progress=progress,
        )  # fmt: skip
    if json_output:
        print(json.dumps(summary.as_dict(), indent=2))
        exit_for(summary.judging.incomplete)
        return

    def fmt(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    out.print(
        f"{summary.pairs} labelled pairs ({summary.labelled_relevant} labelled relevant), {summary.judged} judged: "
        f"agreement on relevant/not {fmt(summary.agreement)}, same grade {fmt(summary.exact_agreement)}, "
        f"Cohen's kappa {fmt(summary.kappa)}; {len(summary.disagreements)} disagreements queued first for review"
        + (f", written to {out_file}" if out_file else ""),
        highlight=False,
    )
    for line in judging_lines(summary.judging):
        out.print(line, highlight=False)
    if judge_is_weak(resolved):
        err.print(LOCAL_JUDGE_WARNING)
    exit_for(summary.judging.incomplete)


@app.command()
def estimate(
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    pairs_file: Annotated[
        Path | None,
        typer.Option(
            "--pairs",
            help="A qrels file (TREC, BEIR TSV or JSONL) whose pairs to estimate too; its grades are not read.",
            show_default=False,
        ),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Write the estimates (of --pairs, else of every pair) to .jsonl or .tsv.",
            show_default=False,
        ),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Estimate P(relevant) for every pooled and queued pair, refitted on the reviewers' grades.

    The estimate combines dense similarity, BM25, ranks (also standardised over each query's top 100), word overlap
    and the LLM judge's P(relevant) when there is one. With no human grade yet it is the shipped prior; from 20
    graded pairs on, it is refitted on this workspace's verdicts, pulled towards the prior, and the refit is kept
    only if its cross-validated log-loss on the verdicts beats the prior's (the summary says which, and why, with
    the estimate's held-out AUC and calibration error). Each query's pairs are scored by the model fitted without
    that query's verdicts. No LLM call; run it again after a review session.

    --pairs estimates the pairs of a qrels file too (its queries must be in the workspace: `propose` stores them),
    and --output writes query-id, corpus-id, p_relevant, model and verdicts per pair.

    Example: `testset-builder estimate --workspace testset --pairs qrels.tsv --output estimates.jsonl`.
    """
    from .. import api

    resolved = settings(config, workspace)
    with open_workspace_for(resolved) as ws:
        estimated = api.estimate(resolved, workspace=ws, pairs_file=pairs_file, out=output)
    summary, found, missing = estimated.summary, estimated.rows, estimated.not_live
    if json_output:
        print(json.dumps(estimated.as_dict(), indent=2))
        return
    model = summary.model
    weights = ", ".join(f"{name} {value:+.2f}" for name, value in model["weights"].items() if value)
    out.print(
        f"estimated {summary.pairs} pairs ({summary.new_features} newly scored"
        f"{'' if summary.dense else '; no dense model: lexical signals only'}) with {model['name']}, fitted on "
        f"{summary.verdicts} human-graded pairs ({summary.relevant_verdicts} relevant); weights: {weights}",
        highlight=False,
    )
    out.print(f"  {quality_words(summary.validation)}", highlight=False)
    if output is not None:
        out.print(f"wrote {len(found)} estimates to {output}", highlight=False)
    if pairs_file is not None and missing:
        out.print(f"{len(missing)} pairs name a chunk that is not live: not estimated", highlight=False)


@app.command("select")
def select_pairs(
    budget: Annotated[
        int | None,
        typer.Option("--budget", "-n", min=1, help="Pairs to draw for review (on average).", show_default=False),
    ] = None,
    from_logs: Annotated[
        bool,
        typer.Option(
            "--from-logs", help="Draw logged queries to label instead (failure-first; see import-logs), --limit many."
        ),
    ] = False,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", min=1, help="With --from-logs: logged queries to draw (on average).", show_default=False
        ),
    ] = None,
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    uniform_share: Annotated[
        float,
        typer.Option("--uniform-share", min=0.01, max=1.0, help="Share of the budget spread evenly over every pair."),
    ] = 0.2,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the draw (a rerun with it draws the same).")] = 0,
    take_all_share: Annotated[
        float,
        typer.Option(
            "--take-all-share", min=0.0, max=0.9, help="Most of the budget taken for sure (0: a random draw only)."
        ),
    ] = 0.5,
    take_all_per_query: Annotated[
        int,
        typer.Option(
            "--take-all-per-query", min=0, help="Likely relevant pairs taken for sure per real query, at most."
        ),
    ] = 3,
    json_output: JsonOption = False,
) -> None:
    """Pick the pairs humans should review: each real query's likely relevant pairs for sure, the rest drawn at
    random, each with a recorded probability; or, with --from-logs, the logged queries to label, the likely
    failures likelier.

    Refits the relevance estimate on the verdicts so far. Then it takes pairs for sure: for each real query, the
    pending pairs the estimate calls likely relevant (P >= 0.5), the likeliest first, at most --take-all-per-query.
    They use at most --take-all-share of the budget. When more qualify, each query's likeliest pair goes first, so
    every real query gets one before any gets two. These pairs have probability 1.

    The rest of the budget is a random draw over every other pair no human has labelled yet (those an earlier round
    considered too: their estimate has moved). Pair i is drawn with probability min(1, u + c w_i), w_i = p_i (1 + 1
    / log2(1 + r_i)) from its estimate p_i and best rank r_i. u spreads --uniform-share of that budget evenly (no
    pair is ever impossible); c makes the expected number drawn equal it.

    Pairs taken for sure head the review queue, the drawn ones next. The summary says how the budget split and
    why. Every probability is kept, drawn or not, so figures estimated from the verdicts stay unbiased; the latest
    round is the design they use. Run it again after a review session for the next round.

    With --from-logs, each logged query no earlier round considered weighs by its failure signals (thumbs down,
    cited sources not clicked, a low rating, a low top retrieval score, nothing retrieved) times how often it was
    asked, near-duplicates folded into one; the same draw picks about --limit of them, each with its probability
    and reasons recorded.

    Example: `testset-builder select --budget 50 --workspace testset`; reviewers then grade the drawn pairs in
    `serve` or `review`. From logs: `testset-builder select --from-logs --limit 200 --workspace testset`.
    """
    from .. import api

    resolved = settings(config, workspace)
    if from_logs and (limit is None or budget is not None):
        raise InputError("--from-logs draws --limit logged queries (and takes no --budget)")
    if not from_logs and (budget is None or limit is not None):
        raise InputError("give --budget (pairs to draw for review); --limit goes with --from-logs")
    with open_workspace_for(resolved) as ws:
        summary = api.select(
            resolved, limit if from_logs else budget, from_logs=from_logs, uniform_share=uniform_share, seed=seed,
            take_all_share=take_all_share, take_all_per_query=take_all_per_query, workspace=ws,
        )  # fmt: skip
    if json_output:
        print(json.dumps(summary.as_dict(), indent=2))
        return
    if from_logs:
        _print_logged(summary, limit)
        return
    for line in selection_lines(summary, budget):
        out.print(line, highlight=False)


def selection_lines(summary, budget: int) -> list[str]:
    """What `select` prints: the round, how the budget split, and why."""
    smallest = "n/a" if summary.smallest_probability is None else f"{summary.smallest_probability:.4f}"
    again = (
        f" ({summary.reconsidered} considered by an earlier round, estimated anew since)"
        if summary.reconsidered
        else ""
    )
    lines = [
        f"round {summary.round}: {summary.drawn} of {summary.considered} pending pairs for review{again} "
        f"(budget {budget}) using {summary.model}; they head the review queue",
        f"  taken for sure: {summary.take_all} likely relevant pairs of {summary.take_all_queries} real queries "
        f"(at most {summary.take_all_per_query} a query, {summary.take_all_share:.0%} of the budget); "
        f"{summary.real_queries_without_likely} real queries have no likely pair",
        f"  drawn at random: {summary.sampled} (budget {summary.sample_budget:g}, {summary.uniform_share:.0%} spread "
        f"evenly; smallest probability {smallest})",
        f"  why: {summary.why}",
    ]
    if summary.over_budget():
        lines.append(f"  {summary.over_budget()}")
    if summary.furniture_pairs:
        lines.append(
            f"  {summary.furniture_pairs} pending pairs name a chunk marked boilerplate: never taken for sure, "
            "drawn only with the even share"
        )
    if summary.doubted_questions_waiting:
        lines.append(
            f"  {summary.doubted_questions_waiting} doubted synthetic questions wait in the queue too, each queued "
            "for sure, outside the budget (`serve` shows them; `queue --questions` lists them)"
        )
    return lines


def _print_logged(summary, limit: int) -> None:
    out.print(
        f"round {summary.round}: drew {summary.drawn} of {summary.considered} logged queries ({summary.collapsed} "
        f"near-duplicates folded in; limit {limit}), likely failures first; propose them with "
        "`testset-builder propose --from-logs`",
        highlight=False,
    )
    for drawn in summary.drawn_queries[:10]:
        why = "; ".join(drawn["reasons"]) or "no failure signal (the even share)"
        out.print(f"  {escape(drawn['text'][:70])}  [{drawn['probability']:.3f}: {escape(why)}]", highlight=False)


@app.command()
def queue(
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="How many items to show.")] = 20,
    questions: Annotated[
        bool,
        typer.Option("--questions", help="List the synthetic questions (style, source chunk, review status) instead."),
    ] = False,
    full: Annotated[
        bool, typer.Option("--full", help="Show whole query and chunk texts, not the first words.")
    ] = False,
    json_output: JsonOption = False,
) -> None:
    """The review queue, highest priority first: the LLM proposals a reviewer should look at next.

    Priority is P(relevant) + uncertainty of the judge's grade (audit disagreements first), so the likely relevant
    and uncertain come before the confidently irrelevant; pairs drawn by `select` come before all but audit
    disagreements. P(rel) is the judge's, estimate the tool's (`estimate`). Review them with `serve` (web) or
    `review` (terminal).

    Example: `testset-builder queue --workspace testset --limit 10`.
    """
    from rich.table import Table

    from .. import api

    resolved = settings(config, workspace)
    width = None if full else 60
    listed = api.queue(resolved, limit=limit, questions=questions, full=full)
    if questions:
        return _list_questions(listed, full, json_output)
    items, total = listed.items, listed.total
    if json_output:
        print(json.dumps({"total": total, "items": items}, indent=2, ensure_ascii=False))
        return
    table = Table(title=f"review queue: {len(items)} of {total}, highest priority first", title_justify="left")
    for column in ("priority", "query", "chunk", "grade", "P(rel)", "estimate"):
        table.add_column(column, justify="left" if column in ("query", "chunk") else "right")
    for item in items:
        p_rel = "?" if item["p_relevant"] is None else f"{item['p_relevant']:.2f}"
        p_est = "?" if item["estimate"] is None else f"{item['estimate']:.2f}"
        chunk = f"{item['chunk_id']}: {' '.join(item['chunk'].split())[:width]}"
        table.add_row(
            f"{item['priority']:.3f}", escape(item["query"][:width]), escape(chunk), str(item["grade"]), p_rel, p_est
        )
    out.print(table)


def _list_questions(result, full: bool, json_output: bool) -> None:
    from rich.table import Table

    listed = result.questions
    if json_output:
        print(json.dumps(result.as_dict(), indent=2, ensure_ascii=False))
        return
    table = Table(title=f"synthetic questions: {len(listed)}", title_justify="left")
    for column in ("question", "style", "source chunk", "status"):
        table.add_column(column)
    for q in listed:
        text = q["text"] if full else q["text"][:80]
        table.add_row(escape(text), q["style"] or "", escape(q["source_chunk_id"] or ""), q["status"])
    out.print(table)


@app.command()
def costs(
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    json_output: JsonOption = False,
) -> None:
    """What the LLM calls recorded in a workspace cost, by stage, provider and model (from the llm_calls ledger).

    Example: `testset-builder costs --workspace testset`.
    """
    from rich.table import Table

    from .. import api

    resolved = settings(config, workspace)
    with open_workspace_for(resolved, readonly=True) as ws:
        rows = api.costs(resolved, workspace=ws).rows
    if json_output:
        print(json.dumps(rows, indent=2))
        return
    table = Table(title=f"LLM costs in {resolved.workspace}", title_justify="left")
    for column in ("stage", "model", "calls", "failed", "attempts", "input tok", "output tok", "cost USD"):
        table.add_column(column, justify="left" if column in ("stage", "model") else "right")
    for row in rows:
        cost = f"{row['cost_usd']:.4f}" + (f" (+{row['unpriced_calls']} unpriced)" if row["unpriced_calls"] else "")
        table.add_row(
            row["stage"], row["model"], str(row["calls"]), str(row["failed"]), str(row["attempts"]),
            str(row["input_tokens"]), str(row["output_tokens"]), cost,
        )  # fmt: skip
    out.print(table)
    total = sum(r["cost_usd"] for r in rows)
    out.print(f"total ${total:.4f} over {sum(r['calls'] for r in rows)} answered calls")


@app.command()
def resume(
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    forget_interrupted: Annotated[
        bool,
        typer.Option(
            "--forget-interrupted",
            help="Forget batch submissions that were interrupted before their id was recorded (check first that "
            "the provider has none of them), so the requests can be submitted again.",
        ),
    ] = False,
    json_output: JsonOption = False,
) -> None:
    """Poll the batches submitted with --batch and cache the answers of those that ended.

    Then rerun the command that submitted them: it goes on from the cache without new calls.

    Example: `testset-builder resume --config my-set/testset-builder.yaml`, then the command you gave --batch again.
    """
    from .. import api

    resolved = settings(config, workspace)
    with open_workspace_for(resolved) as ws:
        counts = api.resume(resolved, forget_interrupted=forget_interrupted, workspace=ws).as_dict()
    if json_output:
        print(json.dumps(counts))
        return
    forgotten = f"; {counts['forgotten']} interrupted submissions forgotten" if counts["forgotten"] else ""
    out.print(
        f"{counts['ended']} batches ended ({counts['answered']} answers cached, {counts['failed']} failed); "
        f"{counts['running']} still running{forgotten}"
    )
