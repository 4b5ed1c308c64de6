"""Does a synthetic test set rank retrievers the way human labels do, with and without the question rules?

For each collection named (``--collection scifact,cranfield``: a folder in BEIR layout under ``/work/shared/data``
or ``benchmarks/data``, or a path to one; a gzipped corpus is unpacked into ``benchmarks/.cache/data`` once), builds
a synthetic set with ``synthesize`` (one chunk per document, so chunk ids are document ids) twice: with the question
rules (``testset_builder/question_rules.py``) and with ``synthesize.question_rules`` off, which keeps only the checks
of form. Both sets start from the same sampled chunks and seeds, and the second run reads the first's LLM answers
from a copy of its cache, so the rules are the only difference: the set with them replaces the questions they reject
with questions from further rounds. ``--rules on`` or ``off`` builds one set only. It scores 15 retrievers on each
set and on the collection's human test qrels, and reports:

- nDCG@10 of every retriever on each set, and each retriever's rank;
- Kendall's tau-b between the human and the synthetic rankings, with a 95% bootstrap interval over queries (human
  and synthetic queries resampled independently, both rankings recomputed per resample, seeded; resampling adds
  noise to both rankings, so the resampled taus sit below the point estimate and a high tau's interval can end at
  it: the median of the resamples is reported too);
- the significant-pair agreement: of the retriever pairs whose human nDCG@10 differs significantly (paired
  randomization test over queries, Holm-corrected over all pairs, alpha 0.05), how many the synthetic set orders the
  same way, how many it also finds significant, and how many it finds significant the other way round;
- a noise ceiling: tau between the human rankings on disjoint random subsets of the human queries (as many as the
  synthetic set has, against the rest): what a set of that size drawn like the human queries typically reaches;
- the overlap control: the share of each question's content words found in its source chunk(s)
  (``questions.lexical_overlap``), and the same figures on the questions with overlap at most a cap
  (``--max-overlap``; default the median, or the next value below it when ties at the median would keep over two
  thirds), to show whether lexical leakage from the source inflates BM25;
- with ``--mine``, a further column whose labels add the mined relevant chunks (grade 1): the pairs the estimate
  puts at P(relevant) >= 0.5 (the estimates table) when the stage mined by estimate, the judge's positive (``llm``)
  grades when it mined with the LLM judge.

Retrievers, built from what every collection has (the passage as the workspace indexes it: the title, when there is
one, on a line above the text): BM25 (bm25s Lucene, Snowball stemming) at k1/b = 1.5/0.75 (bm25s default), 0.9/0.4,
1.2/1.0 and 2.0/0.75; BM25 without stemming; BM25 on the passage's lead (its first line or sentence, at most 24
words: the title where there is one), on its body (the rest) and on the body's lead; dense all-MiniLM-L6-v2 on the
passage, on its first 32 words and on its lead; RRF (k=60) of bm25+dense, bm25-lead+dense, bm25-nostem+dense and
bm25+bm25-lead. On a collection with titles, lead and body are the title and the abstract. Indexes are cached under
``benchmarks/.cache/indexes``; dense needs the dense extra (without it the dense retrievers and mixes are left out).

Runs with the embedded local model by default; any provider's config can be passed (``--config
configs/openai.yaml``; ``--set KEY=VALUE`` overrides any setting). Each collection, question count, seed and rule
setting gets a workspace of its own (``benchmarks/.cache/synthetic-agreement-{collection}-q{N}``, with
``-without-rules`` for the set without the rules) that is kept, so a rerun reads every LLM answer from the cache;
only the questions this run's ``synthesize`` accepted are scored. The local model writes a question in 15-30 s on
two busy cores; a cached rerun takes a few minutes, most of it the randomization tests.

    python benchmarks/synthetic_agreement.py [--collection scifact,cranfield] [--questions 60] [--rules both]
        [--seed 0] [--config FILE] [--mine] [--max-overlap 0.8] [--resamples 1000]
        [--set synthesize.relevance_by=llm] [--json report.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np
import yaml
from scipy.stats import kendalltau, spearmanr

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / "benchmarks" / ".cache"
sys.path.insert(0, str(ROOT / "benchmarks"))

from estimate_transfer import DATA_DIRS, unpacked  # noqa: E402

from testset_builder import question_rules  # noqa: E402
from testset_builder.config import ChunkingConfig, resolve_config  # noqa: E402
from testset_builder.corpus.ingest import ingest  # noqa: E402
from testset_builder.corpus.loaders import load_sources  # noqa: E402
from testset_builder.export import read_qrels  # noqa: E402
from testset_builder.llm.roles import open_roles  # noqa: E402
from testset_builder.metrics import evaluate  # noqa: E402
from testset_builder.metrics.stats import holm, randomization_test  # noqa: E402
from testset_builder.questions import lexical_overlap  # noqa: E402
from testset_builder.records import passage_text  # noqa: E402
from testset_builder.retrieval import BM25Index, DenseIndex, dense_available, reciprocal_rank_fusion  # noqa: E402
from testset_builder.stages.synthesize import synthesize  # noqa: E402
from testset_builder.store import open_workspace  # noqa: E402
from testset_builder.tables import Qrels  # noqa: E402

METRIC = "ndcg@10"
BM25_SETTINGS = ((0.9, 0.4), (1.2, 1.0), (2.0, 0.75))  # besides bm25s's default k1=1.5, b=0.75
MIXES = (("bm25", "dense"), ("bm25-lead", "dense"), ("bm25-nostem", "dense"), ("bm25", "bm25-lead"))
MINED_P = 0.5
LEAD_WORDS = 24
RULE_SETTINGS = {"on": ("with rules", True), "off": ("without rules", False)}


# statistics (pure numpy; tests/test_synthetic_agreement_stats.py) ---------------------------------------------------
def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Kendall's tau-b between the rows of ``x`` and ``y`` (each (B, R): B rankings of R items), vectorised over B.

    A single pair of 1-d vectors gives a 0-d array. NaN where either row is constant."""
    single = np.ndim(x) == 1 and np.ndim(y) == 1
    x, y = np.atleast_2d(np.asarray(x, dtype=np.float64)), np.atleast_2d(np.asarray(y, dtype=np.float64))
    i, j = np.triu_indices(x.shape[1], 1)
    dx, dy = np.sign(x[:, i] - x[:, j]), np.sign(y[:, i] - y[:, j])
    pairs = len(i)
    untied_x, untied_y = pairs - (dx == 0).sum(axis=1), pairs - (dy == 0).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = (dx * dy).sum(axis=1) / np.sqrt(untied_x * untied_y)
    return tau.reshape(()) if single else tau


