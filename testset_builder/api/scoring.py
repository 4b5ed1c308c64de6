"""Scoring: ``score``, ``compare``, ``baseline``, ``report``, and retriever callables as runs."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .releases import load_release, workspace_of

if TYPE_CHECKING:
    from ..metrics.clusters import Clusters
    from ..metrics.compare import Comparison
    from ..metrics.diagnostics import QuestionDiagnostics
    from ..metrics.evaluate import Evaluation
    from ..metrics.gate import GateOutcome
    from ..metrics.power import SetSize
    from ..metrics.transfer import Transfer
    from ..stages.release import LoadedRelease
    from ..tables import Qrels, Run

Retriever = Callable[[str], Iterable[Any]]
DEFAULT_METRICS = "recall@10,precision@10,mrr,ndcg@10,hit_rate@5,map"  # what `score` reports unless told
GATE_RULE = "fail when the one-sided (1 - alpha/g) bootstrap upper bound of mean(run - baseline) < -margin"


@dataclass
class BaselineResult:
    run: Run
    retriever: str
    version: str
    k: int
    path: Path | None = None
    chunks: int = 0  # of the release's corpus the run searched
    queries: int = 0

    def as_dict(self) -> dict:
        return {"run": str(self.path) if self.path else None, "retriever": self.retriever, "version": self.version,
                "k": self.k}  # fmt: skip


def baseline(
    release: str | Path | LoadedRelease, retriever: str = "bm25", k: int = 100, out: str | Path | None = None
) -> BaselineResult:
    """A baseline run (``bm25``, or ``dense`` with the dense extra) over a release's own corpus and queries;
    written to ``out`` (TREC) when given."""
    from ..export import write_trec_run
    from ..retrieval.baseline import baseline_run

    loaded, root = load_release(release), workspace_of(release)
    made = baseline_run(loaded.corpus, loaded.queries, retriever, k, root / "indexes" if root is not None else None)
    if out is not None:
        write_trec_run(made, Path(out))
    return BaselineResult(
        made, retriever, loaded.version, k, Path(out) if out is not None else None, len(loaded.corpus),
        len(loaded.queries),
    )  # fmt: skip


@dataclass
class ReportResult:
    path: Path
    version: str
    runs: list[str]
    online: dict | None = None  # the production logs' figures, on a release that carries them
    coverage: dict | None = None  # the logged traffic its questions cover (stages.release.coverage)

    def as_dict(self) -> dict:
        document = {"report": str(self.path), "version": self.version, "runs": self.runs}
        extra = {"online": self.online, "coverage": self.coverage}
        return {**document, **{key: value for key, value in extra.items() if value}}


def report(
    release: str | Path | LoadedRelease, runs: Sequence[Run | str | Path] = (), out: str | Path | None = None
) -> ReportResult:
    """One self-contained HTML page about a release and the runs scored on it (``Run`` objects or run files);
    written to ``out``, by default ``WORKSPACE/reports/VERSION.html`` for a workspace's release."""
    from ..export import read_run
    from ..report import build_report, render

    loaded = load_release(release)
    if out is None:
        root = workspace_of(release)
        if root is None:
            raise InputError("give out=FILE.html for a release directory")
        out = root / "reports" / f"{loaded.version}.html"
    read = [r if hasattr(r, "table") else read_run(r) for r in runs]
    built = build_report(loaded, read, coverage=_coverage(loaded))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(built), encoding="utf-8")
    return ReportResult(out, loaded.version, [r.name for r in read], built.online, built.coverage)


def retrieve(retriever: Retriever, queries: Mapping[str, str], k: int = 100, name: str | None = None) -> Run:
    """The run a retriever makes on ``queries`` (id -> text): its top ``k`` results for each. A result is a
    (chunk id, score) pair, or a chunk id alone (then ranked by position: first is best)."""
    from ..tables import Run

    scored: dict[str, dict[str, float]] = {}
    for query_id, text in queries.items():
        found = retriever(text)
        if found is None or isinstance(found, str | bytes) or not hasattr(found, "__iter__"):
            raise InputError(
                f"the retriever gave {type(found).__name__} for query {query_id!r}: return a list of chunk ids, or "
                "of (chunk id, score) pairs"
            )
        results = list(found)[:k]
        ranked: dict[str, float] = {}
        for position, result in enumerate(results):
            if isinstance(result, str):
                chunk_id, value = result, float(len(results) - position)
            elif isinstance(result, tuple | list) and len(result) == 2:
                chunk_id, value = str(result[0]), float(result[1])
            else:
                raise InputError(
                    f"the retriever gave {type(result).__name__} for query {query_id!r}: give chunk ids, or "
                    "(chunk id, score) pairs"
                )
            ranked.setdefault(chunk_id, value)  # a chunk given twice keeps its best place
        scored[query_id] = ranked
    return Run.from_dict(scored, name=name or getattr(retriever, "__name__", "retriever"))


