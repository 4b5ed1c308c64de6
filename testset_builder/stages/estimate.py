"""A relevance estimate per (query, chunk) pair, apart from what any single judge said.

The signals are the ones a workspace already has, each cheap: the dense model's cosine similarity (and its gap to
the query's best chunk), the BM25 score normalised by the query's best, each retriever's rank (as log(1 + rank)),
both scores standardised over the query's top 100 chunks and the two ranks' reciprocal-rank fusion (per-query
features: corpora differ in scale, a query's top does not), the share of the query's words found in the chunk, and
the LLM judge's P(relevant) when there is one. A logistic model combines them into P(relevant).

- Before any verdict the shipped prior applies: coefficients fitted on five domains' human labels (see
  :data:`PRIOR`), by ``benchmarks/estimate_transfer.py --fit``, which also checks it leave-one-domain-out. The
  LLM carries no weight in it: the embedded judge is at chance. Where `propose --runs` pooled systems, what their
  ranks and their scores agree on beyond BM25's and the dense model's say (:func:`agreement_beyond`) carries
  :data:`AGREEMENT_WEIGHT` and :data:`SCORE_WEIGHT`.
- With verdicts the model is refitted per workspace, on the features and two columns per system `propose --runs`
  pooled, its ranks per query (:func:`system_columns`) and its scores over all queries (:func:`score_columns`),
  weight 0 in the priors (:func:`refit` fits the features alone): a logistic regression whose coefficients are
  pulled towards the prior's (a Gaussian prior, so twenty verdicts move it a little and two hundred a lot), which
  is also how the LLM's P(relevant) earns a weight, if the team's reviewers find it informative. Fewer than
  ``MIN_VERDICTS`` verdicts, or verdicts of one class only, keep the prior; so does a refit that does not beat it
  on held-out verdicts (:func:`~.relevance.validated_fit`), and each query is scored by the model fitted without
  its fold's verdicts.

Every estimate names the model that made it and how many verdicts that model saw.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .relevance import Coefficients, Validation, fold_of, penalised_fit, penalties, sigmoid, stabilised, validated_fit

FEATURES = (
    "dense",  # cosine similarity of query and chunk (MiniLM)
    "dense_gap",  # that similarity minus the query's best chunk's
    "bm25",  # BM25 score over the query's best chunk's (0..1)
    "bm25_log_rank",  # log(1 + rank) by BM25 over the whole corpus
    "dense_log_rank",  # log(1 + rank) by cosine similarity
    "overlap",  # share of the query's words (3+ letters) found in the chunk
    "llm",  # the LLM judge's P(relevant); 0.5 when it gave none
    "llm_missing",  # 1 when the LLM judge gave no probability
    "dense_z",  # cosine similarity standardised over the query's top 100 chunks (mean 0, deviation 1 there)
    "bm25_z",  # BM25 standardised over the query's top 100 chunks
    "rrf",  # reciprocal-rank fusion of the BM25 and dense ranks, 60 / (60 + rank) each (0..2)
    "runs",  # the systems `propose --runs` pooled: their mean 1 / log2(1 + rank), a z-score over the query's pool,
    # less what the pair's retrieval features predict of it (agreement_beyond): what BM25 and MiniLM do not know
    "runs_missing",  # 1 when no system was pooled for the query
    "scores",  # the pooled systems' mean score (each standardised over every query), less what the features predict of
    # it, over its deviation (agreement_beyond): unlike ranks, scores that mean the same in every query tell them apart
)
LEGACY_FEATURES = len(FEATURES) - 3  # stored before the pooled systems' columns: read with none pooled
# the values a stored row of fewer features (from an older version) takes in the columns it lacks: none pooled
_PADDING = (0.0, 1.0, 0.0)
STORED_LENGTHS = (len(FEATURES), len(FEATURES) - 1, LEGACY_FEATURES)
# The features the shipped priors fit; the others start at weight 0 (the systems' agreement beyond the features: a
# weight set by hand, AGREEMENT_WEIGHT and SCORE_WEIGHT) and earn one from a workspace's verdicts. Fitted on
# four domains and checked on the fifth, in turn (benchmarks/estimate_transfer.py), these three rank held-out pairs
# better than all nine retrieval features on every domain (mean ROC AUC 0.790 against 0.779): the ranks' logarithms and
# the raw BM25 ratio depend on the corpus's size and the query's length, so they do not transfer, and per-query z-scores
# do. The pooled systems' raw agreement is not fitted either: the systems these domains can build are fusions and
# re-rankings of BM25 and MiniLM, whose agreement adds nothing to their own scores (mean held-out AUC 0.789-0.792 with
# it in five forms, 0.791 without); what the priors weigh is the part of it the features do not explain, at a weight
# set by hand (AGREEMENT_WEIGHT; the scores' part likewise, SCORE_WEIGHT). Pseudo-relevance
# feedback (the chunk's cosine to the query's top hits' centroid), an IDF-weighted word overlap, the chunk's length and
# the query's best cosine were tried there too and raised no domain's AUC by more than 0.01 on average; the best cosine
# of any two-sentence window of the chunk raised the mean by 0.006 (0.797 as a z-score, 0.794 raw; MED +0.011, SciFact
# +0.012, CISI and NPL unmoved). They are not features.
PRIOR_FEATURES = ("dense", "dense_z", "bm25_z")
PRIOR_LEXICAL_FEATURES = ("bm25", "bm25_z")  # without a dense model: as good as all five lexical features, held out
TOP = 100  # the chunks a query's scores are standardised over: corpora differ in scale, a query's top does not
MIN_VERDICTS = 20
# the precision of the Gaussian prior on the coefficients, centred on the prior model's. On SciFact (verdicts from half
# the queries, AUC on the other half's pairs) 10 keeps the shipped prior's 0.935 and lifts a weak dense-only prior from
# 0.886 to 0.927 with 50 verdicts; 1 let the in-domain AUC slip (benchmarks/relevance_estimate.py --strengths 1,10)
REFIT_STRENGTH = 10.0
WORD = re.compile(r"\w{3,}", re.UNICODE)
Pair = tuple[str, str]  # (query id, chunk id)


@dataclass(frozen=True)
class RelevanceModel:
    """A logistic model over :data:`FEATURES`, and after a refit the pooled systems' columns besides
    (:func:`with_systems`, named in ``systems``): P(relevant) = sigmoid(bias + weights . features)."""

    name: str
    bias: float
    weights: tuple[float, ...]
    verdicts: int = 0
    systems: tuple[str, ...] = ()  # the names of the pooled systems' columns that follow FEATURES' in ``weights``

    def p_relevant(self, features: np.ndarray) -> np.ndarray:
        """P(relevant) of each row. Rows of :data:`FEATURES` only take 0 in each system's column (the mean of a
        column's reference pairs): right for a query no system was pooled for (a synthetic question's, as
        `synthesize` asks), not for a pooled query's pair, whose columns :func:`with_systems` gives. A model without
        systems' columns (the prior) gives those of wider rows no weight."""
        x = np.atleast_2d(np.asarray(features, dtype=float))
        if x.shape[1] < len(self.weights):
            x = np.hstack([x, np.zeros((len(x), len(self.weights) - x.shape[1]))])
        elif x.shape[1] > len(self.weights):
            if self.systems:
                raise ValueError(f"rows of {x.shape[1]} columns for a model of {len(self.weights)}")
            x = x[:, : len(self.weights)]
        return sigmoid(self.bias + x @ np.asarray(self.weights))

    def as_dict(self) -> dict:
        names = FEATURES + tuple(f"{RUN_COLUMN}{system}" for system in self.systems)
        return {
            "name": self.name,
            "verdicts": self.verdicts,
            "bias": self.bias,
            "weights": dict(zip(names, self.weights)),
        }


