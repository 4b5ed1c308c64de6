"""Synthetic labels that are checked: a question whose source chunk the relevance estimate does not put near the top
of what the retrievers find for it, or below another chunk by a clear margin, is doubted. Its label (the source,
grade 2) may be wrong: the question may be off its source, or another chunk may answer it better. Doubted questions
are queued for review as questions (keep, drop or edit), ahead of the rest; no LLM call.

Measured on the docs corpus with the embedded generator (the README's first hour): about 3 of 10 questions were
usable, and at least 4 of 10 carried a grade-2 label on a chunk that does not answer them. This is the check that
sends those to a human before a release ships them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...labels.estimate import pair_features
from ...labels.model import RelevanceModel
from ...records import Query
from ...retrieval.indexes import WorkspaceIndexes
from ...store import review as review_store
from ...store.workspace import Workspace, utc_timestamp

DEPTH = 10  # the chunks each retriever finds for a question, among which its source is ranked
NEAR_TOP = 3  # a source ranked below this many chunks by the estimate is doubted
MARGIN = 0.1  # ... and so is one another chunk beats by this much P(relevant)
DOUBTED_PRIORITY = 2.5  # doubted questions come before the other questions, after drawn pairs (3)


@dataclass(frozen=True)
class SourceCheck:
    query_id: str
    source_rank: int  # 1 = the estimate's first choice among the source and the retrievers' top chunks
    source_p: float
    best_other: str | None  # the chunk the estimate likes best besides the source
    best_other_p: float

    @property
    def doubt(self) -> str | None:
        """Why the label is doubted, or None."""
        if self.source_rank > NEAR_TOP:
            return f"the estimate ranks its source {self.source_rank}th among the chunks the retrievers find"
        if self.best_other is not None and self.best_other_p >= self.source_p + MARGIN:
            return f"another chunk looks a better answer (P {self.best_other_p:.2f} against {self.source_p:.2f})"
        return None


def source_pools(indexes: WorkspaceIndexes, questions: Sequence[Query], depth: int) -> dict[str, list[str]]:
    """Each question's source chunk, then each retriever's top ``depth`` other chunks, once each."""
    pools: dict[str, list[str]] = {q.query_id: [q.source_chunk_id] for q in questions}
    for run in indexes.runs(questions, k=depth).values():
        for query_id, ranked in run.to_dict().items():
            pools[query_id].extend(c for c in ranked if c not in pools[query_id])
    return pools


def check_sources(model: RelevanceModel, indexes: WorkspaceIndexes, queries: Sequence[Query]) -> list[SourceCheck]:
    """Each question's source against each retriever's top :data:`DEPTH` chunks, by the estimate ``model``."""
    questions = [q for q in queries if q.source_chunk_id and q.source_chunk_id in indexes.passages]
    if not questions:
        return []
    pools = source_pools(indexes, questions, DEPTH)
    features = pair_features(indexes, {q.query_id: q.text for q in questions}, pools)
    out = []
    for question in questions:
        chunks = [c for c in pools[question.query_id] if (question.query_id, c) in features]
        p = {c: float(model.p_relevant(features[(question.query_id, c)][None, :])[0]) for c in chunks}
        source = question.source_chunk_id
        others = sorted((c for c in chunks if c != source), key=lambda c: (-p[c], c))
        rank = 1 + sum(p[c] > p[source] for c in others)
        best = others[0] if others else None
        out.append(SourceCheck(question.query_id, rank, p[source], best, p[best] if best else 0.0))
    return out


def queue_doubted(workspace: Workspace, checks: Sequence[SourceCheck]) -> int:
    """Queue each doubted question for review, its doubt as the reason; returns how many are doubted."""
    doubted = [c for c in checks if c.doubt]
    with workspace.transaction() as db:
        review_store.enqueue(
            db,
            (
                review_store.QueuedItem(
                    review_store.question_item_id(c.query_id), "question", c.query_id, None, DOUBTED_PRIORITY,
                    f"doubted: {c.doubt}", 1,
                )
                for c in doubted
            ),
            utc_timestamp(),
        )  # fmt: skip
    return len(doubted)