@dataclass
class ScoreResult:
    """Each run's metrics (mean, 95% interval, per-query values in ``evaluations``), recall curve, and, with several
    runs, each against the best. On a release with estimates each metric's figure is the one that applies
    (``kind``: prediction-powered, exact, estimate-only, or labelled pairs only), the best run and the tests are
    decided on it, and the other figures are under each run's ``details``; ``quality`` is the estimate's."""

    reports: list[dict]
    evaluations: list[Evaluation]
    against_best: dict | None
    cluster_design: Clusters  # how queries resample together
    sizes: list[SetSize]  # what the set can detect per metric
    alpha: float
    quality: dict | None = None  # the estimate's held-out AUC and ECE, in one word (labels.fitting)
    transfer: Transfer | None = None  # synthetic questions against real queries, on a release with both
    synthetic_audit: dict | None = None  # the release's unchecked synthetic labels and their estimated error rate
    coverage: dict | None = None  # the logged traffic its questions cover, for a workspace's release with a log
    questions: QuestionDiagnostics | None = None  # which questions separate the runs (metrics.diagnostics)

    @property
    def metrics(self) -> dict:
        """The first (or only) run's metrics: name -> {mean, ci_low, ci_high, ...}, the figure that applies."""
        return self.reports[0]["metrics"]

    def as_dict(self) -> dict:
        extra = {"clusters": self.cluster_design.as_dict(), "set_size": [s.as_dict() for s in self.sizes]}
        if self.quality is not None:
            extra["estimate_quality"] = self.quality
        if self.transfer is not None:
            extra["transfer"] = self.transfer.as_dict()
        if self.synthetic_audit is not None:
            extra["synthetic_audit"] = self.synthetic_audit
        if self.coverage is not None:
            extra["coverage"] = self.coverage
        if self.questions is not None:
            extra["question_diagnostics"] = self.questions.as_dict()
        if len(self.reports) == 1:
            return {**self.reports[0], **extra}
        return {"runs": self.reports, "against_best": self.against_best, "alpha": self.alpha, "correction": "holm",
                **extra}  # fmt: skip