RUN_COLUMN = "system:"  # how a pooled system's own column is named among a model's weights


# The priors' weights on what the pooled systems agree on beyond the retrieval features (the ``runs`` and ``scores``
# columns after agreement_beyond). No domain here can fit them (their systems know no more than BM25 and MiniLM), so
# they are bets, and their price and gain were measured on the workflow check's pools (benchmarks/workflow_check.py;
# each collection's prior fitted without it). Where the 13 pooled systems are fusions and re-rankings of BM25 and
# MiniLM, or only the lexical ones are pooled, the estimate's ROC AUC before any verdict moves by -0.007 to +0.001
# (CISI, Cranfield, MED, NPL, SciFact); with three systems that know more pooled beside them by +0.020 or +0.021
# (CISI, Cranfield, NPL); in a shared task's pool, where most systems know more, by +0.077 (CISI, 0.647 to 0.724) and
# +0.068 (NPL, 0.755 to 0.823). The ranks' part alone (AGREEMENT_WEIGHT) gave -0.006 to 0.000, +0.008 to +0.012 and
# +0.041 / +0.037; at 1.0 it cost up to 0.010 and gained up to 0.053; the raw agreement (not residualised) at 0.5
# cost MED 0.013 where only lexical systems were pooled. The scores' part tells queries apart, which ranks per query
# cannot: on the shared-task pools the rank correlation of a query's expected count of relevant pairs with its true
# count rose from 0.29 to 0.46-0.50. A workspace's verdicts refit both like any weight.
AGREEMENT_WEIGHT = 0.75
SCORE_WEIGHT = 0.5


