"""Labels anchored to spans: locating a quote, the coverage rule, evidence from a chat generator, document text
versions kept across a re-chunk, and what a release says about spans (meta/chunks.jsonl, meta/evidence.jsonl)."""

from __future__ import annotations

import asyncio
import json

import pytest
from fake_provider import FakeProvider, quoting

from testset_builder.config import ChunkingConfig, SynthesizeConfig
from testset_builder.corpus.ingest import ingest
from testset_builder.corpus.loaders import LoadResult
from testset_builder.llm import LLMClient
from testset_builder.llm.roles import Roles
from testset_builder.questions import clean, split_evidence
from testset_builder.records import Document, Judgment, JudgmentSource, JudgmentStatus, Query, QueryOrigin
from testset_builder.spans import coverage, covers, locate
from testset_builder.stages.release import load_release, write_release
from testset_builder.stages.synthesize import synthesize
from testset_builder.store import corpus as stored_corpus
from testset_builder.store import open_workspace, rows
from testset_builder.store.rows import content_sha256


# spans, pure --------------------------------------------------------------------------------------------------
def test_a_chunk_inherits_a_label_when_it_covers_at_least_the_wanted_share_of_the_anchor():
    anchor = (100, 200)
    assert coverage(anchor, (0, 150)) == 0.5 and covers(anchor, (0, 150), 0.5)
    assert coverage(anchor, (0, 149)) == 0.49 and not covers(anchor, (0, 149), 0.5)
    assert coverage(anchor, (50, 400)) == 1.0 and covers(anchor, (120, 180), 0.6)
    assert not covers(anchor, (200, 300), 0.0)  # touching is not covering, even at a threshold of 0
    assert covers((10, 10), (5, 20), 0.5) and not covers((10, 10), (10, 10), 0.5)  # an empty anchor: its position


def test_a_quote_is_found_verbatim_then_with_whitespace_runs_as_one_space_nearest_the_old_offset():
    text = "Alpha beta.  Gamma\ndelta epsilon. Alpha beta."
    assert locate("Alpha beta.", text) == (0, 11)
    assert locate("Alpha beta.", text, near=30) == (34, 45)  # the occurrence nearest the old offset
    start, end = locate("beta. Gamma delta", text)
    assert text[start:end] == "beta.  Gamma\ndelta"
    assert locate("gamma delta", text) is None and locate("  ", text) is None


def test_a_chat_answer_gives_its_question_and_its_evidence_quote_apart():
    question, quote = split_evidence('Query: what lowers fracture risk?\nEvidence: "Vitamin D reduced fractures."')
    assert clean(question) == "what lowers fracture risk?" and quote == "Vitamin D reduced fractures."
    inline, quote = split_evidence("what lowers fracture risk? Evidence: …reduced fractures by 22%...")
    assert clean(inline) == "what lowers fracture risk?" and quote == "reduced fractures by 22%"
    assert split_evidence("what lowers fracture risk?") == ("what lowers fracture risk?", None)


# evidence from a chat generator ---------------------------------------------------------------------------------
def test_a_chat_generator_quotes_its_evidence_and_the_source_label_records_where_it_lies(docs_workspace):
    workspace = docs_workspace
    provider = FakeProvider(quoting, prompt_style="chat")
    client = LLMClient(provider, workspace, "synthesize")
    settings = SynthesizeConfig(questions=6, mine=False, critic=False, styles={"natural": 1.0})
    summary = asyncio.run(synthesize(workspace, Roles.single(client, "fake-model"), settings))
    assert summary.made == 6
    assert "two lines" in provider.history[0].messages[0].content  # the chat prompt asks for the evidence
    labels = [j for j in rows.iter_judgments(workspace.db) if j.source is JudgmentSource.synthetic_source]
    with_evidence = [j for j in labels if j.evidence is not None]
    assert with_evidence, "no source label got its evidence span"
    for label in with_evidence:
        chunk = rows.get_chunk(workspace.db, label.chunk_id)
        document = rows.get_document(workspace.db, chunk.doc_id)
        span = label.evidence
        assert chunk.start <= span.start < span.end <= chunk.end
        assert document.text[span.start : span.end] == span.text
        assert span.doc_sha256 == content_sha256(document.text)
        assert "  " not in span.text or "  " in document.text[span.start : span.end]
    again = asyncio.run(synthesize(workspace, Roles.single(client, "fake-model"), settings))
    assert again.calls == 0 and again.already_made == 6  # the new prompt's answers are cached like any

    summary = write_release(workspace, "1.0.0")
    release = load_release(summary.path)
    assert "meta/evidence.jsonl" in release.manifest["files"]
    for label in with_evidence:
        row = release.evidence[(label.query_id, label.chunk_id)]
        assert (row["start"], row["end"], row["text"]) == (
            label.evidence.start,
            label.evidence.end,
            label.evidence.text,
        )
    assert all(span["doc_sha256"] for span in release.chunk_spans.values())


