"""Review priority: which proposals a reviewer should see first.

``priority = P(relevant) + uncertainty``, both in [0, 1], so the most likely relevant *and* most uncertain come
first: a confident "irrelevant" is the last thing worth a human minute, a coin-flip "relevant" the first.
``P(relevant)`` is P(grade >= 1) from the grade probabilities; ``uncertainty`` is their entropy over the three
grades divided by log 3 (for the relevance estimate's P(relevant), its binary entropy divided by log 2). Without
probabilities (a provider with no log-probabilities) the sampled grade stands in for P(relevant) (1 or 0) and the
uncertainty is unknown, taken as 0.5. Disagreements found by an audit get a bonus of 2, so they head the queue.
"""

from __future__ import annotations

import math

from ..records import Judgment

UNKNOWN_UNCERTAINTY = 0.5
DISAGREEMENT_BONUS = 2.0  # above any other priority (at most 2)


def uncertainty(grade_probs: dict[int, float]) -> float:
    entropy = -sum(p * math.log(p) for p in grade_probs.values() if p > 0)
    return min(1.0, entropy / math.log(3))


def review_priority(judgment: Judgment, disagreement: bool = False) -> float:
    if judgment.grade_probs:
        value = judgment.p_relevant + uncertainty(judgment.grade_probs)
    else:
        value = (1.0 if judgment.grade >= 1 else 0.0) + UNKNOWN_UNCERTAINTY
    return round(value + (DISAGREEMENT_BONUS if disagreement else 0.0), 6)


def estimate_priority(p_relevant: float) -> float:
    """The same rule for a pair the relevance estimate proposes: P(relevant) + its binary entropy / log 2."""
    p = min(1.0, max(0.0, p_relevant))
    entropy = -sum(x * math.log(x) for x in (p, 1.0 - p) if x > 0)
    return round(p + entropy / math.log(2), 6)