# Fitted on five domains' pools, each domain weighing the same (60 queries each, BM25 top 30, dense top 30 and their
# RRF fusion's top 30, a pooled pair without a qrel counted not relevant): SciFact (scientific claims) and four classic
# collections in benchmarks/data (Cranfield: aeronautics, CISI: library science, MED: medicine, NPL: electronics
# and physics), on :data:`PRIOR_FEATURES` only, by `python benchmarks/estimate_transfer.py --fit`. Left out in turn,
# a domain's pairs get ROC AUC 0.70-0.94 from the prior fitted on the other four (Cranfield 0.764, CISI 0.711, MED
# 0.837, NPL 0.704, SciFact 0.935; the v2 prior on all nine features: 0.760, 0.706, 0.832, 0.679, 0.918), above dense
# similarity alone on four of five (MED: 0.845). The base rate is each domain's own (2% to 42% of the pooled pairs
# relevant), so no prior is calibrated everywhere: the verdicts' refit (or recalibration) fixes it. The LLM carries no
# weight: the embedded judge is at chance; a refit learns what a real judge is worth.
PRIOR = RelevanceModel(
    name="prior:five-domains-v4",
    bias=-3.2441,
    weights=(3.1572, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3469, 0.3253, 0.0, AGREEMENT_WEIGHT, 0.0, SCORE_WEIGHT),
)


# The same fit on :data:`PRIOR_LEXICAL_FEATURES`, for workspaces without the dense model.
PRIOR_LEXICAL = RelevanceModel(
    name="prior:five-domains-lexical-v4",
    bias=-1.7897,
    weights=(0.0, 0.0, 0.4190, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.3220, 0.0, AGREEMENT_WEIGHT, 0.0, SCORE_WEIGHT),
)


def words(text: str) -> set[str]:
    return {w.lower() for w in WORD.findall(text)}


