"""The relevance estimate, a service the stages share (``select``, ``propose``, ``synthesize``, ``release``): a
relevance estimate per pooled or queued (query, chunk) pair of the workspace, apart from what any single judge said.
The model, its features and its priors are this package's; this module reads the workspace, fits and stores.

- Before any verdict the shipped prior applies (:mod:`~testset_builder.labels.prior`).
- With verdicts the model is refitted per workspace, on the features and two columns per system `propose --runs`
  pooled (:mod:`~testset_builder.labels.systems`): a logistic regression whose coefficients are pulled towards the
  prior's. Fewer than ``MIN_VERDICTS`` verdicts, or verdicts of one class only, keep the prior; so does a refit that
  does not beat it on held-out verdicts (:func:`~testset_builder.labels.fitting.validated_fit`). Each query is
  scored by the model fitted without its fold's verdicts, so a stored estimate never saw its own pair's verdict.

Every estimate names the model that made it and how many verdicts that model saw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .features import FEATURES, Pair, by_name, query_features, vector, words
from .fitting import Coefficients, Validation, fold_of, penalties, validated_fit
from .model import MIN_VERDICTS, REFIT_STRENGTH, RelevanceModel
from .prior import PRIOR, PRIOR_LEXICAL
from .systems import system_discounts, system_scores, with_systems


@dataclass
class EstimateSummary:
    pairs: int  # pooled and queued (query, chunk) pairs estimated
    new_features: int  # pairs whose features were computed now (the rest were stored)
    verdicts: int  # pairs with a human grade that the model was fitted on
    relevant_verdicts: int
    model: dict  # the model's name, verdicts seen, bias and weights
    dense: bool  # whether the dense model's features were available
    validation: dict  # the refit's cross-validation on the verdicts: kept or refused, and why (fitting.Validation)

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
    features = {pair: vector(e.features) for pair, e in stored.items() if e.features}
    todo: dict[str, list[str]] = {}
    for query_id, chunk_id in pairs:
        if (query_id, chunk_id) not in features:
            todo.setdefault(query_id, []).append(chunk_id)
    dense = any(e.features.get("dense_gap", -1.0) > -1.0 for e in stored.values())
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
    latest P(relevant) and the pooled systems' columns (both may have come after the features were stored; the
    columns on the scale of the workspace's ``pooled`` and queued pairs, as the caller read them), kept only where
    it beats the prior on held-out verdicts (:func:`~testset_builder.labels.fitting.validated_fit`)."""
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
    systems, matrix = with_systems(matrix, keys, system_discounts(ranked), pooled, system_scores(ranked))
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
    where it beats the prior on held-out verdicts (:func:`~testset_builder.labels.fitting.validated_fit`); the prior
    for every fold otherwise."""
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
    """How a summary names the estimate that decided: ``estimate (prior five-domains-v6, 120 verdicts)``."""
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
                    q, c, round(float(p[i]), 6), names[i], model.verdicts, by_name(matrix[i, : len(FEATURES)])
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
