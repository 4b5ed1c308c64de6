"""Traces as RAG apps write them, made with the real OpenTelemetry SDK and OpenInference's attributes, import with
exact counts of records, queries, feedback and sessions; every query is the user's question: a chain called with a
dict, a web server's span as the root, retrieval and generation in separate traces. Each request counts once: a
log re-imported after it grew, or export windows that overlap, add only the requests no import recorded."""

from __future__ import annotations

import json

import pytest
from test_logs_otel import Collected, workspace_chunks

from testset_builder.config import LogsConfig
from testset_builder.stages.logs.importer import import_logs, trace_key
from testset_builder.store import logs as stored_logs
from testset_builder.store import rows

pytest.importorskip("opentelemetry.sdk.trace", reason="the test extra installs opentelemetry-sdk")

TOPICS = ["recall", "ndcg", "bm25", "review", "release", "chunking", "pooling", "dedup"]
QUESTIONS = [f"how does {topic} work here?" for topic in TOPICS]
ASKED = [*range(len(QUESTIONS)), 0, 1]  # request i asks QUESTIONS[ASKED[i]]: two questions asked twice
THUMBS = {0: "up", 3: "down", 5: "up", 8: "down"}  # request -> its user's feedback
SESSIONS = 3  # request i is in session i % 3


def app_spans(ws, shape: str) -> tuple[list, dict[str, list[str]]]:
    """The spans of ``len(ASKED)`` requests to a RAG app traced with OpenInference, and each question's latest
    retrieval (chunk ids, in rank order). The vector store holds its first result twice (two ids, one text).

    ``dict``: a chain called with ``{"question", "chat_history"}`` (its input as JSON), a retriever asked the
    question, an LLM given the whole prompt. ``server``: the same under a web server's span (FastAPI's: kind
    SERVER, ``http.*``) whose input is the reply. ``split``: retrieval and generation in two traces.
    ``split-feedback``: the same, the user's feedback on the generation trace."""
    from opentelemetry import context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import SpanKind

    ids, passages = workspace_chunks(ws)
    collected = Collected()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(collected))
    tracer = provider.get_tracer("rag-app")
    latest = {}
    for i, asked in enumerate(ASKED):
        question, answer = QUESTIONS[asked], f"answer {i}"
        picked = [ids[(i + k) % len(ids)] for k in range(3)]
        documents = {}
        for rank, chunk_id in enumerate([picked[0], *picked]):  # the first document twice, under two ids
            documents[f"retrieval.documents.{rank}.document.id"] = f"uuid-{i}-{rank}"
            documents[f"retrieval.documents.{rank}.document.content"] = passages[chunk_id]
            documents[f"retrieval.documents.{rank}.document.score"] = 0.9 - rank / 10
        prompt = json.dumps({"messages": [{"role": "user", "content": f"Context: ...\nQuestion: {question}"}]})
        request = {"session.id": f"session-{i % SESSIONS}", **({"thumbs": THUMBS[i]} if i in THUMBS else {})}
        chain = {
            "openinference.span.kind": "CHAIN", "input.mime_type": "application/json",
            "input.value": json.dumps({"question": question, "chat_history": []}), "output.value": answer,
        }  # fmt: skip
        retriever = {"openinference.span.kind": "RETRIEVER", "input.value": question, **documents}
        llm = {"openinference.span.kind": "LLM", "input.value": prompt, "output.value": answer}
        if shape == "dict":
            with tracer.start_as_current_span("RetrievalQA", attributes={**chain, **request}):
                tracer.start_span("retriever", attributes=retriever).end()
                tracer.start_span("ChatOpenAI", attributes=llm).end()
        elif shape == "server":
            server = {"http.method": "POST", "http.route": "/chat", "http.status_code": 200,
                      "input.value": json.dumps({"reply": answer}), **request}  # fmt: skip
            with tracer.start_as_current_span("POST /chat", kind=SpanKind.SERVER, attributes=server):
                tracer.start_span("POST /chat http receive", attributes={"http.method": "POST"}).end()
                with tracer.start_as_current_span("RetrievalQA", attributes=chain):
                    tracer.start_span("retriever", attributes=retriever).end()
                    tracer.start_span("ChatOpenAI", attributes=llm).end()
        elif shape == "split":  # the app retrieves in one trace, then generates in a new one
            with tracer.start_as_current_span("retrieve", attributes={**chain, **request}):
                tracer.start_span("retriever", attributes=retriever).end()
            with tracer.start_as_current_span("generate", context=context.Context(), attributes=llm):
                pass
        else:  # split, the feedback on the generation trace (where the app's reply was shown), both in the session
            session = {"session.id": request["session.id"]}
            with tracer.start_as_current_span("retrieve", attributes={**chain, **session}):
                tracer.start_span("retriever", attributes=retriever).end()
            with tracer.start_as_current_span("generate", context=context.Context(), attributes={**llm, **request}):
                pass
        latest[question] = picked
    provider.shutdown()
    return list(collected.memory.get_finished_spans()), latest


