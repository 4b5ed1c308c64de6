"""Release policy: how the append-only judgment log resolves into qrels, per (query, chunk) pair.

1. a human verdict wins. A pair an admin settled (an adjudication, the latest that nothing took back) takes the
   settled grade. Otherwise each reviewer's latest verdict that nothing supersedes is a vote (a rejection is grade
   0); the majority grade is released; a tie goes to the adjudicator's vote when the adjudicator voted for a tied
   grade, else to the most recent verdict for a tied grade. An adjudication is never a vote: agreement figures are
   over the reviewers' independent grades only, and adjudications are counted apart (:func:`settlement`);
2. otherwise a synthetic question's source chunk (and its duplicate twins) is grade 2;
3. otherwise unverified LLM proposals are left out, unless ``include_unverified``: then the latest one is released
   and marked ``llm-unverified``.

The policy is the config's ``release:`` section (:class:`~testset_builder.config.ReleaseConfig`). Failure tags on
logged queries resolve by the same majority rule (:func:`resolved_failure_tags`).
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..config import ReleaseConfig
from ..records import Judgment, JudgmentSource, JudgmentStatus
from ..store import failure_tags as tag_store
from ..store import review as review_store
from ..store import rows
from .agreement import agreement_report

if TYPE_CHECKING:
    from ..config import Config

ReleasePolicy = ReleaseConfig
ORIGINS = ("human", "synthetic-source", "llm-unverified")
V = TypeVar("V")


@dataclass(frozen=True)
class ResolvedQrel:
    query_id: str
    chunk_id: str
    grade: int
    origin: str


def describe(policy: ReleaseConfig) -> dict:
    """The policy as the manifest states it."""
    unverified = "included, marked llm-unverified" if policy.include_unverified else "excluded"
    tie = (
        f"ties to the adjudicator {policy.adjudicator}'s own grade where {policy.adjudicator} graded the pair"
        if policy.adjudicator
        else "ties"
    )
    return {
        "rules": [
            "human verdict wins: a pair an admin settled takes the settled grade; otherwise the majority of each "
            f"reviewer's latest verdict, {tie}{', else' if policy.adjudicator else ''} to the latest grade",
            "synthetic source chunks and their duplicate twins count as grade 2",
            f"unverified LLM proposals {unverified}",
            "synthetic questions whose source the estimate doubts "
            + ("held back until a reviewer keeps them" if policy.hold_doubted else "released unreviewed"),
            {
                True: "synthetic questions no reviewer kept held back",
                False: "synthetic questions no reviewer kept released, their labels unchecked",
                None: "synthetic questions a weak generator (such as the embedded model) wrote held back until a "
                "reviewer keeps them; the others released, their labels unchecked",
            }[policy.hold_unreviewed],
        ],
        "include_unverified": policy.include_unverified,
        "hold_doubted": policy.hold_doubted,
        "hold_unreviewed": policy.hold_unreviewed,
        "adjudicator": policy.adjudicator,
    }


def majority(votes: Mapping[str, tuple[V, Any]], adjudicator: str | None = None) -> V:
    """The value most voters stand by. ``votes`` maps each voter to (value, when), ``when`` ordering the votes in
    time. A tie goes to the adjudicator's value when the adjudicator voted for one of the tied values, else to the
    latest vote for one of them. The one rule for pair grades and failure tags alike."""
    tally = Counter(value for value, _ in votes.values())
    best = max(tally.values())
    tied = {value for value, n in tally.items() if n == best}
    if len(tied) == 1:
        return next(iter(tied))
    if adjudicator in votes and votes[adjudicator][0] in tied:
        return votes[adjudicator][0]
    return max((vote for vote in votes.values() if vote[0] in tied), key=lambda vote: vote[1])[0]


def _votes(verdicts: list[Judgment]) -> dict[str, tuple[int, tuple]]:
    """Each reviewer's latest verdict as (grade, when) (a rejection is grade 0)."""
    latest: dict[str, Judgment] = {}
    for verdict in sorted(verdicts, key=lambda j: (j.created_at, j.judgment_id)):
        latest[verdict.reviewer or ""] = verdict
    return {
        reviewer: (0 if j.status is JudgmentStatus.rejected else j.grade, (j.created_at, j.judgment_id))
        for reviewer, j in latest.items()
    }


def _human_grade(verdicts: list[Judgment], adjudicator: str | None) -> int:
    return majority(_votes(verdicts), adjudicator)


def _alive(judgments: list[Judgment]) -> dict[tuple[str, str], list[Judgment]]:
    """The judgments nothing supersedes, by (query, chunk); a withdrawn one (an undo) takes one back and says
    nothing itself."""
    superseded = {j.supersedes for j in judgments if j.supersedes}
    by_pair: dict[tuple[str, str], list[Judgment]] = {}
    for judgment in judgments:
        if judgment.judgment_id not in superseded and judgment.status is not JudgmentStatus.withdrawn:
            by_pair.setdefault((judgment.query_id, judgment.chunk_id), []).append(judgment)
    return by_pair


