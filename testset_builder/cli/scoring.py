"""Scoring commands: score, compare, baseline, report. Their declarations: what each does is in
:mod:`~testset_builder.cli.scoring_bodies`, which a plain line (:mod:`~testset_builder.cli.direct`) calls without
Typer."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from . import scoring_bodies
from .typer_app import (
    DEFAULT_METRICS,
    JsonOption,
    MetricsOption,
    OptionalQrelsOption,
    PerQueryOption,
    ReleaseOption,
    RelevanceLevelOption,
    SeedOption,
    app,
)

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
        "(alpha 0.05, 80% power, paired).",
        show_default=False,
    ),
]
AlphaOption = Annotated[float, typer.Option("--alpha", min=0.0, max=1.0, help="Family-wise significance level.")]


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
    return scoring_bodies.score(**locals())  # locals() here: the options as Typer read them


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
    return scoring_bodies.compare(**locals())  # locals() here: the options as Typer read them


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
    return scoring_bodies.baseline(**locals())  # locals() here: the options as Typer read them


@app.command()
def report(
    release: Annotated[
        str,
        typer.Option(
            "--release", help="The release to report on: WORKSPACE@VERSION (testset@1.0.0) or a release directory."
        ),
    ],
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
    return scoring_bodies.report(**locals())  # locals() here: the options as Typer read them
