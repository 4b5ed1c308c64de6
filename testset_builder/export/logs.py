"""Production RAG log records, read as a stream: one record a request, from JSON lines, CSV, or OpenTelemetry spans
(each a log format in :mod:`~testset_builder.registry`; its ``register_log_format`` adds one).

A record holds what the live system saw and did: the user's query, what it retrieved (chunk ids with their ranks,
or the retrieved texts, matched back to chunks later and never guessed), its answer, the feedback (thumbs, a
rating, a comment), the chunks it cited and which of them the user clicked, when, and in which session.

Field names differ from one logging setup to the next, so the config's ``logs.fields`` maps them (dotted paths
reach into nested objects: ``retrieval.documents``). A line that cannot be read is reported with its number and
reason and the rest goes on; nothing is ever filled in by guessing. Readers hold one line (CSV: one row;
OpenTelemetry: the spans of the traces still open) at a time, so a log of any size streams.
"""

from __future__ import annotations

import contextlib
import csv
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from ..registry import LOG_FORMATS, LogFormat, known_log_format, load_built_in_formats, register_log_format
from . import phoenix

if TYPE_CHECKING:  # config (pydantic models, YAML) is imported where a log is read: `score` never needs it
    from ..config import LogFieldsConfig as LogFields

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
    trace: str | None = None  # the request's own id (a trace id): a request an earlier import saw is not counted again


@dataclass(frozen=True)
class Skipped:
    """A request read whole that is no query's record, and why (``reason``: a short phrase the summary counts by,
    such as "no retrieval"). A trace's carries its id and spans: the part of a trace split across files that this
    file holds, which another file's part may complete (:func:`completed_trace`)."""

    line: int
    reason: str
    trace: str | None = None
    spans: list[dict] | None = field(default=None, compare=False, repr=False)


@dataclass
class Feedback:
    """A user's feedback on a request with no retrieval of its own: the generation trace of an app that retrieves
    in another trace, or a line of a log that names a request's id and gives only its feedback. The import adds it
    to the request its ``trace`` names, else to its session's nearest earlier retrieval."""

    line: int
    trace: str | None
    thumbs: int | None = None
    rating: float | None = None
    comment: str | None = None
    timestamp: str | None = None
    session: str | None = None
    spans: list[dict] | None = field(default=None, compare=False, repr=False)  # a trace's, as for Skipped

    @property
    def given(self) -> bool:
        return self.thumbs is not None or self.rating is not None or bool(self.comment)


@dataclass(frozen=True)
class Notice:
    """Something the reader learnt about the whole log that no line says, for the import summary: where its
    feedback is when the file holds none (Phoenix keeps it apart), annotations it did not read as feedback."""

    line: int
    text: str


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