def resampled_means(scores: np.ndarray, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """Means of ``scores`` (retrievers x queries) over ``resamples`` bootstrap resamples of the queries: (B, R)."""
    n = scores.shape[1]
    counts = np.zeros((resamples, n))
    rows = np.repeat(np.arange(resamples), n)
    np.add.at(counts, (rows, rng.integers(0, n, size=resamples * n)), 1.0)
    return counts @ scores.T / n


def bootstrap_tau(
    human: np.ndarray, synthetic: np.ndarray, resamples: int = 1000, seed: int = 0, confidence: float = 0.95
) -> dict:
    """Tau between the retrievers' mean scores on two query sets (each retrievers x queries), with a percentile
    bootstrap interval: both query sets resampled independently, both rankings recomputed each time."""
    rng = np.random.default_rng(seed)
    point = float(kendall_tau_b(human.mean(axis=1), synthetic.mean(axis=1)))
    taus = kendall_tau_b(resampled_means(human, resamples, rng), resampled_means(synthetic, resamples, rng))
    taus = taus[~np.isnan(taus)]
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(taus, [tail, 1.0 - tail]) if len(taus) else (float("nan"), float("nan"))
    return {
        "tau": point,
        "ci_low": float(low),
        "ci_high": float(high),
        "resampled_median": float(np.median(taus)) if len(taus) else float("nan"),
        "share_at_least_0.9": float((taus >= 0.9).mean()) if len(taus) else float("nan"),
        "resamples": resamples,
    }


def split_tau(human: np.ndarray, size: int, draws: int = 1000, seed: int = 0) -> dict:
    """The noise ceiling: tau between the rankings on ``size`` random human queries and on the other ones."""
    rng = np.random.default_rng(seed)
    n = human.shape[1]
    size = min(size, n - 1)
    order = np.argsort(rng.random((draws, n)), axis=1)
    inside = np.zeros((draws, n), dtype=bool)
    np.put_along_axis(inside, order[:, :size], True, axis=1)
    a = inside.astype(np.float64) @ human.T / size
    b = (~inside).astype(np.float64) @ human.T / (n - size)
    taus = kendall_tau_b(a, b)
    return {
        "queries": size,
        "median": float(np.nanmedian(taus)),
        "p2.5": float(np.nanquantile(taus, 0.025)),
        "p97.5": float(np.nanquantile(taus, 0.975)),
    }


def pairwise_tests(scores: np.ndarray, alpha: float = 0.05, resamples: int = 10_000, seed: int = 0) -> dict:
    """Every retriever pair (i < j): mean difference (j - i), two-sided paired randomization p-value, and whether
    it is significant after Holm's correction over all pairs."""
    i, j = np.triu_indices(scores.shape[0], 1)
    diff = scores[j].mean(axis=1) - scores[i].mean(axis=1)
    p = np.array([randomization_test(scores[a], scores[b], resamples=resamples, seed=seed) for a, b in zip(i, j)])
    adjusted = holm(p)
    return {"i": i, "j": j, "difference": diff, "p": p, "p_holm": adjusted, "significant": adjusted < alpha}


def pair_agreement(human: dict, synthetic: dict) -> dict:
    """Of the pairs the human labels separate significantly: how many the synthetic set orders the same way, how many
    it also separates significantly the same way, and how many it separates significantly the other way."""
    sig = human["significant"]
    same = np.sign(human["difference"]) == np.sign(synthetic["difference"])
    return {
        "pairs": len(sig),
        "human_significant": int(sig.sum()),
        "same_order": int((sig & same).sum()),
        "same_order_share": float((sig & same).sum() / sig.sum()) if sig.any() else float("nan"),
        "synthetic_significant_same": int((sig & same & synthetic["significant"]).sum()),
        "synthetic_significant_opposite": int((sig & ~same & synthetic["significant"]).sum()),
        "synthetic_significant": int(synthetic["significant"].sum()),
        "all_pairs_same_order": int(same.sum()),
    }


def overlap_cap(overlaps: np.ndarray, cap: float | None) -> float:
    """The cap as given, or the median overlap; when ties at the median would keep more than two thirds of the
    questions, the largest overlap below the median instead (so the subset is a real low-overlap half)."""
    if cap is not None:
        return cap
    median = float(np.median(overlaps))
    below = overlaps[overlaps < median]
    if (overlaps <= median).mean() > 2 / 3 and len(below):
        return float(below.max())
    return median


# retrievers ------------------------------------------------------------------------------------------------------
# a sentence ends at . ! ? before a capital, a digit or a bracket, or at a period set apart by spaces as in
# tokenised lower-case text ("a slipstream . an experimental study"); a line break ends one too
_SENTENCE_END = re.compile(r"\n+|(?<=[.!?])\s+(?=[A-Z0-9(])|\s+[.!?]\s+")


def lead_and_body(passage: str) -> tuple[str, str]:
    """The passage's lead (its first line or sentence, at most :data:`LEAD_WORDS` words) and its body (the rest, less
    a repeat of the lead at its start; the whole passage when nothing is left). With a title, the title and the
    text."""
    passage = passage.strip()
    words = _SENTENCE_END.split(passage, maxsplit=1)[0].split()[:LEAD_WORDS]
    body = passage
    for _ in range(2):  # the lead, then a repeat of it (a text that starts with its title)
        rest = body.split(None, len(words))
        if rest[: len(words)] != words:
            break
        body = rest[-1].lstrip(".!? \n") if len(rest) > len(words) else ""
    return " ".join(words), body or passage


def first_words(text: str, count: int = 32) -> str:
    return " ".join(text.split()[:count])


def resolve_collection(name: str) -> tuple[str, Path]:
    """A collection's name and BEIR folder: a path, or a folder name under :data:`DATA_DIRS`; a gzipped corpus is
    unpacked into the cache."""
    path = Path(name)
    candidates = [path] if path.is_dir() else [directory / name for directory in DATA_DIRS]
    for folder in candidates:
        if (folder / "qrels" / "test.tsv").is_file():
            if (folder / "corpus.jsonl").is_file():
                return folder.name, folder
            if (folder / "corpus.jsonl.gz").is_file():
                return folder.name, unpacked(folder)
    raise SystemExit(f"no BEIR collection {name!r} (corpus.jsonl, queries.jsonl, qrels/test.tsv) in {candidates}")


def read_corpus(data: Path) -> list[dict]:
    """The documents in chunk-id order, the order a workspace indexes them in (so the caches are shared)."""
    corpus = [json.loads(line) for line in (data / "corpus.jsonl").open(encoding="utf-8")]
    return sorted(corpus, key=lambda d: d["_id"])


def build_indexes(corpus: list[dict], cache: Path) -> dict:
    ids = [d["_id"] for d in corpus]
    full = [passage_text(d.get("title") or "", d["text"]) for d in corpus]  # as the workspace indexes them
    leads, bodies = zip(*(lead_and_body(p) for p in full))
    indexes = {"bm25": BM25Index.cached(cache, ids, full)}
    for k1, b in BM25_SETTINGS:
        indexes[f"bm25-k1={k1}-b={b}"] = BM25Index.cached(cache, ids, full, k1=k1, b=b)
    indexes["bm25-nostem"] = BM25Index.cached(cache, ids, full, stem=False)
    indexes["bm25-lead"] = BM25Index.cached(cache, ids, list(leads))
    indexes["bm25-body"] = BM25Index.cached(cache, ids, list(bodies))
    indexes["bm25-body-lead"] = BM25Index.cached(cache, ids, [lead_and_body(b)[0] for b in bodies])
    if dense_available():
        indexes["dense"] = DenseIndex.cached(cache, ids, full)
        indexes["dense-first32"] = DenseIndex.cached(cache, ids, [first_words(t) for t in full])
        indexes["dense-lead"] = DenseIndex.cached(cache, ids, list(leads))
    return indexes


def per_query_scores(indexes: dict, qrels: Qrels, query_texts: dict[str, str]) -> tuple[list[str], np.ndarray]:
    """nDCG@10 of every retriever (and RRF mix) on every query of ``qrels``: (names, retrievers x queries)."""
    qids = sorted(query_texts)
    texts = [query_texts[q] for q in qids]
    runs = {name: index.search(qids, texts, k=100, name=name) for name, index in indexes.items()}
    for a, b in MIXES:
        if a in runs and b in runs:
            runs[f"rrf({a},{b})"] = reciprocal_rank_fusion([runs[a], runs[b]], name=f"rrf({a},{b})")
    names, rows, order = [], [], None
    for name, run in runs.items():
        evaluation = evaluate(qrels, run, METRIC)
        if order is None:
            order = evaluation.query_ids
        assert np.array_equal(order, evaluation.query_ids)
        names.append(name)
        rows.append(evaluation.per_query[METRIC])
    return names, np.vstack(rows)


# the synthetic set ----------------------------------------------------------------------------------------------
def copy_llm_cache(source: Path, target: Path) -> int:
    """Copy the answered LLM calls of workspace ``source`` into ``target``'s cache: the same request then gets the
    same answer in both, so two sets built with different filters differ only by the filters. Returns rows added."""
    if not (source / "testset.db").is_file():
        return 0
    with sqlite3.connect(target / "testset.db") as db:
        db.execute("ATTACH DATABASE ? AS other", (str(source / "testset.db"),))
        before = db.execute("SELECT COUNT(*) FROM llm_calls").fetchone()[0]
        db.execute("INSERT OR IGNORE INTO llm_calls SELECT * FROM other.llm_calls WHERE response IS NOT NULL")
        added = db.execute("SELECT COUNT(*) FROM llm_calls").fetchone()[0] - before
    db.close()
    return added


def build_synthetic(data: Path, workspace: Path, settings, cache_from: list[Path]) -> tuple[object, list[str], float]:
    """Run synthesize on the workspace (its LLM cache first topped up from the ``cache_from`` workspaces); returns
    its summary, the ids of the questions it accepted, and seconds."""
    with open_workspace(workspace) as ws:
        ingest(ws, load_sources([data]), ChunkingConfig(chunker="prechunked", size=1, overlap=0), [data])
    for other in cache_from:
        added = copy_llm_cache(other, workspace)
        if added:
            print(f"  {added} cached LLM answers copied from {other.name}")
    with open_workspace(workspace) as ws:

        async def build():
            async with open_roles(settings, ws, "bench-synthesize") as roles:
                return await synthesize(ws, roles, settings.synthesize, judging=settings.judging)

        clock = time.perf_counter()
        summary = asyncio.run(build())
        return summary, summary.query_ids, time.perf_counter() - clock


def read_synthetic(workspace: Path, accepted: list[str], mined_by: str | None = None) -> dict:
    """The accepted questions' texts, source labels, mined labels and lexical overlap with their sources. Mined
    labels come from the judge's positive grades when ``mined_by`` (the stage's summary) names the LLM judge, else
    from the estimates (P >= 0.5) when there are any for these questions, else from the judge's grades."""
    with open_workspace(workspace) as ws:
        db = ws.db
        wanted = set(accepted) if accepted else None  # None: the stage changed and nothing was recorded; take all
        if wanted is None:
            print("  note: could not tell this run's questions apart; scoring every synthetic question stored")
        queries = {
            q: (text, style, json.loads(meta or "{}"))
            for q, text, style, meta in db.execute(
                "SELECT query_id, text, style, metadata FROM queries WHERE origin = 'synthetic'"
            )
            if wanted is None or q in wanted
        }
        source: dict[str, dict[str, int]] = {}
        llm: dict[str, dict[str, int]] = {}
        for query_id, chunk_id, grade, kind in db.execute(
            "SELECT query_id, chunk_id, grade, source FROM judgments WHERE source IN ('synthetic-source', 'llm')"
        ):
            if query_id not in queries:
                continue
            if kind == "synthetic-source":
                source.setdefault(query_id, {})[chunk_id] = 2
            elif grade >= 1:
                llm.setdefault(query_id, {})[chunk_id] = max(grade, llm.get(query_id, {}).get(chunk_id, 0))
        estimated: dict[str, dict[str, int]] = {}
        estimate_rows = 0
        for query_id, chunk_id, p in db.execute("SELECT query_id, chunk_id, p_relevant FROM estimates"):
            if query_id in queries:
                estimate_rows += 1
                if p >= MINED_P:
                    estimated.setdefault(query_id, {})[chunk_id] = 1
        queued = sum(
            query_id in queries for (query_id,) in db.execute("SELECT query_id FROM review_items WHERE kind = 'pair'")
        )
        chunk_text = {}
        needed = {c for labels in source.values() for c in labels}
        for q in queries:
            needed.update(queries[q][2].get("source_chunk_ids", []))
        for chunk_id, text in db.execute("SELECT chunk_id, text FROM chunks"):
            if chunk_id in needed:
                chunk_text[chunk_id] = text
    qids = sorted(q for q in queries if q in source)
    overlap, rules_reject = {}, {}
    for q in qids:
        text, _, meta = queries[q]
        sources = meta.get("source_chunk_ids") or sorted(source[q])
        passage = " ".join(chunk_text[c] for c in sources if c in chunk_text)
        overlap[q] = lexical_overlap(text, passage)
        reason = question_rules.problem(text, passage)  # a cut answer is not told apart: its finish is not kept
        if reason:
            rules_reject[reason] = rules_reject.get(reason, 0) + 1
    by_judge = (mined_by or "").startswith("llm") or not estimate_rows
    mined_from, mined = ("llm judgments", llm) if by_judge else ("estimates", estimated)
    with_mined = {q: {**{c: g for c, g in mined.get(q, {}).items() if c not in source[q]}, **source[q]} for q in qids}
    return {
        "texts": {q: queries[q][0] for q in qids},
        "styles": {q: queries[q][1] for q in qids},
        "source": Qrels.from_dict({q: source[q] for q in qids}),
        "mined": Qrels.from_dict(with_mined),
        "mined_from": mined_from,
        "mined_pairs": sum(len(v) - len(source[q]) for q, v in with_mined.items()),
        "mined_questions": sum(len(v) > len(source[q]) for q, v in with_mined.items()),
        "estimate_rows": estimate_rows,
        "queued_pairs": int(queued),
        "overlap": overlap,
        "rules_would_reject": rules_reject,
    }


# the report ------------------------------------------------------------------------------------------------------
def agreement(human: np.ndarray, synthetic: np.ndarray, human_tests: dict, args) -> dict:
    tests = pairwise_tests(synthetic, args.alpha, args.test_resamples, args.seed)
    return {
        "queries": int(synthetic.shape[1]),
        **bootstrap_tau(human, synthetic, args.resamples, args.seed),
        "scipy_tau_b": float(kendalltau(human.mean(axis=1), synthetic.mean(axis=1))[0]),
        "ceiling": split_tau(human, synthetic.shape[1], args.resamples, args.seed),
        "significant_pairs": pair_agreement(human_tests, tests),
        "means": synthetic.mean(axis=1).tolist(),
    }


def ranks(values: np.ndarray) -> np.ndarray:
    return (-values).argsort(kind="stable").argsort() + 1


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--collection", default="scifact", help="comma-separated BEIR collections: names or paths (default scifact)"
    )
    parser.add_argument("--rules", choices=("both", "on", "off"), default="both", help="sets with/without the rules")
    parser.add_argument("--index-cache", type=Path, default=CACHE / "indexes")
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="provider config (default: from the environment; the local model without keys)",
    )
    parser.add_argument("--questions", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mine", action="store_true", help="mine other relevant chunks; add a column with them")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any config override, e.g. synthesize.relevance_by=llm (repeatable; VALUE is parsed as YAML)",
    )
    parser.add_argument("--max-overlap", type=float, default=None, help="overlap cap of the control (default median)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples for the tau interval")
    parser.add_argument("--test-resamples", type=int, default=10_000, help="randomization-test resamples per pair")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level (Holm over all pairs)")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this file")
    return parser.parse_args(argv)


