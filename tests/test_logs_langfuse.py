"""Langfuse's exports import one record a trace: a trace downloaded from its page, the observations and traces tables
exported as JSON lines (a trace's observations anywhere in the file), the public API's pages and a session's download.
Retrieved documents are LangChain documents as langfuse-python's own serializer stores a retriever's output."""

from __future__ import annotations

import json
import random

import pytest

from testset_builder.config import LogFieldsConfig, LogsConfig
from testset_builder.export.logs import LogRecord, read_log
from testset_builder.stages.logs.importer import import_logs
from testset_builder.store import logs as stored_logs
from testset_builder.store import rows

serializer = pytest.importorskip("langfuse._utils.serializer", reason="the test extra installs langfuse")
Document = pytest.importorskip("langchain_core.documents", reason="langchain-core comes with the test extra").Document
TRACES = 9


def stored(value):
    """What Langfuse keeps of a value the SDK recorded: its JSON through the SDK's serializer."""
    return json.loads(json.dumps(value, cls=serializer.EventSerializer))


def traces(ws) -> tuple[list[dict], dict[str, list[str]]]:
    """``TRACES`` traces of a LangChain RAG app as Langfuse's callback handler records them: the trace with the
    question and the answer, a RETRIEVER observation (input: the question; output: three documents, ids in the
    metadata, the last a document the workspace knows only by its text), a GENERATION; and feedback as scores."""
    ids = [chunk_id for chunk_id, _, _ in rows.live_chunk_rows(ws.db)]
    passages = dict(zip(*rows.live_chunk_passages(ws.db)))
    made, expected = [], {}
    for n in range(TRACES):
        question, trace_id = f"how do I measure recall, take {n}", f"trace-{n:03d}"
        picked = [ids[(n + k) % len(ids)] for k in range(3)]
        metadata = [{"chunk_id": c if k < 2 else None, "source": "docs"} for k, c in enumerate(picked)]
        documents = [
            Document(page_content=passages[c], metadata=m, id=f"u{k}") for k, (c, m) in enumerate(zip(picked, metadata))
        ]
        at = f"2026-11-0{1 + n % 3}T10:00:{n:02d}.000Z"
        made.append(
            {
                "trace": {"id": trace_id, "name": "rag", "timestamp": at, "sessionId": f"session-{n % 2}",
                          "input": json.dumps({"question": question}), "output": json.dumps(f"answer {n}"),
                          "scores": [{"name": "user-feedback", "value": 1 if n % 2 else 0, "comment": f"c{n}",
                                      "stringValue": None}]},
                "observations": [
                    {"id": f"{trace_id}-r", "traceId": trace_id, "type": "RETRIEVER", "name": "VectorStoreRetriever",
                     "startTime": at, "input": question, "output": stored(documents)},
                    {"id": f"{trace_id}-g", "traceId": trace_id, "type": "GENERATION", "name": "ChatOpenAI",
                     "startTime": at, "input": [{"role": "user", "content": question}],
                     "output": {"role": "assistant", "content": f"answer {n}"}},
                ],
            }
        )  # fmt: skip
        expected[question] = picked
    return made, expected


def assert_imported(ws, path, expected, thumbs: bool = True):
    fields = LogFieldsConfig(retrieved_id="chunk_id")  # the app keeps its chunk ids in the documents' metadata
    records = [r for r in read_log(path, "langfuse", fields) if isinstance(r, LogRecord)]
    assert len(records) == TRACES and {r.query for r in records} == set(expected)
    assert [r.line for r in records] == sorted(r.line for r in records)  # in line order, as a resume counts on
    assert all(r.answer.startswith("answer ") and r.session.startswith("session-") for r in records)
    if thumbs:
        assert sorted(r.thumbs for r in records) == [-1] * 5 + [1] * 4
    summary = import_logs(ws, path, LogsConfig(format="langfuse", fields=fields), batch_size=4)
    assert (summary.records, summary.unreadable, summary.records_with_retrieval) == (TRACES, 0, TRACES)
    assert summary.by_id == 2 * TRACES and summary.by_exact_text == TRACES  # the third document by its text
    texts = {q["query_id"]: rows.get_query(ws.db, q["query_id"]).text for q in stored_logs.logged_queries(ws.db)}
    run = stored_logs.production_run(ws.db)
    assert {texts[q]: [c for _, c, _ in ranked] for q, ranked in run.items()} == expected


