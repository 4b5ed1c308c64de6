"""How much of the production traffic a release's test questions cover (:mod:`~testset_builder.metrics.coverage`),
measured when the release is made or made again, and kept in the workspace beside it: ``coverage/VERSION.json``.

It stays out of the release directory on purpose. Its examples are logged queries no reviewer has read, and a
release is what a user publishes. ``score`` and ``report`` on a workspace's release read it from there.

Every logged query and every test question is embedded with the dense encoder. A log of more than
:data:`MAX_LOGGED` distinct queries is measured on a seeded random sample of them, and the file says so. The file
is written again only when the release, the log or the encoder changed (its ``fingerprint``).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from ...metrics.coverage import SAME_TOPIC, traffic_coverage
from ...metrics.failure_signals import likely_failures
from ...store import logs as stored_logs

COVERAGE_DIR = "coverage"
MAX_LOGGED = 10_000  # distinct logged queries embedded; above it, a random sample of this many


def coverage_path(release_path: Path) -> Path:
    """Where a workspace keeps the coverage of its release at ``release_path`` (``WORKSPACE/releases/VERSION``)."""
    release_path = Path(release_path)
    return release_path.parent.parent / COVERAGE_DIR / f"{release_path.name}.json"


def read_coverage(release_path: Path) -> dict | None:
    """The coverage kept for the release at ``release_path``, or None (a release outside its workspace, no log)."""
    path = coverage_path(release_path)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def measure_coverage(workspace, release_path: Path, content_sha256: str, questions: dict[str, str], seed: int = 0):
    """Measure and keep the coverage of the workspace's logged queries by a release's test questions
    (``questions``: id -> text); None when nothing is logged. Returns what was kept."""
    from ...retrieval.dense import INSTALL_HINT, default_model, dense_available, encode

    logged = stored_logs.logged_with_signals(workspace.db)
    if not logged:
        return None
    failed = likely_failures(logged)
    model = default_model()
    fingerprint = _fingerprint(content_sha256, logged, failed, model)
    kept = read_coverage(release_path)
    if kept is not None and kept.get("fingerprint") == fingerprint:
        return kept
    found: dict = {"fingerprint": fingerprint, "encoder": model}
    if not dense_available():
        found["unavailable"] = f"it needs the dense encoder: {INSTALL_HINT}"
    else:
        chosen = _sample(len(logged), seed)
        rows = [logged[i] for i in chosen]
        texts = [row["text"] for row in rows]
        ordered = sorted(questions.values())
        measured = traffic_coverage(
            texts,
            encode(texts, model),
            [row["frequency"] for row in rows],
            [failed[i] for i in chosen],
            encode(ordered, model) if ordered else np.zeros((0, 1), dtype=np.float32),
            SAME_TOPIC,
        )
        found.update(measured.as_dict())
        if len(chosen) < len(logged):
            found["sampled_from"] = len(logged)
    path = coverage_path(release_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(found, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    partial.replace(path)
    return found


def _sample(n: int, seed: int) -> list[int]:
    if n <= MAX_LOGGED:
        return list(range(n))
    return sorted(np.random.default_rng(seed).choice(n, MAX_LOGGED, replace=False).tolist())


def _fingerprint(content_sha256: str, logged: list[dict], failed: list[bool], model: str) -> str:
    digest = hashlib.sha256(f"{content_sha256}\n{model}\n{SAME_TOPIC}\n".encode())
    for row, failing in zip(logged, failed):
        digest.update(f"{row['query_id']}\x00{row['frequency']}\x00{int(failing)}\n".encode())
    return digest.hexdigest()
