"""Production logs are read as streams of records; a bad line is reported with its number, never guessed around."""

from __future__ import annotations

import json

import pytest

from testset_builder.config import LogFieldsConfig as LogFields
from testset_builder.errors import InputError
from testset_builder.export.logs import LogRecord, Retrieved, Skipped, Unreadable, read_log
from testset_builder.stages.logs.matching import ChunkMatcher
from testset_builder.stages.logs.scrub import Scrubber


def write_lines(path, rows) -> None:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")


def test_jsonl_records_keep_every_part_and_bad_lines_are_reported_with_their_number(tmp_path):
    log = tmp_path / "log.jsonl"
    write_lines(
        log,
        [
            {
                "query": "how do I reset my password", "answer": "Open settings.", "thumbs": "down", "rating": 2,
                "retrieved": [{"id": "doc#1", "score": 3.5}, {"id": "doc#2"}], "cited": ["doc#1"], "clicked": [],
                "timestamp": "2026-11-30T10:00:00Z", "session": "s1", "comment": "wrong page",
            },
            "{not json",
            {"answer": "no query here"},
            {"query": "q", "thumbs": "maybe"},
            [1, 2],
            "",
            {"query": "what is recall", "retrieved": ["a", "b", "c"], "thumbs": True},
        ],
    )  # fmt: skip
    items = list(read_log(log, "jsonl"))

    records = [i for i in items if isinstance(i, LogRecord)]
    problems = [i for i in items if isinstance(i, Unreadable)]
    assert [r.line for r in records] == [1, 7]
    first = records[0]
    assert first.retrieved == [Retrieved(1, "doc#1", None, 3.5), Retrieved(2, "doc#2")]
    assert (first.thumbs, first.rating, first.cited, first.session) == (-1, 2.0, ["doc#1"], "s1")
    assert [r.chunk_id for r in records[1].retrieved] == ["a", "b", "c"] and records[1].thumbs == 1
    assert [(p.line, p.reason.split(" (")[0]) for p in problems] == [
        (2, "not JSON"), (3, "no query"), (4, "thumbs 'maybe' is neither up nor down"),
        (5, "a JSON list, not an object"),
    ]  # fmt: skip


def test_field_names_are_mapped_including_nested_paths(tmp_path):
    log = tmp_path / "log.jsonl"
    write_lines(
        log,
        [{"request": {"question": "why is my score low"},
          "rag": {"docs": [{"doc_id": "x#1", "body": "Recall counts."}]}, "feedback": {"value": -1}}],
    )  # fmt: skip
    fields = LogFields(
        query="request.question", retrieved="rag.docs", retrieved_id="doc_id", retrieved_text="body",
        thumbs="feedback.value",
    )  # fmt: skip
    (record,) = read_log(log, "jsonl", fields)
    assert record.query == "why is my score low" and record.thumbs == -1
    assert record.retrieved == [Retrieved(1, "x#1", "Recall counts.", None)]


def test_csv_logs_hold_lists_as_json_or_separated_ids_and_a_short_row_is_reported(tmp_path):
    log = tmp_path / "log.csv"
    log.write_text(
        'query,retrieved,thumbs,clicked\n"what is ndcg","[""a"", ""b""]",up,a\n"what is mrr",c|d,down,\n"cut",x\n',
        encoding="utf-8",
    )
    items = list(read_log(log, "csv"))
    assert [r.retrieved for r in items[:2]] == [
        [Retrieved(1, "a"), Retrieved(2, "b")], [Retrieved(1, "c"), Retrieved(2, "d")],
    ]  # fmt: skip
    assert items[0].clicked == ["a"] and items[1].thumbs == -1
    assert isinstance(items[2], Unreadable) and items[2].line == 4


