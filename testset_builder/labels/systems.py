"""The systems `propose --runs` pooled, as the relevance estimate reads them: one column per system for its rank
discount per pair (:func:`system_columns`) and one for its score (:func:`score_columns`). A refit weighs each
system on its own; the shipped priors weigh none (no held-out collection can fit such weights), so a system earns
its weight from a workspace's verdicts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from .features import Pair


def system_discounts(ranks: Iterable[tuple]) -> dict[str, dict[Pair, float]]:
    """From (query, chunk, system, rank) rows of the pooled systems' top results, a score after the rank or not (one
    row per pair and system, the candidates' key): each system's 1 / log2(1 + rank) per pair it ranked, nDCG's
    discount (1 at the top, 0.29 at rank 10; a pair a system's top leaves out has none), which
    :func:`system_columns` reads."""
    out: dict[str, dict[Pair, float]] = {}
    for query_id, chunk_id, system, rank, *_ in ranks:
        out.setdefault(system, {})[(query_id, chunk_id)] = 1.0 / math.log2(1 + rank)
    return out


def with_systems(
    matrix: np.ndarray,
    keys: Sequence[Pair],
    discounts: Mapping[str, Mapping[Pair, float]],
    reference: Sequence[Pair],
    scores: Mapping[str, Mapping[Pair, float]] | None = None,
) -> tuple[tuple[str, ...], np.ndarray]:
    """A fit's rows with the pooled systems' columns after :data:`~.features.FEATURES`': each system's rank column
    (:func:`system_columns`, on the scale of the query's ``reference`` pairs), then each system's score column
    (:func:`score_columns`, from ``scores``); and the columns' names (a system's, then ``score:<system>``)."""
    scored, by_score = score_columns(scores or {}, keys, reference)
    systems, columns = system_columns(discounts, keys, reference)
    return systems + scored, np.hstack([matrix, columns, by_score])


def system_scores(rows: Iterable[tuple[str, str, str, int, float | None]]) -> dict[str, dict[Pair, float]]:
    """From (query, chunk, system, rank, score) rows of the pooled systems' top results (:func:`system_discounts`'
    rows, read once): each system's score per pair it ranked (a row without a finite score is left out)."""
    out: dict[str, dict[Pair, float]] = {}
    for query_id, chunk_id, system, _, score in rows:
        if score is not None and math.isfinite(score):
            out.setdefault(system, {})[(query_id, chunk_id)] = float(score)
    return out


SCORE_COLUMN = "score:"  # a pooled system's score column among a model's columns: score:<system>


SCORE_CLIP = 5.0  # deviations: a run's outlying scores (a sentinel, a heavy tail) weigh no more than this