def score(
    release: str | Path | LoadedRelease | None,
    runs: Run | str | Path | Retriever | Sequence[Run | str | Path | Retriever],
    metrics: Sequence[str] | str = DEFAULT_METRICS,
    *,
    qrels: str | Path | Qrels | None = None,
    k: int = 100,
    ci: bool = True,
    resamples: int = 1000,
    seed: int = 0,
    cluster_by: str = "auto",
    targets: Sequence[float] = (0.9, 0.95),
    detect: float | None = None,
    alpha: float = 0.05,
    relevance_level: int = 1,
    clusters: str | Path | Mapping[str, str] | None = None,
    cluster_field: str = "cluster",
) -> ScoreResult:
    """Score runs against a release's labels (or ``qrels``, a file or a Qrels table, with ``release`` None) with
    trec_eval's conventions. ``runs``: one or a list of ``Run`` objects, run files (TREC or JSONL), or retriever
    callables (:func:`retrieve` runs them on the release's queries, top ``k``). ``relevance_level``: the grade the
    binary metrics (recall, precision, MAP, MRR, hit rate, R-precision) count as relevant, trec_eval's ``-l``;
    nDCG's gains are the grades. On a release with estimates each metric gets the figure that applies
    (:mod:`~.metrics.figures`); prediction-powered figures are for level 1 only, and left out otherwise.
    ``clusters``: a file (JSONL, CSV, TSV) or a mapping of each query's cluster (a session, a user) under
    ``cluster_field``, for ``cluster_by`` auto or given; ``cluster_by="relevant"`` joins queries that share a relevant
    document."""
    from ..metrics import parse_metrics
    from ..metrics.many import against_best as versus_best
    from ..metrics.many import evaluate_with_curve, smallest_k
    from ..metrics.power import set_sizes
    from ..metrics.report import score_dicts

    specs = parse_metrics(metrics if isinstance(metrics, str) else list(metrics))
    labels, estimates, loaded, queries, document_of = _labels(release, qrels)
    made = _runs(runs, queries, k, loaded)
    scored = [evaluate_with_curve(labels, r, specs, relevance_level=relevance_level) for r in made]
    evaluations = [evaluation for evaluation, _ in scored]
    _meet_labels(made, evaluations, estimates)
    clusters = _clusters_of(evaluations[0], labels, cluster_by, loaded, document_of, clusters, cluster_field,
                            relevance_level)  # fmt: skip
    reports = score_dicts(evaluations, ci=ci, resamples=resamples, seed=seed, clusters=clusters.codes)
    for report_of, (_, curve) in zip(reports, scored):
        report_of["recall_curve"] = [float(v) for v in curve]
        report_of["target_recall"] = {str(t): smallest_k(curve, t) for t in targets}
        report_of["relevance_level"] = relevance_level
    best = versus_best(evaluations, clusters.codes, alpha=alpha, seed=seed) if len(evaluations) > 1 else None
    quality = None
    if estimates and relevance_level == 1:
        reports, best, quality = _applying_figures(estimates, made, specs, reports, best, alpha)
    sizes = set_sizes(evaluations, clusters.codes, alpha, detect)
    checked = _transfer(evaluations, loaded, resamples, seed, alpha) if loaded is not None else None
    audit = ((loaded.manifest["counts"].get("checked_by_human") or {}).get("synthetic_audit")) if loaded else None
    coverage = _coverage(loaded)
    questions = _question_diagnostics(labels, made, evaluations, reports, loaded, relevance_level)
    return ScoreResult(reports, evaluations, best, clusters, sizes, alpha, quality, checked, audit, coverage, questions)


def _meet_labels(runs: list[Run], evaluations, estimates: list[dict] = ()) -> None:
    """Refuse a run with results none of which are for a labelled query, nor for one a release's ``estimates``
    cover (its figures there are the estimate's): its figures would be zeros that read as a retriever finding
    nothing, where the files do not belong together (another collection, ids padded otherwise)."""
    from ..tables import QUERY_ID

    for run, evaluation in zip(runs, evaluations):
        met = evaluation.summary
        if not (run.num_rows and met.evaluated_queries and met.queries_without_run == met.evaluated_queries):
            continue
        if estimates and not {row["query-id"] for row in estimates}.isdisjoint(run.query_ids()):
            continue  # its queries are the estimate's: scored on it
        theirs, ours = run.table.column(QUERY_ID)[0].as_py(), str(evaluation.query_ids[0])
        raise InputError(
            f"run {run.name!r} has no query in common with the labels: its query ids are like {theirs!r}, the "
            f"labels' like {ours!r}; score a run made on the labels' queries"
        )


def _question_diagnostics(labels, runs, evaluations, reports, loaded, relevance_level: int):
    """Which questions separate the runs (:mod:`~.metrics.diagnostics`), saturation read on the figures shown; on a
    release, with what it knows of its questions."""
    from ..metrics.diagnostics import diagnose, of_release

    means = {report["run"]: {m: entry["mean"] for m, entry in report["metrics"].items()} for report in reports}
    if loaded is not None:
        return of_release(loaded, runs, evaluations, means, relevance_level)
    return diagnose(labels, runs, evaluations, means, relevance_level=relevance_level)


def _coverage(loaded) -> dict | None:
    """The coverage of the logged traffic by a workspace's release, as ``release`` measured it
    (:mod:`~.stages.release.coverage`); None for a release outside its workspace or one without a log."""
    if loaded is None:  # qrels alone: no release, and none of the release stage's modules to import
        return None
    from ..stages.release.coverage import read_coverage

    return read_coverage(loaded.path)


def _transfer(evaluations, loaded, resamples: int, seed: int, alpha: float):
    """The runs scored on the release's synthetic questions and on its real queries apart (:mod:`~.metrics.transfer`);
    None unless the release labels both. Read from the labelled pairs (on a release with estimates, the figures
    that apply are not split by subset)."""
    from ..metrics.transfer import transfer_of

    def origin_of(query_id: str) -> str | None:
        return loaded.query_meta.get(query_id, {}).get("origin")

    return transfer_of(evaluations, origin_of, resamples, seed, alpha)


