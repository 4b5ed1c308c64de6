"""Reports of scores and comparisons: rich tables for people, dicts for ``--json``, CSV for per-query values. rich is
imported by the functions that draw (a ``--json`` report never does)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .compare import Comparison
from .evaluate import Evaluation
from .figures import LABELLED_ONLY
from .prediction import KINDS
from .stats import bootstrap_intervals, design_effects

if TYPE_CHECKING:
    from rich.table import Table


def score_dicts(
    evaluations: list[Evaluation],
    ci: bool = True,
    resamples: int = 1000,
    seed: int = 0,
    clusters: np.ndarray | None = None,
) -> list[dict]:
    """Each run's means, with percentile bootstrap intervals (of clusters when ``clusters`` is given: then also
    each metric's design effect). Every (run, metric) column shares one set of resamples: the same draws separate
    seeded calls would make, drawn once."""
    names = [str(spec) for spec in evaluations[0].metrics]
    values = np.column_stack([e.per_query[name] for e in evaluations for name in names])
    width = len(names)
    if ci:
        low, high = bootstrap_intervals(values, clusters, resamples=resamples, seed=seed)
    effects = design_effects(values, clusters) if clusters is not None else None
    reports = []
    for r, evaluation in enumerate(evaluations):
        metrics = {}
        for i, name in enumerate(names):
            column = r * width + i
            metrics[name] = {"mean": evaluation.mean(name)}
            if ci:
                metrics[name].update(ci_low=float(low[column]), ci_high=float(high[column]))
            if effects is not None:
                metrics[name]["design_effect"] = float(effects[column])
        reports.append({"run": evaluation.run_name, "metrics": metrics, "queries": evaluation.summary.as_dict()})
    return reports


def score_dict(
    evaluation: Evaluation, ci: bool = True, resamples: int = 1000, seed: int = 0, clusters: np.ndarray | None = None
) -> dict:
    """One run's report (see :func:`score_dicts`)."""
    return score_dicts([evaluation], ci, resamples, seed, clusters)[0]


def score_table(report: dict) -> Table:
    """One run's figures; on a release with estimates each says what it is (its ``kind``)."""
    from rich.table import Table

    entries = report["metrics"].values()
    table = Table(title=f"run {report['run']}", title_justify="left", caption=kinds_caption(report))
    table.add_column("metric")
    table.add_column("mean", justify="right")
    with_ci = any("ci_low" in entry for entry in entries)
    with_effect = any("design_effect" in entry for entry in entries)
    with_kind = any("kind" in entry for entry in entries)
    if with_ci:
        table.add_column("95% CI", justify="right")
    if with_effect:
        table.add_column("design effect", justify="right")
    if with_kind:
        table.add_column("figure")
    for name, entry in report["metrics"].items():
        cells = [name, f"{entry['mean']:.4f}"]
        if with_ci:
            cells.append(f"[{entry['ci_low']:.4f}, {entry['ci_high']:.4f}]" if "ci_low" in entry else "none")
        if with_effect:
            cells.append(f"{entry['design_effect']:.2f}" if "design_effect" in entry else "")
        if with_kind:
            cells.append(entry["kind"])
        table.add_row(*cells)
    return table


INTERVALS = {  # what each kind of figure's 95% interval resamples
    KINDS["ppi"]: "over the review's random draw, for these queries",
    KINDS["qrels"]: "bootstrap over queries",
    KINDS["estimate"]: "none: no verdict was drawn at random",
    LABELLED_ONLY: "bootstrap over queries; the estimator does not cover this metric",
}


def kinds_caption(report: dict) -> str | None:
    """What each kind of figure in ``report`` is and what its interval resamples; None when no figure has a kind."""
    kinds = list(dict.fromkeys(entry["kind"] for entry in report["metrics"].values() if "kind" in entry))
    return "; ".join(f"{kind}: 95% interval {INTERVALS[kind]}" for kind in kinds) or None


def few_queries(queries: int) -> str:
    """What a figure on few queries says of how few ('' from :data:`~.power.FEW_CLUSTERS` queries on):
    "3 queries: too few for a stable figure ...". A mean over n queries moves by up to 1/n with one query."""
    from .power import FEW_CLUSTERS

    if not 0 < queries < FEW_CLUSTERS:
        return ""
    return (
        f"{queries} {'query' if queries == 1 else 'queries'}: too few for a stable figure (one query moves a mean by "
        f"up to {1 / queries:.2g}; under {FEW_CLUSTERS} queries an interval is rough)"
    )


