"""The files of annotation tools, Argilla and Label Studio: what testset-builder writes for them (the pairs still
wanting verdicts, the LLM judge's grade as a suggestion or prediction, the dataset settings / labelling config to
make the project from) and how it reads their annotation exports back. Each tool is a review format in
:mod:`~testset_builder.registry` (its ``register_review_format`` adds one); ``stages.review.interchange`` takes the
pairs from a workspace and records the grades read here as verdicts.

Shapes (their packages' own, checked against them in the tests):

- Argilla 2.x: ``records.json`` is what ``dataset.records.to_json()`` writes and ``dataset.records.from_json()``
  reads (``fields``, ``metadata``, ``suggestions``, ``responses`` by question name); ``settings.json`` is what
  ``rg.Settings.to_json()`` writes. The flattened form (``dataset.records.to_list(flatten=True)``, keys such as
  ``relevance.responses``, ``relevance.responses.users``) is read too, as JSON or JSON lines.
- Label Studio: ``tasks.json`` is a task list to import (``data`` and ``predictions``); ``label_config.xml`` the
  project's labelling interface; ``project.json`` the project's settings (``projects.create(**project)``: title,
  the config, the instructions, the overlap as ``maximum_annotations``); the annotated file is the project's JSON
  export (``annotations`` with ``result``, ``completed_by``, ``was_cancelled``, ``lead_time``).

The settings carry the workspace's task (:class:`ReviewTask`): its guidelines, what each grade means and its
overlap. Disagreements go out the same way, for an admin to settle there: each record also shows every reviewer's
grade and comments (a ``reviews`` field) and is marked ``review_task: settle``, so its answer comes back as a
settlement, not a vote.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from xml.sax.saxutils import quoteattr

from .. import review_guide
from ..config import GRADE_MEANINGS
from ..errors import InputError
from ..records import Judgment, reviewer_name
from ..registry import REVIEW_FORMATS, ReviewFormat, load_plugins, register_review_format

QUESTION = "relevance"  # the Argilla question / Label Studio control that carries the grade
SETTLE = "settle"  # the review_task of a record that is a disagreement to settle
GUIDELINES = (
    "Is the chunk relevant to the query? Grade it as below. Leave the record unanswered or discard it when unsure."
)
SETTLE_GUIDELINES = (
    "Reviewers graded these pairs differently. Read their grades and what they said (under *Reviews*), then give "
    "the grade that settles the pair: it stands in every release, beside their grades, not as one more vote."
)


@dataclass(frozen=True)
class ReviewTask:
    """What the workspace asks of reviewers, for a tool's project settings: the ``guidelines`` (Markdown, the
    config's ``review.guidelines``), what each grade means (``review.grades``, ``label: meaning``), the
    ``overlap`` (distinct reviewers per item), and ``settle``: the records are disagreements for an admin to settle
    (one answer each)."""

    guidelines: str | None = None
    grades: dict[int, str] = field(default_factory=lambda: dict(GRADE_MEANINGS))
    overlap: int = 1
    settle: bool = False

    @property
    def answers_wanted(self) -> int:
        """Answers a record wants: the overlap, one for a disagreement."""
        return 1 if self.settle else self.overlap

    def guidelines_markdown(self) -> str:
        """The guidelines as a tool shows them: (for disagreements, what settling means;) the workspace's own, else
        a line on the task; then what each grade means."""
        parts = [SETTLE_GUIDELINES] if self.settle else []
        parts.append(self.guidelines.strip() if self.guidelines and self.guidelines.strip() else GUIDELINES)
        meanings = "\n".join(
            f"- **{grade}**{f' · {label}' if label else ''}: {meaning}"
            for grade, label, meaning in review_guide.grade_labels(self.grades)
        )
        parts.append(f"**Grades**\n\n{meanings}")
        return "\n\n".join(parts) + "\n"


@dataclass(frozen=True)
class Review:
    """One reviewer's standing grade on a disagreement (None: they said something, graded nothing), and what they
    said on it."""

    reviewer: str
    grade: int | None
    comments: tuple[str, ...] = ()


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
    reviews: tuple[Review, ...] = ()  # a disagreement's, for an admin to settle; none for a pair wanting verdicts

    def reviews_text(self) -> str:
        """The reviews as plain text: each reviewer's grade, then what each said."""
        graded = [f"{r.reviewer}: {r.grade}" for r in self.reviews if r.grade is not None]
        said = [f"{r.reviewer} said: {text}" for r in self.reviews for text in r.comments]
        return "\n".join([*graded, "", *said] if said else graded)