def workspace_for(name: str, args, rules: bool) -> Path:
    suffix = (f"-seed{args.seed}" if args.seed else "") + ("" if rules else "-without-rules")
    return CACHE / f"synthetic-agreement-{name}-q{args.questions}{suffix}"


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    overrides = {"synthesize.questions": args.questions, "synthesize.seed": args.seed, "synthesize.mine": args.mine}
    for item in args.set:
        key, _, value = item.partition("=")
        overrides[key.strip()] = yaml.safe_load(value)
    collections = {}
    for entry in args.collection.split(","):
        name, folder = resolve_collection(entry.strip())
        collections[name] = measure(name, folder, args, overrides)
    report = {"questions_requested": args.questions, "overrides": overrides, "collections": collections}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return report


def synthetic_sets(name: str, folder: Path, args, overrides: dict) -> dict:
    """Each rule setting's set: its synthesize summary, what was read back, the generator and the seconds taken."""
    wanted = ("on", "off") if args.rules == "both" else (args.rules,)
    sets = {}
    for setting in wanted:
        label, rules = RULE_SETTINGS[setting]
        settings = resolve_config(args.config, {**overrides, "synthesize.question_rules": rules})
        workspace = workspace_for(name, args, rules)
        siblings = [workspace_for(name, args, not rules)]
        summary, accepted, seconds = build_synthetic(folder, workspace, settings, siblings)
        synthetic = read_synthetic(workspace, accepted, getattr(summary, "mined_by", None))
        generator = f"{settings.generator_role().kind}:{settings.generator_role().model_name}"
        print(
            f"{name}, {label}: {len(synthetic['texts'])} of {args.questions} questions with {generator} in "
            f"{seconds:.1f} s ({summary.calls} calls, {summary.cache_hits} cached; {summary.generated} generated); "
            f"styles {summary.styles}; removed {summary.removed}; by rule {summary.validation_reasons}; "
            f"kept that the rules reject {synthetic['rules_would_reject']}",
            flush=True,
        )
        if summary.shortfall:
            print(f"  fewer than asked: {summary.shortfall}")
        sets[label] = {"summary": summary, "synthetic": synthetic, "generator": generator, "seconds": seconds}
    return sets


