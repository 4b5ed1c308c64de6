"""The review draws: for each (query, chunk) pair and each round that considered it for review, the inclusion
probability, whether it was drawn, the estimate the probability came from, and its stratum: ``take-all`` (drawn for
sure, probability 1) or ``sample`` (the random draw). A drawn pair becomes the review item
:func:`~.migrations.pair_item_id` names.

Each round is a design of its own over the pairs no human had labelled when it ran (its population): the latest
round's draws correct the estimates of the pairs still unlabelled, and the labels earlier rounds brought in are known
for sure by then (:mod:`~testset_builder.metrics.prediction`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

from .migrations import pair_item_id

_COLUMNS = "query_id, chunk_id, item_id, round, probability, drawn, p_relevant, model, stratum"

TAKE_ALL = "take-all"  # taken for sure, probability 1 (a real query's likely relevant pair)
SAMPLE = "sample"  # considered in the random draw, with the probability it records


@dataclass(frozen=True)
class StoredDraw:
    query_id: str
    chunk_id: str
    round: int
    probability: float
    drawn: bool
    p_relevant: float
    model: str
    stratum: str = SAMPLE

    @property
    def item_id(self) -> str:
        return pair_item_id(self.query_id, self.chunk_id)


def put_draws(db: sqlite3.Connection, draws: Iterable[StoredDraw], created_at: str) -> int:
    rows = [
        (d.query_id, d.chunk_id, d.item_id, d.round, d.probability, int(d.drawn), d.p_relevant, d.model, d.stratum,
         created_at)
        for d in draws
    ]  # fmt: skip
    db.executemany(f"INSERT INTO review_draws ({_COLUMNS}, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return len(rows)


def pair_draws(db: sqlite3.Connection) -> dict[tuple[str, str], StoredDraw]:
    """Each (query, chunk) pair a round considered, with the latest such round's draw (the design it is in now)."""
    return {
        (q, c): StoredDraw(q, c, round_, probability, bool(drawn), p, model, stratum)
        for q, c, _, round_, probability, drawn, p, model, stratum in db.execute(
            f"SELECT {_COLUMNS} FROM review_draws ORDER BY round, query_id, chunk_id"
        )
    }


def draws(db: sqlite3.Connection) -> dict[str, StoredDraw]:
    """The same draws, by the review item each pair is (or would be when drawn)."""
    return {draw.item_id: draw for draw in pair_draws(db).values()}


def drawn_pair_probabilities(db: sqlite3.Connection) -> dict[tuple[str, str], float]:
    """The inclusion probability of each (query, chunk) pair a round drew, in the latest round that drew it."""
    return {
        (q, c): probability
        for q, c, probability in db.execute(
            "SELECT query_id, chunk_id, probability FROM review_draws WHERE drawn = 1 ORDER BY round"
        )
    }


def next_round(db: sqlite3.Connection) -> int:
    return db.execute("SELECT COALESCE(MAX(round), 0) + 1 FROM review_draws").fetchone()[0]


def undrawn_pending_pairs(db: sqlite3.Connection) -> list[tuple[str, str]]:
    """The population a review round draws from: every estimated pair that no reviewer has answered and no human or
    synthetic source labels, whether queued already or not, whether an earlier round considered it or not (its
    estimate has been refitted since), as (query, chunk)."""
    return [
        tuple(row)
        for row in db.execute(
            "SELECT e.query_id, e.chunk_id FROM estimates e WHERE "
            "NOT EXISTS (SELECT 1 FROM review_items i JOIN review_state s USING (item_id) WHERE i.kind = 'pair' "
            "AND i.query_id = e.query_id AND i.chunk_id = e.chunk_id AND s.counting = 1) "
            "AND NOT EXISTS (SELECT 1 FROM judgments j WHERE j.query_id = e.query_id AND j.chunk_id = e.chunk_id "
            "AND j.source IN ('human', 'synthetic-source')) ORDER BY 1, 2"
        )
    ]


def waiting_pairs(db: sqlite3.Connection) -> int:
    """How many pairs the latest round that considered them drew and no reviewer has answered yet (a pair an
    earlier round drew and a later one passed over waits no more: its verdict would be set aside)."""
    return db.execute(
        "SELECT COUNT(DISTINCT d.item_id) FROM review_draws d WHERE d.drawn = 1 "
        "AND d.round = (SELECT MAX(e.round) FROM review_draws e WHERE e.item_id = d.item_id) AND NOT EXISTS "
        "(SELECT 1 FROM review_state s WHERE s.item_id = d.item_id AND s.counting = 1)"
    ).fetchone()[0]


def drawn_pairs(db: sqlite3.Connection) -> int:
    """How many pairs the latest round that considered them drew, answered or not (what :func:`waiting_pairs`
    counts down from)."""
    return db.execute(
        "SELECT COUNT(DISTINCT d.item_id) FROM review_draws d WHERE d.drawn = 1 "
        "AND d.round = (SELECT MAX(e.round) FROM review_draws e WHERE e.item_id = d.item_id)"
    ).fetchone()[0]