def _votes_of(alive: list[Judgment]) -> list[Judgment]:
    """The reviewers' independent grades among a pair's live judgments (not an admin's adjudication)."""
    return [j for j in alive if j.source is JudgmentSource.human and j.status is not JudgmentStatus.adjudicated]


def _adjudication(alive: list[Judgment]) -> Judgment | None:
    """The latest live adjudication of a pair, if an admin settled it."""
    settled = [j for j in alive if j.status is JudgmentStatus.adjudicated]
    return max(settled, key=lambda j: (j.created_at, j.judgment_id)) if settled else None


def reviewer_grades(judgments: list[Judgment]) -> dict[tuple[str, str], dict[str, int]]:
    """(query, chunk) -> reviewer -> the grade that reviewer stands by: the votes the policy counts, for agreement
    figures (verdicts given in review and human labels imported alike; an adjudication is not one)."""
    out = {}
    for pair, alive in _alive(judgments).items():
        human = _votes_of(alive)
        if human:
            out[pair] = {reviewer: grade for reviewer, (grade, _) in _votes(human).items()}
    return out


def adjudications(judgments: list[Judgment]) -> dict[tuple[str, str], Judgment]:
    """(query, chunk) -> the adjudication that settles it, for every pair an admin settled."""
    out = {}
    for pair, alive in _alive(judgments).items():
        if (settled := _adjudication(alive)) is not None:
            out[pair] = settled
    return out


def settlement(judgments: list[Judgment], policy: ReleaseConfig | None = None, pairs: set | None = None) -> dict:
    """How the policy settles the pairs reviewers graded differently (only ``pairs``, when given): ``adjudicated``
    by an admin (``self_settled``: the admin had graded the pair too; ``by``: per admin), and of the disagreements
    left open, those the ``majority`` decides, the ties given to the adjudicator's own grade (``tie_to_adjudicator``:
    the adjudicator is always a party to them), and the ties given to the latest grade (``tie_to_latest``)."""
    policy = policy or ReleaseConfig()
    counts = {"adjudicated": 0, "self_settled": 0, "majority": 0, "tie_to_adjudicator": 0, "tie_to_latest": 0}
    by: Counter = Counter()
    for pair, alive in _alive(judgments).items():
        if pairs is not None and pair not in pairs:
            continue
        votes = _votes(_votes_of(alive))
        settled = _adjudication(alive)
        if settled is not None:
            counts["adjudicated"] += 1
            counts["self_settled"] += settled.reviewer in votes
            by[settled.reviewer or ""] += 1
            continue
        if len({grade for grade, _ in votes.values()}) < 2:
            continue
        tally = Counter(grade for grade, _ in votes.values())
        if list(tally.values()).count(max(tally.values())) == 1:
            counts["majority"] += 1
        elif policy.adjudicator in votes and tally[votes[policy.adjudicator][0]] == max(tally.values()):
            counts["tie_to_adjudicator"] += 1
        else:
            counts["tie_to_latest"] += 1
    return {**counts, "open": counts["majority"] + counts["tie_to_adjudicator"] + counts["tie_to_latest"],
            "by": dict(sorted(by.items())), "adjudicator": policy.adjudicator}  # fmt: skip


def agreement(judgments: list[Judgment], policy: ReleaseConfig | None = None, pairs: set | None = None) -> dict:
    """How far reviewers agree with each other and with the LLM judge (see
    :func:`~testset_builder.labels.agreement.agreement_report`), over the pairs humans graded (only ``pairs``, when
    given): each reviewer's standing grade, the LLM judge's latest proposal, and the human grade the policy
    resolves."""
    grades = {pair: by for pair, by in reviewer_grades(judgments).items() if pairs is None or pair in pairs}
    llm = {}
    for pair, alive in _alive(judgments).items():
        proposals = [j for j in alive if j.source is JudgmentSource.llm]
        if pair in grades and proposals:
            llm[pair] = max(proposals, key=lambda j: (j.created_at, j.judgment_id)).grade
    resolved = {(q.query_id, q.chunk_id): q.grade for q in resolve(judgments, policy)}
    report = agreement_report(grades, llm, {pair: grade for pair, grade in resolved.items() if pair in grades})
    settled = adjudications(judgments)
    report["settled"] = [
        {"query_id": q, "chunk_id": c, "grades": by, "grade": settled[(q, c)].grade,
         "by": settled[(q, c)].reviewer, "self_settled": settled[(q, c)].reviewer in by,
         "at": settled[(q, c)].created_at.isoformat()}
        for (q, c), by in sorted(grades.items()) if (q, c) in settled
    ]  # fmt: skip
    report["disagreements"] = [d for d in report["disagreements"] if (d["query_id"], d["chunk_id"]) not in settled]
    report["adjudication"] = settlement(judgments, policy, pairs)
    return report


