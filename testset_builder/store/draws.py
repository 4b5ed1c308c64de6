"""The review draws: for each pair considered for review, the round that considered it, its inclusion probability,
whether it was drawn, and the estimate the probability came from."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class StoredDraw:
    item_id: str
    round: int
    probability: float
    drawn: bool
    p_relevant: float
    model: str


def put_draws(db: sqlite3.Connection, draws: Iterable[StoredDraw], created_at: str) -> int:
    rows = [(d.item_id, d.round, d.probability, int(d.drawn), d.p_relevant, d.model, created_at) for d in draws]
    db.executemany(
        "INSERT INTO review_draws (item_id, round, probability, drawn, p_relevant, model, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        rows,
    )
    return len(rows)


def draws(db: sqlite3.Connection) -> dict[str, StoredDraw]:
    return {
        row[0]: StoredDraw(row[0], row[1], row[2], bool(row[3]), row[4], row[5])
        for row in db.execute("SELECT item_id, round, probability, drawn, p_relevant, model FROM review_draws")
    }


def drawn_pair_probabilities(db: sqlite3.Connection) -> dict[tuple[str, str], float]:
    """The inclusion probability of each (query, chunk) pair a round drew."""
    return {
        (q, c): p
        for q, c, p in db.execute(
            "SELECT i.query_id, i.chunk_id, d.probability FROM review_draws d JOIN review_items i USING (item_id) "
            "WHERE d.drawn = 1"
        )
    }


def next_round(db: sqlite3.Connection) -> int:
    return db.execute("SELECT COALESCE(MAX(round), 0) + 1 FROM review_draws").fetchone()[0]


def undrawn_pending_pairs(db: sqlite3.Connection) -> list[tuple[str, str, str]]:
    """Pair items no round has considered yet and no reviewer has answered: (item, query, chunk)."""
    return [
        tuple(row)
        for row in db.execute(
            "SELECT i.item_id, i.query_id, i.chunk_id FROM review_items i WHERE i.kind = 'pair' "
            "AND NOT EXISTS (SELECT 1 FROM review_draws d WHERE d.item_id = i.item_id) "
            "AND NOT EXISTS (SELECT 1 FROM review_state s WHERE s.item_id = i.item_id AND s.counting = 1) "
            "ORDER BY i.item_id"
        )
    ]
