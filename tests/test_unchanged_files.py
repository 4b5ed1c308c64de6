"""A rerun does not read a file whose size and modification time are those it had when last chunked (as git's index),
yet counts its document as unchanged; a file modified too close to that moment to tell ('racy') is read again, and
``--rehash`` reads every file."""

from __future__ import annotations

import os
import time
from pathlib import Path

from testset_builder.config import ChunkingConfig
from testset_builder.corpus.ingest import ingest
from testset_builder.corpus.loaders import stream_sources
from testset_builder.store import open_workspace

CONFIG = ChunkingConfig(size=200, overlap=20)
DAY_NS = 86_400 * 10**9


def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    (folder / "sub").mkdir(parents=True)
    for i in range(3):
        (folder / f"d{i}.txt").write_text(f"Document {i} is about pooled relevance judgments. " * 8, encoding="utf-8")
    (folder / "sub" / "e.md").write_text("# Notes\n\nRecall at k and nDCG at ten. " * 5, encoding="utf-8")
    return folder


def age(folder: Path) -> None:
    """Every file's mtime a day back: well before any chunking, so none is racy."""
    for path in folder.rglob("*.*"):
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns - DAY_NS))


def edit_keeping_stat(path: Path, text: str) -> None:
    """New content of the same size and the same mtime: invisible to a stat."""
    stat = path.stat()
    assert len(text.encode()) == stat.st_size
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_a_file_with_its_stat_unchanged_is_not_read_again_but_counts_as_unchanged(tmp_path):
    folder = corpus(tmp_path)
    age(folder)
    with open_workspace(tmp_path / "ws", create=True) as ws:
        first = ingest(ws, stream_sources([folder]), CONFIG)
        edit_keeping_stat(folder / "d0.txt", (folder / "d0.txt").read_text().replace("pooled", "POOLED"))
        loaded = stream_sources([folder])
        second = ingest(ws, loaded, CONFIG)
        rehashed = ingest(ws, stream_sources([folder]), CONFIG, rehash=True)
    assert (first.new, second.documents, second.unchanged, second.changed) == (4, 4, 4, 0)
    assert second.chunks_added == 0 and second.removed == 0
    assert {Path(p).name for p in loaded.read} == {"d0.txt", "d1.txt", "d2.txt", "e.md"}  # nothing looks gone
    assert (rehashed.changed, rehashed.unchanged) == (1, 3)


def test_a_file_whose_stat_changed_is_read_and_rechunked_and_a_new_file_added(tmp_path):
    folder = corpus(tmp_path)
    age(folder)
    with open_workspace(tmp_path / "ws", create=True) as ws:
        ingest(ws, stream_sources([folder]), CONFIG)
        (folder / "d1.txt").write_text("A changed document about judging. " * 9, encoding="utf-8")
        (folder / "new.txt").write_text("A new document about graded gains. " * 9, encoding="utf-8")
        summary = ingest(ws, stream_sources([folder]), CONFIG)
    assert (summary.new, summary.changed, summary.unchanged, summary.removed) == (1, 1, 3, 0)


def test_a_file_modified_within_the_racy_window_of_its_recording_is_read_again(tmp_path):
    folder = corpus(tmp_path)
    with open_workspace(tmp_path / "ws", create=True) as ws:
        ingest(ws, stream_sources([folder]), CONFIG)  # files written just now: their mtime is racy
        edit_keeping_stat(folder / "d2.txt", (folder / "d2.txt").read_text().replace("pooled", "POOLED"))
        summary = ingest(ws, stream_sources([folder]), CONFIG)
    assert (summary.changed, summary.unchanged) == (1, 3)


def test_a_racy_file_read_again_and_unchanged_is_trusted_on_the_next_run(tmp_path):
    folder = corpus(tmp_path)
    with open_workspace(tmp_path / "ws", create=True) as ws:
        ingest(ws, stream_sources([folder]), CONFIG)
        time.sleep(0.01)
        age(folder)  # now clearly older than the next run's stat
        ingest(ws, stream_sources([folder]), CONFIG)  # reads them (stat changed), finds them unchanged, records them
        edit_keeping_stat(folder / "d0.txt", (folder / "d0.txt").read_text().replace("pooled", "POOLED"))
        summary = ingest(ws, stream_sources([folder]), CONFIG)
    assert (summary.changed, summary.unchanged) == (0, 4)


def test_a_file_is_read_again_when_the_chunker_config_changes(tmp_path):
    folder = corpus(tmp_path)
    age(folder)
    with open_workspace(tmp_path / "ws", create=True) as ws:
        ingest(ws, stream_sources([folder]), CONFIG)
        summary = ingest(ws, stream_sources([folder]), ChunkingConfig(size=300, overlap=20))
    assert (summary.new, summary.changed, summary.unchanged) == (0, 4, 0)


def test_a_rerun_checks_its_files_against_the_documents_index_not_the_rows_that_hold_their_texts(tmp_path):
    from testset_builder.store.corpus import CURRENT_SOURCE_FILES_SQL

    with open_workspace(tmp_path / "ws", create=True) as ws:
        ingest(ws, stream_sources([corpus(tmp_path)]), CONFIG)
        plan = " ".join(row[-1] for row in ws.db.execute(f"EXPLAIN QUERY PLAN {CURRENT_SOURCE_FILES_SQL}", ("x",)))
    assert "COVERING INDEX documents_state" in plan  # a document's row holds its text: a 20 KB walk to its state


def test_a_rerun_asks_of_the_boilerplate_marks_through_indexes_not_every_chunk_row(tmp_path):
    from testset_builder.store.corpus import BOILERPLATE_COUNTS_SQL, UNEXAMINED_CHUNKS_SQL

    with open_workspace(tmp_path / "ws", create=True) as ws:
        ingest(ws, stream_sources([corpus(tmp_path)]), CONFIG)
        plans = [
            " ".join(row[-1] for row in ws.db.execute(f"EXPLAIN QUERY PLAN {sql}", args))
            for sql, args in ((BOILERPLATE_COUNTS_SQL, ()), (UNEXAMINED_CHUNKS_SQL, ("", 10)))
        ]
    assert "INDEX chunks_marked" in plans[0] and "INDEX chunks_unexamined" in plans[1]


def test_a_folder_given_twice_counts_nothing_new_and_removes_under_the_guard_as_given_once(tmp_path, monkeypatch):
    from testset_builder.corpus import ingest as ingesting

    monkeypatch.setattr(ingesting, "BATCH_DOCUMENTS", 2)  # a copy is read before its twin is written
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(20):
        (folder / f"d{i:02d}.txt").write_text(f"Document {i} is about pooled relevance judgments. " * 4, "utf-8")
    with open_workspace(tmp_path / "ws", create=True) as ws:
        ingest(ws, stream_sources([folder, folder]), CONFIG)
        for i in range(10):
            (folder / f"d{i:02d}.txt").write_text(f"Document {i} changed its text on recall at ten. " * 4, "utf-8")
        for i in range(15, 20):
            (folder / f"d{i:02d}.txt").unlink()
        summary = ingest(ws, stream_sources([folder, folder]), CONFIG)  # 5 of 20 gone: under the guard's 25%
    assert (summary.new, summary.removed) == (0, 5)
    assert summary.changed >= 10 and summary.changed + summary.unchanged == 30  # a copy read after its twin was
    # written finds it unchanged
