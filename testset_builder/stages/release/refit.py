"""Before a release writes ``estimates.jsonl``: the estimate refitted on the verdicts it has not seen, and each pair's
held-out prediction.

`select` refits the estimate, then draws; reviewers answer after that. A release made then would ship estimates that
never saw the review. So a release first asks two questions. Is any human verdict newer than the oldest stored
estimate? Did the stored estimates' model see fewer verdicts than exist? If so, it runs the refit `estimate` runs
(:func:`~testset_builder.labels.estimate.estimate_workspace`) over every stored pair, then gathers.

Where the refit cannot run, the stored estimates ship and the manifest's ``estimates_refit`` says why. They are still
a valid basis for intervals, only a wider one: the prediction-powered estimator is design-unbiased for any
prediction fixed before the draw, and each stored estimate was made before the verdicts it did not see.

``p_heldout`` is a pair's P(relevant) from the model fitted without the verdicts of its query's fold
(:func:`~testset_builder.labels.fitting.validated_fit`), or from the prior, which saw none. A stored estimate is
exactly that: the estimate scores each query by its fold's model
(:meth:`~testset_builder.labels.estimate.Fitted.scored`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from ...errors import TestsetBuilderError
from ...labels.estimate import estimate_workspace, human_labels
from ...records import Judgment, JudgmentSource
from ...store import estimates as estimate_store
from ...store import rows

STILL_VALID = (
    "still a valid basis for intervals (the prediction-powered estimator is design-unbiased for any prediction fixed "
    "before the draw), only a wider one"
)


@dataclass(frozen=True)
class EstimatesRefit:
    """What a release did to its estimates before writing them: its manifest's ``estimates_refit``."""

    refit: bool  # the shipped estimates come from a model refitted on the verdicts, not the prior
    at_release: bool  # this release ran the refit, because verdicts came after the stored estimates
    verdicts: int  # the human verdicts on estimated pairs: what a refit learns from
    why: str

    def as_dict(self) -> dict:
        return asdict(self)


def refreshed_estimates(workspace) -> EstimatesRefit | None:
    """Refit the stored estimates when verdicts came after them (:func:`unseen_verdicts`), and say what ships; None
    when nothing is estimated (a release then carries no estimates)."""
    made = estimate_store.estimates_made(workspace.db)
    if made is None:
        return None
    pairs = estimate_store.estimated_pair_ids(workspace.db)
    judgments = list(rows.iter_judgments(workspace.db))
    verdicts = len(human_labels(judgments).keys() & set(pairs))
    if not verdicts:
        return EstimatesRefit(False, False, 0, "no human verdict on an estimated pair yet: nothing to refit on")
    seen_by_model = made.fewest_verdicts > 0  # the prior saw none
    unseen = unseen_verdicts(made, latest_verdict(judgments), verdicts)
    if unseen is None:
        return EstimatesRefit(seen_by_model, False, verdicts, f"the stored estimates saw all {verdicts} verdicts")
    try:
        summary = estimate_workspace(workspace, pairs)
    except TestsetBuilderError as error:
        why = f"{unseen}, but the refit could not run ({error}): the stored estimates ship, {STILL_VALID}"
        return EstimatesRefit(seen_by_model, False, verdicts, why)
    kept = bool(summary.validation["kept"])
    why = f"refit on {summary.verdicts} verdicts ({unseen}): {summary.validation['reason']}"
    return EstimatesRefit(kept, True, summary.verdicts, why if kept else f"{why}; the prior ships, {STILL_VALID}")


def unseen_verdicts(made: estimate_store.EstimatesMade, latest: datetime | None, verdicts: int) -> str | None:
    """Why the stored estimates miss verdicts (a verdict given after the oldest of them, or a model that saw fewer
    than the ``verdicts`` there are), or None when they saw them all."""
    if latest is not None and latest > _utc(datetime.fromisoformat(made.oldest)):
        return "verdicts given after the stored estimates were made"
    if made.fewest_verdicts < verdicts:
        return f"the stored estimates' model saw {made.fewest_verdicts} of {verdicts} verdicts"
    return None


def latest_verdict(judgments: list[Judgment]) -> datetime | None:
    """When a human last gave (or took back) a verdict; None when none did."""
    return max((_utc(j.created_at) for j in judgments if j.source is JudgmentSource.human), default=None)


def _utc(moment: datetime) -> datetime:
    """A time comparable with the store's: one written without a zone is UTC, as every time the store writes."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def with_heldout(estimated: list[dict]) -> list[dict]:
    """The rows of ``estimates.jsonl`` with ``p_heldout``: each pair's stored estimate, which its query's fold's model
    made without that fold's verdicts (or the prior, without any); null where nothing estimated the pair."""
    return [{**row, "p_heldout": row["p_relevant"]} for row in estimated]
