"""The ``testset-builder`` command. Thin: parse options, call the library, print.

Exit codes scripts can trust: 0 success, 1 bad input (a one-line message names the file, line or value),
2 internal error (a bug: the message says how to get the traceback), 3 finished but some items failed or were
left for lack of budget (what was done is kept; rerun to retry the rest).
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

from . import __version__
from .errors import TestsetBuilderError

EXIT_OK, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_PARTIAL = 0, 1, 2, 3

app = typer.Typer(
    name="testset-builder",
    help="Build retrieval test sets you can trust, and score retrievers against them.\n\n"
    "Chunk a corpus:  testset-builder chunk docs/ --workspace testset\n\n"
    "Label real queries:  testset-builder propose --queries queries.txt --workspace testset\n\n"
    "Score a run:   testset-builder score --qrels qrels.tsv --run run.trec\n\n"
    "Compare runs:  testset-builder compare --qrels qrels.tsv bm25.trec dense.trec",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
# piped output (CI logs, files) gets room for the comparison table instead of rich's 80-column default
out = Console(width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)

DEFAULT_METRICS = "recall@10,precision@10,mrr,ndcg@10,hit_rate@5,map"
METRICS_HELP = (
    "Comma-separated metrics: recall@k, precision@k, mrr, ndcg@k (linear gain), ndcg_exp@k (2^g-1 gain), "
    "hit_rate@k, map, r_precision. A bare name (recall, mrr, ndcg, map) means the whole ranked list; "
    "trec_eval spellings (P_10, ndcg_cut_10) are accepted."
)
QRELS_HELP = "Relevance labels: TREC qrels (qid 0 docid grade), BEIR TSV (query-id corpus-id score header) or JSONL."

QrelsOption = Annotated[Path, typer.Option("--qrels", "-q", help=QRELS_HELP, show_default=False)]
OptionalQrelsOption = Annotated[Optional[Path], typer.Option("--qrels", "-q", help=QRELS_HELP + " Or use --release.", show_default=False)]
ReleaseOption = Annotated[
    Optional[str],
    typer.Option("--release", help="Score against a release instead of --qrels: WORKSPACE@VERSION (testset@1.0.0) or a release directory.", show_default=False),
]


def _labels(qrels: Path | None, release: str | None):
    """The qrels to score against: a file, or a release's (its files checked against their manifest hashes)."""
    from .errors import InputError
    from .export import read_qrels

    if (qrels is None) == (release is None):
        raise InputError("give exactly one of --qrels FILE or --release WORKSPACE@VERSION")
    if qrels is not None:
        return read_qrels(qrels)
    return _release(release)[0].qrels_table()
MetricsOption = Annotated[str, typer.Option("--metrics", "-m", help=METRICS_HELP)]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout instead of tables.")]
PerQueryOption = Annotated[
    Optional[Path], typer.Option("--per-query", help="Also write per-query values to this CSV file.", show_default=False)
]
SeedOption = Annotated[int, typer.Option("--seed", help="Seed for bootstrap and randomization resampling.")]


