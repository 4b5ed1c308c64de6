"""What a logged query's records say went wrong: the signals failure-first selection weighs, and the coverage of
production traffic counts as likely failures.

    w = (1 + 4 * thumbs-down share + 1.5 * share of cited answers nobody clicked + 1 if its mean rating is below
         the log's median + 1 if its top production score is in the log's lowest quarter + 1 if nothing was
         retrieved) * (1 + log2(frequency))

A query is a likely failure when any of these signals is present (the first factor is above 1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

LOW_SCORE_QUANTILE = 0.25  # a top retrieval score in the log's lowest quarter is a signal
LOW_SCORE_FROM = 4  # scores a log needs before its lowest quarter means anything


def signal_thresholds(rows: Sequence[dict]) -> tuple[float | None, float | None]:
    """(the log's median mean rating, its lowest quarter's top retrieval score) over ``rows``, the logged queries'
    aggregates; None where the log has too few to say."""
    ratings = [r["rating_sum"] / r["ratings"] for r in rows if r["ratings"]]
    scores = [r["top_score"] for r in rows if r["top_score"] is not None]
    median_rating = float(np.median(ratings)) if ratings else None
    low_score = float(np.quantile(scores, LOW_SCORE_QUANTILE)) if len(scores) >= LOW_SCORE_FROM else None
    return median_rating, low_score


def failure_signals(row: dict, median_rating: float | None, low_score: float | None) -> tuple[float, list[str]]:
    """The first factor of the weight (1 when nothing points at a failure) and its reasons, in words."""
    frequency, weight, reasons = max(1, row["frequency"]), 1.0, []
    if row["thumbs_down"]:
        weight += 4.0 * row["thumbs_down"] / frequency
        reasons.append(f"thumbs down {row['thumbs_down']} of {frequency}")
    unclicked = (row["cited"] or 0) - (row["clicked"] or 0)
    if unclicked > 0:
        weight += 1.5 * unclicked / frequency
        reasons.append(f"cited sources not clicked {unclicked} of {row['cited']}")
    if row["ratings"] and median_rating is not None and row["rating_sum"] / row["ratings"] < median_rating:
        weight += 1.0
        reasons.append(f"rated {row['rating_sum'] / row['ratings']:.1f}, below the log's median {median_rating:.1f}")
    if row["top_score"] is not None and low_score is not None and row["top_score"] <= low_score:
        weight += 1.0
        reasons.append(f"top retrieval score {row['top_score']:.3g}, in the log's lowest quarter")
    if not row["retrieved"]:  # a log without timestamps keeps its retrievals with no time
        weight += 1.0
        reasons.append("nothing retrieved (or no logged result matched a chunk)")
    return weight, reasons


def failure_weight(row: dict, median_rating: float | None, low_score: float | None) -> tuple[float, list[str]]:
    """The query's weight in the failure-first draw and the reasons, in words (see the module docstring)."""
    weight, reasons = failure_signals(row, median_rating, low_score)
    frequency = max(1, row["frequency"])
    if frequency > 1:
        reasons.append(f"asked {frequency} times")
    return weight * (1.0 + math.log2(frequency)), reasons


def likely_failures(rows: Sequence[dict]) -> list[bool]:
    """Whether each logged query is a likely failure: some signal of :func:`failure_signals` is present."""
    median_rating, low_score = signal_thresholds(rows)
    return [failure_signals(row, median_rating, low_score)[0] > 1.0 for row in rows]
