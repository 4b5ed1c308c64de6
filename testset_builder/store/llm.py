"""The LLM response cache and cost ledger (``llm_calls``) and submitted batches (``llm_batches``).

A row per canonical request (its sha256 with the provider identity): the answer once there is one, else the last
error. Writes take an open transaction's connection, as in :mod:`~testset_builder.store.rows`.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass

from .workspace import utc_timestamp


@dataclass(frozen=True)
class CallRecord:
    """One attempt series at a request, as the ledger keeps it (JSON text for request, response and usage)."""

    key: str
    stage: str
    provider: str
    model: str
    request: str
    response: str | None
    usage: str | None
    cost_usd: float | None
    latency_s: float | None
    attempts: int
    error: str | None


def cached_response(db: sqlite3.Connection, key: str) -> str | None:
    """The cached answer (a Completion's JSON) for a request key, if it was ever answered."""
    row = db.execute(
        "SELECT response FROM llm_calls WHERE request_sha256 = ? AND response IS NOT NULL", (key,)
    ).fetchone()
    return row[0] if row else None


def record_call(db: sqlite3.Connection, call: CallRecord) -> None:
    """Add or update a request's row: a later answer replaces an earlier error; attempts add up."""
    db.execute(
        "INSERT INTO llm_calls (request_sha256, stage, provider, model, request, response, usage, cost_usd, "
        "latency_s, attempts, error, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT(request_sha256) DO UPDATE SET response = excluded.response, usage = excluded.usage, "
        "cost_usd = excluded.cost_usd, latency_s = excluded.latency_s, "
        "attempts = llm_calls.attempts + excluded.attempts, error = excluded.error",
        (
            call.key, call.stage, call.provider, call.model, call.request, call.response, call.usage,
            call.cost_usd, call.latency_s, call.attempts, call.error, utc_timestamp(),
        ),
    )  # fmt: skip


def pending_batch_keys(db: sqlite3.Connection) -> set[str]:
    """Request keys in batches submitted (or being submitted) and not yet collected."""
    keys: set[str] = set()
    sql = "SELECT requests FROM llm_batches WHERE status IN ('submitting', 'submitted')"
    for (requests_json,) in db.execute(sql):
        keys.update(json.loads(requests_json))
    return keys


def interrupted_submissions(db: sqlite3.Connection, provider: str) -> list[tuple[str, str, int]]:
    """(intent id, when, requests) of this provider's batch submissions that were never confirmed: the process
    stopped between sending the batch and recording its id, so the provider may or may not have it."""
    sql = "SELECT batch_id, submitted_at, requests FROM llm_batches WHERE status = 'submitting' AND provider = ?"
    return [(intent, when, len(json.loads(requests))) for intent, when, requests in db.execute(sql, (provider,))]


def add_batch_intent(
    db: sqlite3.Connection, intent_id: str, provider: str, stage: str, requests: dict[str, str]
) -> None:
    """Record a batch about to be sent (request key -> canonical JSON), before it is sent."""
    db.execute(
        "INSERT INTO llm_batches (batch_id, provider, stage, status, requests, submitted_at) "
        "VALUES (?, ?, ?, 'submitting', ?, ?)",
        (intent_id, provider, stage, json.dumps(requests), utc_timestamp()),
    )


def confirm_batch(db: sqlite3.Connection, intent_id: str, batch_id: str) -> None:
    """The provider took the batch: the intent becomes the batch under the provider's id."""
    db.execute("UPDATE llm_batches SET batch_id = ?, status = 'submitted' WHERE batch_id = ?", (batch_id, intent_id))


def drop_batch_intent(db: sqlite3.Connection, intent_id: str) -> None:
    """The provider refused the batch (an error came back): nothing was submitted."""
    db.execute(
        "UPDATE llm_batches SET status = 'abandoned', ended_at = ? WHERE batch_id = ?", (utc_timestamp(), intent_id)
    )


def abandon_interrupted(db: sqlite3.Connection, provider: str) -> int:
    """Forget this provider's interrupted submissions (after checking the provider has none of them)."""
    sql = "UPDATE llm_batches SET status = 'abandoned', ended_at = ? WHERE status = 'submitting' AND provider = ?"
    return db.execute(sql, (utc_timestamp(), provider)).rowcount


def submitted_batches(db: sqlite3.Connection, provider: str) -> list[tuple[str, dict[str, str]]]:
    """(batch id, request key -> canonical JSON) of this provider's batches not yet collected."""
    rows = db.execute(
        "SELECT batch_id, requests FROM llm_batches WHERE status = 'submitted' AND provider = ? ORDER BY submitted_at",
        (provider,),
    ).fetchall()
    return [(batch_id, json.loads(requests)) for batch_id, requests in rows]


def end_batch(db: sqlite3.Connection, batch_id: str) -> None:
    db.execute("UPDATE llm_batches SET status = 'ended', ended_at = ? WHERE batch_id = ?", (utc_timestamp(), batch_id))


def cost_summary(db: sqlite3.Connection) -> list[dict]:
    """One row per (stage, provider, model): calls answered, failed, attempts, tokens and cost (None if unpriced)."""
    summary: dict[tuple[str, str, str], dict] = {}
    sql = "SELECT stage, provider, model, usage, cost_usd, attempts, response IS NOT NULL AS ok FROM llm_calls"
    for stage, provider, model, usage_json, cost, attempts, answered in db.execute(sql):
        entry = summary.setdefault(
            (stage, provider, model),
            {
                "stage": stage, "provider": provider, "model": model, "calls": 0, "failed": 0, "attempts": 0,
                "input_tokens": 0, "output_tokens": 0, "cost_usd": 0.0, "unpriced_calls": 0,
            },
        )  # fmt: skip
        entry["attempts"] += attempts
        if not answered:
            entry["failed"] += 1
            continue
        entry["calls"] += 1
        usage = json.loads(usage_json) if usage_json else {}
        entry["input_tokens"] += usage.get("input_tokens", 0)
        entry["output_tokens"] += usage.get("output_tokens", 0)
        if cost is None:
            entry["unpriced_calls"] += 1
        else:
            entry["cost_usd"] += cost
    return [summary[key] for key in sorted(summary)]


def answered_calls(db: sqlite3.Connection, limit: int = 5000) -> list[tuple[str, str, str]]:
    """The latest answered calls' model, request and usage (JSON text): what a plan learns token counts from."""
    sql = (
        "SELECT model, request, usage FROM llm_calls WHERE response IS NOT NULL AND usage IS NOT NULL "
        "ORDER BY rowid DESC LIMIT ?"
    )
    return [tuple(row) for row in db.execute(sql, (limit,))]
