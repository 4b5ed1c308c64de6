"""Adjudication as its own state: an admin's settling grade decides the pair but is not a vote, so agreement figures
over the reviewers' independent grades do not move; a settled pair leaves the disagreements; a disagreement the
admin graded too is served to them and counted as self-settled; the release card names the policy and its counts,
and says how many ties went to the adjudicator's own grade."""

from __future__ import annotations

import json

import pytest

from testset_builder.cli import main
from testset_builder.errors import InputError
from testset_builder.stages import review
from testset_builder.stages.release import load_release, write_release
from testset_builder.store import review as store

TOKEN = "tok-" + "j" * 24


def graded(ws, grades: dict[str, dict[str, int]], comments: dict | None = None) -> dict[str, str]:
    """Overlap 2; each reviewer grades the pairs given (query id -> grade); returns item ids by query id."""
    review.keep_overlap(ws, 2)
    items = {}
    for reviewer, by_query in grades.items():
        while (item := review.next_item(ws, reviewer)) is not None:
            query = item.query["query_id"]
            items[query] = item.item_id
            comment = (comments or {}).get((reviewer, query))
            review.submit(
                ws, reviewer, item.item_id, "grade", f"{reviewer}-{query}", grade=by_query[query], comment=comment,
                overlap=2,
            )  # fmt: skip
    return items


def alpha_of(report: dict, ws) -> float:
    """Krippendorff's alpha of the reviewers' standing grades, computed by the krippendorff package."""
    import krippendorff
    import numpy as np

    from testset_builder.labels import policy
    from testset_builder.store import rows

    grades = policy.reviewer_grades(list(rows.iter_judgments(ws.db)))
    reviewers = report["reviewers"]
    matrix = [[by.get(r, np.nan) for by in grades.values()] for r in reviewers]
    return krippendorff.alpha(np.array(matrix, dtype=float), level_of_measurement="ordinal")


def test_an_adjudication_leaves_the_agreement_of_independent_grades_unchanged(queued_workspace):
    ws = queued_workspace
    items = graded(ws, {"ann": {"r0": 2, "r1": 1, "r2": 0}, "bob": {"r0": 0, "r1": 2, "r2": 0}})
    before = review.agreement(ws)
    assert [d["query_id"] for d in before["disagreements"]] == ["r0", "r1"]
    review.settle(ws, "cho", items["r0"], 1, "settle-r0")
    after = review.agreement(ws)
    for figure in ("items", "verdicts", "reviewers", "pairwise", "krippendorff_alpha", "agreement"):
        assert after[figure] == before[figure], figure
    assert after["krippendorff_alpha"] == pytest.approx(alpha_of(after, ws))
    assert [d["query_id"] for d in after["disagreements"]] == ["r1"]  # the settled pair left the list
    (settled,) = after["settled"]
    assert (settled["query_id"], settled["grade"], settled["by"], settled["self_settled"]) == ("r0", 1, "cho", False)
    assert after["adjudication"]["adjudicated"] == 1 and after["adjudication"]["by"] == {"cho": 1}
    assert review.disagreements(ws) == {items["r1"]}
    assert store.verdicts_per_reviewer(ws.db) == {"ann": {"grade": 3}, "bob": {"grade": 3}}  # not a vote of cho's
    released = load_release(write_release(ws, "1.0.0").path)
    assert released.qrels["r0"] == {ws.chunk_ids[0]: 1}  # the settled grade decides, over a 2-0 tie
    review.undo(ws, "cho", "undo-settle")
    assert review.disagreements(ws) == {items["r0"], items["r1"]}  # taken back: open again