def otlp_lines(spans, per_line: int = 4) -> list[str]:
    """OTLP JSON export requests, one a line, as the Collector's file exporter writes them (ids in hex), the spans in
    the order they ended."""
    import base64

    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    lines = []
    for start in range(0, len(spans), per_line):
        request = MessageToDict(encode_spans(spans[start : start + per_line]))
        for resource in request["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in span:
                            span[key] = base64.b64decode(span[key]).hex()
        lines.append(json.dumps(request) + "\n")
    return lines


def stored(ws) -> dict:
    """What the workspace holds of the log: question -> its sums; the production run by question."""
    texts = {q["query_id"]: rows.get_query(ws.db, q["query_id"]).text for q in stored_logs.logged_queries(ws.db)}
    return {
        "queries": {texts[q["query_id"]]: q for q in stored_logs.logged_queries(ws.db)},
        "run": {texts[q]: [c for _, c, _ in ranked] for q, ranked in stored_logs.production_run(ws.db).items()},
    }


def expected_sums() -> dict:
    """The log's figures, from the design above."""
    frequency = {QUESTIONS[a]: ASKED.count(a) for a in set(ASKED)}
    first = {QUESTIONS[a]: ASKED.index(a) for a in set(ASKED)}  # a question's session is its earliest request's
    return {
        "frequency": frequency,
        "up": sum(v == "up" for v in THUMBS.values()),
        "down": sum(v == "down" for v in THUMBS.values()),
        "sessions": len({i % SESSIONS for i in first.values()}),
    }


def assert_whole_log(ws, latest):
    held, want = stored(ws), expected_sums()
    assert {q: row["frequency"] for q, row in held["queries"].items()} == want["frequency"]  # the users' questions
    assert sum(row["thumbs_up"] for row in held["queries"].values()) == want["up"]
    assert sum(row["thumbs_down"] for row in held["queries"].values()) == want["down"]
    assert len({row["session"] for row in held["queries"].values()}) == want["sessions"]
    assert held["run"] == latest  # the repeated first document kept once, at its rank


@pytest.mark.parametrize("shape", ["dict", "server", "split"])
def test_each_request_is_the_users_question_whatever_the_apps_shape(docs_workspace, tmp_path, shape):
    spans, latest = app_spans(docs_workspace, shape)
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(otlp_lines(spans)), encoding="utf-8")
    summary = import_logs(docs_workspace, path, LogsConfig(format="otel"))
    requests = len(ASKED)
    assert (summary.records, summary.unreadable, summary.feedback) == (requests, 0, len(THUMBS))
    assert (summary.results, summary.results_folded) == (4 * requests, requests)
    assert summary.skipped == ({"no retrieval": requests} if shape == "split" else {})  # the generation traces
    assert summary.new_queries == len(QUESTIONS)
    assert_whole_log(docs_workspace, latest)
    assert {r["last_answer"] for r in stored(docs_workspace)["queries"].values()} == {
        f"answer {max(i for i, a in enumerate(ASKED) if a == q)}" for q in set(ASKED)
    }


