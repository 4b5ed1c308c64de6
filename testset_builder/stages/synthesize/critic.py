"""The answerability critic: each question's source chunk(s) must be relevant enough to it, else the question goes.

Either the judge grades each source (a judgment that failed, by provider error, invalid answer or budget, removes
nothing: the question is held back, counted apart, and judged again on the rerun), or the relevance estimate scores
it, with no LLM call. The estimate's bar is low on purpose (see ``critic_min_estimate``): it removes only questions
the estimate finds clearly unrelated to their source. A high bar would keep only the questions whose source BM25 and
the dense model already find easily (their scores and ranks are the estimate's features), and so change how the set
ranks those very retrievers."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import BudgetExceededError
from ...labels.estimate import pair_features
from ...labels.judge import Judge, JudgePair
from ...labels.model import RelevanceModel
from ...records import Judgment
from ...retrieval.indexes import WorkspaceIndexes
from .batching import submit_or_go_on
from .generation import Slot


@dataclass
class CriticOutcome:
    kept: list[Slot] = field(default_factory=list)
    removed: int = 0  # a source was graded below the minimum
    failed: int = 0  # some source could not be judged this run (kept out, retried on a rerun)
    budget_stopped: int = 0  # of those, how many for the budget


async def critic(judge: Judge, slots: list[Slot], min_grade: int, progress=None, batch: bool = False) -> CriticOutcome:
    """Keep the questions whose every source the judge grades at least ``min_grade`` (1 for a multi question's
    sources: each answers only part of it)."""
    pairs = [JudgePair(f"slot-{s.index}", s.text, src.chunk_id, src.text) for s in slots for src in s.sources]
    await submit_or_go_on(judge.client, batch, [judge.request(p) for p in pairs], "answerability critic")
    verdicts = iter(await judge.judge_many(pairs, progress=progress, description="answerability critic"))
    outcome = CriticOutcome()
    for slot in slots:
        minimum = 1 if slot.style == "multi" else min_grade
        mine = [next(verdicts) for _ in slot.sources]
        failures = [v for v in mine if not isinstance(v, Judgment)]
        if failures:
            outcome.failed += 1
            outcome.budget_stopped += any(isinstance(v, BudgetExceededError) for v in failures)
        elif all(v.grade >= minimum for v in mine):
            outcome.kept.append(slot)
        else:
            outcome.removed += 1
    return outcome


def source_estimates(model: RelevanceModel, indexes: WorkspaceIndexes, slots: list[Slot]) -> dict[int, list[float]]:
    """Each slot's P(relevant) of its question and each of its sources, by ``model`` (slot index -> one per
    source)."""
    texts = {str(s.index): s.text for s in slots}
    chunks = {str(s.index): [src.chunk_id for src in s.sources] for s in slots}
    features = pair_features(indexes, texts, chunks)
    return {
        s.index: [float(model.p_relevant(features[(str(s.index), src.chunk_id)][None, :])[0]) for src in s.sources]
        for s in slots
    }


def critic_by_estimate(
    model: RelevanceModel, indexes: WorkspaceIndexes, slots: list[Slot], min_estimate: float
) -> CriticOutcome:
    """Keep the questions whose every source the estimate puts at P(relevant) >= ``min_estimate``."""
    estimates = source_estimates(model, indexes, slots)
    outcome = CriticOutcome()
    for slot in slots:
        if all(p >= min_estimate for p in estimates[slot.index]):
            outcome.kept.append(slot)
        else:
            outcome.removed += 1
    return outcome
