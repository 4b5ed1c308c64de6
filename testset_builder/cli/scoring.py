"""Scoring commands: score, compare, baseline, report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from .. import api
from .app import (
    DEFAULT_METRICS,
    EXIT_OK,
    EXIT_REGRESSION,
    JsonOption,
    MetricsOption,
    OptionalQrelsOption,
    PerQueryOption,
    ReleaseOption,
    RelevanceLevelOption,
    SeedOption,
    app,
    err,
    out,
    run_paths,
)


def coverage_lines(runs: list[tuple[str, dict]], name_first: bool, level: int, release: bool) -> list[str]:
    """Under the figures: which queries were scored and why some score 0 (the first run, named with ``name_first``;
    every other run that left queries empty), and what ``--relevance-level`` changed when it is not 1."""
    from ..metrics.report import few_queries, other_runs_empty_lines, queries_line

    lines = [queries_line(runs[0][1], runs[0][0] if name_first else None)]
    if few := few_queries(runs[0][1]["evaluated_queries"]):
        lines.append(few)
    if level != 1:
        lines.append(
            f"relevant: grade >= {level} for recall, precision, MAP, MRR, hit rate and R-precision; nDCG uses the "
            "grades" + ("; prediction-powered figures are for level 1 only, so none are given" if release else "")
        )
    return lines + other_runs_empty_lines(runs)


ClusterByOption = Annotated[
    str,
    typer.Option(
        "--cluster-by",
        help="What resamples together in intervals and paired tests: document (a synthetic question's source "
        "document, from the release's meta/; a query with none known is its own cluster), session (a logged "
        "query's session, from the release's meta/logs.jsonl), relevant (queries that share a relevant document), "
        "given (--clusters FILE), query, or auto (the clusters file when given, else the source document or the "
        "session where the release knows one, else query).",
    ),
]
ClustersOption = Annotated[
    Path | None,
    typer.Option(
        "--clusters",
        help="Each query's cluster (a session, a user, a topic): JSONL, CSV or TSV with a query id and the field "
        "--cluster-field names.",
        show_default=False,
    ),
]
ClusterFieldOption = Annotated[str, typer.Option("--cluster-field", help="The --clusters file's cluster field.")]
DetectOption = Annotated[
    float | None,
    typer.Option(
        "--detect",
        min=0.0,
        help="Also say how many queries (and clusters) the set needs to detect a difference this large "
        "(alpha 0.05, 80%% power, paired).",
        show_default=False,
    ),
]
AlphaOption = Annotated[float, typer.Option("--alpha", min=0.0, max=1.0, help="Family-wise significance level.")]


def parse_targets(text: str) -> list[float]:
    from ..errors import InputError

    try:
        targets = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"--target-recall {text!r}: give recalls between 0 and 1, e.g. 0.9,0.95") from None
    if not targets or not all(0 < t <= 1 for t in targets):
        raise InputError(f"--target-recall {text!r}: give recalls between 0 and 1, e.g. 0.9,0.95")
    return targets


def question_lines(found) -> None:
    """The question diagnostics under `score`'s figures: saturation warnings, the counts, the weakest questions,
    the split by chunks needed (when some question needs several) and what to generate next."""
    from ..metrics.question_lines import chunk_count_table, discrimination_lines

    if table := chunk_count_table(found):
        out.print(table)
    for line in discrimination_lines(found):
        if line.startswith("warning: "):
            out.print(f"[yellow]warning:[/] {escape(line.removeprefix('warning: '))}", highlight=False)
        else:
            out.print(line, highlight=False, markup=False)


@app.command()
def score(
    more: Annotated[
        list[Path] | None,
        typer.Argument(
            help="More runs (what the shell expands an unquoted --runs DIR/*.trec into).", show_default=False
        ),
    ] = None,
    run: Annotated[
        list[Path] | None,
        typer.Option(
            "--run",
            "-r",
            help="A run: TREC (qid Q0 docid rank score tag) or JSONL. Repeat for several.",
            show_default=False,
        ),
    ] = None,
    runs: Annotated[
        list[str] | None,
        typer.Option(
            "--runs", help="Runs by a glob in quotes ('runs/*.trec') or paths; repeatable.", show_default=False
        ),
    ] = None,
    qrels: OptionalQrelsOption = None,
    release: ReleaseOption = None,
    metrics: MetricsOption = DEFAULT_METRICS,
    json_output: JsonOption = False,
    per_query: PerQueryOption = None,
    ci: Annotated[bool, typer.Option("--ci/--no-ci", help="Bootstrap 95% confidence intervals over queries.")] = True,
    resamples: Annotated[
        int, typer.Option("--resamples", min=100, help="Bootstrap resamples for the intervals.")
    ] = 1000,
    seed: SeedOption = 0,
    cluster_by: ClusterByOption = "auto",
    clusters_file: ClustersOption = None,
    cluster_field: ClusterFieldOption = "cluster",
    target_recall: Annotated[
        str, typer.Option("--target-recall", help="Recalls whose smallest reaching k (up to 100) each run reports.")
    ] = "0.9,0.95",
    detect: DetectOption = None,
    alpha: AlphaOption = 0.05,
    relevance_level: RelevanceLevelOption = 1,
    details: Annotated[
        bool,
        typer.Option(
            "--details",
            help="On a release with estimates, also show each metric's other figures: prediction-powered, human-only, "
            "estimate-only and the labelled pairs alone.",
        ),
    ] = False,
) -> None:
    """Score runs against qrels with trec_eval's conventions.

    Every query of the qrels counts: a query the run missed scores 0, and run queries the qrels lack are dropped;
    the summary line says how many of each.

    Intervals resample clusters of queries that are not independent: on a release that knows where its synthetic
    questions came from, a question's source document (--cluster-by); the line 'clusters:' gives the design effect
    (how much clustering widened the intervals). Each run's recall@k for k = 1..100 is drawn in the terminal, with
    the smallest k that reaches each --target-recall (the course's rule of thumb: recall@10 >= 0.9 and
    recall@20 >= 0.95). Several runs (--runs 'runs/*.trec', or --run repeated) share one table, each run tested
    against the best run of every metric (paired randomization test, Holm over the runs). The 'set size' line says
    the smallest difference the set can detect (from the two best runs' paired differences; with one run, assuming
    a second run as variable and uncorrelated, an upper bound) and, with --detect, the queries needed.

    On a release that carries estimates, some labels are human and the rest estimated. Each metric then shows
    one figure, the one that applies; its 'figure' column says which. Prediction-powered: the estimates corrected
    by the human verdicts on pairs drawn at random (`select`). Its 95% interval covers the draw, for these
    queries. It serves precision@k, recall@k and nDCG@k. Exact: every pair is labelled. Estimate-only: no verdict
    was drawn at random, so there is no interval. Labelled pairs only: a metric the estimator does not cover (MRR,
    MAP, hit rate, R-precision), read from the labelled pairs alone. The best run and the tests use the figure
    shown. A line says how many more verdicts would halve the intervals. Another says how good the estimate is.
    --details shows the other figures; JSON has them under each run's `details`.

    On a release that labels both synthetic questions and real queries, each run is also scored on each subset
    apart: Kendall's tau between the two rankings of the runs and each run's optimism gap (synthetic minus real),
    with 95% intervals. A warning says when the subsets order two runs oppositely, or a gap is clear of 0. JSON:
    `transfer`.

    Under the figures, which questions separate the runs: too easy (every run ranks the relevant chunks first), too
    hard (no run has one in its top 10), leaky (a synthetic question holding its source's rare words) and ambiguous
    (other chunks answer it), the weakest named. A warning says when a metric is at 0.95 or more for every run: the
    set is saturated on it. Where some questions need several chunks, a table gives recall@10 beside complete@10
    (every relevant chunk in the top 10) by the chunks needed. Last, what to generate next. These are reported,
    never used to drop a question. JSON: `question_diagnostics`.

    On a workspace's release, when the workspace has a production log, the last lines say how much of the logged
    traffic the test questions cover, and which topics of it to write questions for next (measured by `release`).
    JSON: `coverage`.

    Example: `testset-builder score --release testset@latest --runs 'runs/*.trec' --metrics ndcg@10,recall@10`.
    """
    import numpy as np

    from ..errors import InputError
    from ..export import read_runs
    from ..export.reports import check_writable, write_per_query_csv
    from ..metrics import parse_metrics
    from ..metrics.coverage import traffic_coverage_lines
    from ..metrics.guidance import cluster_line, half_width_line, recall_curves_table, runs_table, set_size_line
    from ..metrics.report import details_table, diagnostic_lines, estimate_lines, score_table
    from ..metrics.transfer import transfer_lines

    parse_metrics(metrics)  # a bad metric is named before any file is read
    targets = parse_targets(target_recall)
    paths = run_paths(run, runs, more)
    if per_query:
        check_writable(per_query, "--per-query")
    if (qrels is None) == (release is None):
        raise InputError("give exactly one of --qrels FILE or --release WORKSPACE@VERSION")
    scored = api.score(
        release, read_runs(paths), metrics, qrels=qrels, ci=ci, resamples=resamples, seed=seed,
        cluster_by=cluster_by, targets=targets, detect=detect, alpha=alpha, relevance_level=relevance_level,
        clusters=clusters_file, cluster_field=cluster_field,
    )  # fmt: skip
    reports, evaluations, best = scored.reports, scored.evaluations, scored.against_best
    clusters = scored.cluster_design
    sizes = scored.sizes
    if per_query:
        write_per_query_csv(evaluations, per_query)
    if json_output:
        print(json.dumps(scored.as_dict(), indent=2))
        return
    effects = {name: e["design_effect"] for name, e in reports[0]["metrics"].items() if "design_effect" in e}
    if best is None:
        out.print(score_table(reports[0]))
    else:
        resampled = "clusters" if clusters.codes is not None else "queries"
        out.print(runs_table(reports, best, alpha, f"resampling {resampled}"))
    estimated = [r for r in reports if "estimates" in r]
    if estimated:
        for line in estimate_lines(estimated[0], scored.quality):
            out.print(line, highlight=False)
        for report in estimated:
            for line in diagnostic_lines(report, report["run"] if len(reports) > 1 else None):
                out.print(line, highlight=False)
    if details:
        for report in estimated:
            out.print(details_table(report))
    curves = {r["run"]: np.asarray(r["recall_curve"]) for r in reports}  # what the JSON holds, drawn
    reach = {r["run"]: r["target_recall"] for r in reports}
    out.print(recall_curves_table(curves, reach, labelled_only=bool(estimated)))
    runs = [(r["run"], r["queries"]) for r in reports]
    for line in coverage_lines(runs, len(reports) > 1, relevance_level, release is not None):
        out.print(line, highlight=False)
    if scored.synthetic_audit and scored.synthetic_audit["unchecked"]:
        out.print(scored.synthetic_audit["statement"], highlight=False)
    if clusters.worth_saying:
        out.print(cluster_line(clusters.describe(), effects), highlight=False)
    if best is None and ci:
        out.print(half_width_line(reports[0]), highlight=False)
    out.print(set_size_line(sizes), highlight=False)
    if scored.transfer is not None:
        for line in transfer_lines(scored.transfer):
            out.print(line, highlight=False)
        for warning in scored.transfer.warnings:
            err.print(f"[yellow]warning:[/] {escape(warning)}", highlight=False)
    if scored.questions is not None:
        question_lines(scored.questions)
    if scored.coverage is not None:
        for line in traffic_coverage_lines(scored.coverage):
            out.print(line, highlight=False, markup=False)
    if per_query:
        out.print(f"per-query values written to {per_query}")


@app.command()
def compare(
    runs: Annotated[
        list[Path],
        typer.Argument(
            help="Two or more runs; the first is the baseline each other run is compared with.", show_default=False
        ),
    ],
    qrels: OptionalQrelsOption = None,
    release: ReleaseOption = None,
    metrics: MetricsOption = "ndcg@10,recall@10",
    test: Annotated[
        str, typer.Option("--test", help="Significance test that decides 'significant': randomization or t.")
    ] = "randomization",
    alpha: AlphaOption = 0.05,
    resamples: Annotated[int, typer.Option("--resamples", min=100, help="Randomization-test permutations.")] = 10_000,
    json_output: JsonOption = False,
    per_query: PerQueryOption = None,
    seed: SeedOption = 0,
    cluster_by: ClusterByOption = "auto",
    clusters_file: ClustersOption = None,
    cluster_field: ClusterFieldOption = "cluster",
    detect: DetectOption = None,
    fail_if_worse: Annotated[
        list[str] | None,
        typer.Option(
            "--fail-if-worse",
            help="METRIC:MARGIN (repeatable or comma-separated): exit 5 when a run is significantly worse than the "
            "baseline by more than MARGIN on METRIC (one-sided bound below -MARGIN), listing the queries that lost "
            "most.",
            show_default=False,
        ),
    ] = None,
    relevance_level: RelevanceLevelOption = 1,
) -> None:
    """Compare runs on the same qrels: paired differences, 95% bootstrap intervals, t and randomization tests.

    Queries that are not independent resample together (--cluster-by: a synthetic question's source document on
    a release that knows it): the bootstrap resamples clusters, the randomization test flips each cluster's
    summed difference, the t-test uses the cluster-robust variance, and the 'clusters:' line gives the design
    effect. The 'set size' line says the smallest difference this set detects (alpha 0.05, 80% power, paired)
    and, with --detect, the queries needed for a smaller one.

    On a release that carries estimates, the paired prediction-powered difference of each run from the baseline
    comes first, for precision@k, recall@k and nDCG@k, with its 95% interval (JSON: `prediction_powered`). The
    table after it reads the labelled pairs alone, and its title says so. The gate reads that table.

    p-values are Holm-corrected over every (run, metric) test shown, so 'significant' controls the family-wise
    error at --alpha.

    Regression gate (--fail-if-worse ndcg@10:0.01): exit code 5 when, for some run and gated metric, the upper
    end of the one-sided (1 - alpha/g) bootstrap bound of the mean difference (run - baseline) is below -margin
    (g: gated run-metric pairs), i.e. the run is significantly worse by more than the margin; 0 otherwise.

    Example: `testset-builder compare bm25.trec dense.trec --release testset@latest --fail-if-worse ndcg@10:0.01`.
    """
    from ..errors import InputError
    from ..export import read_runs
    from ..export.reports import check_writable, write_per_query_csv
    from ..metrics import parse_metrics
    from ..metrics.gate import parse_gate
    from ..metrics.guidance import cluster_line, gate_lines, set_size_line
    from ..metrics.report import (
        comparison_table,
        prediction_difference_table,
    )  # fmt: skip

    if len(runs) < 2:
        raise InputError("compare needs at least two runs (the first is the baseline)")
    parse_metrics(metrics)  # a bad metric or gate is named before any file is read
    parse_gate(fail_if_worse or [])
    if per_query:
        check_writable(per_query, "--per-query")
    if (qrels is None) == (release is None):
        raise InputError("give exactly one of --qrels FILE or --release WORKSPACE@VERSION")
    compared = api.compare(
        release, read_runs(runs), metrics, qrels=qrels, test=test, alpha=alpha, resamples=resamples, seed=seed,
        cluster_by=cluster_by, detect=detect, fail_if_worse=fail_if_worse or [], relevance_level=relevance_level,
        clusters=clusters_file, cluster_field=cluster_field,
    )  # fmt: skip
    result, loaded, evaluations = compared.comparison, compared.runs, compared.evaluations
    clusters, gate, differences, failed = compared.cluster_design, compared.gate, compared.differences, compared.failed
    if per_query:
        write_per_query_csv(evaluations, per_query)
    if json_output:
        document = compared.as_dict()
        if "gate" in document:  # the exit code the gate gives, where scripts read the outcome
            gate_document = document["gate"]
            document["gate"] = {
                "failed": gate_document["failed"], "exit_code": EXIT_REGRESSION if failed else EXIT_OK,
                **{key: value for key, value in gate_document.items() if key != "failed"},
            }  # fmt: skip
        print(json.dumps(document, indent=2))
    else:
        resampled = "clusters" if clusters.codes is not None else "queries"
        if differences:  # the figure that applies to precision@k, recall@k and nDCG@k comes first
            out.print(prediction_difference_table(loaded[0].name, differences))
        out.print(comparison_table(result, resampled, labelled_only=bool(differences)))
        runs = [(e.run_name, e.summary.as_dict()) for e in evaluations]
        for line in coverage_lines(runs, True, relevance_level, release is not None):
            out.print(line, highlight=False)
        if clusters.worth_saying:
            effects = {f"{row.metric} ({row.candidate})": row.design_effect for row in result.rows}
            out.print(cluster_line(clusters.describe(), effects), highlight=False)
        for candidate in result.candidates:
            sizes = [s for s, row in zip(result.set_sizes, result.rows) if row.candidate == candidate]
            label = f" ({candidate} vs {result.baseline})" if len(result.candidates) > 1 else ""
            out.print(set_size_line(sizes, label, tests=len(result.rows)), highlight=False)
        for line in gate_lines(gate):
            out.print(line, highlight=False)
    if failed:
        worse = ", ".join(f"{o.candidate} on {o.metric}" for o in gate if o.failed)
        err.print(f"[bold red]regression:[/] significantly worse than the baseline: {worse} (exit {EXIT_REGRESSION})")
        raise typer.Exit(EXIT_REGRESSION)


@app.command()
def baseline(
    release: Annotated[
        str,
        typer.Option(
            "--release", help="WORKSPACE@VERSION (VERSION may be latest) or a release directory.", show_default=False
        ),
    ],
    out_file: Annotated[
        Path, typer.Option("--out", "-o", help="Write the run here (TREC format).", show_default=False)
    ],
    retriever: Annotated[str, typer.Option("--retriever", help="bm25, or dense (with the dense extra).")] = "bm25",
    k: Annotated[int, typer.Option("--k", min=1, help="Results per query.")] = 100,
    json_output: JsonOption = False,
) -> None:
    """A baseline run over a release's own corpus and queries, ready for `score --release`.

    Example: `testset-builder baseline --release testset@latest --out bm25.trec`.
    """
    made = api.baseline(release, retriever, k, out_file)
    if json_output:
        print(json.dumps(made.as_dict()))
        return
    out.print(
        f"{retriever} run over {made.chunks} chunks for {made.queries} queries of release {made.version} -> {out_file}"
    )


@app.command()
def report(
    release: ReleaseOption = None,
    run: Annotated[
        list[Path] | None,
        typer.Option(
            "--run", "-r", help="A run to score in the report (TREC or JSONL). Repeat for several.", show_default=False
        ),
    ] = None,
    out_file: Annotated[
        Path | None,
        typer.Option(
            "--out", "-o", help="Where to write the HTML (default: WORKSPACE/reports/VERSION.html).", show_default=False
        ),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """One self-contained HTML page about a release: what it holds, a sample of labelled pairs, the review's
    agreement, the trust figures (estimate and calibration), each run's metrics with intervals and recall@k curves,
    which questions separate the runs (as `score` gives them), and the lineage. Plots are inline SVG; the page loads
    nothing from the network.

    Example: `testset-builder report --release testset@latest --run bm25.trec --run dense.trec`.
    """
    from ..errors import InputError

    if release is None:
        raise InputError("give --release WORKSPACE@VERSION (or a release directory)")
    if out_file is None and ("@" not in release or Path(release).exists()):
        raise InputError("give --out FILE.html for a release directory")
    made = api.report(release, run or [], out_file)
    if json_output:
        print(json.dumps(made.as_dict(), indent=2))
        return
    out.print(f"report of release {made.version} ({len(made.runs)} runs scored) -> {made.path}", highlight=False)
