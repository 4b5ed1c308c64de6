"""The whole workflow through the tool's own commands on collections left out of the prior's fit, checked against
their complete human judgments: what a user (or the project's owner) does, end to end. Each collection is held out:
the commands run in this process with the shipped prior replaced by one fitted on the other collections.

Per collection: 60 queries with a relevant document (all of them where fewer, as MED's 30), the whole corpus chunked
as it is (`chunk --chunker prechunked`), 13 systems built from BM25 and the dense model
(`estimate_transfer.system_scores`), each written as a TREC run of its top 100. `propose --no-judge` pools the
queries (with `--runs`, the systems' runs too); then, per draw, in a copy of that workspace: `estimate` (the AUC
before any verdict), `select --budget` a tenth of the pool with the draw's seed, a reviewer answering every drawn
pair through the review API from the qrels, `estimate` again (the AUC after), `release`, and `score --release` of
each run. Each run's prediction-powered 95% intervals are checked against its figure on the collection's qrels (every
judged document, the pool's or not) and on the qrels the pool holds (what a full human labelling of the pool gives;
trec_eval's convention, unjudged = not relevant). With ``--knowing``, three systems besides know part of the truth
(:func:`knowing_systems`: a retriever's score plus a share of each chunk's grade, or relevance, and noise), as a
cross-encoder or a production system knows what BM25 and a small dense model do not: the estimate cannot reproduce
their figures, so their intervals must reach them through the verdicts; the estimate-only figures' tau says how far
the estimate alone would rank the systems. With ``--shared-task`` the pool is a shared task's instead: BM25, the
dense model and eleven systems of different strengths that know more (:func:`shared_task_systems`), as an outside
check pools the teams' neural runs. Every interval is kept beside its target in the collection's folder
(``cases.json``; a run replaces the folder, and with it the last run's cases).

    python benchmarks/workflow_check.py                              # CISI, Cranfield and MED, runs pooled, 5 draws
    python benchmarks/workflow_check.py --domains npl --draws 10 --no-runs
    python benchmarks/workflow_check.py --domains cisi,npl --draws 10 --knowing    # 16 systems, 3 that know more
    python benchmarks/workflow_check.py --domains cisi,npl --draws 10 --shared-task   # 13 systems, 11 that know more

The collections are those `estimate_transfer.py` finds (SciFact from ../shared/data when present; the four classic
collections in benchmarks/data). Workspaces live under benchmarks/.cache/workflow.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shutil
import sys
import time
import zlib
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import estimate_transfer as transfer

import testset_builder.labels.features
import testset_builder.labels.fitting
import testset_builder.labels.model
import testset_builder.labels.prior
from testset_builder.cli import main as cli
from testset_builder.export import read_qrels, read_run
from testset_builder.labels import estimate
from testset_builder.metrics import evaluate
from testset_builder.retrieval.indexes import WorkspaceIndexes
from testset_builder.store import estimates as stored
from testset_builder.store import open_workspace, rows
from testset_builder.tables import Qrels

CACHE = transfer.CACHE / "workflow"
METRICS = ("ndcg@10", "recall@100", "precision@10")
DEPTH = 100  # each system's run: its top 100, score's deepest cutoff
TOKEN = "bench-" + "t" * 26


def quiet(*args: str) -> tuple[int, str]:
    """A command's exit code and what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = cli(list(args))
    return code, out.getvalue()


def checked(*args: str) -> str:
    code, out = quiet(*args)
    if code != 0:
        raise SystemExit(f"`testset-builder {' '.join(args)}` exited {code}:\n{out[-2000:]}")
    return out


def answer_drawn(workspace: Path, grades: dict[str, dict[str, int]]) -> int:
    """A reviewer answering, through the review JSON API, every pair the latest `select` drew, from the qrels."""
    from fastapi.testclient import TestClient

    from testset_builder.review_ui import create_app
    from testset_builder.store.review import DRAWN_FOR_REVIEW

    answered = 0
    with open_workspace(workspace) as ws, TestClient(create_app(ws, TOKEN)) as client:
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        while (served := client.get("/api/next", params={"reviewer": "bench"})).status_code == 200:
            item = served.json()
            if not item["reason"].startswith(DRAWN_FOR_REVIEW):
                break
            grade = grades.get(item["query"]["query_id"], {}).get(item["chunk"]["chunk_id"], 0)
            verdict = {"item_id": item["item_id"], "reviewer": "bench", "idempotency_key": f"k-{item['item_id']}"}
            posted = client.post("/api/verdicts", json={**verdict, "action": "grade", "grade": grade})
            if posted.status_code != 201:
                raise SystemExit(f"the review API refused a verdict: {posted.status_code} {posted.text}")
            answered += 1
    return answered


