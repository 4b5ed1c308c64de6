"""Does the relevance estimate transfer to a corpus it has never seen, and do prediction-powered intervals keep
their promise there?

Every collection under ``--data`` (BEIR layout: corpus.jsonl, queries.jsonl, qrels/test.tsv; SciFact from
../shared/data, the others from ``benchmarks/data``, see its README for sources and licences) is a domain. For
each domain, leave-one-domain-out:

1. Pools as propose builds them: each query's BM25 top ``--depth``, dense top ``--depth`` and their RRF fusion's top
   ``--depth``, featured by the tool's own ``query_features``. Relevant means a qrel grade >= 1, and nDCG's gain is
   the grade on the tool's 0-2 scale (:func:`tool_grade`: Cranfield's graded judgments give 1s and 2s, the binary
   collections 1s); a pooled pair without a qrel is not relevant (the collections' judgments are near-exhaustive or
   pooled deeper than this). A
   query whose pool holds no relevant pair is left out (its recall and nDCG are 0 by convention for every system).
2. The prior is fitted on the *other* domains' pools (each domain weighing the same), and the held-out domain's
   pairs are estimated with it: ROC AUC (over all pairs and the mean per query), ECE, against dense and BM25 alone.
3. Review rounds as ``select`` draws them (likely relevant pairs likelier, known probabilities), answered from the
   qrels: 100 and 300 verdicts, the refit cross-validated and cross-fitted as ``estimate`` does (each query scored by
   the model fitted without its fold's verdicts); AUC and ECE on the pairs no verdict was given for.
   With synthetic questions in a domain's cached workspace (``testset-builder synthesize --workspace
   benchmarks/.cache/transfer-NAME ...``), the prior refitted on them (each question's source relevant, the
   retrievers' other top chunks not; the base rate kept): does the domain's own synthetic set teach the estimate?
4. Systems: the retrievers over the whole corpus (BM25, dense, their linear hybrids by z-score, RRF
   fusions, re-rankings, word overlap), scored on the pool's complete labels (the truth PPI aims at, results
   outside the pool counted not relevant). Over ``--draws`` draws of 10% of the pool: the coverage and width of the
   95% prediction-powered intervals for nDCG@10, recall@100 and precision@10 (human-only for precision@10:
   recall and nDCG have none), and Kendall's tau of
   the system ranking by the PPI figures and by the estimate alone against the truth.

5. With ``--pool-systems K``: every system's top K joins the pool too (``propose --runs``), and the truth becomes
   the systems' figures on that whole pool's labels (what labelling all their results gives, as a check with full
   human labels does). PPI coverage of nDCG@10 and recall@100 when the review sees propose's own pool only (the
   systems' other results counted not relevant) and when as many verdicts are drawn from the whole pool.

    python benchmarks/estimate_transfer.py [--domains scifact,cranfield] [--draws 10] [--pool-systems 100]
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA_DIRS = (ROOT.parent / "shared" / "data", ROOT / "benchmarks" / "data")
CACHE = ROOT / "benchmarks" / ".cache"

import testset_builder.labels.design  # noqa: E402
import testset_builder.labels.features  # noqa: E402
import testset_builder.labels.fitting  # noqa: E402
import testset_builder.labels.model  # noqa: E402
import testset_builder.labels.prior  # noqa: E402
import testset_builder.labels.systems  # noqa: E402
from testset_builder.config import ChunkingConfig  # noqa: E402
from testset_builder.corpus.ingest import ingest  # noqa: E402
from testset_builder.corpus.loaders import load_sources  # noqa: E402
from testset_builder.export import read_qrels  # noqa: E402
from testset_builder.labels import estimate  # noqa: E402
from testset_builder.metrics import ppi  # noqa: E402
from testset_builder.retrieval.indexes import WorkspaceIndexes  # noqa: E402
from testset_builder.stages.synthesize.doubt import source_pools  # noqa: E402
from testset_builder.store import open_workspace  # noqa: E402

RRF_K = 60
RANKED = True  # draw as select does: by p and the pair's best rank (testset_builder.labels.design.review_weights)
SYSTEM_DEPTH = 100


@dataclass
class Domain:
    name: str
    keys: list[tuple[str, str]]  # pooled (query, chunk) pairs
    x: np.ndarray  # their features
    y: np.ndarray  # 1 relevant (grade >= 1), 0 not
    g: np.ndarray  # the grade on the tool's scale, nDCG's gain (:func:`tool_grade`)
    systems: dict[str, dict[tuple[str, str], int]]  # system -> pooled pair -> rank in its top SYSTEM_DEPTH
    chunks: int
    synthetic_x: np.ndarray | None = None  # the workspace's synthetic questions' examples (estimate.synthetic_examples)
    synthetic_y: np.ndarray | None = None
    proposed: np.ndarray | None = None  # with --pool-systems: which pairs propose's own pool holds (without --runs)
    system_ranks: np.ndarray | None = None  # with --pool-systems: each pair's best rank by a pooled system (select's)

    @property
    def queries(self) -> list[str]:
        return sorted({q for q, _ in self.keys})


def domains_found(names: list[str] | None) -> list[Path]:
    """The BEIR folders under :data:`DATA_DIRS`, by name; a gzipped corpus is unpacked into the cache once."""
    found = {}
    for directory in DATA_DIRS:
        if directory.is_dir():
            for folder in sorted(directory.iterdir()):
                if (folder / "qrels" / "test.tsv").is_file() and (folder / "corpus.jsonl").is_file():
                    found.setdefault(folder.name, folder)
                elif (folder / "qrels" / "test.tsv").is_file() and (folder / "corpus.jsonl.gz").is_file():
                    found.setdefault(folder.name, unpacked(folder))
    return [found[n] for n in (names or sorted(found)) if n in found]


def unpacked(folder: Path) -> Path:
    target = CACHE / "data" / folder.name
    if not (target / "corpus.jsonl").is_file():
        (target / "qrels").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / "queries.jsonl", target / "queries.jsonl")
        shutil.copyfile(folder / "qrels" / "test.tsv", target / "qrels" / "test.tsv")
        with gzip.open(folder / "corpus.jsonl.gz", "rb") as packed, (target / "corpus.partial").open("wb") as out:
            shutil.copyfileobj(packed, out)
        (target / "corpus.partial").rename(target / "corpus.jsonl")
    return target


def _ranks(scores: np.ndarray, depth: int) -> np.ndarray:
    """The positions of the ``depth`` best scores, best first (ties by position)."""
    top = np.argpartition(-scores, min(depth, len(scores) - 1))[:depth]
    return top[np.lexsort((top, -scores[top]))]


def _z(rows: np.ndarray) -> np.ndarray:
    return (rows - rows.mean(axis=1, keepdims=True)) / (rows.std(axis=1, keepdims=True) + 1e-9)


def _rrf(*orders: np.ndarray, n: int, k: int = RRF_K) -> np.ndarray:
    fused = np.zeros(n)
    for order in orders:
        fused[order] += 1.0 / (k + 1 + np.arange(len(order)))
    return fused


def system_scores(bm25: np.ndarray, dense: np.ndarray, overlap: np.ndarray) -> dict[str, np.ndarray]:
    """Retrievers over the whole corpus for one query, each a score per chunk: lexical, dense, linear hybrids of
    their z-scores, RRF fusions, re-rankings of one's top 100 by the other, and plain word overlap."""
    n = len(bm25)
    zb, zd = _z(bm25[None])[0], _z(dense[None])[0]
    by_bm25, by_dense = _ranks(bm25, SYSTEM_DEPTH), _ranks(dense, SYSTEM_DEPTH)
    out = {"bm25": bm25, "dense": dense, "overlap": overlap + 1e-6 * zb}
    for alpha in (0.2, 0.35, 0.5, 0.65, 0.8):
        out[f"hybrid-{alpha:g}"] = alpha * zb + (1 - alpha) * zd
    out["rrf-60"] = _rrf(by_bm25, by_dense, n=n)
    out["rrf-5"] = _rrf(by_bm25, by_dense, n=n, k=5)
    rerank = np.full(n, -1e9)
    rerank[by_bm25] = dense[by_bm25]
    out["bm25>dense"] = rerank
    rerank = np.full(n, -1e9)
    rerank[by_dense] = bm25[by_dense]
    out["dense>bm25"] = rerank
    rerank = np.full(n, -1e9)
    rerank[by_bm25[:20]] = 10 + dense[by_bm25[:20]]
    rerank[by_bm25[20:]] = bm25[by_bm25[20:]] / (bm25.max() + 1e-9)
    out["bm25>dense@20"] = rerank
    return out


