"""A rerun does not parse a JSONL file whose size and modification time are those it had when it was last read whole
(as a file read as one document, see test_unchanged_files.py): its documents count as unchanged. A file whose stat
changed is hashed: parsed again when its bytes changed, not when they are those it was read from (a file touched, or
written just before it was read). A file with a line skipped is parsed every time (so its skips are reported again),
and a file is parsed again when it is read with other fields or cut with another config."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from testset_builder.config import ChunkingConfig
from testset_builder.corpus.ingest import ingest
from testset_builder.corpus.loaders import load_jsonl, stream_sources
from testset_builder.errors import InputError
from testset_builder.store import corpus as stored
from testset_builder.store import open_workspace

CONFIG = ChunkingConfig(size=200, overlap=20)
DAY_NS = 86_400 * 10**9


def write_jsonl(path: Path, texts: dict[str, str]) -> None:
    path.write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in texts.items()), encoding="utf-8")


def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    for part in range(3):
        texts = {
            f"p{part}-d{i}": f"Document {i} of part {part} is about pooled relevance judgments. " * 6 for i in range(4)
        }
        write_jsonl(folder / f"part{part}.jsonl", texts)
    return folder


def age(folder: Path, days: int = 1) -> None:
    """Every file's mtime ``days`` back: well before any chunking, so none is racy."""
    for path in folder.rglob("*.*"):
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns - days * DAY_NS))


def overwrite_keeping_stat(path: Path, data: bytes) -> None:
    """New bytes of the same size and the same mtime: invisible to a stat."""
    stat = path.stat()
    assert len(data) == stat.st_size
    path.write_bytes(data)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def live_texts(ws) -> dict[str, str]:
    return {doc_id: stored.live_document(ws.db, doc_id)[0] for doc_id in stored.document_ids(ws.db)}


def test_a_jsonl_file_with_its_stat_unchanged_is_not_parsed_again_and_its_documents_count_as_unchanged(tmp_path):
    folder = corpus(tmp_path)
    age(folder)
    expected = {d.doc_id: d.text for p in sorted(folder.glob("*.jsonl")) for d in load_jsonl(p).documents}
    with open_workspace(tmp_path / "ws", create=True) as ws:
        first = ingest(ws, stream_sources([folder]), CONFIG)
        garbled = folder / "part1.jsonl"
        overwrite_keeping_stat(garbled, b"{" * garbled.stat().st_size)  # parsing it would skip (or, strict, refuse)
        loaded = stream_sources([folder], strict=True)
        second = ingest(ws, loaded, CONFIG)
        texts = live_texts(ws)
        with pytest.raises(InputError, match="not valid JSON"):
            ingest(ws, stream_sources([folder], strict=True), CONFIG, rehash=True)  # --rehash parses every file
    assert (first.new, second.documents, second.unchanged, second.changed, second.removed) == (12, 12, 12, 0, 0)
    assert second.chunks_added == 0 and second.skipped == 0
    assert {Path(p).name for p in loaded.read} == {"part0.jsonl", "part1.jsonl", "part2.jsonl"}  # nothing looks gone
    assert texts == expected


def test_a_jsonl_file_changed_to_the_same_size_is_parsed_again_and_its_changed_document_rechunked(tmp_path):
    folder = corpus(tmp_path)
    age(folder, days=2)
    with open_workspace(tmp_path / "ws", create=True) as ws:
        ingest(ws, stream_sources([folder]), CONFIG)
        edited = folder / "part2.jsonl"
        before = edited.stat().st_size
        edited.write_text(edited.read_text(encoding="utf-8").replace("Document 3", "Document X"), encoding="utf-8")
        age(folder)  # a new mtime, still well before this run: only the size is the same
        summary = ingest(ws, stream_sources([folder]), CONFIG)
        texts = live_texts(ws)
    assert edited.stat().st_size == before
    assert (summary.new, summary.changed, summary.unchanged, summary.removed) == (0, 1, 11, 0)
    assert texts["p2-d3"] == next(d.text for d in load_jsonl(edited).documents if d.doc_id == "p2-d3")
    assert texts["p2-d3"].startswith("Document X")


def test_a_line_dropped_from_a_jsonl_file_marks_its_document_removed_and_the_other_files_stay_unread(tmp_path):
    folder = corpus(tmp_path)
    age(folder, days=2)
    with open_workspace(tmp_path / "ws", create=True) as ws:
        ingest(ws, stream_sources([folder]), CONFIG)
        shortened = folder / "part0.jsonl"
        shortened.write_text("".join(shortened.read_text(encoding="utf-8").splitlines(True)[1:]), encoding="utf-8")
        age(folder)
        summary = ingest(ws, stream_sources([folder]), CONFIG)
        removed = stored.live_document(ws.db, "p0-d0")
    assert (summary.new, summary.changed, summary.unchanged, summary.removed) == (0, 0, 11, 1)
    assert removed is None


