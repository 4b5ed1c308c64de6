"""The lead's page in a real headless Chromium: an admin sees progress per reviewer, agreement per pair of
reviewers, and the open disagreements with what the reviewers said; revoking a token from it works and keeps the
verdicts; a reviewer who is not an admin gets 403, and a forged revoke from another origin is refused. A screenshot
lands in test-output/."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest
from conftest import TEST_OUTPUT as OUTPUT

from testset_builder.cli import main
from testset_builder.store import open_workspace

pytestmark = pytest.mark.slow
QUERIES = {"qa": "how is ndcg computed", "qb": "what does recall at k count"}
DOCS = {"d0": "nDCG discounts each relevant chunk by the log of its rank.", "d1": "Recall at k counts what was found."}
GRADES = {  # reviewer -> (query, doc) -> grade; ann and bob split on (qa, d1) and (qb, d0)
    "ann": {("qa", "d0"): 2, ("qa", "d1"): 0, ("qb", "d0"): 1, ("qb", "d1"): 2},
    "bob": {("qa", "d0"): 2, ("qa", "d1"): 1, ("qb", "d0"): 0, ("qb", "d1"): 2},
}
COMMENT = "only the last sentence is about recall"


@pytest.fixture
def lead_server(tmp_path, capsys):
    """Two queries by two chunks, graded by ann and bob (overlap 2) with a comment on one split pair; cho is an
    admin; `serve` started. Yields (base URL, tokens by reviewer, workspace path)."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": d, "text": t}) + "\n" for d, t in DOCS.items()), encoding="utf-8")
    ws = tmp_path / "ws"
    assert main(["chunk", str(corpus), "--workspace", str(ws), "--chunker", "prechunked", "--json"]) == 0
    capsys.readouterr()
    from testset_builder.records import Query, QueryOrigin
    from testset_builder.stages import review
    from testset_builder.store import review as store
    from testset_builder.store import rows
    from testset_builder.store.workspace import utc_timestamp

    with open_workspace(ws) as workspace:
        with workspace.transaction() as db:
            rows.put_queries(db, [Query(query_id=q, text=t, origin=QueryOrigin.real) for q, t in QUERIES.items()])
            items = [store.QueuedItem(store.pair_item_id(q, d), "pair", q, d, 1.0, "llm proposal", 1)
                     for q in QUERIES for d in DOCS]  # fmt: skip
            store.enqueue(db, items, utc_timestamp())
        review.keep_overlap(workspace, 2)
        tokens = {name: review.add_reviewer(workspace, name) for name in GRADES}
        tokens["cho"] = review.add_reviewer(workspace, "cho", "admin")
        for reviewer, grades in GRADES.items():
            while (item := review.next_item(workspace, reviewer)) is not None:
                pair = (item.query["query_id"], item.chunk["chunk_id"])
                comment = COMMENT if (reviewer, pair) == ("bob", ("qb", "d0")) else None
                review.submit(workspace, reviewer, item.item_id, "grade", f"{reviewer}-{pair}", grade=grades[pair],
                              comment=comment, overlap=2)  # fmt: skip
    env = {**os.environ, "TESTSET_BUILDER_REVIEW_TOKEN": "tok-" + "l" * 24}
    server = subprocess.Popen(
        [sys.executable, "-m", "testset_builder", "serve", "--workspace", str(ws), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    line = server.stdout.readline()
    match = re.search(r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", line)
    assert match, line + server.stderr.read()
    yield match.group(1), tokens, ws
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=20)


def expected_kappa() -> float:
    from sklearn.metrics import cohen_kappa_score

    pairs = sorted(GRADES["ann"])
    return cohen_kappa_score([GRADES["ann"][p] for p in pairs], [GRADES["bob"][p] for p in pairs], weights="quadratic")


def test_the_leads_page_shows_progress_agreement_and_disagreements_with_comments(browser, lead_server):
    base, tokens, _ = lead_server
    OUTPUT.mkdir(parents=True, exist_ok=True)
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base}/?token={tokens['cho']}")
    page.wait_for_selector("#query, #done")
    assert page.locator("#lead-link").count() == 1  # the admin's way there
    response = page.goto(f"{base}/lead")
    assert response.status == 200
    page.screenshot(path=str(OUTPUT / "review-lead.png"), full_page=True)
    for reviewer in ("ann", "bob"):
        row = page.inner_text(f"#reviewers tr[data-reviewer='{reviewer}']")
        assert "4 grade" in row and "active" in row
    assert "8 of 8 verdicts given; 4 of 4 items done" in page.inner_text("#progress-all")
    pair = page.inner_text("#pairs tbody tr")
    assert "ann / bob" in pair and f"{expected_kappa():.3f}" in pair and "0.500" in pair
    assert page.inner_text("#disagreements h2") == "Open disagreements (2)"
    split = page.locator(".disagreement", has_text=QUERIES["qb"])
    assert "1 by ann" in split.inner_text() and "0 by bob" in split.inner_text()
    assert f"bob: {COMMENT}" in split.locator(".comments").inner_text()
    with page.expect_navigation():
        page.locator("#reviewers tr[data-reviewer='bob'] button").click()
    assert "bob's token no longer works" in page.inner_text("#revoked")
    assert "revoked" in page.inner_text("#reviewers tr[data-reviewer='bob']")
    assert "4 grade" in page.inner_text("#reviewers tr[data-reviewer='bob']")  # the verdicts stay
    context.close()


def test_a_reviewer_who_is_not_an_admin_gets_403_and_a_forged_revoke_is_refused(browser, lead_server):
    base, tokens, ws = lead_server
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{base}/?token={tokens['ann']}")
    page.wait_for_selector("#query, #done")
    assert page.locator("#lead-link").count() == 0
    assert page.goto(f"{base}/lead").status == 403
    context.close()
    admin = browser.new_context()
    page = admin.new_page()
    page.goto(f"{base}/?token={tokens['cho']}")
    page.wait_for_selector("#query, #done")
    forged = page.request.post(
        f"{base}/ui/reviewers/revoke", form={"reviewer": "ann"}, headers={"Origin": "http://127.0.0.1:1"}
    )
    assert forged.status == 403
    missing_form_token = page.request.post(f"{base}/ui/reviewers/revoke", form={"reviewer": "ann"})
    assert missing_form_token.status == 403
    admin.close()
    with open_workspace(ws) as workspace:
        from testset_builder.stages import review

        assert {row.name: row.token for row in review.reviewers(workspace)}["ann"] == "active"