def tool_grade(score: int, top: int) -> int:
    """A collection's relevance score on the tool's 0-2 scale: 0 below 1, 2 in the upper half of the positive
    scores (Cranfield's 3 and 4, its complete answers and high relevance), else 1; a binary collection keeps 0/1."""
    if score < 1:
        return 0
    return 2 if top > 1 and score >= (top + 1) / 2 else 1


def load_domain(folder: Path, queries_wanted: int, depth: int, seed: int, pool_systems: int = 0) -> Domain:
    name = folder.name
    texts = {q["_id"]: q["text"] for q in map(json.loads, (folder / "queries.jsonl").open(encoding="utf-8"))}
    qrels = read_qrels(folder / "qrels" / "test.tsv").to_dict()
    relevant = {q: {d for d, g in by.items() if g >= 1} for q, by in qrels.items()}
    top = max((g for by in qrels.values() for g in by.values()), default=1)
    grades = {(q, d): tool_grade(g, top) for q, by in qrels.items() for d, g in by.items()}
    query_ids = sorted(q for q in relevant if relevant[q] and q in texts)
    query_ids = sorted(np.random.default_rng(seed).permutation(query_ids)[:queries_wanted].tolist())
    with open_workspace(CACHE / f"transfer-{name}") as ws:
        ingest(ws, load_sources([folder]), ChunkingConfig(chunker="prechunked", size=1, overlap=0), [folder])
        indexes = WorkspaceIndexes(ws, ("bm25", "dense"))
        chunk_ids = indexes.chunk_ids
        passages = indexes.passages.of(chunk_ids)  # prechunked: a chunk id is its document's id
        batch = [texts[q] for q in query_ids]
        bm25_rows = indexes.indexes["bm25"].scores(batch)
        dense_rows = indexes.indexes["dense"].scores(batch)
        sx, sy, _ = synthetic_examples(ws, indexes)  # when `synthesize` made questions in the workspace
    chunk_words = [testset_builder.labels.features.words(passages[c]) for c in chunk_ids]
    keys, blocks, labels, proposed, system_ranks = [], [], [], [], []
    systems: dict[str, dict[tuple[str, str], int]] = {}
    for row, query_id in enumerate(query_ids):
        bm25, dense = np.asarray(bm25_rows[row], dtype=float), np.asarray(dense_rows[row], dtype=float)
        query_words = testset_builder.labels.features.words(texts[query_id])
        by_bm25, by_dense = _ranks(bm25, depth), _ranks(dense, depth)
        fused = _ranks(_rrf(_ranks(bm25, 100), _ranks(dense, 100), n=len(bm25)), depth)
        members = list(dict.fromkeys([*by_bm25.tolist(), *by_dense.tolist(), *fused.tolist()]))
        if not any(chunk_ids[i] in relevant[query_id] for i in members):
            continue  # no relevant pair in its pool: recall and nDCG are 0 by convention, whatever a system does
        overlap = np.array([len(query_words & w) / max(1, len(query_words)) for w in chunk_words])
        scored = system_scores(bm25, dense, overlap)
        own = len(members)
        if pool_systems:  # propose --runs: every system's top pool_systems joins the pool
            tops = [_ranks(scores, pool_systems).tolist() for scores in scored.values()]
            members = list(dict.fromkeys([*members, *(i for top in tops for i in top)]))
            best = {}
            for top in tops:
                for rank, i in enumerate(top, start=1):
                    best[i] = min(best.get(i, rank), rank)
            system_ranks.extend(best.get(i, np.inf) for i in members)
        proposed.extend([True] * own + [False] * (len(members) - own))
        pooled = [(query_id, chunk_ids[i]) for i in members]
        keys.extend(pooled)
        labels.extend(chunk_ids[i] in relevant[query_id] for i in members)
        blocks.append(
            testset_builder.labels.features.query_features(
                dense, bm25, members, query_words, [chunk_words[i] for i in members], [None] * len(members)
            )
        )
        members_set = {chunk_ids[i]: i for i in members}
        for system, scores in scored.items():
            ranked = _ranks(scores, SYSTEM_DEPTH)
            ranks = systems.setdefault(system, {})
            for rank, position in enumerate(ranked, start=1):
                if chunk_ids[position] in members_set:
                    ranks[(query_id, chunk_ids[position])] = rank
    x = np.vstack(blocks)
    x[:, testset_builder.labels.features.FEATURES.index("llm")] = (
        0.0  # no judge here: the prior gives the LLM no weight
    )
    x[:, testset_builder.labels.features.FEATURES.index("llm_missing")] = 0.0
    synthetic = (sx, sy) if len(sy) else (None, None)
    g = np.array([grades.get(key, 0) for key in keys])
    return Domain(
        name, keys, x, np.asarray(labels, dtype=float), g, systems, len(chunk_ids), *synthetic,
        np.array(proposed) if pool_systems else None, np.array(system_ranks) if pool_systems else None,
    )  # fmt: skip