def _version(value: bool) -> None:
    if value:
        out.print(f"testset-builder {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Build retrieval test sets you can trust, and score retrievers against them."""


@app.command()
def score(
    run: Annotated[
        list[Path],
        typer.Option("--run", "-r", help="A run: TREC (qid Q0 docid rank score tag) or JSONL. Repeat for several.", show_default=False),
    ],
    qrels: OptionalQrelsOption = None,
    release: ReleaseOption = None,
    metrics: MetricsOption = DEFAULT_METRICS,
    json_output: JsonOption = False,
    per_query: PerQueryOption = None,
    ci: Annotated[bool, typer.Option("--ci/--no-ci", help="Bootstrap 95% confidence intervals over queries.")] = True,
    resamples: Annotated[int, typer.Option("--resamples", min=100, help="Bootstrap resamples for the intervals.")] = 1000,
    seed: SeedOption = 0,
) -> None:
    """Score runs against qrels with trec_eval's conventions.

    Every query of the qrels counts: a query the run missed scores 0, and run queries the qrels lack are dropped;
    the summary line says how many of each.
    """
    from .export import read_run
    from .metrics import evaluate, parse_metrics
    from .metrics.report import queries_line, score_dict, score_table, write_per_query_csv

    specs = parse_metrics(metrics)
    labels = _labels(qrels, release)
    evaluations = [evaluate(labels, read_run(path), specs) for path in run]
    reports = [score_dict(e, ci=ci, resamples=resamples, seed=seed) for e in evaluations]
    if per_query:
        write_per_query_csv(evaluations, per_query)
    if json_output:
        print(json.dumps(reports[0] if len(reports) == 1 else reports, indent=2))
        return
    for report in reports:
        out.print(score_table(report))
    out.print(queries_line(reports[0]["queries"]))
    if per_query:
        out.print(f"per-query values written to {per_query}")


@app.command()
def compare(
    runs: Annotated[
        list[Path],
        typer.Argument(help="Two or more runs; the first is the baseline each other run is compared with.", show_default=False),
    ],
    qrels: OptionalQrelsOption = None,
    release: ReleaseOption = None,
    metrics: MetricsOption = "ndcg@10,recall@10",
    test: Annotated[
        str, typer.Option("--test", help="Significance test that decides 'significant': randomization or t.")
    ] = "randomization",
    alpha: Annotated[float, typer.Option("--alpha", min=0.0, max=1.0, help="Family-wise significance level.")] = 0.05,
    resamples: Annotated[int, typer.Option("--resamples", min=100, help="Randomization-test permutations.")] = 10_000,
    json_output: JsonOption = False,
    per_query: PerQueryOption = None,
    seed: SeedOption = 0,
) -> None:
    """Compare runs on the same qrels: paired differences, 95% bootstrap intervals, t and randomization tests.

    p-values are Holm-corrected over every (run, metric) test shown, so 'significant' controls the family-wise
    error at --alpha.
    """
    from .errors import InputError
    from .export import read_run
    from .metrics import evaluate, parse_metrics
    from .metrics.compare import compare as compare_runs
    from .metrics.report import comparison_table, queries_line, write_per_query_csv

    if len(runs) < 2:
        raise InputError("compare needs at least two runs (the first is the baseline)")
    specs = parse_metrics(metrics)
    labels = _labels(qrels, release)
    evaluations = [evaluate(labels, read_run(path), specs) for path in runs]
    names = [e.run_name for e in evaluations]
    if len(set(names)) < len(names):
        evaluations = [_renamed(e, path.stem) for e, path in zip(evaluations, runs)]
    result = compare_runs(evaluations[0], evaluations[1:], test=test, alpha=alpha, resamples=resamples, seed=seed)
    if per_query:
        write_per_query_csv(evaluations, per_query)
    if json_output:
        print(json.dumps(result.as_dict(), indent=2))
        return
    out.print(comparison_table(result))
    out.print(queries_line(evaluations[0].summary.as_dict()))


@app.command()
def chunk(
    sources: Annotated[list[Path], typer.Argument(help="Folders, files, globs, .jsonl or .parquet files, or BEIR folders (with corpus.jsonl).", show_default=False)],
    workspace: Annotated[Optional[Path], typer.Option("--workspace", "-w", help="The workspace directory (created if missing; default testset).", show_default=False)] = None,
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="A config whose `chunking:` section gives the defaults below.", show_default=False)] = None,
    chunker: Annotated[
        Optional[str],
        typer.Option("--chunker", help="recursive (default), sentence, markdown (sizes in characters), tokens (cl100k tokens), or prechunked (each record is a chunk and keeps its id).", show_default=False),
    ] = None,
    size: Annotated[Optional[int], typer.Option("--size", min=1, help="Largest chunk: characters, or tokens for --chunker tokens (default 1000).", show_default=False)] = None,
    overlap: Annotated[Optional[int], typer.Option("--overlap", min=0, help="Text repeated between neighbouring chunks, same unit as --size (default 100).", show_default=False)] = None,
    id_field: Annotated[Optional[str], typer.Option("--id-field", help="JSONL/dataset field holding the document id (default _id).", show_default=False)] = None,
    text_field: Annotated[Optional[str], typer.Option("--text-field", help="JSONL/dataset field holding the text (default text).", show_default=False)] = None,
    title_field: Annotated[Optional[str], typer.Option("--title-field", help="JSONL/dataset field holding the title (default title).", show_default=False)] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Stop at the first unreadable file or line instead of skipping it.")] = False,
    json_output: JsonOption = False,
) -> None:
    """Load a corpus and chunk it into the workspace, incrementally.

    Unchanged documents are skipped on a rerun; changed ones are re-chunked (their old chunks are marked removed, not
    deleted); documents gone from the sources are marked removed. Unreadable files and lines are reported with file
    and line and skipped (or fatal with --strict).
    """
    from rich.progress import Progress

    from .corpus.chunkers import ChunkerConfig
    from .corpus.ingest import ingest
    from .corpus.loaders import load_sources
    from .errors import InputError
    from .store import open_workspace

    from .config import ChunkingConfig, load_config

    settings = load_config(config) if config else None
    defaults = settings.chunking if settings else ChunkingConfig()
    workspace = workspace or (settings.workspace if settings else Path("testset"))
    chunker, size, overlap = chunker or defaults.chunker, size or defaults.size, defaults.overlap if overlap is None else overlap
    if chunker not in ("recursive", "sentence", "markdown", "tokens", "prechunked"):
        raise InputError(f"unknown chunker {chunker!r}; use recursive, sentence, markdown, tokens or prechunked")
    if chunker != "prechunked" and overlap >= size:
        raise InputError(f"--overlap ({overlap}) must be smaller than --size ({size})")
    chunker_config = ChunkerConfig(chunker, size, overlap)
    loaded = load_sources(
        sources, strict=strict, id_field=id_field or defaults.id_field, text_field=text_field or defaults.text_field, title_field=title_field or defaults.title_field
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


@app.command()
def costs(
    workspace: Annotated[Path, typer.Option("--workspace", "-w", help="The workspace directory.")] = Path("testset"),
    json_output: JsonOption = False,
) -> None:
    """What the LLM calls recorded in a workspace cost, by stage and model (from the llm_calls ledger)."""
    from rich.table import Table

    from .llm.ledger import cost_summary
    from .store import open_workspace

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
        table.add_row(row["stage"], row["model"], str(row["calls"]), str(row["failed"]), str(row["attempts"]), str(row["input_tokens"]), str(row["output_tokens"]), cost)
    out.print(table)
    total = sum(r["cost_usd"] for r in rows)
    out.print(f"total ${total:.4f} over {sum(r['calls'] for r in rows)} answered calls")


@app.command()
def resume(
    workspace: Annotated[Path, typer.Option("--workspace", "-w", help="The workspace directory.")] = Path("testset"),
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="Config naming the provider (default: from the environment).")] = None,
    json_output: JsonOption = False,
) -> None:
    """Poll the batches submitted with --batch; ended ones land in the response cache, so rerunning the stage
    that submitted them completes it without new calls."""
    import asyncio

    from .config import default_config, load_config, make_client
    from .store import open_workspace

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


