"""Failure tags on logged queries: stored append-only with an idempotency key, changed by superseding and taken back
by undo; resolved by the reviewers' majority with the pair grades' tie rule; shown with what the live system did in
the web page, the JSON API and the terminal reviewer; split and agreement reported by review-stats."""

from __future__ import annotations

import io
import json
import sqlite3

import pytest
from logged_review import queue_logged_pairs

from testset_builder.cli import main
from testset_builder.config import ReviewConfig
from testset_builder.errors import InputError, UnknownIdError
from testset_builder.labels import policy
from testset_builder.stages import review
from testset_builder.store import failure_tags as tag_store

TOKEN = "tok-" + "c" * 24


@pytest.fixture
def logged(docs_workspace, tmp_path):
    """The docs workspace with a production log of six queries imported and their pairs queued."""
    docs_workspace.built = queue_logged_pairs(docs_workspace, tmp_path)
    return docs_workspace


def queries(ws) -> list[str]:
    return ws.built["queries"]


def test_a_tag_sent_twice_with_one_key_is_stored_once_and_a_later_tag_supersedes_the_earlier(logged):
    q = queries(logged)[0]
    first = review.tag_failure(logged, "ann", q, "retrieval", "k1", seconds=4.5)
    again = review.tag_failure(logged, "ann", q, "generation", "k1")  # a retry: the stored tag comes back
    assert first.created and not again.created and again.tag == first.tag and again.tag.tag == "retrieval"
    changed = review.tag_failure(logged, "ann", q, "generation", "k2")
    assert changed.tag.supersedes == first.tag.tag_id and first.tag.seconds == 4.5
    assert tag_store.standing_tag(logged.db, q, "ann").tag == "generation"
    assert logged.db.execute("SELECT COUNT(*) FROM failure_tags").fetchone()[0] == 2  # nothing overwritten


def test_undo_takes_back_the_standing_tag_and_the_one_before_it_stands_again(logged):
    q = queries(logged)[0]
    assert review.untag_failure(logged, "ann", q, "u0") is None  # nothing to take back
    review.tag_failure(logged, "ann", q, "retrieval", "k1")
    second = review.tag_failure(logged, "ann", q, "none", "k2")
    undone = review.untag_failure(logged, "ann", q, "u1")
    assert undone.tag.tag is None and undone.tag.supersedes == second.tag.tag_id
    assert review.untag_failure(logged, "ann", q, "u1").created is False  # the same key: the stored undo
    assert policy.resolved_failure_tags(logged.db) == {q: "retrieval"}
    review.untag_failure(logged, "ann", q, "u2")
    assert policy.resolved_failure_tags(logged.db) == {}
    assert tag_store.standing_tag(logged.db, q, "ann") is None


def test_the_failure_tags_table_refuses_updates_and_deletes(logged):
    review.tag_failure(logged, "ann", queries(logged)[0], "retrieval", "k1")
    for statement in ("UPDATE failure_tags SET tag = 'none'", "DELETE FROM failure_tags"):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"), logged.transaction() as db:
            db.execute(statement)


def test_only_a_logged_query_takes_a_tag_and_only_one_of_the_four(logged, queued_workspace):
    with pytest.raises(UnknownIdError, match="logged query"):
        review.tag_failure(logged, "ann", "r0", "retrieval", "k1")  # a real query no log mentions
    with pytest.raises(InputError, match="retrieval, generation, none, unanswerable"):
        review.tag_failure(logged, "ann", queries(logged)[0], "bad-retrieval", "k2")
    with pytest.raises(InputError, match="idempotency_key"):
        review.tag_failure(logged, "ann", queries(logged)[0], "none", "")


def test_the_resolved_tag_is_the_reviewers_majority_and_a_tie_goes_to_the_adjudicator_else_the_latest(logged):
    a, b, c = queries(logged)[:3]
    for reviewer, tag in (("ann", "retrieval"), ("bob", "generation"), ("cid", "retrieval")):
        review.tag_failure(logged, reviewer, a, tag, f"{reviewer}-a")  # two against one
    review.tag_failure(logged, "ann", b, "generation", "ann-b")
    review.tag_failure(logged, "bob", b, "none", "bob-b")  # a tie: bob is the later
    review.tag_failure(logged, "ann", c, "unanswerable", "ann-c")
    review.tag_failure(logged, "ann", c, "none", "ann-c2")  # ann changed her mind: one vote, her latest
    assert policy.resolved_failure_tags(logged.db) == {a: "retrieval", b: "none", c: "none"}
    assert policy.resolved_failure_tags(logged.db, adjudicator="ann")[b] == "generation"
    assert policy.resolved_failure_tags(logged.db, adjudicator="dan")[b] == "none"  # dan did not tag it


