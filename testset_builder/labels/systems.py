"""The systems `propose --runs` pooled, as the relevance estimate reads them: each system's rank discount and score
per pair, their mean agreement, and what that agreement says beyond the retrieval features.

A refit weighs each system's own columns (:func:`system_columns`, :func:`score_columns`); the mean agreement
(``runs``) and mean score (``scores``), less their least-squares fit on the retrieval features
(:func:`agreement_beyond`), are two features of :data:`~.features.FEATURES`: what a fusion, re-ranking or cut of BM25
and the dense model cannot make of a pair.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from .features import FEATURES, Pair


def system_discounts(ranks: Iterable[tuple]) -> dict[str, dict[Pair, float]]:
    """From (query, chunk, system, rank) rows of the pooled systems' top results, a score after the rank or not (one
    row per pair and system, the candidates' key): each system's 1 / log2(1 + rank) per pair it ranked, nDCG's
    discount (1 at the top, 0.29 at rank 10; a pair a system's top leaves out has none). Read once, it gives both
    :func:`agreement_of` and :func:`system_columns`."""
    out: dict[str, dict[Pair, float]] = {}
    for query_id, chunk_id, system, rank, *_ in ranks:
        out.setdefault(system, {})[(query_id, chunk_id)] = 1.0 / math.log2(1 + rank)
    return out


def run_agreement(ranks: Iterable[tuple]) -> tuple[dict[Pair, float], set[str]]:
    """:func:`agreement_of` the rows' :func:`system_discounts`."""
    return agreement_of(system_discounts(ranks))


def agreement_of(discounts: Mapping[str, Mapping[Pair, float]]) -> tuple[dict[Pair, float], set[str]]:
    """Each pair's mean discount over the systems pooled for its query (0 from a system whose top leaves the chunk
    out), and the queries any system was pooled for. A pair many systems rank high is likelier relevant when the
    systems know something BM25 and the dense model do not; how much, a refit learns from the workspace's verdicts
    (the priors weigh what they agree on beyond the features: :func:`agreement_beyond`)."""
    sums: dict[Pair, float] = {}
    systems: dict[str, set[str]] = {}
    for system, found in discounts.items():
        for pair, value in found.items():
            sums[pair] = sums.get(pair, 0.0) + value
            systems.setdefault(pair[0], set()).add(system)
    return {pair: total / len(systems[pair[0]]) for pair, total in sums.items()}, set(systems)


def with_runs(
    matrix: np.ndarray,
    keys: Sequence[Pair],
    agreement: Mapping[Pair, float],
    queries: set[str],
    reference: Iterable[Pair],
) -> None:
    """Fill in the ``runs`` and ``runs_missing`` columns of ``matrix`` (one row per pair of ``keys``) in place: each
    pair's agreement as a z-score against its query's ``reference`` pairs (the workspace's pooled and queued pairs:
    the same scale whichever pairs are being fitted or asked about; a deviation of 1 is what a refit can weigh from a
    few hundred verdicts, as the other per-query features, where the raw discount spreads by about 0.2), 0 where no
    system was pooled for the query or its reference pairs all agree alike: :func:`system_columns` of the mean, as
    one system."""
    mean = {pair: value for pair, value in agreement.items() if pair[0] in queries}
    _, column = system_columns({"runs": mean}, keys, reference)
    matrix[:, FEATURES.index("runs")] = column[:, 0]
    matrix[:, FEATURES.index("runs_missing")] = [0.0 if query_id in queries else 1.0 for query_id, _ in keys]


# The discount-like transforms of the features and their pairwise products: what a fusion, a re-ranking or a cut of
# BM25 and the dense model can make of a pair, which the pooled systems' agreement is regressed on (agreement_beyond)
_CORE = ("dense_z", "bm25_z", "rrf", "overlap")


_LINEAR = ("dense", "dense_gap", "bm25", "bm25_log_rank", "dense_log_rank", "overlap", "dense_z", "bm25_z", "rrf")


def agreement_basis(matrix: np.ndarray) -> np.ndarray:
    """The regressors :func:`agreement_beyond` explains the systems' agreement by, one row per row of ``matrix``: a
    constant, the retrieval features, each retriever's rank as nDCG's discount (1 / log2(1 + rank), as the agreement
    counts ranks) and the pairwise products (squares included) of the discounts and the per-query scores."""
    x = np.atleast_2d(np.asarray(matrix, dtype=float))
    discounts = [  # a log-rank is at least log 2 (rank 1)
        math.log(2.0) / np.maximum(x[:, FEATURES.index(name)], math.log(2.0))
        for name in ("bm25_log_rank", "dense_log_rank")
    ]
    core = [x[:, FEATURES.index(name)] for name in _CORE] + discounts
    products = [core[i] * core[j] for i in range(len(core)) for j in range(i, len(core))]
    linear = [x[:, FEATURES.index(name)] for name in _LINEAR]
    return np.column_stack([np.ones(len(x)), *linear, *discounts, *products])


CHUNK_ROWS = 65536  # rows of the agreement's basis built at once: its least squares by normal equations, in blocks


def _usable(
    matrix: np.ndarray, keys: Sequence[Pair], rows: np.ndarray, reference: np.ndarray, reference_keys, at: int, fit_rows
) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` and ``fit_rows`` less the rows of a query whose reference values of column ``at`` are all alike (its
    systems rank or score every pooled pair alike: nothing to explain) and those with a non-finite feature."""
    spread: dict[str, list[float]] = {}
    for i in np.flatnonzero(fit_rows):
        spread.setdefault(reference_keys[i][0], []).append(reference[i, at])
    informative = {q for q, found in spread.items() if max(found) - min(found) > 1e-12}

    def kept(x: np.ndarray, of: Sequence[Pair], where: np.ndarray) -> np.ndarray:
        return where & np.isfinite(x).all(axis=1) & np.array([q in informative for q, _ in of], dtype=bool)

    return kept(matrix, keys, rows), kept(reference, reference_keys, fit_rows)


def _least_squares(features: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The coefficients of ``values`` on :func:`agreement_basis` of ``features`` (the minimum-norm solution where
    regressors coincide, as without a dense model), by normal equations summed over blocks of rows."""
    gram, moment = None, None
    for start in range(0, len(values), CHUNK_ROWS):
        basis = agreement_basis(features[start : start + CHUNK_ROWS])
        block = values[start : start + CHUNK_ROWS]
        gram = basis.T @ basis if gram is None else gram + basis.T @ basis
        moment = basis.T @ block if moment is None else moment + basis.T @ block
    diagonal = np.diag(gram)
    kept = diagonal > 1e-12 * diagonal.max()  # a regressor 0 on every reference row (no dense model): no coefficient
    scale = np.sqrt(diagonal[kept])  # equilibrated, so no regressor's unit decides the rank
    solved, *_ = np.linalg.lstsq(gram[np.ix_(kept, kept)] / np.outer(scale, scale), moment[kept] / scale, rcond=1e-10)
    out = np.zeros(len(diagonal))
    out[kept] = solved / scale
    return out


def agreement_beyond(
    matrix: np.ndarray,
    keys: Sequence[Pair],
    reference: np.ndarray,
    reference_keys: Sequence[Pair],
    column: str = "runs",
    rows: np.ndarray | None = None,
    reference_rows: np.ndarray | None = None,
) -> None:
    """Replace ``column`` of ``matrix`` (rows: ``keys``; filled by :func:`with_runs`, or the systems' mean score) by
    what the pooled systems agree on beyond the pairs' retrieval features: the column less its least-squares fit on
    :func:`agreement_basis`, the fit made on the ``reference`` rows (``reference_keys``: the workspace's pooled
    pairs, filled the same way), so a pair's value does not depend on which pairs are estimated with it. ``rows``
    and ``reference_rows`` say where the column applies (default: the queries some system was pooled for,
    ``runs_missing`` 0); elsewhere, in a query whose systems rank or score every pair alike, and in a row with a
    non-finite feature, it is 0. Systems that are fusions and re-rankings of BM25 and the dense model agree on
    nothing the features do not say, and the column shrinks towards 0; systems that know more (a cross-encoder, a
    shared task's runs) keep what they know. The ``scores`` column is then divided by the reference values'
    deviation (scores come in any unit; ranks' discounts are already standardised per query); both are clipped at
    :data:`SCORE_CLIP` (a row unlike every reference row, as a pair scored with the dense model in a pool scored
    without it, would be extrapolated far). Too few reference rows to fit (fewer than twice the regressors): 0."""
    at, missing = FEATURES.index(column), FEATURES.index("runs_missing")
    rows = matrix[:, missing] == 0.0 if rows is None else np.asarray(rows, dtype=bool)
    fit_rows = reference[:, missing] == 0.0 if reference_rows is None else np.asarray(reference_rows, dtype=bool)
    rows, fit_rows = _usable(matrix, keys, rows, reference, reference_keys, at, fit_rows)
    values = reference[fit_rows, at]
    out = np.zeros(len(matrix))
    spread = float(values.std()) if column == "scores" and len(values) else 1.0
    if len(values) >= 2 * agreement_basis(reference[:1]).shape[1] and spread > 1e-12 and rows.any():
        beta = _least_squares(reference[fit_rows], values)
        for start in range(0, len(matrix), CHUNK_ROWS):
            inside = np.flatnonzero(rows[start : start + CHUNK_ROWS]) + start
            if len(inside):
                predicted = agreement_basis(matrix[inside]) @ beta
                out[inside] = np.clip((matrix[inside, at] - predicted) / spread, -SCORE_CLIP, SCORE_CLIP)
    matrix[:, at] = out


def _mean_score(matrix: np.ndarray, keys: Sequence[Pair], by_score: np.ndarray, scored: Sequence[set[str]]):
    """Fill the ``scores`` column with each pair's mean over the systems that gave scores for its query (of
    :func:`score_columns`' columns ``by_score``; ``scored``: each column's queries); returns where any did."""
    counts = np.zeros(len(keys))
    total = np.zeros(len(keys))
    number: dict[str, int] = {}
    of_key = np.array([number.setdefault(q, len(number)) for q, _ in keys], dtype=int)
    for j, queries in enumerate(scored):
        inside = np.isin(of_key, [i for q, i in number.items() if q in queries])
        counts += inside
        total += np.where(inside, by_score[:, j], 0.0)
    matrix[:, FEATURES.index("scores")] = np.where(counts > 0, total / np.maximum(counts, 1.0), 0.0)
    return counts > 0


def with_systems(
    matrix: np.ndarray,
    keys: Sequence[Pair],
    discounts: Mapping[str, Mapping[Pair, float]],
    reference: Sequence[Pair],
    scores: Mapping[str, Mapping[Pair, float]] | None = None,
    features: Mapping[Pair, np.ndarray] | None = None,
) -> tuple[tuple[str, ...], np.ndarray]:
    """The pooled systems' part of a fit's rows: their mean agreement filled into ``matrix`` (:func:`with_runs`;
    with the reference pairs' ``features``, what they agree on beyond them, :func:`agreement_beyond`), and ``matrix``
    with each system's column after :data:`FEATURES`' (:func:`system_columns`), on the scale of the query's
    ``reference`` pairs, then each system's score column (:func:`score_columns`, from ``scores``); the columns'
    names (a system's, then ``score:<system>``), in their order."""
    agreement, ran = agreement_of(discounts)
    with_runs(matrix, keys, agreement, ran, reference)
    scores = scores or {}
    scored, by_score = score_columns(scores, keys, reference)
    matrix[:, FEATURES.index("scores")] = 0.0  # what the systems' scores say beyond the features needs those features
    if features is not None:
        known = [pair for pair in reference if pair in features]
        fitted_on = np.vstack([features[pair] for pair in known]) if known else np.zeros((0, len(FEATURES)))
        fitted_on = np.array(fitted_on[:, : len(FEATURES)], dtype=float)
        with_runs(fitted_on, known, agreement, ran, reference)
        agreement_beyond(matrix, keys, fitted_on, known)
        _, reference_scores = score_columns(scores, known, reference)
        # a system score_columns could not scale (its scores all alike) gives a column of 0s: it is left out of the mean
        scaled = np.flatnonzero(np.any(reference_scores != 0.0, axis=0))
        by_system = [{q for q, _ in scores[scored[j][len(SCORE_COLUMN) :]]} for j in scaled]
        has_scores = _mean_score(matrix, keys, by_score[:, scaled], by_system)
        reference_scored = _mean_score(fitted_on, known, reference_scores[:, scaled], by_system)
        agreement_beyond(matrix, keys, fitted_on, known, "scores", has_scores, reference_scored)
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
    ``reference`` pairs (the workspace's pooled and queued pairs, as :func:`with_runs`); 0 for a query the system was
    not pooled for, or whose reference pairs it ranks all alike. A refit weighs each system on its own: the mean
    agreement (:data:`FEATURES`' ``runs``) drowns the one system that knows more among many that know what the
    features know. A query's mean and spread come from the system's ranked pairs and the query's count of reference
    pairs (the rest are 0), so the cost is the ranked rows' and one pass over ``keys``, whatever the pool's size."""
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
