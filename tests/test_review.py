"""Review semantics over the store: leases, overlap, blind mode, verdicts that are stored once, undo, question
verdicts, and what a release makes of them."""

from __future__ import annotations

import time

import pytest

from testset_builder.config import ReviewConfig
from testset_builder.errors import InputError
from testset_builder.records import JudgmentSource, JudgmentStatus
from testset_builder.stages import review
from testset_builder.stages.release import load_release, write_release
from testset_builder.store import review as store
from testset_builder.store import rows
from testset_builder.store.workspace import utc_timestamp


@pytest.fixture
def workspace(queued_workspace):
    return queued_workspace


def grade(ws, reviewer, item, value, key=None):
    return review.submit(ws, reviewer, item.item_id, "grade", key or f"{reviewer}-{item.item_id}", grade=value)


def test_items_come_highest_priority_first_and_a_reload_gets_the_same_leased_item(workspace):
    first = review.next_item(workspace, "ann")
    assert first.query["query_id"] == "r0" and first.chunk["chunk_id"] == workspace.chunk_ids[0]
    assert review.next_item(workspace, "ann").item_id == first.item_id  # asked again: the same lease
    other = review.next_item(workspace, "bob")
    assert other.query["query_id"] == "r1"  # ann holds r0
    grade(workspace, "ann", first, 2)
    assert review.next_item(workspace, "ann").query["query_id"] == "r2"


def test_an_expired_lease_puts_the_item_back_for_others(workspace):
    held = review.next_item(workspace, "ann", ReviewConfig(lease_s=0.2))
    assert review.next_item(workspace, "bob").item_id != held.item_id
    time.sleep(0.3)
    assert review.next_item(workspace, "cid").item_id == held.item_id


def test_overlap_gives_each_item_to_that_many_distinct_reviewers_and_no_more(workspace):
    settings = ReviewConfig(overlap=2)
    seen: dict[str, set[str]] = {}
    for reviewer in ("ann", "bob", "cid"):
        while (item := review.next_item(workspace, reviewer, settings)) is not None:
            seen.setdefault(item.item_id, set()).add(reviewer)
            grade(workspace, reviewer, item, 1)
    assert len(seen) == 3 and all(len(reviewers) == 2 for reviewers in seen.values())
    assert review.stats(workspace, settings).done == 3 and review.stats(workspace, settings).remaining == 0


def test_blind_mode_hides_the_llm_grade_until_told_otherwise(workspace):
    assert review.next_item(workspace, "ann").suggestion is None
    shown = review.next_item(workspace, "bob", ReviewConfig(blind=False))
    assert shown.suggestion == {"grade": 2, "confidence": 0.7, "rationale": "looks right"}


def test_a_verdict_sent_twice_is_stored_once_and_becomes_one_human_judgment(workspace):
    item = review.next_item(workspace, "ann")
    first, again = grade(workspace, "ann", item, 0, "key-1"), grade(workspace, "ann", item, 0, "key-1")
    assert first.created and not again.created and again.verdict == first.verdict
    human = [j for j in rows.iter_judgments(workspace.db) if j.source is JudgmentSource.human]
    assert len(human) == 1 and human[0].grade == 0 and human[0].reviewer == "ann"


def test_a_key_sent_again_with_a_changed_verdict_is_refused_not_answered_with_the_first(workspace):
    from testset_builder.errors import ReviewConflictError

    item = review.next_item(workspace, "ann")
    grade(workspace, "ann", item, 2, "k1")
    with pytest.raises(ReviewConflictError, match="used for a different verdict on this item"):
        grade(workspace, "ann", item, 0, "k1")
    assert not grade(workspace, "ann", item, 2, "k1").created  # the same verdict again: stored once


def test_a_skip_passes_the_item_to_others_and_undo_takes_back_ones_last_verdict(workspace):
    item = review.next_item(workspace, "ann")
    review.submit(workspace, "ann", item.item_id, "skip", "skip-1")
    assert review.next_item(workspace, "ann").item_id != item.item_id
    assert review.next_item(workspace, "bob").item_id == item.item_id
    graded = review.next_item(workspace, "ann")
    grade(workspace, "ann", graded, 2)
    assert (
        review.undo(workspace, "ann", "undo-1").verdict.undoes
        == store.verdict_by_key(workspace.db, f"ann-{graded.item_id}").verdict_id
    )
    assert review.next_item(workspace, "ann").item_id == graded.item_id  # back for ann
    judgments = {j.judgment_id: j for j in rows.iter_judgments(workspace.db) if j.source is JudgmentSource.human}
    assert [j.status for j in judgments.values()] == [JudgmentStatus.final, JudgmentStatus.withdrawn]


