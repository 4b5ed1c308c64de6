"""Summaries of the ``llm_calls`` ledger: what each stage and model has cost."""

from __future__ import annotations

import json
import sqlite3


def cost_summary(db: sqlite3.Connection) -> list[dict]:
    """One row per (stage, provider, model): calls answered, failed, attempts, tokens and cost (None if unpriced)."""
    summary: dict[tuple[str, str, str], dict] = {}
    for row in db.execute(
        "SELECT stage, provider, model, usage, cost_usd, attempts, response IS NOT NULL AS ok FROM llm_calls"
    ):
        entry = summary.setdefault(
            (row[0], row[1], row[2]),
            {
                "stage": row[0],
                "provider": row[1],
                "model": row[2],
                "calls": 0,
                "failed": 0,
                "attempts": 0,
                "input_tokens": 0,
                "output_tokens": 0,
                "cost_usd": 0.0,
                "unpriced_calls": 0,
            },
        )
        entry["attempts"] += row[5]
        if not row[6]:
            entry["failed"] += 1
            continue
        entry["calls"] += 1
        usage = json.loads(row[3]) if row[3] else {}
        entry["input_tokens"] += usage.get("input_tokens", 0)
        entry["output_tokens"] += usage.get("output_tokens", 0)
        if row[4] is None:
            entry["unpriced_calls"] += 1
        else:
            entry["cost_usd"] += row[4]
    return [summary[key] for key in sorted(summary)]
