"""Reports of scores and comparisons: rich tables for people, dicts for ``--json``, CSV for per-query values."""

from __future__ import annotations

import csv
from pathlib import Path

from rich.table import Table

from ..errors import InputError
from .compare import Comparison
from .evaluate import Evaluation
from .stats import bootstrap_ci


def score_dict(evaluation: Evaluation, ci: bool = True, resamples: int = 1000, seed: int = 0) -> dict:
    metrics = {}
    for spec in evaluation.metrics:
        name = str(spec)
        entry = {"mean": evaluation.mean(spec)}
        if ci:
            low, high = bootstrap_ci(evaluation.per_query[name], resamples=resamples, seed=seed)
            entry.update(ci_low=low, ci_high=high)
        metrics[name] = entry
    return {"run": evaluation.run_name, "metrics": metrics, "queries": evaluation.summary.as_dict()}


def score_table(report: dict) -> Table:
    table = Table(title=f"run {report['run']}", title_justify="left")
    table.add_column("metric")
    table.add_column("mean", justify="right")
    with_ci = any("ci_low" in entry for entry in report["metrics"].values())
    if with_ci:
        table.add_column("95% CI", justify="right")
    for name, entry in report["metrics"].items():
        cells = [name, f"{entry['mean']:.4f}"]
        if with_ci:
            cells.append(f"[{entry['ci_low']:.4f}, {entry['ci_high']:.4f}]")
        table.add_row(*cells)
    return table


def queries_line(summary: dict) -> str:
    parts = [f"{summary['evaluated_queries']} queries scored (all qrels queries)"]
    if summary["qrels_queries_without_run"]:
        parts.append(f"{summary['qrels_queries_without_run']} had no results in the run and score 0")
    if summary["dropped_run_queries"]:
        parts.append(f"{summary['dropped_run_queries']} run queries not in the qrels were dropped")
    if summary["queries_without_relevant"]:
        parts.append(f"{summary['queries_without_relevant']} have no relevant chunk and score 0")
    return "; ".join(parts)


def comparison_table(comparison: Comparison) -> Table:
    label = "randomization test" if comparison.test == "randomization" else "t-test"
    several = len(comparison.candidates) > 1
    table = Table(
        title=f"{', '.join(comparison.candidates)} vs baseline {comparison.baseline} ({comparison.queries} queries)",
        title_justify="left",
        caption=f"Holm: {label} p-value, Holm-corrected over all {len(comparison.rows)} tests; "
        f"sig. when < {comparison.alpha}. diff: run - baseline, [95% bootstrap CI].",
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


def write_per_query_csv(evaluations: list[Evaluation], path: str | Path) -> None:
    """One row per (run, query) with a column per metric; queries in the evaluations' (sorted id) order."""
    names = [str(spec) for spec in evaluations[0].metrics]
    check_writable(path, "--per-query")
    with Path(path).open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["run", "query_id", *names])
        for evaluation in evaluations:
            columns = [evaluation.per_query[name] for name in names]
            for i, query_id in enumerate(evaluation.query_ids):
                writer.writerow([evaluation.run_name, query_id, *(repr(float(column[i])) for column in columns)])


def check_writable(path: str | Path, option: str) -> None:
    """A clear error before any work when ``path`` cannot be written: its folder is missing, or it is a folder."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{option}: is a directory, expected a file name", path=path)
    if not path.parent.is_dir():
        raise InputError(f"{option}: no such folder {str(path.parent)!r} (create it first)", path=path)
