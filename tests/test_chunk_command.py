"""`testset-builder chunk`: a corpus into the workspace, incrementally, with bad input reported and skipped."""

from __future__ import annotations

import json

from testset_builder.cli import main
from testset_builder.store import open_workspace


def run_json(capsys, *args):
    code = main(["chunk", *args, "--json"])
    return code, json.loads(capsys.readouterr().out) if code == 0 else None


def live_chunks(workspace):
    with open_workspace(workspace) as ws:
        return {r[0] for r in ws.db.execute("SELECT chunk_id FROM chunks WHERE removed_at IS NULL")}


def test_rechunking_an_unchanged_corpus_does_nothing_and_changes_touch_only_their_documents(tmp_path, capsys):
    corpus, workspace = tmp_path / "corpus", tmp_path / "ws"
    corpus.mkdir()
    for i in range(5):
        (corpus / f"doc{i}.md").write_text(f"# Doc {i}\n\n" + "Retrieval matters. " * 40, encoding="utf-8")
    (corpus / "empty.txt").write_bytes(b"")
    args = [str(corpus), "--workspace", str(workspace), "--chunker", "markdown", "--size", "200", "--overlap", "20"]

    code, first = run_json(capsys, *args)
    assert code == 0 and first["new"] == 5 and first["chunks_added"] > 5
    assert first["skipped"] == 1 and first["skipped_by_reason"] == {"empty file": 1}
    ids = live_chunks(workspace)

    code, again = run_json(capsys, *args)
    assert (again["unchanged"], again["new"], again["changed"], again["chunks_added"], again["chunks_removed"]) == (
        5,
        0,
        0,
        0,
        0,
    )
    assert live_chunks(workspace) == ids

    (corpus / "doc1.md").write_text("# Doc 1\n\nRewritten entirely.", encoding="utf-8")
    (corpus / "doc4.md").unlink()
    code, changed = run_json(capsys, *args)
    assert (changed["changed"], changed["unchanged"], changed["removed"]) == (1, 3, 1)
    after = live_chunks(workspace)
    assert {i.split("#")[0] for i in ids - after} == {"doc1.md", "doc4.md"}
    assert {i.split("#")[0] for i in after - ids} == {"doc1.md"}
    with open_workspace(workspace) as ws:
        assert ws.db.execute("SELECT removed_at IS NOT NULL FROM documents WHERE doc_id = 'doc4.md'").fetchone()[0] == 1
        assert ws.db.execute("SELECT COUNT(*) FROM chunks WHERE doc_id = 'doc4.md'").fetchone()[0] > 0, "kept, marked"


def test_strict_turns_a_skip_into_exit_1(tmp_path, capsys):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "ok.txt").write_text("fine")
    (corpus / "bad.txt").write_bytes(b"\xff\xfe\x00\x00")
    assert main(["chunk", str(corpus), "--workspace", str(tmp_path / "ws"), "--strict"]) == 1
    assert "bad.txt: binary file" in capsys.readouterr().err


def test_the_human_summary_names_what_was_skipped(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "a", "text": "alpha"}\n{"_id": "b"}\n', encoding="utf-8")
    assert main(["chunk", str(corpus), "--workspace", str(tmp_path / "ws")]) == 0
    captured = capsys.readouterr()
    assert "1 documents (1 new" in captured.out and "1 skipped" in captured.out
    assert "corpus.jsonl:2: missing or empty text field 'text'" in captured.err


BASE = (
    "Recall at k measures the share of relevant chunks that the retriever places among the top k results for a query, "
    "and it is the first number to watch because nothing downstream can recover evidence that was never retrieved."
)