def json_decoded(value: Any) -> Any:
    """A value a writer may hold as JSON text (an OpenInference ``input.value`` of a chain called with a dict, a
    Langfuse trace's input), or as a Python literal (an instrumentation that wrote ``str(dict)``): decoded when it
    is either, else as it is."""
    if isinstance(value, str) and value[:1] in ('"', "[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            pass
        if value[:1] in ("[", "{") and len(value) <= LITERAL_LIMIT:
            import ast

            try:
                return ast.literal_eval(value)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                return value
    return value


LITERAL_LIMIT = 1 << 20  # a Python literal longer than this is not read as one (a huge prompt, not a question)
USER_ROLES = ("user", "human")


def _user_message(messages: list) -> str | None:
    """The text of the last message a user wrote in a list of chat messages (``role`` or, as LangChain writes
    them, ``type``: user or human), its ``content`` a string or a list of text parts; None when none is."""
    for message in reversed(messages):
        if (
            not isinstance(message, dict)
            or str(message.get("role") or message.get("type") or "").lower() not in USER_ROLES
        ):
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        if isinstance(content, str) and content.strip():
            return content
    return None


def text_in(value: Any, keys: Iterable[str]) -> str | None:
    """Text from a string, from an object (or JSON text of one) by the first of ``keys`` that holds text, or from
    chat messages (a list of them, or an object's ``messages``: the last one a user wrote); None when there is
    none."""
    value = json_decoded(value)
    if isinstance(value, dict) and isinstance(value.get("messages"), list) and not any(k in value for k in keys):
        value = value["messages"]
    if isinstance(value, list) and value and all(isinstance(m, dict) for m in value):
        said = _user_message(value)
        if said is not None:
            return said
        value = value[-1]
    if isinstance(value, dict):
        value = next((value[k] for k in keys if isinstance(value.get(k), str) and value[k].strip()), None)
    return value if isinstance(value, str) and value.strip() else None


def _question(value: Any, fields: LogFields) -> str | None:
    """The user's question in a query field: its text, the question field of an object (a chain called with
    ``{"question": ..., "chat_history": [...]}``, as JSON or as a Python literal), or the last message a user wrote
    in chat messages; ValueError for an object without one."""
    if value is None or value == "":
        return None
    decoded = json_decoded(value)
    if isinstance(decoded, (dict, list)):
        found = text_in(decoded, fields.question)
        if found is None:
            keys = ", ".join(fields.question)
            kind = type(decoded).__name__
            raise ValueError(
                f"the query is a JSON {kind} with no text under {keys} (logs.fields.question) and no user message"
            )
        return found
    return decoded if isinstance(decoded, str) and decoded.strip() else str(value)


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
    text = str(value).strip().casefold().replace("-", "_").replace(" ", "_")  # Phoenix's "thumbs-up"
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


def parse_record(line: int, raw: dict, fields: LogFields) -> LogRecord | Feedback:
    """One log record from a JSON object or CSV row, or the feedback alone on a request the line names by its id
    (no query); ValueError says what is wrong with it."""
    query = _question(_get(raw, fields.query), fields)
    if query is None or not query.strip():
        trace = _text(_get(raw, fields.trace_id), "the trace id")
        feedback = Feedback(
            line, trace, _thumbs(_get(raw, fields.thumbs)), _number(_get(raw, fields.rating), "rating"),
            _text(_get(raw, fields.comment), "the comment"), _text(_get(raw, fields.timestamp), "the timestamp"),
            _text(_get(raw, fields.session), "the session"),
        )  # fmt: skip
        if trace is None or not feedback.given:
            raise ValueError(f"no query (field {fields.query!r})")
        return feedback
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
        trace=_text(_get(raw, fields.trace_id), "the trace id"),
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


# OpenTelemetry: traces as the SDK's and the Collector's exporters write them --------------------------------------
OTEL_QUERY = ("input.value", "gen_ai.retrieval.query.text", "retrieval.query")
DEFAULT_QUERY_FIELD = "query"  # logs.fields.query's default: for traces, looked up after the conventions' names
DEFAULT_ID_FIELD = "id"  # logs.fields.retrieved_id's default: for traces, the document's own id
OTEL_ANSWER = ("output.value", "gen_ai.completion.0.content")


def _json_values(path: Path) -> Iterator[tuple[int, int, Any]]:
    """Each JSON value of a file, with its first and last line: one a line (JSON lines), or a value spread over
    lines from a line holding only ``{`` (or ``[``) to the bracket closing it (the SDK's console exporter, a
    pretty-printed export). What cannot be read comes as one :class:`Unreadable` per value, and reading goes on
    after it: a value cut short ends where the next one starts (a line holding only ``{`` or ``[``, unindented),
    and a line that is not text inside a value spoils that value alone."""
    parts: list[str] = []
    start = size = depth = 0
    in_string = escaped = False
    spoiled: str | None = None  # why the value being read cannot be read (a line of it was not UTF-8, say)
    number = 0
    for number, text in _lines(path):
        opens = text.rstrip("\r\n") in ("{", "[")
        if parts and opens:  # a new top-level value while one is open: the open one was cut short
            yield start, number - 1, Unreadable(start, f"lines {start}-{number - 1}: an object cut short")
            parts, spoiled = [], None
        if text.startswith("\x00"):
            if parts:
                spoiled = spoiled or f"line {number}: {text[1:]}"
                continue
            yield number, number, Unreadable(number, text[1:])
            continue
        if not parts:
            if not text.strip():
                continue
            try:
                yield number, number, json.loads(text)
                continue
            except ValueError as error:
                if text.strip() not in ("{", "["):
                    yield number, number, Unreadable(number, f"not JSON ({error.msg})")
                    continue
            start, size, depth, in_string, escaped = number, 0, 0, False, False
        parts.append(text)
        size += len(text)
        for char in text:  # brackets outside strings, to find where the value ends
            if in_string:
                if escaped:
                    escaped = False
                elif char == "\\":
                    escaped = True
                elif char == '"':
                    in_string = False
            elif char == '"':
                in_string = True
            elif char in "{[":
                depth += 1
            elif char in "}]":
                depth -= 1
        if in_string and text.endswith("\n"):  # a JSON string never spans lines: this one was cut
            in_string = escaped = False
        if depth <= 0:
            if spoiled:
                yield start, number, Unreadable(start, f"lines {start}-{number}: {spoiled}")
            else:
                try:
                    yield start, number, json.loads("".join(parts))
                except ValueError as error:
                    yield start, number, Unreadable(start, f"lines {start}-{number}: not JSON ({error.msg})")
            parts, spoiled = [], None
        elif size > MAX_LINE_BYTES:
            yield start, number, Unreadable(start, f"an object of over {MAX_LINE_BYTES:,} bytes")
            parts, spoiled = [], None
    if parts:
        yield start, number, Unreadable(start, f"lines {start}-{number}: an object cut short by the end of the file")


def _any_value(value: Any) -> Any:
    """An OTLP ``AnyValue`` (``{"stringValue": ...}``, ``{"intValue": "7"}``, arrays, key-value lists) as Python;
    ValueError for one that is none of these."""
    if not isinstance(value, dict):
        return value
    present = {key: inner for key, inner in value.items() if inner is not None}  # a writer may put every kind, null
    value = {_CAMEL.get(key, key): inner for key, inner in (present or value).items()}
    for key in ("stringValue", "boolValue", "doubleValue", "bytesValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            raise ValueError(f"intValue {value['intValue']!r} is not an integer") from None
    if "arrayValue" in value:
        return [_any_value(v) for v in _values_of(value, "arrayValue")]
    if "kvlistValue" in value:
        pairs = _values_of(value, "kvlistValue")
        return {str(kv.get("key")): _any_value(kv.get("value")) for kv in pairs if isinstance(kv, dict)}
    return None


# protobuf's JSON with proto field names (``MessageToJson(preserving_proto_field_name=True)``, Phoenix's
# ``/spans/otlpv1``): OTLP's snake_case names, read as the camelCase ones of the OTLP/JSON encoding
_CAMEL = {
    "string_value": "stringValue", "bool_value": "boolValue", "double_value": "doubleValue",
    "bytes_value": "bytesValue", "int_value": "intValue", "array_value": "arrayValue", "kvlist_value": "kvlistValue",
    "resource_spans": "resourceSpans", "scope_spans": "scopeSpans",
    "instrumentation_library_spans": "instrumentationLibrarySpans",
}  # fmt: skip


def _values_of(value: dict, kind: str) -> list:
    """The ``values`` list of an OTLP ``arrayValue`` or ``kvlistValue`` (or the list itself, as some writers put it)."""
    inner = value[kind]
    inner = inner.get("values") if isinstance(inner, dict) else inner
    if not isinstance(inner, list):
        raise ValueError(f"a {kind} without a list of values")
    return inner


def _flattened(value: Any, prefix: str, into: dict[str, Any]) -> None:
    """Nested attributes (OpenInference's ``{"input": {"value": ...}}``, ``retrieval.documents`` as a list) as the
    dotted keys the semantic conventions name."""
    if isinstance(value, dict):
        for key, inner in value.items():
            _flattened(inner, f"{prefix}.{key}" if prefix else str(key), into)
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        for index, inner in enumerate(value):
            _flattened(inner, f"{prefix}.{index}", into)
    else:
        into[prefix] = value


def _attributes(span: dict) -> dict[str, Any]:
    """A span's attributes as a flat dict, from OTLP's ``[{key, value: {stringValue | ...}}]`` or an object
    (nested or flat)."""
    raw = span.get("attributes") or {}
    if isinstance(raw, list):
        raw = {
            str(item["key"]): _any_value(item.get("value")) for item in raw if isinstance(item, dict) and "key" in item
        }
    if not isinstance(raw, dict):
        raise ValueError("attributes are neither a list nor an object")
    flat: dict[str, Any] = {}
    _flattened(raw, "", flat)
    return flat


def _span_id(value: Any) -> str | None:
    """A trace or span id as lower-case hex: from hex (OTLP JSON, ``0x``-prefixed in the console exporter) or from
    base64 (protobuf's JSON mapping); any other string as it is. Empty or all zeros: none."""
    if value in (None, ""):
        return None
    text = str(value).strip()
    bare = text[2:] if text[:2].lower() == "0x" else text
    if len(bare) in (16, 32) and all(c in "0123456789abcdefABCDEF" for c in bare):
        bare = bare.lower()
    elif len(text) in (12, 24) and text.endswith("="):
        import base64
        import binascii

        try:
            raw = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        bare = raw.hex() if len(raw) in (8, 16) else text
    else:
        bare = text
    return None if not bare.strip("0") else bare


def _start(value: Any) -> str | None:
    """When a span started, as ISO 8601: from a time since the epoch (OTLP's nanoseconds; pandas' JSON writes a
    dataframe's times in milliseconds: the unit is told by the size), a datetime (a Parquet file's), or as written
    (the console's)."""
    from datetime import UTC, datetime

    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        value = value if value.tzinfo else value.replace(tzinfo=UTC)
        return value.astimezone(UTC).isoformat().replace("+00:00", "Z")
    if isinstance(value, int) or (isinstance(value, str) and value.isdigit()):
        number = int(value)
        per_second = next((unit for size, unit in EPOCH_UNITS if number >= size), 1)
        try:
            return datetime.fromtimestamp(number / per_second, UTC).isoformat().replace("+00:00", "Z")
        except (OverflowError, OSError, ValueError):
            raise ValueError(f"start time {str(value)[:30]} is out of range") from None
    return str(value)


# (smallest count, units a second): a time since the epoch after 1973 in nanoseconds is at least 1e17, in
# microseconds 1e14, in milliseconds 1e11
EPOCH_UNITS = ((10**17, 10**9), (10**14, 10**6), (10**11, 10**3))


BROKEN = (ValueError, TypeError, AttributeError, OverflowError)  # what a malformed span or attribute raises


def items_of_each(values: list, items_of: Callable[[Any], tuple[list[dict], list[str]]]):
    """The items of each of ``values`` (an array in a trace file), and why any could not be read, in order."""
    found: list[dict] = []
    problems: list[str] = []
    for value in values:
        items, wrong = items_of(value)
        found.extend(items)
        problems.extend(wrong)
    return found, problems


def _spans(value: Any) -> tuple[list[dict], list[str]]:
    """The spans in one JSON value, and why any of them could not be read (each span on its own: one bad span
    spoils no other): an OTLP export (``resourceSpans`` / ``scopeSpans`` / ``spans``, or protobuf's proto field
    names: ``resource_spans``), one OTLP span, one span as the SDK's console exporter or Phoenix's REST API writes
    it (ids under ``context``, ``parent_id``), a row of Phoenix's spans dataframe, a page of Phoenix's span list
    (``{"data": [...], "next_cursor"}``) or an array of any of these; each span as ``{trace, span, parent,
    attributes, start, server, phoenix}``. A Phoenix annotation (:mod:`.phoenix`) is an item with no trace, ``{trace:
    None, annotation}``: it names its span, whose trace is known once every span is read."""
    if isinstance(value, list):  # an array of spans (or of export requests)
        return items_of_each(value, _spans)
    if not isinstance(value, dict):
        return [], [f"a JSON {type(value).__name__}, not a span"]
    if isinstance(value.get("data"), list) and "context" not in value:  # a page of Phoenix's REST API
        return _spans(value["data"])
    annotation = phoenix.annotation_of(value)
    if annotation is not None:
        return [{"trace": None, "annotation": annotation}], []
    value = {_CAMEL.get(key, key): inner for key, inner in value.items()}
    if "resourceSpans" not in value:
        return _one(phoenix.span_of_row(value) or value)
    found, problems = [], []
    resources = value.get("resourceSpans")
    for resource in resources if isinstance(resources, list) else [resources]:
        resource = {_CAMEL.get(k, k): v for k, v in resource.items()} if isinstance(resource, dict) else resource
        scopes = (
            resource.get("scopeSpans") or resource.get("instrumentationLibrarySpans")
            if isinstance(resource, dict)
            else None
        )
        if not isinstance(scopes, list):
            problems.append("a resourceSpans entry without a list of scopeSpans")
            continue
        for scope in scopes:
            spans = scope.get("spans") if isinstance(scope, dict) else None
            if not isinstance(spans, list):
                problems.append("a scopeSpans entry without a list of spans")
                continue
            one, wrong = items_of_each(spans, _one)
            found.extend(one)
            problems.extend(wrong)
    return found, problems


def _one(raw: Any) -> tuple[list[dict], list[str]]:
    try:
        return [_span(raw)], []
    except BROKEN as error:
        return [], [str(error) or type(error).__name__]


def _span(raw: Any) -> dict:
    if not isinstance(raw, dict):
        raise ValueError("a span is not an object")
    context = raw.get("context") if isinstance(raw.get("context"), dict) else {}
    trace = _span_id(raw.get("traceId") or raw.get("trace_id") or context.get("trace_id"))
    if trace is None:
        raise ValueError("no trace id")
    parent = raw.get("parentSpanId") or raw.get("parent_span_id") or raw.get("parent_id")
    attributes = _attributes(raw)
    kind = phoenix.kind_attribute(raw, attributes)
    if kind is not None:
        attributes["openinference.span.kind"] = kind
    return {
        "trace": trace,
        "span": _span_id(raw.get("spanId") or raw.get("span_id") or context.get("span_id")),
        "parent": _span_id(parent),
        "attributes": attributes,
        "start": _start(raw.get("startTimeUnixNano") or raw.get("start_time_unix_nano") or raw.get("start_time")),
        "server": _is_server(raw, attributes),
        "phoenix": "span_kind" in raw and bool(context),  # Phoenix's span: its feedback is kept apart
    }


def _document_id(doc: dict[str, Any], fields: LogFields) -> str | None:
    """A retrieved document's id: the configured key (``logs.fields.retrieved_id``) in its ``metadata`` (JSON text,
    as LangChain's OpenInference spans carry their ids, or nested attributes) when set, else its ``id``."""
    metadata = json_decoded(doc.get("metadata"))
    key = fields.retrieved_id
    in_metadata = metadata.get(key) if isinstance(metadata, dict) else doc.get(f"metadata.{key}")
    in_metadata = None if isinstance(in_metadata, (dict, list)) else _text(in_metadata, "a document's metadata id")
    if key != DEFAULT_ID_FIELD and in_metadata is not None:
        return in_metadata
    return _text(doc.get("id"), "a document id") or in_metadata


def _documents(attributes: dict[str, Any], fields: LogFields) -> list[Retrieved]:
    """``retrieval.documents.{i}.document.{id,content,score,metadata}`` (OpenInference) in index order."""
    found: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if key.startswith("retrieval.documents."):
            index, _, rest = key.removeprefix("retrieval.documents.").partition(".")
            if index.isdigit():
                found.setdefault(int(index), {})[rest.removeprefix("document.")] = value
    results = []
    for rank, index in enumerate(sorted(found), 1):
        doc = found[index]
        chunk_id = _document_id(doc, fields)
        text = _text(doc.get("content"), "a document content")
        if chunk_id is None and text is None:
            raise ValueError(f"retrieval document {index} has neither id nor content")
        results.append(Retrieved(rank, chunk_id, text, _number(doc.get("score"), "a document score")))
    return results


def _first(attributes: dict[str, Any], keys: Iterable[str]) -> Any:
    return next((attributes[k] for k in keys if attributes.get(k) not in (None, "")), None)


NO_RETRIEVAL = "no retrieval"  # the reasons a trace is skipped, as the import summary counts them
ROOT_MISSING = "root not in the file"
SERVER_KINDS = {"2", "server", "span_kind_server", "spankind.server"}  # OTLP's enum, its name, the console's


def _is_server(raw: dict, attributes: dict[str, Any]) -> bool:
    """A web framework's span (FastAPI, Flask: kind SERVER, or ``http.*`` / ``url.*`` attributes without an
    OpenInference kind): what it holds is the HTTP request and response, never the user's question."""
    if "openinference.span.kind" in attributes:
        return False
    if str(raw.get("kind", "")).casefold() in SERVER_KINDS:
        return True
    return any(key.startswith(("http.", "url.")) for key in attributes)


def _is_retrieval(attributes: dict[str, Any]) -> bool:
    """A span that retrieved: OpenInference's RETRIEVER, the OTel GenAI conventions' ``retrieval`` operation, or
    any span carrying retrieved documents."""
    return (
        str(attributes.get("openinference.span.kind", "")).upper() == "RETRIEVER"
        or str(attributes.get("gen_ai.operation.name", "")).casefold() == "retrieval"
        or any(key.startswith(("retrieval.documents.", "gen_ai.retrieval.documents")) for key in attributes)
    )


def _genai_documents(attributes: dict[str, Any], fields: LogFields) -> list[Retrieved]:
    """``gen_ai.retrieval.documents`` (the OTel GenAI conventions: a JSON list of ``{id, score}``, or the list
    flattened as attributes)."""
    listed = json_decoded(attributes.get("gen_ai.retrieval.documents"))
    if not isinstance(listed, list):
        found: dict[int, dict[str, Any]] = {}
        for key, value in attributes.items():
            index, _, rest = key.removeprefix("gen_ai.retrieval.documents.").partition(".")
            if key.startswith("gen_ai.retrieval.documents.") and index.isdigit():
                found.setdefault(int(index), {})[rest] = value
        listed = [found[i] for i in sorted(found)]
    return _retrieved(listed, fields)


def _query_keys(fields: LogFields) -> tuple[str, ...]:
    """The attributes that may hold a span's query, in order: the configured one first when it was set."""
    keys = (*OTEL_QUERY, fields.query) if fields.query == DEFAULT_QUERY_FIELD else (fields.query, *OTEL_QUERY)
    return tuple(dict.fromkeys(keys))


def _span_query(attributes: dict[str, Any], fields: LogFields) -> str | None:
    """A span's query: the first query attribute holding one; an object's question field (a dict input, whether
    JSON text or nested attributes)."""
    for key in _query_keys(fields):
        value = attributes.get(key)
        if value in (None, ""):
            nested = {k: attributes[f"{key}.{k}"] for k in fields.question if f"{key}.{k}" in attributes}
            value = nested or None
        if value not in (None, ""):
            return _question(value, fields)
    return None


def _name(text: Any) -> str:
    """An annotation's or field's name as compared: ``User Feedback``, ``user-feedback`` and ``user_feedback`` alike."""
    return "".join(c for c in str(text).casefold() if c.isalnum())


FEEDBACK_NAMES = ("userfeedback", "feedback", "thumbs")  # Phoenix's built-in user_feedback, its docs' "user feedback"


def _annotated(notes: list[dict], fields: LogFields, tally: phoenix.Annotations | None) -> dict[str, Any]:
    """Feedback from a trace's Phoenix annotations (oldest first: the latest wins): the one named like the thumbs
    field or user_feedback gives the thumbs (its label, else its score 1 or 0) and its explanation the comment;
    one named like the rating field the rating; one named like the comment field (or ``note``) the comment. Others
    (an LLM's evaluations) are counted in ``tally``, not read."""
    thumbs_names = {_name(fields.thumbs), *FEEDBACK_NAMES}
    found: dict[str, Any] = {}
    for note in notes:
        name, label, score = _name(note["name"]), note["label"], note["score"]
        explanation = note["explanation"] if isinstance(note["explanation"], str) else None
        try:
            if name in thumbs_names:
                found["comment"] = explanation or found.get("comment")
                found["thumbs"] = _thumbs(label if label is not None else score)
            elif name == _name(fields.rating):
                found["rating"] = _number(score if score is not None else label, "rating")
            elif name in (_name(fields.comment), "note"):
                found["comment"] = explanation or (label if isinstance(label, str) else None) or found.get("comment")
            elif tally is not None:
                tally.not_feedback[note["name"]] += 1
        except ValueError:  # feedback that says neither up nor down, a rating that is no number: counted, not read
            if tally is not None:
                tally.unclear += 1
    return found


def _trace_record(
    trace_id: str, line: int, spans: list[dict], fields: LogFields, annotations: phoenix.Annotations | None = None
) -> LogRecord | Feedback | Skipped | Unreadable:
    """A trace's record. The query is the question its retriever was asked (the retrieval span's input), else the
    app's top span's (the root, or the first below a web server's span); the results are that retrieval's. The
    answer comes from the app's top span, feedback and session from any span, and from Phoenix's annotations on
    the trace or its spans (``annotations``), where Phoenix keeps a user's feedback.

    Two kinds of trace are no query's record, each skipped with its reason: one without a retrieval span (a chat
    turn that retrieved nothing, or one whose retrieval is in another file), and one cut off, whose root span is
    not in the file (a file cut or rotated mid-trace; a later file holding the whole trace records it). A server
    span whose parent is elsewhere is a root: a request that came in from another service. A trace without a
    retrieval that holds feedback (an app's generation trace) gives its :class:`Feedback`, with its session."""
    record = _trace_parts(trace_id, line, spans, fields)
    if annotations is not None:
        notes = annotations.take(trace_id, (s["span"] for s in spans))
        annotations.phoenix_spans |= any(s.get("phoenix") for s in spans)
        if not isinstance(record, LogRecord | Feedback):
            annotations.off_record += len(notes)
            return record
        found = _annotated(notes, fields, annotations)
        record.thumbs = record.thumbs if record.thumbs is not None else found.get("thumbs")
        record.rating = record.rating if record.rating is not None else found.get("rating")
        record.comment = record.comment or found.get("comment")
        annotations.feedback_records += record.thumbs is not None or record.rating is not None or bool(record.comment)
    if isinstance(record, Feedback) and not record.given:
        return Skipped(line, NO_RETRIEVAL, trace_id, spans)
    return record


def completed_trace(
    trace_id: str, line: int, parts: Iterable[list[dict]], fields: LogFields
) -> LogRecord | Feedback | Skipped | Unreadable:
    """The record of a trace whose spans came in ``parts`` (a trace split across files: a file rotated mid-trace
    holds the spans that ended before the rotation, the next the rest), each span once."""
    spans: dict[Any, dict] = {}
    for part in parts:
        for span in part:
            spans.setdefault(span["span"] or id(span), span)
    return _trace_record(trace_id, line, list(spans.values()), fields)


def _trace_parts(
    trace_id: str, line: int, spans: list[dict], fields: LogFields
) -> LogRecord | Feedback | Skipped | Unreadable:
    """A trace's record from its spans alone (see :func:`_trace_record`)."""
    try:
        by_id = {s["span"]: s for s in spans if s["span"]}
        tops = [s for s in spans if s["parent"] is None or s["parent"] not in by_id]
        if not any(s["parent"] is None or s["server"] for s in tops):
            return Skipped(line, ROOT_MISSING, trace_id, spans)
        ordered = sorted(spans, key=lambda s: s["start"] or "")
        retrievals = [s for s in ordered if _is_retrieval(s["attributes"])]
        if not retrievals:
            return _feedback_alone(trace_id, line, ordered, fields)
        results = [(s, _documents(s["attributes"], fields) or _genai_documents(s["attributes"], fields))
                   for s in retrievals]  # fmt: skip
        primary, documents = next(((s, d) for s, d in results if d), results[0])

        def depth(span: dict) -> int:
            seen = 0
            while span["parent"] in by_id and seen < len(spans):
                span, seen = by_id[span["parent"]], seen + 1
            return seen

        app = sorted((s for s in ordered if not s["server"]), key=depth)
        top = app[0] if app else None
        query = next(
            filter(None, (_span_query(s["attributes"], fields) for s in [primary, *retrievals, *app[:1]])), None
        )
        if query is None or not query.strip():
            return Unreadable(line, f"trace {trace_id} has no query ({', '.join(_query_keys(fields))})")
        attributes: dict[str, Any] = {}
        for span in [*(s for s in ordered if s is not top), *([top] if top else [])]:  # the top last: it wins
            attributes.update(span["attributes"])
        answer = _first(top["attributes"], (*OTEL_ANSWER, fields.answer)) if top else None
        return LogRecord(
            line=line,
            query=query,
            retrieved=documents,
            answer=text_in(answer, ("answer", "output", "result", "response", "content", "text")),
            thumbs=_thumbs(attributes.get(fields.thumbs)),
            rating=_number(attributes.get(fields.rating), "rating"),
            comment=_text(attributes.get(fields.comment), "the comment"),
            cited=_ids(attributes.get(fields.cited), "cited"),
            clicked=_ids(attributes.get(fields.clicked), "clicked"),
            timestamp=next((s["start"] for s in [*app[:1], *ordered] if s["start"]), None),
            session=_text(_first(attributes, ("session.id", fields.session)), "the session"),
            trace=trace_id,
        )
    except BROKEN as error:
        return Unreadable(line, f"trace {trace_id}: {error}")


def _feedback_alone(trace_id: str, line: int, ordered: list[dict], fields: LogFields) -> Feedback:
    """The feedback and session of a trace without a retrieval (spans in start order; the first span's start is
    the trace's time). A value that cannot be read is no feedback: the trace was no record anyway."""
    attributes: dict[str, Any] = {}
    for span in ordered:
        attributes.update(span["attributes"])
    found = Feedback(line, trace_id, timestamp=next((s["start"] for s in ordered if s["start"]), None), spans=ordered)
    for name, read in (
        ("thumbs", lambda: _thumbs(attributes.get(fields.thumbs))),
        ("rating", lambda: _number(attributes.get(fields.rating), "rating")),
        ("comment", lambda: _text(attributes.get(fields.comment), "the comment")),
        ("session", lambda: _text(_first(attributes, ("session.id", fields.session)), "the session")),
    ):
        with contextlib.suppress(*BROKEN):
            setattr(found, name, read())
    return found


def grouped_by_trace(
    path: Path,
    items_of: Callable[[Any], tuple[list[dict], list[str]]],
    what: str,
    values: Callable[[Path], Iterator[tuple[int, int, Any]]] | None = None,
    aside: Callable[[dict], None] | None = None,
) -> Iterator[tuple[str, int, list[dict]] | Unreadable]:
    """The items of a trace file (spans, observations: dicts with their ``trace`` id) grouped by trace, each trace
    as ``(trace id, line, its items)`` at the line of its last item, whatever the order and place of its items.
    ``items_of`` gives the items of one JSON value and why any could not be read (each said as "not a ``what``");
    ``values`` the file's values with their first and last lines (default: its JSON values). An item whose trace is
    None (a Phoenix annotation, which names a span) goes to ``aside`` in the first pass, before any trace is emitted.

    A first pass notes the line where each trace's last item is; the second emits a trace there. So traces come in
    line order (what a resumed import counts on). What is held: one value of the file at a time, each trace id
    with its last line (a few dozen bytes a trace), and the items of the traces still open."""
    values = values or _json_values
    last: dict[str, int] = {}
    for _, end, value in values(path):
        if not isinstance(value, Unreadable):
            for item in items_of(value)[0]:
                if item["trace"] is not None:
                    last[item["trace"]] = end
                elif aside is not None:
                    aside(item)
    open_traces: dict[str, list[dict]] = {}
    final = 0
    for start, end, value in values(path):
        final = end
        if isinstance(value, Unreadable):
            yield value
            continue
        items, problems = items_of(value)
        items = [item for item in items if item["trace"] is not None]
        for problem in problems:
            yield Unreadable(start, f"not {what} ({problem})")
        for item in items:
            open_traces.setdefault(item["trace"], []).append(item)
        for trace_id in dict.fromkeys(item["trace"] for item in items):
            if last.get(trace_id, end) <= end:  # its last item: the trace is whole
                yield trace_id, end, open_traces.pop(trace_id)
    for trace_id, items in open_traces.items():  # only when the file changed between the passes
        yield trace_id, final, items


def read_otel(path: Path, fields: LogFields) -> Iterator[LogRecord | Feedback | Skipped | Unreadable | Notice]:
    """OpenTelemetry traces, one record each, from what exporters write: OTLP JSON (the Collector's file exporter
    and the SDK's OTLP encoder: an export request a line, ids hex or base64, camelCase or protobuf's proto field
    names), one span a line (OTLP, flat, or the console exporter's one-line form), the SDK's console exporter (one
    span over many lines), Phoenix's span pages and spans dataframe (Parquet, JSON records, CSV) with the
    annotations saved beside them (:mod:`.phoenix`). Spans of a trace may come in any order and anywhere in the
    file (:func:`grouped_by_trace`). What the file says of its feedback as a whole comes last, as notices."""
    annotations = phoenix.Annotations(_span_id)
    final = 0
    for got in grouped_by_trace(path, _spans, "a span", phoenix.tabular_source(path), annotations.add):
        item = got if isinstance(got, Unreadable) else _trace_record(*got, fields, annotations)
        final = max(final, item.line)
        yield item
    for text in annotations.notices():
        yield Notice(final, text)


register_log_format(LogFormat("jsonl", read_jsonl, "one JSON object a request; fields by the config's logs.fields"))
register_log_format(LogFormat("csv", read_csv, "one row a request with a header; lists as JSON in a cell"))


def looks_like_traces(head: str) -> bool:
    """Whether the start of a file is OpenTelemetry spans: OTLP's names, the console exporter's or Phoenix's."""
    markers = ('"resourceSpans"', '"scopeSpans"', '"spanId"', '"span_id"', '"resource_spans"', "context.span_id")
    return head.startswith("PAR1") or any(marker in head for marker in markers)


register_log_format(
    LogFormat(
        "otel",
        read_otel,
        "OpenTelemetry traces (OTLP JSON, console exporter, Phoenix's exports); OpenInference attributes",
        looks_like=looks_like_traces,
        aliases=("otlp",),
    )
)


def read_log(path: str | Path, format: str, fields: LogFields | None = None) -> Iterator[LogRecord | Unreadable]:
    """Records (and unreadable lines) of a log, streamed; ``format`` is a registered log format (jsonl, csv, otel,
    or one added with :func:`~testset_builder.registry.register_log_format`)."""
    path = Path(path)
    try:
        format = known_log_format(format)
    except ValueError:
        raise InputError(f"unknown log format {format!r}; use {', '.join(LOG_FORMATS)}") from None
    if not path.is_file():
        raise InputError("no such log file", path=path)
    if fields is None:
        from ..config import LogFieldsConfig

        fields = LogFieldsConfig()
    if format not in LOG_FORMATS:  # a built-in name is known before its module registers it (langfuse's)
        load_built_in_formats()
    return LOG_FORMATS[format].read(path, fields)
