"""Agreement between two labelings of the same items: Cohen's kappa, and precision/recall of one against another."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np


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


def weighted_kappa(a: Sequence[int], b: Sequence[int], categories: Sequence[int] = (0, 1, 2)) -> float | None:
    """Quadratic-weighted Cohen's kappa, 1 - sum(w * O) / sum(w * E), over paired ordinal grades: O the observed
    joint distribution, E the product of the two marginals, w_ij = (i - j)^2 / (k - 1)^2 (a 0 against a 2 costs four
    times a 0 against a 1). None when the chance disagreement is 0. Agrees with scikit-learn's
    ``cohen_kappa_score(weights="quadratic")``."""
    if len(a) != len(b):
        raise ValueError(f"{len(a)} grades against {len(b)}")
    if not a:
        return None
    index = {c: i for i, c in enumerate(categories)}
    k = len(categories)
    observed = np.zeros((k, k))
    for x, y in zip(a, b):
        observed[index[x], index[y]] += 1
    observed /= observed.sum()
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0))
    weights = (np.subtract.outer(np.arange(k), np.arange(k)) ** 2) / max(1, (k - 1) ** 2)
    chance = float((weights * expected).sum())
    if chance == 0:
        return None
    return 1.0 - float((weights * observed).sum()) / chance


def krippendorff_alpha_ordinal(units: Sequence[Sequence[int]], categories: Sequence[int] = (0, 1, 2)) -> float | None:
    """Krippendorff's alpha at the ordinal level, 1 - D_o / D_e, over units each graded by any number of coders
    (a unit with fewer than two grades is not pairable and is left out). Built on the coincidence matrix with the
    ordinal distance delta(c, k) = (sum of n_g for g from c to k - (n_c + n_k) / 2)^2. None without disagreement to
    expect. Agrees with the ``krippendorff`` package's ``alpha(level_of_measurement="ordinal")``."""
    index = {c: i for i, c in enumerate(categories)}
    k = len(categories)
    coincidences = np.zeros((k, k))
    for unit in units:
        m = len(unit)
        if m < 2:
            continue
        counts = np.zeros(k)
        for grade in unit:
            counts[index[grade]] += 1
        coincidences += (np.outer(counts, counts) - np.diag(counts)) / (m - 1)
    totals = coincidences.sum(axis=1)
    n = totals.sum()
    if n <= 1:
        return None
    cumulative = np.cumsum(totals)
    delta = np.zeros((k, k))
    for c in range(k):
        for d in range(k):
            low, high = min(c, d), max(c, d)
            between = cumulative[high] - (cumulative[low - 1] if low > 0 else 0.0)
            delta[c, d] = (between - (totals[c] + totals[d]) / 2) ** 2
    disagreement_observed = float((coincidences * delta).sum())
    disagreement_expected = float((np.outer(totals, totals) * delta).sum()) / (n - 1)
    if disagreement_expected == 0:
        return None
    return 1.0 - disagreement_observed / disagreement_expected


def pairwise_agreement(
    votes: Mapping[Hashable, Mapping[str, Any]], kappa_name: str, kappa: Callable[[list, list], float | None]
) -> tuple[list[dict], float | None]:
    """For each pair of reviewers (``votes``: item -> reviewer -> vote), the items both voted on, their ``kappa``
    (under ``kappa_name``) and exact agreement; and the exact agreement over every such pair of votes."""
    reviewers = sorted({r for by in votes.values() for r in by})
    pairwise, agreeing, pairs_seen = [], 0, 0
    for i, a in enumerate(reviewers):
        for b in reviewers[i + 1 :]:
            shared = sorted(item for item, by in votes.items() if a in by and b in by)
            if not shared:
                continue
            first, second = [votes[s][a] for s in shared], [votes[s][b] for s in shared]
            same = sum(x == y for x, y in zip(first, second))
            agreeing, pairs_seen = agreeing + same, pairs_seen + len(shared)
            pairwise.append(
                {
                    "a": a,
                    "b": b,
                    "shared": len(shared),
                    kappa_name: kappa(first, second),
                    "agreement": same / len(shared),
                }
            )
    return pairwise, agreeing / pairs_seen if pairs_seen else None


def agreement_report(
    grades: dict[tuple[str, str], dict[str, int]],
    llm: dict[tuple[str, str], int] | None = None,
    resolved: dict[tuple[str, str], int] | None = None,
) -> dict:
    """Agreement figures of a review: ``grades`` maps each item (query, chunk) to each reviewer's grade; ``llm`` to
    the LLM judge's grade; ``resolved`` to the grade the release policy resolves from the reviewers.

    Gives, for each pair of reviewers, the items both graded, their quadratic-weighted kappa and exact agreement;
    Krippendorff's ordinal alpha across every reviewer; overall pairwise exact agreement; the LLM against the resolved
    human grade (weighted kappa, exact agreement, a 3 x 3 confusion matrix with rows the LLM's grade and columns the
    human one); and the items on which reviewers disagree."""
    reviewers = sorted({r for by in grades.values() for r in by})
    pairwise, agreement = pairwise_agreement(grades, "weighted_kappa", weighted_kappa)
    report = {
        "items": len(grades),
        "verdicts": sum(len(by) for by in grades.values()),
        "reviewers": reviewers,
        "pairwise": pairwise,
        "krippendorff_alpha": krippendorff_alpha_ordinal([list(by.values()) for by in grades.values()]),
        "agreement": agreement,
        "disagreements": [
            {"query_id": q, "chunk_id": c, "grades": by}
            for (q, c), by in sorted(grades.items())
            if len(set(by.values())) > 1
        ],
    }
    both = sorted(set(llm or {}) & set(resolved or {}))
    confusion = [[0, 0, 0] for _ in range(3)]
    for item in both:
        confusion[llm[item]][resolved[item]] += 1
    report["llm_vs_human"] = {
        "items": len(both),
        "weighted_kappa": weighted_kappa([llm[i] for i in both], [resolved[i] for i in both]) if both else None,
        "agreement": sum(llm[i] == resolved[i] for i in both) / len(both) if both else None,
        "confusion": confusion,
    }
    return report
