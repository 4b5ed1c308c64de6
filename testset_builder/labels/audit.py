"""The audit of synthetic labels: a few questions drawn at random, checked by a reviewer, tell the share of wrong
labels among the many nobody checked.

Each new synthetic question is drawn into the audit independently with a probability pi_i recorded at the draw
(Poisson sampling, as the pair review draws, :mod:`.design`); a drawn question is queued for question review. A
label is wrong when the reviewer drops the question or edits it (as written, its source label did not hold).

The share wrong is estimated from the audited questions a reviewer answered, each weighted by 1 / pi_i:

    share = sum(wrong_i / pi_i) / sum(1 / pi_i)

(Horvitz-Thompson totals in a ratio, Hajek's form: with equal pi_i it is the audited share wrong, and it does not
move with how many the draw happened to take; Särndal, Swensson and Wretman 1992, 5.7). The interval is Wilson's
score interval on that share with the audited count, or with Kish's effective count (sum w)^2 / sum w^2 when the
probabilities differ (Wilson 1927; Kish 1965). An audited question nobody answered yet counts for nothing: the
answered ones stay a random subset while reviewers take them in the queue's order, which knows nothing of whether
the label is wrong.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054


def audit_probability(expected: int, new: int) -> float:
    """The probability each of ``new`` questions is drawn with, so that about ``expected`` are (at most 1)."""
    return 0.0 if new <= 0 or expected <= 0 else min(1.0, expected / new)


def drawn(query_id: str, probability: float, seed: int = 0) -> bool:
    """Whether the draw takes ``query_id``: a uniform number from a hash of the seed and the id, below the
    probability (the same question is drawn the same way on every rerun)."""
    digest = hashlib.sha256(f"audit\x00{seed}\x00{query_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < probability


def wilson_interval(wrong: float, count: float, z: float = Z95) -> tuple[float, float]:
    """Wilson's score interval for a share ``wrong / count`` (``count`` may be an effective count)."""
    if count <= 0:
        return 0.0, 1.0
    share = wrong / count
    centre = (share + z * z / (2 * count)) / (1 + z * z / count)
    half = z * math.sqrt(share * (1 - share) / count + z * z / (4 * count * count)) / (1 + z * z / count)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class AuditEstimate:
    """The estimated share of wrong labels among the unchecked ones, from ``audited`` answered audit draws."""

    unchecked: int
    audited: int
    wrong: int
    share: float | None
    low: float | None
    high: float | None

    @property
    def sentence(self) -> str:
        """What a release card, a report and ``score`` say."""
        labels = f"{self.unchecked} synthetic label{'s' if self.unchecked != 1 else ''} unchecked"
        if self.share is None:
            return f"{labels}; no audit was done, so their error rate is unknown"
        return (
            f"{labels}; estimated wrong: {100 * self.share:.0f}% [{100 * self.low:.0f}%, {100 * self.high:.0f}%] "
            f"from {self.audited} audited ({self.wrong} wrong)"
        )

    def as_dict(self) -> dict:
        return {
            "unchecked": self.unchecked, "audited": self.audited, "wrong": self.wrong, "share_wrong": self.share,
            "ci_low": self.low, "ci_high": self.high, "statement": self.sentence,
        }  # fmt: skip


def estimate(unchecked: int, wrong: Sequence[bool], probabilities: Sequence[float]) -> AuditEstimate:
    """The share wrong (module docstring) from each answered audit draw's verdict and inclusion probability."""
    if len(wrong) != len(probabilities):
        raise ValueError("one probability per audited question")
    if not wrong:
        return AuditEstimate(unchecked, 0, 0, None, None, None)
    weights = [1.0 / p for p in probabilities]
    share = sum(w for w, bad in zip(weights, wrong) if bad) / sum(weights)
    effective = sum(weights) ** 2 / sum(w * w for w in weights)
    low, high = wilson_interval(share * effective, effective)
    return AuditEstimate(unchecked, len(wrong), sum(map(bool, wrong)), share, low, high)