def test_a_tie_among_several_values_goes_to_the_latest_vote_for_a_tied_value_not_the_latest_vote():
    votes = {"ann": (2, 1), "bob": (2, 2), "cid": (1, 3), "dan": (1, 4), "eve": (0, 5)}
    assert policy.majority(votes) == 1  # eve voted last, but 0 is not among the tied 2 and 1
    assert policy.majority(votes, adjudicator="ann") == 2
    assert policy.majority(votes, adjudicator="eve") == 1  # the adjudicator's 0 is not tied: the latest tied wins
    assert policy.majority({"ann": ("none", 1)}) == "none"


def test_an_item_of_a_logged_query_shows_what_the_live_system_did_even_in_blind_mode(logged):
    item = review.next_item(logged, "ann", ReviewConfig(blind=True))
    shown = item.logged
    assert item.suggestion is None and item.query["query_id"] == queries(logged)[0]
    assert shown["answer"] == "nDCG sums the grades of the top results."  # the latest record's, not the older one
    assert (shown["frequency"], shown["thumbs_up"], shown["thumbs_down"]) == (2, 1, 1)
    assert (shown["cited"], shown["clicked"]) == (2, 0)
    chunks = logged.built["chunks"]
    assert [(r["rank"], r["chunk_id"], r["reviewed"]) for r in shown["results"]] == [
        (1, chunks[0], True), (2, chunks[1], False),
    ]  # fmt: skip
    assert shown["reviewed_rank"] == 1 and shown["tag"] is None
    review.tag_failure(logged, "ann", queries(logged)[0], "generation", "k1")
    again = review.next_item(logged, "ann")
    assert again.logged["tag"] == "generation" and review.next_item(logged, "bob").logged["tag"] is None


@pytest.fixture
def client(logged):
    from fastapi.testclient import TestClient

    from testset_builder.review_ui import create_app

    with TestClient(create_app(logged, TOKEN)) as test_client:
        test_client.headers["Authorization"] = f"Bearer {TOKEN}"
        yield test_client


def test_the_api_tags_a_logged_query_with_the_verdicts_conventions(client, logged):
    q = queries(logged)[0]
    body = {"query_id": q, "reviewer": "ann", "tag": "retrieval", "idempotency_key": "k-1", "seconds": 3}
    first, again = client.post("/api/failure-tags", json=body), client.post("/api/failure-tags", json=body)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == {**first.json(), "created": False} and first.json()["tag"] == "retrieval"
    assert client.get("/api/next", params={"reviewer": "ann"}).json()["logged"]["tag"] == "retrieval"
    assert client.post("/api/failure-tags", json={**body, "tag": "maybe", "idempotency_key": "k-2"}).status_code == 422
    assert (
        client.post("/api/failure-tags", json={**body, "query_id": "nope", "idempotency_key": "k-3"}).status_code == 404
    )
    undo = {"query_id": q, "reviewer": "ann", "idempotency_key": "u-1"}
    assert client.post("/api/failure-tags/undo", json=undo).status_code == 201
    assert client.post("/api/failure-tags/undo", json=undo).status_code == 200
    assert client.post("/api/failure-tags/undo", json={**undo, "idempotency_key": "u-2"}).status_code == 204
    client.headers.pop("Authorization")
    assert client.post("/api/failure-tags", json={**body, "idempotency_key": "k-4"}).status_code == 401
    assert policy.resolved_failure_tags(logged.db) == {}


def test_the_page_form_tags_and_returns_the_logged_section_with_the_tag_chosen(client, logged):
    client.cookies.set("tsb_reviewer", "ann")
    page = client.get("/review").text
    assert 'id="logged"' in page and "nDCG sums the grades" in page and 'data-key="r"' in page
    form = {"query_id": queries(logged)[0], "tag": "none", "idempotency_key": "f-1", "shown_at": "0"}
    fragment = client.post("/ui/failure-tag", data=form, headers={"HX-Request": "true"})
    assert fragment.status_code == 200 and 'data-tag="none"' in fragment.text and "Tag saved: none." in fragment.text
    plain = client.post("/ui/failure-tag", data={**form, "idempotency_key": "f-2"}, follow_redirects=False)
    assert plain.status_code == 303  # without htmx: back to the page, so a reload never posts again
    assert 'aria-pressed="true" class="chosen">no failure (n)' in client.get("/review").text


