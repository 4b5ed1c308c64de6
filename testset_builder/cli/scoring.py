"""Scoring commands: score, compare, baseline."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from .app import (
    DEFAULT_METRICS,
    JsonOption,
    MetricsOption,
    OptionalQrelsOption,
    PerQueryOption,
    ReleaseOption,
    SeedOption,
    app,
    labels_and_estimates,
    out,
    release_from,
)


@app.command()
def score(
    run: Annotated[
        list[Path],
        typer.Option(
            "--run",
            "-r",
            help="A run: TREC (qid Q0 docid rank score tag) or JSONL. Repeat for several.",
            show_default=False,
        ),
    ],
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
) -> None:
    """Score runs against qrels with trec_eval's conventions.

    Every query of the qrels counts: a query the run missed scores 0, and run queries the qrels lack are dropped;
    the summary line says how many of each.

    On a release that carries estimates (estimates.jsonl: labels part human, part estimated), each run also gets
    prediction-powered figures for precision@k, recall@k and nDCG@k: the estimates corrected by the human verdicts
    on pairs drawn at random (`select`), with 95% intervals, next to the human-only and estimate-only figures, and
    a line saying which applies. Precision's is design-unbiased; recall's and nDCG's (marked *) are the metrics'
    expectations under the estimates recalibrated on the verdicts, corrected verdict by verdict (model-assisted).
    JSON: the `prediction_powered` key.

    Example: `testset-builder score --release testset@latest --run bm25.trec --metrics ndcg@10,recall@10`.
    """
    from ..export import read_run
    from ..metrics import evaluate, parse_metrics
    from ..metrics.prediction import prediction_report
    from ..metrics.report import (
        check_writable,
        prediction_lines,
        prediction_table,
        queries_line,
        score_dict,
        score_table,
        write_per_query_csv,
    )  # fmt: skip

    specs = parse_metrics(metrics)
    if per_query:
        check_writable(per_query, "--per-query")
    labels, estimates = labels_and_estimates(qrels, release)
    runs = [read_run(path) for path in run]
    evaluations = [evaluate(labels, r, specs) for r in runs]
    reports = [score_dict(e, ci=ci, resamples=resamples, seed=seed) for e in evaluations]
    if estimates:
        for report, r in zip(reports, runs):
            report["prediction_powered"] = prediction_report(estimates, r, specs)
    if per_query:
        write_per_query_csv(evaluations, per_query)
    if json_output:
        print(json.dumps(reports[0] if len(reports) == 1 else reports, indent=2))
        return
    for report in reports:
        out.print(score_table(report))
        if "prediction_powered" in report:
            out.print(prediction_table(report["run"], report["prediction_powered"]))
            for line in prediction_lines(report["prediction_powered"]):
                out.print(line, highlight=False)
    out.print(queries_line(reports[0]["queries"]))
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
    alpha: Annotated[float, typer.Option("--alpha", min=0.0, max=1.0, help="Family-wise significance level.")] = 0.05,
    resamples: Annotated[int, typer.Option("--resamples", min=100, help="Randomization-test permutations.")] = 10_000,
    json_output: JsonOption = False,
    per_query: PerQueryOption = None,
    seed: SeedOption = 0,
) -> None:
    """Compare runs on the same qrels: paired differences, 95% bootstrap intervals, t and randomization tests.

    On a release that carries estimates, also the paired prediction-powered difference of each run from the
    baseline for precision@k, recall@k and nDCG@k, with its 95% interval (JSON: `prediction_powered`).

    p-values are Holm-corrected over every (run, metric) test shown, so 'significant' controls the family-wise
    error at --alpha.

    Example: `testset-builder compare bm25.trec dense.trec --release testset@latest --metrics ndcg@10,recall@10`.
    """
    from ..errors import InputError
    from ..export import read_run
    from ..metrics import evaluate, parse_metrics
    from ..metrics.compare import compare as compare_runs
    from ..metrics.prediction import prediction_differences
    from ..metrics.report import (
        check_writable,
        comparison_table,
        prediction_difference_table,
        queries_line,
        write_per_query_csv,
    )  # fmt: skip

    if len(runs) < 2:
        raise InputError("compare needs at least two runs (the first is the baseline)")
    specs = parse_metrics(metrics)
    if per_query:
        check_writable(per_query, "--per-query")
    labels, estimates = labels_and_estimates(qrels, release)
    loaded = [read_run(path) for path in runs]
    if len({r.name for r in loaded}) < len(loaded):  # runs sharing a tag are called by their files' names
        loaded = [replace(r, name=path.stem) for r, path in zip(loaded, runs)]
    evaluations = [evaluate(labels, r, specs) for r in loaded]
    result = compare_runs(evaluations[0], evaluations[1:], test=test, alpha=alpha, resamples=resamples, seed=seed)
    differences = prediction_differences(estimates, loaded[0], loaded[1:], specs) if estimates else None
    if per_query:
        write_per_query_csv(evaluations, per_query)
    if json_output:
        print(json.dumps({**result.as_dict(), **({"prediction_powered": differences} if estimates else {})}, indent=2))
        return
    out.print(comparison_table(result))
    if differences:
        out.print(prediction_difference_table(loaded[0].name, differences))
    out.print(queries_line(evaluations[0].summary.as_dict()))


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
    from ..export import write_trec_run
    from ..retrieval.baseline import baseline_run

    loaded, cache = release_from(release)
    run = baseline_run(loaded.corpus, loaded.queries, retriever, k, cache)
    write_trec_run(run, out_file)
    if json_output:
        print(json.dumps({"run": str(out_file), "retriever": retriever, "version": loaded.version, "k": k}))
        return
    out.print(
        f"{retriever} run over {len(loaded.corpus)} chunks for {len(loaded.queries)} queries of release "
        f"{loaded.version} -> {out_file}"
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
    and the lineage. Plots are inline SVG; the page loads nothing from the network.

    Example: `testset-builder report --release testset@latest --run bm25.trec --run dense.trec`.
    """
    from ..errors import InputError
    from ..export import read_run
    from ..report import build_report, render

    if release is None:
        raise InputError("give --release WORKSPACE@VERSION (or a release directory)")
    loaded, _ = release_from(release)
    if out_file is None:
        if "@" not in release or Path(release).exists():
            raise InputError("give --out FILE.html for a release directory")
        out_file = Path(release.rsplit("@", 1)[0]) / "reports" / f"{loaded.version}.html"
    runs = [read_run(path) for path in run or []]
    html = render(build_report(loaded, runs))
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(html, encoding="utf-8")
    if json_output:
        print(json.dumps({"report": str(out_file), "version": loaded.version, "runs": [r.name for r in runs]}))
        return
    out.print(f"report of release {loaded.version} ({len(runs)} runs scored) -> {out_file}", highlight=False)
