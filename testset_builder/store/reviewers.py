"""Reviewers as the workspace knows them: who holds a token of their own (``reviewer_tokens``), who gave verdicts
(``review_verdicts``), and whose token was revoked (a ``revoked:NAME`` review setting, so the listing can say so).
Revoking deletes the token's row, so the token stops working at once; the reviewer's verdicts stay as they are."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field

REVOKED = "revoked:"  # review_settings key prefix: when a reviewer's token was revoked


@dataclass(frozen=True)
class ReviewerRow:
    name: str
    role: str | None  # reviewer or admin while they hold a token; None otherwise
    token: str  # active, revoked, or none (a name given with the workspace's token, or an imported annotator)
    standing: dict[str, int] = field(default_factory=dict)  # standing verdicts by action
    adjudications: int = 0  # pairs they settled (not taken back)
    last_verdict_at: str | None = None


def reviewer_exists(db: sqlite3.Connection, name: str) -> bool:
    """Whether ``name`` is a reviewer here: they hold (or held) a token, or gave a verdict under that name."""
    return bool(
        db.execute(
            "SELECT EXISTS (SELECT 1 FROM reviewer_tokens WHERE reviewer = ?) "
            "OR EXISTS (SELECT 1 FROM review_verdicts WHERE reviewer = ?) "
            "OR EXISTS (SELECT 1 FROM review_settings WHERE key = ?)",
            (name, name, REVOKED + name),
        ).fetchone()[0]
    )


def reviewer_rows(db: sqlite3.Connection) -> list[ReviewerRow]:
    """Every reviewer, by name: their role and token's state, standing verdicts by action, settlements, and when
    they last gave a verdict."""
    roles = dict(db.execute("SELECT reviewer, role FROM reviewer_tokens"))
    revoked = {
        key[len(REVOKED) :] for (key,) in db.execute("SELECT key FROM review_settings WHERE key LIKE 'revoked:%'")
    }
    standing: dict[str, dict[str, int]] = {}
    for reviewer, action, n in db.execute("SELECT reviewer, action, COUNT(*) FROM review_state GROUP BY 1, 2"):
        standing.setdefault(reviewer, {})[action] = n
    settled = dict(
        db.execute(
            "SELECT v.reviewer, COUNT(*) FROM review_verdicts v WHERE v.action = 'adjudicate' "
            "AND NOT EXISTS (SELECT 1 FROM review_verdicts u WHERE u.undoes = v.verdict_id) GROUP BY 1"
        )
    )
    last = dict(db.execute("SELECT reviewer, MAX(created_at) FROM review_verdicts GROUP BY 1"))
    names = sorted(set(roles) | revoked | set(standing) | set(settled) | set(last))
    return [
        ReviewerRow(
            name,
            roles.get(name),
            "active" if name in roles else "revoked" if name in revoked else "none",
            standing.get(name, {}),
            settled.get(name, 0),
            last.get(name),
        )
        for name in names
    ]


def revoke_token(db: sqlite3.Connection, name: str, now: str) -> bool:
    """Delete ``name``'s token (it stops working) and note when; False when they held none."""
    if not db.execute("DELETE FROM reviewer_tokens WHERE reviewer = ?", (name,)).rowcount:
        return False
    db.execute(
        "INSERT INTO review_settings (key, value, set_at) VALUES (?, ?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value, set_at = excluded.set_at",
        (REVOKED + name, now, now),
    )
    return True