def score_columns(
    scores: Mapping[str, Mapping[Pair, float]], keys: Sequence[Pair], reference: Iterable[Pair]
) -> tuple[tuple[str, ...], np.ndarray]:
    """One column per pooled system that gave scores, for the pairs of ``keys``: the system's score for the pair (a
    pair its top left out takes the lowest score it gave in that query: it scored no higher) as a z-score against
    the ``reference`` pairs of the queries it was pooled for, in all queries at once, clipped at :data:`SCORE_CLIP`
    deviations; 0, the reference pairs' mean, for a query the system was not pooled for (as :func:`system_columns`).
    The mean and spread are the reference values' winsorised at their 1st and 99th percentiles, so that a sentinel
    score (-1e9 for "not retrieved") cannot flatten the rest. :func:`system_columns` standardises ranks per query,
    so it gives every query much the same profile of likely relevant pairs, whatever the query holds; a score that
    means the same in every query (a cross-encoder's, a trained dense model's cosine) tells a query with two
    relevant pairs from one with forty, which is what a recall or nDCG figure divides by. A refit weighs each
    column by what the verdicts find in it: a run whose scores are only its ranks (1000 - rank) adds little beyond
    its rank column."""
    systems = tuple(sorted(system for system, found in scores.items() if found))
    reference = sorted(set(reference))
    number = {q: i for i, q in enumerate(sorted({q for q, _ in keys} | {q for q, _ in reference}))}
    of_key = np.array([number[q] for q, _ in keys], dtype=int)
    of_reference = np.array([number[q] for q, _ in reference], dtype=int)
    position = {pair: i for i, pair in enumerate(keys)}
    in_reference = {pair: i for i, pair in enumerate(reference)}
    out = np.zeros((len(keys), len(systems)))
    for j, system in enumerate(systems):
        found = scores[system]
        lowest = np.full(len(number), np.inf)  # per query: the lowest score the system gave (inf: not pooled for it)
        for (query_id, _), value in found.items():
            q = number.get(query_id)
            if q is not None:
                lowest[q] = min(lowest[q], value)
        values = lowest[of_reference]
        for pair, value in found.items():
            i = in_reference.get(pair)
            if i is not None:
                values[i] = value
        values = values[np.isfinite(lowest[of_reference])]
        if len(values) < 2:
            continue
        values = np.clip(values, *np.quantile(values, [0.01, 0.99]))
        mean, spread = float(values.mean()), float(values.std())
        if spread <= 1e-12:
            continue
        column = np.where(np.isfinite(lowest), lowest, mean)[of_key]  # a query the system was not pooled for: 0
        for pair, value in found.items():
            i = position.get(pair)
            if i is not None:
                column[i] = value
        out[:, j] = np.clip((column - mean) / spread, -SCORE_CLIP, SCORE_CLIP)
    return tuple(f"{SCORE_COLUMN}{system}" for system in systems), out


def system_columns(
    discount: Mapping[str, Mapping[Pair, float]], keys: Sequence[Pair], reference: Iterable[Pair]
) -> tuple[tuple[str, ...], np.ndarray]:
    """One column per pooled system, for the pairs of ``keys``, from the :func:`system_discounts`: the system's
    1 / log2(1 + rank) for the pair (0 where its top leaves the chunk out), as a z-score against the query's
    ``reference`` pairs (the workspace's pooled and queued pairs); 0 for a query the system was not pooled for, or
    whose reference pairs it ranks all alike. A refit weighs each system on its own, so the one system that knows
    more is not drowned among many that know what the features know. A query's mean and spread come from the
    system's ranked pairs and the query's count of reference pairs (the rest are 0), so the cost is the ranked rows'
    and one pass over ``keys``, whatever the pool's size."""
    systems = tuple(sorted(discount))
    in_reference = set(reference)
    queries = sorted({q for q, _ in in_reference} | {q for q, _ in keys})
    number = {q: i for i, q in enumerate(queries)}
    counts = np.zeros(len(queries))
    for query_id, _ in in_reference:
        counts[number[query_id]] += 1
    of_key = np.array([number[q] for q, _ in keys], dtype=int)
    position = {pair: i for i, pair in enumerate(keys)}
    out = np.zeros((len(keys), len(systems)))
    for j, system in enumerate(systems):
        total, squares, pooled = np.zeros(len(queries)), np.zeros(len(queries)), np.zeros(len(queries), dtype=bool)
        for (query_id, chunk_id), value in discount[system].items():
            q = number.get(query_id)
            if q is None:  # a query neither fitted nor estimated here
                continue
            pooled[q] = True
            if (query_id, chunk_id) in in_reference:
                total[q] += value
                squares[q] += value * value
        safe = np.maximum(counts, 1.0)
        mean = total / safe
        spread = np.sqrt(np.maximum(squares / safe - mean * mean, 0.0))
        usable = pooled & (counts > 0) & (spread > 1e-12)
        scale = np.where(usable, spread, 1.0)
        column = np.where(usable[of_key], -mean[of_key] / scale[of_key], 0.0)  # a pair the system left out: 0
        for pair, value in discount[system].items():
            i = position.get(pair)
            if i is not None and usable[of_key[i]]:
                column[i] = (value - mean[of_key[i]]) / scale[of_key[i]]
        out[:, j] = column
    return systems, out