def queries_line(summary: dict, run: str | None = None) -> str:
    """Which queries were scored and why some score 0 (``run``: the run named in it)."""
    parts = [f"{summary['evaluated_queries']} queries scored (all qrels queries)"]
    if empty := empty_queries(summary, run):
        parts.append(empty)
    if summary["dropped_run_queries"]:
        parts.append(f"{summary['dropped_run_queries']} run queries not in the qrels were dropped")
    if summary["queries_without_relevant"]:
        parts.append(f"{summary['queries_without_relevant']} have no relevant chunk and score 0")
    return "; ".join(parts)


def empty_queries(summary: dict, run: str | None = None) -> str | None:
    """The queries a run gave nothing for, which score 0, named (the first few) and counted; None if none."""
    from rich.markup import escape

    count = summary["qrels_queries_without_run"]
    if not count:
        return None
    named = [escape(str(q)) for q in summary.get("qrels_queries_without_run_ids") or []]
    more = count - len(named)
    listed = f" ({', '.join(named)}{f' and {more} more' if more > 0 else ''})" if named else ""
    return f"{count} had no results in {'the run' if run is None else escape(run)} and score 0{listed}"


def other_runs_empty_lines(summaries: list[tuple[str, dict]]) -> list[str]:
    """For the runs after the first: the queries each gave nothing for (each run may leave others empty)."""
    return [f"  {line}" for run, summary in summaries[1:] if (line := empty_queries(summary, run))]


def comparison_table(comparison: Comparison, resampled: str = "queries", labelled_only: bool = False) -> Table:
    """Each run against the baseline per metric; ``labelled_only``: on a release with estimates, the table reads the
    labelled pairs alone and its title says so."""
    from rich.table import Table

    label = "randomization test" if comparison.test == "randomization" else "t-test"
    several = len(comparison.candidates) > 1
    which = " on the labelled pairs only" if labelled_only else ""
    table = Table(
        title=f"{', '.join(comparison.candidates)} vs baseline {comparison.baseline} ({comparison.queries} queries)"
        + which,
        title_justify="left",
        caption=f"Holm: {label} p-value, Holm-corrected over all {len(comparison.rows)} tests; "
        f"sig. when < {comparison.alpha}. diff: run - baseline, [95% bootstrap CI, resampling {resampled}].",
        caption_justify="left",
    )
    table.add_column("metric", no_wrap=True)
    if several:
        table.add_column("run", no_wrap=True)
    for column in ("base", "run", "diff [95% CI]", "p t", "p rand", "Holm", "sig."):
        table.add_column(column, justify="right", no_wrap=True)
    for row in comparison.rows:
        cells = [row.metric] + ([row.candidate] if several else [])
        cells += [
            f"{row.baseline_mean:.4f}",
            f"{row.candidate_mean:.4f}",
            f"{row.difference:+.4f} [{row.ci_low:+.3f}, {row.ci_high:+.3f}]",
            f"{row.p_t:.4f}",
            f"{row.p_randomization:.4f}",
            f"{row.p_adjusted:.4f}",
            "[bold green]yes[/]" if row.significant else "no",
        ]
        table.add_row(*cells)
    return table


def _cell(figure: dict | None) -> str:
    if figure is None:
        return "n/a"
    if "ci_low" not in figure:
        return f"{figure['mean']:.4f}"
    return f"{figure['mean']:.4f} [{figure['ci_low']:.4f}, {figure['ci_high']:.4f}]"


def details_table(report: dict) -> Table:
    """``score --details``: beside each metric's figure that applies, the others the release allows: the estimator's
    prediction-powered, human-only and estimate-only figures, and the labelled pairs alone, unweighted."""
    from rich.table import Table

    table = Table(
        title=f"run {report['run']}: every figure (the first applies)",
        title_justify="left",
        caption="[95% CI]. Human-only: the verdicts alone, weighted by their draw. Estimate-only: the estimates "
        "alone. Labelled pairs: unweighted, so they read high where reviewers saw the likeliest pairs.",
        caption_justify="left",
    )
    for column in ("metric", "applies", "prediction-powered", "human-only", "estimate-only", "labelled pairs"):
        table.add_column(column, justify="left" if column == "metric" else "right", no_wrap=True)
    details = report["details"]
    for name, entry in report["metrics"].items():
        estimator = details["estimator"].get(name)
        cells = [name, f"{_cell(entry)} {entry['kind']}"]
        if estimator is None:
            cells += ["n/a", "n/a", "n/a"]
        else:
            cells += [_cell(estimator["ppi"]), _cell(estimator["human_only"]), _cell(estimator["estimate_only"])]
        table.add_row(*cells, _cell(details["labelled_pairs"][name]))
    return table


