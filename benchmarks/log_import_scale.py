"""``import-logs`` on a generated production log of 1 GB: time, throughput and peak memory, with the planted faults
counted exactly.

The workspace is SciFact chunked with the default settings (needs ../shared/data/scifact). The log is JSON lines
written deterministically into benchmarks/.cache/log-import/: each record a query (one of SciFact's 1,109 queries,
or a new one made of a query and words of a sentence, so the number of distinct queries grows with the log), ten
retrieved chunks by id with scores, an answer of a few sentences, thumbs, a rating, cited and clicked chunks, a
timestamp and a session. Planted, and counted by the generator: records whose results are texts (the chunk's text
verbatim, or re-spaced and upper-cased so only the normalised match finds it), results naming chunks the workspace
does not have, texts that match no chunk, lines that are not JSON, and e-mail addresses in queries.

Each import runs in its own process on a fresh copy of the workspace; its peak resident memory is the process's
own (VmHWM, which unlike ru_maxrss does not carry over the RSS of the process that started it). Bounded memory
means the peak does not grow with the log: the same import is run on a log a tenth the size, and a plain
``json.loads`` pass over the file (the floor for any Python reader of JSON lines) is timed in the same run for the
throughput ratio.

    python benchmarks/log_import_scale.py [--size-mb 1000] [--small-mb 100]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache" / "log-import"
SCIFACT = HERE.parents[1] / "shared" / "data" / "scifact"
PYTHON = sys.executable

# the child: run the CLI in-process and report its own peak memory and time on stderr's last line
CHILD = """
import json, sys, time
sys.path.insert(0, {here!r})
from _proc import high_water_mb
from testset_builder.cli import main
start = time.perf_counter()
code = 0
try:
    main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code or 0
print(json.dumps({"seconds": time.perf_counter() - start, "peak_kb": high_water_mb() * 1024, "code": code}),
      file=sys.stderr)
