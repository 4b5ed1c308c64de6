"""The failure tag in the web reviewer, in a real headless Chromium (Debian's, driven by Playwright): a logged query
shows what the live system did, is tagged by keyboard, keeps its tag over a reload, and has it changed by a
superseding tag; no console errors. The screenshot lands in test-output/review-failure-tag.png."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
from conftest import TEST_OUTPUT as OUTPUT
from logged_review import queue_logged_pairs

from testset_builder.labels import policy
from testset_builder.records import Judgment, JudgmentSource
from testset_builder.store import failure_tags as tag_store
from testset_builder.store import rows

pytestmark = pytest.mark.slow


@pytest.fixture
def served(docs_workspace, tmp_path):
    """The docs workspace with a production log imported, its queries' pairs queued (the first with an LLM proposal,
    hidden in blind mode), and a real `testset-builder serve` on a free port; yields (base URL, token, workspace)."""
    built = queue_logged_pairs(docs_workspace, tmp_path)
    docs_workspace.built = built
    proposal = Judgment(
        judgment_id="llm-first", query_id=built["queries"][0], chunk_id=built["chunks"][0], grade=2,
        source=JudgmentSource.llm, confidence=0.9, rationale="the judge's secret",
    )  # fmt: skip
    with docs_workspace.transaction() as db:
        rows.add_judgments(db, [proposal])
    env = {**os.environ, "TESTSET_BUILDER_REVIEW_TOKEN": "tok-" + "d" * 24}
    server = subprocess.Popen(
        [sys.executable, "-m", "testset_builder", "serve", "--workspace", str(docs_workspace.root), "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    line = server.stdout.readline()
    match = re.search(r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", line)
    assert match, line + server.stderr.read()
    yield match.group(1), match.group(2), docs_workspace
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=20)


def tag_by_key(page, key: str, tag: str) -> None:
    """Press a tag's key and wait until the logged section comes back with that tag chosen."""
    page.wait_for_selector("body[data-ready]", state="attached")
    page.keyboard.press(key)
    page.wait_for_selector(f'#logged[data-tag="{tag}"]')


def test_a_reviewer_tags_a_logged_query_by_keyboard_and_a_reload_keeps_the_tag(browser, served):
    base, token, ws = served
    OUTPUT.mkdir(parents=True, exist_ok=True)
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    problems = []
    page.on("console", lambda message: message.type == "error" and problems.append(message.text))
    page.on("pageerror", lambda error: problems.append(str(error)))
    opened = time.time()
    page.goto(f"{base}/?token={token}")
    page.fill("#reviewer", "ann")
    page.keyboard.press("Enter")
    page.wait_for_selector("#logged")
    assert "nDCG sums the grades of the top results." in page.inner_text("#logged-answer")
    assert "thumbs up 1 · thumbs down 1" in page.inner_text("#feedback")
    assert "the chunk under review" in page.inner_text("#reviewed-result")
    assert page.locator("#production-results li").count() == 2
    assert page.locator("#suggestion").count() == 0 and "secret" not in page.content()  # blind: no LLM grade
    assert page.get_attribute("#logged", "data-tag") == ""

    tag_by_key(page, "g", "generation")
    assert "Tag saved: generation." in page.inner_text("#tag-saved")
    assert page.get_attribute('button[data-key="g"]', "aria-pressed") == "true"
    page.screenshot(path=str(OUTPUT / "review-failure-tag.png"), full_page=True)

    page.reload()  # nothing is lost: the same item, the tag shown as chosen
    page.wait_for_selector('#logged[data-tag="generation"]')
    assert page.get_attribute('button[data-key="g"]', "aria-pressed") == "true"
    tag_by_key(page, "r", "retrieval")  # changed: a superseding tag
    assert page.get_attribute('button[data-key="g"]', "aria-pressed") == "false"

    shown = page.query_selector("#item")
    page.keyboard.press("1")  # grade the pair: the next pair of the same query keeps showing the tag
    shown.wait_for_element_state("hidden")
    page.wait_for_selector('#logged[data-tag="retrieval"]')
    assert "Saved: grade 1." in page.inner_text("#last")
    assert not problems, problems

    query_id = ws.built["queries"][0]
    assert policy.resolved_failure_tags(ws.db) == {query_id: "retrieval"}
    history = ws.db.execute("SELECT tag, supersedes IS NOT NULL FROM failure_tags ORDER BY rowid").fetchall()
    assert [tuple(row) for row in history] == [("generation", 0), ("retrieval", 1)]
    seconds = tag_store.standing_tag(ws.db, query_id, "ann").seconds
    assert seconds is not None and 0 <= seconds <= time.time() - opened  # seconds on the page, not since some epoch