WorkspaceOption = Annotated[Path, typer.Option("--workspace", "-w", help="The workspace directory (made by `chunk`).")]
ConfigOption = Annotated[
    Optional[Path],
    typer.Option("--config", "-c", help="Config naming the LLM provider and limits (default: OpenAI if OPENAI_API_KEY is set, else Anthropic if ANTHROPIC_API_KEY is, else the embedded local model).", show_default=False),
]
MaxCostOption = Annotated[
    Optional[float], typer.Option("--max-cost-usd", min=0.0, help="Stop before LLM spending could pass this (overrides the config).", show_default=False)
]
BatchOption = Annotated[
    bool, typer.Option("--batch", help="Submit the LLM calls through the provider's batch API (half price, hours); `resume` collects them, then rerun this command.")
]
QueriesOption = Annotated[Path, typer.Option("--queries", "-Q", help="Real queries: JSONL, CSV/TSV with a header, or one query per line.", show_default=False)]
IdFieldOption = Annotated[Optional[str], typer.Option("--id-field", help="Field or column holding the query id (default: _id, id, query_id or qid; else derived from the text).", show_default=False)]
TextFieldOption = Annotated[Optional[str], typer.Option("--text-field", help="Field or column holding the query text (default: text, query or question).", show_default=False)]
LOCAL_JUDGE_WARNING = (
    "[yellow]note:[/] the embedded local model (Gemma 3 270M, a base model) is a placeholder judge: its grades are "
    "barely better than chance (benchmarks/judge_agreement.py measures it). Use a frontier model (configs/openai.yaml, "
    "configs/anthropic.yaml) for labels you will trust."
)


