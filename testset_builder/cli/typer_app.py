"""The ``testset-builder`` app: shared options and helpers; commands live beside it, the exit codes, the consoles
and the run of a command line in :mod:`~testset_builder.cli.output`.

Every command that reads a config takes ``--config`` (a file, or a bundled config's name) and turns its flags into
overrides of that config through :func:`~testset_builder.config.resolve_config`; nothing else reaches a stage.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from .. import api
from .._version import __version__
from . import output
from .output import (  # noqa: F401  (the names every command module imports from here)
    EXIT_BAD_INPUT,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_PARTIAL,
    EXIT_REGRESSION,
    EXIT_REVIEW,
    QUIET,
    run_app,
    stages_document,
)

app = typer.Typer(
    name="testset-builder",
    help="Build retrieval test sets you can trust, and score retrievers against them.\n\n"
    "Chunk a corpus:  testset-builder chunk docs/ --workspace testset\n\n"
    "Write questions:  testset-builder synthesize --questions 50 --workspace testset\n\n"
    "Label real queries:  testset-builder propose --queries queries.txt --workspace testset\n\n"
    "Release:  testset-builder release --bump minor --workspace testset\n\n"
    "Score a run:   testset-builder score --qrels qrels.tsv --run run.trec\n\n"
    "Settings:  testset-builder config quickstart > testset-builder.yaml, then --config testset-builder.yaml",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def paragraphs(doc: str | None) -> str | None:
    """A docstring as help text: its paragraphs each on one line, for the terminal to wrap at its own width (the
    source wraps at 120 columns; kept, those breaks leave every line of an 80-column help ragged)."""
    if doc is None:
        return None
    return "\n\n".join(" ".join(p.split()) for p in inspect.cleandoc(doc).split("\n\n"))


out, err = output.out.console, output.err.console  # the consoles themselves: a progress bar draws on err
QUIET_HELP = (
    "No progress bars and no report on stdout; errors and warnings still go to stderr, the exit code is the same, "
    "and --json still prints its document. Accepted anywhere on the command line."
)

DEFAULT_METRICS = api.DEFAULT_METRICS
METRICS_HELP = (
    "Comma-separated metrics: recall@k, precision@k, mrr, ndcg@k (linear gain), ndcg_exp@k (2^g-1 gain), "
    "hit_rate@k, map, r_precision, complete@k (1 when every relevant chunk is in the top k). A bare name (recall, "
    "mrr, ndcg, map) means the whole ranked list; "
    "trec_eval spellings (P_10, ndcg_cut_10) are accepted."
)
QRELS_HELP = "Relevance labels: TREC qrels (qid 0 docid grade), BEIR TSV (query-id corpus-id score header) or JSONL."

QrelsOption = Annotated[Path, typer.Option("--qrels", "-q", help=QRELS_HELP, show_default=False)]
OptionalQrelsOption = Annotated[
    Path | None, typer.Option("--qrels", "-q", help=QRELS_HELP + " Or use --release.", show_default=False)
]
ReleaseOption = Annotated[
    str | None,
    typer.Option(
        "--release",
        help="Score against a release instead of --qrels: WORKSPACE@VERSION (testset@1.0.0) or a release directory.",
        show_default=False,
    ),
]
MetricsOption = Annotated[str, typer.Option("--metrics", "-m", help=METRICS_HELP)]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout instead of tables.")]
PerQueryOption = Annotated[
    Path | None, typer.Option("--per-query", help="Also write per-query values to this CSV file.", show_default=False)
]
SeedOption = Annotated[int, typer.Option("--seed", help="Seed for bootstrap and randomization resampling.")]
RelevanceLevelOption = Annotated[
    int,
    typer.Option(
        "--relevance-level",
        min=1,
        help="The grade a chunk needs to count as relevant in recall, precision, MAP, MRR, hit rate and R-precision "
        "(trec_eval -l; 2 for TREC DL's convention); nDCG's gains are the grades whatever it is.",
    ),
]
WorkspaceOption = Annotated[
    Path | None,
    typer.Option(
        "--workspace",
        "-w",
        help="The workspace directory (default: the config's workspace, testset).",
        show_default=False,
    ),
]
RayAddressOption = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        help="The Ray cluster for --engine ray (ray://head:10001, or head:6379 on the cluster); default: a private "
        "local Ray.",
        show_default=False,
    ),
]
ConfigOption = Annotated[
    str | None,
    typer.Option(
        "--config",
        "-c",
        help="A config file, or a bundled config: quickstart (the local model), openai, anthropic. Default: "
        "$TESTSET_BUILDER_CONFIG, else openai if OPENAI_API_KEY is set, anthropic if ANTHROPIC_API_KEY is, "
        "else quickstart. See `testset-builder config`.",
        show_default=False,
    ),
]
MaxCostOption = Annotated[
    float | None,
    typer.Option(
        "--max-cost-usd",
        min=0.0,
        help="Stop before LLM spending could pass this (limits.max_cost_usd).",
        show_default=False,
    ),
]
BatchOption = Annotated[
    bool,
    typer.Option(
        "--batch",
        help="Submit the LLM calls through the provider's batch API (half price, hours); `resume` collects them, "
        "then rerun this command.",
    ),
]
QueriesOption = Annotated[
    Path,
    typer.Option(
        "--queries", "-Q", help="Real queries: JSONL, CSV/TSV with a header, or one query per line.", show_default=False
    ),
]
IdFieldOption = Annotated[
    str | None,
    typer.Option(
        "--id-field",
        help="Field or column holding the query id (default: _id, id, query_id or qid; else derived from the text).",
        show_default=False,
    ),
]
TextFieldOption = Annotated[
    str | None,
    typer.Option(
        "--text-field",
        help="Field or column holding the query text (default: text, query or question).",
        show_default=False,
    ),
]
VersionArgument = Annotated[str, typer.Argument(help="A released version (1.0.0), or latest.", show_default=False)]
LOCAL_JUDGE_WARNING = (
    "[yellow]note:[/] the embedded local model (Gemma 3 270M, a base model) is a placeholder judge: its grades are "
    "barely better than chance (benchmarks/judge_agreement.py measures it). The relevance estimate (dense, BM25, "
    "calibrated by your reviewers: `estimate`, `select`) is the better offline signal; use a frontier model "
    "(--config openai, --config anthropic) for a judge you will trust."
)


def _version(value: bool) -> None:
    if value:
        out.print(f"testset-builder {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    quiet: Annotated[bool, typer.Option(QUIET, help=QUIET_HELP)] = False,
) -> None:
    """Build retrieval test sets you can trust, and score retrievers against them."""
    if quiet:  # main() takes --quiet out of the arguments first; this is for a caller that runs the app directly
        out.quiet = True


@contextmanager
def interactive() -> Iterator[None]:
    """For serve and review: what they print (the reviewer's link, the items to grade) is how they are used, not a
    report, so --quiet does not hide it."""
    was_quiet, out.quiet = out.quiet, False
    try:
        yield
    finally:
        out.quiet = was_quiet


# settings and workspaces -----------------------------------------------------------------------------------------
def settings(config: str | None, workspace: Path | None = None, **overrides: Any):
    """The config every command runs with: ``--config`` (or the default) with the command line's flags as
    overrides (dotted keys spelled with ``__``: ``synthesize__questions=5``); a flag not given is None."""
    from ..config import resolve_config

    dotted = {key.replace("__", "."): value for key, value in overrides.items()}
    return resolve_config(config, {"workspace": workspace, **dotted})


def waiting(holder: str) -> None:
    """Say on stderr that the workspace is in use and this command waits."""
    err.print(
        f"[yellow]waiting:[/] the workspace is in use by {escape(holder)}; this run goes on when it ends",
        highlight=False,
    )


def open_workspace_for(config, create: bool = False, readonly: bool = False):
    """The config's workspace, opened (``readonly`` for commands that only read: they never write to it); a stage
    that must wait for another process says so on stderr."""
    return api.open_workspace(config, create=create, readonly=readonly, on_wait=waiting)


def shows_progress(json_output: bool) -> bool:
    """Whether a command draws progress bars (on stderr): not under --quiet, nor under --json."""
    return not out.quiet and not json_output


def llm_bar(json_output: bool):
    """The LLM stages' progress bar on stderr, as a context manager (a null one under --json or --quiet)."""
    from ..llm.progress import llm_progress

    return llm_progress(err) if shows_progress(json_output) else nullcontext()


def judge_is_weak(config) -> bool:
    """A weak model such as the embedded one judges (near chance on relevance):
    :func:`testset_builder.api.judges_pools`."""
    return not api.judges_pools(config)


def judging_lines(judging) -> list[str]:
    grades = judging.grades
    lines = [
        f"judgments: {judging.judged} new, {judging.already_judged} already made, {judging.failed} failed"
        + (f", {judging.not_judged_budget} left for lack of budget" if judging.not_judged_budget else "")
        + f"; grades 0: {grades[0]}, 1: {grades[1]}, 2: {grades[2]}; {judging.queued} newly queued for review",
        f"LLM: {judging.calls} calls ({judging.cache_hits} from the cache), {judging.input_tokens} input and "
        f"{judging.output_tokens} output tokens, ${judging.cost_usd:.4f}",
    ]
    if judging.batch_id:
        lines.append(
            f"batch {judging.batch_id} submitted: run `testset-builder resume` until it ends, then rerun this command"
        )
    lines.extend(f"[yellow]failed[/] {escape(f)}" for f in judging.failures[:5])
    return lines


def run_code(result: api.RunResult) -> int:
    """``run``'s exit code: 0 done (or planned), 4 stopped for review, 3 a stage fell short."""
    return {"review": EXIT_REVIEW, "incomplete": EXIT_PARTIAL}.get(result.status, EXIT_OK)


def exit_for(incomplete: bool) -> None:
    """Exit code 3 when a run finished short (failures, or the budget's stop): what was done is kept."""
    if incomplete:
        raise typer.Exit(EXIT_PARTIAL)