@dataclass(frozen=True)
class ImportedGrade:
    """One annotator's grade on one item, read from another tool's export: ``at`` is when they gave it (UTC, ISO
    8601) when the export says; ``record`` the record's number in the file (from 1) and ``annotator`` the tool's
    id for them, to say where a problem is."""

    item_id: str
    reviewer: str
    grade: int
    seconds: float | None = None
    at: str | None = None
    record: int | None = None
    annotator: str | None = None
    settle: bool = False  # an answer to a disagreement exported to settle: a settlement, not a vote


def source_time(value, where: str) -> str | None:
    """An export's timestamp (ISO 8601; ``Z`` or an offset; none taken as UTC) as UTC with microseconds, the form
    verdict times are stored in, so the two compare as text; None when the export gives none."""
    if value in (None, ""):
        return None
    try:
        moment = datetime.fromisoformat(str(value).strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InputError(f"{where}: {str(value)[:40]!r} is not an ISO 8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


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
        fields = {"query": pair.query, "chunk": pair.chunk}
        metadata = {"item_id": pair.item_id, "query_id": pair.query_id, "chunk_id": pair.chunk_id, "title": pair.title}
        if pair.reviews:
            fields["reviews"], metadata["review_task"] = pair.reviews_text(), SETTLE
        records.append(
            {
                "id": pair.item_id,
                "fields": fields,
                "metadata": metadata,
                "suggestions": suggested,
                "responses": {},
                "vectors": {},
                "status": "pending",
                "_server_id": None,
            }
        )  # fmt: skip
    return records


def argilla_settings(task: ReviewTask) -> dict:
    """The dataset settings as ``rg.Settings.to_json()`` writes them: the query and the chunk as text fields (and
    for disagreements the reviews), a 0-2 rating whose description says what each grade means, the task's
    guidelines, and its overlap as the distribution (answers each record wants)."""

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
        "description": "; ".join(f"{grade}: {text}" for grade, text in sorted(task.grades.items())),
        "required": True, "dataset_id": None, "type": "rating",
        "settings": {"type": "rating", "options": [{"value": grade} for grade in sorted(task.grades)]},
    }  # fmt: skip
    fields = [text_field("query", "Query"), text_field("chunk", "Chunk")]
    described = ("item_id", "query_id", "chunk_id", "title")
    if task.settle:
        fields.append(text_field("reviews", "Reviews: each reviewer's grade and what they said"))
        described += ("review_task",)
    return {
        "guidelines": task.guidelines_markdown(),
        "questions": [question],
        "fields": fields,
        "vectors": [],
        "metadata": [metadata(name) for name in described],
        "allow_extra_metadata": True,
        "distribution": {"strategy": "overlap", "min_submitted": task.answers_wanted},
        "mapping": None,
    }


def label_studio_config(task: ReviewTask) -> str:
    """The project's labelling interface: the query, the chunk under its title (for disagreements, the reviews), and
    the grade as a single choice, each grade's label and meaning as its hint."""
    choices = "\n".join(
        f"    <Choice value={quoteattr(str(grade))} hint={quoteattr(text)}/>"
        for grade, text in sorted(task.grades.items())
    )
    reviews = ""
    if task.settle:
        reviews = '  <Header value="Reviews: each grade, what was said"/>\n  <Text name="reviews" value="$reviews"/>\n'
    return (
        '<View>\n  <Header value="Query"/>\n  <Text name="query" value="$query"/>\n  <Header value="$title"/>\n'
        f'  <Text name="chunk" value="$chunk"/>\n{reviews}'
        f'  <Choices name="{QUESTION}" toName="chunk" choice="single" required="true" showInline="true">\n'
        f"{choices}\n  </Choices>\n</View>\n"
    )


def label_studio_project(task: ReviewTask) -> dict:
    """The project's settings, for ``projects.create(**project)``: a title, the labelling interface, the guidelines
    as its instructions (HTML, raw HTML in them shown as text, as on the review page), shown before labelling, and
    the overlap as the annotations each task wants."""
    return {
        "title": "testset-builder: disagreements to settle" if task.settle else "testset-builder: relevance review",
        "label_config": label_studio_config(task),
        "expert_instruction": review_guide.html(task.guidelines_markdown()),
        "show_instruction": True,
        "maximum_annotations": task.answers_wanted,
    }


def label_studio_tasks(pairs: list[PendingPair], suggestions: bool = True) -> list[dict]:
    """Tasks to import into a Label Studio project made with :func:`label_studio_config`; the LLM grade is a
    prediction."""
    tasks = []
    for pair in pairs:
        data = {
            "item_id": pair.item_id, "query_id": pair.query_id, "chunk_id": pair.chunk_id, "query": pair.query,
            "chunk": pair.chunk, "title": pair.title,
        }  # fmt: skip
        if pair.reviews:
            data["reviews"], data["review_task"] = pair.reviews_text(), SETTLE
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


def read_records(path: Path) -> list[dict]:
    """A JSON list of records, or JSON lines of them."""
    return read_records_at(path)[0]


def read_records_at(path: Path) -> tuple[list[dict], list[int]]:
    """:func:`read_records`, with the line each record starts on (so an error can say where it is)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputError(f"not UTF-8 text ({error.reason} at byte {error.start})", path=path) from None
    if not text.strip():
        raise InputError("the file is empty: export the annotated records from Argilla or Label Studio", path=path)
    try:
        data = json.loads(text)
        lines = _element_lines(text) if isinstance(data, list) else [1]
    except json.JSONDecodeError:
        data, lines = [], []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                data.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise InputError(f"line {number} is not JSON: {error.msg}", path=path) from None
            lines.append(number)
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list) or not all(isinstance(record, dict) for record in data):
        raise InputError("expected a list of records (JSON objects)", path=path)
    return data, lines


def _element_lines(text: str) -> list[int]:
    """The line each element of a JSON array (valid JSON, already parsed once) starts on."""
    decoder, lines = json.JSONDecoder(), []
    at = text.index("[") + 1
    while True:
        while text[at] in " \t\r\n,":
            at += 1
        if text[at] == "]":
            return lines
        lines.append(text.count("\n", 0, at) + 1)
        at = decoder.raw_decode(text, at)[1]


def is_label_studio(record: dict) -> bool:
    return "data" in record and ("annotations" in record or "predictions" in record or "id" in record)


def is_argilla(record: dict) -> bool:
    return "fields" in record or "responses" in record or any(k.startswith(f"{QUESTION}.") for k in record)


def detect_format(records: list[dict]) -> str:
    """The first registered review format that recognises a record (records in order)."""
    for record in records:
        for fmt in REVIEW_FORMATS.values():
            if fmt.detect is not None and fmt.detect(record):
                return fmt.name
    raise InputError(
        "cannot tell the format: expected Argilla records (fields, responses) or Label Studio tasks (data, "
        f"annotations); pass --format ({', '.join(REVIEW_FORMATS)})"
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
    than taken for a submitted answer (it may be a draft). A grade's time is its response's ``updated_at`` (as
    Argilla's API gives each response), else its record's."""
    grades, unanswered = [], 0
    for index, record in enumerate(records, 1):
        where = f"record {index}"
        metadata = record.get("metadata") if isinstance(record.get("metadata"), dict) else None
        item_id = _item_id(record, where, metadata, record)
        settle = (metadata or record).get("review_task") == SETTLE  # flattened, the metadata is the record's own
        record_time = record.get("updated_at")
        if isinstance(record.get("responses"), dict):
            answers = record["responses"].get(QUESTION) or []
            if not isinstance(answers, list):
                raise InputError(f"{where}: responses.{QUESTION} should be a list")
            found = [
                (a.get("value"), a.get("user_id"), a.get("status", MISSING), a.get("updated_at") or record_time)
                for a in answers
                if isinstance(a, dict)
            ]
        else:
            values = record.get(f"{QUESTION}.responses") or []
            users = record.get(f"{QUESTION}.responses.users") or []
            statuses = record.get(f"{QUESTION}.responses.status") or [MISSING] * len(values)
            if not (len(values) == len(users) == len(statuses)):
                raise InputError(f"{where}: {QUESTION}.responses, .users and .status differ in length")
            found = [(*answer, record_time) for answer in zip(values, users, statuses)]
        taken = 0
        for value, user, status, when in found:
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
            at = f"{where}, annotator {str(user)[:60]!r}"
            grades.append(
                ImportedGrade(
                    item_id, named_annotator("argilla", user, where), _grade(value, at), at=source_time(when, at),
                    record=index, annotator=str(user), settle=settle,
                )
            )  # fmt: skip
            taken += 1
        unanswered += taken == 0
    return grades, unanswered


def _annotator(annotation: dict, where: str) -> tuple[str, str]:
    """The reviewer an annotation's author becomes, and the tool's id for them."""
    who = annotation.get("completed_by")
    if isinstance(who, dict):
        who = who.get("email") or who.get("id")
    if who in (None, ""):
        raise InputError(f"{where}: an annotation without completed_by")
    return named_annotator("label-studio", who, where), str(who)


MISSING = object()  # a response whose export says nothing of its status


def named_annotator(tool: str, who, where: str) -> str:
    """The reviewer an imported annotator becomes (``tool:name``, checked as every reviewer's name is), checked
    here, where the error can say where."""
    try:
        return reviewer_name(f"{tool}:{who}")
    except InputError as error:
        raise InputError(f"{where}: annotator {str(who)[:60]!r}: {error}") from None


def read_label_studio(tasks: list[dict]) -> tuple[list[ImportedGrade], int]:
    """Grades from a Label Studio JSON export (cancelled annotations skipped), and how many tasks had none. A
    grade's time is its annotation's ``updated_at`` (else ``created_at``); an annotator's latest annotation of a
    task is the one taken; ``lead_time`` (seconds spent) is kept as the verdict's time spent."""
    grades, unanswered = [], 0
    for index, task in enumerate(tasks, 1):
        where = f"task {index}"
        if not isinstance(task.get("data"), dict):
            raise InputError(f"{where}: no data object")
        item_id = _item_id(task, where, task["data"])
        latest: dict[str, ImportedGrade] = {}
        for annotation in task.get("annotations") or []:
            if not isinstance(annotation, dict) or annotation.get("was_cancelled"):
                continue
            chosen = [
                r for r in annotation.get("result") or [] if isinstance(r, dict) and r.get("from_name") == QUESTION
            ]
            if not chosen:
                continue
            value = (chosen[-1].get("value") or {}).get("choices")
            reviewer, who = _annotator(annotation, where)
            at = f"{where}, annotator {who[:60]!r}"
            seconds = annotation.get("lead_time")
            seconds = float(seconds) if isinstance(seconds, int | float) and seconds >= 0 else None
            when = source_time(annotation.get("updated_at") or annotation.get("created_at"), at)
            settle = task["data"].get("review_task") == SETTLE
            grade = ImportedGrade(item_id, reviewer, _grade(value, at), seconds, when, index, who, settle)
            before = latest.get(reviewer)
            if before is None or (before.at or "") <= (when or ""):
                latest[reviewer] = grade
        grades.extend(latest.values())
        unanswered += not latest
    return grades, unanswered


@dataclass(frozen=True)
class Annotators:
    """Readable names for a tool's annotator ids (``names``), and the entries of the file skipped (``skipped``: the
    entry's id, or ``user N`` without one, with why), which an import refuses only if one carries annotations."""

    names: dict[str, str]
    skipped: dict[str, str]


def read_annotators(path: Path) -> Annotators:
    """Readable names for another tool's annotator ids: a JSON or YAML mapping ``{id: name}``, or a list of the
    tool's user records (Argilla's users, Label Studio's ``/api/users``) named by ``username``, else ``email``,
    else first and last name. An entry without an id or a usable name (empty, or over 80 characters) is skipped,
    with why: a tool's users list holds people who never annotated."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8-sig"))
    except OSError as error:
        raise InputError(f"cannot read the annotators file ({error.strerror or error})", path=path) from None
    except (UnicodeDecodeError, yaml.YAMLError) as error:
        raise InputError(f"the annotators file is not JSON or YAML ({str(error).splitlines()[0]})", path=path) from None
    skipped: dict[str, str] = {}
    if isinstance(data, dict):
        pairs = list(data.items())
    elif isinstance(data, list) and all(isinstance(user, dict) for user in data):
        pairs = []
        for index, user in enumerate(data, 1):
            full = " ".join(str(user.get(k) or "") for k in ("first_name", "last_name")).strip()
            name = user.get("username") or user.get("email") or full
            if user.get("id") in (None, ""):
                skipped[f"user {index}"] = "no id"
                continue
            pairs.append((user["id"], name))
    else:
        raise InputError("the annotators file holds {id: name} or a list of users with an id and a name", path=path)
    names = {}
    for who, name in pairs:
        who, name = str(who).strip(), " ".join(str(name or "").split())
        if not who:
            skipped["an entry"] = "an empty id"
        elif not name:
            skipped[who] = "no username, email or name"
        elif len(name) > 80:
            skipped[who] = f"a name of {len(name)} characters (at most 80)"
        else:
            names[who] = name
    return Annotators(names, skipped)


register_review_format(
    ReviewFormat(
        "argilla",
        lambda pairs, suggestions: {"records.json": argilla_records(pairs, suggestions)},
        read_argilla,
        is_argilla,
        "Argilla 2.x records (records.to_json, or flattened) and dataset settings",
        lambda task: {"settings.json": argilla_settings(task)},
    )
)
register_review_format(
    ReviewFormat(
        "label-studio",
        lambda pairs, suggestions: {"tasks.json": label_studio_tasks(pairs, suggestions)},
        read_label_studio,
        is_label_studio,
        "Label Studio tasks with predictions, its labelling config and project settings, and its JSON export",
        lambda task: {"label_config.xml": label_studio_config(task), "project.json": label_studio_project(task)},
    )
)

load_plugins()  # the built-in review formats are registered: now a plugin's, after them
