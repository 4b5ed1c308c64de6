"""What Phoenix writes besides its span pages, as :mod:`.logs` reads it under ``--format otel``.

* **Feedback.** Phoenix keeps a user's thumbs as an *annotation* on a span or a trace, never in the span. Its REST
  API lists annotations apart from spans: ``GET /v1/projects/{project}/span_annotations?span_ids=...`` (and
  ``.../trace_annotations?trace_ids=...``) answers ``{"data": [{"span_id", "name", "annotator_kind", "result":
  {"label", "score", "explanation"}, "created_at", "updated_at", ...}], "next_cursor"}``. The Python client's
  ``get_span_annotations_dataframe`` flattens them (``annotation_name``, ``result.label``, ``result.score``, the
  span id as the index). Annotations saved in the same file as the spans are read as the request's feedback.
* **The spans dataframe** (the client's ``get_spans_dataframe``, the usual notebook save): one row a span, with
  ``context.span_id``, ``context.trace_id``, ``parent_id``, ``name``, ``span_kind`` (OpenInference's kind),
  ``start_time`` and each attribute as an ``attributes.*`` column (``attributes.retrieval.documents`` a list of
  ``{"document.id", "document.content", "document.score"}``), saved with ``to_parquet``, ``to_json(orient=
  "records", lines=True)`` or ``to_csv``.

Nothing here imports :mod:`.logs`: these functions only give Phoenix's shapes the form the OpenTelemetry reader
takes (a span as its REST API writes one; an annotation as a plain dict).
"""

from __future__ import annotations

import ast
import csv
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

ANNOTATION_KEYS = ("annotator_kind", "result", "annotation_name", "result.label", "result.score")
OPENINFERENCE_KINDS = {
    "CHAIN", "RETRIEVER", "LLM", "EMBEDDING", "TOOL", "AGENT", "RERANKER", "GUARDRAIL", "EVALUATOR", "PROMPT",
}  # fmt: skip
ROW_SPAN_ID, ROW_TRACE_ID = "context.span_id", "context.trace_id"  # the dataframe's columns (its index too)


def missing(value: Any) -> bool:
    """None, empty text, or a float NaN (what a dataframe holds where a row has no value)."""
    return value is None or value == "" or (isinstance(value, float) and math.isnan(value))


def annotation_of(raw: dict) -> dict | None:
    """A span or trace annotation's parts (``span``, ``trace``: ids as written; ``name``, ``label``, ``score``,
    ``explanation``, ``at``: when it was last set), from the REST API's objects or the client's flattened rows; None
    when ``raw`` is not an annotation."""
    if not any(not missing(raw.get(key)) for key in ANNOTATION_KEYS):
        return None
    result = raw.get("result") if isinstance(raw.get("result"), dict) else {}

    def part(key: str) -> Any:
        value = result.get(key)
        value = raw.get(f"result.{key}") if missing(value) else value
        return None if missing(value) else value

    def field(*keys: str) -> Any:
        return next((raw[key] for key in keys if not missing(raw.get(key))), None)

    return {
        "span": field("span_id"),
        "trace": field("trace_id"),
        "name": str(field("name", "annotation_name") or ""),
        "label": part("label"),
        "score": part("score"),
        "explanation": part("explanation"),
        "at": str(field("updated_at", "created_at") or ""),
    }


def span_of_row(raw: dict) -> dict | None:
    """A row of the spans dataframe as the REST API writes a span (``context``, ``attributes``); None when ``raw``
    is not such a row."""
    if ROW_SPAN_ID not in raw and ROW_TRACE_ID not in raw:
        return None
    attributes = {
        key.removeprefix("attributes."): value
        for key, value in raw.items()
        if key.startswith("attributes.") and not missing(value)
    }
    return {
        "name": raw.get("name"),
        "context": {"trace_id": raw.get(ROW_TRACE_ID), "span_id": raw.get(ROW_SPAN_ID)},
        "parent_id": None if missing(raw.get("parent_id")) else raw["parent_id"],
        "span_kind": raw.get("span_kind"),
        "start_time": None if missing(raw.get("start_time")) else raw["start_time"],
        "attributes": attributes,
    }


def kind_attribute(raw: dict, attributes: dict[str, Any]) -> str | None:
    """The OpenInference span kind Phoenix moved out of a span's attributes into its ``span_kind``, when the
    attributes lack it."""
    kind = str(raw.get("span_kind") or "").upper()
    if "openinference.span.kind" in attributes or kind not in OPENINFERENCE_KINDS:
        return None
    return kind


