"""`chunk --engine ray`: the corpus stage's batch functions run under Ray Data give what the in-process engine gives,
byte for byte, and a failure under Ray is a clear error that stores nothing.

Ray runs locally: one instance for the module (``ray.init(num_cpus=2)``), shut down after it."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import processes_left_in_session

from testset_builder.cli import main
from testset_builder.config import ChunkingConfig
from testset_builder.corpus import ingest as ingest_module
from testset_builder.corpus import ray_engine as ray_engine_module
from testset_builder.corpus.batches import chunk_batch, document_record, local_engine
from testset_builder.corpus.ingest import ingest
from testset_builder.corpus.loaders import load_sources
from testset_builder.corpus.ray_engine import ray_engine
from testset_builder.errors import EngineError
from testset_builder.store import corpus as stored
from testset_builder.store import duplicates, open_workspace


def small_corpus(n: int = 600) -> list[dict]:
    return [
        document_record_of(f"d{i:04}", f"Document {i} says something. " * (5 + i % 40) + ("Shared tail. " * 30))
        for i in range(n)
    ]


def document_record_of(doc_id: str, text: str) -> dict:
    return {"doc_id": doc_id, "text": text, "title": "", "source": "", "metadata": "{}"}


def in_batches(records: list[dict], size: int) -> list[list[dict]]:
    return [records[i : i + size] for i in range(0, len(records), size)]


@pytest.mark.slow
def test_the_ray_engine_gives_scifacts_batches_exactly_as_the_in_process_engine_does(scifact_dir, local_ray):
    records = [document_record(d) for d in load_sources([scifact_dir]).documents]
    config = ChunkingConfig(chunker="recursive", size=400, overlap=40)
    batches = in_batches(records, 1000)  # the last one short: batch boundaries must survive Ray's own blocks

    expected = list(local_engine(batches, config))
    got = list(ray_engine()(batches, config))

    assert len(got) == len(expected) == 6
    for (docs, chunks, signatures), (want_docs, want_chunks, want_signatures) in zip(got, expected):
        assert docs == want_docs
        assert [c["chunk_id"] for c in chunks] == [c["chunk_id"] for c in want_chunks]
        assert chunks == want_chunks  # texts, spans, metadata, text hashes: the same values of the same types
        assert signatures == want_signatures
    assert sum(len(chunks) for _, chunks, _ in got) > len(records)


def planted_duplicates(scifact_dir, folder):
    """SciFact documents copied (exact duplicates) and lightly edited (near duplicates) into a JSONL file of their
    own, so that both engines have duplicate groups of both kinds to find."""
    folder.mkdir()
    lines = (scifact_dir / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:40]
    planted = folder / "planted.jsonl"
    with planted.open("w", encoding="utf-8") as out:
        for i, line in enumerate(lines):
            record = json.loads(line)
            text = record["text"] if i % 2 else record["text"].replace(" the ", " a ", 1)
            out.write(json.dumps({"_id": f"copy-{record['_id']}", "title": record["title"], "text": text}) + "\n")
    return planted


def workspace_rows(workspace) -> dict[str, list[tuple]]:
    """What chunking stores, without the times it stored it at."""
    with sqlite3.connect(workspace / "testset.db") as db:
        return {
            "documents": db.execute(
                "SELECT doc_id, text, title, metadata, source, content_sha256, removed_at IS NULL FROM documents "
                "ORDER BY doc_id"
            ).fetchall(),
            "chunks": db.execute(
                'SELECT chunk_id, doc_id, text, start, "end", metadata, config_sha256, doc_sha256, text_sha256, '
                "normalised_sha256, removed_at IS NULL FROM chunks ORDER BY chunk_id"
            ).fetchall(),
            "duplicates": db.execute(
                "SELECT group_id, kind, chunk_id FROM chunk_duplicates ORDER BY group_id, chunk_id"
            ).fetchall(),
            "lsh": duplicates.key_entries(db),
        }


@pytest.mark.slow
def test_chunking_scifact_with_engine_ray_stores_the_documents_chunks_and_duplicate_groups_the_local_engine_does(
    scifact_dir, local_ray, tmp_path, capsys
):
    planted = planted_duplicates(scifact_dir, tmp_path / "planted")
    common = [str(scifact_dir), str(planted), "--size", "400", "--overlap", "40", "--json"]

    assert main(["chunk", *common, "--workspace", str(tmp_path / "local")]) == 0
    by_local = json.loads(capsys.readouterr().out)
    assert main(["chunk", *common, "--workspace", str(tmp_path / "ray"), "--engine", "ray"]) == 0
    by_ray = json.loads(capsys.readouterr().out)

    local, ray = workspace_rows(tmp_path / "local"), workspace_rows(tmp_path / "ray")
    assert len(local["documents"]) == 5183 + 40 and len(local["chunks"]) > 26_000
    kinds = {kind for _, kind, _ in local["duplicates"]}
    assert kinds == {"exact", "near"}, "the planted copies make groups of both kinds"
    for table in ("documents", "chunks", "duplicates", "lsh"):
        assert ray[table] == local[table], table
    assert {k: v for k, v in by_ray.items() if k != "seconds"} == {k: v for k, v in by_local.items() if k != "seconds"}


@pytest.mark.slow
def test_a_failed_ray_run_leaves_the_workspace_as_it_was(local_ray, tmp_path):
    corpus, workspace = tmp_path / "corpus", tmp_path / "ws"
    corpus.mkdir()
    for i in range(300):
        (corpus / f"doc{i:03}.md").write_text(f"# Doc {i}\n\n" + "Retrieval matters here. " * (10 + i % 30))
    config = ChunkingConfig(chunker="markdown", size=200, overlap=20)
    with open_workspace(workspace) as ws:
        ingest(ws, load_sources([corpus]), config)
    for i in range(0, 300, 3):  # a third changed, then a failure among them
        (corpus / f"doc{i:03}.md").write_text(f"# Doc {i}, revised\n\n" + "Recall matters more. " * (5 + i % 20))
    before = sorted(sqlite3.connect(workspace / "testset.db").iterdump())

    def fails_on_doc150(documents, config):
        if documents[0]["doc_id"] == "doc150.md":
            raise RuntimeError("planted failure")
        return chunk_batch(documents, config)

    with open_workspace(workspace) as ws, pytest.raises(EngineError, match=r"chunking document 'doc150\.md' failed"):
        ingest(ws, load_sources([corpus]), config, engine=ray_engine(chunk=fails_on_doc150))

    assert sorted(sqlite3.connect(workspace / "testset.db").iterdump()) == before
    with open_workspace(workspace) as ws:  # and a rerun that does not fail stores the revision
        summary = ingest(ws, load_sources([corpus]), config, engine=ray_engine())
    assert (summary.changed, summary.unchanged) == (100, 200)


@pytest.mark.slow
def test_a_failure_in_a_later_window_keeps_the_windows_before_and_a_rerun_completes_the_corpus(
    local_ray, tmp_path, monkeypatch
):
    corpus, workspace = tmp_path / "corpus", tmp_path / "ws"
    corpus.mkdir()
    for i in range(300):
        (corpus / f"doc{i:03}.md").write_text(f"# Doc {i}\n\n" + "Retrieval matters here. " * (10 + i % 30))
    config = ChunkingConfig(chunker="markdown", size=200, overlap=20)
    monkeypatch.setattr(ingest_module, "BATCH_DOCUMENTS", 50)  # six batches of 50
    monkeypatch.setattr(ray_engine_module, "WINDOW_DOCUMENTS", 100)  # three windows of two batches

    def fails_on_doc250(documents, config):
        if documents[0]["doc_id"] == "doc250.md":
            raise RuntimeError("planted failure")
        return chunk_batch(documents, config)

    with open_workspace(workspace) as ws, pytest.raises(EngineError, match=r"'doc250\.md' failed"):
        ingest(ws, load_sources([corpus]), config, engine=ray_engine(chunk=fails_on_doc250))
    with open_workspace(workspace) as ws:
        assert len(stored.known_documents(ws.db)) == 200, "the two windows before the failing one are stored"
        summary = ingest(ws, load_sources([corpus]), config, engine=ray_engine())
    assert (summary.unchanged, summary.new) == (200, 100)

    reference = tmp_path / "reference"
    with open_workspace(reference) as ws:
        ingest(ws, load_sources([corpus]), config)
    assert workspace_rows(workspace) == workspace_rows(reference)


@pytest.mark.slow
def test_batches_whose_documents_have_no_chunks_come_back_in_their_place(local_ray):
    config = ChunkingConfig(size=200, overlap=20)
    batches = [[document_record_of("empty", "")], small_corpus(3), [], [document_record_of("also-empty", "")]]

    got = list(ray_engine()(batches, config))

    assert got == list(local_engine(batches, config))
    assert [len(chunks) for _, chunks, _ in got] == [0, len(got[1][1]), 0, 0] and got[1][1]


@pytest.mark.slow
def test_a_chunk_function_raising_on_one_document_fails_the_run_naming_that_document(local_ray):
    def fails_on_d0417(documents, config):
        if documents[0]["doc_id"] == "d0417":
            raise ValueError("planted failure")
        return chunk_batch(documents, config)

    with pytest.raises(EngineError) as failed:
        list(ray_engine(chunk=fails_on_d0417)(in_batches(small_corpus(), 250), ChunkingConfig(size=200, overlap=20)))

    assert str(failed.value) == "the Ray engine failed: chunking document 'd0417' failed: ValueError: planted failure"


@pytest.mark.slow
def test_a_ray_worker_that_dies_ends_the_run_with_an_error_naming_the_documents_it_held(local_ray):
    def kills_its_worker_on_d0417(documents, config):
        if documents[0]["doc_id"] == "d0417":
            os._exit(3)
        return chunk_batch(documents, config)

    with pytest.raises(EngineError) as failed:
        list(ray_engine(chunk=kills_its_worker_on_d0417)([small_corpus()], ChunkingConfig(size=200, overlap=20)))

    message = str(failed.value)
    assert message.startswith("the Ray engine failed while chunking and signing 600 documents ('d0000' to 'd0599')")
    assert "WorkerCrashedError" in message and "\n" not in message


def test_without_ray_installed_engine_ray_says_which_extra_to_install(tmp_path, monkeypatch, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "a", "text": "alpha beta gamma"}\n', encoding="utf-8")
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now fails as if it were not installed

    code = main(["chunk", str(corpus), "--workspace", str(tmp_path / "ws"), "--engine", "ray"])

    assert code == 1
    assert 'pip install "testset-builder[ray]"' in capsys.readouterr().err


def test_a_ray_address_nothing_answers_at_is_an_error_before_the_workspace_is_made(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "a", "text": "alpha beta gamma"}\n', encoding="utf-8")
    with socket.socket() as probe:  # a port that was free a moment ago: nothing listens there
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    args = ["chunk", str(corpus), "--workspace", str(tmp_path / "ws"), "--engine", "ray"]
    code = main([*args, "--ray-address", f"127.0.0.1:{port}"])

    assert code == 1 and f"could not reach the Ray cluster at 127.0.0.1:{port}" in capsys.readouterr().err
    assert not (tmp_path / "ws").exists()


def test_a_ray_address_without_engine_ray_is_refused(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"_id": "a", "text": "alpha beta gamma"}\n', encoding="utf-8")

    code = main(["chunk", str(corpus), "--workspace", str(tmp_path / "ws"), "--ray-address", "head:6379"])

    assert code == 1 and "--ray-address needs --engine ray" in capsys.readouterr().err
    assert not (tmp_path / "ws").exists()


@pytest.mark.slow
def test_engine_ray_in_its_own_process_starts_a_private_ray_and_leaves_no_ray_process_behind(scifact_dir, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    lines = (scifact_dir / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:300]
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["chunk", str(corpus), "--workspace", str(tmp_path / "local")]) == 0

    command = [str(Path(sys.executable).parent / "testset-builder"), "chunk", str(corpus), "--engine", "ray"]
    run = subprocess.Popen(  # a session of its own: every process Ray starts for it stays in it
        [*command, "--workspace", str(tmp_path / "ray")], start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    out, _ = run.communicate()

    assert run.returncode == 0 and "300 documents (300 new" in out
    assert processes_left_in_session(run.pid) == [], "ray.shutdown stopped what ray.init started"
    assert workspace_rows(tmp_path / "ray") == workspace_rows(tmp_path / "local")
