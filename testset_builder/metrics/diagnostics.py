"""Which questions tell the runs apart: diagnostics reported to the user, never used to keep or drop a question.

Per question, over the runs scored on the set (the systems a reader compares):

* **too easy**: every run puts all the question's relevant chunks at the top (R-precision 1; for a question with one
  relevant chunk, that chunk at rank 1). Every run scores it alike, so it cannot separate them.
* **too hard**: no run has a relevant chunk in its top k (hit rate@k 0 for every run). It cannot separate them either,
  and its label may be wrong.
* **lexical leakage** (a synthetic question and its source chunk): the share of the question's content words that are
  rare in the corpus and appear in the source,

      leakage(q) = |{w in W(q) : w in words(source), df(w) <= rare_df}| / |W(q)|,

  with W(q) the question's content words (:func:`~testset_builder.questions.content_words`), df(w) the number of
  chunks holding w, rare_df = max(1, floor(RARE_SHARE * N)) over the N chunks. A question is leaky from
  LEAKAGE_SHARE on: it hands a term-matching retriever the words that pick out its source.
* **ambiguous** (a synthetic question written from one chunk, not the multi style, which asks for two): another
  chunk is labelled relevant, or the relevance estimate rates another pooled chunk more likely relevant than not.

Over the set: the metrics near their ceiling for every run (a saturated set tells nothing), the weakest questions, each
metric split by how many relevant chunks a question needs (1, 2, 3+; each group's mean weighted by its count gives
the overall mean), complete@k beside recall@k, and what to generate next.

Why only reported: a filter on these signals keeps the questions the scored retrievers find easily, and a set so
bent ranks those retrievers too high. The user reads them and decides.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from ..tables import Qrels, Run
from .evaluate import Evaluation, evaluate
from .spec import MetricSpec

DIAGNOSTIC_K = 10  # the cutoff of the default metrics, and the depth a reader of results looks at
# a metric with a mean of 0.95 or more for every run leaves at most one question in 20 where a run can fall short of
# the best score, so the metric can hardly tell the runs apart
CEILING = 0.95
# a word in at most one chunk in a hundred (IDF ln(N/df) >= ln 100) picks out a few chunks by itself
RARE_SHARE = 0.01
# half or more of a question's content words are rare words of its source: it names its chunk whatever its phrasing
LEAKAGE_SHARE = 0.5
# chunks read for document frequencies on a large corpus (a seeded random sample): a word in 1% of them is then seen
# about 200 times, enough to tell rare from common
DF_SAMPLE = 20_000
LIKELY = 0.5  # an estimate at or above this rates a chunk more likely relevant than not
# a kind of weak question worth a suggestion once it is a quarter of the set: below that, the rest still separates runs
WORTH_SAYING = 0.25
WEAKEST_SHOWN = 10
GROUPS = ("none", "1", "2", "3+")  # relevant chunks a question needs


@dataclass
class QuestionDiagnostics:
    """The diagnostics of one set and its runs; ``flagged`` maps each flagged question to its flags."""

    k: int
    runs: list[str]
    questions: int
    synthetic: int
    too_easy: int
    too_hard: int
    leaky: int
    ambiguous: int
    saturated: list[dict]  # {metric, lowest}: the lowest run's mean, at or above CEILING
    needing: dict[str, int]  # relevant chunks a question needs ("none", "1", "2", "3+") -> questions
    by_chunk_count: dict[str, dict]  # group -> {queries, runs: {run: {metric: mean}}}
    weakest: list[dict]
    generate_next: list[str]
    flagged: dict[str, list[str]] = field(default_factory=dict)
    thresholds: dict = field(default_factory=dict)
    documents: int | None = None  # in the corpus, when known
    documents_without_question: int | None = None  # no question written from them, none labels them relevant

    def profile(self) -> dict:
        """What the release card says, with no run scored: the chunks questions need, the leaky and ambiguous
        synthetic questions, the documents without a question."""
        return {
            "questions": self.questions, "needing": self.needing, "synthetic": self.synthetic, "leaky": self.leaky,
            "ambiguous": self.ambiguous, "documents": self.documents,
            "documents_without_question": self.documents_without_question,
        }  # fmt: skip

    def as_dict(self) -> dict:
        return asdict(self)


def relevant_counts(qrels: Mapping[str, Mapping[str, int]], relevance_level: int = 1) -> dict[str, int]:
    """Each query's number of chunks graded ``relevance_level`` or more."""
    return {q: sum(g >= relevance_level for g in chunks.values()) for q, chunks in qrels.items()}


def chunk_count_group(count: int) -> str:
    return "none" if count == 0 else "3+" if count >= 3 else str(count)


