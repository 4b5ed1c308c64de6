"""The Hugging Face dataset layout of a release (MTEB retrieval): parquet files and a dataset card.

Configs: ``corpus`` (split ``corpus``: ``_id``, ``title``, ``text``), ``queries`` (split ``queries``: ``_id``,
``text``), ``default`` (split ``test``: qrels ``query-id``, ``corpus-id``, ``score`` as int) — what
``datasets.load_dataset(DIR, "default")`` and MTEB's retrieval loader read — and ``judgments`` (the qrels with each
one's ``origin``). Parquet is written without timestamps or pandas metadata, so the same rows give the same bytes.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

HF_FILES = {
    "corpus": ("corpus", "hf/corpus.parquet"),
    "queries": ("queries", "hf/queries.parquet"),
    "default": ("test", "hf/qrels/test.parquet"),
    "judgments": ("test", "hf/judgments/test.parquet"),
}


def write_parquet(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, compression="zstd", write_statistics=False, store_schema=False)


def write_hf(root: Path, corpus: list[dict], queries: list[dict], qrels: list) -> None:
    write_parquet(
        pa.table(
            {
                "_id": [d["_id"] for d in corpus],
                "title": [d["title"] for d in corpus],
                "text": [d["text"] for d in corpus],
            }
        ),
        root / HF_FILES["corpus"][1],
    )
    write_parquet(
        pa.table({"_id": [q["_id"] for q in queries], "text": [q["text"] for q in queries]}),
        root / HF_FILES["queries"][1],
    )
    ids = pa.array([q.query_id for q in qrels], pa.string())
    chunks = pa.array([q.chunk_id for q in qrels], pa.string())
    scores = pa.array([q.grade for q in qrels], pa.int64())
    write_parquet(pa.table({"query-id": ids, "corpus-id": chunks, "score": scores}), root / HF_FILES["default"][1])
    origins = pa.array([q.origin for q in qrels], pa.string())
    write_parquet(
        pa.table({"query-id": ids, "corpus-id": chunks, "score": scores, "origin": origins}),
        root / HF_FILES["judgments"][1],
    )


def size_category(n: int) -> str:
    for limit, label in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return label
    return "1M<n<10M"


def dataset_card(name: str, manifest: dict, license_id: str) -> str:
    counts = manifest["counts"]
    front = {
        "license": license_id,
        "task_categories": ["text-retrieval"],
        "task_ids": ["document-retrieval"],
        "language": ["en"],
        "size_categories": [size_category(counts["corpus"])],
        "pretty_name": name,
        "tags": ["retrieval", "beir", "mteb", "testset-builder"],
        "configs": [
            {"config_name": config, "data_files": [{"split": split, "path": path}]}
            for config, (split, path) in HF_FILES.items()
        ],
    }
    lineage = manifest["lineage"]
    models = ", ".join(f"{m['provider']} {m['model']}" for m in lineage["models"]) or "none"
    prompts = ", ".join(f"{p['name']} ({p['sha256'][:12]})" for p in lineage["prompts"]) or "none"
    origin = ", ".join(f"{n} {o}" for o, n in counts["qrels_by_origin"].items() if n) or "none"
    grades = ", ".join(f"grade {g}: {n}" for g, n in counts["qrels_by_grade"].items())
    return (
        "---\n" + yaml.safe_dump(front, sort_keys=False, allow_unicode=True) + "---\n\n"
        f"# {name} {manifest['version']}\n\n"
        "A retrieval test set made with [testset-builder](https://pypi.org/project/testset-builder/): queries, a "
        "corpus of "
        "chunks, and graded relevance labels (0 irrelevant, 1 relevant, 2 highly relevant).\n\n"
        "## Contents\n\n"
        f"- corpus: {counts['corpus']} chunks; queries: {counts['queries']} "
        f"({counts['queries_by_origin'].get('synthetic', 0)} synthetic, "
        f"{counts['queries_by_origin'].get('real', 0)} real); qrels: {counts['qrels']} ({grades})\n"
        f"- where the labels come from: {origin}\n"
        f"- content sha256: `{manifest['content_sha256']}`; parent version: {manifest['parent_version'] or 'none'}\n\n"
        "## How it was made\n\n"
        f"- policy: {'; '.join(manifest['policy']['rules'])}\n"
        f"- models: {models}\n- prompts: {prompts}\n"
        f"- reviewers: {', '.join(lineage['reviewers']) or 'none'}\n"
        f"- chunker configs: {', '.join(c[:12] for c in lineage['chunker_configs']) or 'unknown'}\n\n"
        "## Loading\n\n"
        '```python\nfrom datasets import load_dataset\nqrels = load_dataset(PATH, "default", split="test")\n'
        'corpus = load_dataset(PATH, "corpus", split="corpus")\n'
        'queries = load_dataset(PATH, "queries", split="queries")\n```\n\n'
        "BEIR files are in `beir/`, TREC qrels in `qrels.trec`, and `manifest.json` lists every file's sha256 and "
        "the lineage.\n"
    )