def _llm_settings(config: Path | None, max_cost_usd: float | None):
    from .config import default_config, load_config

    settings = load_config(config) if config else default_config()
    if max_cost_usd is not None:
        limits = settings.llm.limits.model_copy(update={"max_cost_usd": max_cost_usd})
        settings = settings.model_copy(update={"llm": settings.llm.model_copy(update={"limits": limits})})
    return settings


def _judging_lines(judging) -> list[str]:
    grades = judging.grades
    lines = [
        f"judgments: {judging.judged} new, {judging.already_judged} already made, {judging.failed} failed"
        + (f", {judging.not_judged_budget} left for lack of budget" if judging.not_judged_budget else "")
        + f"; grades 0: {grades[0]}, 1: {grades[1]}, 2: {grades[2]}; {judging.queued} newly queued for review",
        f"LLM: {judging.calls} calls ({judging.cache_hits} from the cache), {judging.input_tokens} input and "
        f"{judging.output_tokens} output tokens, ${judging.cost_usd:.4f}",
    ]
    if judging.batch_id:
        lines.append(f"batch {judging.batch_id} submitted: run `testset-builder resume` until it ends, then rerun this command")
    lines.extend(f"[yellow]failed[/] {escape(f)}" for f in judging.failures[:5])
    return lines


def _exit_for(judging) -> None:
    if judging.failed or judging.not_judged_budget:
        raise typer.Exit(EXIT_PARTIAL)


