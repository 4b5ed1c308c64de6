"""The audit of synthetic labels in the workspace: each question's draw probability and whether it was drawn."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable


def recorded(db: sqlite3.Connection) -> dict[str, tuple[float, bool]]:
    """query_id -> (probability, drawn) of every question the audit has considered."""
    return {q: (p, bool(d)) for q, p, d in db.execute("SELECT query_id, probability, drawn FROM synthetic_audit")}


def record(db: sqlite3.Connection, draws: Iterable[tuple[str, float, bool]], drawn_at: str) -> int:
    """Record each (query_id, probability, drawn) not recorded yet (a question's first draw stands); returns how
    many were new."""
    before = db.execute("SELECT COUNT(*) FROM synthetic_audit").fetchone()[0]
    db.executemany(
        "INSERT OR IGNORE INTO synthetic_audit (query_id, probability, drawn, drawn_at) VALUES (?, ?, ?, ?)",
        [(query_id, probability, int(drawn), drawn_at) for query_id, probability, drawn in draws],
    )
    return db.execute("SELECT COUNT(*) FROM synthetic_audit").fetchone()[0] - before