def _applying_figures(estimates, runs, specs, reports, best, alpha):
    """Each run's report with the figure that applies per metric, the best run of each metric by it, and the
    estimate's quality (:mod:`~.metrics.figures`)."""
    from ..labels.fitting import release_quality
    from ..metrics.figures import against_best_by_figure, one_figure
    from ..metrics.prediction import ReleasePool, prediction_report

    pool = ReleasePool(estimates)
    reports = [
        one_figure(report, prediction_report(estimates, r, specs, pool=pool)) for report, r in zip(reports, runs)
    ]
    if best is not None and pool.applies != "qrels":
        best = {**best, **against_best_by_figure(pool, runs, reports, specs, alpha)}
    return reports, best, release_quality(estimates)


def _labels(release, qrels):
    """(labels, estimates, the loaded release, queries, document_of) of a release, or of a qrels file or table
    (release None, and no loaded release): ``document_of`` gives a labelled chunk's document (a qrels file's ids are
    taken as documents)."""
    from ..export import read_qrels

    if (qrels is None) == (release is None):
        raise InputError("give a release, or qrels (and no release)")
    if release is not None:
        loaded = load_release(release)

        def document_of(chunk_id: str) -> str:
            return loaded.chunk_spans.get(chunk_id, {}).get("doc_id") or chunk_id

        return loaded.qrels_table(), loaded.estimates, loaded, loaded.queries, document_of
    return (read_qrels(qrels) if isinstance(qrels, str | Path) else qrels), [], None, None, str


def _clusters_of(
    evaluation, labels, cluster_by: str, loaded, document_of, clusters, cluster_field: str,
    relevance_level: int = 1,
):  # fmt: skip
    """How queries resample together (:func:`~.metrics.clusters.resolve_clusters`): ``clusters`` a file (or a
    mapping) of each query's cluster under ``cluster_field``; the relevant documents from the labels; a release's
    (``loaded``) synthetic questions' source documents and logged queries' sessions."""
    from ..metrics.clusters import clusters_for

    given = clusters
    if isinstance(clusters, str | Path):
        from ..export.queries import read_query_clusters

        given = read_query_clusters(clusters, cluster_field)
    source_document, session = (loaded.source_document, loaded.session) if loaded is not None else (None, None)
    return clusters_for(
        evaluation.query_ids, labels.table, cluster_by, source_document=source_document, session=session,
        document_of=None if document_of is str else document_of, given=given, relevance_level=relevance_level,
    )  # fmt: skip


def _runs(runs, queries, k: int, loaded=None) -> list[Run]:
    """Run objects from Run objects, run files or retriever callables (run on ``queries``), named apart. A
    framework's retriever (:mod:`~.frameworks`) matches its results against ``loaded``'s chunks: what matched no
    chunk is warned of, and a retriever none of whose results matched is refused."""
    from ..export import read_run
    from ..metrics.many import named_apart

    made, paths = [], []
    for one in list(runs) if isinstance(runs, list | tuple) else [runs]:
        path = None
        if hasattr(one, "table"):
            made.append(one)
        elif isinstance(one, str | Path):
            path = Path(one)
            made.append(read_run(path))
        elif callable(one):
            if queries is None:
                raise InputError("a retriever needs the queries' texts: score it on a release")
            made.append(
                _framework_run(one, queries, k, loaded) if hasattr(one, "for_release") else retrieve(one, queries, k)
            )
        else:
            raise InputError(f"a run is a Run, a run file or a retriever callable, not {type(one).__name__}")
        paths.append(path)
    return named_apart(made, paths)


def _framework_run(retriever, queries, k: int, loaded) -> Run:
    """A framework retriever's run on a release's queries, its results matched against the release's chunks."""
    if loaded is not None:
        retriever.for_release(loaded.corpus)
    run = retrieve(retriever, queries, k)
    problem = retriever.problem()
    if problem is not None and not sum(retriever.matched.values()):
        raise InputError(f"every metric would read 0: {problem}")
    if problem is not None:
        warnings.warn(problem, stacklevel=3)
    return run


