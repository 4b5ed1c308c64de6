"""The worked examples of the course this project follows, reproduced exactly."""

from __future__ import annotations

import pytest

from testset_builder.metrics import evaluate
from testset_builder.tables import Qrels, Run


def ranked(chunk_ids: list[str]) -> dict[str, float]:
    """A run list whose scores decrease with rank."""
    return {chunk_id: float(len(chunk_ids) - i) for i, chunk_id in enumerate(chunk_ids)}


def test_recall_and_precision_at_10_with_two_of_three_relevant_in_top_10():
    run = ranked(["r1", "x1", "r2", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "r3"])
    result = evaluate(
        Qrels.from_dict({"q": {"r1": 1, "r2": 1, "r3": 1}}), Run.from_dict({"q": run}), "recall@10,precision@10"
    )
    assert result.mean("recall@10") == pytest.approx(2 / 3)
    assert round(result.mean("recall@10"), 3) == 0.667
    assert result.mean("precision@10") == pytest.approx(0.2)


def test_mrr_of_first_relevant_at_ranks_1_3_7_is_0_492():
    qrels, run = {}, {}
    for query, first_relevant_rank in (("a", 1), ("b", 3), ("c", 7)):
        ids = [f"{query}{i}" for i in range(1, 11)]
        qrels[query] = {ids[first_relevant_rank - 1]: 1}
        run[query] = ranked(ids)
    result = evaluate(Qrels.from_dict(qrels), Run.from_dict(run), "mrr")
    assert result.mean("mrr") == pytest.approx((1 + 1 / 3 + 1 / 7) / 3)
    assert round(result.mean("mrr"), 3) == 0.492


def test_ndcg_at_5_of_grades_2_0_1_1_0_is_0_936():
    ids = ["a", "b", "c", "d", "e"]
    grades = dict(zip(ids, [2, 0, 1, 1, 0]))
    result = evaluate(Qrels.from_dict({"q": grades}), Run.from_dict({"q": ranked(ids)}), "ndcg@5")
    dcg = 2 / 1 + 1 / 2 + 1 / 2.321928094887362
    idcg = 2 / 1 + 1 / 1.584962500721156 + 1 / 2
    assert round(dcg, 3) == 2.931 and round(idcg, 3) == 3.131
    assert result.mean("ndcg@5") == pytest.approx(dcg / idcg)
    assert round(result.mean("ndcg@5"), 3) == 0.936


LABELLED_SET = {
    "q1": ("d3,d1,d7,d4,d2,d9,d5,d8,d6,d10", {"d1": 2, "d4": 2, "d5": 1}),
    "q2": ("d2,d6,d1,d8,d3,d5,d10,d7,d4,d9", {"d2": 2, "d3": 1}),
    "q3": ("d8,d10,d5,d1,d7,d3,d9,d2,d6,d4", {"d1": 2, "d7": 1, "d9": 1}),
    "q4": ("d4,d2,d9,d6,d1,d10,d7,d3,d5,d8", {"d4": 2, "d6": 1}),
    "q5": ("d7,d3,d5,d2,d10,d1,d8,d9,d4,d6", {"d3": 2, "d5": 2, "d10": 1}),
}


@pytest.mark.parametrize(
    "metric, expected",
    [
        ("recall@5", 0.867),
        ("recall@10", 1.000),
        ("precision@5", 0.440),
        ("precision@10", 0.260),
        ("mrr", 0.650),
        ("ndcg@5", 0.700),
        ("hit_rate@5", 1.000),
    ],
)
def test_the_five_query_labelled_set_gives_the_course_figures(metric, expected):
    qrels = Qrels.from_dict({q: grades for q, (_, grades) in LABELLED_SET.items()})
    run = Run.from_dict({q: ranked(ids.split(",")) for q, (ids, _) in LABELLED_SET.items()})
    assert round(evaluate(qrels, run, metric).mean(metric), 3) == expected


def test_the_bundled_example_files_hold_the_labelled_set():
    from conftest import EXAMPLES

    from testset_builder.export import read_qrels, read_run

    qrels, run = read_qrels(EXAMPLES / "qrels.tsv"), read_run(EXAMPLES / "bm25.trec")
    assert qrels.to_dict() == {q: grades for q, (_, grades) in LABELLED_SET.items()}
    result = evaluate(qrels, run, "recall@5,ndcg@5,mrr")
    assert round(result.mean("recall@5"), 3) == 0.867
    assert round(result.mean("ndcg@5"), 3) == 0.700
    assert round(result.mean("mrr"), 3) == 0.650