def fit_prior(
    domains: list[Domain], l2: float = 1e-2, columns: tuple[str, ...] = testset_builder.labels.prior.PRIOR_FEATURES
) -> testset_builder.labels.fitting.Coefficients:
    """A logistic fit on the pools of ``domains``, each domain weighing the same in total, on ``columns`` only (the
    other features held at 0, so the penalty keeps their weights at 0)."""
    keep = np.isin(
        np.arange(len(testset_builder.labels.features.FEATURES)),
        [testset_builder.labels.features.FEATURES.index(c) for c in columns],
    )
    x = np.vstack([d.x for d in domains]) * keep
    y = np.concatenate([d.y for d in domains])
    w = np.concatenate([np.full(len(d.y), len(y) / (len(domains) * len(d.y))) for d in domains])
    fitted = testset_builder.labels.fitting.penalised_fit(
        x,
        y,
        testset_builder.labels.fitting.Coefficients(0.0, (0.0,) * x.shape[1]),
        testset_builder.labels.fitting.penalties(x.shape[1], l2, 1e-3),
        w,
    )
    return testset_builder.labels.fitting.Coefficients(fitted.bias, tuple(fitted.weights))


def shipped_priors(domains: list[Domain]) -> dict:
    """The priors to ship, fitted on every domain: on ``PRIOR_FEATURES``, and without the dense model on
    ``PRIOR_LEXICAL_FEATURES`` (:mod:`testset_builder.labels.prior`; the pools' features as a workspace without the
    dense model gives them)."""
    out = {}
    full = fit_prior(domains)
    lexical_domains = [
        Domain(
            d.name, d.keys, testset_builder.labels.features.without_dense(d.x, d.chunks), d.y, d.g, d.systems, d.chunks
        )
        for d in domains
    ]
    lexical = fit_prior(lexical_domains, columns=testset_builder.labels.prior.PRIOR_LEXICAL_FEATURES)
    for name, fitted in (("dense", full), ("lexical", lexical)):
        print(f"prior ({name}) on {', '.join(d.name for d in domains)}:")
        print(f"    bias={fitted.bias:.4f},\n    weights=({', '.join(f'{w:.4f}' for w in fitted.weights)}),")
        out[name] = {
            "bias": fitted.bias,
            "weights": dict(zip(testset_builder.labels.features.FEATURES, fitted.weights)),
        }
    return out