@dataclass
class CompareResult:
    """Each run against the first (the baseline): paired differences with intervals and Holm-corrected tests
    (``comparison``), the prediction-powered differences on a release with estimates, and the regression gate's
    outcomes (``failed``: some run is significantly worse by more than its margin)."""

    comparison: Comparison
    runs: list[Run]
    evaluations: list[Evaluation]
    cluster_design: Clusters
    gate: list[GateOutcome]
    gated: bool
    differences: list[dict] | None = None  # prediction-powered, on a release with estimates

    @property
    def failed(self) -> bool:
        return any(outcome.failed for outcome in self.gate)

    def as_dict(self) -> dict:
        document = {**self.comparison.as_dict(), "clusters": self.cluster_design.as_dict()}
        if self.differences is not None:
            document["prediction_powered"] = self.differences
        if self.gated:
            document["gate"] = {
                "failed": self.failed, "rule": GATE_RULE,
                "outcomes": [outcome.as_dict() for outcome in self.gate],
            }  # fmt: skip
        return document


def compare(
    release: str | Path | LoadedRelease | None,
    runs: Sequence[Run | str | Path | Retriever],
    metrics: Sequence[str] | str = "ndcg@10,recall@10",
    *,
    qrels: str | Path | Qrels | None = None,
    k: int = 100,
    test: str = "randomization",
    alpha: float = 0.05,
    resamples: int = 10_000,
    seed: int = 0,
    cluster_by: str = "auto",
    detect: float | None = None,
    fail_if_worse: Sequence[str] = (),
    relevance_level: int = 1,
    clusters: str | Path | Mapping[str, str] | None = None,
    cluster_field: str = "cluster",
) -> CompareResult:
    """Compare runs (the first is the baseline) on a release's labels (or ``qrels``): paired differences, intervals,
    t and randomization tests, Holm-corrected; ``fail_if_worse`` (``"ndcg@10:0.01"``) gates regressions. ``runs``
    ``relevance_level`` and ``clusters`` as :func:`score` takes them, two or more runs."""
    from ..metrics import evaluate, parse_metrics
    from ..metrics.compare import compare as compare_runs
    from ..metrics.gate import parse_gate, regression_gate
    from ..metrics.prediction import prediction_differences

    specs = parse_metrics(metrics if isinstance(metrics, str) else list(metrics))
    rules = parse_gate(list(fail_if_worse))
    specs += [spec for spec in parse_metrics([r.metric for r in rules]) if spec not in specs] if rules else []
    labels, estimates, loaded, queries, document_of = _labels(release, qrels)
    made = _runs(runs, queries, k, loaded)
    if len(made) < 2:
        raise InputError("compare needs at least two runs (the first is the baseline)")
    evaluations = [evaluate(labels, r, specs, relevance_level=relevance_level) for r in made]
    _meet_labels(made, evaluations, estimates)
    clusters = _clusters_of(evaluations[0], labels, cluster_by, loaded, document_of, clusters, cluster_field,
                            relevance_level)  # fmt: skip
    result = compare_runs(
        evaluations[0], evaluations[1:], test=test, alpha=alpha, resamples=resamples, seed=seed,
        clusters=clusters.codes, detect=detect,
    )  # fmt: skip
    gate = regression_gate(evaluations[0], evaluations[1:], rules, clusters.codes, alpha, resamples, seed)
    powered = estimates and relevance_level == 1
    differences = prediction_differences(estimates, made[0], made[1:], specs) if powered else None
    return CompareResult(result, made, evaluations, clusters, gate, bool(rules), differences)


def langchain_retriever(retriever: Any, id_key: str = "chunk_id") -> Retriever:
    """A LangChain retriever as a callable :func:`score` takes: each ``Document``'s chunk id is its
    ``metadata[id_key]``, else its ``id``, else its text matched to the release's chunks (exactly or normalised);
    ranked in the order LangChain returns them. What matches no chunk is said (:mod:`~.frameworks`)."""
    from ..frameworks import langchain_retriever as wrapped

    return wrapped(retriever, id_key)


def llamaindex_retriever(retriever: Any, id_key: str = "chunk_id") -> Retriever:
    """A LlamaIndex retriever as a callable :func:`score` takes: each node's chunk id is its ``metadata[id_key]``,
    else its node id, else its text matched to the release's chunks; with the node's score. What matches no chunk
    is said (:mod:`~.frameworks`)."""
    from ..frameworks import llamaindex_retriever as wrapped

    return wrapped(retriever, id_key)
