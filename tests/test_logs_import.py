"""import-logs: a production log becomes real queries with their frequency and feedback, and the live system's
retrieval becomes a production run in the candidate pools; nothing is guessed, nothing is counted twice."""

from __future__ import annotations

import json

import pytest

from testset_builder.cli import main
from testset_builder.config import LogsConfig
from testset_builder.export.queries import derived_id
from testset_builder.stages.logs.importer import import_logs
from testset_builder.store import logs as stored_logs
from testset_builder.store import open_workspace, rows


@pytest.fixture
def log(docs_workspace, tmp_path):
    """A log over the docs: one query asked three times (two thumbs down, the last record retrieving by text), one
    with an e-mail in it, a result naming no chunk of the workspace, a text matching none, and two bad lines."""
    ids = [chunk_id for chunk_id, _, _ in rows.live_chunk_rows(docs_workspace.db)]
    passages = dict(zip(*rows.live_chunk_passages(docs_workspace.db)))
    records = [
        {"query": "how is ndcg computed", "retrieved": [{"id": ids[0]}, {"id": ids[1]}], "thumbs": "down",
         "timestamp": "2026-11-01T10:00:00Z", "answer": "first answer"},
        {"query": "How is  NDCG computed", "retrieved": [{"id": ids[2]}], "thumbs": "up",
         "timestamp": "2026-11-03T10:00:00Z", "answer": "latest answer", "cited": [ids[2]], "clicked": [ids[2]]},
        {"query": "how is ndcg computed", "retrieved": [{"id": "nowhere#1"}], "thumbs": "down",
         "timestamp": "2026-11-02T10:00:00Z", "comment": "wrong"},
        {"query": "mail me at jane@example.com about recall",
         "retrieved": [{"text": passages[ids[3]]}, {"text": "  " + passages[ids[4]].upper() + " "},
                       {"text": "a text the corpus never had"}]},
        "{broken",
        {"answer": "a record without a query"},
    ]  # fmt: skip
    path = tmp_path / "rag.jsonl"
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path, ids, passages


def test_a_log_becomes_real_queries_with_frequency_feedback_and_the_latest_retrieval(docs_workspace, log):
    path, ids, _ = log
    summary = import_logs(docs_workspace, path)

    assert (summary.records, summary.unreadable, summary.new_queries) == (4, 2, 2)
    assert (summary.by_id, summary.unknown_ids) == (3, 1)
    assert (summary.by_exact_text, summary.by_normalised_text, summary.unmatched_texts) == (1, 1, 1)
    assert summary.scrubbed == {"email": 1}
    assert [p.split(":")[0] for p in summary.problems] == ["line 3", "line 4", "line 5", "line 6"]
    db = docs_workspace.db
    ndcg = derived_id("how is ndcg computed")
    logged = {q["query_id"]: q for q in stored_logs.logged_queries(db)}
    assert logged[ndcg]["frequency"] == 3 and (logged[ndcg]["thumbs_down"], logged[ndcg]["thumbs_up"]) == (2, 1)
    assert (logged[ndcg]["first_seen"], logged[ndcg]["last_seen"]) == ("2026-11-01T10:00:00Z", "2026-11-03T10:00:00Z")
    assert logged[ndcg]["last_answer"] == "latest answer" and logged[ndcg]["clicked"] == 1
    run = stored_logs.production_run(db)
    assert run[ndcg] == [(1, ids[2], None)]  # the latest record's retrieval, not the order of the lines
    mailed = derived_id("mail me at [email] about recall")
    assert rows.get_query(db, mailed).text == "mail me at [email] about recall"  # no address reached the store
    assert [chunk for _, chunk, _ in run[mailed]] == [ids[3], ids[4]]
    production = {
        (q, c) for q, c, r in db.execute("SELECT query_id, chunk_id, retriever FROM candidates") if r == "production"
    }
    assert production == {(ndcg, ids[2]), (mailed, ids[3]), (mailed, ids[4])}
    assert "jane@example.com" not in (docs_workspace.root / "testset.db").read_bytes().decode("utf-8", "ignore")


def test_a_logged_query_already_in_the_workspace_under_its_own_id_is_that_query(docs_workspace, log):
    """A labelled query imported with an id of its own (a BEIR set's q7): the log's asking of it counts for it, and no
    second query with the same text is made (select would send a labelled question back to review)."""
    from testset_builder.records import Query, QueryOrigin

    path, ids, _ = log
    with docs_workspace.transaction() as tx:
        rows.put_queries(tx, [Query(query_id="q7", text="How is nDCG computed", origin=QueryOrigin.real)])
    summary = import_logs(docs_workspace, path)
    assert summary.new_queries == 1  # the mailed one alone
    logged = {q["query_id"]: q for q in stored_logs.logged_queries(docs_workspace.db)}
    assert logged["q7"]["frequency"] == 3 and derived_id("how is ndcg computed") not in logged
    assert stored_logs.production_run(docs_workspace.db)["q7"] == [(1, ids[2], None)]


