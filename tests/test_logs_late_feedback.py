"""Feedback that comes apart from its request, with traces made by the real OpenTelemetry SDK: given after the
request was imported, it is added to that request, once however often it is imported; recorded on the generation
trace of an app that retrieves in another trace, it goes to the same session's nearest earlier retrieval."""

from __future__ import annotations

import json

import pytest
from test_logs_app_traces import ASKED, QUESTIONS, THUMBS, app_spans, assert_whole_log, otlp_lines, stored
from test_logs_phoenix import rest_file

from testset_builder.config import LogsConfig
from testset_builder.stages.logs.feedback import nearest_retrieval
from testset_builder.stages.logs.importer import import_logs
from testset_builder.store.logs import TraceFeedback

pytest.importorskip("opentelemetry.sdk.trace", reason="the test extra installs opentelemetry-sdk")
OTEL = LogsConfig(format="otel")


def thumbs_by_question(ws) -> dict[str, tuple[int, int]]:
    return {q: (row["thumbs_up"], row["thumbs_down"]) for q, row in stored(ws)["queries"].items()}


def expected_thumbs(votes: dict[int, str]) -> dict[str, tuple[int, int]]:
    """(up, down) of each question when request i's user voted ``votes[i]``."""
    found = {QUESTIONS[a]: (0, 0) for a in set(ASKED)}
    for i, vote in votes.items():
        up, down = found[QUESTIONS[ASKED[i]]]
        found[QUESTIONS[ASKED[i]]] = (up + (vote == "up"), down + (vote == "down"))
    return found


def request_traces(spans) -> list[str]:
    """Each request's retrieval trace id (hex), in the order the requests were made."""
    roots = sorted((s for s in spans if s.parent is None and s.name != "generate"), key=lambda s: s.start_time)
    return [f"{root.context.trace_id:032x}" for root in roots]


