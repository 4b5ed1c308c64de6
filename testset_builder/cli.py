"""The ``testset-builder`` command. Thin: parse options, call the library, print.

Exit codes scripts can trust: 0 success, 1 bad input (a one-line message names the file, line or value),
2 internal error (a bug: the message says how to get the traceback).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

from . import __version__
from .errors import TestsetBuilderError

EXIT_OK, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2

app = typer.Typer(
    name="testset-builder",
    help="Build retrieval test sets you can trust, and score retrievers against them.\n\n"
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
    qrels: QrelsOption,
    run: Annotated[
        list[Path],
        typer.Option("--run", "-r", help="A run: TREC (qid Q0 docid rank score tag) or JSONL. Repeat for several.", show_default=False),
    ],
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
    from .export import read_qrels, read_run
    from .metrics import evaluate, parse_metrics
    from .metrics.report import queries_line, score_dict, score_table, write_per_query_csv

    specs = parse_metrics(metrics)
    labels = read_qrels(qrels)
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
    qrels: QrelsOption,
    runs: Annotated[
        list[Path],
        typer.Argument(help="Two or more runs; the first is the baseline each other run is compared with.", show_default=False),
    ],
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
    from .export import read_qrels, read_run
    from .metrics import evaluate, parse_metrics
    from .metrics.compare import compare as compare_runs
    from .metrics.report import comparison_table, queries_line, write_per_query_csv

    if len(runs) < 2:
        raise InputError("compare needs at least two runs (the first is the baseline)")
    specs = parse_metrics(metrics)
    labels = read_qrels(qrels)
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


def _renamed(evaluation, name: str):
    from dataclasses import replace

    return replace(evaluation, run_name=name)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app and map outcomes to exit codes 0 / 1 / 2."""
    try:
        app(args=argv, standalone_mode=False)
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
