"""Do the prediction-powered intervals keep their promise on collections nothing was tuned on?

For each collection: systems' runs, a pool, an estimate of P(relevant) that no collection fitted, and many reviews
drawn as `select` draws them (a take-all stratum, then a Poisson sample of a tenth of the pool). Each draw's
verdicts come from the qrels; every system's nDCG@10, recall@100 and precision@10 is then estimated three ways from
the same draw: the difference estimator with the estimate as given (the shipped default), with a cross-fitted
Platt recalibration (the refinement), and from the verdicts alone (human-only). The truth is the metric on complete
labels of the pool (trec_eval's pooling convention: a pair outside the pool is not relevant). Kendall's tau says how
each draw's figures order the systems against the truth's order, averaged over the draws.

    python benchmarks/interval_coverage.py                     # the bundled collections, 10 draws each
    python benchmarks/interval_coverage.py --draws 20 --clef2018 <git dir of CLEFeHealth/CLEFeHealth2018IRtask>

Two pools per collection: the tool's own (BM25's top 100) and the systems' runs pooled (each system's top 20, as a
shared task pools). The bundled collections' systems are BM25 variants and "knowing" systems (BM25 plus a share of
the true grade plus noise, as a re-ranker that knows more than the estimate). CLEF eHealth 2018's are its
participants' and organisers' runs (graded 0-2, about 520 judged pairs a query); its corpus text is not public, so
its estimate and its tool pool come from the runs alone. The estimate is the share of systems that rank a pair in
their top 10, mapped to a probability by a fixed line (not fitted anywhere), or ``--estimate anti`` (one minus it).

Results go to ``benchmarks/results/interval_coverage.json`` and a table on stdout.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from scipy.stats import kendalltau

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testset_builder.labels import design
from testset_builder.metrics import ppi

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "interval_coverage.json"
METRICS = (("ndcg", 10), ("recall", 100), ("precision", 10))
TOOL_DEPTH, RUN_DEPTH = 100, 20  # the tool's own pool: BM25's top 100; a shared task's: each run's top 20
BUDGET = 0.1  # a tenth of the pool reviewed
ESTIMATORS = ("ppi", "ppi-platt", "human")


class Collection:
    """Graded labels on the tool's scale (0, 1, 2), systems' rankings, and each query's candidate chunks."""

    def __init__(self, name: str, grades: dict, runs: dict[str, dict[str, list[str]]], tool: str):
        self.name, self.grades, self.runs, self.tool = name, grades, runs, tool


def tool_grade(score: int, top: int) -> int:
    """A collection's grade on the tool's scale: 0 stays 0, the top grade is 2, grades between are 1."""
    if score <= 0:
        return 0
    return 2 if score >= top and top > 1 else 1


def bundled(name: str, seed: int) -> Collection:
    """A collection of ``benchmarks/data`` with BM25 variants and three knowing systems."""
    import gzip

    import bm25s

    folder = HERE / "data" / name
    with gzip.open(folder / "corpus.jsonl.gz", "rt", encoding="utf-8") as lines:
        corpus = [json.loads(line) for line in lines]
    queries = {q["_id"]: q["text"] for q in map(json.loads, (folder / "queries.jsonl").open(encoding="utf-8"))}
    qrels: dict[str, dict[str, int]] = {}
    for line in (folder / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]:
        q, d, score = line.split("\t")
        qrels.setdefault(q, {})[d] = int(score)
    top = max(g for by in qrels.values() for g in by.values())
    ids = [doc["_id"] for doc in corpus]
    texts = [(doc.get("title", "") + " " + doc["text"]).strip() for doc in corpus]
    query_ids = sorted(q for q in qrels if q in queries and any(g > 0 for g in qrels[q].values()))
    grades = {(q, d): tool_grade(g, top) for q in query_ids for d, g in qrels[q].items()}
    tokens = bm25s.tokenize(texts, stopwords="en", show_progress=False)
    asked = bm25s.tokenize([queries[q] for q in query_ids], stopwords="en", show_progress=False, return_ids=False)
    scores = {}
    for k1, b in ((1.5, 0.75), (0.9, 0.4), (1.2, 0.9), (2.0, 0.6)):
        model = bm25s.BM25(k1=k1, b=b)
        model.index(tokens, show_progress=False)
        scores[f"bm25-{k1}-{b}"] = _dense_scores(model, asked, len(ids))
    base = scores["bm25-1.5-0.75"]
    z = (base - base.mean(axis=1, keepdims=True)) / (base.std(axis=1, keepdims=True) + 1e-9)
    chance = np.random.default_rng(seed)
    gain = np.array([[grades.get((q, d), 0) for d in ids] for q in query_ids], dtype=float)
    for share in (0.5, 1.0, 2.0):  # re-rankers that know part of the truth the estimate does not
        scores[f"knows-{share}"] = z + share * gain + chance.normal(size=z.shape)
    runs = {name: _ranked(values, query_ids, ids) for name, values in scores.items()}
    return Collection(name, grades, runs, "bm25-1.5-0.75")