def without_thumbs(lines: list[str]) -> list[str]:
    """OTLP export lines with the thumbs taken out of every span: the requests as exported before any feedback."""
    kept = []
    for line in lines:
        request = json.loads(line)
        for resource in request["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    span["attributes"] = [a for a in span.get("attributes", []) if a["key"] != "thumbs"]
        kept.append(json.dumps(request) + "\n")
    return kept


def test_feedback_annotated_after_the_requests_were_imported_is_added_to_them_once(docs_workspace, tmp_path):
    """Phoenix spans exported before the users gave feedback, then again with their annotations: the second file
    adds the feedback to the requests recorded, and a third copy of it adds nothing."""
    ws = docs_workspace
    spans, latest = app_spans(ws, "dict")
    rest_file(spans, tmp_path / "before.json", annotations=False)
    first = import_logs(ws, tmp_path / "before.json", OTEL)
    assert (first.records, first.feedback, first.late_feedback) == (len(ASKED), 0, 0)
    rest_file(spans, tmp_path / "after.json", annotations=True)
    second = import_logs(ws, tmp_path / "after.json", OTEL)
    assert (second.records, second.late_feedback, second.skipped) == (0, len(THUMBS), {"seen before": len(ASKED)})
    assert thumbs_by_question(ws) == expected_thumbs(THUMBS)
    assert_whole_log(ws, latest)
    copy = tmp_path / "after-again.json"
    copy.write_text((tmp_path / "after.json").read_text(encoding="utf-8") + "\n", encoding="utf-8")  # other bytes
    third = import_logs(ws, copy, OTEL)
    assert (third.records, third.late_feedback) == (0, 0)
    assert thumbs_by_question(ws) == expected_thumbs(THUMBS)


def test_feedback_lines_naming_a_request_add_to_it_and_a_changed_vote_replaces_the_old(docs_workspace, tmp_path):
    """OTLP traces imported without feedback, then the app's feedback events (JSON lines naming the trace id): each
    adds to its request once; a user who changes a vote has the new one counted instead of the old; an event
    naming no request imported is counted as feedback without a retrieval."""
    ws = docs_workspace
    spans, latest = app_spans(ws, "dict")
    (tmp_path / "traces.jsonl").write_text("".join(without_thumbs(otlp_lines(spans))), encoding="utf-8")
    assert import_logs(ws, tmp_path / "traces.jsonl", OTEL).feedback == 0
    traces = request_traces(spans)
    events = [{"trace_id": traces[i], "thumbs": vote} for i, vote in sorted(THUMBS.items())]
    events.append({"trace_id": "f" * 32, "thumbs": "up"})  # a request this workspace never saw
    (tmp_path / "feedback.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    summary = import_logs(ws, tmp_path / "feedback.jsonl")
    assert (summary.records, summary.late_feedback) == (0, len(THUMBS))
    assert summary.skipped == {"feedback without a retrieval": 1}
    assert_whole_log(ws, latest)
    changed = next(i for i, vote in sorted(THUMBS.items()) if vote == "down")
    again = [*events, {"trace_id": traces[changed], "thumbs": "up"}]  # the same events, and one vote changed
    (tmp_path / "feedback-2.jsonl").write_text("".join(json.dumps(e) + "\n" for e in again), encoding="utf-8")
    summary = import_logs(ws, tmp_path / "feedback-2.jsonl")
    assert summary.late_feedback == 1
    assert thumbs_by_question(ws) == expected_thumbs({**THUMBS, changed: "up"})


def test_feedback_on_the_generation_trace_goes_to_its_sessions_nearest_earlier_retrieval(docs_workspace, tmp_path):
    """Retrieval and generation in separate traces, the thumbs on the generation trace: each vote counts on the
    question of the retrieval that came last before it in its session (a session holds several requests); the
    generation traces without feedback are skipped; a re-import adds nothing."""
    ws = docs_workspace
    spans, latest = app_spans(ws, "split-feedback")
    (tmp_path / "traces.jsonl").write_text("".join(otlp_lines(spans)), encoding="utf-8")
    summary = import_logs(ws, tmp_path / "traces.jsonl", OTEL)
    assert (summary.records, summary.feedback, summary.feedback_attached) == (len(ASKED), 0, len(THUMBS))
    assert summary.skipped == {"no retrieval": len(ASKED) - len(THUMBS)}
    assert thumbs_by_question(ws) == expected_thumbs(THUMBS)
    assert_whole_log(ws, latest)
    (tmp_path / "again.jsonl").write_text("".join(otlp_lines(spans, per_line=3)), encoding="utf-8")
    again = import_logs(ws, tmp_path / "again.jsonl", OTEL)
    assert (again.records, again.feedback_attached, again.late_feedback) == (0, 0, 0)
    assert again.skipped == {"seen before": len(ASKED) + len(THUMBS), "no retrieval": len(ASKED) - len(THUMBS)}
    assert thumbs_by_question(ws) == expected_thumbs(THUMBS)


def test_generation_traces_exported_after_their_retrievals_find_them_in_the_workspace(docs_workspace, tmp_path):
    """The retrieval traces in one file, the generation traces with the feedback in a later one."""
    ws = docs_workspace
    spans, latest = app_spans(ws, "split-feedback")
    retrieving = {s.context.trace_id for s in spans if s.attributes.get("openinference.span.kind") == "RETRIEVER"}
    parts = [[s for s in spans if (s.context.trace_id in retrieving) == first] for first in (True, False)]
    for n, part in enumerate(parts):
        (tmp_path / f"part-{n}.jsonl").write_text("".join(otlp_lines(part)), encoding="utf-8")
    first = import_logs(ws, tmp_path / "part-0.jsonl", OTEL)
    second = import_logs(ws, tmp_path / "part-1.jsonl", OTEL)
    assert (first.records, second.records, second.feedback_attached) == (len(ASKED), 0, len(THUMBS))
    assert thumbs_by_question(ws) == expected_thumbs(THUMBS)
    assert_whole_log(ws, latest)


def retrieval(name: str, at: str | None) -> TraceFeedback:
    return TraceFeedback(name, f"q-{name}", session="s", seen_at=at)


def test_the_nearest_earlier_retrieval_is_taken_only_when_it_is_unambiguous():
    morning = [retrieval("a", "2026-01-05T09:00:00Z"), retrieval("b", "2026-01-05T09:00:05Z")]
    assert nearest_retrieval(morning, "2026-01-05T09:00:04Z").trace_key == "a"  # b came after the feedback
    assert nearest_retrieval(morning, "2026-01-05T09:00:05.5Z").trace_key == "b"  # by instant, not by text
    assert nearest_retrieval(morning, "2026-01-05T08:59:00Z") is None  # nothing came before
    tied = [*morning, retrieval("c", "2026-01-05T09:00:05Z")]
    assert nearest_retrieval(tied, "2026-01-05T09:01:00Z") is None  # two at the nearest time
    assert nearest_retrieval([retrieval("a", None)], "2026-01-05T09:00:00Z").trace_key == "a"  # the session's one
    assert nearest_retrieval([retrieval("a", None), retrieval("b", None)], None) is None