def test_openinference_spans_become_one_record_per_trace(tmp_path):
    """OTLP JSON spans as OpenInference exports them: the root span has the query and answer, the retriever span
    the documents; attributes in OTLP's key/value form or plain."""
    log = tmp_path / "spans.jsonl"
    write_lines(
        log,
        [
            {"traceId": "t1", "spanId": "r", "parentSpanId": "c", "attributes": [
                {"key": "openinference.span.kind", "value": {"stringValue": "RETRIEVER"}},
                {"key": "retrieval.documents.0.document.id", "value": {"stringValue": "doc#9"}},
                {"key": "retrieval.documents.0.document.score", "value": {"doubleValue": 0.8}},
                {"key": "retrieval.documents.1.document.content", "value": {"stringValue": "Some text."}},
            ]},
            {"traceId": "t2", "spanId": "c2", "attributes": {"input.value": "second question", "output.value": "a2"}},
            {"traceId": "t1", "spanId": "c", "startTimeUnixNano": "1700000000000000000", "attributes": [
                {"key": "input.value", "value": {"stringValue": "first question"}},
                {"key": "output.value", "value": {"stringValue": "an answer"}},
                {"key": "session.id", "value": {"stringValue": "s9"}},
                {"key": "thumbs", "value": {"stringValue": "down"}},
            ]},
            {"traceId": "t3", "spanId": "x", "parentSpanId": "y", "attributes": {"llm.model": "m"}},
            "{",
        ],
    )  # fmt: skip
    items = list(read_log(log, "otel"))
    records = {r.query: r for r in items if isinstance(r, LogRecord)}
    assert set(records) == {"first question"}
    first = records["first question"]
    assert first.retrieved == [Retrieved(1, "doc#9", None, 0.8), Retrieved(2, None, "Some text.", None)]
    assert (first.answer, first.session, first.thumbs, first.trace) == ("an answer", "s9", -1, "t1")
    # no query's record: a trace without a retrieval span (t2, answered without retrieving) and one cut off (t3,
    # whose root span is not in the file)
    skipped = [i for i in items if isinstance(i, Skipped)]
    assert [(s.line, s.reason) for s in skipped] == [(2, "no retrieval"), (4, "root not in the file")]
    problems = [i for i in items if isinstance(i, Unreadable)]
    assert [p.line for p in problems] == [5]  # an object the file's end cut short
    assert [r.line for r in items if isinstance(r, LogRecord)] == [3]  # each trace at the line it ended


def test_a_missing_file_and_an_unknown_format_are_clear_errors(tmp_path):
    with pytest.raises(InputError, match="no such log file"):
        read_log(tmp_path / "absent.jsonl", "jsonl")
    (tmp_path / "x.log").write_text("", encoding="utf-8")
    with pytest.raises(InputError, match="unknown log format 'xml'"):
        read_log(tmp_path / "x.log", "xml")


