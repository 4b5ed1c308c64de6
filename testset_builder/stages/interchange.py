"""Interchange with Argilla and Label Studio, by file: no server of theirs is needed.

Export writes the pairs still wanting verdicts as records of those tools, the LLM judge's grade attached as a
suggestion (Argilla: value, score, agent) or a prediction (Label Studio: choices, score, model_version), together
with the dataset settings / labelling config to create the project from. Import reads their annotation exports
back and records each annotator's grade as a human verdict through :func:`~testset_builder.stages.review.submit`,
so imported grades are held to the same rules as any other: append-only, stored once, undoable, and released by the
same policy. Importing a file again stores nothing new; an annotator who changed a grade since the last import
gets a new verdict that stands in for the old.

Shapes (their packages' own, checked against them in the tests):

- Argilla 2.x: ``records.json`` is what ``dataset.records.to_json()`` writes and ``dataset.records.from_json()``
  reads (``fields``, ``metadata``, ``suggestions``, ``responses`` by question name); ``settings.json`` is what
  ``rg.Settings.to_json()`` writes. The flattened form (``dataset.records.to_list(flatten=True)``, keys such as
  ``relevance.responses``, ``relevance.responses.users``) is read too, as JSON or JSON lines.
- Label Studio: ``tasks.json`` is a task list to import (``data`` and ``predictions``); ``label_config.xml`` the
  project's labelling interface; the annotated file is the project's JSON export (``annotations`` with
  ``result``, ``completed_by``, ``was_cancelled``, ``lead_time``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ..errors import InputError
from ..records import Judgment
from ..store import review as store
from ..store import rows
from ..store.workspace import Workspace, utc_timestamp
from . import policy
from .review import _reviewer, dropped_questions, llm_proposal, record_verdict, workspace_overlap

FORMATS = ("argilla", "label-studio")
QUESTION = "relevance"  # the Argilla question / Label Studio control that carries the grade
GRADES = {0: "not relevant", 1: "relevant", 2: "highly relevant"}
GUIDELINES = (
    "Is the chunk relevant to the query? 0: not relevant (it does not help answer the query); 1: relevant (it "
    "helps, partly or with other chunks); 2: highly relevant (it answers the query). Leave the record unanswered "
    "or discard it when unsure."
)
LABEL_STUDIO_CONFIG = f"""<View>
  <Header value="Query"/>
  <Text name="query" value="$query"/>
  <Header value="$title"/>
  <Text name="chunk" value="$chunk"/>
  <Choices name="{QUESTION}" toName="chunk" choice="single" required="true" showInline="true">
    <Choice value="0" hint="{GRADES[0]}"/>
    <Choice value="1" hint="{GRADES[1]}"/>
    <Choice value="2" hint="{GRADES[2]}"/>
  </Choices>
