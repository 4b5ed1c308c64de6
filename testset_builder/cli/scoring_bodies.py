"""What the scoring commands do once their arguments are read: score, compare, baseline, report.

The commands' declarations (:mod:`~testset_builder.cli.scoring`) call these with what Typer read; a plain line is
read by :mod:`~testset_builder.cli.direct` and calls them without Typer. Neither Typer nor rich is imported here:
a ``--json`` run prints its document with ``print``, and ``out`` makes its rich console only for a report.
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import api
from .output import EXIT_OK, EXIT_REGRESSION, err, escape, out


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


def score(
    more,
    run,
    runs,
    qrels,
    release,
    metrics,
    json_output,
    per_query,
    ci,
    resamples,
    seed,
    cluster_by,
    clusters_file,
    cluster_field,
    target_recall,
    detect,
    alpha,
    relevance_level,
    details,
) -> None:
    """`score`: see its declaration in :mod:`~testset_builder.cli.scoring`."""
    from ..errors import InputError
    from ..export import read_runs
    from ..export.reports import check_writable, write_per_query_csv
    from ..metrics import parse_metrics

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
    if per_query:
        write_per_query_csv(scored.evaluations, per_query)
    if json_output:
        print(json.dumps(scored.as_dict(), indent=2))
        return
    score_report(scored, alpha, ci, relevance_level, release is not None, details, per_query)


def score_report(scored, alpha: float, ci: bool, relevance_level: int, release: bool, details: bool, per_query) -> None:
    """`score`'s report for people, on ``out``: the tables and the lines under them."""
    import numpy as np

    from ..metrics.coverage import traffic_coverage_lines
    from ..metrics.guidance import cluster_line, half_width_line, recall_curves_table, runs_table, set_size_line
    from ..metrics.report import details_table, diagnostic_lines, estimate_lines, score_table
    from ..metrics.transfer import transfer_lines

    reports, best, clusters, sizes = scored.reports, scored.against_best, scored.cluster_design, scored.sizes
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
    for line in coverage_lines(runs, len(reports) > 1, relevance_level, release):
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


def compare(
    runs,
    qrels,
    release,
    metrics,
    test,
    alpha,
    resamples,
    json_output,
    per_query,
    seed,
    cluster_by,
    clusters_file,
    cluster_field,
    detect,
    fail_if_worse,
    relevance_level,
) -> int | None:
    """`compare`: see its declaration in :mod:`~testset_builder.cli.scoring`."""
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
        return EXIT_REGRESSION
    return None


def baseline(release, out_file, retriever, k, json_output) -> None:
    """`baseline`: see its declaration in :mod:`~testset_builder.cli.scoring`."""
    made = api.baseline(release, retriever, k, out_file)
    if json_output:
        print(json.dumps(made.as_dict()))
        return
    out.print(
        f"{retriever} run over {made.chunks} chunks for {made.queries} queries of release {made.version} -> {out_file}"
    )


def report(release, run, out_file, json_output) -> None:
    """`report`: see its declaration in :mod:`~testset_builder.cli.scoring`."""
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