def test_invalid_utf8_is_a_reported_line_not_a_crash(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_bytes(b'{"query": "fine"}\n{"query": "caf\xe9"}\n{"query": "also fine"}\n')
    items = list(read_log(log, "jsonl"))
    assert [type(i).__name__ for i in items] == ["LogRecord", "Unreadable", "LogRecord"]
    assert "not UTF-8" in items[1].reason


def test_a_line_longer_than_the_limit_is_reported_and_passed_over_without_being_held(tmp_path, monkeypatch):
    from testset_builder.export import logs as records

    monkeypatch.setattr(records, "MAX_LINE_BYTES", 64)
    log = tmp_path / "log.jsonl"
    huge = json.dumps({"query": "x" * 500})
    write_lines(log, [{"query": "first"}, huge, {"query": "after the long one"}])
    items = list(read_log(log, "jsonl"))
    assert [type(i).__name__ for i in items] == ["LogRecord", "Unreadable", "LogRecord"]
    assert items[1].line == 2 and "over 64 bytes" in items[1].reason
    assert (items[2].line, items[2].query) == (3, "after the long one")


def test_decimal_numbers_such_as_p_values_are_not_taken_for_phone_numbers():
    scrub = Scrubber()
    text = "p = 0.000012345 at pi 3.14159265358; call 555.123.4567 or +33 1 42 68 53 00"
    assert scrub(text) == "p = 0.000012345 at pi 3.14159265358; call [phone] or [phone]"
    assert scrub.counts["phone"] == 2


def test_personal_data_is_scrubbed_and_counted():
    scrub = Scrubber(patterns=[r"EMP-\d{5}"])
    text = "mail jane.doe@example.com or call +44 20 7946 0958 about EMP-12345 in 2024 (3 rooms)"
    assert scrub(text) == "mail [email] or call [phone] about [redacted] in 2024 (3 rooms)"
    assert scrub.counts == {"email": 1, "phone": 1, "pattern 0": 1}
    with pytest.raises(InputError, match=r"logs.pii_patterns\[0\] is not a regular expression"):
        Scrubber(patterns=["(unclosed"])


def matcher_over(chunks: dict[str, tuple[str, str]], group_of: dict[str, str]) -> ChunkMatcher:
    """A matcher whose store reads are these chunks (id -> (title, text)), indexed here by their own hashes."""
    from testset_builder.corpus.batches import text_sha256
    from testset_builder.corpus.dedup import normalised_sha256

    def index(key):
        def lookup(hashes):
            found = {}
            for chunk_id, (_, text) in chunks.items():
                if key(text) in hashes:
                    found.setdefault(key(text), []).append(chunk_id)
            return found

        return lookup

    return ChunkMatcher(
        index(text_sha256),
        index(normalised_sha256),
        lambda ids: {c: chunks[c][0] for c in ids},
        lambda ids: {c: group_of[c] for c in ids if c in group_of},
    )


def test_retrieved_texts_match_chunks_exactly_or_normalised_and_never_by_guess():
    matcher = matcher_over(
        {"a#1": ("", "Recall counts relevant chunks."), "b#1": ("", "Shared boilerplate."),
         "c#1": ("", "Shared boilerplate."), "d#1": ("", "Twin text."), "d#2": ("", "Twin text.")},
        group_of={"d#1": "g", "d#2": "g"},
    )  # fmt: skip
    assert matcher.match("Recall counts relevant chunks.") == ("a#1", "exact")
    assert matcher.match("  recall   COUNTS relevant chunks. ") == ("a#1", "normalised")
    assert matcher.match("Recall counts relevant chunk") == (None, "no chunk has this text")
    assert matcher.match("Shared boilerplate.") == (None, "ambiguous: 2 chunks have this text")
    assert matcher.match("Twin text.") == ("d#1", "exact")  # duplicates of one another: one answer


def test_a_logged_passage_matches_its_chunk_only_under_its_own_documents_title():
    matcher = matcher_over(
        {"p#1": ("Pooling depth", "Deeper pools find more relevant chunks."),
         "q#1": ("Another paper", "Deeper pools find more relevant chunks.")},
        group_of={},
    )  # fmt: skip
    assert matcher.match("Pooling depth\nDeeper pools find more relevant chunks.") == ("p#1", "exact")
    assert matcher.match("POOLING   depth deeper pools find more relevant chunks.") == ("p#1", "normalised")
    assert matcher.match("Deeper pools find more relevant chunks.") == (None, "ambiguous: 2 chunks have this text")
    assert matcher.match("A third title\nDeeper pools find more relevant chunks.") == (None, "no chunk has this text")
    results = matcher.match_all(["Pooling depth\nDeeper pools find more relevant chunks.", "nothing like it"])
    assert results == {
        "Pooling depth\nDeeper pools find more relevant chunks.": ("p#1", "exact"),
        "nothing like it": (None, "no chunk has this text"),
    }


def console_span(trace: str, span: str, query: str | None = None) -> str:
    """One span as the SDK's console exporter writes it (indented over many lines): with a query, a retriever's
    root span (what was asked it, and nothing retrieved)."""
    attributes = {"openinference.span.kind": "RETRIEVER", **({"input.value": query} if query else {})}
    parent = None if query else "0x" + "1" * 16
    body = {"name": "s", "context": {"trace_id": "0x" + trace * 32, "span_id": "0x" + span * 16},
            "parent_id": parent, "attributes": attributes}  # fmt: skip
    return json.dumps(body, indent=4) + "\n"


def test_a_malformed_trace_file_spoils_only_what_is_malformed(tmp_path):
    log = tmp_path / "console.log"
    cut = console_span("a", "1", "lost question")[:60] + "\n"  # the exporter killed mid-span
    whole = [console_span(t, "1", f"question {t}") for t in "bcd"]
    spoiled = console_span("e", "1", "spoiled question").replace('"s"', '"\udcff"').encode("utf-8", "surrogateescape")
    request = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"traceId": "f" * 32, "spanId": "2" * 16,
         "attributes": [{"key": "input.value", "value": {"stringValue": "q f"}},
                        {"key": "openinference.span.kind", "value": {"stringValue": "RETRIEVER"}}]},
        {"spanId": "3" * 16},  # no trace id
        {"traceId": "9" * 32, "spanId": "4" * 16, "attributes": [{"key": "n", "value": {"intValue": None}}]},
        {"traceId": "8" * 32, "spanId": "5" * 16, "startTimeUnixNano": "9" * 30},
    ]}]}]}  # fmt: skip
    with log.open("wb") as handle:
        handle.write(cut.encode() + "".join(whole).encode() + spoiled + (json.dumps(request) + "\n").encode())
    items = list(read_log(log, "otel"))
    records = [i.query for i in items if isinstance(i, LogRecord)]
    assert records == ["question b", "question c", "question d", "q f"]  # nothing after a bad item is lost
    problems = [i.reason for i in items if isinstance(i, Unreadable)]
    assert len(problems) == 5  # the cut span, the spoiled one (once), and three bad spans of the request
    assert "cut short" in problems[0] and "not UTF-8" in problems[1]
    assert any("no trace id" in p for p in problems) and any("intValue" in p for p in problems)
    assert any("out of range" in p for p in problems)
    lines = [i.line for i in items]
    assert lines == sorted(lines)  # in line order, as a resumed import counts on


