"""Langfuse exports as a production log (``import-logs --format langfuse``): one record a trace.

What Langfuse writes, each read as it comes (checked against Langfuse's web app and langfuse-python 3.x, 2026):

* a trace downloaded from its page (``trace-<id>.json``): ``{"trace": {...}, "observations": [...]}``, the
  trace's ``input`` and ``output`` as JSON text;
* the traces or observations tables exported as JSON lines or a JSON array (camelCase fields: ``id``,
  ``traceId``, ``type``, ``name``, ``startTime``, ``input``, ``output``, ``sessionId``), or the public API's pages
  (``{"data": [...], "meta": {...}}``), a trace possibly carrying its ``observations`` and ``scores``;
* a session downloaded from its page: ``{"traces": [...]}``.

Observations of one trace may be anywhere in the file (:func:`~.logs.grouped_by_trace`). The query is the
retriever's input (an observation of type ``RETRIEVER``, as the LangChain callback handler records a retriever
call; else the first whose output is a list of documents), else the trace's input; the retrieved results are its
output: LangChain documents (``page_content``, ``metadata``, ``id``), LlamaIndex nodes with scores (``node``,
``score``) or objects with the configured id, text and score fields. The answer is the trace's output, else the
last generation's. A score named like the configured ``thumbs`` field (or ``user-feedback``) gives the thumbs, one
named like the ``rating`` field the rating; scores come inside a trace or as objects of their own (the scores table
exported, ``GET /api/public/scores``), anywhere in the file or in a later one (feedback given after the trace was
imported is added to it once).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..registry import LogFormat, register_log_format
from .logs import (
    BROKEN,
    Feedback,
    LogRecord,
    Retrieved,
    Unreadable,
    _get,
    _number,
    _text,
    _thumbs,
    grouped_by_trace,
    items_of_each,
    json_decoded,
    text_in,
)

if TYPE_CHECKING:
    from ..config import LogFieldsConfig as LogFields

QUERY_KEYS = ("query", "question", "input", "query_str", "text")
ANSWER_KEYS = ("output", "answer", "response", "content", "text", "result")
DOCUMENT_LISTS = ("documents", "nodes", "source_nodes", "results")
FEEDBACK_SCORES = ("user-feedback", "user_feedback", "feedback")


def _items(value: Any) -> tuple[list[dict], list[str]]:
    """The traces and observations in one JSON value, as ``{trace, kind, raw}``, and what could not be read."""
    if isinstance(value, list):
        return items_of_each(value, _items)
    if not isinstance(value, dict):
        return [], [f"a JSON {type(value).__name__}, not a trace or an observation"]
    if isinstance(value.get("trace"), dict):  # a trace downloaded from its page
        observations = value.get("observations") or []
        return _items([{**value["trace"], "observations": observations}])
    for key in ("data", "traces"):  # an API page, a session's download
        if isinstance(value.get(key), list):
            return _items(value[key])
    if value.get("traceId") not in (None, ""):  # an observation, or a score (feedback, perhaps given later)
        kind = "score" if _is_score(value) else "observation"
        return [{"trace": str(value["traceId"]), "kind": kind, "raw": value}], []
    if value.get("id") in (None, ""):
        return [], ["an object with neither traceId (an observation) nor id (a trace)"]
    trace_id = str(value["id"])
    found = [{"trace": trace_id, "kind": "trace", "raw": value}]
    nested = value.get("observations")
    for observation in nested if isinstance(nested, list) else []:  # objects; ids alone say nothing to read
        if isinstance(observation, dict):
            found.append({"trace": trace_id, "kind": "observation", "raw": {"traceId": trace_id, **observation}})
    return found, []


def _is_score(value: dict) -> bool:
    """Whether an object naming a trace is a score (the scores table's rows, ``GET /api/public/scores`` pages), not
    an observation: it has a data type, or a value and a name but no observation's type or start."""
    if "dataType" in value:
        return True
    return "value" in value and "name" in value and "type" not in value and "startTime" not in value


def _document(item: Any, rank: int, fields: LogFields) -> Retrieved:
    if isinstance(item, str):
        return Retrieved(rank, text=item)
    if not isinstance(item, dict):
        raise ValueError(f"retrieved document {rank} is {type(item).__name__}")
    score = item.get("score")
    if isinstance(item.get("node"), dict):  # LlamaIndex's NodeWithScore
        item = item["node"]
    metadata = item.get("metadata") if isinstance(item.get("metadata"), dict) else {}
    chunk_id = next(
        (
            str(v)
            for v in (_get(item, fields.retrieved_id), item.get("id_"), _get(metadata, fields.retrieved_id))
            if v not in (None, "")
        ),
        None,
    )
    text = _text(_get(item, fields.retrieved_text) or item.get("page_content"), "a document's text")
    if chunk_id is None and text is None:
        raise ValueError(f"retrieved document {rank} has neither an id nor text")
    score = score if score is not None else _get(item, fields.retrieved_score)
    if score is None:
        score = metadata.get(fields.retrieved_score, metadata.get("relevance_score"))
    return Retrieved(rank, chunk_id, text, _number(score, "a document score"))


def _documents(output: Any, fields: LogFields) -> list[Retrieved] | None:
    """The retrieved results in an observation's output, or None when it is not a list of documents."""
    output = json_decoded(output)
    if isinstance(output, dict):
        output = next((output[k] for k in DOCUMENT_LISTS if isinstance(output.get(k), list)), None)
    if not isinstance(output, list) or not output or not all(isinstance(d, dict) for d in output):
        return None
    return [_document(item, rank, fields) for rank, item in enumerate(output, 1)]


def _feedback(scores: Any, fields: LogFields) -> tuple[int | None, float | None, str | None]:
    """(thumbs, rating, comment) from a trace's scores: the one named like the thumbs field or user-feedback, and
    the one named like the rating field."""
    thumbs = rating = comment = None
    for score in scores if isinstance(scores, list) else []:
        if not isinstance(score, dict):
            continue
        name = str(score.get("name", "")).casefold()
        value = score.get("stringValue")  # a categorical score's; null (not absent) on a numeric one
        value = score.get("value") if value is None else value
        if name in (fields.thumbs.casefold(), *FEEDBACK_SCORES):
            thumbs, comment = _thumbs(value), _text(score.get("comment"), "a score's comment") or comment
        elif name == fields.rating.casefold():
            rating = _number(value, "rating")
    return thumbs, rating, comment


def _record(trace_id: str, line: int, items: list[dict], fields: LogFields) -> LogRecord | Feedback | Unreadable:
    """A trace's record; a trace of which the file holds only scores gives its :class:`~.logs.Feedback` (scores
    exported apart, or given after the trace was exported), which the import adds to the trace recorded before."""
    try:
        trace = next((i["raw"] for i in items if i["kind"] == "trace"), {})
        observations = sorted(
            (i["raw"] for i in items if i["kind"] == "observation"), key=lambda o: str(o.get("startTime") or "")
        )
        scores = [
            *(trace.get("scores") if isinstance(trace.get("scores"), list) else []),
            *sorted((i["raw"] for i in items if i["kind"] == "score"), key=_score_time),
        ]  # the latest last: it is kept
        if not trace and not observations:
            thumbs, rating, comment = _feedback(scores, fields)
            at = max((_score_time(score) for score in scores), default="") or None
            return Feedback(line, trace_id, thumbs, rating, comment, timestamp=_text(at, "the timestamp"))
        retrievers = [o for o in observations if str(o.get("type", "")).upper() == "RETRIEVER"]
        retriever, documents = None, []
        for observation in [*retrievers, *(o for o in observations if o not in retrievers)]:
            found = _documents(observation.get("output"), fields)
            if found:
                retriever, documents = observation, found
                break
        query = text_in(retriever.get("input"), QUERY_KEYS) if retriever else None
        query = query or text_in(trace.get("input"), QUERY_KEYS)
        if query is None:
            return Unreadable(line, f"trace {trace_id} has no query (no retriever's input, no trace input)")
        generations = [o for o in observations if str(o.get("type", "")).upper() == "GENERATION"]
        answer = text_in(trace.get("output"), ANSWER_KEYS)
        if answer is None and generations:
            answer = text_in(generations[-1].get("output"), ANSWER_KEYS)
        thumbs, rating, comment = _feedback(scores, fields)
        started = trace.get("timestamp") or next((o.get("startTime") for o in observations if o.get("startTime")), None)
        session = trace.get("sessionId") or next((o.get("sessionId") for o in observations if o.get("sessionId")), None)
        return LogRecord(
            line=line,
            query=query,
            retrieved=documents,
            answer=answer,
            thumbs=thumbs,
            rating=rating,
            comment=comment,
            timestamp=_text(started, "the timestamp"),
            session=_text(session, "the session"),
            trace=trace_id,
        )
    except BROKEN as error:
        return Unreadable(line, f"trace {trace_id}: {error}")


def _score_time(score: dict) -> str:
    return str(score.get("updatedAt") or score.get("timestamp") or "")


def read_langfuse(path: Path, fields: LogFields) -> Iterator[LogRecord | Feedback | Unreadable]:
    """Langfuse's trace and session downloads, table exports, API pages and scores, one record a trace."""
    for got in grouped_by_trace(path, _items, "a trace or an observation"):
        yield got if isinstance(got, Unreadable) else _record(*got, fields)


def looks_like_langfuse(head: str) -> bool:
    """Whether the start of a file is Langfuse's: observations, or camelCase traces without OTLP's span ids."""
    if '"spanId"' in head:
        return False
    return '"observations"' in head or ('"traceId"' in head and ('"startTime"' in head or '"dataType"' in head))


register_log_format(
    LogFormat(
        "langfuse",
        read_langfuse,
        "Langfuse trace and session downloads, table exports, API pages (JSON)",
        looks_like=looks_like_langfuse,
    )
)