def test_a_self_settled_disagreement_is_counted_in_the_release_card(queued_workspace, capsys):
    ws = queued_workspace
    items = graded(ws, {"ann": {"r0": 2, "r1": 1, "r2": 0}, "cho": {"r0": 0, "r1": 1, "r2": 1}})
    served = review.next_item(ws, "cho", adjudicate=True)
    assert served.self_party and served.graded_by == {"ann": 2, "cho": 0}
    review.settle(ws, "cho", served.item_id, 2, "settle-own")
    assert main(["release", "--version", "1.0.0", "--workspace", str(ws.root), "--adjudicator", "cho"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "1 settled by an admin (1 self-settled)" in said and "1 ties given to cho's own grade" in said
    release = load_release(ws.root / "releases" / "1.0.0")
    counts = release.manifest["lineage"]["adjudication"]
    assert (counts["adjudicated"], counts["self_settled"], counts["tie_to_adjudicator"]) == (1, 1, 1)
    card = (ws.root / "releases" / "1.0.0" / "README.md").read_text()
    assert "a pair an admin settled takes the settled grade" in card
    assert "Settled by an admin: 1 pairs (1 by cho), 1 of them self-settled" in card
    assert "1 ties given to cho's own grade" in card
    assert release.qrels["r2"] == {ws.chunk_ids[2]: 1} and release.qrels["r0"] == {ws.chunk_ids[0]: 2}
    assert items["r0"] == served.item_id


def test_an_admin_is_served_others_disagreements_before_their_own(queued_workspace):
    ws = queued_workspace
    review.keep_overlap(ws, 2)
    wanted = {"ann": {"r0": 2, "r1": 1, "r2": 0}, "cho": {"r0": 0}, "bob": {"r1": 2, "r2": 0}}
    for reviewer, by_query in wanted.items():  # ann grades all; cho r0 only, the highest; bob the two left
        for _ in by_query:
            item = review.next_item(ws, reviewer)
            query = item.query["query_id"]
            review.submit(ws, reviewer, item.item_id, "grade", f"{reviewer}-{query}", grade=by_query[query], overlap=2)
    first = review.next_item(ws, "cho", adjudicate=True)
    assert first.query["query_id"] == "r1" and not first.self_party  # though r0 comes first in the queue
    review.settle(ws, "cho", first.item_id, 1, "settle-r1")
    second = review.next_item(ws, "cho", adjudicate=True)
    assert second.query["query_id"] == "r0" and second.self_party
    assert review.next_item(ws, "dora", adjudicate=True) is None  # cho holds it: not served twice


def test_a_reviewer_cannot_adjudicate_through_a_verdict(queued_workspace, tmp_path):
    from fastapi.testclient import TestClient

    from testset_builder.review_ui import create_app

    ws = queued_workspace
    items = graded(ws, {"ann": {"r0": 2, "r1": 1, "r2": 0}, "bob": {"r0": 0, "r1": 1, "r2": 0}})
    with pytest.raises(InputError, match="settled by an admin"):
        review.submit(ws, "ann", items["r0"], "adjudicate", "sneak", grade=2)
    with TestClient(create_app(ws, TOKEN)) as client:
        client.headers["Authorization"] = f"Bearer {review.add_reviewer(ws, 'bob')}"
        verdict = {"item_id": items["r0"], "action": "adjudicate", "grade": 0, "idempotency_key": "sneak-2"}
        assert client.post("/api/verdicts", json=verdict).status_code == 403
        client.headers["Authorization"] = f"Bearer {review.add_reviewer(ws, 'dora', 'admin')}"
        assert client.post("/api/verdicts", json=verdict).status_code == 201
        again = client.post("/api/verdicts", json={**verdict, "idempotency_key": "settle-again"})
        assert again.status_code == 409 and "settled already" in again.json()["error"]
    assert review.disagreements(ws) == set()


def test_the_adjudicate_page_serves_a_disagreement_the_admin_graded_with_the_comments(queued_workspace):
    from fastapi.testclient import TestClient

    from testset_builder.review_ui import create_app

    ws = queued_workspace
    said = {("ann", "r0"): "the second half answers it"}
    graded(ws, {"ann": {"r0": 2, "r1": 1, "r2": 0}, "cho": {"r0": 0, "r1": 1, "r2": 0}}, said)
    with TestClient(create_app(ws, TOKEN)) as client:
        client.headers["Authorization"] = f"Bearer {review.add_reviewer(ws, 'cho', 'admin')}"
        page = client.get("/review", params={"mode": "adjudicate"}).text
        assert "No disagreement is left" not in page and 'id="self-party"' in page
        assert "<b>ann</b>: the second half answers it" in page
        item_id = page.split('name="item_id" value="')[1].split('"')[0]
        settled = {"item_id": item_id, "action": "grade", "grade": 2, "idempotency_key": "s-1", "mode": "adjudicate"}
        assert client.post("/api/verdicts", json=settled).status_code == 201
        assert "No disagreement is left to settle" in client.get("/review", params={"mode": "adjudicate"}).text
    assert json.loads(json.dumps(review.agreement(ws)["adjudication"]))["self_settled"] == 1
