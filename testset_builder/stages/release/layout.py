"""Where a release keeps what: the files under ``meta/`` beside the exports (the writer writes them, the reader and
``remap`` read them)."""

CHUNKS_META = "meta/chunks.jsonl"  # {_id, doc_id, start, end, doc_sha256}: where each chunk lies in which text
QUERIES_META = "meta/queries.jsonl"  # {_id, origin, style, source_chunk_id}
EVIDENCE_META = "meta/evidence.jsonl"  # {query_id, chunk_id, start, end, text}: a qrel's evidence, document offsets
REMAP_META = "meta/remap.jsonl"  # a remapped release: each parent label's outcome (see stages/release/remap.py)
