"""Chunking throughput on the SciFact corpus against langchain-text-splitters and semchunk, in the same run.

Same chunk size for all: 1,000 characters with 100 of overlap (semchunk takes no overlap argument in characters
here, so it runs without). Each splitter gets the same texts; throughput is MB of UTF-8 text per second, best of 3.
Also: ingesting the corpus into a workspace, then rerunning on the unchanged corpus.

    python benchmarks/chunking_speed.py [--corpus ../shared/data/scifact]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from testset_builder.config import ChunkingConfig
from testset_builder.corpus.chunkers import chunk_document
from testset_builder.corpus.ingest import ingest
from testset_builder.corpus.loaders import load_sources
from testset_builder.records import Document
from testset_builder.store import open_workspace

DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "shared" / "data" / "scifact"
SIZE, OVERLAP = 1000, 100


def best_of(runs: int, work) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    args = parser.parse_args(argv)
    if not (args.corpus / "corpus.jsonl").exists():
        print(f"skipped: no corpus at {args.corpus}")
        return
    texts = [json.loads(line)["text"] for line in (args.corpus / "corpus.jsonl").open(encoding="utf-8")]
    documents = [Document(doc_id=str(i), text=t) for i, t in enumerate(texts)]
    megabytes = sum(len(t.encode("utf-8")) for t in texts) / 1e6

    contenders = {}
    config = ChunkingConfig(chunker="recursive", size=SIZE, overlap=OVERLAP)
    contenders["testset-builder recursive"] = lambda: [chunk_document(d, config) for d in documents]
    sentence = ChunkingConfig(chunker="sentence", size=SIZE, overlap=OVERLAP)
    contenders["testset-builder sentence"] = lambda: [chunk_document(d, sentence) for d in documents]
    try:
        from langchain_text_splitters import RecursiveCharacterTextSplitter

        splitter = RecursiveCharacterTextSplitter(chunk_size=SIZE, chunk_overlap=OVERLAP, add_start_index=True)
        contenders["langchain RecursiveCharacterTextSplitter"] = lambda: [splitter.split_text(t) for t in texts]
    except ImportError as error:
        print(f"langchain-text-splitters not installed: {error}")
    try:
        import semchunk

        chunker = semchunk.chunkerify(len, chunk_size=SIZE)
        contenders["semchunk (len counter)"] = lambda: [chunker(t) for t in texts]
    except ImportError as error:
        print(f"semchunk not installed: {error}")

    print(f"SciFact: {len(texts):,} documents, {megabytes:.1f} MB; chunk size {SIZE} characters, overlap {OVERLAP}")
    results = {name: megabytes / best_of(3, work) for name, work in contenders.items()}
    fastest_peer = max((v for k, v in results.items() if not k.startswith("testset-builder")), default=None)
    for name, rate in results.items():
        ratio = f"{rate / fastest_peer:.2f}x the fastest peer" if fastest_peer else ""
        print(f"  {name:<42}{rate:>8.2f} MB/s  {ratio}")

    with tempfile.TemporaryDirectory() as tmp, open_workspace(Path(tmp) / "ws") as workspace:
        loaded = load_sources([args.corpus])
        start = time.perf_counter()
        first = ingest(workspace, loaded, config, [args.corpus])
        first_time = time.perf_counter() - start
        start = time.perf_counter()
        again = ingest(workspace, load_sources([args.corpus]), config, [args.corpus])
        again_time = time.perf_counter() - start
    print(
        f"  ingest into a workspace: {first_time:.2f} s ({first.chunks_added:,} chunks); "
        f"rerun on the unchanged corpus (load + compare): {again_time:.2f} s, {again.unchanged:,} unchanged, "
        f"{again.chunks_added} added"
    )


if __name__ == "__main__":
    main()