def per_query_auc(p: np.ndarray, y: np.ndarray, keys) -> float | None:
    by: dict[str, list[int]] = {}
    for i, (q, _) in enumerate(keys):
        by.setdefault(q, []).append(i)
    values = [testset_builder.labels.fitting.roc_auc(p[idx], y[idx]) for idx in by.values()]
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def quality(p, y, keys) -> dict:
    return {
        "auc": testset_builder.labels.fitting.roc_auc(p, y),
        "auc_per_query": per_query_auc(p, y, keys),
        "ece": testset_builder.labels.fitting.expected_calibration_error(p, y),
        "mean_p": float(np.mean(p)),
        "relevant_share": float(np.mean(y)),
    }


def review_round(
    domain: Domain, prior: testset_builder.labels.fitting.Coefficients, budget: float, seed: int, strength: float
):
    """One ``select`` round of about ``budget`` pairs (the take-all part, then the Poisson sample) answered from the
    qrels, then ``estimate``'s cross-validated,
    cross-fitted refit: each pair's P(relevant) by its fold's model, and which pairs were drawn at what
    probability."""
    p0 = testset_builder.labels.fitting.sigmoid(prior.logits(domain.x))
    best = np.expm1(
        domain.x[
            :,
            [
                testset_builder.labels.features.FEATURES.index("bm25_log_rank"),
                testset_builder.labels.features.FEATURES.index("dense_log_rank"),
            ],
        ]
    )
    best = best.min(axis=1)
    if domain.system_ranks is not None:  # the systems pooled: select weighs their ranks too
        best = np.minimum(best, domain.system_ranks)
    design = testset_builder.labels.design
    queries = [q for q, _ in domain.keys]
    split = design.split_budget(
        queries, p0, best if RANKED else np.ones(len(p0)), set(queries), round(budget),
        uniform_share=0.2, take_all_share=design.TAKE_ALL_SHARE, per_query=design.TAKE_ALL_PER_QUERY, seed=seed,
    )  # fmt: skip
    probabilities, drawn = split.inclusion(), split.drawn()
    index = np.flatnonzero(drawn)
    groups = [domain.keys[i][0] for i in index]
    _, validation, folds = testset_builder.labels.fitting.validated_fit(
        domain.x[index], domain.y[index], groups, prior,
        testset_builder.labels.fitting.penalties(domain.x.shape[1], strength), 1.0 / probabilities[index],
    )  # fmt: skip
    fold = np.array([testset_builder.labels.fitting.fold_of(q) for q, _ in domain.keys])
    p = np.zeros(len(domain.y))
    for f, model in folds.items():
        p[fold == f] = testset_builder.labels.fitting.sigmoid(model.logits(domain.x[fold == f]))
    return p, drawn, probabilities, validation