def overlap_figures(synthetic: dict, ids: list[str], cap: float, bm25_gain: np.ndarray | None) -> dict:
    overlaps = np.array([synthetic["overlap"][q] for q in ids])
    by_style: dict[str, list[float]] = {}
    for q in ids:
        by_style.setdefault(synthetic["styles"][q] or "?", []).append(synthetic["overlap"][q])
    return {
        "mean": float(overlaps.mean()),
        "median": float(np.median(overlaps)),
        "quartiles": [float(v) for v in np.quantile(overlaps, [0.25, 0.75])],
        "share_complete": float((overlaps >= 1.0).mean()),
        "by_style": {s: {"n": len(v), "mean": float(np.mean(v))} for s, v in sorted(by_style.items())},
        "cap": cap,
        "kept_under_cap": int((overlaps <= cap).sum()),
        "spearman_overlap_vs_bm25_minus_dense": None if bm25_gain is None else float(spearmanr(overlaps, bm25_gain)[0]),
    }


def measure(name: str, folder: Path, args, overrides: dict) -> dict:
    """Build the synthetic sets of one collection, score every retriever on them and on the human qrels, compare."""
    corpus = read_corpus(folder)
    human = read_qrels(folder / "qrels" / "test.tsv")
    texts = {q["_id"]: q["text"] for q in map(json.loads, (folder / "queries.jsonl").open(encoding="utf-8"))}
    sets = synthetic_sets(name, folder, args, overrides)

    clock = time.perf_counter()
    indexes = build_indexes(corpus, args.index_cache)
    names, human_scores = per_query_scores(indexes, human, {q: texts[q] for q in human.query_ids()})
    variants, overlap_report = {}, {}
    for label, built in sets.items():
        synthetic = built["synthetic"]
        ids = sorted(synthetic["texts"])
        columns = {label: per_query_scores(indexes, synthetic["source"], synthetic["texts"])}
        if args.mine:
            columns[f"{label}+mined"] = per_query_scores(indexes, synthetic["mined"], synthetic["texts"])
        overlaps = np.array([synthetic["overlap"][q] for q in ids])
        cap = overlap_cap(overlaps, args.max_overlap)
        for column, (column_names, matrix) in columns.items():
            assert column_names == names
            variants[column] = matrix
            variants[f"{column}, overlap<={cap:.2f}"] = matrix[:, overlaps <= cap]
        matrix = columns[label][1]
        gain = matrix[names.index("bm25")] - matrix[names.index("dense")] if "dense" in names else None
        overlap_report[label] = overlap_figures(synthetic, ids, cap, gain)
    human_tests = pairwise_tests(human_scores, args.alpha, args.test_resamples, args.seed)
    results = {column: agreement(human_scores, matrix, human_tests, args) for column, matrix in variants.items()}
    scoring_seconds = time.perf_counter() - clock
    print_table(name, names, human_scores, variants, human_tests, results, overlap_report, sets, args)
    print(f"scoring and statistics: {scoring_seconds:.1f} s", flush=True)

    human_means = human_scores.mean(axis=1)
    return {
        "retrievers": names,
        "metric": METRIC,
        "generator": next(iter(sets.values()))["generator"],
        "human_queries": int(human_scores.shape[1]),
        "documents": len(corpus),
        "questions": {label: len(built["synthetic"]["texts"]) for label, built in sets.items()},
        "synthesize": {label: synthesize_figures(built) for label, built in sets.items()},
        "agreement": {
            column: {
                "questions": r["queries"],
                "tau": r["tau"],
                "ci": [r["ci_low"], r["ci_high"]],
                "human_significant_pairs": r["significant_pairs"]["human_significant"],
                "same_order": r["significant_pairs"]["same_order"],
                "significant_other_way": r["significant_pairs"]["synthetic_significant_opposite"],
            }
            for column, r in results.items()
        },
        "scores": {
            retriever: {"human": float(human_means[i]), **{v: float(m[i].mean()) for v, m in variants.items()}}
            for i, retriever in enumerate(names)
        },
        "human_significant_pairs": [
            [names[i], names[j], float(d), float(p)]
            for i, j, d, p, sig in zip(
                human_tests["i"],
                human_tests["j"],
                human_tests["difference"],
                human_tests["p_holm"],
                human_tests["significant"],
            )
            if sig
        ],
        "test": {"kind": "paired randomization", "resamples": args.test_resamples, "correction": "holm"},
        "alpha": args.alpha,
        "variants": results,
        "overlap": overlap_report,
        "mining": {
            label: {k: built["synthetic"][k] for k in ("mined_from", "mined_pairs", "mined_questions", "queued_pairs")}
            for label, built in sets.items()
        }
        if args.mine
        else None,
        "scoring_seconds": round(scoring_seconds, 1),
    }