</View>
"""


@dataclass(frozen=True)
class PendingPair:
    """A (query, chunk) item as another tool gets it."""

    item_id: str
    query_id: str
    query: str
    chunk_id: str
    chunk: str
    title: str
    proposal: Judgment | None


@dataclass(frozen=True)
class ImportedGrade:
    """One annotator's grade on one item, read from another tool's export."""

    item_id: str
    reviewer: str
    grade: int
    seconds: float | None = None


@dataclass
class ExportSummary:
    format: str
    items: int
    with_suggestion: int
    files: list[str]

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
    reviewers: list[str] = field(default_factory=list)

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


def _agent(proposal: Judgment) -> str:
    made = proposal.lineage
    return f"testset-builder judge ({made.provider}/{made.model})" if made else "testset-builder judge"


def _score(proposal: Judgment) -> float | None:
    return None if proposal.confidence is None else round(min(1.0, max(0.0, proposal.confidence)), 6)


def argilla_records(pairs: list[PendingPair], suggestions: bool = True) -> list[dict]:
    """Records as ``dataset.records.to_json()`` writes them; the LLM grade is the ``relevance`` suggestion."""
    records = []
    for pair in pairs:
        suggested = {}
        if suggestions and pair.proposal is not None:
            proposal = pair.proposal
            suggested = {QUESTION: {"value": proposal.grade, "score": _score(proposal), "agent": _agent(proposal)}}
        records.append(
            {
                "id": pair.item_id,
                "fields": {"query": pair.query, "chunk": pair.chunk},
                "metadata": {"item_id": pair.item_id, "query_id": pair.query_id, "chunk_id": pair.chunk_id,
                             "title": pair.title},
                "suggestions": suggested,
                "responses": {},
                "vectors": {},
                "status": "pending",
                "_server_id": None,
            }
        )  # fmt: skip
    return records


def argilla_settings() -> dict:
    """The dataset settings as ``rg.Settings.to_json()`` writes them: two text fields and a 0-2 rating."""

    def text_field(name: str, title: str) -> dict:
        return {
            "id": None, "inserted_at": None, "updated_at": None, "name": name, "title": title, "required": True,
            "description": None, "dataset_id": None, "type": "text",
            "settings": {"type": "text", "use_markdown": False},
        }  # fmt: skip

    def metadata(name: str) -> dict:
        return {
            "id": None, "inserted_at": None, "updated_at": None, "name": name, "title": name,
            "visible_for_annotators": name == "title", "dataset_id": None,
            "settings": {"type": "terms", "values": None, "visible_for_annotators": name == "title"},
        }  # fmt: skip

    question = {
        "id": None, "inserted_at": None, "updated_at": None, "name": QUESTION,
        "title": "How relevant is the chunk to the query?",
        "description": "; ".join(f"{grade}: {label}" for grade, label in GRADES.items()),
        "required": True, "dataset_id": None, "type": "rating",
        "settings": {"type": "rating", "options": [{"value": grade} for grade in GRADES]},
    }  # fmt: skip
    return {
        "guidelines": GUIDELINES,
        "questions": [question],
        "fields": [text_field("query", "Query"), text_field("chunk", "Chunk")],
        "vectors": [],
        "metadata": [metadata(name) for name in ("item_id", "query_id", "chunk_id", "title")],
        "allow_extra_metadata": True,
        "distribution": {"strategy": "overlap", "min_submitted": 1},
        "mapping": None,
    }


def label_studio_tasks(pairs: list[PendingPair], suggestions: bool = True) -> list[dict]:
    """Tasks to import into a Label Studio project made with :data:`LABEL_STUDIO_CONFIG`; the LLM grade is a
    prediction."""
    tasks = []
    for pair in pairs:
        data = {
            "item_id": pair.item_id, "query_id": pair.query_id, "chunk_id": pair.chunk_id, "query": pair.query,
            "chunk": pair.chunk, "title": pair.title,
        }  # fmt: skip
        task: dict = {"data": data}
        if suggestions and pair.proposal is not None:
            proposal = pair.proposal
            prediction: dict = {"model_version": _agent(proposal), "result": [_choice(proposal.grade)]}
            if (score := _score(proposal)) is not None:
                prediction["score"] = score
            task["predictions"] = [prediction]
        tasks.append(task)
    return tasks


def _choice(grade: int) -> dict:
    return {"from_name": QUESTION, "to_name": "chunk", "type": "choices", "value": {"choices": [str(grade)]}}


def export_pending(
    workspace: Workspace,
    fmt: str,
    out_dir: Path,
    overlap: int | None = None,
    limit: int | None = None,
    suggestions: bool = True,
) -> ExportSummary:
    """Write the pending pairs for ``fmt`` into ``out_dir`` (made if missing; files in it are replaced); ``overlap``
    as :func:`pending_pairs` takes it."""
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    pairs = pending_pairs(workspace, overlap, limit)
    if fmt == "argilla":
        files = {"records.json": argilla_records(pairs, suggestions), "settings.json": argilla_settings()}
    else:
        files = {"tasks.json": label_studio_tasks(pairs, suggestions), "label_config.xml": LABEL_STUDIO_CONFIG}
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        text = content if isinstance(content, str) else json.dumps(content, indent=2, ensure_ascii=False) + "\n"
        partial = out_dir / f".{name}.partial"
        partial.write_text(text, encoding="utf-8")
        partial.replace(out_dir / name)  # a reader never sees half a file
    with_suggestion = sum(1 for p in pairs if p.proposal is not None) if suggestions else 0
    return ExportSummary(fmt, len(pairs), with_suggestion, sorted(files))


# import --------------------------------------------------------------------------------------------------------------


def read_records(path: Path) -> list[dict]:
    """A JSON list of records, or JSON lines of them."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputError(f"not UTF-8 text ({error.reason} at byte {error.start})", path=path) from None
    if not text.strip():
        raise InputError("the file is empty: export the annotated records from Argilla or Label Studio", path=path)
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                data.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise InputError(f"line {number} is not JSON: {error.msg}", path=path) from None
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(record, dict) for record in data):
        raise InputError("expected a list of records (JSON objects)", path=path)
    return data


def detect_format(records: list[dict]) -> str:
    for record in records:
        if "data" in record and ("annotations" in record or "predictions" in record or "id" in record):
            return "label-studio"
        if "fields" in record or "responses" in record or any(k.startswith(f"{QUESTION}.") for k in record):
            return "argilla"
    raise InputError(
        "cannot tell the format: expected Argilla records (fields, responses) or Label Studio tasks (data, "
        "annotations); pass --format"
    )


