"""Interchange with Argilla and Label Studio (and any review format registered in ``registry``), by file: no
server of theirs is needed. The files themselves are :mod:`testset_builder.export.review_tools`'s.

Export writes the pairs still wanting verdicts as records of those tools, the LLM judge's grade attached as a
suggestion (Argilla: value, score, agent) or a prediction (Label Studio: choices, score, model_version), together
with the dataset settings / labelling config to create the project from. Import reads their annotation exports
back and records each annotator's grade as a human verdict through :func:`~testset_builder.stages.review.submit`,
so imported grades are held to the same rules as any other: append-only, stored once, undoable, and released by the
same policy. Importing a file again stores nothing new; an annotator who changed a grade since the last import
gets a new verdict that stands in for the old.

Imports are ordered by time: each imported grade keeps when its tool says it was given (``source_at``), and a grade
older than the one its annotator stands by (imported or given here) is kept out and counted, never stored over it.
So importing an older export after a newer one changes nothing. A grade whose export gives no time is taken as
given now.

Disagreements go out the same way (``disagreements=True``): the pairs reviewers graded differently and no admin
settled, each with every reviewer's grade and comments, marked as records to settle. Their answers come back as
settlements (:func:`~testset_builder.stages.review.settle_in`), not votes: per pair the latest answer settles it,
under the annotator who gave it. A pair settled meanwhile, or whose reviewers agree by now, is kept out and counted.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ...errors import InputError, ReviewConflictError
from ...export.review_tools import (
    QUESTION,
    Annotators,
    ImportedGrade,
    PendingPair,
    Review,
    ReviewTask,
    detect_format,
    named_annotator,
    read_records_at,
)
from ...labels import policy
from ...labels.queue import llm_proposal
from ...registry import REVIEW_FORMATS
from ...store import review as store
from ...store import reviewers as reviewer_store
from ...store import rows
from ...store.workspace import Workspace, utc_timestamp
from . import comments, disagreements_graded, dropped_questions, record_verdict, settle_in, workspace_overlap


@dataclass
class ExportSummary:
    format: str
    items: int
    with_suggestion: int
    files: list[str]
    disagreements: bool = False  # the items are disagreements to settle

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class ImportSummary:
    format: str
    records: int
    grades: int
    new_verdicts: int
    unchanged: int
    unanswered: int
    older: int = 0  # grades older than the one their annotator stands by: kept out
    settled: int = 0  # disagreements settled by this import
    not_open: int = 0  # answers to disagreements no longer open (settled since, or agreed on now): kept out
    reviewers: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # entries of the annotators file skipped

    def as_dict(self) -> dict:
        return asdict(self)


# export --------------------------------------------------------------------------------------------------------------


def pending_pairs(workspace: Workspace, overlap: int | None = None, limit: int | None = None) -> list[PendingPair]:
    """The pair items still wanting verdicts (``overlap`` of them; unset: the workspace's), highest priority first;
    pairs of dropped questions are left out."""
    db, dropped = workspace.db, dropped_questions(workspace)
    overlap = workspace_overlap(workspace) if overlap is None else overlap
    pairs = []
    for entry in store.pending_items(db, overlap, kind="pair"):
        if entry.query_id in dropped:
            continue
        chunk = rows.get_chunk(db, entry.chunk_id)
        pairs.append(
            PendingPair(
                entry.item_id, entry.query_id, rows.get_query(db, entry.query_id).text, chunk.chunk_id, chunk.text,
                rows.get_document(db, chunk.doc_id).title or chunk.doc_id,
                llm_proposal(workspace, entry.query_id, entry.chunk_id),
            )
        )  # fmt: skip
        if limit and len(pairs) >= limit:
            break
    return pairs


def disagreement_pairs(workspace: Workspace, limit: int | None = None) -> list[PendingPair]:
    """The pairs reviewers stand by different grades on and no admin settled, highest priority first, each with
    every reviewer's grade and what they said; pairs of dropped questions are left out."""
    db, dropped = workspace.db, dropped_questions(workspace)
    found = [(store.item(db, item_id), graded) for item_id, graded in disagreements_graded(workspace).items()]
    found = [(item, graded) for item, graded in found if item is not None and item.query_id not in dropped]
    pairs = []
    for item, graded in sorted(found, key=lambda found: (-found[0].priority, found[0].item_id))[:limit]:
        said: dict[str, list[str]] = {}
        for entry in comments(workspace, item.item_id):
            said.setdefault(entry["reviewer"], []).append(entry["comment"])
        chunk = rows.get_chunk(db, item.chunk_id)
        reviews = tuple(Review(who, grade, tuple(said.pop(who, ()))) for who, grade in sorted(graded.items()))
        reviews += tuple(Review(who, None, tuple(texts)) for who, texts in sorted(said.items()))  # said, not graded
        pairs.append(
            PendingPair(
                item.item_id, item.query_id, rows.get_query(db, item.query_id).text, chunk.chunk_id, chunk.text,
                rows.get_document(db, chunk.doc_id).title or chunk.doc_id,
                llm_proposal(workspace, item.query_id, item.chunk_id), reviews,
            )
        )  # fmt: skip
    return pairs


def tool_files(
    workspace: Workspace,
    fmt: str,
    overlap: int | None = None,
    limit: int | None = None,
    suggestions: bool = True,
    task: ReviewTask | None = None,
    disagreements: bool = False,
) -> tuple[dict[str, str], ExportSummary]:
    """The files to hand ``fmt``'s tool (name -> text): the pending pairs, with the settings of the tool's project
    made from ``task`` (its guidelines, grade meanings and overlap; unset: the defaults and the workspace's
    overlap); ``overlap`` as :func:`pending_pairs` takes it. With ``disagreements``, the open disagreements instead
    (:func:`disagreement_pairs`), to settle in the tool."""
    if fmt not in REVIEW_FORMATS:
        raise InputError(f"unknown format {fmt!r}; use one of {', '.join(REVIEW_FORMATS)}")
    chosen = REVIEW_FORMATS[fmt]
    pairs = disagreement_pairs(workspace, limit) if disagreements else pending_pairs(workspace, overlap, limit)
    task = task or ReviewTask(overlap=workspace_overlap(workspace) if overlap is None else overlap)
    files = chosen.write(pairs, suggestions)
    if chosen.settings is not None:
        files.update(chosen.settings(replace(task, settle=disagreements)))
    texts = {
        name: content if isinstance(content, str) else json.dumps(content, indent=2, ensure_ascii=False) + "\n"
        for name, content in files.items()
    }
    with_suggestion = sum(1 for p in pairs if p.proposal is not None) if suggestions else 0
    return texts, ExportSummary(fmt, len(pairs), with_suggestion, sorted(files), disagreements)


def export_pending(
    workspace: Workspace,
    fmt: str,
    out_dir: Path,
    overlap: int | None = None,
    limit: int | None = None,
    suggestions: bool = True,
    task: ReviewTask | None = None,
    disagreements: bool = False,
) -> ExportSummary:
    """Write :func:`tool_files` into ``out_dir`` (made if missing; files in it are replaced)."""
    texts, summary = tool_files(workspace, fmt, overlap, limit, suggestions, task, disagreements)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        partial = out_dir / f".{name}.partial"
        partial.write_text(text, encoding="utf-8")
        partial.replace(out_dir / name)  # a reader never sees half a file
    return summary


# import --------------------------------------------------------------------------------------------------------------


def _name_annotators(
    db, fmt: str, grades: list[ImportedGrade], given: dict[str, str]
) -> tuple[list[ImportedGrade], list[str]]:
    """The grades with each annotator under their readable name: the one given now, else the one kept from an
    earlier import (a name, once given, is kept in the workspace, so later imports need no file). A name that is a
    reviewer of the workspace already (``ann``, who reviews on the page) maps the annotator onto that reviewer, so
    one person is one reviewer; any other becomes ``tool:name``. An annotator whose verdicts are already stored
    under their id, or under ``tool:name``, keeps it: moving them would split one person in two. A name too long
    for a reviewer is skipped with a warning (returned) unless its annotator annotated in this file."""
    prefix = f"annotator:{fmt}:"
    kept = store.review_settings_under(db, prefix)
    for who, name in given.items():
        if kept.get(who, name) != name:
            raise InputError(f"{fmt} annotator {who[:60]!r} is already named {kept[who]!r}, not {name!r}")
        if who not in kept and store.verdicts_by(db, f"{fmt}:{who}"):
            raise InputError(
                f"{fmt} annotator {who[:60]!r} already has verdicts under that id ({fmt}:{who}): naming them "
                f"{name!r} now would count one person as two; import without a name for them"
            )
    names = {**kept, **given}
    by_name: dict[str, str] = {}
    for who, name in names.items():
        if by_name.setdefault(name, who) != who:
            raise InputError(f"{fmt} annotators {by_name[name][:60]!r} and {who[:60]!r} are both named {name!r}")
    now, used, warnings = utc_timestamp(), {g.reviewer for g in grades}, []
    for who, name in given.items():
        if not reviewer_store.reviewer_exists(db, name):
            try:
                named_annotator(fmt, name, f"annotator {who[:60]!r}")  # checked as every reviewer's name is
            except InputError as error:
                if f"{fmt}:{who}" in used:
                    raise
                warnings.append(f"annotators file: skipped {who[:60]!r} ({error}); no annotation of theirs here")
                del names[who]
                continue
        store.set_review_setting(db, prefix + who, name, now)
    renamed = {f"{fmt}:{who}": _reviewer_named(db, fmt, name) for who, name in names.items()}
    return [replace(g, reviewer=renamed.get(g.reviewer, g.reviewer)) for g in grades], warnings


def _reviewer_named(db, fmt: str, name: str) -> str:
    """The reviewer an annotator named ``name`` is: that reviewer when the workspace has one (and no verdicts sit
    under ``tool:name`` already), else ``tool:name``."""
    if not store.verdicts_by(db, f"{fmt}:{name}") and reviewer_store.reviewer_exists(db, name):
        return name
    return f"{fmt}:{name}"


def _skip_unused(fmt: str, grades: list[ImportedGrade], skipped: dict[str, str]) -> list[str]:
    """Warnings for the users-file entries skipped; an error when a skipped entry carries annotations here."""
    used = {g.annotator for g in grades}
    for who, why in skipped.items():
        if who in used:
            raise InputError(
                f"the annotators file's entry for {fmt} annotator {who[:60]!r} is unusable ({why}), and they "
                "annotated in this file: give them a usable name. Nothing was stored"
            )
    return [
        f"annotators file: skipped {who[:60]!r} ({why}); no annotation of theirs here" for who, why in skipped.items()
    ]


def import_annotations(
    workspace: Workspace, path: Path, fmt: str | None = None, annotators: Annotators | dict[str, str] | None = None
) -> ImportSummary:
    """Read an Argilla or Label Studio export and record its grades as human verdicts (see the module docstring).
    The whole file is checked first: a malformed record or an item this workspace does not have stores nothing.
    ``annotators`` (:func:`~testset_builder.export.review_tools.read_annotators`, or ``{id: name}``) gives the
    annotators' ids readable names, kept for later imports; its skipped entries are warnings in the summary, unless
    one of them annotated in this file."""
    if not isinstance(annotators, Annotators):
        annotators = Annotators(dict(annotators or {}), {})
    records, lines = read_records_at(path)
    fmt = fmt or detect_format(records)
    if fmt not in REVIEW_FORMATS:
        raise InputError(f"unknown format {fmt!r}; use one of {', '.join(REVIEW_FORMATS)}")
    try:
        grades, unanswered = REVIEW_FORMATS[fmt].read(records)
    except InputError as error:
        raise InputError(str(error), path=path) from None
    if not grades:
        raise InputError(
            f"none of its {len(records)} records holds a submitted grade for the question {QUESTION!r}: was the "
            "question renamed, or nothing submitted yet? Nothing was stored",
            path=path,
        )
    items = {g.item_id: store.item(workspace.db, g.item_id) for g in grades}
    unknown = [g for g in grades if items[g.item_id] is None or items[g.item_id].kind != "pair"]
    if unknown:
        shown = "; ".join(f"{g.item_id[:80]!r} ({_where(g, fmt, lines)})" for g in unknown[:5]) + (
            f"; and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        )
        raise InputError(
            f"{len(unknown)} grades are on items that are not (query, chunk) pairs of this workspace: {shown}. "
            "Nothing was stored",
            path=path,
        )
    warnings = _skip_unused(fmt, grades, annotators.skipped)
    new, older = 0, 0
    with workspace.transaction() as db:  # the whole file or nothing
        grades, more = _name_annotators(db, fmt, grades, dict(annotators.names))
        warnings += more
        settled, unchanged, not_open, more = _settle(db, fmt, [g for g in grades if g.settle])
        warnings += more
        standing = policy.reviewer_grades(list(rows.iter_judgments(db)))
        stood = {(v.item_id, v.reviewer): v for v, _ in store.effective_verdicts(db, "pair") if v.action == "grade"}
        for grade in (g for g in grades if not g.settle):
            item = items[grade.item_id]
            before = stood.get((grade.item_id, grade.reviewer))
            if standing.get((item.query_id, item.chunk_id), {}).get(grade.reviewer) == grade.grade:
                unchanged += 1
                continue
            if before is not None and grade.at is not None and grade.at <= before.given_at:
                older += 1  # the annotator's standing grade is newer: this one never replaces it
                continue
            # the key is the reviewer's next verdict on the item: a rerun (or a second process) finds it stored
            count = store.verdict_count(db, grade.item_id, grade.reviewer)
            key = f"{fmt}:{grade.item_id}:{grade.reviewer}:{count}:{grade.grade}"
            result = record_verdict(
                db, grade.reviewer, grade.item_id, "grade", key, grade=grade.grade, seconds=grade.seconds,
                source_at=grade.at,
            )  # fmt: skip
            new += result.created
            unchanged += not result.created
            stood[(grade.item_id, grade.reviewer)] = result.verdict
    reviewers = sorted({g.reviewer for g in grades})
    return ImportSummary(
        fmt, len(records), len(grades), new, unchanged, unanswered, older, settled, not_open, reviewers, warnings
    )


def _settle(db, fmt: str, answers: list[ImportedGrade]) -> tuple[int, int, int, list[str]]:
    """Settle the disagreements answered in the tool, inside the import's transaction: per pair the latest answer
    (one without a time counts as given now), under the annotator who gave it. Returns how many were settled now,
    settled by this file before, no longer open (settled since, or its reviewers agree now: kept out), and a
    warning when some pair was answered by more than one annotator."""
    latest: dict[str, ImportedGrade] = {}
    for answer in answers:
        before = latest.get(answer.item_id)
        if before is None or (before.at is not None and (answer.at is None or answer.at >= before.at)):
            latest[answer.item_id] = answer
    settled = unchanged = not_open = 0
    for answer in latest.values():
        # the answer's time in its key: the same file again stores nothing; an answer given later (after an undo)
        # is a settlement of its own
        key = f"{fmt}:settle:{answer.item_id}:{answer.reviewer}:{answer.at or ''}:{answer.grade}"
        try:
            result = settle_in(db, answer.reviewer, answer.item_id, answer.grade, key, None, answer.seconds, answer.at)
        except ReviewConflictError:
            not_open += 1
            continue
        settled += result.created
        unchanged += not result.created
    annotators = Counter(item for item, _ in {(a.item_id, a.reviewer) for a in answers})
    twice = sum(1 for count in annotators.values() if count > 1)
    said = [f"{twice} disagreements were answered by more than one annotator: the latest answer settles each"]
    return settled, unchanged, not_open, said if twice else []


def _where(grade: ImportedGrade, fmt: str, lines: list[int]) -> str:
    """Where an imported grade is in its file: the task or record, its line, and the annotator."""
    place = f"{'task' if fmt == 'label-studio' else 'record'} {grade.record}" if grade.record else "a record"
    if grade.record and grade.record <= len(lines):
        place += f" at line {lines[grade.record - 1]}"
    return place + (f", annotator {grade.annotator[:60]!r}" if grade.annotator else "")