def test_an_undo_does_not_take_an_item_back_from_the_reviewer_who_now_holds_it(workspace):
    """ann skips, bob is given the item, ann undoes her skip: bob's grade is still taken, not refused."""
    item = review.next_item(workspace, "ann")
    review.submit(workspace, "ann", item.item_id, "skip", "skip-1")
    assert review.next_item(workspace, "bob").item_id == item.item_id
    assert review.undo(workspace, "ann", "undo-1").created
    assert grade(workspace, "bob", item, 1).created  # was refused: ann's lease came back over bob's


def test_an_import_that_fills_an_item_under_a_live_lease_does_not_refuse_its_holder(workspace):
    """A Label Studio file imported while bob holds the item: his grade is still taken (the import passes no
    overlap and takes a place; bob's lease was live, so the place he held stays his)."""
    item = review.next_item(workspace, "bob")
    imported = review.submit(workspace, "label-studio:lead", item.item_id, "grade", "ls-1", grade=2)
    assert imported.created
    mine = review.submit(workspace, "bob", item.item_id, "grade", "bob-1", grade=0, comment="not it", overlap=1)
    assert mine.created and mine.verdict.comment == "not it"


def test_an_undo_or_a_tag_with_a_key_used_for_another_request_is_refused_and_shows_nothing(workspace):
    from testset_builder.errors import ReviewConflictError

    item = review.next_item(workspace, "ann")
    grade(workspace, "ann", item, 2, "k1")
    with pytest.raises(ReviewConflictError, match="used for another request") as refused:
        review.undo(workspace, "bob", "k1")  # another reviewer's key: not her verdict back
    assert "ann" not in str(refused.value)  # nothing of what the key stored
    with pytest.raises(ReviewConflictError, match="used for another request"):
        review.undo(workspace, "ann", "k1")  # her own verdict's key is not an undo's
    assert store.last_effective_verdict(workspace.db, "ann").idempotency_key == "k1"  # nothing undone


@pytest.mark.parametrize("seconds", [float("nan"), float("inf"), -1.0])
def test_a_verdict_with_a_time_spent_that_is_no_time_is_refused_before_anything_is_stored(workspace, seconds):
    item = review.next_item(workspace, "ann")
    with pytest.raises(InputError, match="seconds is the time spent"):
        review.submit(workspace, "ann", item.item_id, "grade", "k-nan", grade=1, seconds=seconds)
    assert store.verdict_by_key(workspace.db, "k-nan") is None


def test_grades_release_as_human_labels_an_undone_one_does_not_and_grade_0_is_not_relevant(workspace):
    first = review.next_item(workspace, "ann")
    grade(workspace, "ann", first, 0)
    second = review.next_item(workspace, "ann")
    grade(workspace, "ann", second, 1)
    review.undo(workspace, "ann", "undo-second")
    released = load_release(write_release(workspace, "1.0.0").path)
    assert released.qrels["r0"] == {workspace.chunk_ids[0]: 0}
    assert "r1" not in released.qrels and released.qrels["s0"] == {workspace.chunk_ids[3]: 2}


