"""`chunk` at scale: a 1 GB corpus chunked with default settings (MB/s end to end, duplicate detection included, and
peak RSS), then one file added, one file changed, the same file changed back, and nothing changed (seconds and peak
RSS of each run).

The corpus is generated deterministically from SciFact sentences (realistic text) into benchmarks/.cache/: a folder
of .txt files of 2-20 KB, with planted exact copies (every 500th file) and near copies (every 700th: one word
changed). Needs ../shared/data/scifact (the SciFact corpus.jsonl); fails clearly without it. Each run is
`testset-builder chunk` in a child process; its peak RSS is the most its process tree held at once (the sum of
their proportional set sizes, sampled every 0.1 s; at least the child's own high-water mark, VmHWM: not ru_maxrss,
which carries over fork and exec the RSS of the process that started it, a `make bench` that has encoded SciFact),
its CPU time the child's user + system time with its workers'.

Its 45,413 sentences (7.2 MB) repeat: a 1 GB corpus uses each ~140 times, and two chunks sharing sentences are often
LSH candidates, so the candidate pairs duplicate detection must judge by exact Jaccard grow with the square of the size
(markdown 800/80 chunks: 11,498 at 30 MB, 128,296 at 100 MB; ~13M extrapolated at 1 GB).

With ``--jsonl`` the corpus is ``--files`` JSONL files instead (documents of 0.6-4 KB, one a line, the same planted
copies), and a file is added and changed as a JSONL file: one new file of one document, one line of a file rewritten.
A plain read of the same corpus (every line parsed with ``json.loads`` and its text hashed, in this process) is
measured in the same run as the peer: the floor any JSONL ingest must pay, and a gauge of the machine's load.

Goals (issue 18): >= 10 MB/s end to end, peak RSS <= 1 GB, an incremental change on the 1 GB workspace in <= 2 s.

    python benchmarks/ingest_scale.py             # 1 GB
    python benchmarks/ingest_scale.py --size-mb 50
    python benchmarks/ingest_scale.py --jsonl --size-mb 100 --files 200
    python benchmarks/ingest_scale.py --jsonl --size-mb 100 --files 200 --updates-only   # the updates alone

The runs end with the added file deleted and one more run ("one file removed"), which leaves the workspace as the
first ingest did (and its removed document): ``--updates-only`` runs the updates again on it, without the first
ingest. The added document has a new id and text each time, so it is new to the workspace every time.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from _proc import high_water_mb

SCIFACT = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact" / "corpus.jsonl"
CACHE = Path(__file__).resolve().parent / ".cache" / "ingest_scale"


def sentences() -> list[str]:
    if not SCIFACT.is_file():
        raise SystemExit(f"needs the SciFact corpus at {SCIFACT} (../shared/data/scifact); it is not there")
    found = []
    with SCIFACT.open(encoding="utf-8") as handle:
        for line in handle:
            found.extend(s for s in re.split(r"(?<=[.!?])\s+", json.loads(line)["text"]) if len(s) > 20)
    return found


def document_text(n: int, written: list[str], pool: list[str], rng: random.Random, length: tuple[int, int]) -> str:
    """The ``n``-th generated document: every 500th repeats an earlier one exactly and every 700th with one word
    changed (duplicates for the index to find), the rest are sentences of ``pool`` up to a length drawn in
    ``length``. The first 2,000 texts are kept in ``written``, for the repeats."""
    if n and n % 500 == 0:
        text = written[rng.randrange(len(written))]
    elif n and n % 700 == 0:
        words = written[rng.randrange(len(written))].split(" ")
        words[rng.randrange(len(words))] = "altered"
        text = " ".join(words)
    else:
        wanted, parts = rng.randint(*length), []
        while sum(map(len, parts)) < wanted:
            parts.append(pool[rng.randrange(len(pool))])
        text = " ".join(parts)
    if len(written) < 2000:
        written.append(text)
    return text


def generate(folder: Path, size_mb: int) -> tuple[int, int]:
    """(files, bytes) of the corpus, written once per size (a marker file says it is complete)."""
    marker = folder / ".complete"
    if marker.is_file():
        files, total = json.loads(marker.read_text())
        return files, total
    shutil.rmtree(folder, ignore_errors=True)
    pool, rng = sentences(), random.Random(18)
    target, total, files, written = size_mb * 1_000_000, 0, 0, []
    while total < target:
        text = document_text(files, written, pool, rng, (2_000, 20_000))
        path = folder / f"part{files // 1000:04d}" / f"doc{files:07d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        total += len(text.encode("utf-8"))
        files += 1
    marker.write_text(json.dumps([files, total]))
    return files, total


def generate_jsonl(folder: Path, size_mb: int, files: int) -> tuple[int, int]:
    """(files, bytes) of a corpus of ``files`` JSONL files, written once per size and count (a marker says so)."""
    marker = folder / ".complete"
    if marker.is_file():
        return tuple(json.loads(marker.read_text()))
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    pool, rng = sentences(), random.Random(49)
    target, total, documents, written = size_mb * 1_000_000, 0, 0, []
    per_file = target / files
    for index in range(files):
        lines, size = [], 0
        while size < per_file:
            text = document_text(documents, written, pool, rng, (600, 4_000))
            line = json.dumps({"_id": f"d{documents:07d}", "title": f"Document {documents}", "text": text}) + "\n"
            lines.append(line)
            size += len(line.encode("utf-8"))
            documents += 1
        (folder / f"part{index:04d}.jsonl").write_text("".join(lines), encoding="utf-8")
        total += size
    marker.write_text(json.dumps([files, total]))
    return files, total


def plain_read(corpus: Path) -> tuple[float, int]:
    """(seconds, documents) of the peer: every JSONL line of ``corpus`` parsed and its text hashed, nothing kept."""
    started, documents = time.perf_counter(), 0
    for path in sorted(corpus.rglob("*.jsonl")):
        with path.open("rb") as handle:
            for line in handle:
                hashlib.sha256(json.loads(line)["text"].encode("utf-8")).digest()
                documents += 1
    return time.perf_counter() - started, documents


def run_chunk(corpus: Path, workspace: Path, *extra: str) -> tuple[float, float, float, dict]:
    """(seconds, CPU seconds (user + system), peak RSS in MB, summary) of one `testset-builder chunk` in a child
    process (its children included: a worker process's CPU counts too, its RSS not: see :func:`peak_rss`)."""
    args = [
        sys.executable,
        "-m",
        "testset_builder",
        "chunk",
        str(corpus),
        "--workspace",
        str(workspace),
        "--json",
        *extra,
    ]
    started = time.perf_counter()
    child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tree_peak = [0.0, 0.0, 0.0]
    sampler = threading.Thread(target=_sample_peak, args=(child.pid, tree_peak, lambda: child.returncode is not None))
    sampler.start()
    output = child.stdout.read()
    error = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    sampler.join()
    if child.returncode != 0:
        raise SystemExit(f"chunk failed ({child.returncode}): {error.decode()[-2000:]}")
    cpu = usage.ru_utime + usage.ru_stime
    if tree_peak[1]:
        print(f"  batches written after {tree_peak[1]:.0f} s; duplicate grouping (settle) took the rest", flush=True)
    return seconds, cpu, max(tree_peak[0], tree_peak[2]), json.loads(output)


def _tree_rss_mb(pid: int) -> float:
    """The resident MB of a process and its child processes: the sum of their proportional set sizes (a forked
    worker shares pages with its parent; summing RSS would count them twice)."""
    total = 0
    for proc in [pid, *_children(pid)]:
        try:
            rollup = Path(f"/proc/{proc}/smaps_rollup").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in rollup.splitlines() if line.startswith("Pss:")), 0)
    return total / 1024


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _sample_peak(pid: int, peak: list[float], done) -> None:
    """Also notes (in ``peak[1]``) the seconds at which the child last had a worker process: when its batches were
    done and grouping duplicates began."""
    started = time.perf_counter()
    while not done():
        peak[0] = max(peak[0], _tree_rss_mb(pid))
        peak[2] = max(peak[2], high_water_mb(pid))
        if _children(pid):  # the chunking worker
            peak[1] = time.perf_counter() - started
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--jsonl", action="store_true", help="a corpus of JSONL files, not of .txt files")
    parser.add_argument("--files", type=int, default=200, help="how many JSONL files (with --jsonl)")
    parser.add_argument(
        "--updates-only", action="store_true", help="reuse the workspace an earlier run left: no first ingest"
    )
    args = parser.parse_args(argv)
    kind = f"jsonl{args.files}-" if args.jsonl else ""
    corpus = CACHE / f"corpus-{kind}{args.size_mb}mb"
    workspace = CACHE / f"workspace-{kind}{args.size_mb}mb"
    started = time.perf_counter()
    files, total = generate_jsonl(corpus, args.size_mb, args.files) if args.jsonl else generate(corpus, args.size_mb)
    print(f"corpus: {files} files, {total / 1e6:.0f} MB ({time.perf_counter() - started:.0f} s to generate or find)")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores before the runs", flush=True)
    rows = []
    peer = None
    if args.updates_only:
        if not (workspace / "testset.db").is_file():
            raise SystemExit(f"--updates-only needs the workspace of an earlier run at {workspace}")
    else:
        shutil.rmtree(workspace, ignore_errors=True)
        peer = _first_ingest(corpus, workspace, total, args.jsonl, rows)
    added, changed = _added_and_changed(corpus, args.jsonl)
    try:
        seconds, cpu, rss, summary = run_chunk(corpus, workspace)
        rows.append(("one file added", seconds, cpu, rss, "", summary))
        original = changed.read_bytes()
        changed.write_bytes(_changed(original, args.jsonl))
        try:
            seconds, cpu, rss, summary = run_chunk(corpus, workspace)
            rows.append(("one file changed", seconds, cpu, rss, "", summary))
        finally:
            changed.write_bytes(original)
        seconds, cpu, rss, summary = run_chunk(corpus, workspace)  # back to a text the workspace has had
        rows.append(("changed back", seconds, cpu, rss, "", summary))
        seconds, cpu, rss, summary = run_chunk(corpus, workspace)
        rows.append(("nothing changed", seconds, cpu, rss, "", summary))
    finally:
        if added.parent == corpus:
            added.unlink()
        else:
            shutil.rmtree(added.parent)
    seconds, cpu, rss, summary = run_chunk(corpus, workspace)  # the workspace as the first ingest left it
    rows.append(("one file removed", seconds, cpu, rss, "", summary))
    size = sum(p.stat().st_size for p in workspace.glob("testset.db*"))
    print(f"{'run':<18} {'seconds':>8} {'CPU s':>7} {'peak RSS MB':>12} {'rate':>10}  summary")
    for name, seconds, cpu, rss, rate, summary in rows:
        counts = "" if summary is None else (
            f"docs new {summary['new']} changed {summary['changed']} unchanged {summary['unchanged']} removed "
            f"{summary['removed']}; chunks +{summary['chunks_added']} -{summary['chunks_removed']}; "
            f"{summary['duplicate_chunks']} chunks in {summary['duplicate_groups']} duplicate groups"
        )  # fmt: skip
        print(f"{name:<18} {seconds:>8.2f} {cpu:>7.2f} {rss:>12.0f} {rate:>10}  {counts}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (a shared machine: wall times vary)")
    print(f"workspace: {size / 1e6:.0f} MB; goals: >= 10 MB/s, peak RSS <= 1024 MB, a change in <= 2 s")
    runs = {name: {"seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2), "peak_rss_mb": round(rss)}
            for name, seconds, cpu, rss, _, summary in rows if summary is not None}  # fmt: skip
    if args.updates_only:
        return None  # not a whole run: nothing for the results file
    first = runs["chunk the corpus"]
    return {
        "corpus": {"kind": "jsonl" if args.jsonl else "txt", "files": files, "mb": round(total / 1e6, 1)},
        "first_ingest_mb_s": round(total / 1e6 / first["seconds"], 1),
        "first_ingest_peak_rss_mb": first["peak_rss_mb"],
        "one_file_added_seconds": runs["one file added"]["seconds"],
        "nothing_changed_seconds": runs["nothing changed"]["seconds"],
        "peer_plain_read": peer,
        "first_ingest_vs_plain_read": round(peer["seconds"] / first["seconds"], 3) if peer else None,
        "runs": runs,
    }


def _first_ingest(corpus: Path, workspace: Path, total: int, jsonl: bool, rows: list) -> dict | None:
    """Chunk the corpus into an empty workspace (its row added to ``rows``), after the peer's plain read for a
    JSONL corpus; returns the peer's figures (None for a .txt corpus)."""
    peer = None
    if jsonl:
        peer_seconds, peer_documents = plain_read(corpus)
        peer = {
            "seconds": round(peer_seconds, 2),
            "documents": peer_documents,
            "mb_s": round(total / 1e6 / peer_seconds, 1),
        }
        rows.append(("peer: plain read", peer_seconds, peer_seconds, 0.0, f"{peer['mb_s']:.1f} MB/s", None))
    seconds, cpu, rss, summary = run_chunk(corpus, workspace)
    rows.append(("chunk the corpus", seconds, cpu, rss, f"{total / 1e6 / seconds:.1f} MB/s", summary))
    return peer


def _added_and_changed(corpus: Path, jsonl: bool) -> tuple[Path, Path]:
    """The file written as 'one file added' (its own folder for a .txt corpus) and the file to change. The added
    document's id and text name the time, so that it is new to a workspace that has had an earlier run's."""
    stamp = time.time_ns()
    text = "A document added after the first chunking, about duplicate detection. " * 30 + f"Stamp {stamp}."
    if jsonl:
        added = corpus / "zz-added.jsonl"
        added.write_text(json.dumps({"_id": f"added-{stamp}", "text": text}) + "\n", encoding="utf-8")
        return added, corpus / "part0001.jsonl"
    added = corpus / "zz-added" / "new.txt"
    added.parent.mkdir(exist_ok=True)
    added.write_text(text, encoding="utf-8")
    return added, corpus / "part0000" / "doc0000001.txt"


def _changed(original: bytes, jsonl: bool) -> bytes:
    """One sentence appended: to the text, or to the text of the file's second line."""
    if not jsonl:
        return original + b" One sentence appended."
    lines = original.splitlines(keepends=True)
    record = json.loads(lines[1])
    record["text"] += " One sentence appended."
    lines[1] = (json.dumps(record) + "\n").encode()
    return b"".join(lines)


if __name__ == "__main__":
    main()