def tabular_source(path: Path) -> Callable[[Path], Iterator[tuple[int, int, Any]]] | None:
    """How to read a dataframe saved as Parquet or CSV (row by row, each row as ``(row, row, dict)`` like a JSON
    value of a trace file), or None for a file of JSON values."""
    with path.open("rb") as handle:
        head = handle.read(4096)
    if head.startswith(b"PAR1"):
        return parquet_rows
    first = head.split(b"\n", 1)[0].decode("utf-8", "replace").lstrip("\ufeff").strip()
    if ROW_SPAN_ID in first and not first.startswith(("{", "[")):
        return csv_rows
    return None


def parquet_rows(path: Path) -> Iterator[tuple[int, int, Any]]:
    """Each row of a Parquet file as a dict, numbered from 1; a batch at a time."""
    import pyarrow.parquet as pq

    from ..errors import InputError

    try:
        handle = pq.ParquetFile(path)
    except (OSError, ValueError) as error:
        raise InputError(f"cannot read the Parquet file ({error})", path=path) from None
    number = 0
    for batch in handle.iter_batches(batch_size=1024):
        for row in batch.to_pylist():
            number += 1
            yield number, number, row


def csv_rows(path: Path) -> Iterator[tuple[int, int, Any]]:
    """Each row of a dataframe saved with ``to_csv`` as a dict, at its line. pandas writes a cell holding a list or
    a dict as its Python form (``[{'document.id': ...}]``), read back here; text that is JSON stays text, as it
    was in the dataframe."""
    from ..errors import InputError

    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        try:
            for row in reader:
                yield reader.line_num, reader.line_num, {key: _cell(value) for key, value in row.items() if key}
        except (csv.Error, UnicodeDecodeError) as error:
            raise InputError(f"the CSV cannot be read past line {reader.line_num} ({error})", path=path) from None


def _cell(value: Any) -> Any:
    if not isinstance(value, str) or value[:1] not in ("[", "{"):
        return value
    try:
        json.loads(value)
        return value
    except ValueError:
        pass
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value


class Annotations:
    """A trace file's annotations, read in its first pass (few: a user's feedback is one a request at most), by the
    span or trace they name (``ids`` gives an id as the spans' ids are kept), and what became of them."""

    def __init__(self, ids: Callable[[Any], str | None]) -> None:
        self._ids = ids
        self.by_span: dict[str, list[dict]] = {}
        self.by_trace: dict[str, list[dict]] = {}
        self.count = 0
        self.nameless = 0  # naming no span and no trace
        self.off_record = 0  # on a request that gave no record (no retrieval, cut off, unreadable)
        self.not_feedback: Counter = Counter()  # annotations of other names (an LLM's evals), by name
        self.unclear = 0  # feedback neither up nor down
        self.phoenix_spans = False  # spans as Phoenix writes them were read
        self.feedback_records = 0  # records with feedback, from annotations or attributes

    def add(self, item: dict) -> None:
        note = item["annotation"]
        self.count += 1
        span, trace = self._ids(note["span"]), self._ids(note["trace"])
        if span is not None:
            self.by_span.setdefault(span, []).append(note)
        elif trace is not None:
            self.by_trace.setdefault(trace, []).append(note)
        else:
            self.nameless += 1

    def take(self, trace_id: str, span_ids: Iterable[str | None]) -> list[dict]:
        """The annotations on a trace and on its spans, oldest first; taken, so what is left names nothing read."""
        found = self.by_trace.pop(trace_id, [])
        for span_id in span_ids:
            found.extend(self.by_span.pop(span_id, []) if span_id is not None else [])
        return sorted(found, key=lambda note: note["at"])

    def notices(self) -> list[str]:
        """What the summary says of the file's feedback: none found in Phoenix's spans, annotations not read."""
        said = []
        if self.phoenix_spans and self.count == 0 and self.feedback_records == 0:
            said.append(NO_FEEDBACK)
        if self.not_feedback:
            names = ", ".join(f"{name!r} ({n})" for name, n in self.not_feedback.most_common(5))
            said.append(
                f"{self.not_feedback.total()} annotations not read as feedback: {names}. The thumbs are the "
                "annotation named user_feedback (or like logs.fields.thumbs), a rating one like logs.fields.rating"
            )
        if self.unclear:
            said.append(
                f"{self.unclear} feedback annotations not read: thumbs neither up nor down (a label, else a score of "
                "1 or 0), or a rating that is no number"
            )
        left = sum(map(len, self.by_span.values())) + sum(map(len, self.by_trace.values())) + self.nameless
        if left:
            said.append(f"{left} annotations name a span or trace not in the file: save them with their spans")
        if self.off_record:
            said.append(f"{self.off_record} annotations are on requests that gave no record (see skipped)")
        return said


NO_FEEDBACK = (
    "no feedback in the file: Phoenix keeps a user's thumbs as span or trace annotations, which its span export "
    "leaves out. Save the annotations (GET /v1/projects/{project}/span_annotations, or the client's "
    "get_span_annotations) in the same file as the spans: see guides/logs.md, 'Phoenix'"
)
