"""Production RAG log records, read as a stream: one record a request, from JSON lines, CSV, or OpenTelemetry spans
(each a log format in the registry of :mod:`.formats`; :func:`~.formats.register_log_format` adds one).

A record holds what the live system saw and did: the user's query, what it retrieved (chunk ids with their ranks,
or the retrieved texts, matched back to chunks later and never guessed), its answer, the feedback (thumbs, a
rating, a comment), the chunks it cited and which of them the user clicked, when, and in which session.

Field names differ from one logging setup to the next, so the config's ``logs.fields`` maps them (dotted paths
reach into nested objects: ``retrieval.documents``). A line that cannot be read is reported with its number and
reason and the rest goes on; nothing is ever filled in by guessing. Readers hold one line (CSV: one row;
OpenTelemetry: the spans of the traces still open) at a time, so a log of any size streams.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import LogFieldsConfig as LogFields
from ..errors import InputError
from .formats import LOG_FORMATS, LogFormat, register_log_format

THUMBS_UP = {"up", "+1", "1", "true", "yes", "good", "positive", "thumbs_up", "👍"}
THUMBS_DOWN = {"down", "-1", "0", "false", "no", "bad", "negative", "thumbs_down", "👎"}


@dataclass(frozen=True)
class Retrieved:
    """One result the live system retrieved: its chunk id, or its text when the log has no ids."""

    rank: int
    chunk_id: str | None = None
    text: str | None = None
    score: float | None = None


@dataclass
class LogRecord:
    line: int
    query: str
    retrieved: list[Retrieved] = field(default_factory=list)
    answer: str | None = None
    thumbs: int | None = None  # +1 up, -1 down
    rating: float | None = None
    comment: str | None = None
    cited: list[str] = field(default_factory=list)  # chunk ids the answer cited
    clicked: list[str] = field(default_factory=list)  # cited chunk ids the user opened
    timestamp: str | None = None
    session: str | None = None


@dataclass(frozen=True)
class Unreadable:
    line: int
    reason: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.reason}"


def _get(record: Any, path: str) -> Any:
    if "." not in path:
        return record.get(path) if isinstance(record, dict) else None
    for part in path.split("."):
        if not isinstance(record, dict) or part not in record:
            return None
        record = record[part]
    return record


def _text(value: Any, what: str) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, (dict, list)):
        raise ValueError(f"{what} is {type(value).__name__}, not text")
    return str(value)


def _ids(value: Any, what: str) -> list[str]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        value = _json_list(value, what)
    if not isinstance(value, list) or not all(isinstance(v, (str, int)) for v in value):
        raise ValueError(f"{what} must be a list of chunk ids")
    return [str(v) for v in value]


def _json_list(value: str, what: str) -> Any:
    """A CSV cell holding a list: JSON (``["a", "b"]``), else ids separated by ``|`` or ``;``."""
    stripped = value.strip()
    if stripped.startswith("["):
        try:
            return json.loads(stripped)
        except ValueError:
            raise ValueError(f"{what} is not a JSON list") from None
    separator = "|" if "|" in stripped else ";"
    return [part.strip() for part in stripped.split(separator) if part.strip()]


def _thumbs(value: Any) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return 1 if value else -1
    if isinstance(value, (int, float)) and value in (1, -1, 0):
        return 1 if value == 1 else -1
    text = str(value).strip().casefold()
    if text in THUMBS_UP:
        return 1
    if text in THUMBS_DOWN:
        return -1
    raise ValueError(f"thumbs {value!r} is neither up nor down")


def _number(value: Any, what: str) -> float | None:
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} {value!r} is not a number") from None


def _retrieved(value: Any, fields: LogFields) -> list[Retrieved]:
    if value is None or value == "":
        return []
    if isinstance(value, str):
        value = _json_list(value, "retrieved")
    if not isinstance(value, list):
        raise ValueError("retrieved must be a list")
    results = []
    for rank, item in enumerate(value, 1):
        if isinstance(item, (str, int)):
            results.append(Retrieved(rank, chunk_id=str(item)))
        elif isinstance(item, dict):
            chunk_id = _text(_get(item, fields.retrieved_id), "a retrieved id")
            text = _text(_get(item, fields.retrieved_text), "a retrieved text")
            if chunk_id is None and text is None:
                raise ValueError(
                    f"retrieved result {rank} has neither {fields.retrieved_id!r} nor {fields.retrieved_text!r}"
                )
            results.append(Retrieved(rank, chunk_id, text, _number(_get(item, fields.retrieved_score), "a score")))
        else:
            raise ValueError(f"retrieved result {rank} is {type(item).__name__}")
    return results


def parse_record(line: int, raw: dict, fields: LogFields) -> LogRecord:
    """One log record from a JSON object or CSV row; ValueError says what is wrong with it."""
    query = _text(_get(raw, fields.query), "the query")
    if query is None or not query.strip():
        raise ValueError(f"no query (field {fields.query!r})")
    return LogRecord(
        line=line,
        query=query,
        retrieved=_retrieved(_get(raw, fields.retrieved), fields),
        answer=_text(_get(raw, fields.answer), "the answer"),
        thumbs=_thumbs(_get(raw, fields.thumbs)),
        rating=_number(_get(raw, fields.rating), "rating"),
        comment=_text(_get(raw, fields.comment), "the comment"),
        cited=_ids(_get(raw, fields.cited), "cited"),
        clicked=_ids(_get(raw, fields.clicked), "clicked"),
        timestamp=_text(_get(raw, fields.timestamp), "the timestamp"),
        session=_text(_get(raw, fields.session), "the session"),
    )


MAX_LINE_BYTES = 16 * 2**20  # a longer line is reported and passed over, never held whole


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    try:
        with path.open("rb") as handle:
            number = 0
            while raw := handle.readline(MAX_LINE_BYTES + 1):
                number += 1
                if len(raw) > MAX_LINE_BYTES:
                    while raw and not raw.endswith(b"\n"):  # the rest of the line, a piece at a time
                        raw = handle.readline(MAX_LINE_BYTES)
                    yield number, f"\x00a line of over {MAX_LINE_BYTES:,} bytes"
                    continue
                try:
                    yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as error:
                    yield number, f"\x00not UTF-8 (byte {error.start})"
    except OSError as error:
        raise InputError(f"cannot read the log ({error.strerror})", path=path) from None


def _objects(path: Path) -> Iterator[tuple[int, dict | Unreadable]]:
    """Each non-blank line of a JSON-lines file: its JSON object, or why it is none."""
    for number, text in _lines(path):
        if text.startswith("\x00"):
            yield number, Unreadable(number, text[1:])
        elif text.strip():
            try:
                raw = json.loads(text)
            except ValueError as error:
                yield number, Unreadable(number, f"not JSON ({error.msg})")
                continue
            yield (
                number,
                raw if isinstance(raw, dict) else Unreadable(number, f"a JSON {type(raw).__name__}, not an object"),
            )


def read_jsonl(path: Path, fields: LogFields) -> Iterator[LogRecord | Unreadable]:
    for number, raw in _objects(path):
        if isinstance(raw, Unreadable):
            yield raw
            continue
        try:
            yield parse_record(number, raw, fields)
        except ValueError as error:
            yield Unreadable(number, str(error))


def read_csv(path: Path, fields: LogFields) -> Iterator[LogRecord | Unreadable]:
    """CSV with a header; list cells (retrieved, cited, clicked) as JSON lists or ids separated by | or ;."""
    try:
        handle = path.open(encoding="utf-8-sig", newline="")
    except OSError as error:
        raise InputError(f"cannot read the log ({error.strerror})", path=path) from None
    with handle:
        reader = csv.DictReader(handle, strict=True)
        try:
            for row in reader:
                line = reader.line_num
                if None in row or any(value is None for value in row.values()):
                    yield Unreadable(line, f"{len(reader.fieldnames or [])} columns in the header, not in this row")
                    continue
                try:
                    yield parse_record(line, row, fields)
                except ValueError as error:
                    yield Unreadable(line, str(error))
        except (csv.Error, UnicodeDecodeError) as error:
            raise InputError(f"the CSV cannot be read past line {reader.line_num} ({error})", path=path) from None


# OpenTelemetry: spans as OpenInference / OpenLLMetry export them --------------------------------------------------
OTEL_QUERY = ("input.value", "retrieval.query", "gen_ai.prompt.0.content")
OTEL_ANSWER = ("output.value", "gen_ai.completion.0.content")


def _attributes(span: dict) -> dict[str, Any]:
    """A span's attributes as a flat dict, from OTLP's ``[{key, value: {stringValue | ...}}]`` or a plain object."""
    raw = span.get("attributes") or {}
    if isinstance(raw, dict):
        return raw
    flat = {}
    for item in raw:
        if isinstance(item, dict) and "key" in item:
            value = item.get("value") or {}
            flat[item["key"]] = next(iter(value.values()), None) if isinstance(value, dict) else value
    return flat


def _documents(attributes: dict[str, Any]) -> list[Retrieved]:
    """``retrieval.documents.{i}.document.{id,content,score}`` (OpenInference) in index order."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if key.startswith("retrieval.documents."):
            index, _, rest = key.removeprefix("retrieval.documents.").partition(".")
            if index.isdigit():
                found.setdefault(int(index), {})[rest.removeprefix("document.")] = value
    results = []
    for rank, index in enumerate(sorted(found), 1):
        doc = found[index]
        chunk_id = _text(doc.get("id"), "a document id")
        text = _text(doc.get("content"), "a document content")
        if chunk_id is None and text is None:
            raise ValueError(f"retrieval document {index} has neither id nor content")
        results.append(Retrieved(rank, chunk_id, text, _number(doc.get("score"), "a document score")))
    return results