def test_a_dropped_question_leaves_the_release_and_an_edit_replaces_it_with_its_labels(workspace):
    review.queue_questions(workspace)
    settings = ReviewConfig(questions=True)
    item = review.next_item(workspace, "ann", settings)
    while item.kind != "question":  # the pairs come first (higher priority): grade them out of the way
        grade(workspace, "ann", item, 1)
        item = review.next_item(workspace, "ann", settings)
    assert item.chunk["chunk_id"] == workspace.chunk_ids[3]  # the question's source chunk, to judge it by
    with pytest.raises(InputError, match="needs a reason"):
        review.submit(workspace, "ann", item.item_id, "drop_question", "drop-0")
    review.submit(workspace, "ann", item.item_id, "drop_question", "drop-1", reason="ambiguous")
    assert "s0" not in load_release(write_release(workspace, "1.0.0").path).queries
    review.undo(workspace, "ann", "undo-drop")
    review.submit(workspace, "bob", item.item_id, "edit_question", "edit-1", edited_text="How is nDCG@10 computed?")
    released = load_release(write_release(workspace, "1.1.0").path)
    edited = store.edited_query_id("s0", "How is nDCG@10 computed?")
    assert "s0" not in released.queries and released.queries[edited] == "How is nDCG@10 computed?"
    assert released.qrels[edited] == {workspace.chunk_ids[3]: 2}  # the source label carried over
    review.undo(workspace, "bob", "undo-edit")
    back = load_release(write_release(workspace, "1.2.0").path)
    assert "s0" in back.queries and edited not in back.queries


def test_a_verdict_that_comes_after_its_lease_ran_out_and_others_finished_the_item_is_refused(workspace):
    from testset_builder.errors import ReviewConflictError

    late = review.next_item(workspace, "ann", ReviewConfig(lease_s=0.1))
    time.sleep(0.2)
    settings = ReviewConfig(overlap=2)
    for reviewer in ("bob", "cid"):
        item = review.next_item(workspace, reviewer, settings)
        assert item.item_id == late.item_id  # ann's lease ran out: the item went to the others
        review.submit(workspace, reviewer, item.item_id, "grade", f"{reviewer}-late", grade=1, overlap=2)
    with pytest.raises(ReviewConflictError, match=r"as many reviewers as it wants \(2"):
        review.submit(workspace, "ann", late.item_id, "grade", "ann-late", grade=2, overlap=2)
    assert store.verdict_by_key(workspace.db, "ann-late") is None
    adjudicated = review.submit(workspace, "ann", late.item_id, "grade", "ann-adjudicates", grade=2)  # no overlap
    assert adjudicated.created


def test_a_higher_priority_lifts_an_item_already_queued_and_a_lower_one_does_not(workspace):
    item_id = store.pair_item_id("r2", workspace.chunk_ids[2])
    with workspace.transaction() as db:
        store.enqueue(
            db,
            [store.QueuedItem(item_id, "pair", "r2", workspace.chunk_ids[2], 9.0, "audit disagreement", 1)],
            utc_timestamp(),
        )
        store.enqueue(
            db,
            [store.QueuedItem(item_id, "pair", "r2", workspace.chunk_ids[2], 0.1, "llm proposal", 1)],
            utc_timestamp(),
        )
    lifted = store.item(workspace.db, item_id)
    assert (lifted.priority, lifted.reason) == (9.0, "audit disagreement")
    assert review.next_item(workspace, "ann").item_id == item_id


@pytest.mark.parametrize(
    "action, options, message",
    [
        ("grade", {"grade": 3}, "a grade is 0"),
        ("grade", {}, "a grade is 0"),
        ("drop_question", {"reason": "ambiguous"}, "is for question items"),
        ("shrug", {}, "unknown action"),
    ],
)
def test_a_malformed_verdict_is_refused_with_what_is_wrong(workspace, action, options, message):
    item = review.next_item(workspace, "ann")
    with pytest.raises(InputError, match=message):
        review.submit(workspace, "ann", item.item_id, action, "k", **options)
    with pytest.raises(InputError, match="a reviewer needs a name"):
        review.next_item(workspace, "  ")


def two_reviewers_disagree_once(ws):
    """ann and bob each grade all three pairs (overlap 2): they agree on r0 (2) and r2 (0) and split on r1 (ann 1,
    bob 2, bob later)."""
    settings = ReviewConfig(overlap=2)
    for reviewer, grades in (("ann", {"r0": 2, "r1": 1, "r2": 0}), ("bob", {"r0": 2, "r1": 2, "r2": 0})):
        while (item := review.next_item(ws, reviewer, settings)) is not None:
            grade(ws, reviewer, item, grades[item.query["query_id"]])
    return {f"r{i}": ws.chunk_ids[i] for i in range(3)}