METRICS = (("ndcg", 10), ("recall", 100), ("precision", 10))


def coverage(
    domain: Domain, prior, draws: int, share: float, strength: float, truth_from: Domain | None = None,
    metrics: tuple[tuple[str, int], ...] = METRICS,
) -> dict:  # fmt: skip
    """PPI and human-only intervals over ``draws`` review rounds of ``share`` of the pool, per system and metric;
    the truth is each system's figure on the complete labels of ``truth_from``'s pool (default: this one's)."""
    from scipy.stats import kendalltau

    whole = truth_from or domain
    truth = {
        (s, m, k): ppi.exact([(q, ranks.get((q, c)), int(g)) for (q, c), g in zip(whole.keys, whole.g)], m, k)
        for s, ranks in whole.systems.items()
        for m, k in metrics
    }
    out = {f"{m}@{k}": {"ppi": [], "human": [], "ppi_width": [], "human_width": [], "tau_ppi": [],
                        "tau_estimate": [], "outside_range": 0, "zero_width": 0} for m, k in metrics}  # fmt: skip
    for seed in range(draws):
        p, drawn, probabilities, _ = review_round(domain, prior, share * len(domain.y), seed, strength)
        for m, k in metrics:
            record = out[f"{m}@{k}"]
            figures, estimates, truths = [], [], []
            for system, ranks in domain.systems.items():
                pairs = [
                    ppi.PooledPair(
                        q, ranks.get((q, c)), float(p[i]), float(probabilities[i]) if drawn[i] else None,
                        int(domain.y[i]) if drawn[i] else None, int(domain.g[i]) if drawn[i] else None,
                    )
                    for i, (q, c) in enumerate(domain.keys)
                ]  # fmt: skip
                value = truth[(system, m, k)]
                powered, human = ppi.estimate(pairs, m, k, "ppi"), ppi.estimate(pairs, m, k, "human")
                record["ppi"].append(powered.low <= value <= powered.high)
                record["human"].append(human.low <= value <= human.high)
                record["human_width"].append(human.width)
                record["ppi_width"].append(powered.width)
                record["outside_range"] += powered.low < 0 or powered.high > 1
                record["zero_width"] += powered.width == 0
                figures.append(powered.estimate)
                estimates.append(ppi.estimate(pairs, m, k, "estimate").estimate)
                truths.append(value)
            record["tau_ppi"].append(kendalltau(figures, truths).statistic)
            record["tau_estimate"].append(kendalltau(estimates, truths).statistic)
    return {
        name: {
            "ppi_coverage": float(np.mean(r["ppi"])), "ppi_width": float(np.mean(r["ppi_width"])),
            "human_coverage": float(np.mean(r["human"])) if r["human"] else None,
            "human_width": float(np.mean(r["human_width"])) if r["human"] else None,
            "tau_ppi": _mean_tau(r["tau_ppi"]), "tau_estimate": _mean_tau(r["tau_estimate"]),
            "outside_range": r["outside_range"], "zero_width": r["zero_width"], "cases": len(r["ppi"]),
        }
        for name, r in out.items()
    }  # fmt: skip


