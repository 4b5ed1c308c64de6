"""Agreement between two labelings of the same items: Cohen's kappa, and precision/recall of one against another."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence


def cohen_kappa(a: Sequence, b: Sequence) -> float | None:
    """Cohen's kappa, (p_o - p_e) / (1 - p_e), over paired categorical labels; None when chance agreement is 1
    (both raters used one and the same label for everything, so kappa is undefined)."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} labels against {len(b)}")
    n = len(a)
    if n == 0:
        return None
    observed = sum(x == y for x, y in zip(a, b)) / n
    count_a, count_b = Counter(a), Counter(b)
    expected = sum(count_a[label] * count_b[label] for label in count_a.keys() | count_b.keys()) / (n * n)
    if expected >= 1.0:
        return None
    return (observed - expected) / (1.0 - expected)


def precision_recall(predicted: Sequence[bool], actual: Sequence[bool]) -> tuple[float | None, float | None]:
    """Precision and recall of ``predicted`` positives against ``actual`` ones (None where the denominator is 0)."""
    tp = sum(p and t for p, t in zip(predicted, actual))
    predicted_pos, actual_pos = sum(map(bool, predicted)), sum(map(bool, actual))
    return (tp / predicted_pos if predicted_pos else None, tp / actual_pos if actual_pos else None)