def query_features(
    dense_row: np.ndarray | None,
    bm25_row: np.ndarray,
    positions: Sequence[int],
    query_words: set[str],
    chunk_words: Sequence[set[str]],
    llm: Sequence[float | None],
) -> np.ndarray:
    """Features of one query's pairs: ``dense_row`` and ``bm25_row`` hold every chunk's score for the query
    (corpus order), ``positions`` the pairs' chunks in that order; ``llm`` each pair's P(relevant) or None. Without
    a dense model, the dense features are those of a chunk the model would call unrelated."""
    positions = np.asarray(positions, dtype=int)
    n = len(positions)
    out = np.zeros((n, len(FEATURES)))
    column = FEATURES.index
    bm25 = bm25_row[positions]
    best_bm25 = float(bm25_row.max()) if bm25_row.size else 0.0
    out[:, column("bm25")] = bm25 / best_bm25 if best_bm25 > 0 else 0.0
    bm25_ranks = _ranks(bm25_row, positions)
    out[:, column("bm25_log_rank")] = np.log1p(bm25_ranks)
    out[:, column("bm25_z")] = _standardised(bm25_row, bm25)
    if dense_row is not None:
        dense_ranks = _ranks(dense_row, positions)
        out[:, column("dense")] = dense_row[positions]
        out[:, column("dense_gap")] = dense_row[positions] - float(dense_row.max())
        out[:, column("dense_log_rank")] = np.log1p(dense_ranks)
        out[:, column("dense_z")] = _standardised(dense_row, dense_row[positions])
        out[:, column("rrf")] = 60.0 / (60.0 + bm25_ranks) + 60.0 / (60.0 + dense_ranks)
    else:
        out[:, column("rrf")] = 60.0 / (60.0 + bm25_ranks)
        out = without_dense(out, len(bm25_row))
    out[:, column("overlap")] = [len(query_words & w) / len(query_words) if query_words else 0.0 for w in chunk_words]
    out[:, column("llm")] = [0.5 if p is None else p for p in llm]
    out[:, column("llm_missing")] = [1.0 if p is None else 0.0 for p in llm]
    out[:, column("runs_missing")] = 1.0  # the pooled systems' columns are the store's: filled in when fitting
    return out