def test_a_jsonl_file_with_a_skipped_line_is_parsed_every_time_and_its_skip_reported_again(tmp_path):
    folder = corpus(tmp_path)
    with (folder / "part0.jsonl").open("a", encoding="utf-8") as handle:
        handle.write("not json\n")
    age(folder)
    with open_workspace(tmp_path / "ws", create=True) as ws:
        first = ingest(ws, stream_sources([folder]), CONFIG)
        loaded = stream_sources([folder])
        second = ingest(ws, loaded, CONFIG)
    assert (first.skipped, second.skipped, second.unchanged) == (1, 1, 12)
    assert [(Path(s.source).name, s.line) for s in loaded.skipped] == [("part0.jsonl", 5)]


def test_a_jsonl_file_is_parsed_again_when_read_with_other_fields_or_cut_with_another_config(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "docs.jsonl").write_text(
        "".join(
            json.dumps({"_id": f"d{i}", "text": f"Body {i} on graded gains. " * 9, "abstract": f"Abstract {i}. " * 9})
            + "\n"
            for i in range(3)
        ),
        encoding="utf-8",
    )
    age(folder)
    other_field = CONFIG.model_copy(update={"text_field": "abstract"})
    with open_workspace(tmp_path / "ws", create=True) as ws:
        ingest(ws, stream_sources([folder]), CONFIG)
        by_field = ingest(ws, stream_sources([folder], text_field="abstract"), other_field)
        back = ingest(ws, stream_sources([folder]), CONFIG)
        recut = ingest(ws, stream_sources([folder]), ChunkingConfig(size=300, overlap=20))
        text = stored.live_document(ws.db, "d1")[0]
    assert (by_field.changed, back.changed, recut.changed) == (3, 3, 3)
    assert text == "Body 1 on graded gains. " * 9


def test_a_jsonl_file_whose_documents_another_file_had_cut_otherwise_is_parsed_again(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    for folder in (first, second):
        folder.mkdir()
        write_jsonl(folder / "docs.jsonl", {f"d{i}": f"Document {i} on recall at ten. " * 9 for i in range(3)})
    age(tmp_path)
    other = ChunkingConfig(size=300, overlap=20)
    with open_workspace(tmp_path / "ws", create=True) as ws:
        ingest(ws, stream_sources([first]), CONFIG)
        ingest(ws, stream_sources([second]), other)  # the same documents and texts, cut with another config
        again = ingest(ws, stream_sources([first]), CONFIG)
        configs = {row[0] for row in ws.db.execute("SELECT config_sha256 FROM chunks WHERE removed_at IS NULL")}
    assert (again.changed, again.unchanged) == (3, 0)
    assert configs == {CONFIG.chunker_sha256()}


def test_a_jsonl_file_modified_within_the_racy_window_of_its_recording_is_parsed_again(tmp_path):
    folder = corpus(tmp_path)
    with open_workspace(tmp_path / "ws", create=True) as ws:
        ingest(ws, stream_sources([folder]), CONFIG)  # files written just now: their mtime is racy
        edited = folder / "part0.jsonl"
        overwrite_keeping_stat(edited, edited.read_bytes().replace(b"pooled", b"POOLED"))
        summary = ingest(ws, stream_sources([folder]), CONFIG)
    assert (summary.changed, summary.unchanged) == (4, 8)


def test_a_jsonl_file_written_just_before_it_was_read_and_left_alone_is_hashed_not_parsed(tmp_path):
    folder = corpus(tmp_path)
    with open_workspace(tmp_path / "ws", create=True) as ws:
        ingest(ws, stream_sources([folder]), CONFIG)  # files written just now: their mtime is racy
        loaded = stream_sources([folder])
        summary = ingest(ws, loaded, CONFIG)
    assert (summary.new, summary.changed, summary.unchanged, summary.removed) == (0, 0, 12, 0)
    assert loaded.records_read == []  # no file parsed
    assert {Path(p).name for p in loaded.read} == {"part0.jsonl", "part1.jsonl", "part2.jsonl"}


def test_a_touched_jsonl_file_is_hashed_not_parsed_and_its_new_stat_trusted_next_time(tmp_path):
    folder = corpus(tmp_path)
    age(folder, days=2)
    with open_workspace(tmp_path / "ws", create=True) as ws:
        ingest(ws, stream_sources([folder]), CONFIG)
        age(folder)  # new mtimes, the same bytes
        touched = stream_sources([folder], strict=True)
        second = ingest(ws, touched, CONFIG)
        garbled = folder / "part1.jsonl"
        overwrite_keeping_stat(garbled, b"{" * garbled.stat().st_size)  # hashing it would find it changed
        third = ingest(ws, stream_sources([folder], strict=True), CONFIG)
    assert (second.changed, second.unchanged, third.changed, third.unchanged) == (0, 12, 0, 12)
    assert touched.records_read == []


def test_a_jsonl_file_recorded_without_its_hash_is_parsed_when_its_stat_changed(tmp_path):
    folder = corpus(tmp_path)
    age(folder, days=2)
    with open_workspace(tmp_path / "ws", create=True) as ws:
        ingest(ws, stream_sources([folder]), CONFIG)
        ws.db.execute("UPDATE record_files SET sha256 = NULL")  # as recorded before migration 34
        ws.db.commit()
        age(folder)
        loaded = stream_sources([folder])
        summary = ingest(ws, loaded, CONFIG)
    assert (summary.changed, summary.unchanged) == (0, 12)
    assert sorted(Path(r.path).name for r in loaded.records_read) == ["part0.jsonl", "part1.jsonl", "part2.jsonl"]
