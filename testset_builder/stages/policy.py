"""Release policy: how the append-only judgment log resolves into qrels, per (query, chunk) pair.

1. a human verdict wins: each reviewer's latest verdict that nothing supersedes is a vote (a rejection is grade 0);
   the majority grade is released; a tie goes to the adjudicator's vote when the adjudicator voted, else to the
   most recent verdict;
2. otherwise a synthetic question's source chunk (and its duplicate twins) is grade 2;
3. otherwise unverified LLM proposals are left out, unless ``include_unverified``: then the latest one is released
   and marked ``llm-unverified``.

The policy is the config's ``release:`` section (:class:`~testset_builder.config.ReleaseConfig`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..config import ReleaseConfig
from ..metrics.agreement import agreement_report
from ..records import Judgment, JudgmentSource, JudgmentStatus

ReleasePolicy = ReleaseConfig
ORIGINS = ("human", "synthetic-source", "llm-unverified")


@dataclass(frozen=True)
class ResolvedQrel:
    query_id: str
    chunk_id: str
    grade: int
    origin: str


def describe(policy: ReleaseConfig) -> dict:
    """The policy as the manifest states it."""
    unverified = "included, marked llm-unverified" if policy.include_unverified else "excluded"
    return {
        "rules": [
            "human verdict wins (majority of each reviewer's latest verdict; ties to the adjudicator, else the latest)",
            "synthetic source chunks and their duplicate twins count as grade 2",
            f"unverified LLM proposals {unverified}",
        ],
        "include_unverified": policy.include_unverified,
        "adjudicator": policy.adjudicator,
    }


def _votes(verdicts: list[Judgment]) -> tuple[dict[str, int], Judgment]:
    """Each reviewer's latest verdict as a grade (a rejection is 0), and the newest verdict of all."""
    latest: dict[str, Judgment] = {}
    for verdict in sorted(verdicts, key=lambda j: (j.created_at, j.judgment_id)):
        latest[verdict.reviewer or ""] = verdict
    votes = {reviewer: 0 if j.status is JudgmentStatus.rejected else j.grade for reviewer, j in latest.items()}
    return votes, max(latest.values(), key=lambda j: (j.created_at, j.judgment_id))


def _human_grade(verdicts: list[Judgment], adjudicator: str | None) -> int:
    votes, newest = _votes(verdicts)
    tally = Counter(votes.values())
    best = max(tally.values())
    tied = [grade for grade, n in tally.items() if n == best]
    if len(tied) == 1:
        return tied[0]
    if adjudicator in votes and votes[adjudicator] in tied:
        return votes[adjudicator]
    return votes[newest.reviewer or ""]


def _alive(judgments: list[Judgment]) -> dict[tuple[str, str], list[Judgment]]:
    """The judgments nothing supersedes, by (query, chunk); a withdrawn one (an undo) takes one back and says
    nothing itself."""
    superseded = {j.supersedes for j in judgments if j.supersedes}
    by_pair: dict[tuple[str, str], list[Judgment]] = {}
    for judgment in judgments:
        if judgment.judgment_id not in superseded and judgment.status is not JudgmentStatus.withdrawn:
            by_pair.setdefault((judgment.query_id, judgment.chunk_id), []).append(judgment)
    return by_pair


def reviewer_grades(judgments: list[Judgment]) -> dict[tuple[str, str], dict[str, int]]:
    """(query, chunk) -> reviewer -> the grade that reviewer stands by: the votes the policy counts, for agreement
    figures (verdicts given in review and human labels imported alike)."""
    out = {}
    for pair, alive in _alive(judgments).items():
        human = [j for j in alive if j.source is JudgmentSource.human]
        if human:
            out[pair] = _votes(human)[0]
    return out


def agreement(judgments: list[Judgment], policy: ReleaseConfig | None = None, pairs: set | None = None) -> dict:
    """How far reviewers agree with each other and with the LLM judge (see
    :func:`~testset_builder.metrics.agreement.agreement_report`), over the pairs humans graded (only ``pairs``, when
    given): each reviewer's standing grade, the LLM judge's latest proposal, and the human grade the policy
    resolves."""
    grades = {pair: by for pair, by in reviewer_grades(judgments).items() if pairs is None or pair in pairs}
    llm = {}
    for pair, alive in _alive(judgments).items():
        proposals = [j for j in alive if j.source is JudgmentSource.llm]
        if pair in grades and proposals:
            llm[pair] = max(proposals, key=lambda j: (j.created_at, j.judgment_id)).grade
    resolved = {(q.query_id, q.chunk_id): q.grade for q in resolve(judgments, policy)}
    return agreement_report(grades, llm, {pair: grade for pair, grade in resolved.items() if pair in grades})


def resolve(judgments: list[Judgment], policy: ReleaseConfig | None = None) -> list[ResolvedQrel]:
    """Qrels from an append-only judgment log, by ``policy``; sorted by query then chunk id."""
    policy = policy or ReleaseConfig()
    resolved = []
    for (query_id, chunk_id), alive in sorted(_alive(judgments).items()):
        human = [j for j in alive if j.source is JudgmentSource.human]
        if human:
            resolved.append(ResolvedQrel(query_id, chunk_id, _human_grade(human, policy.adjudicator), "human"))
        elif any(j.source is JudgmentSource.synthetic_source for j in alive):
            resolved.append(ResolvedQrel(query_id, chunk_id, 2, "synthetic-source"))
        elif policy.include_unverified:
            proposals = [j for j in alive if j.source is JudgmentSource.llm]
            latest = max(proposals, key=lambda j: (j.created_at, j.judgment_id))
            resolved.append(ResolvedQrel(query_id, chunk_id, latest.grade, "llm-unverified"))
    return resolved
