"""The answerability critic: the judge must grade each question's source chunk(s) relevant enough, else the
question goes. A judgment that failed (provider error, invalid answer, budget) removes nothing: the question is held
back, counted apart, and judged again on the rerun."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import BudgetExceededError
from ...records import Judgment
from ..judge import Judge, JudgePair
from .batching import submit_or_go_on
from .generation import Slot


@dataclass
class CriticOutcome:
    kept: list[Slot] = field(default_factory=list)
    removed: int = 0  # the judge graded a source below the minimum
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
