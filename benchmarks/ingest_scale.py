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

Goals (issue 18): >= 10 MB/s end to end, peak RSS <= 1 GB, an incremental change on the 1 GB workspace in <= 2 s.

    python benchmarks/ingest_scale.py             # 1 GB
    python benchmarks/ingest_scale.py --size-mb 50
"""

from __future__ import annotations

import argparse
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
        if files and files % 500 == 0:
            text = written[rng.randrange(len(written))]
        elif files and files % 700 == 0:
            words = written[rng.randrange(len(written))].split(" ")
            words[rng.randrange(len(words))] = "altered"
            text = " ".join(words)
        else:
            length, parts = rng.randint(2_000, 20_000), []
            while sum(map(len, parts)) < length:
                parts.append(pool[rng.randrange(len(pool))])
            text = " ".join(parts)
        path = folder / f"part{files // 1000:04d}" / f"doc{files:07d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if len(written) < 2000:
            written.append(text)
        total += len(text.encode("utf-8"))
        files += 1
    marker.write_text(json.dumps([files, total]))
    return files, total


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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mb", type=int, default=1024)
    args = parser.parse_args(argv)
    corpus = CACHE / f"corpus-{args.size_mb}mb"
    workspace = CACHE / f"workspace-{args.size_mb}mb"
    started = time.perf_counter()
    files, total = generate(corpus, args.size_mb)
    print(f"corpus: {files} files, {total / 1e6:.0f} MB ({time.perf_counter() - started:.0f} s to generate or find)")
    shutil.rmtree(workspace, ignore_errors=True)
    rows = []
    seconds, cpu, rss, summary = run_chunk(corpus, workspace)
    rows.append(("chunk the corpus", seconds, cpu, rss, f"{total / 1e6 / seconds:.1f} MB/s", summary))
    added = corpus / "zz-added" / "new.txt"
    added.parent.mkdir(exist_ok=True)
    added.write_text("A document added after the first chunking, about duplicate detection. " * 30, encoding="utf-8")
    try:
        seconds, cpu, rss, summary = run_chunk(corpus, workspace)
        rows.append(("one file added", seconds, cpu, rss, "", summary))
        changed = corpus / "part0000" / "doc0000001.txt"
        original = changed.read_text(encoding="utf-8")
        changed.write_text(original + " One sentence appended.", encoding="utf-8")
        try:
            seconds, cpu, rss, summary = run_chunk(corpus, workspace)
            rows.append(("one file changed", seconds, cpu, rss, "", summary))
        finally:
            changed.write_text(original, encoding="utf-8")
        seconds, cpu, rss, summary = run_chunk(corpus, workspace)  # back to a text the workspace has had
        rows.append(("changed back", seconds, cpu, rss, "", summary))
        seconds, cpu, rss, summary = run_chunk(corpus, workspace)
        rows.append(("nothing changed", seconds, cpu, rss, "", summary))
    finally:
        shutil.rmtree(added.parent)
    size = sum(p.stat().st_size for p in workspace.glob("testset.db*"))
    print(f"{'run':<18} {'seconds':>8} {'CPU s':>7} {'peak RSS MB':>12} {'rate':>10}  summary")
    for name, seconds, cpu, rss, rate, summary in rows:
        counts = (
            f"docs new {summary['new']} changed {summary['changed']} unchanged {summary['unchanged']} removed "
            f"{summary['removed']}; chunks +{summary['chunks_added']} -{summary['chunks_removed']}; "
            f"{summary['duplicate_chunks']} chunks in {summary['duplicate_groups']} duplicate groups"
        )
        print(f"{name:<18} {seconds:>8.2f} {cpu:>7.2f} {rss:>12.0f} {rate:>10}  {counts}")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (a shared machine: wall times vary)")
    print(f"workspace: {size / 1e6:.0f} MB; goals: >= 10 MB/s, peak RSS <= 1024 MB, a change in <= 2 s")


if __name__ == "__main__":
    main()