def test_a_base_model_prompt_asks_for_no_evidence_and_its_labels_have_none(docs_workspace):
    provider = FakeProvider(lambda request: " how does recall at ten treat ranking order?")
    client = LLMClient(provider, docs_workspace, "synthesize")
    settings = SynthesizeConfig(questions=2, mine=False, critic=False, styles={"natural": 1.0}, dedupe=False)
    asyncio.run(synthesize(docs_workspace, Roles.single(client, "fake-model"), settings))
    assert "Evidence" not in provider.history[0].prompt
    assert all(j.evidence is None for j in rows.iter_judgments(docs_workspace.db))


# document versions -------------------------------------------------------------------------------------------
def load(*documents: Document) -> LoadResult:
    return LoadResult(documents=list(documents))


def test_a_changed_document_keeps_its_old_text_and_its_old_chunks_and_labels_still_point_into_it(tmp_path):
    first = Document(doc_id="d", text="Recall counts relevant chunks found. Precision counts what is relevant.")
    second = Document(doc_id="d", text="Intro added here. " + first.text + " And a new end.")
    config = ChunkingConfig(chunker="recursive", size=40, overlap=0)
    with open_workspace(tmp_path / "ws") as ws:
        ingest(ws, load(first), config)
        old_chunks = rows.live_chunks_of(ws.db, "d")
        with ws.transaction() as db:
            rows.put_queries(db, [Query(query_id="q", text="what is recall?", origin=QueryOrigin.real)])
            rows.add_judgments(
                db,
                [
                    Judgment(
                        judgment_id="j", query_id="q", chunk_id=old_chunks[0].chunk_id, grade=2,
                        source=JudgmentSource.human, reviewer="ann", status=JudgmentStatus.final,
                    )
                ],
            )  # fmt: skip
        ingest(ws, load(second), config)  # the document changed: re-chunked, its old text kept as a version
        old_sha, new_sha = content_sha256(first.text), content_sha256(second.text)
        assert stored_corpus.document_versions(ws.db, "d") == [old_sha, new_sha]
        assert stored_corpus.document_text(ws.db, "d", old_sha) == first.text
        assert stored_corpus.document_text(ws.db, "d", new_sha) == second.text
        versions = {chunk_id: sha for chunk_id, sha in ws.db.execute("SELECT chunk_id, doc_sha256 FROM chunks")}
        live = rows.live_chunks_of(ws.db, "d")
        for chunk in live:
            assert versions[chunk.chunk_id] == new_sha and second.text[chunk.start : chunk.end] == chunk.text
        replaced = [c for c in old_chunks if c.chunk_id not in {n.chunk_id for n in live}]
        assert replaced and all(versions[c.chunk_id] == old_sha for c in replaced)
        span = ws.db.execute('SELECT doc_id, doc_sha256, start, "end" FROM judgment_spans').fetchone()
        assert tuple(span) == ("d", old_sha, old_chunks[0].start, old_chunks[0].end)
        assert first.text[span[2] : span[3]] == old_chunks[0].text  # the span still has its referent