def _standardised(row: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``values`` as z-scores against the best :data:`TOP` scores of ``row`` (0 when those are all equal)."""
    if not row.size:
        return np.zeros(len(values))
    top = np.partition(row, len(row) - min(TOP, len(row)))[-min(TOP, len(row)) :].astype(float)
    spread = float(top.std())
    return (np.asarray(values, dtype=float) - float(top.mean())) / spread if spread > 0 else np.zeros(len(values))


def without_dense(features: np.ndarray, chunks: int) -> np.ndarray:
    """The features as they are without a dense model: those of a chunk it would call unrelated (cosine 0, a gap of
    1 to the best, ranked last of ``chunks``, three deviations below the query's top)."""
    out = np.array(features, dtype=float, copy=True)
    out[:, FEATURES.index("dense")] = 0.0
    out[:, FEATURES.index("dense_gap")] = -1.0
    out[:, FEATURES.index("dense_log_rank")] = math.log1p(chunks)
    out[:, FEATURES.index("dense_z")] = -3.0
    bm25_rank = np.expm1(out[:, FEATURES.index("bm25_log_rank")])
    out[:, FEATURES.index("rrf")] = 60.0 / (60.0 + bm25_rank) + 60.0 / (60.0 + chunks)
    return out


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


def _ranks(row: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """1-based rank of each position's score in ``row`` (ties share the best rank)."""
    ordered = np.sort(row)[::-1]
    return 1 + np.searchsorted(-ordered, -row[positions], side="left")


def refit(
    features: np.ndarray,
    labels: np.ndarray,
    prior: RelevanceModel = PRIOR,
    strength: float = REFIT_STRENGTH,
    weights: np.ndarray | None = None,
) -> RelevanceModel:
    """Refit on verdicts (``labels``: 1 relevant, 0 not), coefficients pulled towards ``prior`` with precision
    ``strength`` (maximum a posteriori, :func:`~.relevance.penalised_fit`: a line-searched Newton method that fails
    loudly rather than return a diverged iterate); the prior itself when there are too few verdicts or only one
    class of them. ``weights`` (1 / inclusion probability, for verdicts drawn by
    :mod:`~testset_builder.stages.selection`) make the likelihood that of the whole pool, not of the pairs the
    draw favoured; they are stabilised (:func:`~.relevance.stabilised`). This is the fit alone: the workspace
    keeps it only where it beats the prior on held-out verdicts (:func:`~.relevance.validated_fit`)."""
    x = np.asarray(features, dtype=float)
    y = np.asarray(labels, dtype=float)
    if len(y) < MIN_VERDICTS or y.min() == y.max():
        return prior
    fitted = penalised_fit(
        x, y, Coefficients(prior.bias, prior.weights), penalties(len(FEATURES), strength), stabilised(weights, len(y))
    )
    return RelevanceModel(f"refit:{prior.name}", fitted.bias, fitted.weights, len(y))


def fit(features: np.ndarray, labels: np.ndarray, name: str, l2: float = 1e-3) -> RelevanceModel:
    """A fresh fit with a weak ridge (what made :data:`PRIOR`), the bias as free as the weights."""
    start = Coefficients(0.0, (0.0,) * len(FEATURES))
    fitted = penalised_fit(features, labels, start, penalties(len(FEATURES), l2, 1e-3))
    return RelevanceModel(name, fitted.bias, fitted.weights, 0)


# the workspace ------------------------------------------------------------------------------------------------------


@dataclass
class EstimateSummary:
    pairs: int  # pooled and queued (query, chunk) pairs estimated
    new_features: int  # pairs whose features were computed now (the rest were stored)
    verdicts: int  # pairs with a human grade that the model was fitted on
    relevant_verdicts: int
    model: dict  # the model's name, verdicts seen, bias and weights
    dense: bool  # whether the dense model's features were available
    validation: dict  # the refit's cross-validation on the verdicts: kept or refused, and why (relevance.Validation)

    def as_dict(self) -> dict:
        from dataclasses import asdict

        return asdict(self)


def human_labels(judgments) -> dict[tuple[str, str], int]:
    """Each pair humans graded: 1 when more of its reviewers call it relevant (grade >= 1) than not, else 0."""
    from .policy import reviewer_grades

    return {
        pair: int(2 * sum(g >= 1 for g in by.values()) > len(by))
        for pair, by in reviewer_grades(list(judgments)).items()
    }


def llm_p_relevant(judgments) -> dict[tuple[str, str], float]:
    """The LLM judge's P(relevant) per pair (its latest proposal with grade probabilities)."""
    from ..records import JudgmentSource

    found: dict[tuple[str, str], float] = {}
    for judgment in judgments:
        if judgment.source is JudgmentSource.llm and judgment.grade_probs:
            found[(judgment.query_id, judgment.chunk_id)] = judgment.p_relevant
    return found


SCORES_MB = 256  # the every-chunk score rows held at once by pair_features


def queries_at_once(chunks: int, indexes: int, budget_mb: int = SCORES_MB) -> int:
    """How many queries' every-chunk score rows (float32, one per index) fit in ``budget_mb``: 256 up to ~125k
    chunks with two indexes, fewer above (at a million chunks, 256 queries' rows would be 2 GB), at least one."""
    return max(1, min(256, budget_mb * 2**20 // (4 * max(chunks, 1) * max(indexes, 1))))


def pair_features(indexes, texts: Mapping[str, str], chunks: Mapping[str, Sequence[str]]) -> dict[Pair, np.ndarray]:
    """The features of each query's pairs (``chunks``: query id -> chunk ids; ``texts``: query id -> text; a query
    need not be stored), the LLM's as missing: one scoring pass over the corpus per query, as many queries at a time
    as :func:`queries_at_once` allows, by ``indexes``' BM25 and their dense model when they hold one. A chunk not
    live is left out."""
    dense = "dense" in indexes.indexes
    position = {c: i for i, c in enumerate(indexes.chunk_ids)}
    query_ids = list(chunks)
    found: dict[Pair, np.ndarray] = {}
    step = queries_at_once(len(indexes.chunk_ids), 2 if dense else 1)
    for start in range(0, len(query_ids), step):
        batch = query_ids[start : start + step]
        batch_texts = [texts[q] for q in batch]
        dense_rows = indexes.indexes["dense"].scores(batch_texts) if dense else None
        bm25_rows = indexes.indexes["bm25"].scores(batch_texts)
        for row, query_id in enumerate(batch):
            live = [c for c in chunks[query_id] if c in position]
            block = query_features(
                None if dense_rows is None else dense_rows[row], bm25_rows[row], [position[c] for c in live],
                words(batch_texts[row]), [words(indexes.passages[c]) for c in live], [None] * len(live),
            )  # fmt: skip
            found.update({(query_id, c): block[i] for i, c in enumerate(live)})
    return found


def _workspace_features(workspace, pairs: Sequence[Pair], indexes=None) -> tuple[dict[Pair, np.ndarray], int, bool]:
    """The pairs' features: stored ones as stored, the rest computed now (by ``indexes``, else the workspace's
    BM25 and dense when installed); how many were computed; whether the dense model's features are in them."""
    from ..retrieval import dense_available
    from ..retrieval.indexes import WorkspaceIndexes
    from ..store import estimates as store
    from ..store import rows

    stored = store.estimates(workspace.db)
    features = {
        pair: np.asarray(e.features + _PADDING[len(e.features) - LEGACY_FEATURES :], dtype=float)
        for pair, e in stored.items()
        if len(e.features) in STORED_LENGTHS
    }
    todo: dict[str, list[str]] = {}
    for query_id, chunk_id in pairs:
        if (query_id, chunk_id) not in features:
            todo.setdefault(query_id, []).append(chunk_id)
    dense = any(e.features and e.features[FEATURES.index("dense_gap")] > -1.0 for e in stored.values())
    if todo or indexes is not None:
        indexes = indexes or WorkspaceIndexes(workspace, ("bm25", "dense") if dense_available() else ("bm25",))
        dense = "dense" in indexes.indexes
        texts = {q: rows.get_query(workspace.db, q).text for q in todo}
        features.update(pair_features(indexes, texts, todo))
    return features, sum(len(v) for v in todo.values()), dense


@dataclass(frozen=True)
class Fitted:
    """The estimate's model over a workspace's pairs: the model to name (refit or prior), the model that scores
    each fold's queries (fitted without that fold's verdicts, so no verdict corrects an estimate it made), the
    cross-validation that decided between them, and the pairs' feature matrix and verdicts."""

    model: RelevanceModel
    by_fold: dict[int, RelevanceModel]
    validation: Validation
    keys: list[Pair]
    matrix: np.ndarray
    labels: dict[Pair, int]

    def scored(self) -> tuple[np.ndarray, list[str]]:
        """Each pair's P(relevant) and the name of the model that gave it: the model of its query's fold."""
        p, names = np.zeros(len(self.keys)), [""] * len(self.keys)
        folds = np.array([fold_of(q) for q, _ in self.keys], dtype=int)
        for fold, model in self.by_fold.items():
            inside = folds == fold
            if inside.any():
                p[inside] = model.p_relevant(self.matrix[inside])
                for i in np.flatnonzero(inside):
                    names[i] = model.name
        return p, names


def _fitted(
    workspace,
    features: Mapping[Pair, np.ndarray],
    pairs: Sequence[Pair],
    dense: bool,
    strength: float,
    pooled: Sequence[Pair],
):
    """The model refitted on the humans' verdicts among ``pairs``, over the pairs' feature matrix with the LLM's
    latest P(relevant) and the pooled systems' agreement filled in (both may have come after the features were
    stored; the agreement on the scale of the workspace's ``pooled`` and queued pairs, as the caller read them), kept
    only where it beats the prior on held-out verdicts (:func:`~.relevance.validated_fit`)."""
    from ..retrieval.pool import RUN_PREFIX
    from ..store import draws, rows

    judgments = list(rows.iter_judgments(workspace.db))
    llm = llm_p_relevant(judgments)
    keys = [pair for pair in pairs if pair in features]
    matrix = np.vstack([features[pair] for pair in keys]) if keys else np.zeros((0, len(FEATURES)))
    for i, pair in enumerate(keys):  # the LLM's answer may have come after the features: always the latest
        matrix[i, FEATURES.index("llm")] = llm.get(pair, 0.5)
        matrix[i, FEATURES.index("llm_missing")] = 0.0 if pair in llm else 1.0
    ranked = list(rows.ranks_by(workspace.db, RUN_PREFIX))  # runs pooled since: the latest
    systems, matrix = with_systems(matrix, keys, system_discounts(ranked), pooled, system_scores(ranked), features)
    labels = human_labels(judgments)
    labelled = [i for i, pair in enumerate(keys) if pair in labels]
    drawn = draws.drawn_pair_probabilities(workspace.db)  # a pair drawn for review weighs 1 / its probability
    weights = np.array([1.0 / drawn.get(keys[i], 1.0) for i in labelled])
    y = np.array([labels[keys[i]] for i in labelled], dtype=float)
    return fitted_on(matrix, keys, labelled, y, weights, PRIOR if dense else PRIOR_LEXICAL, systems, strength)


def fitted_on(
    matrix: np.ndarray,
    keys: Sequence[Pair],
    labelled: Sequence[int],
    y: np.ndarray,
    weights: np.ndarray,
    prior: RelevanceModel,
    systems: tuple[str, ...],
    strength: float = REFIT_STRENGTH,
) -> Fitted:
    """The model refitted on the verdicts ``y`` of the rows ``labelled`` (each weighing ``weights``, 1 / its
    inclusion probability), the prior's coefficients and 0 for each of ``systems``' columns as the centre, kept only
    where it beats the prior on held-out verdicts (:func:`~.relevance.validated_fit`); the prior for every fold
    otherwise."""
    coefficients, validation, folds = validated_fit(
        matrix[list(labelled)], y, [keys[i][0] for i in labelled],
        Coefficients(prior.bias, prior.weights + (0.0,) * len(systems)),
        penalties(len(FEATURES) + len(systems), strength), weights, MIN_VERDICTS,
    )  # fmt: skip
    if validation.kept:
        model = RelevanceModel(f"refit:{prior.name}", coefficients.bias, coefficients.weights, len(y), systems)
        by_fold = {
            f: RelevanceModel(f"{model.name} fold {f + 1}/{len(folds)}", c.bias, c.weights, len(y), systems)
            for f, c in folds.items()
        }
    else:
        model, by_fold = prior, dict.fromkeys(folds, prior)
    labels = {keys[i]: int(label) for i, label in zip(labelled, y)}
    return Fitted(model, by_fold, validation, list(keys), matrix, labels)


def current_model(workspace, indexes=None, strength: float = REFIT_STRENGTH) -> RelevanceModel:
    """The model :func:`estimate_workspace` would use now (refitted on the pairs humans graded, if enough, else the
    prior; with ``indexes``' dense model or without it), storing nothing."""
    from ..store import estimates as store
    from ..store import rows

    pooled = store.candidate_pairs(workspace.db)
    graded = sorted(set(pooled) & set(human_labels(rows.iter_judgments(workspace.db))))
    # every pooled pair's features, stored or computed: what the systems agree on beyond them is fitted over the pool
    features, _, dense = _workspace_features(workspace, pooled, indexes)
    return _fitted(workspace, features, graded, dense, strength, pooled).model


def described(name: str, verdicts: int) -> str:
    """How a summary names the estimate that decided: ``estimate (prior scifact-train-v1)``."""
    return f"estimate ({name.replace(':', ' ', 1)}{f', {verdicts} verdicts' if verdicts else ''})"


def _queue_order(keys, p, matrix: np.ndarray, model: RelevanceModel) -> dict:
    """The review priority the estimate gives each pair (P(relevant) + uncertainty, as the judge's). A pair an LLM
    judged keeps the judge's order until the model is refitted on verdicts: the prior gives the LLM no weight, a
    refit learns what it is worth."""
    from .queue import estimate_priority

    judged = matrix[:, FEATURES.index("llm_missing")] == 0.0
    return {
        pair: estimate_priority(round(float(p[i]), 6)) for i, pair in enumerate(keys) if model.verdicts or not judged[i]
    }


def estimate_workspace(
    workspace, pairs: Sequence[Pair] = (), strength: float = REFIT_STRENGTH, indexes=None
) -> EstimateSummary:
    """Estimate every pooled and queued pair of ``workspace``, and ``pairs`` besides (an audit's): compute the
    features not stored yet (one scoring pass per query, by ``indexes`` or the workspace's BM25 and dense when
    installed), refit the model on the pairs humans graded, store each P(relevant) with the model's name and the
    verdicts it saw, and re-order the queued pairs by it (:func:`_queue_order`; drawn and disputed pairs stay
    ahead)."""
    from ..store import estimates as store
    from ..store import review as review_store
    from ..store.workspace import utc_timestamp
    from .queue import DISAGREEMENT_BONUS

    pooled = store.candidate_pairs(workspace.db)
    pairs = sorted(set(pooled) | set(pairs))
    features, computed, dense = _workspace_features(workspace, pairs, indexes)
    fitted = _fitted(workspace, features, pairs, dense, strength, pooled)
    keys, matrix, model = fitted.keys, fitted.matrix, fitted.model
    p, names = fitted.scored()
    with workspace.transaction() as tx:
        store.put_estimates(
            tx,
            (
                store.StoredEstimate(
                    q, c, round(float(p[i]), 6), names[i], model.verdicts, tuple(matrix[i, : len(FEATURES)])
                )  # the pooled systems' own columns are the store's candidates: filled in when fitting
                for i, (q, c) in enumerate(keys)
            ),
            utc_timestamp(),
        )
        review_store.reorder_pairs(tx, _queue_order(keys, p, matrix, model), DISAGREEMENT_BONUS)
    return EstimateSummary(
        len(keys), computed, len(fitted.labels), sum(fitted.labels.values()), model.as_dict(), dense,
        fitted.validation.as_dict(),
    )  # fmt: skip


def estimates_of(workspace, pairs: Sequence[Pair] = ()) -> tuple[EstimateSummary, list[dict], list[Pair]]:
    """Estimate the workspace (as :func:`estimate_workspace`, with ``pairs`` besides) and return its summary and the
    rows of ``pairs`` (every estimated pair when none are given): query id, chunk id, P(relevant), the model that
    gave it and the verdicts it saw; no LLM call. A pair whose query the workspace does not hold is an error (its
    features need the query's text); a pair whose chunk is not live is returned apart, unestimated."""
    from ..store import estimates as store
    from ..store import rows

    for query_id in sorted({q for q, _ in pairs}):
        rows.get_query(workspace.db, query_id)  # UnknownIdError names the first unknown query
    summary = estimate_workspace(workspace, pairs)
    stored = store.estimates(workspace.db)
    wanted = sorted(set(pairs)) if pairs else sorted(stored)
    found = [
        {
            "query-id": q,
            "corpus-id": c,
            "p_relevant": stored[(q, c)].p_relevant,
            "model": stored[(q, c)].model,
            "verdicts": stored[(q, c)].verdicts,
        }
        for q, c in wanted
        if (q, c) in stored
    ]
    return summary, found, [pair for pair in wanted if pair not in stored]