@app.command()
def propose(
    queries: QueriesOption,
    workspace: WorkspaceOption = Path("testset"),
    config: ConfigOption = None,
    id_field: IdFieldOption = None,
    text_field: TextFieldOption = None,
    retrievers: Annotated[str, typer.Option("--retrievers", help="auto (BM25, plus dense when the dense extra is installed), bm25, dense, or bm25,dense.")] = "auto",
    depth: Annotated[int, typer.Option("--depth", min=1, help="Each retriever's top k in the pool.")] = 20,
    fused_depth: Annotated[Optional[int], typer.Option("--fused-depth", min=1, help="The RRF fusion's top k in the pool, with two or more retrievers (default: --depth).", show_default=False)] = None,
    judge: Annotated[bool, typer.Option("--judge/--no-judge", help="Grade the pool with the LLM judge, or only pool.")] = True,
    max_cost_usd: MaxCostOption = None,
    batch: BatchOption = False,
    strict: Annotated[bool, typer.Option("--strict", help="Stop at the first unreadable line of the queries file instead of skipping it.")] = False,
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

    from .config import make_client
    from .llm.progress import llm_progress
    from .stages.judge import Judge
    from .stages.propose import PoolSettings, propose as run_propose
    from .stages.queries import read_queries
    from .store import open_workspace

    query_file = read_queries(queries, id_field=id_field, text_field=text_field, strict=strict)
    names = retrievers if retrievers == "auto" else tuple(n.strip() for n in retrievers.split(",") if n.strip())
    pool_settings = PoolSettings(retrievers=names, depth=depth, fused_depth=fused_depth)
    settings = _llm_settings(config, max_cost_usd) if judge else None
    with open_workspace(workspace, create=False) as ws:

        async def go():
            if settings is None:
                return await run_propose(ws, query_file, None, pool_settings), False
            async with make_client(settings.llm, ws, "propose") as client:
                the_judge = Judge(client, settings.llm.provider.model)
                with llm_progress(err) if not json_output else nullcontext() as progress:
                    return await run_propose(ws, query_file, the_judge, pool_settings, batch=batch, progress=progress), the_judge.is_local

        summary, local_judge = asyncio.run(go())
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
def synthesize(
    workspace: WorkspaceOption = Path("testset"),
    config: ConfigOption = None,
    questions: Annotated[Optional[int], typer.Option("--questions", "-n", min=1, help="Questions to make: exactly this many, or a statement of why fewer (default: the config's, 100).", show_default=False)] = None,
    per_chunk: Annotated[Optional[int], typer.Option("--per-chunk", min=1, help="Questions asked of each sampled chunk (default 1).", show_default=False)] = None,
    styles: Annotated[Optional[str], typer.Option("--styles", help="Style shares, e.g. natural=0.4,keyword=0.2,paraphrase=0.2,multi=0.2 (multi: two related chunks, both labelled).", show_default=False)] = None,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Seed for sampling and generation (default 0); another seed makes another set.", show_default=False)] = None,
    critic: Annotated[Optional[bool], typer.Option("--critic/--no-critic", help="The judge checks that the source chunk answers each question (default on).", show_default=False)] = None,
    round_trip: Annotated[Optional[int], typer.Option("--round-trip", min=1, help="Keep a question only if BM25 ranks its source in the top K. Biases the set toward BM25: off by default.", show_default=False)] = None,
    mine: Annotated[Optional[bool], typer.Option("--mine/--no-mine", help="Judge each question's top other chunks and queue the relevant ones for review (default on).", show_default=False)] = None,
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
    import asyncio

    from pydantic import ValidationError

    from .config import make_client
    from .errors import InputError
    from .llm.progress import llm_progress
    from .stages.synthesize import synthesize as run_synthesize
    from .store import open_workspace

    settings = _llm_settings(config, max_cost_usd)
    overrides = {k: v for k, v in {"questions": questions, "per_chunk": per_chunk, "seed": seed, "critic": critic, "round_trip_k": round_trip, "mine": mine}.items() if v is not None}
    if styles:
        try:
            overrides["styles"] = {name.strip(): float(share) for name, share in (part.split("=") for part in styles.split(","))}
        except ValueError:
            raise InputError(f"--styles wants name=share pairs separated by commas, not {styles!r}") from None
    try:
        synth = settings.synthesize.model_validate({**settings.synthesize.model_dump(), **overrides})
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())
        raise InputError(f"invalid synthesize settings: {problems}") from None
    with open_workspace(workspace, create=False) as ws:

        async def go():
            async with make_client(settings.llm, ws, "synthesize") as client:
                with llm_progress(err) if not json_output else nullcontext() as progress:
                    summary = await run_synthesize(ws, client, settings.llm.provider.model, synth, progress=progress, batch=batch)
                return summary, client.provider.identity.startswith("local:")

        summary, local_model = asyncio.run(go())
    if json_output:
        print(json.dumps(summary.as_dict(), indent=2))
    elif summary.batch_id and summary.made + summary.already_made == 0:
        out.print(f"waiting for batch {summary.batch_id} ({summary.batch_step}): run `testset-builder resume`, then this command again", highlight=False)
        return
    else:
        styles_made = ", ".join(f"{n} {s} (overlap {summary.mean_overlap.get(s, 0):.2f})" for s, n in sorted(summary.styles.items()))
        removed = ", ".join(f"{n} by {name.replace('_', ' ')}" for name, n in summary.removed.items())
        skipped = ", ".join(f"{n} {reason}" for reason, n in sorted(summary.chunks_skipped.items())) or "none"
        lines = [
            f"{summary.made + summary.already_made} of {summary.requested} questions ({summary.made} new, {summary.already_made} already made): {styles_made or 'none'}",
            f"chunks: {summary.chunks_eligible} eligible (skipped: {skipped}); {summary.chunks_sampled} sampled from {summary.documents_covered} documents in {summary.rounds} rounds",
            f"generated {summary.generated} ({summary.generation_failed} failed); removed {removed}; {summary.surplus} surplus dropped",
            f"labels: {summary.source_labels} source chunks and {summary.twin_labels} duplicate twins, grade 2",
        ]
        if synth.mine:
            lines.append(
                f"mining: {summary.mining.pairs} other chunks judged ({summary.mining.already_judged} before), {summary.mining.queued} judged relevant and newly queued for review; "
                f"{summary.questions_with_extra_relevant} questions gained extra relevant chunks"
            )
        lines.append(f"LLM: {summary.calls} calls ({summary.cache_hits} from the cache), {summary.input_tokens} input and {summary.output_tokens} output tokens, ${summary.cost_usd:.4f}; {summary.seconds:.1f} s -> {workspace}")
        for line in lines:
            out.print(line, highlight=False)
        if summary.shortfall:
            err.print(f"[yellow]fewer than asked:[/] {escape(summary.shortfall)}")
        if local_model:
            err.print(LOCAL_JUDGE_WARNING)
    if summary.batch_id:
        if not json_output:
            out.print(f"waiting for batch {summary.batch_id} ({summary.batch_step}): run `testset-builder resume`, then this command again", highlight=False)
        return
    if summary.shortfall or summary.generation_failed or summary.mining.failed or summary.mining.not_judged_budget:
        raise typer.Exit(EXIT_PARTIAL)


@app.command()
def audit(
    qrels: QrelsOption,
    queries: QueriesOption,
    workspace: WorkspaceOption = Path("testset"),
    config: ConfigOption = None,
    id_field: IdFieldOption = None,
    text_field: TextFieldOption = None,
    out_file: Annotated[Optional[Path], typer.Option("--out", help="Write the disagreements to this TSV file.", show_default=False)] = None,
    max_cost_usd: MaxCostOption = None,
    json_output: JsonOption = False,
) -> None:
    """Audit an existing labelled set: the LLM judge grades every labelled pair and the disagreements are listed.

    The qrels' document ids must be chunk ids of the workspace (chunk a BEIR corpus with --chunker prechunked to
    keep its ids). A disagreement is a pair the labels call relevant (grade >= 1) and the judge does not, or the
    reverse; they head the review queue. Reports agreement and Cohen's kappa.
    """
    import asyncio
    import csv

    from .config import make_client
    from .export import read_qrels
    from .llm.progress import llm_progress
    from .stages.judge import Judge
    from .stages.propose import audit as run_audit
    from .stages.queries import read_queries

    from .store import open_workspace

    labels = read_qrels(qrels)
    query_file = read_queries(queries, id_field=id_field, text_field=text_field)
    settings = _llm_settings(config, max_cost_usd)
    with open_workspace(workspace, create=False) as ws:

        async def go():
            async with make_client(settings.llm, ws, "audit") as client:
                the_judge = Judge(client, settings.llm.provider.model)
                with llm_progress(err) if not json_output else nullcontext() as progress:
                    return await run_audit(ws, labels, query_file, the_judge, progress=progress), the_judge.is_local

        summary, local_judge = asyncio.run(go())
    if out_file:
        with out_file.open("w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
            writer.writerow(["query-id", "corpus-id", "label", "judge", "confidence", "rationale"])
            for d in summary.disagreements:
                writer.writerow([d["query_id"], d["chunk_id"], d["label"], d["judge"], "" if d["confidence"] is None else f"{d['confidence']:.3f}", d["rationale"] or ""])
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


VersionArgument = Annotated[str, typer.Argument(help="A released version (1.0.0), or latest.", show_default=False)]


@app.command()
def baseline(
    release: Annotated[str, typer.Option("--release", help="WORKSPACE@VERSION (VERSION may be latest) or a release directory.", show_default=False)],
    out_file: Annotated[Path, typer.Option("--out", "-o", help="Write the run here (TREC format).", show_default=False)],
    retriever: Annotated[str, typer.Option("--retriever", help="bm25, or dense (with the dense extra).")] = "bm25",
    k: Annotated[int, typer.Option("--k", min=1, help="Results per query.")] = 100,
) -> None:
    """A baseline run over a release's own corpus and queries, ready for `score --release`."""
    from .export import write_trec_run
    from .retrieval.baseline import baseline_run

    loaded, cache = _release(release)
    run = baseline_run(loaded.corpus, loaded.queries, retriever, k, cache)
    write_trec_run(run, out_file)
    out.print(f"{retriever} run over {len(loaded.corpus)} chunks for {len(loaded.queries)} queries of release {loaded.version} -> {out_file}")


@app.command("import")
def import_set(
    source: Annotated[Path, typer.Argument(help="A BEIR folder, an MTEB-layout dataset directory (e.g. a release), or a TREC/BEIR qrels file.", show_default=False)],
    workspace: WorkspaceOption = Path("testset"),
    queries: Annotated[Optional[Path], typer.Option("--queries", "-Q", help="Query texts, for a qrels file (JSONL, CSV or one per line).", show_default=False)] = None,
    version: Annotated[Optional[str], typer.Option("--version", "-v", help="Also release the imported state as this version.", show_default=False)] = None,
    json_output: JsonOption = False,
) -> None:
    """Import an existing labelled set into a workspace (labels become human verdicts), to extend it.

    Documents become one chunk each and keep their ids; a qrels file needs the chunks in the workspace already
    (chunk the corpus with --chunker prechunked) and --queries. With --version the imported state is released.
    """
    from .stages.importer import import_labelled_set
    from .stages.release import write_release
    from .store import open_workspace

    with open_workspace(workspace) as ws:
        summary = import_labelled_set(ws, source, queries)
        released = write_release(ws, version, notes=f"imported from {source}") if version else None
    if json_output:
        print(json.dumps({**summary.as_dict(), "release": released.as_dict() if released else None}, indent=2))
        return
    out.print(
        f"imported {summary.kind} {source}: {summary.documents} documents, {summary.queries} queries ({summary.new_queries} new), "
        f"{summary.labels} labels ({summary.new_labels} new, {summary.clamped_grades} grades clamped to 0-2) -> {workspace}",
        highlight=False,
    )
    if released:
        out.print(f"released {released.version} -> {released.path}", highlight=False)


def _release(spec: str):
    """A release from WORKSPACE@VERSION or a directory, and where its indexes may be cached."""
    from .stages.release import load_release, release_dir

    if "@" in spec and not Path(spec).exists():
        root, version = spec.rsplit("@", 1)
        return load_release(release_dir(root, version)), Path(root) / "indexes"
    return load_release(spec), None


@app.command()
def release(
    version: Annotated[Optional[str], typer.Option("--version", "-v", help="The new version, semantic (1.0.0); an existing version is refused.", show_default=False)] = None,
    bump: Annotated[Optional[str], typer.Option("--bump", help="Instead of --version: raise the latest release's major, minor or patch number.", show_default=False)] = None,
    workspace: WorkspaceOption = Path("testset"),
    include_unverified: Annotated[bool, typer.Option("--include-unverified", help="Also release LLM proposals no human has verified (marked llm-unverified).")] = False,
    adjudicator: Annotated[Optional[str], typer.Option("--adjudicator", help="Reviewer whose verdict breaks a tie between reviewers.", show_default=False)] = None,
    parent: Annotated[Optional[str], typer.Option("--parent", help="Parent version (default: the highest lower version).", show_default=False)] = None,
    notes: Annotated[str, typer.Option("--notes", help="Release notes, kept in the manifest.")] = "",
    name: Annotated[Optional[str], typer.Option("--name", help="The set's name in the dataset card (default: the workspace's directory name).", show_default=False)] = None,
    license_id: Annotated[str, typer.Option("--license", help="License identifier for the dataset card (the corpus's license decides it).")] = "other",
    json_output: JsonOption = False,
) -> None:
    """Resolve the judgments into qrels and write an immutable, versioned release.

    releases/VERSION/ holds the Hugging Face layout (hf/: corpus, queries, default = qrels), BEIR files, TREC
    qrels, manifest.json (file hashes, counts, lineage, policy) and a dataset card (README.md).

    Policy: a human verdict wins (reviewers' majority; ties to --adjudicator); synthetic source chunks are grade 2;
    unverified LLM proposals are left out unless --include-unverified. The same workspace state always gives the
    same bytes and content hash; a release whose content equals its parent's says so.
    """
    from .errors import InputError
    from .stages.release import ReleasePolicy, existing_versions, next_version, write_release
    from .store import open_workspace

    if (version is None) == (bump is None):
        raise InputError("give exactly one of --version X.Y.Z or --bump major|minor|patch")
    policy = ReleasePolicy(include_unverified=include_unverified, adjudicator=adjudicator)
    with open_workspace(workspace, create=False) as ws:
        version = version or next_version(existing_versions(ws), bump)
        summary = write_release(ws, version, policy, notes=notes, parent=parent, name=name, license_id=license_id)
    if json_output:
        print(json.dumps(summary.as_dict(), indent=2))
        return
    counts = summary.counts
    origins = ", ".join(f"{n} {o}" for o, n in counts["qrels_by_origin"].items() if n)
    out.print(
        f"released {summary.version} -> {summary.path}: {counts['corpus']} chunks, {counts['queries']} queries, {counts['qrels']} qrels ({origins}); "
        f"content sha256 {summary.content_sha256[:16]}; parent {summary.parent_version or 'none'}",
        highlight=False,
    )
    if summary.same_as_parent:
        out.print(f"[yellow]note:[/] the content equals its parent {summary.parent_version}'s: nothing changed since then")


@app.command()
def diff(
    old: VersionArgument,
    new: VersionArgument,
    workspace: WorkspaceOption = Path("testset"),
    json_output: JsonOption = False,
) -> None:
    """What changed between two releases: queries and qrels added, removed and regraded."""
    from .stages.release import diff_releases, load_release, release_dir

    result = diff_releases(load_release(release_dir(workspace, old)), load_release(release_dir(workspace, new)))
    if json_output:
        print(json.dumps(result.as_dict(), indent=2))
        return
    if result.unchanged:
        out.print(f"{old} -> {new}: no change")
        return
    out.print(
        f"{old} -> {new}: queries +{len(result.queries_added)} -{len(result.queries_removed)} ~{len(result.queries_changed)} (text changed); "
        f"qrels +{len(result.qrels_added)} -{len(result.qrels_removed)}, {len(result.qrels_regraded)} regraded; "
        f"corpus +{result.corpus_added} -{result.corpus_removed}"
    )
    for query_id, chunk_id, before, after in result.qrels_regraded[:20]:
        out.print(f"  regraded {query_id} {chunk_id}: {before} -> {after}", highlight=False)


@app.command("export")
def export_release(
    version: Annotated[str, typer.Option("--version", "-v", help="The release to export.", show_default=False)],
    out_dir: Annotated[Path, typer.Option("--out", "-o", help="Directory to write (created; must be empty if it exists).", show_default=False)],
    fmt: Annotated[str, typer.Option("--format", "-f", help="hf (parquet + dataset card), beir, trec (qrels.trec), or jsonl (qrels, queries, corpus as JSONL).")] = "hf",
    workspace: WorkspaceOption = Path("testset"),
) -> None:
    """Copy a release out in one format (the release itself stays as it is)."""
    from .errors import InputError
    from .stages.release import export as run_export, load_release, release_dir

    if fmt not in ("hf", "beir", "trec", "jsonl"):
        raise InputError(f"unknown format {fmt!r}; use hf, beir, trec or jsonl")
    written = run_export(load_release(release_dir(workspace, version)), fmt, out_dir)
    out.print(f"exported {version} as {fmt}: {len(written)} files -> {out_dir}")


@app.command()
def push(
    version: Annotated[str, typer.Option("--version", "-v", help="The release to push.", show_default=False)],
    repo_id: Annotated[str, typer.Option("--repo-id", help="The dataset repository on the Hugging Face hub: ORG/NAME.", show_default=False)],
    workspace: WorkspaceOption = Path("testset"),
    private: Annotated[bool, typer.Option("--private", help="Create the repository private.")] = False,
    json_output: JsonOption = False,
) -> None:
    """Upload a release to the Hugging Face hub and tag that revision vVERSION. The token comes from HF_TOKEN."""
    from .hub import push_release
    from .stages.release import load_release, release_dir

    result = push_release(load_release(release_dir(workspace, version)), repo_id, private=private)
    if json_output:
        print(json.dumps(result, indent=2))
        return
    out.print(f"pushed {version} to {result['repo_url']} at {result['commit'][:12]}, tagged {result['tag']}", highlight=False)


def _renamed(evaluation, name: str):
    from dataclasses import replace

    return replace(evaluation, run_name=name)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app and map outcomes to exit codes 0 / 1 / 2."""
    try:
        code = app(args=argv, standalone_mode=False)  # without standalone mode, click returns typer.Exit's code
        if isinstance(code, int) and code != EXIT_OK:
            return code
    except typer.Exit as done:
        return done.exit_code
    except typer.Abort:
        err.print("aborted")
        return EXIT_BAD_INPUT
    except typer.TyperException as error:  # usage errors: unknown option, missing argument, bad value
        error.show(file=sys.stderr)
        return EXIT_BAD_INPUT
    except TestsetBuilderError as error:
        err.print(f"[bold red]error:[/] {escape(str(error))}", highlight=False)
        return EXIT_BAD_INPUT
    except Exception as error:  # anything else is our bug: say so, show the traceback only on request
        if os.environ.get("TESTSET_BUILDER_DEBUG"):
            raise
        err.print(
            f"[bold red]internal error:[/] {type(error).__name__}: {escape(str(error))}\n"
            "This is a bug in testset-builder; rerun with TESTSET_BUILDER_DEBUG=1 for the traceback.",
            highlight=False,
        )
        return EXIT_INTERNAL
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
