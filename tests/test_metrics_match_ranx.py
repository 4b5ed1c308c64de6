"""Our metrics agree with ranx where ranx shares trec_eval's conventions.

ranx breaks score ties its own way, so the runs here have distinct scores; ``ndcg_exp`` is checked against ranx's
``ndcg_burges`` (gain 2^grade - 1), which trec_eval does not have.
"""

from __future__ import annotations

import math
import warnings

import pytest
from conftest import require
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testset_builder.metrics import evaluate
from testset_builder.tables import Qrels, Run

ranx = require("ranx")

OURS_TO_RANX = {
    "recall@3": "recall@3",
    "recall@10": "recall@10",
    "precision@3": "precision@3",
    "mrr": "mrr",
    "mrr@3": "mrr@3",
    "ndcg@3": "ndcg@3",
    "ndcg@10": "ndcg@10",
    "ndcg_exp@3": "ndcg_burges@3",
    "ndcg_exp@10": "ndcg_burges@10",
    "hit_rate@1": "hit_rate@1",
    "hit_rate@5": "hit_rate@5",
    "map": "map",
    "map@5": "map@5",
    "r_precision": "r-precision",
}


@st.composite
def untied_runs(draw):
    n_queries = draw(st.integers(1, 6))
    docs = [f"d{i}" for i in range(15)]
    qrels, run = {}, {}
    for q in range(n_queries):
        judged = draw(st.lists(st.sampled_from(docs), min_size=1, max_size=6, unique=True))
        grades = [draw(st.integers(1, 3)) for _ in judged]
        qrels[f"q{q}"] = dict(zip(judged, grades))
        retrieved = draw(st.lists(st.sampled_from(docs), min_size=1, max_size=15, unique=True))
        scores = draw(
            st.lists(
                st.floats(0, 100, allow_nan=False, width=32),
                min_size=len(retrieved),
                max_size=len(retrieved),
                unique=True,
            )
        )
        run[f"q{q}"] = dict(zip(retrieved, scores))
    return qrels, run


@pytest.mark.slow  # ranx compiles with numba for each new shape: over a minute on 2 cores
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(untied_runs())
def test_metrics_match_ranx_on_runs_without_ties(data):
    qrels, run = data
    ours = evaluate(Qrels.from_dict(qrels), Run.from_dict(run), list(OURS_TO_RANX)).per_query_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ranx_qrels, ranx_run = ranx.Qrels(qrels), ranx.Run(run)
        reference = ranx.evaluate(ranx_qrels, ranx_run, list(OURS_TO_RANX.values()), return_mean=False)
    for i, query in enumerate(ranx_qrels.keys()):
        for metric, ranx_name in OURS_TO_RANX.items():
            assert math.isclose(ours[query][metric], float(reference[ranx_name][i]), abs_tol=1e-9), (query, metric)