def _grade(value, where: str) -> int:
    if isinstance(value, list | tuple) and len(value) == 1:
        value = value[0]
    if isinstance(value, bool) or str(value).strip() not in ("0", "1", "2"):
        raise InputError(f"{where}: {value!r} is not a grade (0, 1 or 2)")
    return int(str(value).strip())


def _item_id(record: dict, where: str, *places: dict | None) -> str:
    for place in places:
        if isinstance(place, dict) and isinstance(place.get("item_id"), str) and place["item_id"]:
            return place["item_id"]
    if isinstance(record.get("id"), str) and record["id"]:
        return record["id"]
    raise InputError(f"{where}: no item_id (was it exported by testset-builder review-export?)")


def read_argilla(records: list[dict]) -> tuple[list[ImportedGrade], int]:
    """Submitted grades from Argilla records, and how many records had none. Flattened records carry each
    response's status; nested ones (``records.to_json``) do not, so a response there without one is refused rather
    than taken for a submitted answer (it may be a draft)."""
    grades, unanswered = [], 0
    for index, record in enumerate(records, 1):
        where = f"record {index}"
        metadata = record.get("metadata") if isinstance(record.get("metadata"), dict) else None
        item_id = _item_id(record, where, metadata, record)
        if isinstance(record.get("responses"), dict):
            answers = record["responses"].get(QUESTION) or []
            if not isinstance(answers, list):
                raise InputError(f"{where}: responses.{QUESTION} should be a list")
            found = [
                (a.get("value"), a.get("user_id"), a.get("status", MISSING)) for a in answers if isinstance(a, dict)
            ]
        else:
            values = record.get(f"{QUESTION}.responses") or []
            users = record.get(f"{QUESTION}.responses.users") or []
            statuses = record.get(f"{QUESTION}.responses.status") or [MISSING] * len(values)
            if not (len(values) == len(users) == len(statuses)):
                raise InputError(f"{where}: {QUESTION}.responses, .users and .status differ in length")
            found = list(zip(values, users, statuses))
        taken = 0
        for value, user, status in found:
            if not user:
                raise InputError(f"{where}: a response without a user_id")
            if status is MISSING and value is not None:
                raise InputError(
                    f"{where}: the response of user {str(user)[:80]!r} has no status, so a draft cannot be told from a "
                    "submitted answer (Argilla's nested records.to_json leaves it out): export the records "
                    "flattened, with their .responses.status, and import that"
                )
            if status != "submitted" or value is None:
                continue  # a draft or a discarded response says nothing yet
            grades.append(ImportedGrade(item_id, _named("argilla", user, where), _grade(value, where)))
            taken += 1
        unanswered += taken == 0
    return grades, unanswered


def _annotator(annotation: dict, where: str) -> str:
    who = annotation.get("completed_by")
    if isinstance(who, dict):
        who = who.get("email") or who.get("id")
    if who in (None, ""):
        raise InputError(f"{where}: an annotation without completed_by")
    return _named("label-studio", who, where)


MISSING = object()  # a response whose export says nothing of its status


def _named(tool: str, who, where: str) -> str:
    """The reviewer an imported annotator becomes (``tool:name``, checked as every reviewer's name is), checked
    here, where the error can say where."""
    try:
        return _reviewer(f"{tool}:{who}")
    except InputError as error:
        raise InputError(f"{where}: annotator {str(who)[:60]!r}: {error}") from None


def read_label_studio(tasks: list[dict]) -> tuple[list[ImportedGrade], int]:
    """Grades from a Label Studio JSON export (cancelled annotations skipped), and how many tasks had none."""
    grades, unanswered = [], 0
    for index, task in enumerate(tasks, 1):
        where = f"task {index}"
        if not isinstance(task.get("data"), dict):
            raise InputError(f"{where}: no data object")
        item_id = _item_id(task, where, task["data"])
        latest: dict[str, ImportedGrade] = {}
        for annotation in sorted(task.get("annotations") or [], key=lambda a: str(a.get("updated_at") or "")):
            if not isinstance(annotation, dict) or annotation.get("was_cancelled"):
                continue
            chosen = [
                r for r in annotation.get("result") or [] if isinstance(r, dict) and r.get("from_name") == QUESTION
            ]
            if not chosen:
                continue
            value = (chosen[-1].get("value") or {}).get("choices")
            reviewer = _annotator(annotation, where)
            seconds = annotation.get("lead_time")
            seconds = float(seconds) if isinstance(seconds, int | float) and seconds >= 0 else None
            latest[reviewer] = ImportedGrade(item_id, reviewer, _grade(value, where), seconds)
        grades.extend(latest.values())
        unanswered += not latest
    return grades, unanswered


