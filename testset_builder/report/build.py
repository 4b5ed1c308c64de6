"""The report of a release: one self-contained HTML file (inline SVG plots, inline CSS, no script, no network).

Sections: what the set holds (queries by origin, labels by grade and origin, question-source word overlap), which
questions separate the runs (:mod:`~testset_builder.metrics.diagnostics`), a sample
of questions with their source chunk, the review's agreement, the trust figures (the relevance estimate's spread and
its calibration against the drawn verdicts), each scored run's metrics with intervals (on a release with estimates,
the figure that applies, as `score` gives it) with recall@k curves, and the lineage (models, prompts, policy).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from jinja2 import Environment, PackageLoader, select_autoescape

from .._version import __version__
from ..export.hf import data_files, read_rows
from ..labels.fitting import release_quality
from ..metrics import parse_metrics
from ..metrics.clusters import resolve_clusters
from ..metrics.diagnostics import of_release
from ..metrics.figures import one_figure
from ..metrics.many import DEFAULT_TARGETS, evaluate_with_curve, smallest_k
from ..metrics.online import online_signals
from ..metrics.prediction import ReleasePool, prediction_report, release_pairs, stratum_of
from ..metrics.report import few_queries, score_dict
from ..metrics.transfer import transfer_of
from ..questions import lexical_overlap
from ..tables import Run
from . import plots

SAMPLE_SIZE = 12
REPORT_METRICS = "recall@10,precision@10,mrr,ndcg@10,hit_rate@5,map"


@dataclass
class Report:
    title: str
    version: str
    counts: dict
    plots: dict[str, str] = field(default_factory=dict)  # name -> inline SVG
    sample: list[dict] = field(default_factory=list)
    overlap: dict | None = None
    review: dict = field(default_factory=dict)
    trust: dict | None = None
    online: dict | None = None  # online signals, when the release carries production logs
    transfer: dict | None = None  # synthetic questions against real queries (metrics.transfer), when it has both
    coverage: dict | None = None  # the logged traffic its questions cover (metrics.coverage), when measured
    questions: dict | None = None  # which questions separate the runs (metrics.diagnostics)
    runs: list[dict] = field(default_factory=list)
    targets: tuple[float, ...] = DEFAULT_TARGETS
    clusters: str = ""
    lineage: dict = field(default_factory=dict)
    generator: str = __version__


def origins(release) -> dict[tuple[str, str], str]:
    """Each qrel's origin, from the release's ``judgments`` data (human, synthetic-source, llm-unverified)."""
    files = data_files(release.path).get("judgments") or []
    rows = read_rows(files, ("query-id", "corpus-id", "origin")) if files else []
    return {(str(r["query-id"]), str(r["corpus-id"])): r["origin"] for r in rows}


def passage(release, chunk_id: str) -> str:
    doc = release.corpus.get(chunk_id) or {}
    return "\n".join(part for part in (doc.get("title"), doc.get("text")) if part)


def build_report(release, runs: Sequence[Run] = (), seed: int = 0, coverage: dict | None = None) -> Report:
    """The report of ``release`` and ``runs``; ``coverage``: how much of the logged traffic its questions cover, as
    the workspace measured it (:mod:`~testset_builder.metrics.coverage`), when it has a log."""
    manifest, counts = release.manifest, release.manifest["counts"]
    report = Report(manifest.get("name") or "test set", manifest["version"], counts, coverage=coverage)
    origin = origins(release)
    by_origin = Counter(origin.values())
    report.plots["queries_by_origin"] = plots.bars(
        list(counts["queries_by_origin"]), list(counts["queries_by_origin"].values()), "query origin", "queries"
    )
    report.plots["labels_by_grade"] = plots.bars(
        [f"grade {g}" for g in counts["qrels_by_grade"]], list(counts["qrels_by_grade"].values()), "", "qrels"
    )
    report.plots["labels_by_origin"] = plots.bars(list(by_origin), list(by_origin.values()), "label origin", "qrels")

    sources = sorted(pair for pair, o in origin.items() if o == "synthetic-source" and pair[0] in release.queries)
    overlaps = [lexical_overlap(release.queries[q], passage(release, c)) for q, c in sources]
    if overlaps:
        report.overlap = {
            "questions": len(overlaps),
            "mean": sum(overlaps) / len(overlaps),
            "contained": sum(o >= 1.0 for o in overlaps) / len(overlaps),
        }
        report.plots["overlap"] = plots.histogram(overlaps, 10, "share of the question's content words in its source")
    labelled = sorted((q, c) for q, chunks in release.qrels.items() for c, g in chunks.items() if g >= 1)
    chosen = random.Random(seed).sample(labelled, min(SAMPLE_SIZE, len(labelled)))
    report.sample = [
        {
            "query_id": q, "question": release.queries.get(q, ""), "chunk_id": c,
            "passage": passage(release, c)[:600], "grade": release.qrels[q][c], "origin": origin.get((q, c), "?"),
        }
        for q, c in sorted(chosen)
    ]  # fmt: skip

    lineage = manifest.get("lineage", {})
    report.review = {"reviewers": lineage.get("reviewers", []), **(lineage.get("review_agreement") or {})}
    report.lineage = {
        "models": lineage.get("models", []),
        "prompts": lineage.get("prompts", []),
        "rules": manifest.get("policy", {}).get("rules", []),
        "content_sha256": manifest.get("content_sha256"),
        "parent_version": manifest.get("parent_version"),
        "created_at": manifest.get("created_at"),
        "testset_builder_version": manifest.get("testset_builder_version"),
    }
    if release.estimates:
        report.trust = trust(release.estimates, counts.get("estimates", {}), report.plots)
    if release.logs:
        report.online = online_signals(release.logs, release.qrels, release.production, seed=seed)
        if release.production_note:
            report.online["production_note"] = release.production_note
    pool = ReleasePool(release.estimates) if release.estimates and runs else None
    specs = parse_metrics(REPORT_METRICS)
    evaluated = [evaluate_with_curve(release.qrels_table(), run, specs) for run in runs]
    for run, (evaluation, curve) in zip(runs, evaluated):
        report.runs.append(scored_run(release, run, report, evaluation, curve, pool))
    means = {r["name"]: {m: entry["mean"] for m, entry in r["metrics"].items()} for r in report.runs}
    report.questions = of_release(release, runs, [e for e, _ in evaluated], means).as_dict()
    checked = transfer_of([e for e, _ in evaluated], lambda q: release.query_meta.get(q, {}).get("origin"), seed=seed)
    report.transfer = checked.as_dict() if checked is not None else None
    if report.runs:
        ks = list(range(1, len(report.runs[0]["recall_curve"]) + 1))
        report.plots["recall_curves"] = plots.curves(
            {r["name"]: (ks, r["recall_curve"]) for r in report.runs}, "k (log scale)", "recall@k", report.targets
        )
    return report


def trust(rows: list[dict], counts: dict, figures: dict) -> dict:
    """The estimate's spread over the pairs no human labelled, its calibration on the verdicts drawn at random (the
    sample stratum: pairs taken for sure were chosen for a high estimate, so they would lean its share high), and its
    quality on every human verdict (:func:`~testset_builder.labels.fitting.release_quality`, as `score` says it)."""
    estimated = [row["p_relevant"] for row in rows if row["label"] is None and row["p_relevant"] is not None]
    drawn = [
        (row["p_relevant"], int(row["label"] >= 1))
        for row in rows
        if row["draw"]
        and row["draw"]["drawn"]
        and stratum_of(row) == "sample"
        and row["origin"] == "human"
        and row["p_relevant"] is not None
    ]
    if estimated:
        figures["estimates"] = plots.histogram(estimated, 20, "estimated P(relevant) of the pairs no human labelled")
    if drawn:
        figures["calibration"] = plots.calibration([p for p, _ in drawn], [y for _, y in drawn])
    pairs = release_pairs(rows)
    quality = release_quality(rows)
    return {
        **counts,
        "drawn_relevant_share": sum(y for _, y in drawn) / len(drawn) if drawn else None,
        "drawn_mean_estimate": sum(p for p, _ in drawn) / len(drawn) if drawn else None,
        "expected_relevant": sum(p for _, _, p, _, label in pairs if label is None),
        "held_out_auc": quality["auc"] if quality else None,
        "held_out_ece": quality["ece"] if quality else None,
        "quality_word": quality["quality"] if quality else None,
        "quality": quality["in_words"] if quality else None,
    }


def scored_run(release, run: Run, report: Report, evaluation, curve, pool: ReleasePool | None = None) -> dict:
    """A run's metrics with intervals resampling the release's clusters (a synthetic question's source document, a
    logged query's session), its recall@k for k = 1..100 and the smallest k reaching each target recall. On a
    release with estimates (``pool`` their pairs), each metric's figure is the one that applies, as `score` gives
    it (:func:`~testset_builder.metrics.figures.one_figure`). ``evaluation`` and ``curve``: the run's, on the release's
    labels."""
    specs = parse_metrics(REPORT_METRICS)
    clusters = resolve_clusters(evaluation.query_ids, "auto", release.source_document, session=release.session)
    report.clusters = clusters.describe()
    scored = score_dict(evaluation, clusters=clusters.codes)
    if release.estimates:
        pool = pool or ReleasePool(release.estimates)
        scored = one_figure(scored, prediction_report(release.estimates, run, specs, pool=pool))
    return {
        "name": run.name,
        "metrics": scored["metrics"],
        "estimates": scored.get("estimates"),
        "queries": scored["queries"],
        "few_queries": few_queries(scored["queries"]["evaluated_queries"]),
        "clustered": clusters.codes is not None,
        "recall_curve": [float(v) for v in curve],
        "target_recall": {target: smallest_k(curve, target) for target in report.targets},
    }


def render(report: Report) -> str:
    environment = Environment(
        loader=PackageLoader("testset_builder.report", "templates"), autoescape=select_autoescape(["html"])
    )
    return environment.get_template("report.html").render(report=report)