def test_the_terminal_reviewer_asks_the_tag_once_per_logged_query_and_enter_skips(logged, monkeypatch, capsys):
    q1, q2 = queries(logged)[:2]
    # q1: tag r, then grade its three pairs (asked once); q2: "x" is refused, Enter skips, then t asks again: g
    answers = "r\n2\n1\n0\nx\n\nt\ng\n1\nq\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(answers))
    assert main(["review", "--reviewer", "ann", "--workspace", str(logged.root)]) == 0
    shown = capsys.readouterr()
    assert shown.out.count("this query in production") == 3  # q1 once, q2 at first and at t
    assert "nDCG sums the grades of the top results." in shown.out and "the chunk under review" in shown.out
    assert "tagged retrieval" in shown.out and "'x' is not one of" in shown.err
    assert policy.resolved_failure_tags(logged.db) == {q1: "retrieval", q2: "generation"}
    assert len(tag_store.standing_tags(logged.db)) == 2


def tag_all(ws, tags: dict[str, list[str]]) -> None:
    """Each reviewer tags the logged queries in order (None: leaves that one untagged)."""
    for reviewer, theirs in tags.items():
        for query_id, tag in zip(queries(ws), theirs):
            if tag is not None:
                review.tag_failure(ws, reviewer, query_id, tag, f"{reviewer}-{query_id}")


def test_review_stats_reports_the_tag_split_and_agreement_that_matches_scikit_learn(logged, capsys):
    from sklearn.metrics import cohen_kappa_score

    ann = ["retrieval", "generation", "none", "retrieval", "unanswerable", "generation"]
    bob = ["retrieval", "none", "none", "retrieval", "unanswerable", "retrieval"]
    cid = ["generation", "none", None, None, None, None]
    tag_all(logged, {"ann": ann, "bob": bob, "cid": cid})
    assert main(["review-stats", "--workspace", str(logged.root), "--json"]) == 0
    tags = json.loads(capsys.readouterr().out)["failure_tags"]
    assert (tags["logged_queries"], tags["tagged"], tags["tags"]) == (6, 6, 14)
    # resolved by hand: q0 ret (2 of 3), q1 none (2 of 3), q2 none, q3 ret, q4 unanswerable, q5 tie -> bob, the later
    assert tags["split"] == {"retrieval": 3, "generation": 0, "none": 2, "unanswerable": 1}
    agreement = tags["agreement"]
    assert agreement["queries"] == 6 and agreement["unanimous"] == pytest.approx(3 / 6)
    pairs = {(p["a"], p["b"]): p for p in agreement["pairwise"]}
    assert pairs[("ann", "bob")]["shared"] == 6
    assert pairs[("ann", "bob")]["kappa"] == pytest.approx(cohen_kappa_score(ann, bob))
    assert pairs[("ann", "bob")]["agreement"] == pytest.approx(4 / 6)
    assert pairs[("ann", "cid")]["kappa"] == pytest.approx(cohen_kappa_score(ann[:2], cid[:2]))
    assert pairs[("bob", "cid")]["agreement"] == pytest.approx(1 / 2)
    assert agreement["pairwise_agreement"] == pytest.approx((4 + 0 + 1) / (6 + 2 + 2))
    assert {d["query_id"] for d in agreement["disagreements"]} == {queries(logged)[i] for i in (0, 1, 5)}
    assert main(["review-stats", "--workspace", str(logged.root), "--adjudicator", "ann", "--json"]) == 0
    settled = json.loads(capsys.readouterr().out)["failure_tags"]["split"]
    assert settled == {"retrieval": 2, "generation": 1, "none": 2, "unanswerable": 1}  # ann's generation on q5
    assert main(["review-stats", "--workspace", str(logged.root)]) == 0
    table = capsys.readouterr().out
    assert "failure tags: 6 of 6 logged queries tagged (retrieval 3, generation 0, none 2, unanswerable 1)" in table
    assert "ann / bob" in table and "Cohen's kappa" in table


def test_without_logs_an_item_shows_no_production_and_review_stats_prints_no_tag_line(queued_workspace, capsys):
    assert review.next_item(queued_workspace, "ann").logged is None
    assert main(["review-stats", "--workspace", str(queued_workspace.root), "--json"]) == 0
    tags = json.loads(capsys.readouterr().out)["failure_tags"]
    assert (tags["logged_queries"], tags["tagged"], tags["agreement"]["pairwise"]) == (0, 0, [])
    assert main(["review-stats", "--workspace", str(queued_workspace.root)]) == 0
    assert "failure tags" not in capsys.readouterr().out
