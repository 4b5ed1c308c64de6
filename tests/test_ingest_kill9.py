"""An ingest killed with SIGKILL, between its batches or inside one's transaction, leaves a consistent workspace, and a
rerun ends where an uninterrupted run ends: the same documents, live chunks and duplicate groups, none pending. Its
chunking worker process does not outlive it."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from testset_builder.config import ChunkingConfig
from testset_builder.corpus.dedup import duplicate_groups
from testset_builder.corpus.ingest import ingest
from testset_builder.corpus.loaders import stream_sources
from testset_builder.store import corpus as stored
from testset_builder.store import open_workspace
from testset_builder.store.rows import live_duplicate_groups

pytestmark = pytest.mark.slow
CONFIG = ChunkingConfig(size=120, overlap=10)
SENTENCES = [
    "Pooling depth decides how many candidates each retriever contributes to judging.",
    "Recall at k counts the relevant chunks among the first k results.",
    "Graded gains reward highly relevant chunks at the top of the ranking.",
    "Reviewers disagree most on partially relevant passages.",
]

# The child ingests in batches of 20 documents and pauses where it is told to, so that the kill lands there.
CHILD = textwrap.dedent(
    """
    import sys, time
    from testset_builder.config import ChunkingConfig
    from testset_builder.corpus import ingest as ingest_module
    from testset_builder.corpus.loaders import stream_sources
    from testset_builder.store import corpus as stored, open_workspace

    corpus, workspace, where = sys.argv[1:4]
    ingest_module.BATCH_DOCUMENTS = 20
    if where == "between batches":
        write = ingest_module._Run.write
        ingest_module._Run.write = lambda self, batch: (write(self, batch), time.sleep(0.3))
    elif where.startswith("while grouping"):  # keys spilled to files, blocks not yet written: a marker, then a pause
        from pathlib import Path
        from testset_builder.store import duplicates
        write_blocks = duplicates._write_blocks
        def paused(db, entries):
            Path(where.split(":", 1)[1]).touch()
            time.sleep(30)
            write_blocks(db, entries)
        duplicates._write_blocks = paused
    elif where.startswith("while recording files"):  # the JSONL files recorded, the transaction open: a marker
        from pathlib import Path
        record = stored.put_record_files
        def recorded(*args):
            record(*args)
            Path(where.split(":", 1)[1]).touch()
            time.sleep(30)
        stored.put_record_files = recorded
    else:
        put = stored.put_source_files
        stored.put_source_files = lambda db, files: (put(db, files), time.sleep(0.3))
    with open_workspace(workspace, create=True) as ws:
        ingest_module.ingest(ws, stream_sources([corpus]), ChunkingConfig(size=120, overlap=10))
    """
)


def make_corpus(folder: Path) -> Path:
    folder.mkdir()
    for i in range(120):
        text = " ".join(SENTENCES[(i + j) % 4] for j in range(3 + i % 5))
        if i % 10 == 3:
            text = " ".join(SENTENCES)  # exact copies across files: duplicate groups span batches
        (folder / f"d{i:03d}.txt").write_text(text, encoding="utf-8")
    return folder


def make_jsonl_corpus(folder: Path) -> Path:
    """The documents of :func:`make_corpus`, 20 to a JSONL file."""
    texts = make_corpus(folder.parent / f"{folder.name}-texts")
    folder.mkdir()
    for part in range(6):
        lines = [
            json.dumps({"_id": f"d{i:03d}", "text": (texts / f"d{i:03d}.txt").read_text(encoding="utf-8")})
            for i in range(part * 20, part * 20 + 20)
        ]
        (folder / f"part{part}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def documents_stored(db_path: Path) -> int:
    try:
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5)
        try:
            return db.execute("SELECT COUNT(*) FROM documents").fetchone()[0]
        finally:
            db.close()
    except sqlite3.OperationalError:  # not created yet
        return 0


def writing(db_path: Path) -> bool:
    """Whether another connection holds the write lock (a transaction is open)."""
    db = sqlite3.connect(db_path, timeout=0, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        db.close()


def killed_after(corpus: Path, workspace: Path, where: str, documents: int) -> int:
    process = subprocess.Popen([sys.executable, "-c", CHILD, str(corpus), str(workspace), where])
    deadline = time.monotonic() + 120
    while documents_stored(workspace / "testset.db") < documents and time.monotonic() < deadline:
        assert process.poll() is None, "the ingest ended before the kill point"
        time.sleep(0.02)
    while where == "inside a transaction" and not writing(workspace / "testset.db"):
        assert process.poll() is None, "the ingest ended before the kill point"
        time.sleep(0.01)
    workers = children(process.pid)
    process.send_signal(signal.SIGKILL)
    process.wait()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in workers), "a worker outlived the killed ingest"
    return documents_stored(workspace / "testset.db")


def children(pid: int) -> list[int]:
    """The process's child processes (its chunking worker and multiprocessing's resource tracker)."""
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return False


def final_state(workspace: Path):
    with open_workspace(workspace) as ws:
        assert ws.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        live = stored.live_chunk_texts(ws.db)
        groups: dict[str, list[str]] = {}
        for chunk_id, (group_id, _) in sorted(live_duplicate_groups(ws.db).items()):
            groups.setdefault(group_id, []).append(chunk_id)
        documents = ws.db.execute("SELECT doc_id, content_sha256 FROM documents ORDER BY doc_id").fetchall()
        pending = ws.db.execute("SELECT COUNT(*) FROM chunk_dedup_pending").fetchone()[0]
        reference = duplicate_groups([c for c, _ in live], [t for _, t in live])
    assert sorted(sorted(m) for m in groups.values()) == sorted(m for _, m in reference)
    return [tuple(d) for d in documents], [tuple(c) for c in live], sorted(sorted(m) for m in groups.values()), pending


@pytest.mark.parametrize("where", ["between batches", "inside a transaction"])
def test_an_ingest_killed_mid_run_is_finished_by_a_rerun_with_the_uninterrupted_result(tmp_path, where):
    corpus = make_corpus(tmp_path / "corpus")
    with open_workspace(tmp_path / "reference", create=True) as ws:
        ingest(ws, stream_sources([corpus]), CONFIG)
    at_kill = killed_after(corpus, tmp_path / "killed", where, 40)
    assert 40 <= at_kill < 120 and at_kill % 20 == 0  # whole batches only: the open one was rolled back
    with open_workspace(tmp_path / "killed") as ws:
        summary = ingest(ws, stream_sources([corpus]), CONFIG)
    assert (summary.new, summary.unchanged) == (120 - at_kill, at_kill)
    documents, chunks, groups, pending = final_state(tmp_path / "killed")
    assert (documents, chunks, groups, pending) == final_state(tmp_path / "reference")
    assert groups and pending == 0


def test_an_ingest_killed_while_sorting_its_keys_leaves_no_spill_and_a_rerun_gives_the_uninterrupted_result(
    tmp_path,
):
    """Killed while grouping, with the LSH keys spilled to files beside the workspace and not yet in blocks: the
    rerun groups what was pending, and removes the spill the killed run left."""
    corpus = make_corpus(tmp_path / "corpus")
    with open_workspace(tmp_path / "reference", create=True) as ws:
        ingest(ws, stream_sources([corpus]), CONFIG)
    marker = tmp_path / "sorting"
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(corpus), str(tmp_path / "killed"), f"while grouping:{marker}"]
    )
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline:
        assert process.poll() is None, "the ingest ended before it grouped"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert list((tmp_path / "killed").glob("lsh-spill-*")), "the kill landed while keys were spilled"
    with open_workspace(tmp_path / "killed") as ws:
        assert ws.db.execute("SELECT COUNT(*) FROM chunk_dedup_pending").fetchone()[0] > 0
        ingest(ws, stream_sources([corpus]), CONFIG)
    assert not list((tmp_path / "killed").glob("lsh-spill-*"))
    documents, chunks, groups, pending = final_state(tmp_path / "killed")
    assert (documents, chunks, groups, pending) == final_state(tmp_path / "reference")
    assert groups and pending == 0


@pytest.mark.parametrize("where", ["between batches", "while recording files"])
def test_a_jsonl_ingest_killed_mid_run_is_finished_by_a_rerun_that_then_leaves_its_files_unread(tmp_path, where):
    """JSONL files are recorded (so that a rerun need not parse them) in the run's last transactions: killed
    before or inside them, the rerun parses them again and ends as an uninterrupted run, files recorded."""
    corpus = make_jsonl_corpus(tmp_path / "corpus")
    with open_workspace(tmp_path / "reference", create=True) as ws:
        ingest(ws, stream_sources([corpus]), CONFIG)
    marker = tmp_path / "recording"
    if where == "between batches":
        killed_after(corpus, tmp_path / "killed", where, 40)
    else:
        process = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(corpus), str(tmp_path / "killed"), f"{where}:{marker}"]
        )
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline:
            assert process.poll() is None, "the ingest ended before it recorded its files"
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait()
    with open_workspace(tmp_path / "killed") as ws:
        assert not stored.current_record_files(ws.db, CONFIG.chunker_sha256())  # none recorded by the killed run
        ingest(ws, stream_sources([corpus]), CONFIG)
        recorded = stored.current_record_files(ws.db, CONFIG.chunker_sha256())
    documents, chunks, groups, pending = final_state(tmp_path / "killed")
    assert (documents, chunks, groups, pending) == final_state(tmp_path / "reference")
    assert sorted(Path(p).name for p in recorded) == sorted(p.name for p in corpus.glob("*.jsonl"))
