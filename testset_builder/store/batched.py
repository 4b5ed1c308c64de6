"""Many values looked up at once, under SQLite's limit on a statement's bound variables: one statement with a
``{marks}`` placeholder (``IN ({marks})``), run over the values :data:`IN_BATCH` at a time. The one way the store
does it."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator

IN_BATCH = 500


def rows_in(db: sqlite3.Connection, sql: str, values: Iterable) -> Iterator[tuple]:
    """The rows of ``sql`` (holding one ``{marks}``) over ``values``, :data:`IN_BATCH` at a time, in that order."""
    values = list(values)
    for start in range(0, len(values), IN_BATCH):
        part = values[start : start + IN_BATCH]
        yield from db.execute(sql.format(marks=",".join("?" * len(part))), part)