"""


@dataclass
class Planted:
    records: int = 0
    lines: int = 0
    malformed: int = 0
    results: int = 0
    by_id: int = 0
    by_exact_text: int = 0
    by_normalised_text: int = 0
    unknown_ids: int = 0
    unmatched_texts: int = 0
    emails: int = 0


def run_child(args: list[str]) -> tuple[dict, str]:
    child = CHILD.replace("{here!r}", repr(str(HERE)))  # the benchmarks folder, where _proc is
    done = subprocess.run([PYTHON, "-c", child, *args], capture_output=True, text=True, check=False)
    figures = json.loads(done.stderr.strip().splitlines()[-1])
    if figures["code"]:
        raise SystemExit(f"testset-builder {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return figures, done.stdout


def workspace() -> Path:
    from testset_builder.store.workspace import DB_NAME

    path = CACHE / "scifact-workspace"
    if not (path / DB_NAME).exists():
        shutil.rmtree(path, ignore_errors=True)
        run_child(["chunk", str(SCIFACT), "--workspace", str(path), "--quiet"])
    return path


def chunks_of(path: Path) -> list[tuple[str, str]]:
    from testset_builder.store import open_workspace, rows

    with open_workspace(path) as ws:
        return [(chunk_id, text) for chunk_id, _, text in rows.live_chunk_rows(ws.db)]


def generate(path: Path, megabytes: int, chunks: list[tuple[str, str]], seed: int = 7) -> Planted:
    """Write the log (deterministic for a size and seed) and return what it plants."""
    planted_path = path.with_suffix(".planted.json")
    if path.exists() and planted_path.exists():
        return Planted(**json.loads(planted_path.read_text()))
    rng = random.Random(seed)
    queries = [json.loads(line)["text"] for line in (SCIFACT / "queries.jsonl").open(encoding="utf-8")]
    words = " ".join(text for _, text in chunks[:3000]).split()
    sentences = [text.split(". ")[0] for _, text in chunks[:5000]]
    planted, target = Planted(), megabytes * 1_000_000
    written = 0
    with path.open("w", encoding="utf-8") as out:
        while written < target:
            planted.lines += 1
            if rng.random() < 0.0005:
                line = '{"query": "what about the trials", "retrieved": ["' + chunks[0][0]  # cut off: not JSON
                planted.malformed += 1
            else:
                line = json.dumps(record(rng, planted, queries, words, sentences, chunks))
                planted.records += 1
            out.write(line + "\n")
            written += len(line.encode("utf-8")) + 1
    planted_path.write_text(json.dumps(asdict(planted)))
    return planted


def record(rng: random.Random, planted: Planted, queries, words, sentences, chunks) -> dict:
    query = rng.choice(queries)
    if rng.random() < 0.5:  # a new wording: the distinct queries grow with the log
        start = rng.randrange(len(words) - 6)
        query = f"{query} {' '.join(words[start : start + rng.randint(2, 6)])}"
    if rng.random() < 0.002:
        query += f" contact me at user{rng.randrange(10**6)}@example.org"
        planted.emails += 1
    picks = rng.sample(range(len(chunks)), 10)
    by_text = rng.random() < 0.03
    retrieved = []
    for rank, index in enumerate(picks, 1):
        chunk_id, text = chunks[index]
        score = round(30 - rank * 1.7 + rng.random(), 4)
        planted.results += 1
        if rng.random() < 0.001:
            retrieved.append({"text": f"a passage the corpus never had, number {rng.randrange(10**9)}"})
            planted.unmatched_texts += 1
        elif rng.random() < 0.001:
            retrieved.append({"id": f"gone-{rng.randrange(10**9)}", "score": score})
            planted.unknown_ids += 1
        elif by_text and rank <= 5:
            if rank % 2:
                retrieved.append({"text": text, "score": score})
                planted.by_exact_text += 1
            else:
                retrieved.append({"text": "  " + "\n".join(text.upper().split(" ")), "score": score})
                planted.by_normalised_text += 1
        else:
            retrieved.append({"id": chunk_id, "score": score})
            planted.by_id += 1
    cited = [r["id"] for r in retrieved[:3] if "id" in r]
    thumbs = rng.choice(["up", "up", "down", None])
    return {
        "query": query,
        "retrieved": retrieved,
        "answer": ". ".join(rng.sample(sentences, 4)) + ".",
        "thumbs": thumbs,
        "rating": rng.randint(1, 5) if rng.random() < 0.3 else None,
        "comment": "the answer missed the point" if thumbs == "down" and rng.random() < 0.3 else None,
        "cited": cited,
        "clicked": cited[:1] if rng.random() < 0.4 else [],
        "timestamp": f"2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z",
        "session": f"s{rng.randrange(10**7)}",
    }


def json_floor(path: Path) -> float:
    """Seconds for reading the file and json.loads of every line, nothing else."""
    start = time.perf_counter()
    with path.open("rb") as handle:
        for raw in handle:
            with contextlib.suppress(ValueError):
                json.loads(raw)
    return time.perf_counter() - start


def import_once(log: Path, base: Path, planted: Planted) -> dict:
    target = CACHE / "import-workspace"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(base, target)
    figures, stdout = run_child(["import-logs", str(log), "--workspace", str(target), "--json"])
    summary = json.loads(stdout)
    expected = {
        "records": planted.records,
        "unreadable": planted.malformed,
        "results": planted.results,
        "by_id": planted.by_id,
        "by_exact_text": planted.by_exact_text,
        "by_normalised_text": planted.by_normalised_text,
        "unknown_ids": planted.unknown_ids,
        "unmatched_texts": planted.unmatched_texts,
    }
    wrong = {name: (summary[name], want) for name, want in expected.items() if summary[name] != want}
    if wrong:
        raise SystemExit(f"the import's counts differ from what was planted (got, planted): {wrong}")
    if summary.get("scrubbed", {}).get("email", 0) < planted.emails:
        raise SystemExit(f"scrubbed {summary.get('scrubbed')} e-mails, planted {planted.emails}")
    size = log.stat().st_size / 1e6
    return {**figures, "megabytes": size, "summary": summary, "workspace_mb": _size(target) / 1e6}


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=1000, help="the large log's size")
    parser.add_argument("--small-mb", type=int, default=100, help="the small log's size (same generator)")
    args = parser.parse_args(argv)
    if not (SCIFACT / "corpus.jsonl").exists():
        print(f"skipped: this benchmark needs SciFact at {SCIFACT}")
        return
    CACHE.mkdir(parents=True, exist_ok=True)
    base = workspace()
    chunks = chunks_of(base)
    print(f"workspace: SciFact, {len(chunks):,} chunks (default chunking)")
    rows = []
    for megabytes in (args.small_mb, args.size_mb):
        log = CACHE / f"log-{megabytes}mb.jsonl"
        started = time.perf_counter()
        planted = generate(log, megabytes, chunks)
        generated = time.perf_counter() - started
        floor = json_floor(log)
        result = import_once(log, base, planted)
        rows.append((megabytes, planted, result, floor, generated))
    print(
        f"{'log':>8} {'records':>10} {'import s':>9} {'MB/s':>6} {'records/s':>10} {'peak RSS':>9} "
        f"{'json.loads-only s':>18} {'import / floor':>15} {'workspace':>10}"
    )
    for _, planted, result, floor, _ in rows:
        seconds, size = result["seconds"], result["megabytes"]
        print(
            f"{size:>6.0f}MB {planted.records:>10,} {seconds:>9.1f} {size / seconds:>6.1f} "
            f"{planted.records / seconds:>10,.0f} {result['peak_kb'] / 1024:>7.0f}MB {floor:>18.1f} "
            f"{seconds / floor:>14.1f}x {result['workspace_mb']:>8.0f}MB"
        )
    big = rows[-1]
    summary, planted = big[2]["summary"], big[1]
    print(
        f"counted exactly as planted in the {big[2]['megabytes']:.0f} MB log: {planted.malformed} lines not JSON, "
        f"{planted.unknown_ids} unknown chunk ids, {planted.unmatched_texts} texts matching no chunk, "
        f"{planted.by_exact_text:,} exact and {planted.by_normalised_text:,} normalised text matches, "
        f"{summary['scrubbed'].get('email', 0)} e-mails scrubbed; {summary['new_queries']:,} distinct queries"
    )
    small, large = rows[0][2]["peak_kb"], rows[-1][2]["peak_kb"]
    print(
        f"peak RSS {small / 1024:.0f} MB for {rows[0][2]['megabytes']:.0f} MB and {large / 1024:.0f} MB for "
        f"{rows[-1][2]['megabytes']:.0f} MB of log: {large / small:.2f}x for {rows[-1][0] / rows[0][0]:.0f}x the log"
    )


if __name__ == "__main__":
    main()
