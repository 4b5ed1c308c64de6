"""The estimated side of a release (``estimates.jsonl``): every pair of the released queries that the workspace
estimated or the policy labelled, one JSON object per line, sorted by query then chunk id:

- ``query-id``, ``corpus-id``;
- ``p_relevant`` and ``model``: the relevance estimate (:mod:`~testset_builder.labels.estimate`) and the model that
  made it, or null for a labelled pair nothing estimated (a synthetic question's source, an imported qrel);
- ``label`` and ``origin``: the grade the policy released and where it came from (``human``, ``synthetic-source``,
  ``llm-unverified``), or null for a pair only estimated;
- ``draw``: the review round that considered the pair (:mod:`~testset_builder.stages.selection`), its inclusion
  probability, whether it was drawn, and its stratum (``take-all``: taken for sure, probability 1; ``sample``: the
  random draw), or null.

This is what prediction-powered scoring (:mod:`~testset_builder.metrics.prediction`) reads: the estimates stand in
for the labels nobody gave, and the verdicts on pairs drawn with known probabilities correct them.
"""

from __future__ import annotations

import json
from collections import Counter

ESTIMATES_FILE = "estimates.jsonl"


def estimated_pairs(estimates: dict, draws: dict, qrels: list, keep_query, keep_chunk) -> list[dict]:
    """The rows of ``estimates.jsonl``: ``estimates`` and ``draws`` keyed by (query, chunk) as the store gives them,
    ``qrels`` the resolved qrels; ``keep_query`` / ``keep_chunk`` say which estimated pairs a release can name (not a
    dropped question, not a removed chunk). Nothing estimated, nothing to write."""
    if not estimates:
        return []
    labels = {(q.query_id, q.chunk_id): q for q in qrels}
    estimated = {pair for pair in estimates if keep_query(pair[0]) and keep_chunk(pair[1])}
    rows = []
    for pair in sorted(estimated | labels.keys()):
        estimate, label, draw = estimates.get(pair), labels.get(pair), draws.get(pair)
        rows.append(
            {
                "query-id": pair[0],
                "corpus-id": pair[1],
                "p_relevant": estimate.p_relevant if estimate else None,
                "model": estimate.model if estimate else None,
                "label": label.grade if label else None,
                "origin": label.origin if label else None,
                "draw": draw_fields(draw) if draw else None,
            }
        )
    return rows


def draw_fields(draw) -> dict:
    """A pair's stored draw as ``estimates.jsonl`` gives it."""
    return {"round": draw.round, "probability": draw.probability, "drawn": draw.drawn, "stratum": draw.stratum}


def estimates_text(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def read_estimates(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def estimate_counts(rows: list[dict]) -> dict:
    """What the manifest says of the estimated side: how many pairs stand on an estimate alone, how many carry a
    label and of which origin, and how many the review drew (and of those, how many a human answered)."""
    drawn = [row for row in rows if row["draw"] and row["draw"]["drawn"]]
    return {
        "file": ESTIMATES_FILE,
        "pairs": len(rows),
        "queries": len({row["query-id"] for row in rows}),
        "estimated_only": sum(row["label"] is None for row in rows),
        "labelled_by_origin": dict(sorted(Counter(row["origin"] for row in rows if row["origin"]).items())),
        "drawn": len(drawn),
        "drawn_answered": sum(row["origin"] == "human" for row in drawn),
        "models": dict(sorted(Counter(row["model"] for row in rows if row["model"]).items())),
    }