def read_annotators(path: Path) -> dict[str, str]:
    """Readable names for another tool's annotator ids: a JSON or YAML mapping ``{id: name}``, or a list of the
    tool's user records (Argilla's users, Label Studio's ``/api/users``) named by ``username``, else ``email``,
    else first and last name."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8-sig"))
    except OSError as error:
        raise InputError(f"cannot read the annotators file ({error.strerror or error})", path=path) from None
    except (UnicodeDecodeError, yaml.YAMLError) as error:
        raise InputError(f"the annotators file is not JSON or YAML ({str(error).splitlines()[0]})", path=path) from None
    if isinstance(data, dict):
        pairs = list(data.items())
    elif isinstance(data, list) and all(isinstance(user, dict) for user in data):
        pairs = []
        for index, user in enumerate(data, 1):
            full = " ".join(str(user.get(k) or "") for k in ("first_name", "last_name")).strip()
            name = user.get("username") or user.get("email") or full
            if user.get("id") in (None, "") or not name:
                raise InputError(f"user {index} needs an id and a username, email or name", path=path)
            pairs.append((user["id"], name))
    else:
        raise InputError("the annotators file holds {id: name} or a list of users with an id and a name", path=path)
    names = {}
    for who, name in pairs:
        if not str(who).strip() or not str(name or "").strip():
            raise InputError(f"annotator {str(who)[:60]!r} needs a non-empty id and name", path=path)
        names[str(who).strip()] = " ".join(str(name).split())
    return names


def _name_annotators(db, fmt: str, grades: list[ImportedGrade], given: dict[str, str]) -> list[ImportedGrade]:
    """The grades with each annotator under their readable name: the one given now, else the one kept from an
    earlier import (a name, once given, is kept in the workspace, so later imports need no file). An annotator
    whose verdicts are already stored under their id keeps it: renaming them would split one person in two."""
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
    now = utc_timestamp()
    for who, name in given.items():
        _named(fmt, name, f"annotator {who[:60]!r}")  # checked as every reviewer's name is
        store.set_review_setting(db, prefix + who, name, now)
    renamed = {f"{fmt}:{who}": f"{fmt}:{name}" for who, name in names.items()}
    return [replace(g, reviewer=renamed.get(g.reviewer, g.reviewer)) for g in grades]


def import_annotations(
    workspace: Workspace, path: Path, fmt: str | None = None, annotators: dict[str, str] | None = None
) -> ImportSummary:
    """Read an Argilla or Label Studio export and record its grades as human verdicts (see the module docstring).
    The whole file is checked first: a malformed record or an item this workspace does not have stores nothing.
    ``annotators`` (:func:`read_annotators`) gives the annotators' ids readable names, kept for later imports."""
    records = read_records(path)
    fmt = fmt or detect_format(records)
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    try:
        grades, unanswered = read_argilla(records) if fmt == "argilla" else read_label_studio(records)
    except InputError as error:
        raise InputError(str(error), path=path) from None
    if not grades:
        raise InputError(
            f"none of its {len(records)} records holds a submitted grade for the question {QUESTION!r}: was the "
            "question renamed, or nothing submitted yet? Nothing was stored",
            path=path,
        )
    items = {g.item_id: store.item(workspace.db, g.item_id) for g in grades}
    unknown = sorted(item_id for item_id, found in items.items() if found is None or found.kind != "pair")
    if unknown:
        shown = ", ".join(repr(i[:80]) for i in unknown[:5]) + (
            f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        )
        raise InputError(f"{len(unknown)} items are not (query, chunk) pairs of this workspace: {shown}", path=path)
    new, unchanged = 0, 0
    with workspace.transaction() as db:  # the whole file or nothing
        grades = _name_annotators(db, fmt, grades, annotators or {})
        standing = policy.reviewer_grades(list(rows.iter_judgments(db)))
        for grade in grades:
            item = items[grade.item_id]
            if standing.get((item.query_id, item.chunk_id), {}).get(grade.reviewer) == grade.grade:
                unchanged += 1
                continue
            # the key is the reviewer's next verdict on the item: a rerun (or a second process) finds it stored
            count = store.verdict_count(db, grade.item_id, grade.reviewer)
            key = f"{fmt}:{grade.item_id}:{grade.reviewer}:{count}:{grade.grade}"
            result = record_verdict(
                db, grade.reviewer, grade.item_id, "grade", key, grade=grade.grade, seconds=grade.seconds
            )
            new += result.created
            unchanged += not result.created
    reviewers = sorted({g.reviewer for g in grades})
    return ImportSummary(fmt, len(records), len(grades), new, unchanged, unanswered, reviewers)