def easy_and_hard(by_run: Sequence[Evaluation], k: int, has_relevant: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per query (the evaluations' order): too easy, every run's R-precision 1; too hard, every run's hit rate@k 0.
    Queries without a relevant chunk are neither. ``by_run``: each run scored on r_precision and hit_rate@k."""
    if not by_run:
        return np.zeros(len(has_relevant), bool), np.zeros(len(has_relevant), bool)
    first = np.vstack([e.per_query["r_precision"] for e in by_run])
    hit = np.vstack([e.per_query[f"hit_rate@{k}"] for e in by_run])
    return (first >= 1.0).all(axis=0) & has_relevant, (hit == 0).all(axis=0) & has_relevant


def words(text: str) -> list[str]:
    """The words of ``text`` as the question checks read them (:func:`~testset_builder.questions.words`), imported
    on first use: the question rules read the corpus layer, which ``score`` on qrels alone never needs."""
    from ..questions import words as read

    return read(text)


def content_words(text: str) -> set[str]:
    """The content words of ``text`` (:func:`~testset_builder.questions.content_words`), imported on first use."""
    from ..questions import content_words as read

    return read(text)


def document_frequencies(texts: Iterable[str], vocabulary: set[str]) -> tuple[Counter, int]:
    """(df of each word of ``vocabulary``: the texts holding it, the number of texts)."""
    df: Counter = Counter()
    n = 0
    for text in texts:
        n += 1
        df.update(set(words(text)) & vocabulary)
    return df, n


def rare_limit(chunks: int) -> int:
    """The largest df a rare word has: one chunk in a hundred, at least one."""
    return max(1, math.floor(RARE_SHARE * chunks))


def lexical_leakage(question: str, source: str, df: Mapping[str, int], rare_df: int) -> float:
    """Share of the question's content words that appear in ``source`` and in at most ``rare_df`` chunks (0 for a
    question without content words)."""
    asked = content_words(question)
    if not asked:
        return 0.0
    in_source = set(words(source))
    return sum(w in in_source and df.get(w, 0) <= rare_df for w in asked) / len(asked)


def ambiguity(
    source: str, qrels: Mapping[str, int], estimates: Sequence[dict] = (), relevance_level: int = 1
) -> tuple[int, int]:
    """(other chunks labelled relevant, other unlabelled chunks the estimate rates at LIKELY or more) of a question
    written from ``source``; ``qrels``: its labels (chunk -> grade); ``estimates``: its rows of the release's
    ``estimates.jsonl``."""
    labelled = sum(g >= relevance_level for c, g in qrels.items() if c != source)
    likely = sum(
        row["corpus-id"] != source and row["label"] is None and (row["p_relevant"] or 0) >= LIKELY for row in estimates
    )
    return labelled, likely


def saturated(means: Mapping[str, Mapping[str, float]]) -> list[dict]:
    """The metrics whose mean is at least CEILING for every run (``means``: run -> metric -> mean), with the lowest."""
    if not means:
        return []
    metrics = list(next(iter(means.values())))
    lowest = {m: min(run[m] for run in means.values()) for m in metrics}
    return [{"metric": m, "lowest": value} for m, value in lowest.items() if value >= CEILING]


def needing(counts: Mapping[str, int]) -> dict[str, int]:
    """Questions by the relevant chunks they need, in GROUPS' order (empty groups left out)."""
    found = Counter(chunk_count_group(c) for c in counts.values())
    return {group: found[group] for group in GROUPS if found[group]}


def split_by_chunk_count(evaluations: Sequence[Evaluation], counts: Mapping[str, int]) -> dict[str, dict]:
    """Each run's mean of each metric over the queries needing 1, 2 or 3+ relevant chunks ("none": no relevant
    chunk), with the group's size; groups without queries are left out."""
    if not evaluations:
        return {}
    ids = evaluations[0].query_ids
    groups = np.array([chunk_count_group(counts.get(q, 0)) for q in ids])
    split = {}
    for group in GROUPS:
        members = groups == group
        if not members.any():
            continue
        split[group] = {
            "queries": int(members.sum()),
            "runs": {
                e.run_name: {name: float(values[members].mean()) for name, values in e.per_query.items()}
                for e in evaluations
            },
        }
    return split


def diagnose(
    qrels: Qrels,
    runs: Sequence[Run],
    evaluations: Sequence[Evaluation],
    means: Mapping[str, Mapping[str, float]] | None = None,
    *,
    queries: Mapping[str, str] | None = None,
    meta: Mapping[str, dict] | None = None,
    passages: Mapping[str, str] | None = None,
    documents: Mapping[str, str] | None = None,
    estimates: Sequence[dict] = (),
    k: int = DIAGNOSTIC_K,
    relevance_level: int = 1,
) -> QuestionDiagnostics:
    """The diagnostics of a set (``qrels``) and the ``runs`` scored on it (``evaluations``: their scores on the metrics
    shown; ``means``: the figures shown, run -> metric -> mean, by default the evaluations' means). What the set
    knows of its questions adds the rest: ``queries`` (id -> text), ``meta`` (id -> origin, source_chunk_id,
    style), ``passages`` (chunk id -> text: leakage), ``documents`` (chunk id -> document: documents without a
    question), ``estimates`` (the rows of ``estimates.jsonl``: ambiguity)."""
    labels = qrels.to_dict()
    counts = relevant_counts(labels, relevance_level)
    specs = [MetricSpec("r_precision"), MetricSpec("hit_rate", k), MetricSpec("recall", k), MetricSpec("complete", k)]
    checks = [evaluate(qrels, run, specs, relevance_level) for run in runs]
    ids = [str(q) for q in checks[0].query_ids] if checks else sorted(labels)
    easy, hard = easy_and_hard(checks, k, np.array([counts.get(q, 0) > 0 for q in ids], dtype=bool))
    flagged: dict[str, list[str]] = {}
    for q, is_easy, is_hard in zip(ids, easy, hard):
        if is_easy or is_hard:
            flagged[q] = ["too easy" if is_easy else "too hard"]
    sources = synthetic_sources(meta or {}, labels)
    details = synthetic_flags(sources, flagged, labels, queries, meta or {}, passages, estimates, relevance_level)
    merged = [
        Evaluation(e.run_name, e.metrics, e.query_ids, {**e.per_query, **_recall_and_complete(c, k)}, e.summary)
        for e, c in zip(evaluations, checks)
    ]
    shown = means if means is not None else {e.run_name: e.means() for e in evaluations}
    found = Counter(flag for flags in flagged.values() for flag in flags)
    result = QuestionDiagnostics(
        k=k, runs=[run.name for run in runs], questions=len(ids), synthetic=len(sources), too_easy=found["too easy"],
        too_hard=found["too hard"], leaky=found["leaky"], ambiguous=found["ambiguous"], saturated=saturated(shown),
        needing=needing(counts), by_chunk_count=split_by_chunk_count(merged, counts), weakest=[], generate_next=[],
        flagged=flagged,
        thresholds={"ceiling": CEILING, "rare_share": RARE_SHARE, "leakage_share": LEAKAGE_SHARE, "likely": LIKELY},
    )  # fmt: skip
    result.weakest = weakest(flagged, queries or {}, details)
    uncovered = uncovered_documents(documents, sources, labels, relevance_level)
    if uncovered is not None:
        result.documents, result.documents_without_question = uncovered[1], len(uncovered[0])
    result.generate_next = generate_next(result, uncovered)
    return result


def synthetic_flags(
    sources: Mapping[str, str], flagged: dict[str, list[str]], labels: Mapping[str, Mapping[str, int]],
    queries: Mapping[str, str] | None, meta: Mapping[str, dict], passages: Mapping[str, str] | None,
    estimates: Sequence[dict], relevance_level: int = 1,
) -> dict[str, dict]:  # fmt: skip
    """Flags each synthetic question (``sources``: its source chunk) leaky or ambiguous in ``flagged``; returns each
    one's figures: leakage (with ``queries`` and ``passages``), other chunks labelled relevant and likely."""
    details: dict[str, dict] = {q: {} for q in sources}
    if queries is not None and passages is not None:
        for q, share in leakages(sources, queries, passages).items():
            details[q]["leakage"] = round(share, 4)
            if share >= LEAKAGE_SHARE:
                flagged.setdefault(q, []).append("leaky")
    rows_of: dict[str, list[dict]] = {}
    for row in estimates:
        rows_of.setdefault(row["query-id"], []).append(row)
    for q, source in sources.items():
        if meta.get(q, {}).get("style") == "multi":  # asks for two chunks by design
            continue
        labelled, likely = ambiguity(source, labels.get(q, {}), rows_of.get(q, ()), relevance_level)
        details[q].update(other_relevant=labelled, likely_other=likely)
        if labelled or likely:
            flagged.setdefault(q, []).append("ambiguous")
    return details


def _recall_and_complete(check: Evaluation, k: int) -> dict[str, np.ndarray]:
    return {name: check.per_query[name] for name in (f"recall@{k}", f"complete@{k}")}


def synthetic_sources(meta: Mapping[str, dict], labels: Mapping[str, Mapping[str, int]]) -> dict[str, str]:
    """Each released synthetic question's source chunk."""
    return {
        q: row["source_chunk_id"]
        for q, row in meta.items()
        if row.get("origin") == "synthetic" and row.get("source_chunk_id") and q in labels
    }


def leakages(sources: Mapping[str, str], queries: Mapping[str, str], passages: Mapping[str, str]) -> dict[str, float]:
    """Each synthetic question's lexical leakage against its source, df counted over ``passages`` (at most DF_SAMPLE
    of them, a seeded random sample: rare then means in at most RARE_SHARE of those read)."""
    asked = {q: queries[q] for q in sources if q in queries and sources[q] in passages}
    if not asked:
        return {}
    vocabulary = set().union(*(content_words(text) for text in asked.values()))
    ids = sorted(passages)
    read = ids if len(ids) <= DF_SAMPLE else random.Random(0).sample(ids, DF_SAMPLE)
    df, n = document_frequencies((passages[c] for c in read), vocabulary)
    rare_df = rare_limit(n)
    return {q: lexical_leakage(text, passages[sources[q]], df, rare_df) for q, text in asked.items()}


def uncovered_documents(
    documents: Mapping[str, str] | None, sources: Mapping[str, str], labels: Mapping[str, Mapping[str, int]],
    relevance_level: int = 1,
) -> tuple[list[str], int] | None:  # fmt: skip
    """(the documents no question was written from or labels relevant, sorted; all documents), None when unknown."""
    if not documents:
        return None
    every = set(documents.values())
    used = {documents.get(c) for c in sources.values()}
    used |= {documents.get(c) for chunks in labels.values() for c, g in chunks.items() if g >= relevance_level}
    return sorted(every - used), len(every)


def weakest(flagged: Mapping[str, list[str]], queries: Mapping[str, str], details: Mapping[str, dict]) -> list[dict]:
    """The WEAKEST_SHOWN flagged questions with the most flags (then by id), each with its text and figures."""
    order = sorted(flagged, key=lambda q: (-len(flagged[q]), q))[:WEAKEST_SHOWN]
    return [{"query_id": q, "text": queries.get(q), "flags": flagged[q], **details.get(q, {})} for q in order]


def generate_next(found: QuestionDiagnostics, uncovered: tuple[list[str], int] | None) -> list[str]:
    """What to generate next, in plain sentences, from what the diagnostics found."""
    advice = []
    n = found.questions
    if n and found.runs and found.too_easy / n >= WORTH_SAYING:
        advice.append(
            f"{found.too_easy} of {n} questions are found first by every run: ask harder ones (raise the paraphrase "
            "share of synthesize.styles, so questions use other words than their source)"
        )
    if found.synthetic and found.leaky / found.synthetic >= WORTH_SAYING:
        advice.append(
            f"{found.leaky} of {found.synthetic} synthetic questions copy their source's rare words: ask paraphrase "
            "questions (synthesize.styles)"
        )
    if n and found.runs and found.too_hard / n >= WORTH_SAYING:
        advice.append(
            f"{found.too_hard} of {n} questions have no relevant chunk in any run's top {found.k}: review them "
            "before generating more (the label may be wrong)"
        )
    if found.synthetic and found.ambiguous / found.synthetic >= WORTH_SAYING:
        advice.append(
            f"{found.ambiguous} of {found.synthetic} synthetic questions have other chunks that answer them: grade "
            "those chunks in review, or ask narrower questions"
        )
    if n and not any(found.needing.get(group) for group in ("2", "3+")):
        advice.append(
            "every question needs one chunk, so complete@k says nothing beyond recall@k: add multi-chunk questions "
            "(the multi share of synthesize.styles)"
        )
    if uncovered and uncovered[0]:
        missing, total = uncovered
        named = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        advice.append(
            f"{len(missing)} of {total} documents have no question ({named}): generate from them (a lower "
            "synthesize.per_document_cap spreads questions over more documents)"
        )
    if found.saturated:
        metrics = ", ".join(s["metric"] for s in found.saturated)
        advice.append(f"{metrics} near the ceiling for every run: only harder questions can separate the runs")
    return advice


class Passages(Mapping):
    """A corpus (chunk id -> {title, text}) read as chunk id -> title and text, joined on access: leakage reads a
    sample of a large corpus, so the whole is not copied."""

    def __init__(self, corpus: Mapping[str, dict]) -> None:
        self.corpus = corpus

    def __getitem__(self, chunk_id: str) -> str:
        doc = self.corpus[chunk_id]
        return "\n".join(part for part in (doc.get("title"), doc.get("text")) if part)

    def __iter__(self):
        return iter(self.corpus)

    def __len__(self) -> int:
        return len(self.corpus)


def of_release(release, runs: Sequence[Run], evaluations: Sequence[Evaluation], means=None, relevance_level: int = 1):
    """:func:`diagnose` on a loaded release (its labels, question meta, chunk texts and documents, estimates)."""
    passages = Passages(release.corpus)
    documents = {chunk_id: span["doc_id"] for chunk_id, span in release.chunk_spans.items() if span.get("doc_id")}
    return diagnose(
        release.qrels_table(), runs, evaluations, means, queries=release.queries, meta=release.query_meta,
        passages=passages, documents=documents or None, estimates=release.estimates,
        relevance_level=relevance_level,
    )  # fmt: skip