def test_importing_the_same_log_again_adds_nothing(docs_workspace, log):
    path, _, _ = log
    first = import_logs(docs_workspace, path)
    again = import_logs(docs_workspace, path)
    assert again.already_imported and again.records == first.records
    assert sum(q["frequency"] for q in stored_logs.logged_queries(docs_workspace.db)) == 4


def docs_chunked(root):
    """Another workspace holding the docs chunked as docs_workspace chunks them."""
    from pathlib import Path

    from testset_builder.config import ChunkingConfig
    from testset_builder.corpus.ingest import ingest
    from testset_builder.corpus.loaders import load_sources

    docs = Path(__file__).resolve().parents[1] / "examples" / "corpus"
    ws = open_workspace(root)
    ingest(ws, load_sources([docs]), ChunkingConfig(chunker="markdown", size=600, overlap=60), [docs])
    return ws


def test_an_import_that_dies_part_way_resumes_and_counts_no_record_twice(docs_workspace, log, tmp_path, monkeypatch):
    path, _, _ = log
    real, calls = stored_logs.add_query_logs, {"n": 0}

    def dies_on_the_third_batch(db, logs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # as a kill would: the batch's transaction never commits
        real(db, logs)

    monkeypatch.setattr(stored_logs, "add_query_logs", dies_on_the_third_batch)
    with pytest.raises(KeyboardInterrupt):
        import_logs(docs_workspace, path, batch_size=1)
    monkeypatch.setattr(stored_logs, "add_query_logs", real)
    resumed = import_logs(docs_workspace, path, batch_size=1)
    assert resumed.resumed_after_line == 2 and resumed.records == 4 and resumed.unreadable == 2

    with docs_chunked(tmp_path / "clean") as clean:
        whole = import_logs(clean, path, batch_size=1)
        assert stored_logs.logged_queries(docs_workspace.db) == stored_logs.logged_queries(clean.db)
        assert stored_logs.production_run(docs_workspace.db) == stored_logs.production_run(clean.db)
    assert {k: v for k, v in resumed.as_dict().items() if k not in ("resumed_after_line", "seconds")} == {
        k: v for k, v in whole.as_dict().items() if k not in ("resumed_after_line", "seconds")
    }


def test_field_names_and_pii_patterns_come_from_the_config(docs_workspace, tmp_path):
    ids = [chunk_id for chunk_id, _, _ in rows.live_chunk_rows(docs_workspace.db)]
    path = tmp_path / "custom.jsonl"
    path.write_text(
        json.dumps({"q": {"text": "account ACC-99812 cannot log in"}, "hits": [ids[0]], "fb": False}) + "\n",
        encoding="utf-8",
    )
    settings = LogsConfig(fields={"query": "q.text", "retrieved": "hits", "thumbs": "fb"}, pii_patterns=[r"ACC-\d+"])
    summary = import_logs(docs_workspace, path, settings)
    assert summary.records == 1 and summary.scrubbed == {"pattern 0": 1}
    (logged,) = stored_logs.logged_queries(docs_workspace.db)
    assert rows.get_query(docs_workspace.db, logged["query_id"]).text == "account [redacted] cannot log in"
    assert logged["thumbs_down"] == 1


def test_the_command_reports_counts_as_json_and_a_workspace_without_chunks_is_refused(
    log, docs_workspace, tmp_path, capsys
):
    path, _, _ = log
    assert main(["import-logs", str(path), "--workspace", str(docs_workspace.root), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["records"] == 4 and document["unknown_ids"] == 1 and len(document["problems"]) == 4
    with open_workspace(tmp_path / "bare"):
        pass
    assert main(["import-logs", str(path), "--workspace", str(tmp_path / "bare"), "--json"]) == 1
    assert "no chunks" in json.loads(capsys.readouterr().out)["error"]


def test_the_summary_counts_records_queries_retrievals_feedback_and_what_was_skipped(log, docs_workspace, capsys):
    """The log above: 4 records of 2 queries (one asked three times), 3 of which retrieved a chunk (one named only
    an unknown id), 3 with thumbs or a comment; two lines not read. A request id seen twice is skipped, by reason."""
    path, ids, _ = log
    with path.open("a", encoding="utf-8") as handle:
        for _ in range(2):
            handle.write(json.dumps({"query": "asked once", "trace_id": "t1", "retrieved": [ids[5]]}) + "\n")
    assert main(["import-logs", str(path), "--workspace", str(docs_workspace.root)]) == 0
    line = capsys.readouterr().out.replace("\n", " ")
    assert "5 records, 3 new queries, 4 with a retrieval, 3 with feedback; skipped 1 seen before" in line
    assert "2 lines unreadable" in line
    importing = path.with_name("again.jsonl")
    importing.write_bytes(path.read_bytes() + b"\n")
    assert main(["import-logs", str(importing), "--workspace", str(docs_workspace.root), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert {key: document[key] for key in ("records", "new_queries", "records_with_retrieval", "feedback")} == {
        "records": 4, "new_queries": 0, "records_with_retrieval": 3, "feedback": 3
    }  # fmt: skip
    assert document["skipped"] == {"seen before": 2} and document["unreadable"] == 2


def test_every_records_personal_data_is_scrubbed_and_counted_not_only_what_is_kept(docs_workspace, tmp_path):
    """Each record's answer and comment are scrubbed (and counted) as they are read, though only a query's latest
    answer is kept: the count is what the log held, and nothing unscrubbed is ever stored."""
    records = [
        {"query": "same question", "answer": f"write to user{i}@example.com", "comment": f"or boss{i}@example.org",
         "timestamp": f"2026-11-0{i + 1}T10:00:00Z"}
        for i in range(4)
    ]  # fmt: skip
    path = tmp_path / "mail.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    summary = import_logs(docs_workspace, path)
    assert summary.scrubbed == {"email": 8}
    (logged,) = stored_logs.logged_queries(docs_workspace.db)
    assert logged["last_answer"] == "write to [email]" and logged["last_comment"] == "or [email]"


def test_a_querys_session_is_its_earliest_records_whatever_the_order_of_lines_and_imports(docs_workspace, tmp_path):
    """The session kept is the earliest record's (records without a timestamp after those with one, then the
    smaller hash), so the same records imported in another order keep the same sessions."""
    from testset_builder.stages.logs.importer import session_key

    lines = [
        {"query": "what is recall", "session": "later", "timestamp": "2026-11-03T10:00:00Z"},
        {"query": "what is recall", "session": "earliest", "timestamp": "2026-11-01T10:00:00Z"},
        {"query": "what is recall", "session": "no-time"},
        {"query": "what is ndcg", "session": "b-no-time"},
        {"query": "what is ndcg", "session": "a-no-time"},
        {"query": "what is mrr"},
    ]
    for name, order in (("forwards", [0, 1, 2, 3, 4, 5]), ("backwards", [5, 4, 3, 2, 1, 0])):
        for n, index in enumerate(order):  # each line its own import, in this order; the queries named apart
            log = tmp_path / f"log-{name}-{n}.jsonl"
            log.write_text(json.dumps({**lines[index], "query": f"{lines[index]['query']} {name}"}) + "\n")
            import_logs(docs_workspace, log)
    db = docs_workspace.db
    kept = {rows.get_query(db, q["query_id"]).text: q["session"] for q in stored_logs.logged_queries(db)}
    for name in ("forwards", "backwards"):
        assert {text: kept[f"{text} {name}"] for text in ("what is recall", "what is ndcg", "what is mrr")} == {
            "what is recall": session_key("earliest"),
            "what is ndcg": min(session_key("a-no-time"), session_key("b-no-time")),
            "what is mrr": None,
        }


def test_a_query_logged_as_an_object_is_its_question_and_a_request_id_counts_once(docs_workspace, tmp_path):
    """A chain's input logged whole (``{"question", "chat_history"}``) gives its question (the keys from the config);
    a request logged again under its id (a retried write, a second export) is counted once, across imports too."""
    ids = [chunk_id for chunk_id, _, _ in rows.live_chunk_rows(docs_workspace.db)]
    records = [
        {"trace_id": "req-1", "query": {"question": "what is recall", "chat_history": []}, "retrieved": ids[:2],
         "thumbs": "down"},
        {"trace_id": "req-2", "query": json.dumps({"input": "how is ndcg computed"}), "retrieved": ids[2:3]},
        {"trace_id": "req-1", "query": {"question": "what is recall", "chat_history": []}, "retrieved": ids[:2],
         "thumbs": "down"},
        {"trace_id": "req-3", "query": {"history": []}},
    ]  # fmt: skip
    path = tmp_path / "log.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    summary = import_logs(docs_workspace, path)
    assert (summary.records, summary.feedback, summary.skipped, summary.unreadable) == (2, 1, {"seen before": 1}, 1)
    assert "no text under question, query, input" in summary.problems[0]
    texts = {
        rows.get_query(docs_workspace.db, q["query_id"]).text for q in stored_logs.logged_queries(docs_workspace.db)
    }
    assert texts == {"what is recall", "how is ndcg computed"}
    grown = tmp_path / "grown.jsonl"
    grown.write_text(path.read_text(encoding="utf-8") + json.dumps({**records[1], "trace_id": "req-4"}) + "\n")
    again = import_logs(docs_workspace, grown)
    assert (again.records, again.skipped) == (1, {"seen before": 3})
    logged = {q["query_id"]: q for q in stored_logs.logged_queries(docs_workspace.db)}
    assert logged[derived_id("what is recall")]["thumbs_down"] == 1
    assert logged[derived_id("how is ndcg computed")]["frequency"] == 2
