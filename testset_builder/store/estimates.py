"""The estimates table: each (query, chunk) pair's P(relevant) and what made it."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class StoredEstimate:
    query_id: str
    chunk_id: str
    p_relevant: float
    model: str
    verdicts: int
    features: dict[str, float]  # by name (labels.features.FEATURES): a name it lacks was not a feature when stored


def put_estimates(db: sqlite3.Connection, estimates: Iterable[StoredEstimate], created_at: str) -> int:
    rows = [
        (
            e.query_id,
            e.chunk_id,
            e.p_relevant,
            e.model,
            e.verdicts,
            json.dumps(dict(e.features), sort_keys=True),
            created_at,
        )
        for e in estimates
    ]
    db.executemany(
        "INSERT INTO estimates (query_id, chunk_id, p_relevant, model, verdicts, features, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(query_id, chunk_id) DO UPDATE SET p_relevant = excluded.p_relevant, "
        "model = excluded.model, verdicts = excluded.verdicts, features = excluded.features, "
        "created_at = excluded.created_at",
        rows,
    )
    return len(rows)


def estimates(db: sqlite3.Connection) -> dict[tuple[str, str], StoredEstimate]:
    return {
        (q, c): StoredEstimate(q, c, p, model, n, json.loads(f))
        for q, c, p, model, n, f in db.execute(
            "SELECT query_id, chunk_id, p_relevant, model, verdicts, features FROM estimates"
        )
    }


def any_estimates(db: sqlite3.Connection) -> bool:
    return bool(db.execute("SELECT EXISTS (SELECT 1 FROM estimates)").fetchone()[0])


def candidate_pairs(db: sqlite3.Connection) -> list[tuple[str, str]]:
    """Every pooled (query, chunk) pair and every queued pair, once, in a stable order."""
    return [
        (q, c)
        for q, c in db.execute(
            "SELECT query_id, chunk_id FROM candidates UNION "
            "SELECT query_id, chunk_id FROM review_items WHERE kind = 'pair' ORDER BY 1, 2"
        )
    ]


def graded_estimated_pairs(db: sqlite3.Connection) -> int:
    """How many estimated pairs a human has graded: what a refit of the estimate would learn from."""
    return db.execute(
        "SELECT COUNT(*) FROM estimates e WHERE EXISTS (SELECT 1 FROM judgments j WHERE j.query_id = e.query_id "
        "AND j.chunk_id = e.chunk_id AND j.source = 'human')"
    ).fetchone()[0]


@dataclass(frozen=True)
class EstimatesMade:
    """When the stored estimates were made, and from how many verdicts: what tells whether verdicts came after."""

    oldest: str  # the oldest stored estimate's time (utc_timestamp)
    fewest_verdicts: int  # the fewest verdicts the model of any stored estimate saw


def estimates_made(db: sqlite3.Connection) -> EstimatesMade | None:
    """When and from how many verdicts the stored estimates were made; None when nothing is estimated."""
    oldest, fewest = db.execute("SELECT MIN(created_at), MIN(verdicts) FROM estimates").fetchone()
    return None if oldest is None else EstimatesMade(oldest, fewest)


def estimated_pair_ids(db: sqlite3.Connection) -> list[tuple[str, str]]:
    """Every estimated (query, chunk) pair, in a stable order, without reading the features."""
    return [(q, c) for q, c in db.execute("SELECT query_id, chunk_id FROM estimates ORDER BY 1, 2")]