def trace_parts(spans, lines: list[str]) -> dict[int, dict[str, bool]]:
    """For each trace, whether ``lines`` (a part of the log) hold its root span and its retriever span."""
    text = "".join(lines)
    parts: dict[int, dict[str, bool]] = {}
    for span in spans:
        part = parts.setdefault(span.context.trace_id, {"root": False, "retriever": False, "any": False})
        inside = f'"spanId": "{span.context.span_id:016x}"' in text
        part["any"] |= inside
        if span.parent is None:
            part["root"] |= inside
        if span.attributes.get("openinference.span.kind") == "RETRIEVER":
            part["retriever"] |= inside
    return parts


def test_a_log_imported_cut_short_then_whole_counts_each_request_once(docs_workspace, tmp_path):
    """The file exported part-way (cut mid-trace), then again when complete: the whole file adds only the requests
    the first import did not record; a request whose root or retrieval was cut off was skipped, not recorded."""
    spans, latest = app_spans(docs_workspace, "dict")
    lines = otlp_lines(spans, per_line=4)  # a trace has three spans: a cut between lines splits some traces
    head = lines[: len(lines) // 2]
    parts = trace_parts(spans, head)
    whole = sum(p["root"] and p["retriever"] for p in parts.values())
    cut_off = sum(p["any"] and not p["root"] for p in parts.values())
    assert whole and cut_off  # the cut falls inside a trace
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(head), encoding="utf-8")
    first = import_logs(docs_workspace, path, LogsConfig(format="otel"))
    assert first.records == whole and first.skipped == {"root not in the file": cut_off}
    path.write_text("".join(lines), encoding="utf-8")
    second = import_logs(docs_workspace, path, LogsConfig(format="otel"))
    assert second.records == len(ASKED) - whole and second.skipped == {"seen before": whole}
    assert first.feedback + second.feedback == len(THUMBS)
    assert_whole_log(docs_workspace, latest)


def test_export_windows_that_overlap_count_each_request_once(docs_workspace, tmp_path):
    """Two exports of "the last N requests" sharing some: the second adds only the requests the first lacked, and
    their feedback once."""
    spans, latest = app_spans(docs_workspace, "server")
    traces = list(dict.fromkeys(s.context.trace_id for s in spans))  # in the order the requests ended
    windows = [set(traces[:7]), set(traces[4:])]
    summaries = []
    for n, window in enumerate(windows):
        path = tmp_path / f"window-{n}.jsonl"
        path.write_text("".join(otlp_lines([s for s in spans if s.context.trace_id in window])), encoding="utf-8")
        summaries.append(import_logs(docs_workspace, path, LogsConfig(format="otel")))
    shared = len(windows[0] & windows[1])
    assert [s.records for s in summaries] == [len(windows[0]), len(windows[1]) - shared]
    assert summaries[1].skipped == {"seen before": shared}
    assert_whole_log(docs_workspace, latest)