def test_exact_and_near_duplicate_chunks_are_grouped(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    records = [
        {"_id": "a", "text": BASE},
        {"_id": "b", "text": "  " + BASE.upper()},
        {"_id": "c", "text": BASE.replace("first number", "primary number")},
        {"_id": "d", "text": "Something else entirely: graded gains in nDCG and why ties are broken by document id."},
        {"_id": "e", "text": "Another unrelated chunk on reviewing proposals with several annotators and kappa."},
    ]
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    code, summary = run_json(
        capsys, str(corpus), "--workspace", str(tmp_path / "ws"), "--size", "2000", "--overlap", "0"
    )
    assert code == 0 and (summary["duplicate_groups"], summary["duplicate_chunks"]) == (1, 3)
    with open_workspace(tmp_path / "ws") as ws:
        rows = ws.db.execute(
            "SELECT c.doc_id, d.kind FROM chunk_duplicates d JOIN chunks c USING (chunk_id) ORDER BY c.doc_id"
        ).fetchall()
    assert [tuple(r) for r in rows] == [("a", "near"), ("b", "near"), ("c", "near")]


def test_exact_copies_form_an_exact_group():
    from testset_builder.corpus.dedup import duplicate_groups

    assert duplicate_groups(["x", "y", "z"], [BASE, BASE.upper() + "  ", "different text entirely here"]) == [
        ("exact", ["x", "y"])
    ]


def test_prechunked_input_keeps_its_ids_and_is_not_rechunked(tmp_path, capsys):
    corpus = tmp_path / "chunks.jsonl"
    long_text = "A chunk that the user already cut, longer than any default size. " * 40
    corpus.write_text(
        json.dumps({"_id": "kb-17#3", "text": long_text})
        + "\n"
        + json.dumps({"_id": "kb-18#0", "text": "short"})
        + "\n",
        encoding="utf-8",
    )
    code, summary = run_json(capsys, str(corpus), "--workspace", str(tmp_path / "ws"), "--chunker", "prechunked")
    assert code == 0 and summary["chunks_added"] == 2
    with open_workspace(tmp_path / "ws") as ws:
        rows = {r[0]: r[1] for r in ws.db.execute("SELECT chunk_id, text FROM chunks")}
    assert rows == {"kb-17#3": long_text, "kb-18#0": "short"}


def test_chunking_settings_come_from_a_config_and_flags_override_them(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n" + "Words about recall. " * 30, encoding="utf-8")
    config = tmp_path / "c.yaml"
    config.write_text(
        f"workspace: {tmp_path / 'from-config'}\nchunking: {{chunker: sentence, size: 120, overlap: 0}}\nllm:\n  "
        f"provider: {{kind: local, model: gemma-3-270m}}\n"
    )
    code, _ = run_json(capsys, str(tmp_path / "docs"), "--config", str(config))
    assert code == 0
    with open_workspace(tmp_path / "from-config") as ws:
        metadata = [json.loads(r[0]) for r in ws.db.execute("SELECT metadata FROM chunks")]
    assert {(m["chunker"], m["size"], m["overlap"]) for m in metadata} == {("sentence", 120, 0)}
    code, _ = run_json(
        capsys, str(tmp_path / "docs"), "--config", str(config), "--size", "300", "--workspace", str(tmp_path / "flags")
    )
    with open_workspace(tmp_path / "flags") as ws:
        sizes = {json.loads(r[0])["size"] for r in ws.db.execute("SELECT metadata FROM chunks")}
    assert sizes == {300}


def test_chunking_a_parent_folder_keeps_every_document_of_the_files_chunked_before(tmp_path, capsys):
    corpus, workspace = tmp_path / "corpus", tmp_path / "ws"
    (corpus / "docs").mkdir(parents=True)
    for i in range(3):
        (corpus / "docs" / f"d{i}.md").write_text(
            f"# Doc {i}\n\n" + "Recall counts found chunks. " * 20, encoding="utf-8"
        )
    (corpus / "claims.jsonl").write_text(
        "".join(json.dumps({"_id": f"c{i}", "text": f"claim number {i} about retrieval"}) + "\n" for i in range(40)),
        encoding="utf-8",
    )
    code, first = run_json(capsys, str(corpus / "docs"), str(corpus / "claims.jsonl"), "--workspace", str(workspace))
    assert code == 0 and first["documents"] == 43
    code, again = run_json(capsys, str(corpus), "--workspace", str(workspace))  # the parent folder this time
    assert code == 0 and again["documents"] == 43 and again["unchanged"] == 40  # the JSONL is read, not skipped
    with open_workspace(workspace) as ws:
        live = {r[0] for r in ws.db.execute("SELECT doc_id FROM documents WHERE removed_at IS NULL")}
    assert len(live) == 43 and {f"c{i}" for i in range(40)} <= live
    # the Markdown files' ids are now their paths under the parent: the old ids are removed, counted by source
    assert again["removed"] == 3 and sum(again["removed_by_source"].values()) == 3


def test_a_source_left_out_removes_nothing_and_a_large_removal_needs_allowing(tmp_path, capsys):
    corpus, workspace = tmp_path / "corpus", tmp_path / "ws"
    for folder in ("a", "b", "c"):
        (corpus / folder).mkdir(parents=True)
    for i in range(10):
        (corpus / ("a" if i < 5 else "b") / f"d{i}.md").write_text(f"Document {i}. " * 30, encoding="utf-8")
    (corpus / "c" / "extra.md").write_text("An extra document. " * 30, encoding="utf-8")
    ab = [str(corpus / "a"), str(corpus / "b"), "--workspace", str(workspace)]
    assert run_json(capsys, *ab)[1]["documents"] == 10
    code, partial = run_json(capsys, str(corpus / "a"), str(corpus / "c"), "--workspace", str(workspace))
    assert code == 0 and partial["removed"] == 0 and partial["new"] == 1  # b/ was not given: its documents stay
    for i in range(5, 10):
        (corpus / "b" / f"d{i}.md").unlink()
    (corpus / "b" / "keep.md").write_text("still here " * 30, encoding="utf-8")
    assert main(["chunk", *ab]) == 1
    err = capsys.readouterr().err
    assert "would mark 5 of 11 documents removed (more than 25%)" in err and "--allow-removal" in err
    with open_workspace(workspace) as ws:  # streamed: the new document is stored, nothing is marked removed
        assert ws.db.execute("SELECT COUNT(*) FROM documents WHERE removed_at IS NOT NULL").fetchone()[0] == 0
        assert ws.db.execute("SELECT COUNT(*) FROM documents WHERE removed_at IS NULL").fetchone()[0] == 12
    code, allowed = run_json(capsys, *ab, "--allow-removal")
    assert code == 0 and allowed["removed"] == 5 and allowed["unchanged"] == 6
    assert sorted(allowed["removed_by_source"]) == sorted(str(corpus / "b" / f"d{i}.md") for i in range(5, 10))