def _dense_scores(model, asked: list[list[str]], n: int) -> np.ndarray:
    """Every document's score for every query (a query with no known word scores 0 everywhere)."""
    out = np.zeros((len(asked), n))
    for i, tokens in enumerate(asked):
        if tokens:
            out[i] = model.get_scores(tokens)
    return out


def _ranked(values: np.ndarray, query_ids: list[str], ids: list[str], depth: int = TOOL_DEPTH) -> dict:
    order = np.argsort(-values, axis=1, kind="stable")[:, :depth]
    return {q: [ids[j] for j in row] for q, row in zip(query_ids, order)}


def clef2018(git_dir: Path) -> Collection:
    """CLEF eHealth 2018 consumer health search, IR task 1 (English): its graded qrels and the runs of its
    participants and organisers that the repository holds."""

    def show(path: str) -> str:
        return subprocess.run(
            ["git", "--git-dir", str(git_dir), "show", f"HEAD:{path}"], check=True, capture_output=True, text=True
        ).stdout

    grades = {}
    for line in show("assessments/Final assessment/CLEF2018_qrel_20180914.txt").splitlines():
        parts = line.split()
        if len(parts) == 4:
            grades[(parts[0], parts[2])] = tool_grade(int(parts[3]), 2)
    listed = subprocess.run(
        ["git", "--git-dir", str(git_dir), "ls-tree", "-r", "--name-only", "HEAD", "runs/"],
        check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    runs = {}
    for path in listed:
        if "/IRTask1/" not in path:
            continue
        try:
            text = show(path)
        except subprocess.CalledProcessError:  # a file the snapshot lacks
            continue
        ranked: dict[str, list[tuple[float, int, str]]] = {}
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 6:
                ranked.setdefault(parts[0], []).append((-float(parts[4]), int(parts[3]), parts[2]))
        runs[Path(path).name] = {q: [d for *_, d in sorted(rows)[:TOOL_DEPTH]] for q, rows in ranked.items()}
    queries = {q for q, _ in grades}
    runs = {name: {q: docs for q, docs in run.items() if q in queries} for name, run in runs.items() if run}
    return Collection("clef2018", grades, runs, "terrier_BM25_noqe.out")


def pool_of(collection: Collection, pooled_runs: bool) -> list[tuple[str, str]]:
    """The pooled pairs: the tool's own (its BM25's top 100), or every system's top 20 besides."""
    pairs = {(q, d) for q, docs in collection.runs[collection.tool].items() for d in docs[:TOOL_DEPTH]}
    if pooled_runs:
        pairs |= {(q, d) for run in collection.runs.values() for q, docs in run.items() for d in docs[:RUN_DEPTH]}
    queries = {q for q, _ in collection.grades}
    return sorted(pair for pair in pairs if pair[0] in queries)


def agreement_estimate(collection: Collection, pairs, anti: bool) -> np.ndarray:
    """The share of systems that rank a pair in their top 10, as 0.05 + 0.6 times it (a fixed line)."""
    counts: dict[tuple[str, str], int] = {}
    for run in collection.runs.values():
        for q, docs in run.items():
            for d in docs[:10]:
                counts[(q, d)] = counts.get((q, d), 0) + 1
    share = np.array([counts.get(pair, 0) for pair in pairs]) / len(collection.runs)
    return 0.05 + 0.6 * (1.0 - share if anti else share)


def best_ranks(collection: Collection, pairs) -> np.ndarray:
    best: dict[tuple[str, str], int] = {}
    for run in collection.runs.values():
        for q, docs in run.items():
            for rank, d in enumerate(docs, 1):
                if rank < best.get((q, d), 10**9):
                    best[(q, d)] = rank
    return np.array([best.get(pair, TOOL_DEPTH) for pair in pairs], dtype=float)


def run_ranks(collection: Collection, pairs) -> dict[str, np.ndarray]:
    out = {}
    for name, run in collection.runs.items():
        rank = {(q, d): r for q, docs in run.items() for r, d in enumerate(docs, 1)}
        out[name] = np.array([rank.get(pair, np.inf) for pair in pairs], dtype=float)
    return out


def arm(
    collection: Collection,
    pooled_runs: bool,
    draws: int,
    anti: bool,
    take_all_share: float = 0.5,
    per_query: int = 3,
    budget_share: float = BUDGET,
) -> dict:
    pairs = pool_of(collection, pooled_runs)
    grade = np.array([collection.grades.get(pair, 0) for pair in pairs])
    p = agreement_estimate(collection, pairs, anti)
    queries = [q for q, _ in pairs]
    ranks_by_run = run_ranks(collection, pairs)
    truth_pool = ppi.Pool([ppi.PooledPair(q, None, 0.0, 1.0, int(g >= 1), int(g)) for q, g in zip(queries, grade)])
    truth = {
        (name, m, k): ppi.figure(truth_pool, ranks, m, k).point
        for name, ranks in ranks_by_run.items()
        for m, k in METRICS
    }
    ranks = best_ranks(collection, pairs)
    budget = int(budget_share * len(pairs))
    cases: dict[tuple[str, str], list[tuple[bool, float, float]]] = {}
    taus: dict[tuple[str, str], list[float]] = {}
    for seed in range(draws):
        split = design.split_budget(
            queries, p, ranks, set(queries), budget, uniform_share=0.2, take_all_share=take_all_share,
            per_query=per_query, seed=seed,
        )  # fmt: skip
        probability = np.where(split.drawn(), split.inclusion(), 0.0)  # 0: not reviewed
        reviewed = [
            ppi.PooledPair(q, None, float(pp), float(pi), int(g >= 1), int(g))
            if pi > 0
            else ppi.PooledPair(q, None, pp)
            for q, pp, pi, g in zip(queries, p.tolist(), probability.tolist(), grade.tolist())
        ]
        pools = {"ppi": ppi.Pool(reviewed), "ppi-platt": ppi.Pool(reviewed, "platt")}
        points: dict[tuple[str, str], list[tuple[float, float]]] = {}  # (estimator, metric) -> (estimate, truth)
        for name, ranks_of in ranks_by_run.items():
            for m, k in METRICS:
                for estimator in ESTIMATORS:
                    pool = pools["ppi" if estimator == "human" else estimator]
                    use = "human" if estimator == "human" else "ppi"
                    interval = ppi.of(ppi.figure(pool, ranks_of, m, k, use), m)
                    target = truth[(name, m, k)]
                    cases.setdefault((estimator, m), []).append(
                        (interval.low <= target <= interval.high, interval.estimate - target, interval.width)
                    )
                    points.setdefault((estimator, m), []).append((interval.estimate, target))
        for key, found in points.items():  # how this draw's figures order the systems, against the truth's order
            taus.setdefault(key, []).append(kendalltau(*zip(*found)).statistic)
    out = {"pairs": len(pairs), "queries": len(set(queries)), "systems": len(ranks_by_run), "budget": budget}
    for (estimator, m), rows in cases.items():
        covered, error, width = (np.array(column, dtype=float) for column in zip(*rows))
        out.setdefault(estimator, {})[m] = {
            "coverage": round(float(covered.mean()), 3),
            "bias": round(float(error.mean()), 4),
            "error_sd": round(float(error.std()), 4),
            "width": round(float(width.mean()), 4),
            "kendall_tau": round(float(np.nanmean(taus[(estimator, m)])), 3),
            "cases": len(rows),
        }
    for m, _ in METRICS:
        out["ppi"][m]["width_vs_human"] = round(out["ppi"][m]["width"] / max(out["human"][m]["width"], 1e-12), 3)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--collections", default="cisi,cranfield,med,npl")
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--clef2018", type=Path, help="the git dir of a snapshot of CLEFeHealth/CLEFeHealth2018IRtask")
    parser.add_argument("--estimate", choices=("agreement", "anti"), default="agreement")
    parser.add_argument("--take-all-share", type=float, default=design.TAKE_ALL_SHARE)
    parser.add_argument("--budget", type=float, default=BUDGET, help="the share of the pool reviewed")
    parser.add_argument("--take-all-per-query", type=int, default=design.TAKE_ALL_PER_QUERY)
    args = parser.parse_args(argv)
    collections = [bundled(name, seed=0) for name in args.collections.split(",") if name]
    if args.clef2018:
        collections.append(clef2018(args.clef2018))
    results = {"draws": args.draws, "estimate": args.estimate, "budget_share": args.budget, "collections": {}}
    print(f"{'collection':<10} {'pool':<6} {'metric':<9} " + "  ".join(f"{e:>28}" for e in ESTIMATORS))
    for collection in collections:
        for pooled_runs in (False, True):
            started = time.perf_counter()
            found = arm(
                collection, pooled_runs, args.draws, args.estimate == "anti", args.take_all_share,
                args.take_all_per_query, args.budget,
            )  # fmt: skip
            found["seconds"] = round(time.perf_counter() - started, 1)
            pool_name = "runs pooled" if pooled_runs else "tool pool"
            results["collections"].setdefault(collection.name, {})[pool_name] = found
            for m, _ in METRICS:
                cells = [
                    f"cov {found[e][m]['coverage']:.2f} bias {found[e][m]['bias']:+.3f} w {found[e][m]['width']:.3f}"
                    for e in ESTIMATORS
                ]
                pool = "runs" if pooled_runs else "tool"
                print(f"{collection.name:<10} {pool:<6} {m:<9} " + "  ".join(f"{c:>28}" for c in cells), flush=True)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    print(f"written to {RESULTS.relative_to(HERE.parent)}")
    return results


if __name__ == "__main__":
    main()
