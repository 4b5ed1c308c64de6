"""Candidate pools at a million chunks: BM25 and dense build time, query time for 1,000 queries (top-100 pools),
peak RSS and index size, against today's in-memory paths measured in the same run.

Needs ../shared/data/scifact. A workspace of ``--chunks`` chunks (default 1,000,000) of ~100 words each is written
deterministically into benchmarks/.cache/pool-scale/ (reused when present): SciFact's sentences, drawn by a seeded
generator, ten chunks to a document titled by a SciFact title. The queries are SciFact's first 1,000.

Each contender runs in its own process; its peak RSS is the child's own (``VmHWM``, which counts the pages of
memory-mapped files it touched; unlike ``ru_maxrss`` it does not carry the parent's over ``fork`` and ``exec``).
Contenders:

- bm25 (ours): ``WorkspaceIndexes(ws, ("bm25",))`` on an empty index directory (reads the chunks from the store in
  batches, builds in bounded memory, memory-maps), then a second process opening the cached index and searching.
- bm25s in memory (today's path, the peer): all passages read from the store, ``bm25s.BM25.index()``, search.
- dense (ours): MiniLM on 2 CPU cores cannot encode a million chunks in the time a benchmark has, so its encoding
  throughput is measured on the first ``--dense-real`` chunks and the full build time is projected from it; the
  search runs over a float16 memory-mapped file of those real vectors followed by deterministic synthetic unit
  vectors for the rest (seeded normal, normalised), exactly as a full index would be searched (same shape, same
  blocked products; the real queries are encoded by the model).
- dense in memory (today's path, the peer): the same vectors as float32 in memory, ``encode(queries) @ E.T`` in one
  product, top 100 by argpartition.

    python benchmarks/pool_scale.py [--chunks 1000000] [--queries 1000] [--dense-real 1000] [--skip-peers]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHE = HERE / ".cache" / "pool-scale"
SCIFACT = HERE.parents[1] / "shared" / "data" / "scifact"
WORDS_PER_CHUNK = 100
CHUNKS_PER_DOC = 10

CHILD = """
import json, sys, time
sys.path.insert(0, {here!r})
import pool_scale
start = time.perf_counter()
figures = pool_scale.CONTENDERS[sys.argv[1]](*sys.argv[2:])
from _proc import high_water_mb
figures["peak_rss_mb"] = high_water_mb()
print(json.dumps(figures))
"""


def sentences() -> tuple[list[str], list[str]]:
    texts, titles = [], []
    for line in (SCIFACT / "corpus.jsonl").open(encoding="utf-8"):
        doc = json.loads(line)
        titles.append(doc["title"])
        texts.extend(s.strip() + "." for s in doc["text"].split(". ") if len(s.split()) >= 4)
    return texts, titles


def generate(root: Path, chunks: int, seed: int = 11) -> None:
    """A workspace of ``chunks`` chunks, written once (a marker file says it is whole)."""
    from testset_builder.records import Chunk, Document
    from testset_builder.store import open_workspace, rows

    if (root / "complete").exists():
        return
    shutil.rmtree(root, ignore_errors=True)
    texts, titles = sentences()
    rng = random.Random(seed)
    with open_workspace(root) as ws:
        for first in range(0, chunks, 10_000):
            documents, pieces = [], []
            for d in range(first // CHUNKS_PER_DOC, min(chunks, first + 10_000) // CHUNKS_PER_DOC):
                parts = []
                for _ in range(CHUNKS_PER_DOC):
                    words: list[str] = []
                    while len(words) < WORDS_PER_CHUNK:
                        words.extend(rng.choice(texts).split())
                    parts.append(" ".join(words))
                doc_id = f"doc{d:07d}"
                documents.append(Document(doc_id=doc_id, text="\n\n".join(parts), title=rng.choice(titles)))
                start = 0
                for i, part in enumerate(parts):
                    pieces.append(
                        Chunk(chunk_id=f"{doc_id}#{i}", doc_id=doc_id, text=part, start=start, end=start + len(part))
                    )
                    start += len(part) + 2
            with ws.transaction() as db:
                rows.put_documents(db, documents)
                rows.put_chunks(db, pieces)
    (root / "complete").write_text("")


def queries(count: int) -> tuple[list[str], list[str]]:
    found = [json.loads(line) for line in (SCIFACT / "queries.jsonl").open(encoding="utf-8")][:count]
    return [q["_id"] for q in found], [q["text"] for q in found]


def _size_mb(path: Path) -> float:
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files) / 2**20


# ---- contenders (each runs in a child process) ----


def bm25_build(root: str) -> dict:
    from testset_builder.retrieval.indexes import WorkspaceIndexes
    from testset_builder.store import open_workspace

    shutil.rmtree(Path(root) / "indexes", ignore_errors=True)
    with open_workspace(root) as ws:
        start = time.perf_counter()
        WorkspaceIndexes(ws, ("bm25",))
        seconds = time.perf_counter() - start
    (built,) = (Path(root) / "indexes").glob("bm25-*")
    return {"build_s": seconds, "index_mb": _size_mb(built)}


def bm25_query(root: str, count: str) -> dict:
    from testset_builder.retrieval.indexes import WorkspaceIndexes
    from testset_builder.store import open_workspace

    query_ids, texts = queries(int(count))
    with open_workspace(root) as ws:
        start = time.perf_counter()
        indexes = WorkspaceIndexes(ws, ("bm25",))
        opened = time.perf_counter() - start
        start = time.perf_counter()
        run = indexes.indexes["bm25"].search(query_ids, texts, k=100)
        searched = time.perf_counter() - start
        start = time.perf_counter()
        pooled = indexes.passages.of([c for _, c, _, _ in run.ranked_rows()][:10_000])
        lookup = time.perf_counter() - start
    return {"open_s": opened, "query_s": searched, "results": len(run.to_dict()), "passages_10k_s": lookup,
            "pooled_passages": len(pooled), "top": _top(run)}  # fmt: skip


def bm25s_memory(root: str, count: str) -> dict:
    from testset_builder.retrieval import BM25Index
    from testset_builder.store import open_workspace, rows

    query_ids, texts = queries(int(count))
    with open_workspace(root) as ws:
        start = time.perf_counter()
        ids, passages = rows.live_chunk_passages(ws.db)
        index = BM25Index(ids, passages)
        built = time.perf_counter() - start
    start = time.perf_counter()
    run = index.search(query_ids, texts, k=100)
    return {"build_s": built, "query_s": time.perf_counter() - start, "top": _top(run)}


def key_pass(root: str) -> dict:
    """What opening a cached index costs before any search: reading every live chunk for the ids and fingerprint."""
    from testset_builder.retrieval._common import BATCH, Corpus
    from testset_builder.store import open_workspace, rows

    with open_workspace(root) as ws:
        start = time.perf_counter()
        corpus = Corpus.streamed(lambda: rows.iter_live_chunk_passages(ws.db, BATCH), lambda wanted: {})
        seconds = time.perf_counter() - start
        start = time.perf_counter()
        ids = [r[0] for r in ws.db.execute("SELECT chunk_id FROM chunks WHERE removed_at IS NULL ORDER BY chunk_id")]
        ids_only = time.perf_counter() - start
    assert ids == corpus.chunk_ids
    return {"key_s": seconds, "ids_only_s": ids_only}


def dense_vectors(root: str, real: str, out: str) -> dict:
    """Encode the first ``real`` chunks with MiniLM (timed), then fill a float16 .npy of every chunk: those real
    vectors, then seeded synthetic unit vectors."""
    import numpy as np

    from testset_builder.retrieval.dense import encode
    from testset_builder.store import open_workspace, rows

    with open_workspace(root) as ws:
        total = ws.db.execute("SELECT COUNT(*) FROM chunks WHERE removed_at IS NULL").fetchone()[0]
        texts = []
        for _, batch in rows.iter_live_chunk_passages(ws.db, 10_000):
            texts.extend(batch)
            if len(texts) >= int(real):
                break
    texts = texts[: int(real)]
    encode(texts[:64])  # the model loaded before the clock starts
    start = time.perf_counter()
    vectors = encode(texts)
    seconds = time.perf_counter() - start
    stored = np.lib.format.open_memmap(out, mode="w+", dtype=np.float16, shape=(total, vectors.shape[1]))
    stored[: len(vectors)] = vectors
    rng = np.random.default_rng(5)
    for first in range(len(vectors), total, 100_000):
        block = rng.standard_normal((min(100_000, total - first), vectors.shape[1]), dtype=np.float32)
        stored[first : first + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    stored.flush()
    return {"encoded": len(texts), "encode_s": seconds, "chunks_per_s": len(texts) / seconds, "total": total}


def dense_query(root: str, count: str, vectors: str) -> dict:
    import numpy as np

    from testset_builder.retrieval import DenseIndex
    from testset_builder.retrieval.dense import encode
    from testset_builder.store import open_workspace

    query_ids, texts = queries(int(count))
    with open_workspace(root) as ws:
        ids = [r[0] for r in ws.db.execute("SELECT chunk_id FROM chunks WHERE removed_at IS NULL ORDER BY chunk_id")]
    encode(texts[:8])  # the model loaded before the clock starts
    index = DenseIndex(ids, np.load(vectors, mmap_mode="r"))
    start = time.perf_counter()
    run = index.search(query_ids, texts, k=100)
    return {"query_s": time.perf_counter() - start, "top": _top(run)}


def dense_memory(root: str, count: str, vectors: str) -> dict:
    import numpy as np

    from testset_builder.retrieval.dense import encode
    from testset_builder.store import open_workspace

    _, texts = queries(int(count))
    with open_workspace(root) as ws:
        ids = [r[0] for r in ws.db.execute("SELECT chunk_id FROM chunks WHERE removed_at IS NULL ORDER BY chunk_id")]
    encode(texts[:8])
    embeddings = np.load(vectors).astype(np.float32)  # today's cache: float32, loaded whole
    start = time.perf_counter()
    scores = encode(texts) @ embeddings.T  # today's DenseIndex.search
    top = np.argpartition(-scores, 99, axis=1)[:, :100]
    seconds = time.perf_counter() - start
    first = {ids[i] for i in top[0]}
    return {"query_s": seconds, "top": sorted(first)[:5], "len": len(ids)}


def _top(run) -> list[str]:
    ranked = run.to_dict()
    first = sorted(ranked)[0] if ranked else None
    return sorted(ranked[first])[:5] if first else []


CONTENDERS = {f.__name__: f for f in (bm25_build, bm25_query, bm25s_memory, key_pass, dense_vectors, dense_query,
                                      dense_memory)}  # fmt: skip


def child(name: str, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD.format(here=str(HERE)), name, *args], capture_output=True, text=True
    )
    if done.returncode:
        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--dense-real", type=int, default=1_000, help="chunks encoded by the model for real")
    parser.add_argument("--skip-peers", action="store_true", help="only our paths (the peers need more memory)")
    args = parser.parse_args(argv)
    if not (SCIFACT / "corpus.jsonl").exists():
        raise SystemExit(f"needs SciFact at {SCIFACT}")
    root = CACHE / f"ws-{args.chunks}"
    start = time.perf_counter()
    generate(root, args.chunks)
    size = sum(_size_mb(p) for p in root.glob("*.db*"))
    print(f"workspace: {args.chunks:,} chunks of ~{WORDS_PER_CHUNK} words ({size:,.0f} MB SQLite) ready in "
          f"{time.perf_counter() - start:.0f} s; {args.queries} SciFact queries, top 100 each")  # fmt: skip
    count = str(args.queries)
    key = child("key_pass", str(root))
    print(f"  cache key (read every live chunk, sha256 of ids and texts): {key['key_s']:.1f} s "
          f"(reading the ids alone: {key['ids_only_s']:.1f} s)")  # fmt: skip
    built = child("bm25_build", str(root))
    query = child("bm25_query", str(root), count)
    print(f"  bm25 (ours, streamed build, memory-mapped): build {built['build_s']:.1f} s, peak RSS "
          f"{built['peak_rss_mb']:,.0f} MB, index {built['index_mb']:,.0f} MB on disk")  # fmt: skip
    print(f"    open cached {query['open_s']:.1f} s, {args.queries} queries {query['query_s']:.1f} s "
          f"({args.queries / query['query_s']:.0f} q/s), peak RSS {query['peak_rss_mb']:,.0f} MB; "
          f"10,000 pooled passages read from the store in {query['passages_10k_s']:.2f} s")  # fmt: skip
    if not args.skip_peers:
        peer = child("bm25s_memory", str(root), count)
        same = "same" if peer["top"] == query["top"] else "DIFFERENT"
        print(f"  bm25s in memory (today's path): build {peer['build_s']:.1f} s, {args.queries} queries "
              f"{peer['query_s']:.1f} s, peak RSS {peer['peak_rss_mb']:,.0f} MB ({same} top results)")  # fmt: skip
        print(f"    ratios ours/peer: build {built['build_s'] / peer['build_s']:.2f}x, query "
              f"{query['query_s'] / peer['query_s']:.2f}x, peak RSS build "
              f"{built['peak_rss_mb'] / peer['peak_rss_mb']:.2f}x, "
              f"query {query['peak_rss_mb'] / peer['peak_rss_mb']:.2f}x")  # fmt: skip
    vectors = root / f"dense-{args.dense_real}-real.npy"
    made = child("dense_vectors", str(root), str(args.dense_real), str(vectors))
    projected = made["total"] / made["chunks_per_s"]
    print(f"  dense (MiniLM, CPU): {made['encoded']:,} chunks encoded in {made['encode_s']:.0f} s = "
          f"{made['chunks_per_s']:.1f} chunks/s -> a full build of {made['total']:,} would take "
          f"~{projected / 3600:.1f} h "
          f"(float16 file {_size_mb(vectors):,.0f} MB; float32 would be twice)")  # fmt: skip
    print(f"    searched below: {made['encoded']:,} real vectors + {made['total'] - made['encoded']:,} synthetic "
          "(seeded normal, normalised), float16, memory-mapped")  # fmt: skip
    dense = child("dense_query", str(root), count, str(vectors))
    print(f"  dense (ours, blocked, memory-mapped float16): {args.queries} queries {dense['query_s']:.1f} s "
          f"({args.queries / dense['query_s']:.0f} q/s, query encoding included), "
          f"peak RSS {dense['peak_rss_mb']:,.0f} MB")  # fmt: skip
    if not args.skip_peers:
        peer = child("dense_memory", str(root), count, str(vectors))
        print(f"  dense in memory (today's path, float32, one product): {args.queries} queries "
              f"{peer['query_s']:.1f} s, "
              f"peak RSS {peer['peak_rss_mb']:,.0f} MB")  # fmt: skip
        print(f"    ratios ours/peer: query {dense['query_s'] / peer['query_s']:.2f}x, "
              f"peak RSS {dense['peak_rss_mb'] / peer['peak_rss_mb']:.2f}x")  # fmt: skip
    print("  (a shared 2-core machine: other work ran alongside)")


if __name__ == "__main__":
    main()
