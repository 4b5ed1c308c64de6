"""What Phoenix writes imports with exact counts of records, queries, feedback and sessions: its REST span pages with
the span and trace annotations that hold its users' feedback, protobuf's JSON with proto field names (its
``/spans/otlpv1`` route), and its spans dataframe saved as Parquet, JSON records or CSV. A Phoenix file without its
annotations says that its feedback was not found, and where it is."""

from __future__ import annotations

import base64
import json

import pytest
from test_logs_app_traces import ASKED, QUESTIONS, THUMBS, app_spans, assert_whole_log, otlp_lines, stored

from testset_builder.config import LogsConfig
from testset_builder.stages.logs.importer import import_logs

pytest.importorskip("opentelemetry.sdk.trace", reason="the test extra installs opentelemetry-sdk")
LABELS = {"up": "thumbs-up", "down": "thumbs-down"}  # as Phoenix's feedback guide writes them


def iso(nanoseconds: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(nanoseconds / 1e9, UTC).isoformat()


def phoenix_span(span) -> dict:
    """A span as Phoenix's REST API lists it (``GET /v1/projects/{project}/spans``): OpenInference's kind moved out
    of the attributes into ``span_kind``, ids in hex; the user's thumbs are not in it (Phoenix keeps them apart)."""
    attributes = {k: v for k, v in span.attributes.items() if k != "thumbs"}
    kind = attributes.pop("openinference.span.kind", "UNKNOWN")
    return {
        "id": f"U3Bhbjo{span.context.span_id % 1000}", "name": span.name,
        "context": {"trace_id": f"{span.context.trace_id:032x}", "span_id": f"{span.context.span_id:016x}"},
        "span_kind": kind, "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "start_time": iso(span.start_time), "end_time": iso(span.end_time), "status_code": "OK",
        "status_message": "", "events": [], "attributes": attributes,
    }  # fmt: skip


def feedback_annotations(spans) -> list[dict]:
    """The users' thumbs as Phoenix keeps them (its OpenAPI schema's ``SpanAnnotation`` and ``TraceAnnotation``):
    on the chain span of most requests, on the LLM span of one, on the trace of another (the session toolbar's
    ``user_feedback``), one with Phoenix's built-in labels; and an LLM's evaluation, which is no user's feedback."""
    requests = [s for s in spans if s.attributes.get("openinference.span.kind") == "CHAIN"]
    requests.sort(key=lambda s: s.start_time)
    llms = {s.context.trace_id: s for s in spans if s.attributes.get("openinference.span.kind") == "LLM"}
    found = []
    for n, (i, thumbs) in enumerate(sorted(THUMBS.items())):
        chain = requests[i]
        note = {"id": f"note-{n}", "created_at": "2026-12-05T02:00:00+00:00", "updated_at": "2026-12-05T02:00:00+00:00",
                "source": "API", "user_id": None, "annotator_kind": "HUMAN", "metadata": {}, "identifier": "",
                "name": "user feedback", "result": {"label": LABELS[thumbs], "score": 1.0 if thumbs == "up" else 0.0,
                                                    "explanation": None}}  # fmt: skip
        if n == 1:  # on the LLM span, where the app's handler took the current span's id
            note["span_id"] = f"{llms[chain.context.trace_id].context.span_id:016x}"
        elif n == 2:  # on the trace, from Phoenix's session toolbar
            note |= {"trace_id": f"{chain.context.trace_id:032x}", "name": "user_feedback",
                     "result": {"label": "positive" if thumbs == "up" else "negative", "score": None}}  # fmt: skip
        else:
            note["span_id"] = f"{chain.context.span_id:016x}"
        found.append(note)
    evaluation = {**found[0], "id": "eval", "name": "relevance", "annotator_kind": "LLM",
                  "result": {"label": "relevant", "score": 0.8, "explanation": "on topic"}}  # fmt: skip
    return [*found, evaluation]


def rest_file(spans, path, annotations: bool) -> None:
    """Pages of spans, then pages of their annotations (span annotations, trace annotations), one after another."""
    pages = [{"data": [phoenix_span(s) for s in spans[::-1]], "next_cursor": None}]
    if annotations:
        notes = feedback_annotations(spans)
        pages.append({"data": [n for n in notes if "span_id" in n], "next_cursor": None})
        pages.append({"data": [n for n in notes if "trace_id" in n], "next_cursor": None})
    path.write_text("".join(json.dumps(page, indent=2) + "\n" for page in pages), encoding="utf-8")


@pytest.mark.parametrize("shape", ["dict", "server"])
def test_phoenix_span_pages_with_their_annotations_keep_every_users_feedback(docs_workspace, tmp_path, shape):
    spans, latest = app_spans(docs_workspace, shape)
    path = tmp_path / "phoenix.json"
    rest_file(spans, path, annotations=True)
    summary = import_logs(docs_workspace, path, LogsConfig(format="otel"))
    assert (summary.records, summary.unreadable, summary.feedback) == (len(ASKED), 0, len(THUMBS))
    assert summary.new_queries == len(QUESTIONS)
    assert_whole_log(docs_workspace, latest)  # up and down counted as the users gave them
    assert len(summary.notes) == 1 and "1 annotations not read as feedback: 'relevance' (1)" in summary.notes[0]


def test_phoenix_spans_without_their_annotations_say_the_feedback_was_not_found(docs_workspace, tmp_path, capsys):
    from testset_builder.cli import main

    spans, _ = app_spans(docs_workspace, "dict")
    path = tmp_path / "phoenix.json"
    rest_file(spans, path, annotations=False)
    root = str(docs_workspace.root)
    assert main(["import-logs", str(path), "--workspace", root, "--format", "otel", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["records"], summary["feedback"]) == (len(ASKED), 0)
    assert any("no feedback in the file" in note and "span_annotations" in note for note in summary["notes"])


def test_otlp_json_with_proto_field_names_reads_as_the_camel_case_encoding(docs_workspace, tmp_path):
    """``MessageToJson(preserving_proto_field_name=True)`` (``resource_spans``, ``string_value``, base64 ids), one
    export request a line; then Phoenix's ``/spans/otlpv1`` pages of such spans: the same log as OTLP/JSON."""
    from google.protobuf.json_format import MessageToDict, MessageToJson
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    spans, latest = app_spans(docs_workspace, "dict")
    proto = tmp_path / "proto.jsonl"
    lines = [
        MessageToJson(encode_spans(spans[i : i + 4]), preserving_proto_field_name=True, indent=None) + "\n"
        for i in range(0, len(spans), 4)
    ]
    assert '"resource_spans"' in lines[0] and '"string_value"' in lines[0]
    proto.write_text("".join(lines), encoding="utf-8")
    summary = import_logs(docs_workspace, proto, LogsConfig(format="otel"))
    assert (summary.records, summary.unreadable, summary.feedback) == (len(ASKED), 0, len(THUMBS))
    assert_whole_log(docs_workspace, latest)

    request = MessageToDict(encode_spans(spans), preserving_proto_field_name=True)
    otlpv1 = [span for resource in request["resource_spans"] for scope in resource["scope_spans"]
              for span in scope["spans"]]  # fmt: skip
    assert "start_time_unix_nano" in otlpv1[0] and base64.b64decode(otlpv1[0]["trace_id"])
    page = tmp_path / "otlpv1.json"
    page.write_text(json.dumps({"data": otlpv1[::-1], "next_cursor": None}), encoding="utf-8")
    again = import_logs(docs_workspace, page, LogsConfig(format="otel"))
    assert (again.records, again.skipped) == (0, {"seen before": len(ASKED)})  # the same requests, known again


def spans_dataframe(spans):
    """The dataframe Phoenix's client gives (``get_spans_dataframe``): a row a span, its documented columns, the
    attributes flattened under ``attributes.`` (a retriever's documents one list of objects), indexed by span id."""
    pd = pytest.importorskip("pandas")
    rows = []
    for span in spans:
        attributes = {k: v for k, v in span.attributes.items() if k != "thumbs"}
        kind = attributes.pop("openinference.span.kind", "UNKNOWN")
        documents: dict[int, dict] = {}
        for key in [k for k in attributes if k.startswith("retrieval.documents.")]:
            index, _, rest = key.removeprefix("retrieval.documents.").partition(".")
            documents.setdefault(int(index), {})[rest] = attributes.pop(key)
        if documents:
            attributes["retrieval.documents"] = [documents[i] for i in sorted(documents)]
        rows.append({
            "name": span.name, "span_kind": kind,
            "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
            "start_time": pd.Timestamp(span.start_time, unit="ns", tz="UTC"),
            "end_time": pd.Timestamp(span.end_time, unit="ns", tz="UTC"),
            "status_code": "OK", "status_message": "", "events": [],
            "context.span_id": f"{span.context.span_id:016x}", "context.trace_id": f"{span.context.trace_id:032x}",
            **{f"attributes.{key}": value for key, value in attributes.items()},
        })  # fmt: skip
    return pd.DataFrame(rows).set_index("context.span_id", drop=False)


def annotations_dataframe(spans):
    """The client's ``get_span_annotations_dataframe``: ``result`` flattened, ``name`` as ``annotation_name``, the
    span id the index (trace annotations have their own route, left out here)."""
    pd = pytest.importorskip("pandas")
    notes = [n for n in feedback_annotations(spans) if "span_id" in n]
    frame = pd.json_normalize(notes).rename(columns={"name": "annotation_name"})
    return frame.set_index("span_id")


@pytest.mark.parametrize("saved", ["parquet", "json", "csv"])
def test_the_phoenix_spans_dataframe_imports_as_saved_from_a_notebook(docs_workspace, tmp_path, saved):
    pd = pytest.importorskip("pandas")
    spans, latest = app_spans(docs_workspace, "dict")
    frame, notes = spans_dataframe(spans), annotations_dataframe(spans).reset_index()
    path = tmp_path / f"spans.{saved}"
    if saved == "parquet":
        pd.concat([frame.reset_index(drop=True), notes], ignore_index=True).to_parquet(path)
    elif saved == "json":
        frame.to_json(path, orient="records", lines=True, date_format="epoch")  # the default: milliseconds
        with path.open("a", encoding="utf-8") as handle:
            handle.write(notes.to_json(orient="records", lines=True))
    else:
        pd.concat([frame.reset_index(drop=True), notes], ignore_index=True).to_csv(path, index=False)
    summary = import_logs(docs_workspace, path, LogsConfig(format="otel"))
    trace_notes = 1  # the one trace annotation is not in the span annotations' dataframe
    assert (summary.records, summary.unreadable) == (len(ASKED), 0)
    assert summary.feedback == len(THUMBS) - trace_notes
    held = stored(docs_workspace)
    assert {q: row["frequency"] for q, row in held["queries"].items()} == {
        QUESTIONS[a]: ASKED.count(a) for a in set(ASKED)
    }
    assert held["run"] == latest
    assert len({row["session"] for row in held["queries"].values()}) == 3


def test_a_phoenix_dataframe_under_the_default_format_is_named(docs_workspace, tmp_path, capsys):
    from testset_builder.cli import main

    spans, _ = app_spans(docs_workspace, "dict")
    path = tmp_path / "spans.jsonl"
    spans_dataframe(spans).to_json(path, orient="records", lines=True, date_format="iso")
    assert main(["import-logs", str(path), "--workspace", str(docs_workspace.root), "--json"]) == 1
    assert "--format otel" in json.loads(capsys.readouterr().out)["error"]


def test_traces_that_are_not_phoenix_s_say_nothing_of_annotations(docs_workspace, tmp_path):
    """Feedback in the spans themselves, as an OpenTelemetry app writes it: kept, and no note about annotations."""
    spans, latest = app_spans(docs_workspace, "server")
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(otlp_lines(spans)), encoding="utf-8")
    summary = import_logs(docs_workspace, path, LogsConfig(format="otel"))
    assert (summary.records, summary.feedback, summary.notes) == (len(ASKED), len(THUMBS), [])
    assert_whole_log(docs_workspace, latest)