def resolve(judgments: list[Judgment], policy: ReleaseConfig | None = None) -> list[ResolvedQrel]:
    """Qrels from an append-only judgment log, by ``policy``; sorted by query then chunk id."""
    policy = policy or ReleaseConfig()
    resolved = []
    for (query_id, chunk_id), alive in sorted(_alive(judgments).items()):
        human = _votes_of(alive)
        settled = _adjudication(alive)
        if settled is not None:
            resolved.append(ResolvedQrel(query_id, chunk_id, settled.grade, "human"))
        elif human:
            resolved.append(ResolvedQrel(query_id, chunk_id, _human_grade(human, policy.adjudicator), "human"))
        elif any(j.source is JudgmentSource.synthetic_source for j in alive):
            resolved.append(ResolvedQrel(query_id, chunk_id, 2, "synthetic-source"))
        elif policy.include_unverified:
            proposals = [j for j in alive if j.source is JudgmentSource.llm]
            latest = max(proposals, key=lambda j: (j.created_at, j.judgment_id))
            resolved.append(ResolvedQrel(query_id, chunk_id, latest.grade, "llm-unverified"))
    return resolved


def resolve_failure_tags(
    standing: Mapping[str, Mapping[str, tag_store.FailureTag]], adjudicator: str | None = None
) -> dict[str, str]:
    """One failure tag per query from each reviewer's standing tag (query id -> reviewer -> tag): the majority,
    a tie to the adjudicator's tag when they gave one of the tied, else to the latest of the tied
    (:func:`majority`, as for pair grades)."""
    return {
        query_id: majority({r: (t.tag, (t.created_at, t.tag_id)) for r, t in by.items()}, adjudicator)
        for query_id, by in sorted(standing.items())
        if by
    }


def resolved_failure_tags(db: sqlite3.Connection, adjudicator: str | None = None) -> dict[str, str]:
    """query id -> its failure tag (``retrieval``, ``generation``, ``none`` or ``unanswerable``) for every logged
    query a reviewer tagged: each reviewer's latest tag that no undo took back, then the majority over reviewers;
    a tie goes to ``adjudicator`` (the config's ``release.adjudicator``) when that reviewer tagged one of the tied,
    else to the latest of the tied. Untagged queries are absent. Reads the workspace, writes nothing."""
    return resolve_failure_tags(tag_store.standing_tags(db), adjudicator)


def holds_unreviewed(config: Config) -> bool | None:
    """What a release holds back of the synthetic questions no reviewer answered: ``release.hold_unreviewed`` when
    set (every one, or none); unset, None: those a weak generator wrote, as the embedded model is (most of its
    questions are unusable), unless question review is off (False: no reviewer would be served them). ``run``
    waits for the questions it holds, and queues them for the reviewers."""
    if config.release.hold_unreviewed is not None:
        return config.release.hold_unreviewed
    return False if config.review.questions is False else None


def release_policy(config: Config) -> ReleaseConfig:
    """The config's ``release:`` section with :func:`holds_unreviewed` decided: what a release of it follows."""
    return config.release.model_copy(update={"hold_unreviewed": holds_unreviewed(config)})


HOLDS_UNREVIEWED = "release_holds_unreviewed"  # the review setting `run` records: "1", "0" or "auto"


def _weak_writer(identity: str | None) -> bool:
    """Whether a question's writer (its lineage's provider identity, ``kind:endpoint``) is a weak model, as its
    provider's class declares (a kind no longer registered counts as not weak)."""
    from ..registry import abilities

    if not identity:
        return False
    try:
        return abilities(identity.split(":", 1)[0]).weak
    except ValueError:
        return False


def held_questions(db: sqlite3.Connection, hold: bool | None) -> set[str]:
    """The synthetic questions ``release.hold_unreviewed`` holds back until a reviewer answers them (keep, drop or
    edit), answered or not: every one (True), none (False), or (None) those a weak generator wrote, such as the
    embedded model, most of whose questions are unusable."""
    if hold is False:
        return set()
    writers = rows.synthetic_question_writers(db)
    if hold:
        return set(writers)
    weak = {writer for writer in set(writers.values()) if _weak_writer(writer)}  # each writer looked up once
    return {q for q, writer in writers.items() if writer in weak}


def unanswered_questions(db: sqlite3.Connection, hold: bool | None) -> set[str]:
    """Of :func:`held_questions`, those no reviewer has answered yet: what a release leaves out."""
    held = held_questions(db, hold)
    return held - review_store.reviewed_questions(db) if held else set()


def recorded_hold(db: sqlite3.Connection) -> bool | None:
    """The ``hold_unreviewed`` that ``run`` last recorded in the workspace (None, the default, when none was)."""
    return {"1": True, "0": False}.get(review_store.review_setting(db, HOLDS_UNREVIEWED) or "auto")


def release_gate(db: sqlite3.Connection) -> dict[str, bool]:
    """The synthetic questions a release waits for, each with whether a reviewer has answered it: those queued as
    doubted, and those the ``hold_unreviewed`` that ``run`` recorded holds
    (:func:`~testset_builder.stages.review.keep_release_gate`; unrecorded, those a weak generator wrote)."""
    held = held_questions(db, recorded_hold(db))
    answered = review_store.reviewed_questions(db) if held else set()
    return review_store.doubted_questions(db) | {query_id: query_id in answered for query_id in held}