def test_a_document_edited_reverted_and_edited_again_is_chunked_every_time_and_keeps_each_text_once(tmp_path):
    original = Document(doc_id="d", text="Recall counts relevant chunks found. Precision counts what is relevant.")
    edited = Document(doc_id="d", text=original.text + " One sentence appended.")
    config = ChunkingConfig(chunker="recursive", size=40, overlap=0)
    with open_workspace(tmp_path / "ws") as ws:
        for document in (original, edited, original, edited, original):  # each text is kept already the 2nd time
            summary = ingest(ws, load(document), config)
            assert [c.text for c in rows.live_chunks_of(ws.db, "d")] == [
                document.text[c.start : c.end] for c in rows.live_chunks_of(ws.db, "d")
            ]
        assert summary.changed == 1
        assert stored_corpus.document_versions(ws.db, "d") == [
            content_sha256(edited.text),
            content_sha256(original.text),
        ]
        assert stored_corpus.document_text(ws.db, "d", content_sha256(edited.text)) == edited.text


def test_a_release_says_which_document_text_each_chunk_span_refers_to(docs_workspace):
    ws = docs_workspace
    chunk = rows.live_chunks_of(ws.db, rows.live_chunk_rows(ws.db)[0][1])[0]
    with ws.transaction() as db:
        rows.put_queries(db, [Query(query_id="q", text="what is ndcg?", origin=QueryOrigin.real)])
        rows.add_judgments(
            db,
            [
                Judgment(
                    judgment_id="j", query_id="q", chunk_id=chunk.chunk_id, grade=1, source=JudgmentSource.human,
                    reviewer="ann", status=JudgmentStatus.final,
                )
            ],
        )  # fmt: skip
    release = load_release(write_release(ws, "1.0.0").path)
    lines = (release.path / "meta" / "chunks.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines == sorted(lines) and all(json.loads(line)["doc_sha256"] for line in lines)
    document = rows.get_document(ws.db, chunk.doc_id)
    assert release.chunk_spans[chunk.chunk_id] == {
        "doc_id": chunk.doc_id, "start": chunk.start, "end": chunk.end, "doc_sha256": content_sha256(document.text),
    }  # fmt: skip
    assert "meta/evidence.jsonl" not in release.manifest["files"]  # no judgment here had evidence


@pytest.mark.parametrize("answer", ["Query: what is recall?\nEvidence:", "Query: what is recall?\nEvidence: ..."])
def test_an_empty_evidence_line_is_no_evidence(answer):
    assert split_evidence(answer)[1] is None


def test_a_workspace_from_before_spans_gets_chunk_versions_and_judgment_spans_when_it_is_upgraded(tmp_path):
    import sqlite3

    from testset_builder.store.migrations import MIGRATIONS
    from testset_builder.store.workspace import DB_NAME

    root = tmp_path / "old"
    root.mkdir()
    db = sqlite3.connect(root / DB_NAME, isolation_level=None)
    db.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT)")
    for number in range(1, 11):  # the schema as it was before spans
        name, function = MIGRATIONS[number]
        function(db)
        db.execute("INSERT INTO schema_migrations VALUES (?, ?, 'then')", (number, name))
    text = "Recall counts relevant chunks. Precision counts relevant results."
    db.execute("INSERT INTO documents VALUES ('d', ?, '', '{}', '', ?, NULL, 'then')", (text, content_sha256(text)))
    db.execute("INSERT INTO chunks VALUES ('c1', 'd', ?, 0, 30, '{}', 'then', NULL, 'x')", (text[:30],))
    db.execute("INSERT INTO chunks VALUES ('c2', 'd', 'an older text', 40, 53, '{}', 'then', 'then', 'x')")
    db.execute("INSERT INTO queries VALUES ('q', 'what is recall?', 'real', NULL, NULL, NULL, 'then', '{}')")
    db.execute(
        "INSERT INTO judgments VALUES ('j', 'q', 'c1', 2, 'human', NULL, NULL, NULL, 'ann', 'final', NULL, NULL, ?)",
        ("2026-01-01T00:00:00+00:00",),
    )
    db.close()
    with open_workspace(root) as ws:
        versions = dict(ws.db.execute("SELECT chunk_id, doc_sha256 FROM chunks").fetchall())
        assert versions == {"c1": content_sha256(text), "c2": None}  # c2's span no longer holds: unknown
        span = ws.db.execute('SELECT doc_id, doc_sha256, start, "end", evidence_start FROM judgment_spans').fetchone()
        assert tuple(span) == ("d", content_sha256(text), 0, 30, None)
        (judgment,) = rows.iter_judgments(ws.db)
        assert judgment.evidence is None and judgment.grade == 2