def synthesize_figures(built: dict) -> dict:
    summary = built["summary"]
    return {
        "critic_by": getattr(summary, "critic_by", None),
        "mined_by": getattr(summary, "mined_by", None),
        "seconds": round(built["seconds"], 1),
        "calls": summary.calls,
        "cache_hits": summary.cache_hits,
        "generated": summary.generated,
        "rounds": summary.rounds,
        "styles": summary.styles,
        "removed": summary.removed,
        "by_rule": summary.validation_reasons,
        "kept_that_rules_reject": built["synthetic"]["rules_would_reject"],
        "shortfall": summary.shortfall,
    }


def print_table(name, names, human_scores, variants, human_tests, results, overlap_report, sets, args) -> None:
    human_means = human_scores.mean(axis=1)
    order = np.argsort(-human_means, kind="stable")
    counts = ", ".join(f"{label} {len(b['synthetic']['texts'])}" for label, b in sets.items())
    print(f"\n{METRIC} on {name} (rank in brackets): human test qrels ({human_scores.shape[1]} queries) vs synthetic "
          f"questions ({counts})")  # fmt: skip
    all_means = [human_means, *(m.mean(axis=1) for m in variants.values())]
    all_ranks = [ranks(m) for m in all_means]
    width = max(len(n) for n in names)
    print(f"{'retriever':<{width}} | " + " | ".join(f"{h:>28}" for h in ["human", *variants]))
    for r in order:
        cells = [f"{m[r]:.4f} ({k[r]:>2})" for m, k in zip(all_means, all_ranks)]
        print(f"{names[r]:<{width}} | " + " | ".join(f"{c:>28}" for c in cells))
    s = human_tests["significant"]
    print(
        f"\nhuman: {int(s.sum())} of {len(s)} retriever pairs differ significantly (paired randomization test, "
        f"{args.test_resamples} sign flips, Holm over all pairs, alpha {args.alpha})"
    )
    for column, r in results.items():
        a, c = r["significant_pairs"], r["ceiling"]
        print(
            f"{column}: {r['queries']} questions; tau {r['tau']:.3f} [95% CI {r['ci_low']:.3f}, {r['ci_high']:.3f}], "
            f"resampled median {r['resampled_median']:.3f}, P(tau>=0.9) {r['share_at_least_0.9']:.2f};\n"
            f"    human-significant pairs ordered the same {a['same_order']}/{a['human_significant']}, "
            f"also significant on synthetic {a['synthetic_significant_same']}, "
            f"significant the other way {a['synthetic_significant_opposite']};\n"
            f"    noise ceiling (human {c['queries']} queries vs the rest) tau {c['median']:.3f} "
            f"[{c['p2.5']:.3f}, {c['p97.5']:.3f}]"
        )
    for label, o in overlap_report.items():
        style_text = ", ".join(f"{s} {v['mean']:.2f} (n={v['n']})" for s, v in o["by_style"].items())
        rho = o["spearman_overlap_vs_bm25_minus_dense"]
        print(
            f"{label}: lexical overlap of question with source: mean {o['mean']:.3f}, median {o['median']:.3f}, "
            f"{o['share_complete']:.0%} fully contained; by style: {style_text}; Spearman(overlap, bm25 - dense "
            f"nDCG per question) {'n/a' if rho is None else f'{rho:.3f}'}"
        )
    if args.mine:
        for label, built in sets.items():
            synthetic = built["synthetic"]
            print(
                f"{label}: mining: {synthetic['mined_pairs']} extra relevant pairs on {synthetic['mined_questions']} "
                f"questions, from {synthetic['mined_from']} ({synthetic['estimate_rows']} estimates for these "
                f"questions, {synthetic['queued_pairs']} pairs queued for review)"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