def test_ids_kept_in_document_metadata_are_read_by_the_configured_key(docs_workspace, tmp_path):
    """LangChain's OpenInference spans carry a document's id only in ``document.metadata``, as JSON text: with
    ``logs.fields.retrieved_id`` naming the key, each result is matched by that id (its content is the page the app
    showed, not the chunk's text, so nothing else could match it)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    ids, _ = workspace_chunks(docs_workspace)
    collected = Collected()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(collected))
    tracer = provider.get_tracer("langchain-app")
    expected = {}
    for i, question in enumerate(QUESTIONS):
        picked = [ids[(i + k) % len(ids)] for k in range(2)]
        documents = {}
        for rank, chunk_id in enumerate(picked):
            prefix = f"retrieval.documents.{rank}.document"
            documents[f"{prefix}.content"] = f"page {i}.{rank} as the app rendered it"
            documents[f"{prefix}.metadata"] = json.dumps({"source": "docs", "chunk_id": chunk_id})
        with tracer.start_as_current_span("chain", attributes={"input.value": question}):
            tracer.start_span("retriever", attributes={"openinference.span.kind": "RETRIEVER", **documents}).end()
        expected[question] = picked
    provider.shutdown()
    path = tmp_path / "traces.jsonl"
    path.write_text("".join(otlp_lines(list(collected.memory.get_finished_spans()))), encoding="utf-8")
    settings = LogsConfig.model_validate({"format": "otel", "fields": {"retrieved_id": "chunk_id"}})
    summary = import_logs(docs_workspace, path, settings)
    assert (summary.records, summary.by_id, summary.unmatched_texts) == (len(QUESTIONS), 2 * len(QUESTIONS), 0)
    assert stored(docs_workspace)["run"] == expected


def test_a_trace_split_across_rotated_files_is_recorded_once_when_its_second_part_arrives(docs_workspace, tmp_path):
    """A log rotated mid-trace: the first file holds the spans that ended before the rotation (a trace's retriever,
    not its root), the second the rest. Neither file holds those traces whole; the second import completes each
    from the part the first one held, and the whole log is counted exactly once."""
    spans, latest = app_spans(docs_workspace, "dict")
    lines = otlp_lines(spans, per_line=4)
    cut = len(lines) // 2
    first_part, second_part = trace_parts(spans, lines[:cut]), trace_parts(spans, lines[cut:])
    whole = sum(p["root"] and p["retriever"] for p in first_part.values())
    split = sum(first_part[t]["any"] and second_part[t]["any"] for t in first_part)
    assert whole and split  # the rotation falls inside a trace
    results = []
    for n, part in enumerate((lines[:cut], lines[cut:])):
        path = tmp_path / f"traces.{n}.jsonl"
        path.write_text("".join(part), encoding="utf-8")
        results.append(import_logs(docs_workspace, path, LogsConfig(format="otel")))
    first, second = results
    assert (first.records, first.skipped) == (whole, {"root not in the file": split})
    assert (second.records, second.completed_traces, second.skipped) == (len(ASKED) - whole, split, {})
    assert first.feedback + second.feedback == len(THUMBS)
    assert_whole_log(docs_workspace, latest)
    keys = [trace_key(format(t, "032x")) for t in first_part]
    assert stored_logs.partial_traces_among(docs_workspace.db, keys) == {}  # nothing held once every trace is whole


def test_the_part_of_a_trace_held_for_a_later_file_keeps_no_personal_data(docs_workspace, tmp_path):
    """The question in a part held until its trace is whole is scrubbed as a stored query is; the results' texts,
    matched to chunks, are kept as they are."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    ids, passages = workspace_chunks(docs_workspace)
    collected = Collected()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(collected))
    tracer = provider.get_tracer("rag-app")
    question = "why did ann@example.com get no answer about recall?"
    retriever = {
        "openinference.span.kind": "RETRIEVER", "input.value": question,
        "retrieval.documents.0.document.content": passages[ids[0]],
    }  # fmt: skip
    with tracer.start_as_current_span("chain", attributes={"input.value": question}):
        tracer.start_span("retriever", attributes=retriever).end()
    provider.shutdown()
    retriever_span, root = list(collected.memory.get_finished_spans())
    for n, span in enumerate((retriever_span, root)):
        path = tmp_path / f"traces.{n}.jsonl"
        path.write_text("".join(otlp_lines([span])), encoding="utf-8")
        summary = import_logs(docs_workspace, path, LogsConfig(format="otel"))
        if n == 0:
            held = stored_logs.partial_traces_among(docs_workspace.db, [trace_key(f"{root.context.trace_id:032x}")])
            assert len(held) == 1 and "ann@example.com" not in json.dumps(held)
            (span,) = next(iter(held.values()))
            assert span["attributes"]["retrieval.documents.0.document.content"] == passages[ids[0]]
    assert (summary.records, summary.completed_traces) == (1, 1)
    assert stored(docs_workspace)["queries"].keys() == {"why did [email] get no answer about recall?"}
    assert stored(docs_workspace)["run"] == {"why did [email] get no answer about recall?": [ids[0]]}