def _first(attributes: dict[str, Any], keys: Iterable[str]) -> Any:
    return next((attributes[k] for k in keys if attributes.get(k) not in (None, "")), None)


def read_otel(path: Path, fields: LogFields) -> Iterator[LogRecord | Unreadable]:
    """One span a line (OTLP JSON or a flat ``{trace_id, span_id, parent_span_id, attributes}``); a trace is one
    record: its query and answer from the root span, its documents from the retriever span, feedback from the
    attributes named by ``fields`` on any span. A trace ends at its root span, or at the end of the file; its record
    carries the line where it ended, so records come in line order (what a resumed import counts on)."""
    open_traces: dict[str, dict] = {}

    def record_of(trace: dict) -> LogRecord | Unreadable:
        attributes: dict[str, Any] = {}
        for span in trace["spans"]:  # the root last, so its attributes win
            attributes.update(span)
        retrieved = trace["documents"]
        query = _text(_first(attributes, (*OTEL_QUERY, fields.query)), "the query")
        if query is None:
            return Unreadable(trace["line"], f"trace {trace['id']} has no query ({', '.join(OTEL_QUERY)})")
        try:
            return LogRecord(
                line=trace["line"],
                query=query,
                retrieved=retrieved,
                answer=_text(_first(attributes, (*OTEL_ANSWER, fields.answer)), "the answer"),
                thumbs=_thumbs(attributes.get(fields.thumbs)),
                rating=_number(attributes.get(fields.rating), "rating"),
                comment=_text(attributes.get(fields.comment), "the comment"),
                cited=_ids(attributes.get(fields.cited), "cited"),
                clicked=_ids(attributes.get(fields.clicked), "clicked"),
                timestamp=_text(trace.get("start"), "the timestamp"),
                session=_text(_first(attributes, ("session.id", fields.session)), "the session"),
            )
        except ValueError as error:
            return Unreadable(trace["line"], str(error))

    number = 0
    for number, span in _objects(path):
        if isinstance(span, Unreadable):
            yield Unreadable(number, f"not a span ({span.reason})")
            continue
        try:
            trace_id = str(span.get("traceId") or span.get("trace_id") or "")
            if not trace_id:
                raise ValueError("no trace id")
            attributes = _attributes(span)
            documents = _documents(attributes)
        except ValueError as error:
            yield Unreadable(number, f"not a span ({error})")
            continue
        trace = open_traces.setdefault(trace_id, {"id": trace_id, "line": number, "spans": [], "documents": []})
        parent = span.get("parentSpanId") or span.get("parent_span_id") or span.get("parent_id")
        if documents and not trace["documents"]:
            trace["documents"] = documents
        if parent:
            trace["spans"].insert(0, attributes)
        else:
            trace["spans"].append(attributes)
            trace["start"] = span.get("startTimeUnixNano") or span.get("start_time")
            trace["line"] = number
            yield record_of(open_traces.pop(trace_id))
    for trace in open_traces.values():  # traces whose root never came: still records if they say enough
        yield record_of({**trace, "line": number})


register_log_format(LogFormat("jsonl", read_jsonl, "one JSON object a request; fields by the config's logs.fields"))
register_log_format(LogFormat("csv", read_csv, "one row a request with a header; lists as JSON in a cell"))
register_log_format(LogFormat("otel", read_otel, "OpenInference / OpenLLMetry spans, one a line; a trace a request"))


def read_log(path: str | Path, format: str, fields: LogFields | None = None) -> Iterator[LogRecord | Unreadable]:
    """Records (and unreadable lines) of a log, streamed; ``format`` is a registered log format (jsonl, csv, otel,
    or one added with :func:`~.formats.register_log_format`)."""
    path = Path(path)
    if format not in LOG_FORMATS:
        raise InputError(f"unknown log format {format!r}; use {', '.join(LOG_FORMATS)}")
    if not path.is_file():
        raise InputError("no such log file", path=path)
    return LOG_FORMATS[format].read(path, fields or LogFields())