def test_traces_downloaded_from_their_pages_import_with_their_documents_answer_and_feedback(docs_workspace, tmp_path):
    made, expected = traces(docs_workspace)
    path = tmp_path / "traces.json"  # the downloads saved one after another, each as the page writes it
    path.write_text("".join(json.dumps(t, indent=2) + "\n" for t in made), encoding="utf-8")
    assert_imported(docs_workspace, path, expected)


def test_exported_tables_import_whatever_the_order_of_a_traces_observations(docs_workspace, tmp_path):
    made, expected = traces(docs_workspace)
    observations = [o for t in made for o in t["observations"]]
    random.Random(3).shuffle(observations)
    trace_rows = [t["trace"] for t in made]
    path = tmp_path / "export.jsonl"  # the observations table's JSON lines, then the traces table's
    path.write_text("".join(json.dumps(row) + "\n" for row in [*observations, *trace_rows]), encoding="utf-8")
    assert_imported(docs_workspace, path, expected)


def test_api_pages_and_a_session_download_import_traces_carrying_their_observations(docs_workspace, tmp_path):
    made, expected = traces(docs_workspace)
    nested = [{**t["trace"], "observations": t["observations"]} for t in made]
    path = tmp_path / "pages.json"
    pages = [{"data": nested[:4], "meta": {"page": 1}}, {"data": nested[4:7], "meta": {"page": 2}}]
    path.write_text("".join(json.dumps(p) + "\n" for p in pages) + json.dumps({"traces": nested[7:]}, indent=2) + "\n")
    assert_imported(docs_workspace, path, expected)


