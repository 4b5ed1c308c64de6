"""`score --runs` on 20 runs of 1,000 queries (100 results each, ~5 graded labels per query), whole process.

The issue's bar: under 3 s on this 2-core machine, from the command line (imports, reading 20 TREC files, scoring,
bootstrap intervals, 114 paired tests against the best run, recall@k curves).
Run: `python benchmarks/many_runs_speed.py`.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def write_set(folder: Path, runs: int = 20, queries: int = 1000, depth: int = 100, corpus: int = 20_000) -> None:
    rng = np.random.default_rng(0)
    relevant = {q: rng.choice(corpus, 5, replace=False) for q in range(queries)}
    with (folder / "qrels.trec").open("w") as handle:
        for q, docs in relevant.items():
            handle.writelines(f"q{q} 0 d{d} {rng.integers(1, 3)}\n" for d in docs)
    (folder / "runs").mkdir()
    for r in range(runs):
        lines = []
        for q in range(queries):
            docs = rng.choice(corpus, depth, replace=False)
            hits = relevant[q][rng.random(5) < 0.3 + r / 50]
            docs[rng.choice(depth, len(hits), replace=False)] = hits
            docs = list(dict.fromkeys(docs.tolist()))
            scores = np.sort(rng.random(len(docs)))[::-1]
            lines += [f"q{q} Q0 d{d} {i + 1} {s:.6f} run{r}\n" for i, (d, s) in enumerate(zip(docs, scores))]
        (folder / "runs" / f"run{r:02d}.trec").write_text("".join(lines))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_set(folder)
        command = [sys.executable, "-m", "testset_builder", "score", "--qrels", str(folder / "qrels.trec")]
        command += ["--runs", str(folder / "runs" / "*.trec"), "--json"]
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        elapsed = time.perf_counter() - start
        if done.returncode:
            raise SystemExit(done.stderr)
        print(f"score --runs: 20 runs x 1,000 queries, whole process: {elapsed:.2f} s")


if __name__ == "__main__":
    main()