def test_a_bare_integer_is_not_taken_for_a_phone_number():
    """Ten digits with no separator and no leading + are an integer (a row id, the largest 32-bit int), not a phone
    number as people write one; the same digits written as a phone number are one."""
    scrub = Scrubber()
    text = "id 2147483647 overflowed; order 0123456789; call 214-748-3647 or +12147483647"
    assert scrub(text) == "id 2147483647 overflowed; order 0123456789; call [phone] or [phone]"
    assert scrub.counts["phone"] == 2


@pytest.mark.parametrize(
    "query, question",
    [
        ("{'question': 'How many queries do I need?', 'chat_history': []}", "How many queries do I need?"),  # str(dict)
        ('"What is hit rate?"', "What is hit rate?"),  # a string written as JSON
        (
            [
                {"role": "system", "content": "Answer from the docs."},
                {"role": "user", "content": "How is nDCG computed?"},
            ],
            "How is nDCG computed?",
        ),
        (
            {"messages": [{"type": "human", "content": "What is MRR?"}, {"type": "ai", "content": "The mean of..."}]},
            "What is MRR?",  # the user's last message, not the assistant's answer after it
        ),
        ([{"role": "user", "content": [{"type": "text", "text": "What is recall?"}]}], "What is recall?"),
    ],
)
def test_the_users_question_is_read_from_the_shapes_apps_log_it_in(tmp_path, query, question):
    log = tmp_path / "log.jsonl"
    write_lines(log, [{"query": query}])
    (record,) = read_log(log, "jsonl")
    assert record.query == question


def test_a_langfuse_export_named_by_its_format_is_read(tmp_path):
    """langfuse is known by name before its module registers it: naming it reads the file, it does not crash."""
    trace = {
        "trace": {"id": "t1", "input": "How many queries do I need?"},
        "observations": [
            {"id": "o1", "traceId": "t1", "type": "RETRIEVER", "input": "How many queries do I need?",
             "output": [{"page_content": "Fifty queries", "id": "faq.md#1"}]},
        ],
    }  # fmt: skip
    log = tmp_path / "trace.json"
    log.write_text(json.dumps(trace), encoding="utf-8")
    records = [item for item in read_log(log, "langfuse") if hasattr(item, "query")]
    assert [r.query for r in records] == ["How many queries do I need?"]