def pooling(domain: Domain, prior, draws: int, share: float, strength: float) -> dict:
    """With ``--pool-systems K``, the truth is each system's figure on the labels of the whole pool (propose's pool
    and every system's top K, labelled by the collection's judgments: what a full human labelling of the systems'
    results gives). The prediction-powered figures come from reviewing ``share`` of propose's own pool, the systems
    not pooled (what it lacks counts as not relevant), and from as many verdicts drawn from the whole pool (the
    systems pooled, `propose --runs`)."""
    own = np.flatnonzero(domain.proposed)
    keys = [domain.keys[i] for i in own]
    kept = set(keys)
    systems = {s: {key: rank for key, rank in ranks.items() if key in kept} for s, ranks in domain.systems.items()}
    alone = Domain(domain.name, keys, blind(domain.x[own]), domain.y[own], domain.g[own], systems, domain.chunks)
    metrics = (("ndcg", 10), ("recall", 100))
    return {
        "not pooled": coverage(alone, prior, draws, share, strength, truth_from=domain, metrics=metrics),
        "pooled": coverage(domain, prior, draws, share * len(own) / len(domain.keys), strength, metrics=metrics),
    }


def blind(x: np.ndarray) -> np.ndarray:
    """The features as they are with no system pooled: the systems' columns are not among them."""
    return x.copy()


def _mean_tau(values: list[float]) -> float | None:
    """The mean of the draws' Kendall taus; a draw whose figures all tie (every recall at 1) has none."""
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else None


# the domain fit: the prior refitted on the workspace's own synthetic questions (measured, not shipped) ---------------

DOMAIN_DEPTH = 10  # each retriever's top chunks for a synthetic question, its source's competitors
DOMAIN_STRENGTH = 10.0  # the domain fit's pull towards the shipped prior (the verdicts' refit uses REFIT_STRENGTH)


def synthetic_examples(workspace, indexes) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Labelled pairs the workspace has for free: each synthetic question (not dropped by a reviewer) against its
    source chunk (relevant) and each retriever's top :data:`DOMAIN_DEPTH` other chunks (not relevant, unless a
    human or the source labels them: a twin, a mined answer a reviewer confirmed; a chunk an LLM proposed as
    relevant is left out, neither). Returns the features, the labels and each pair's question (its group)."""
    from testset_builder.records import JudgmentSource
    from testset_builder.store import review as review_store
    from testset_builder.store import rows

    dropped = review_store.dropped_queries(workspace.db)
    questions = [
        q
        for q in (rows.get_query(workspace.db, i) for i in rows.synthetic_query_ids(workspace.db) if i not in dropped)
        if q.source_chunk_id
    ]
    if not questions:
        return np.zeros((0, len(testset_builder.labels.features.FEATURES))), np.zeros(0), []
    relevant: dict[str, set[str]] = {}
    doubtful: dict[str, set[str]] = {}
    for judgment in rows.iter_judgments(workspace.db):
        if judgment.grade >= 1 and judgment.source in (JudgmentSource.human, JudgmentSource.synthetic_source):
            relevant.setdefault(judgment.query_id, set()).add(judgment.chunk_id)
        elif judgment.grade >= 1:
            doubtful.setdefault(judgment.query_id, set()).add(judgment.chunk_id)
    pools = source_pools(indexes, questions, DOMAIN_DEPTH)
    pools = {q: [c for c in cs if c not in doubtful.get(q, set())] for q, cs in pools.items()}
    features = estimate.pair_features(indexes, {q.query_id: q.text for q in questions}, pools)
    keys = [(q, c) for q, cs in pools.items() for c in cs if (q, c) in features]
    x = np.vstack([features[k] for k in keys])
    (
        x[:, testset_builder.labels.features.FEATURES.index("llm")],
        x[:, testset_builder.labels.features.FEATURES.index("llm_missing")],
    ) = (
        0.0,
        0.0,
    )  # as the pools here
    y = np.array([float(c in relevant.get(q, set())) for q, c in keys])
    return x, y, [q for q, _ in keys]