def knowing_systems(
    bm25: np.ndarray, dense: np.ndarray, known: np.ndarray, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Systems that know what the estimate's features do not, as a cross-encoder or a production system may: each
    scores chunks by a retriever's score (standardised over its top 100) plus a share of the truth (``known``: each
    chunk's grade on the tool's 0-2 scale; the dense one adds whether it is relevant) and noise. The estimate sees
    only BM25 and the dense model, so these are the systems whose figures it cannot reproduce: the prediction-powered
    figures must reach them through the verdicts."""
    n = len(bm25)
    zb, zd = _top_z(bm25), _top_z(dense)
    first = _top(0.5 * zb + 0.5 * zd)
    out = {}
    rerank = np.full(n, -1e9)  # a re-ranker of a hybrid's top 100 (a cross-encoder's place in a pipeline)
    rerank[first] = zd[first] + 1.5 * known[first] + rng.standard_normal(len(first))
    out["knows-rerank"] = rerank
    out["knows-dense"] = zd + 2.0 * (known > 0) + rng.standard_normal(n)  # a stronger dense model over the corpus
    first = _top(bm25)
    rerank = np.full(n, -1e9)
    rerank[first] = zb[first] + 1.0 * known[first] + rng.standard_normal(len(first))
    out["knows-lexical"] = rerank
    return out


def shared_task_systems(
    bm25: np.ndarray, dense: np.ndarray, known: np.ndarray, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """A pool as a shared task's: BM25 and the dense model as baselines, and eleven systems that know more, of
    different strengths (how much of the truth each adds to its retriever's score, before the same noise), as the
    teams' re-rankers and trained dense retrievers do: four re-rankers of BM25's top 100, three of a hybrid's top
    100, four dense retrievers over the corpus. Most of the pool is then made by systems the estimate cannot follow,
    where :func:`knowing_systems` adds three to the thirteen it can follow."""
    n = len(bm25)
    zb, zd = _top_z(bm25), _top_z(dense)
    out = {"bm25": bm25, "dense": dense}
    lexical, hybrid = _top(bm25), _top(0.5 * zb + 0.5 * zd)
    for share in (0.5, 1.0, 1.5, 2.0):
        rerank = np.full(n, -1e9)
        rerank[lexical] = 0.5 * zb[lexical] + share * known[lexical] + rng.standard_normal(len(lexical))
        out[f"knows-rerank-bm25-{share:g}"] = rerank
    for share in (0.75, 1.25, 1.75):
        rerank = np.full(n, -1e9)
        rerank[hybrid] = zd[hybrid] + share * known[hybrid] + rng.standard_normal(len(hybrid))
        out[f"knows-rerank-hybrid-{share:g}"] = rerank
    for share in (0.5, 1.0, 1.5, 2.0):
        out[f"knows-dense-{share:g}"] = zd + share * (known > 0) + rng.standard_normal(n)
    return out


def _top(scores: np.ndarray) -> np.ndarray:
    return transfer._ranks(scores, DEPTH)


def _top_z(scores: np.ndarray) -> np.ndarray:
    """``scores`` standardised over their best :data:`DEPTH` (the first stage's candidates)."""
    best = scores[_top(scores)]
    return (scores - best.mean()) / (best.std() + 1e-9)


def write_runs(
    folder: Path,
    query_ids: list[str],
    texts: dict[str, str],
    target: Path,
    grades: dict[str, dict[str, int]] | None = None,
    pool: str = "plain",
) -> list[Path]:
    """The systems' top :data:`DEPTH` for the queries, as TREC runs, over the transfer benchmark's workspace of the
    same corpus (its BM25 and dense indexes): the 13 of ``pool`` "plain"; with "knowing" the three
    :func:`knowing_systems` besides; "shared-task" the :func:`shared_task_systems` instead (both from ``grades``).
    Each line carries the system's own score (a pooled system's scores are a column of the estimate's refit); the
    tool ranks them again as trec_eval does, exact ties (RRF's) by chunk id."""
    if pool != "plain" and grades is None:
        raise ValueError(f"the {pool} pool's systems know the grades: pass them")
    with open_workspace(transfer.CACHE / f"transfer-{folder.name}") as ws:
        transfer.ingest(
            ws, transfer.load_sources([folder]), transfer.ChunkingConfig(chunker="prechunked", size=1, overlap=0),
            [folder],
        )  # fmt: skip
        indexes = WorkspaceIndexes(ws, ("bm25", "dense"))
        chunk_ids = indexes.chunk_ids
        passages = indexes.passages.of(chunk_ids)
        batch = [texts[q] for q in query_ids]
        bm25_rows, dense_rows = indexes.indexes["bm25"].scores(batch), indexes.indexes["dense"].scores(batch)
    chunk_words = [testset_builder.labels.features.words(passages[c]) for c in chunk_ids]
    lines: dict[str, list[str]] = {}
    for row, query_id in enumerate(query_ids):
        bm25, dense = np.asarray(bm25_rows[row], dtype=float), np.asarray(dense_rows[row], dtype=float)
        words = testset_builder.labels.features.words(texts[query_id])
        overlap = np.array([len(words & w) / max(1, len(words)) for w in chunk_words])
        systems = transfer.system_scores(bm25, dense, overlap) if pool != "shared-task" else {}
        if pool != "plain":
            known = np.array([grades.get(query_id, {}).get(c, 0) for c in chunk_ids], dtype=float)
            rng = np.random.default_rng(zlib.crc32(query_id.encode("utf-8")))
            systems.update((knowing_systems if pool == "knowing" else shared_task_systems)(bm25, dense, known, rng))
        for system, scores in systems.items():
            top = transfer._ranks(scores, DEPTH)
            lines.setdefault(system, []).extend(
                f"{query_id} Q0 {chunk_ids[i]} {rank} {scores[i]:.9g} {system}\n" for rank, i in enumerate(top, 1)
            )
    target.mkdir(parents=True, exist_ok=True)
    paths = []
    for system, written in lines.items():
        path = target / f"{system.replace('>', '-then-').replace('@', '-at-')}.trec"
        path.write_text("".join(written), encoding="utf-8")
        paths.append(path)
    return sorted(paths)


def means(grades: Qrels, run: Path, query_ids: list[str]) -> dict[str, float]:
    """The run's mean of each metric over ``query_ids``, as `score --release` averages: a query the labels hold no
    relevant pair for counts (0 recall, 0 nDCG), where trec_eval's mean would leave it out."""
    per_query = evaluate(grades, read_run(run), ",".join(METRICS)).per_query_dict()
    return {m: sum(per_query.get(q, {}).get(m, 0.0) for q in query_ids) / len(query_ids) for m in METRICS}


def held_out_prior(folder: Path, queries: int) -> testset_builder.labels.model.RelevanceModel:
    """The prior fitted as the shipped one is, on the other collections only (estimate_transfer's fit)."""
    others = [transfer.load_domain(f, queries, 30, seed=0) for f in transfer.domains_found(None) if f != folder]
    fitted = transfer.fit_prior(others)
    return testset_builder.labels.model.RelevanceModel(f"prior:without-{folder.name}", fitted.bias, fitted.weights)


def check(folder: Path, runs_pooled: bool, draws: int, queries: int, pool: str = "plain") -> dict:
    """One collection, the shipped prior replaced by one fitted without it (the commands run in this process)."""
    shipped = testset_builder.labels.prior.PRIOR
    estimate.PRIOR = held_out_prior(folder, queries)
    try:
        return _check(folder, runs_pooled, draws, queries, pool)
    finally:
        estimate.PRIOR = shipped


def _check(folder: Path, runs_pooled: bool, draws: int, queries: int, pool_of: str) -> dict:
    name = folder.name
    texts = {q["_id"]: q["text"] for q in map(json.loads, (folder / "queries.jsonl").open(encoding="utf-8"))}
    qrels = read_qrels(folder / "qrels" / "test.tsv").to_dict()
    query_ids = sorted(q for q in qrels if q in texts and any(g >= 1 for g in qrels[q].values()))
    query_ids = sorted(np.random.default_rng(0).permutation(query_ids)[:queries].tolist())
    top = max((g for by in qrels.values() for g in by.values()), default=1)
    grades = {q: {c: transfer.tool_grade(g, top) for c, g in qrels[q].items()} for q in query_ids}  # 0-2, as reviewed
    root = CACHE / f"{name}-{'pooled' if runs_pooled else 'not-pooled'}{'' if pool_of == 'plain' else '-' + pool_of}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": texts[q]}) + "\n" for q in query_ids), encoding="utf-8"
    )
    runs = write_runs(folder, query_ids, texts, root / "runs", grades, pool_of)
    base = root / "base"
    started = time.perf_counter()
    checked("chunk", str(folder / "corpus.jsonl"), "--chunker", "prechunked", "-w", str(base))
    propose = ["propose", "-Q", str(root / "queries.jsonl"), "--no-judge", "-w", str(base), "--json"]
    checked(*propose, *([arg for run in runs for arg in ("--runs", str(run))] if runs_pooled else []))
    with open_workspace(base) as ws:
        pool = set(stored.candidate_pairs(ws.db))
    relevant = {(q, c) for q, by in grades.items() for c, g in by.items() if g >= 1}
    all_grades = Qrels.from_dict(grades)
    pool_grades = Qrels.from_dict({q: {c: g for c, g in by.items() if (q, c) in pool} for q, by in grades.items()})
    truth = {
        run.name: {"qrels": means(all_grades, run, query_ids), "pool": means(pool_grades, run, query_ids)}
        for run in runs
    }
    keys = sorted(pool)
    labels = [int((q, c) in relevant) for q, c in keys]
    cases = {
        m: {k: [] for k in ("qrels", "pool", "human", "human_pool", "width", "tau", "tau_pool", "tau_est")}
        for m in METRICS
    }
    auc = {"before": [], "after": [], "verdicts": []}
    by_run: dict[tuple[str, str], list[bool]] = {}  # (system, metric) -> covered the pool's figure, per draw
    records: list[dict] = []  # every interval beside its target, kept in the collection's folder (cases.json)
    for seed in range(draws):
        workspace = root / f"draw-{seed}"
        shutil.rmtree(workspace, ignore_errors=True)
        shutil.copytree(base, workspace)
        checked("estimate", "-w", str(workspace), "--json")
        with open_workspace(workspace) as ws:
            before = stored.estimates(ws.db)
        auc["before"].append(testset_builder.labels.fitting.roc_auc([before[k].p_relevant for k in keys], labels))
        budget = str(round(len(pool) / 10))
        checked("select", "--budget", budget, "--seed", str(seed), "-w", str(workspace), "--json")
        auc["verdicts"].append(answer_drawn(workspace, grades))
        checked("estimate", "-w", str(workspace), "--json")
        with open_workspace(workspace) as ws:
            after = stored.estimates(ws.db)
            reviewed = {(j.query_id, j.chunk_id) for j in rows.iter_judgments(ws.db) if j.source.value == "human"}
        unseen = [i for i, key in enumerate(keys) if key not in reviewed]  # as estimate_transfer: the pairs not drawn
        auc["after"].append(
            testset_builder.labels.fitting.roc_auc(
                [after[keys[i]].p_relevant for i in unseen], [labels[i] for i in unseen]
            )
        )
        checked("release", "-w", str(workspace), "--version", "1.0.0", "--json")
        figures: dict[str, list[float]] = {m: [] for m in METRICS}
        alone: dict[str, list[float]] = {m: [] for m in METRICS}  # the estimate-only figures
        for run in runs:
            out = checked("score", "--release", f"{workspace}@1.0.0", "-r", str(run), "-m", ",".join(METRICS), "--json")
            document = json.loads(out)
            report, estimator = document["estimates"], document["details"]["estimator"]
            for metric in METRICS:
                powered, human = estimator[metric]["ppi"], estimator[metric]["human_only"]
                if powered is None or "ci_low" not in powered:
                    raise SystemExit(f"{run.name}: no interval for {metric} ({report['applies']}: {report['why']})")
                inside = lambda figure, interval: interval["ci_low"] <= figure <= interval["ci_high"]  # noqa: E731
                by_run.setdefault((run.stem, metric), []).append(inside(truth[run.name]["pool"][metric], powered))
                records.append(
                    {"draw": seed, "system": run.stem, "metric": metric, "truth": truth[run.name]["pool"][metric],
                     "ppi": powered, "human_only": human, "estimate_only": estimator[metric]["estimate_only"]}
                )  # fmt: skip
                for against in ("qrels", "pool"):
                    cases[metric][against].append(inside(truth[run.name][against][metric], powered))
                    if "ci_low" in human:  # human-only recall and nDCG carry no interval (metrics.ppi says why)
                        cases[metric]["human" if against == "qrels" else "human_pool"].append(
                            inside(truth[run.name][against][metric], human)
                        )
                cases[metric]["width"].append(powered["ci_high"] - powered["ci_low"])
                figures[metric].append(powered["mean"])
                alone[metric].append(estimator[metric]["estimate_only"]["mean"])
        from scipy.stats import kendalltau

        for metric in METRICS:
            cases[metric]["tau"].append(kendalltau(figures[metric], [truth[r.name]["qrels"][metric] for r in runs])[0])
            cases[metric]["tau_pool"].append(
                kendalltau(figures[metric], [truth[r.name]["pool"][metric] for r in runs])[0]
            )
            cases[metric]["tau_est"].append(kendalltau(alone[metric], [truth[r.name]["pool"][metric] for r in runs])[0])
        shutil.rmtree(workspace)
    in_pool = len(relevant & pool)
    print(
        f"\n{name}, systems {'pooled' if runs_pooled else 'not pooled'} ({len(query_ids)} queries, {len(runs)} "
        f"systems, {draws} draws, {time.perf_counter() - started:.0f} s): pool {len(pool)} pairs holding {in_pool} of "
        f"the {len(relevant)} relevant documents the qrels judge; {np.mean(auc['verdicts']):.0f} verdicts a draw"
    )
    print(
        f"  estimate's AUC over the pool: before verdicts {np.mean(auc['before']):.3f}, "
        f"after {np.mean(auc['after']):.3f} (the pairs not reviewed); prior fitted without {name}"
    )
    out = {"pool": len(pool), "relevant": len(relevant), "relevant_in_pool": in_pool, "auc": auc, "metrics": {}}
    for metric, r in cases.items():
        row = {
            "ppi_coverage_qrels": float(np.mean(r["qrels"])),
            "ppi_coverage_pool": float(np.mean(r["pool"])),
            "human_only_coverage_qrels": float(np.mean(r["human"])) if r["human"] else None,
            "human_only_coverage_pool": float(np.mean(r["human_pool"])) if r["human_pool"] else None,
            "width": float(np.mean(r["width"])),
            "tau_qrels": float(np.nanmean(r["tau"])),
            "tau_pool": float(np.nanmean(r["tau_pool"])),
            "tau_estimate_only_pool": float(np.nanmean(r["tau_est"])),
        }
        out["metrics"][metric] = row
        human = {k: "no interval" if v is None else f"{v:.2f}" for k, v in row.items() if k.startswith("human")}
        print(
            f"  {metric:<12} PPI coverage {row['ppi_coverage_pool']:.2f} of the pool's figures (human-only "
            f"{human['human_only_coverage_pool']}), {row['ppi_coverage_qrels']:.2f} of the qrels' (human-only "
            f"{human['human_only_coverage_qrels']}); width {row['width']:.3f}; tau {row['tau_pool']:.2f} (qrels "
            f"{row['tau_qrels']:.2f}; estimate alone {row['tau_estimate_only_pool']:.2f})"
        )
    if pool_of != "plain":
        best_other = max(t["pool"]["ndcg@10"] for n, t in truth.items() if not n.startswith("knows-"))
        for system in sorted({s for s, _ in by_run if s.startswith("knows-")}):
            print(
                f"  {system:<14} PPI coverage of the pool's figures: "
                + ", ".join(f"{m} {np.mean(by_run[(system, m)]):.2f}" for m in METRICS)
                + " (the pool's figures: "
                + ", ".join(f"{truth[system + '.trec']['pool'][m]:.3f}" for m in METRICS)
                + f"; the best other system's nDCG@10 {best_other:.3f})"
            )
    out["by_system"] = {f"{s} {m}": float(np.mean(v)) for (s, m), v in by_run.items()}
    (root / "cases.json").write_text(json.dumps(records), encoding="utf-8")
    print(  # what the qrels' recall counts, no pooled figure can see
        f"  (the figures aim at the pool's: recall's denominator is the relevant pairs the pool holds, here "
        f"{in_pool} of {len(relevant)}, so the qrels' recall is lower wherever the pool misses some)"
    )
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", default="cisi,cranfield,med", help="comma-separated names")
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--no-runs", action="store_true", help="propose without --runs (the systems not pooled)")
    parser.add_argument(
        "--knowing", action="store_true", help="three systems besides that know part of the truth (knowing_systems)"
    )
    parser.add_argument(
        "--shared-task", action="store_true",
        help="instead of the 13, BM25, the dense model and eleven systems that know more (shared_task_systems)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    folders = transfer.domains_found(args.domains.split(","))
    if not folders:
        print(f"workflow check: none of {args.domains} found; skipped")
        return {}
    if args.knowing and args.shared_task:
        parser.error("--knowing and --shared-task are two pools: choose one")
    pool = "shared-task" if args.shared_task else "knowing" if args.knowing else "plain"
    return {f.name: check(f, not args.no_runs, args.draws, args.queries, pool) for f in folders}


if __name__ == "__main__":
    main(sys.argv[1:])