def estimate_lines(report: dict, quality: dict | None) -> list[str]:
    """Once for a release with estimates: which figure applies and why, how many more verdicts would halve the
    intervals, and the estimate's quality in one word."""
    estimates = report["estimates"]
    figure = KINDS[estimates["applies"]]
    lines = [
        f"figures: {figure} for precision@k, recall@k and nDCG@k ({estimates['why']}; {estimates['queries']} "
        f"queries, {estimates['pairs']} pairs, relevance {estimates['relevance']})"
    ]
    halving = {entry.get("more_verdicts_to_halve") for entry in report["metrics"].values()} - {None}
    if halving:
        lines.append(
            f"about {max(halving)} more verdicts drawn at random (`select`, then review) would halve the "
            "prediction-powered intervals"
        )
    if any(entry.get("kind") == LABELLED_ONLY for entry in report["metrics"].values()):
        lines.append(
            "labelled pairs only: the estimator does not cover these metrics, so they read the labelled pairs alone "
            "(high where reviewers saw the likeliest pairs)"
        )
    if estimates["grade_2_share"] is not None and estimates["applies"] == "ppi":
        lines.append(
            f"from the drawn verdicts: {estimates['grade_2_share']:.0%} of relevant pairs are highly relevant "
            "(nDCG's gain 2)"
        )
    if quality is not None:
        lines.append(f"the estimate: {quality['in_words']}")
    return lines


def diagnostic_lines(report: dict, run: str | None = None) -> list[str]:
    """A run's diagnostics in words: how much of its top results the release covers, and the estimate's
    calibration there (``run``: the run named in them)."""
    from rich.markup import escape

    estimates = report["estimates"]
    named = "" if run is None else f"{escape(run)}: "
    diagnostics = estimates["diagnostics"]
    coverage = next((v for k, v in diagnostics.items() if k.startswith("pool_coverage")), None)
    calibration = diagnostics["calibration"]
    drawn_key = next(k for k in calibration if k.startswith("drawn_in_top"))
    lines = []
    if coverage is not None:
        lines.append(
            f"{named}pool coverage: {coverage:.1%} of its top results were estimated or labelled (the rest count as "
            "not relevant"
            + ("; pool the run with `propose --runs` before `select` to estimate them)" if coverage < 0.95 else ")")
        )
    if calibration[drawn_key]:
        lines.append(
            f"{named}calibration on its own top results: {calibration[drawn_key]} drawn verdicts, humans said "
            f"relevant {calibration['human_relevant_share']:.1%}, the estimate {calibration['mean_estimate']:.1%}"
        )
    elif estimates["applies"] == "ppi":
        lines.append(
            f"[yellow]warning:[/] {named}no drawn verdict falls in this run's top results, so its intervals cannot "
            "show how the estimates err there (they may be too narrow); draw more pairs for review (`select`)"
        )
    return lines


def prediction_difference_table(baseline: str, differences: list[dict]) -> Table:
    from rich.table import Table

    table = Table(
        title=f"differences from baseline {baseline} by the figure that applies",
        title_justify="left",
        caption="diff: run - baseline, paired over the release's pairs, [95% CI]; estimate: no drawn verdicts yet",
        caption_justify="left",
    )
    for column in ("metric", "run", "diff [95% CI]", "figure"):
        table.add_column(column, no_wrap=True, justify="right" if column == "diff [95% CI]" else "left")
    for row in differences:
        cell = f"{row['mean']:+.4f}" + (f" [{row['ci_low']:+.4f}, {row['ci_high']:+.4f}]" if "ci_low" in row else "")
        table.add_row(row["metric"], row["run"], cell, "prediction-powered" if row["use"] == "ppi" else "estimate")
    return table
