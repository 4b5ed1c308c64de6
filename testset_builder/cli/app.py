"""The ``testset-builder`` app: shared options, helpers and the entry point; commands live beside it.

Exit codes scripts can trust: 0 success, 1 bad input (a one-line message names the file, line or value),
2 internal error (a bug: the message says how to get the traceback), 3 finished but some items failed or were
left for lack of budget (what was done is kept; rerun to go on), 4 ``run`` stopped while pairs drawn for review
wait for a human (review them, then run again), 5 ``compare --fail-if-worse``: a run is significantly worse than
the baseline, 130 interrupted (Ctrl-C; what was committed is kept).

Output discipline: reports for people go to ``out`` (stdout), progress bars, warnings and errors to ``err``
(stderr), JSON documents to stdout with a plain ``print``. ``--quiet``, anywhere on the command line, silences
``out`` and every progress bar; errors, warnings, exit codes and the ``--json`` document stay.

Every command that reads a config takes ``--config`` (a file, or a bundled config's name) and turns its flags into
overrides of that config through :func:`~testset_builder.config.resolve_config`; nothing else reaches a stage.
"""

from __future__ import annotations

import errno
import inspect
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from .. import api
from .._version import __version__
from ..errors import TestsetBuilderError

EXIT_OK, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_PARTIAL, EXIT_REVIEW, EXIT_REGRESSION = 0, 1, 2, 3, 4, 5

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


# piped output (CI logs, files) gets room for the comparison table instead of rich's 80-column default
out = Console(width=None if sys.stdout.isatty() else 160)  # out.quiet is --quiet: see main()
err = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
QUIET = "--quiet"
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


def stages_document(result: api.RunResult) -> dict:
    """``run``'s stages as its --json gives them: each one's result and exit code (3 where it fell short)."""
    return {
        name: {"exit_code": EXIT_PARTIAL if result.fell_short(name) else EXIT_OK, "result": stage.as_dict()}
        for name, stage in result.stages.items()
    }


def run_code(result: api.RunResult) -> int:
    """``run``'s exit code: 0 done (or planned), 4 stopped for review, 3 a stage fell short."""
    return {"review": EXIT_REVIEW, "incomplete": EXIT_PARTIAL}.get(result.status, EXIT_OK)


def exit_for(incomplete: bool) -> None:
    """Exit code 3 when a run finished short (failures, or the budget's stop): what was done is kept."""
    if incomplete:
        raise typer.Exit(EXIT_PARTIAL)


def run_app(argv: list[str] | None = None, command: Callable[..., Any] | None = None) -> int:
    """Run the app with the commands registered so far and map outcomes to exit codes (see the module docstring;
    :func:`testset_builder.cli.main` registers what the arguments need first). With ``--json``, a
    failure is one JSON document on stdout too (``{"error", "exit_code"}``), so a script reads one document
    whatever happened. ``command``: the function of the command the arguments name, called directly when they
    are a plain line for it (:mod:`~testset_builder.cli.direct`), else through Typer as any other.

    ``--quiet`` is taken out of the arguments wherever it stands (users write it after the command, where click
    would refuse an option of the app) and silences ``out`` until this call returns. A call nested in a quiet one
    stays quiet."""
    args = list(sys.argv[1:] if argv is None else argv)
    was_quiet = out.quiet
    out.quiet = was_quiet or QUIET in args
    try:
        return _outcome([arg for arg in args if arg != QUIET], json_mode="--json" in args, command=command)
    finally:
        out.quiet = was_quiet


def _called(function: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    """``function(**arguments)`` as click runs a command's callback: Ctrl-C is exit code 130, the end of input an
    abort, a closed pipe on stdout exit code 1."""
    try:
        return function(**arguments)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except EOFError as error:
        print(file=sys.stderr)
        raise typer.Abort() from error
    except OSError as error:
        if error.errno != errno.EPIPE:
            raise
        from click.utils import PacifyFlushWrapper

        sys.stdout, sys.stderr = PacifyFlushWrapper(sys.stdout), PacifyFlushWrapper(sys.stderr)
        sys.exit(1)


def _outcome(args: list[str], json_mode: bool, command: Callable[..., Any] | None = None) -> int:
    """Run the app on ``args`` and turn what happened into an exit code (and, with ``--json``, an error document)."""
    from .direct import direct_call

    def failed(code: int, message: str, error: BaseException | None = None) -> int:
        if json_mode:
            document = {"error": message, "exit_code": code}
            so_far = getattr(error, "run_so_far", None)  # run: the stages that ended before this one failed
            if so_far is not None:
                document["stages"] = stages_document(so_far)
            print(json.dumps(document))
        return code

    try:
        arguments = direct_call(command, args[1:]) if command is not None else None
        if arguments is None:  # a scoring command called directly loads them only for a format it does not know
            api.load_plugins()  # installed plugins' providers, formats, review actions and stages, before any command
        # without standalone mode, click returns typer.Exit's code
        code = app(args=args, standalone_mode=False) if arguments is None else _called(command, arguments)
        if isinstance(code, int) and code != EXIT_OK:
            return code
    except typer.Exit as done:
        return done.exit_code
    except typer.Abort:
        err.print("aborted")
        return failed(EXIT_BAD_INPUT, "aborted")
    except typer.TyperException as error:  # usage errors: unknown option, missing argument, bad value
        error.show(file=sys.stderr)
        return failed(EXIT_BAD_INPUT, error.format_message())
    except TestsetBuilderError as error:
        err.print(f"[bold red]error:[/] {escape(str(error))}", highlight=False, soft_wrap=True)  # one line, unfolded
        return failed(EXIT_BAD_INPUT, str(error), error)
    except KeyboardInterrupt as error:
        err.print("interrupted: what was finished is kept; rerun to go on")
        return failed(130, "interrupted", error)
    except Exception as error:  # anything else is our bug: say so, show the traceback only on request
        if os.environ.get("TESTSET_BUILDER_DEBUG"):
            raise
        err.print(
            f"[bold red]internal error:[/] {type(error).__name__}: {escape(str(error))}\n"
            "This is a bug in testset-builder; rerun with TESTSET_BUILDER_DEBUG=1 for the traceback.",
            highlight=False,
        )
        return failed(EXIT_INTERNAL, f"internal error: {type(error).__name__}: {error}", error)
    return EXIT_OK


def run_paths(run: list[Path] | None, runs: list[str] | None, more: list[Path] | None) -> list[Path]:
    """--run files, --runs globs (or files) and extra paths, in that order, each once."""
    import glob

    from ..errors import InputError

    paths = list(run or [])
    for pattern in runs or []:
        matched = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        if not matched:
            raise InputError(f"--runs {pattern!r}: no file matches")
        paths += [Path(p) for p in matched]
    paths += list(more or [])
    if not paths:
        raise InputError("Missing option '--run' (or --runs 'DIR/*.trec'): the runs to score")
    return list(dict.fromkeys(paths))