def domain_model(prior, x: np.ndarray, y: np.ndarray, anchor: np.ndarray, strength: float = DOMAIN_STRENGTH):
    """The prior refitted on the domain's synthetic examples (pulled towards it by ``strength``): the
    weights learn how this corpus's relevant chunks look; the bias is then set so that the mean P(relevant) over
    ``anchor`` (the workspace's real pairs' features) stays the prior's, since a synthetic question has exactly one
    relevant chunk by construction and says nothing of how many a real query has."""
    if len(y) < testset_builder.labels.model.MIN_VERDICTS or y.min() == y.max():
        return prior
    fitted = testset_builder.labels.fitting.penalised_fit(
        x,
        y,
        testset_builder.labels.fitting.Coefficients(prior.bias, prior.weights),
        testset_builder.labels.fitting.penalties(x.shape[1], strength, 0.01),
    )
    target = float(prior.p_relevant(anchor).mean()) if len(anchor) else None
    logits = fitted.logits(anchor) - fitted.bias if len(anchor) else None
    bias = fitted.bias
    if target is not None:
        low, high = -40.0, 40.0
        for _ in range(80):  # the bias whose mean P over the anchor equals the prior's: monotone, by bisection
            middle = (low + high) / 2
            low, high = (
                (middle, high)
                if float(testset_builder.labels.fitting.sigmoid(logits + middle).mean()) < target
                else (low, middle)
            )
        bias = (low + high) / 2
    return testset_builder.labels.model.RelevanceModel(f"domain:{prior.name}", bias, fitted.weights, 0)


