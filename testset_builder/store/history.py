"""What ran and what was released: ``stage_runs`` (each stage's settings hash and counts) and ``releases``.
Writes take an open transaction's connection, as in :mod:`~testset_builder.store.rows`."""

from __future__ import annotations

import hashlib
import json
import sqlite3

from .workspace import Workspace, utc_timestamp


def settings_sha256(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()


def record_stage_run(db: sqlite3.Connection, stage: str, config_sha256: str, counts: dict, started_at: str) -> None:
    db.execute(
        "INSERT INTO stage_runs (stage, config_sha256, status, counts, started_at, finished_at) "
        "VALUES (?, ?, 'done', ?, ?, ?)",
        (stage, config_sha256, json.dumps(counts, default=str), started_at, utc_timestamp()),
    )


def release_versions(db: sqlite3.Connection) -> list[str]:
    return [row[0] for row in db.execute("SELECT version FROM releases")]


def release_content_sha256(db: sqlite3.Connection, version: str) -> str | None:
    row = db.execute("SELECT content_sha256 FROM releases WHERE version = ?", (version,)).fetchone()
    return row[0] if row else None


def record_release(
    db: sqlite3.Connection, version: str, parent: str | None, content_sha256: str, manifest: dict
) -> None:
    db.execute(
        "INSERT INTO releases (version, parent_version, content_sha256, manifest, created_at) VALUES (?, ?, ?, ?, ?)",
        (version, parent, content_sha256, json.dumps(manifest), manifest["created_at"]),
    )


def record_stage(workspace: Workspace, stage: str, settings: dict, counts: dict, started_at: str) -> None:
    """One finished stage run, in its own transaction."""
    with workspace.transaction() as db:
        record_stage_run(db, stage, settings_sha256(settings), counts, started_at)


def latest_counts(db: sqlite3.Connection, stage: str) -> dict | None:
    """The counts of the stage's last finished run (None when it never ran)."""
    row = db.execute(
        "SELECT counts FROM stage_runs WHERE stage = ? AND status = 'done' ORDER BY run_id DESC LIMIT 1", (stage,)
    ).fetchone()
    return json.loads(row[0]) if row else None
