"""Traces written by the real OpenTelemetry SDK, through its own exporters, import with exact counts: the console
exporter (one span over many lines, and its one-line form), OTLP JSON as the SDK's encoder gives it (base64 ids) and
as the Collector's file exporter writes it (hex ids, the OTLP/JSON encoding), in any span order. A log that reads as
nothing is refused before anything is stored, and the same file then imports with the right format."""

from __future__ import annotations

import base64
import io
import json
import random

import pytest

from testset_builder.cli import main
from testset_builder.config import LogsConfig
from testset_builder.export.logs import LogRecord, read_log
from testset_builder.stages.logs.importer import import_logs
from testset_builder.store import logs as stored_logs
from testset_builder.store import rows

sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="the test extra installs opentelemetry-sdk")
TRACES = 12


def rag_traces(chunk_ids: list[str], passages: dict[str, str], exporter) -> dict[str, list[str]]:
    """``TRACES`` requests of a RAG app, each a trace: a root span with the question and the answer, a retriever
    span with three documents (OpenInference attributes: ids of the workspace, one a framework's node id with the
    chunk's text), and an LLM span. Returns each question's retrieved chunk ids, in rank order."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("rag-app")
    expected = {}
    for n in range(TRACES):
        question = f"question number {n} about recall"
        picked = [chunk_ids[(n + k) % len(chunk_ids)] for k in range(3)]
        with tracer.start_as_current_span("query", attributes={"input.value": question, "output.value": f"a{n}",
                                                                "session.id": f"s{n % 3}"}):  # fmt: skip
            documents = {}
            for rank, chunk_id in enumerate(picked):
                prefix = f"retrieval.documents.{rank}.document"
                documents[f"{prefix}.score"] = 1.0 - rank / 10
                if rank == 2:  # a LlamaIndex-style node id the workspace does not know, with the node's text
                    documents[f"{prefix}.id"] = f"node-{n}-{rank}"
                    documents[f"{prefix}.content"] = passages[chunk_id]
                else:
                    documents[f"{prefix}.id"] = chunk_id
            with tracer.start_as_current_span("retrieve", attributes={"openinference.span.kind": "RETRIEVER",
                                                                       **documents}):  # fmt: skip
                pass
            with tracer.start_as_current_span("llm", attributes={"openinference.span.kind": "LLM"}):
                pass
        expected[question] = picked
    provider.shutdown()
    return expected


def console_file(ws, path, one_line: bool = False, reverse: bool = False):
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter

    buffer = io.StringIO()
    formatter = (lambda span: span.to_json(indent=None) + "\n") if one_line else (lambda span: span.to_json() + "\n")
    ids, passages = workspace_chunks(ws)
    expected = rag_traces(ids, passages, ConsoleSpanExporter(out=buffer, formatter=formatter))
    text = buffer.getvalue()
    if reverse:  # roots first, as spans of one trace arrive from several services
        decoder, objects, at = json.JSONDecoder(), [], 0
        while at < len(text.strip()):
            value, end = decoder.raw_decode(text, at)
            objects.append(value)
            at = end + 1
        indent = None if one_line else 4
        text = "".join(json.dumps(o, indent=indent) + "\n" for o in reversed(objects))
    path.write_text(text, encoding="utf-8")
    return expected


class Collected:
    """An in-memory exporter keeping the SDK's spans, to encode them as OTLP."""

    def __init__(self):
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.memory = InMemorySpanExporter()

    def export(self, spans):
        return self.memory.export(spans)

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def otlp_file(ws, path, hex_ids: bool, per_line: int = 5, seed: int = 0):
    """OTLP JSON export requests, one a line, each of ``per_line`` spans in shuffled order: the SDK's OTLP encoder
    through protobuf's JSON mapping (bytes as base64), or with ids in hex as the OTLP/JSON encoding (and the
    Collector's file exporter) writes them."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    collected = Collected()
    ids, passages = workspace_chunks(ws)
    expected = rag_traces(ids, passages, collected)
    spans = list(collected.memory.get_finished_spans())
    random.Random(seed).shuffle(spans)
    lines = []
    for start in range(0, len(spans), per_line):
        request = MessageToDict(encode_spans(spans[start : start + per_line]))
        if hex_ids:
            for resource in request["resourceSpans"]:
                for scope in resource["scopeSpans"]:
                    for span in scope["spans"]:
                        for key in ("traceId", "spanId", "parentSpanId"):
                            if key in span:
                                span[key] = base64.b64decode(span[key]).hex()
        lines.append(json.dumps(request))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return expected


def workspace_chunks(ws):
    ids = [chunk_id for chunk_id, _, _ in rows.live_chunk_rows(ws.db)]
    return ids, dict(zip(*rows.live_chunk_passages(ws.db)))


def assert_imported(ws, path, expected):
    records = [r for r in read_log(path, "otel") if isinstance(r, LogRecord)]
    assert len(records) == TRACES and {r.query for r in records} == set(expected)
    summary = import_logs(ws, path, LogsConfig(format="otel"), batch_size=4)
    assert (summary.records, summary.unreadable, summary.records_with_retrieval) == (TRACES, 0, TRACES)
    assert summary.by_id == 2 * TRACES and summary.unknown_ids == summary.unknown_ids_by_text == TRACES
    texts = {q["query_id"]: rows.get_query(ws.db, q["query_id"]).text for q in stored_logs.logged_queries(ws.db)}
    run = stored_logs.production_run(ws.db)
    assert {texts[q]: [c for _, c, _ in ranked] for q, ranked in run.items()} == expected
    assert all(q["frequency"] == 1 for q in stored_logs.logged_queries(ws.db))  # no trace split in two


@pytest.mark.parametrize("one_line", [False, True], ids=["multi-line", "one-line"])
@pytest.mark.parametrize("reverse", [False, True], ids=["children-first", "roots-first"])
def test_the_sdk_console_exporter_imports_one_record_a_trace(docs_workspace, tmp_path, one_line, reverse):
    path = tmp_path / "console.log"
    expected = console_file(docs_workspace, path, one_line, reverse)
    assert_imported(docs_workspace, path, expected)


@pytest.mark.parametrize("hex_ids", [False, True], ids=["base64-ids", "hex-ids"])
def test_otlp_json_export_requests_import_one_record_a_trace_whatever_the_span_order(docs_workspace, tmp_path, hex_ids):
    path = tmp_path / "traces.jsonl"
    expected = otlp_file(docs_workspace, path, hex_ids)
    assert_imported(docs_workspace, path, expected)
    records = [r for r in read_log(path, "otel") if isinstance(r, LogRecord)]
    assert [r.line for r in records] == sorted(r.line for r in records)  # in line order, as a resume counts on
    assert all(r.timestamp and r.timestamp.endswith("Z") and r.session for r in records)


def test_a_log_that_reads_as_nothing_is_refused_and_then_imports_with_the_right_format(
    docs_workspace, tmp_path, capsys
):
    path = tmp_path / "traces.jsonl"
    expected = otlp_file(docs_workspace, path, hex_ids=True)
    root = str(docs_workspace.root)
    assert main(["import-logs", str(path), "--workspace", root, "--format", "jsonl", "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert "0 of the first" in error and "Nothing was imported" in error
    assert "it looks like OpenTelemetry traces" in error and "--format otel" in error  # its format, named
    assert stored_logs.logged_queries(docs_workspace.db) == []
    assert main(["import-logs", str(path), "--workspace", root, "--format", "otlp", "--json"]) == 0  # otel's alias
    summary = json.loads(capsys.readouterr().out)
    assert summary["records"] == TRACES and not summary["already_imported"]
    assert len(stored_logs.logged_queries(docs_workspace.db)) == len(expected)
    # imported now: again adds nothing, and --force is refused, since it would count every record twice
    assert main(["import-logs", str(path), "--workspace", root, "--format", "otel", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["already_imported"]
    assert main(["import-logs", str(path), "--workspace", root, "--format", "otel", "--force", "--json"]) == 1
    assert "twice" in json.loads(capsys.readouterr().out)["error"]


def test_force_imports_a_file_an_older_version_recorded_as_imported_with_no_record(docs_workspace, tmp_path, capsys):
    from testset_builder._hashing import file_sha256

    path = tmp_path / "traces.jsonl"
    otlp_file(docs_workspace, path, hex_ids=False)
    import_id = file_sha256(path)
    with docs_workspace.transaction() as tx:  # what an import that read nothing left before the check existed
        stored_logs.begin_import(tx, import_id, path.name, "jsonl")
        stored_logs.finish_import(tx, import_id, {"records": 0, "unreadable": 3})
    root = str(docs_workspace.root)
    assert main(["import-logs", str(path), "--workspace", root, "--format", "otel", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["already_imported"]
    assert main(["import-logs", str(path), "--workspace", root, "--format", "otel", "--force", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["records"] == TRACES


def phoenix_file(ws, path, pages: int = 3, nested: bool = False):
    """Pages of Phoenix's REST span list (``GET /v1/projects/{project}/spans``: ``{"data": [span, ...],
    "next_cursor"}``), each span as its OpenAPI schema documents it (``context: {trace_id, span_id}``, ``parent_id``,
    ``span_kind``, ``start_time``, ``attributes``), pretty-printed one page after another; ``nested``: attributes as
    nested objects (``{"input": {"value": ...}}``), as OpenInference's own JSON writes them."""
    collected = Collected()
    ids, passages = workspace_chunks(ws)
    expected = rag_traces(ids, passages, collected)
    spans = list(collected.memory.get_finished_spans())[::-1]  # newest first, as the API lists them

    def nest(flat: dict) -> dict:
        out: dict = {}
        for key, value in flat.items():
            node = out
            *parents, last = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            node[last] = value

        def listed(node):  # {"0": ..., "1": ...} as the list OpenInference writes (retrieval.documents)
            if not isinstance(node, dict):
                return node
            node = {key: listed(value) for key, value in node.items()}
            return [node[k] for k in sorted(node, key=int)] if node and all(k.isdigit() for k in node) else node

        return listed(out)

    documents = []
    for span in spans:
        attributes = dict(span.attributes)
        documents.append({
            "id": f"U3Bhbjo{span.context.span_id}", "name": span.name,
            "context": {"trace_id": f"{span.context.trace_id:032x}", "span_id": f"{span.context.span_id:016x}"},
            "span_kind": attributes.get("openinference.span.kind", "CHAIN"),
            "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
            "start_time": "2026-12-05T01:00:00+00:00", "end_time": "2026-12-05T01:00:01+00:00",
            "status_code": "OK", "status_message": "", "events": [],
            "attributes": nest(attributes) if nested else attributes,
        })  # fmt: skip
    size = -(-len(documents) // pages)
    text = "".join(
        json.dumps({"data": documents[i : i + size], "next_cursor": None}, indent=2) + "\n"
        for i in range(0, len(documents), size)
    )
    path.write_text(text, encoding="utf-8")
    return expected


@pytest.mark.parametrize("nested", [False, True], ids=["flat-attributes", "nested-attributes"])
def test_phoenix_rest_span_pages_import_one_record_a_trace(docs_workspace, tmp_path, nested):
    path = tmp_path / "phoenix.json"
    expected = phoenix_file(docs_workspace, path, nested=nested)
    assert_imported(docs_workspace, path, expected)