def test_langfuse_lines_that_are_not_traces_are_counted_with_their_line(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text(
        '{"id": "t1", "input": "what is recall?"}\n'  # a trace without observations: a query, nothing retrieved
        '{"name": "no ids"}\n'
        "not json\n"
        '{"id": "t2", "output": "an answer with no question"}\n'
        '{"traceId": "t3", "type": "RETRIEVER", "input": "q", "output": [{"metadata": {}}]}\n',
        encoding="utf-8",
    )
    got = list(read_log(path, "langfuse"))
    records = [r for r in got if isinstance(r, LogRecord)]
    assert [(r.query, r.retrieved) for r in records] == [("what is recall?", [])]
    said = sorted(str(r) for r in got if not isinstance(r, LogRecord))
    assert said == [
        "line 2: not a trace or an observation (an object with neither traceId (an observation) nor id (a trace))",
        "line 3: not JSON (Expecting value)",
        "line 4: trace t2 has no query (no retriever's input, no trace input)",
        "line 5: trace t3: retrieved document 1 has neither an id nor text",
    ]


def scores_page(made: list[dict], flip: bool = False) -> dict:
    """The feedback of ``made`` as ``GET /api/public/scores`` pages it: the SDK's own score models (numeric, and
    categorical for odd traces), serialised as the API sends them; ``flip``: each user changed their mind later."""
    from datetime import datetime, timedelta

    from langfuse.api.commons.types.score import Score_Categorical, Score_Numeric

    data = []
    for n, trace in enumerate(made):
        given = trace["trace"]["scores"][0]["value"] == 1
        up = given != flip
        at = datetime(2026, 11, 5, 9, 0) + timedelta(days=flip, minutes=n)
        common = {"id": f"score-{n}-{flip}", "trace_id": trace["trace"]["id"], "name": "user-feedback",
                  "source": "API", "timestamp": at, "created_at": at, "updated_at": at, "environment": "default",
                  "comment": f"c{n}"}  # fmt: skip
        if n % 2:
            score = Score_Categorical(**common, value=float(up), string_value="thumbs_up" if up else "thumbs_down")
        else:
            score = Score_Numeric(**common, value=1.0 if up else 0.0)
        data.append(json.loads(json.dumps(score.dict(), default=str)))
    return {"data": data, "meta": {"page": 1, "limit": 50, "totalItems": len(data), "totalPages": 1}}


def thumbs_stored(ws) -> tuple[int, int]:
    logged = stored_logs.logged_queries(ws.db)
    return sum(q["thumbs_up"] for q in logged), sum(q["thumbs_down"] for q in logged)


def split_tables(made: list[dict]) -> tuple[list[dict], list[dict]]:
    """The traces table without their scores, and the observations table."""
    return [{**t["trace"], "scores": []} for t in made], [o for t in made for o in t["observations"]]


SETTINGS = LogsConfig(format="langfuse", fields=LogFieldsConfig(retrieved_id="chunk_id"))


def test_scores_exported_beside_the_traces_give_each_trace_its_feedback(docs_workspace, tmp_path):
    """Langfuse keeps feedback as scores: the scores table exported with the others gives each trace its thumbs,
    wherever its rows are in the file."""
    made, _ = traces(docs_workspace)
    bare, observations = split_tables(made)
    page = scores_page(made)
    ups = sum(s["value"] == 1.0 for s in page["data"])
    path = tmp_path / "together.jsonl"  # the three tables in one file, scores first
    path.write_text("".join(json.dumps(r) + "\n" for r in [*page["data"], *observations, *bare]), encoding="utf-8")
    records = [r for r in read_log(path, "langfuse", SETTINGS.fields) if isinstance(r, LogRecord)]
    assert sorted(r.thumbs for r in records) == sorted(1 if s["value"] == 1.0 else -1 for s in page["data"])
    assert import_logs(docs_workspace, path, SETTINGS).feedback == TRACES
    assert thumbs_stored(docs_workspace) == (ups, TRACES - ups)


def test_scores_exported_later_are_added_once_to_the_traces_imported_before(docs_workspace, tmp_path):
    """Scores fetched after the traces were imported are added to them once; the same scores again change nothing;
    a user who changed their mind counts as their latest score says."""
    made, _ = traces(docs_workspace)
    bare, observations = split_tables(made)
    page = scores_page(made)
    ups = sum(s["value"] == 1.0 for s in page["data"])
    traces_only = tmp_path / "traces.jsonl"
    traces_only.write_text("".join(json.dumps(r) + "\n" for r in [*observations, *bare]), encoding="utf-8")
    first = import_logs(docs_workspace, traces_only, SETTINGS)
    assert (first.records, first.feedback) == (TRACES, 0)
    scores = tmp_path / "scores.json"
    scores.write_text(json.dumps(page, indent=2), encoding="utf-8")
    added = import_logs(docs_workspace, scores, SETTINGS)
    assert (added.records, added.late_feedback, added.unreadable) == (0, TRACES, 0)
    assert thumbs_stored(docs_workspace) == (ups, TRACES - ups)
    again = tmp_path / "scores-again.jsonl"  # the same scores in another export
    again.write_text("".join(json.dumps(s) + "\n" for s in page["data"]), encoding="utf-8")
    assert import_logs(docs_workspace, again, SETTINGS).late_feedback == 0
    changed = tmp_path / "scores-changed.json"
    changed.write_text(json.dumps(scores_page(made, flip=True)), encoding="utf-8")
    assert import_logs(docs_workspace, changed, SETTINGS).late_feedback == TRACES
    assert thumbs_stored(docs_workspace) == (TRACES - ups, ups)