def test_review_stats_reports_agreement_that_matches_scikit_learn_and_krippendorff(workspace, capsys):
    import json

    import krippendorff
    import numpy as np
    from sklearn.metrics import cohen_kappa_score

    from testset_builder.cli import main

    two_reviewers_disagree_once(workspace)
    capsys.readouterr()
    assert main(["review-stats", "--workspace", str(workspace.root), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    ann, bob = [2, 1, 0], [2, 2, 0]
    (pair,) = report["pairwise"]
    assert (pair["a"], pair["b"], pair["shared"]) == ("ann", "bob", 3)
    assert pair["weighted_kappa"] == pytest.approx(cohen_kappa_score(ann, bob, weights="quadratic"))
    assert pair["agreement"] == pytest.approx(2 / 3)
    expected_alpha = krippendorff.alpha(np.array([ann, bob], dtype=float), level_of_measurement="ordinal")
    assert report["krippendorff_alpha"] == pytest.approx(expected_alpha)
    judge = report["llm_vs_human"]  # the LLM said 2 everywhere; resolved human grades 2, 2 (bob is later), 0
    assert judge["items"] == 3 and judge["confusion"] == [[0, 0, 0], [0, 0, 0], [1, 0, 2]]
    assert judge["agreement"] == pytest.approx(2 / 3)
    assert [(d["query_id"], d["grades"]) for d in report["disagreements"]] == [("r1", {"ann": 1, "bob": 2})]
    assert main(["review-stats", "--workspace", str(workspace.root), "--adjudicator", "ann", "--json"]) == 0
    adjudicated = json.loads(capsys.readouterr().out)["llm_vs_human"]
    assert adjudicated["confusion"] == [[0, 0, 0], [0, 0, 0], [1, 1, 1]]  # ann's 1 settles r1
    assert main(["review-stats", "--workspace", str(workspace.root)]) == 0
    shown = capsys.readouterr().out
    assert "ann / bob" in shown and "disagree: r1" in shown


def test_the_release_records_the_review_agreement_and_the_adjudicator_settles_a_tie(workspace):
    from sklearn.metrics import cohen_kappa_score

    from testset_builder.config import ReleaseConfig

    pairs = two_reviewers_disagree_once(workspace)
    latest = load_release(write_release(workspace, "1.0.0").path)
    assert latest.qrels["r1"] == {pairs["r1"]: 2}  # a tie with no adjudicator goes to the latest verdict
    recorded = latest.manifest["lineage"]
    assert recorded["reviewers"] == ["ann", "bob"]
    figures = recorded["review_agreement"]
    assert figures["pairs_reviewed"] == 3 and figures["llm_vs_human_pairs"] == 3
    kappa = cohen_kappa_score([2, 1, 0], [2, 2, 0], weights="quadratic")
    assert figures["mean_pairwise_weighted_kappa"] == round(kappa, 4)
    settled = load_release(write_release(workspace, "1.1.0", ReleaseConfig(adjudicator="ann")).path)
    assert settled.qrels["r1"] == {pairs["r1"]: 1}


def test_adjudication_serves_only_the_disagreed_pairs_and_its_grade_decides(workspace):
    pairs = two_reviewers_disagree_once(workspace)
    item = review.next_item(workspace, "cid", adjudicate=True)
    assert item.query["query_id"] == "r1"
    review.settle(workspace, "cid", item.item_id, 1, "settle-r1")
    assert review.next_item(workspace, "cid", adjudicate=True) is None
    assert load_release(write_release(workspace, "1.0.0").path).qrels["r1"] == {pairs["r1"]: 1}


def test_the_terminal_reviewer_takes_grades_skips_and_undo_from_the_keyboard(workspace, monkeypatch, capsys):
    import io

    from testset_builder.cli import main

    monkeypatch.setattr("sys.stdin", io.StringIO("2\nmaybe\ns\nu\n0\nq\n"))
    assert main(["review", "--reviewer", "ann", "--workspace", str(workspace.root)]) == 0
    shown = capsys.readouterr()
    assert "real query 0" in shown.out and "is not one of" in shown.err and "taken back" in shown.out
    assert store.verdicts_per_reviewer(workspace.db)["ann"] == {"grade": 2}  # the undone skip counts for nothing
    human = {j.query_id: j.grade for j in rows.iter_judgments(workspace.db) if j.source is JudgmentSource.human}
    assert human == {"r0": 2, "r1": 0}  # r1 skipped, the skip taken back: r1 came back before r2 and got a 0
