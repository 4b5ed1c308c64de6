"""A review queue over logged queries, built the way a user gets one: a production log imported with import-logs
into a workspace holding the docs, then pairs of the logged queries queued for review."""

from __future__ import annotations

import json
from pathlib import Path

from testset_builder.export.queries import derived_id
from testset_builder.stages.logs.importer import import_logs
from testset_builder.store import review as review_store
from testset_builder.store import rows
from testset_builder.store.workspace import Workspace, utc_timestamp

LOGGED = {  # query text -> (retrieved chunk indexes, thumbs, answer, cited, clicked)
    "how is ndcg computed": ([0, 1], "down", "nDCG sums the grades of the top results.", [0], []),
    "what does recall at k count": ([2], "up", "The relevant chunks found in the first k.", [2], [2]),
    "how do i release a test set": ([3, 4], "down", "Run the release command.", [], []),
    "which models does the llm layer support": ([5], "up", "OpenAI, Anthropic and local models.", [5], [5]),
    "what is a candidate pool": ([6, 7], "down", None, [], []),
    "how are ties broken in a ranking": ([1], "down", "By score.", [1], []),
}


def logged_query_ids() -> list[str]:
    return [derived_id(text) for text in LOGGED]


def write_log(ids: list[str], path: Path) -> Path:
    """The log: each query asked once (the first twice, its latest record retrieving what LOGGED says)."""
    records = []
    for i, (text, (retrieved, thumbs, answer, cited, clicked)) in enumerate(LOGGED.items()):
        record = {
            "query": text, "retrieved": [{"id": ids[r], "score": 0.9 - 0.1 * k} for k, r in enumerate(retrieved)],
            "thumbs": thumbs, "timestamp": f"2026-11-0{i + 2}T10:00:00Z", "cited": [ids[c] for c in cited],
            "clicked": [ids[c] for c in clicked],
        }  # fmt: skip
        if answer:
            record["answer"] = answer
        records.append(record)
    earlier = {**records[0], "timestamp": "2026-11-01T09:00:00Z", "thumbs": "up", "answer": "an older answer"}
    path.write_text("".join(json.dumps(r) + "\n" for r in [earlier, *records]), encoding="utf-8")
    return path


def queue_logged_pairs(ws: Workspace, log_dir: Path) -> dict:
    """Import the log and queue, for each logged query in order, its retrieved chunks and one it did not retrieve
    (priorities falling, so a reviewer meets the queries in LOGGED's order). Returns the chunk ids and query ids."""
    ids = [chunk_id for chunk_id, _, _ in rows.live_chunk_rows(ws.db)]
    import_logs(ws, write_log(ids, log_dir / "rag.jsonl"))
    items, priority = [], 100.0
    for query_id, (retrieved, *_) in zip(logged_query_ids(), LOGGED.values()):
        for index in [*retrieved, 9]:
            items.append(
                review_store.QueuedItem(
                    review_store.pair_item_id(query_id, ids[index]), "pair", query_id, ids[index], priority, "logs", 1
                )
            )
            priority -= 1
    with ws.transaction() as db:
        review_store.enqueue(db, items, utc_timestamp())
    return {"chunks": ids, "queries": logged_query_ids(), "items": items}