def fmt(value) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--domains", help="comma-separated names (default: every one found)")
    parser.add_argument("--queries", type=int, default=60, help="queries per domain (seeded sample)")
    parser.add_argument("--depth", type=int, default=30, help="pool depth per retriever and for the fusion")
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--share", type=float, default=0.1, help="share of the pool reviewed in the PPI draws")
    parser.add_argument("--strength", type=float, default=testset_builder.labels.model.REFIT_STRENGTH)
    parser.add_argument("--no-ppi", action="store_true", help="the estimate's quality only")
    parser.add_argument("--fit", action="store_true", help="fit the prior on every domain and print it to ship")
    parser.add_argument(
        "--pool-systems", type=int, default=0, metavar="K",
        help="also pool every system's top K (propose --runs) and measure PPI against that whole pool's labels, "
        "with and without the systems pooled",
    )  # fmt: skip
    args = parser.parse_args(argv)
    folders = domains_found(args.domains.split(",") if args.domains else None)
    if len(folders) < 2:
        print(f"estimate transfer: needs at least two domains, found {[f.name for f in folders]}; skipped")
        return {}
    started = time.perf_counter()
    domains = [load_domain(folder, args.queries, args.depth, seed=0) for folder in folders]
    if args.pool_systems:  # the prior is fitted on propose's own pools, as shipped
        wide = {
            f.name: load_domain(f, args.queries, args.depth, seed=0, pool_systems=args.pool_systems) for f in folders
        }
    print(
        f"{len(domains)} domains, pools of depth {args.depth} ({time.perf_counter() - started:.0f} s): "
        + ", ".join(f"{d.name} ({len(d.queries)} queries, {len(d.y)} pairs, {d.y.sum():.0f} relevant)" for d in domains)
    )
    report: dict = {"domains": {}}
    if args.fit:
        report["fitted"] = shipped_priors(domains)
    for held_out in domains:
        others = [d for d in domains if d is not held_out]
        prior = fit_prior(others)
        p0 = testset_builder.labels.fitting.sigmoid(prior.logits(held_out.x))
        dense = held_out.x[:, testset_builder.labels.features.FEATURES.index("dense")]
        bm25 = held_out.x[:, testset_builder.labels.features.FEATURES.index("bm25")]
        shipped = testset_builder.labels.prior.PRIOR.p_relevant(held_out.x)
        row = {
            "prior (other domains)": quality(p0, held_out.y, held_out.keys),
            "shipped (in sample)": quality(shipped, held_out.y, held_out.keys),
            "dense alone": {"auc": testset_builder.labels.fitting.roc_auc(dense, held_out.y)},
            "bm25 alone": {"auc": testset_builder.labels.fitting.roc_auc(bm25, held_out.y)},
        }
        if held_out.synthetic_y is not None:  # the prior refitted on the domain's own synthetic questions
            start = testset_builder.labels.model.RelevanceModel("lodo", prior.bias, prior.weights)
            for strength in (10.0, 100.0):
                fitted = domain_model(start, held_out.synthetic_x, held_out.synthetic_y, held_out.x, strength)
                row[f"domain fit ({int(held_out.synthetic_y.sum())} q, {strength:g})"] = quality(
                    fitted.p_relevant(held_out.x), held_out.y, held_out.keys
                )
        for budget in (100, 300):
            results = []
            for seed in range(5):
                p, drawn, _, validation = review_round(held_out, prior, budget, seed, args.strength)
                unseen = ~drawn
                q = quality(p[unseen], held_out.y[unseen], [k for k, u in zip(held_out.keys, unseen) if u])
                results.append({**q, "kept": validation.kept})
            row[f"after {budget} verdicts"] = {
                key: float(np.mean([r[key] for r in results if r[key] is not None])) for key in results[0]
            }
        print(f"\n{held_out.name} (prior fitted on {', '.join(d.name for d in others)}):")
        for label, figures in row.items():
            print(
                f"  {label:<24} AUC {fmt(figures.get('auc'))}  per query {fmt(figures.get('auc_per_query'))}  "
                f"ECE {fmt(figures.get('ece'))}  mean P {fmt(figures.get('mean_p'))} vs relevant "
                f"{fmt(figures.get('relevant_share'))}"
                + (f"  refit kept {figures['kept']:.0%}" if "kept" in figures else "")
            )
        if args.pool_systems:
            whole = wide[held_out.name]
            print(
                f"  pooling the systems' top {args.pool_systems}: {len(whole.y)} pairs, {whole.y.sum():.0f} relevant "
                f"(propose's own: {whole.proposed.sum()}, {whole.y[whole.proposed].sum():.0f} relevant); about "
                f"{args.share * whole.proposed.sum():.0f} verdicts a draw either way, {args.draws} draws"
            )
            for budget in (100, 300):  # does the refit learn anything from the systems' agreement?
                for name, x in (("with", whole.x), ("without", blind(whole.x))):
                    case = Domain(whole.name, whole.keys, x, whole.y, whole.g, whole.systems, whole.chunks)
                    case.system_ranks = whole.system_ranks
                    aucs, refits = [], []
                    for seed in range(5):
                        p, drawn, _, validation = review_round(case, prior, budget, seed, args.strength)
                        aucs.append(testset_builder.labels.fitting.roc_auc(p[~drawn], whole.y[~drawn]))
                        refits.append(validation.kept and validation.reason.startswith("refit"))
                    found = [a for a in aucs if a is not None]
                    row[f"pooled, after {budget} verdicts, {name} the systems' agreement"] = {
                        "auc": float(np.mean(found)) if found else None
                    }
                    print(  # only a full refit can weigh the agreement; a recalibration moves the base rate alone
                        f"  pooled, after {budget} verdicts, {name + ' the systems agreement':<30} AUC "
                        f"{fmt(float(np.mean(found)) if found else None)}  full refit kept {np.mean(refits):.0%}"
                    )
            row["pooling"] = pooling(whole, prior, args.draws, args.share, args.strength)
            for pooled, figures in row["pooling"].items():
                for metric, r in figures.items():
                    print(
                        f"  systems {pooled:<10} {metric:<10} PPI coverage {r['ppi_coverage']:.2f} (width "
                        f"{r['ppi_width']:.3f}) of the whole pool's figures; tau {fmt(r['tau_ppi'])}"
                    )
        if not args.no_ppi:
            row["ppi"] = coverage(held_out, prior, args.draws, args.share, args.strength)
            for metric, r in row["ppi"].items():
                human = (
                    f"{r['human_coverage']:.2f} (width {r['human_width']:.3f})" if r["human_coverage"] is not None
                    else "no interval"
                )  # fmt: skip
                print(
                    f"  {metric:<10} PPI coverage {r['ppi_coverage']:.2f} (width {r['ppi_width']:.3f}), human-only "
                    f"{human}; tau PPI {fmt(r['tau_ppi'])}, estimate "
                    f"alone {fmt(r['tau_estimate'])}; {r['cases']} cases over {len(held_out.systems)} systems, "
                    f"{r['outside_range']} outside [0, 1], {r['zero_width']} of zero width"
                )
        report["domains"][held_out.name] = row
    print(f"\nestimate transfer: {time.perf_counter() - started:.0f} s")
    return report


if __name__ == "__main__":
    main(sys.argv[1:])
