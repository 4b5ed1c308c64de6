"""Retrieval metrics exact to trec_eval: recall@k, precision@k, MRR, nDCG@k, hit rate@k, MAP, R-precision; and
complete@k (every relevant chunk in the top k).

>>> from testset_builder.metrics import evaluate
>>> from testset_builder.tables import Qrels, Run
>>> result = evaluate(Qrels.from_dict({"q1": {"d1": 2}}), Run.from_dict({"q1": {"d1": 0.9, "d2": 0.5}}), "ndcg@10,mrr")
>>> result.means()
{'ndcg@10': 1.0, 'mrr': 1.0}
"""

from .evaluate import Evaluation, evaluate, required_depth, score_matrix
from .kernels import average_precision, complete, hit_rate, ndcg, precision, r_precision, recall, reciprocal_rank
from .matrix import GradeMatrix, MatchSummary, build_grade_matrix
from .spec import MetricSpec, parse_metric, parse_metrics, valid_metric_names

__all__ = [
    "Evaluation",
    "GradeMatrix",
    "MatchSummary",
    "MetricSpec",
    "average_precision",
    "build_grade_matrix",
    "complete",
    "evaluate",
    "hit_rate",
    "ndcg",
    "parse_metric",
    "parse_metrics",
    "precision",
    "r_precision",
    "recall",
    "reciprocal_rank",
    "required_depth",
    "score_matrix",
    "valid_metric_names",
]
