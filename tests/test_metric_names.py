"""Metric names are parsed once, at the entry point, and unknown names list the valid ones."""

from __future__ import annotations

import pytest

from testset_builder.errors import UnknownMetricError
from testset_builder.metrics import MetricSpec, parse_metric, parse_metrics


@pytest.mark.parametrize(
    "text, expected",
    [
        ("ndcg@10", MetricSpec("ndcg", 10)),
        ("NDCG@10", MetricSpec("ndcg", 10)),
        ("ndcg_cut_10", MetricSpec("ndcg", 10)),
        ("ndcg_cut.10", MetricSpec("ndcg", 10)),
        ("recall@100", MetricSpec("recall", 100)),
        ("P_5", MetricSpec("precision", 5)),
        ("mrr@10", MetricSpec("mrr", 10)),
        ("recip_rank", MetricSpec("mrr", None)),
        ("map", MetricSpec("map", None)),
        ("hit_rate@5", MetricSpec("hit_rate", 5)),
        ("success_1", MetricSpec("hit_rate", 1)),
        ("Rprec", MetricSpec("r_precision", None)),
        ("ndcg_burges@3", MetricSpec("ndcg_exp", 3)),
    ],
)
def test_names_and_trec_eval_spellings_parse_to_one_canonical_metric(text, expected):
    assert parse_metric(text) == expected


@pytest.mark.parametrize(
    "text", ["ndgc@10", "precision", "recall@0", "r_precision@5", "ndcg@", "", "recall@\uff11\uff10", "ndcg@\u0661"]
)
def test_unknown_or_malformed_names_raise_a_clear_error_listing_valid_names(text):
    with pytest.raises(UnknownMetricError) as error:
        parse_metrics(text)
    assert "valid metrics:" in str(error.value) and "ndcg[@k]" in str(error.value)


def test_a_list_keeps_order_and_drops_repeats():
    assert [str(s) for s in parse_metrics("ndcg@10, recall@5,ndcg_cut_10,map")] == ["ndcg@10", "recall@5", "map"]
