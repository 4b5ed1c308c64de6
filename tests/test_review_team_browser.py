"""The review page as a team uses it, in a real headless Chromium: twenty items by keyboard alone with a question
edit and a comment in the middle, stored exactly as meant; guidelines and grade meanings on the page; one query's
pairs together; and on a phone (390 by 844) the grade buttons on screen without scrolling, with the lease warning.
Screenshots land in test-output/."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys

import pytest
from conftest import TEST_OUTPUT as OUTPUT
from conftest import press, reviewing_page

from testset_builder.cli import main
from testset_builder.store import open_workspace, rows

pytestmark = pytest.mark.slow
TOKEN = "tok-" + "e" * 24
GUIDELINES = (
    "## Grading\n\nGrade **2** only when the chunk answers on its own.\n\n<script>alert('guidelines')</script>\n"
)
LONG = " ".join(f"Sentence {n} of a long chunk about ranking metrics and how they are computed." for n in range(60))
QUERIES = {"qa": "how is ndcg computed", "qb": "what does recall at k count", "qc": "what is a ranking metric"}
DOCS = {
    f"d{n}": f"Chunk {n}: " + ("ndcg discounts by rank" if n % 2 else "recall counts what was found") for n in range(6)
}


def grade_of(query_id: str, doc_id: str) -> int:
    """What the reviewer in the test means for each pair: a rule the test and its check both read."""
    return (int(doc_id[1:]) + len(query_id) + ord(query_id[1])) % 3


@pytest.fixture
def team_server(tmp_path, capsys):
    """A workspace with 18 pairs (3 queries by 6 chunks) and 2 synthetic questions queued so that 10 pairs come
    first, then the questions, then 8 pairs; a config with guidelines; `serve` started with ``lease`` seconds."""
    servers = []

    def start(lease: float = 900, long_chunk: bool = False, guidelines: str = GUIDELINES):
        corpus = tmp_path / "corpus.jsonl"
        docs = {**DOCS, "d0": LONG} if long_chunk else DOCS
        corpus.write_text("".join(json.dumps({"_id": d, "text": t}) + "\n" for d, t in docs.items()), encoding="utf-8")
        config = tmp_path / "review.yaml"
        config.write_text(json.dumps({"review": {"guidelines": guidelines, "lease_s": lease}}), encoding="utf-8")
        ws = tmp_path / "ws"
        assert main(["chunk", str(corpus), "--workspace", str(ws), "--chunker", "prechunked", "--json"]) == 0
        capsys.readouterr()
        from testset_builder.records import Judgment, JudgmentSource, JudgmentStatus, Query, QueryOrigin
        from testset_builder.store import review as store
        from testset_builder.store.workspace import utc_timestamp

        real = [Query(query_id=q, text=t, origin=QueryOrigin.real) for q, t in QUERIES.items()]
        asked = [
            Query(query_id=f"s{n}", text=f"question {n} about chunk d{n}?", origin=QueryOrigin.synthetic,
                  source_chunk_id=f"d{n}", style="natural")
            for n in (1, 2)
        ]  # fmt: skip
        labels = [
            Judgment(judgment_id=f"src{n}", query_id=f"s{n}", chunk_id=f"d{n}", grade=2,
                     source=JudgmentSource.synthetic_source, status=JudgmentStatus.final)
            for n in (1, 2)
        ]  # fmt: skip
        pairs = [(q, d) for q in QUERIES for d in docs]
        items = [
            store.QueuedItem(store.pair_item_id(q, d), "pair", q, d, 2.0 if n < 10 else 0.5, "llm proposal", 1)
            for n, (q, d) in enumerate(pairs)
        ]
        items += [
            store.QueuedItem(store.question_item_id(f"s{n}"), "question", f"s{n}", None, 1.0, "question", 1)
            for n in (1, 2)
        ]
        with open_workspace(ws) as workspace, workspace.transaction() as db:
            rows.put_queries(db, [*real, *asked])
            rows.add_judgments(db, labels)
            store.enqueue(db, items, utc_timestamp())
        env = {**os.environ, "TESTSET_BUILDER_REVIEW_TOKEN": TOKEN}
        command = [sys.executable, "-m", "testset_builder", "serve", "--workspace", str(ws), "--port", "0",
                   "--questions", "--config", str(config)]  # fmt: skip
        server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        servers.append(server)
        line = server.stdout.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", line)
        assert match, line + server.stderr.read()
        return match.group(1), ws

    yield start
    for server in servers:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=20)


def pair_shown(page) -> tuple[str, str]:
    query = {text: q for q, text in QUERIES.items()}[page.inner_text("#query")]
    return query, page.inner_text(".meta code")


def test_twenty_items_by_keyboard_alone_with_an_edit_and_a_comment_are_stored_exactly_as_meant(browser, team_server):
    base, ws = team_server()
    OUTPUT.mkdir(parents=True, exist_ok=True)
    page = reviewing_page(browser, base, TOKEN)
    dialogs = page.dialogs
    assert page.inner_text("#guidelines h2") == "Grading" and "alert('guidelines')" in page.inner_text("#guidelines")
    assert page.inner_text("#meaning-2") == "answers the query on its own"
    page.screenshot(path=str(OUTPUT / "review-team-screen.png"), full_page=True)
    meant, queries_in_order, commented = {}, [], None
    for n in range(20):
        page.wait_for_selector("body[data-ready]", state="attached")
        if page.get_attribute("#item", "data-kind") == "question":
            if page.inner_text("#query").startswith("question 1"):  # the edit: Tab from the focused first action
                page.wait_for_selector("#item button[data-key='k']:focus")
                for _ in range(3):  # keep -> the reason list -> drop -> the edit box
                    page.keyboard.press("Tab")
                assert page.evaluate("document.activeElement.id") == "edited-text"
                page.keyboard.press("Control+A")
                page.keyboard.type("how does question one read when edited?")
                press(page, "Enter")
            else:
                press(page, "k")
            continue
        query, chunk = pair_shown(page)
        queries_in_order.append(query)
        meant[(query, chunk)] = grade_of(query, chunk)
        if n == 4:  # a comment, typed after m (which is not typed into it), then Esc and the grade
            page.keyboard.press("m")
            assert page.evaluate("document.activeElement.id") == "comment"
            page.keyboard.type("the second sentence answers it")
            page.keyboard.press("Escape")
            commented = (query, chunk)
        press(page, str(meant[(query, chunk)]))
        assert "Saved: grade" in page.inner_text("#last")
    page.wait_for_selector("#done")
    assert not dialogs
    assert sum(a != b for a, b in itertools.pairwise(queries_in_order)) <= 3  # 3 queries over 2 bands of priority
    with open_workspace(ws) as workspace:
        human = {
            (j.query_id, j.chunk_id): (j.grade, j.rationale)
            for j in rows.iter_judgments(workspace.db)
            if j.source.value == "human" and j.status.value == "final"
        }
        texts = set(rows.synthetic_query_texts(workspace.db))
        actions = [r[0] for r in workspace.db.execute("SELECT action FROM review_verdicts ORDER BY rowid")]
    expected = {pair: (g, "the second sentence answers it" if pair == commented else None) for pair, g in meant.items()}
    edited = {pair: value for pair, value in human.items() if pair[0].startswith("e-")}  # the edit carries s1's label
    assert {pair: value for pair, value in human.items() if pair not in edited} == expected and len(meant) == 18
    assert "how does question one read when edited?" in texts
    assert actions.count("grade") == 18 and sorted(actions[10:12]) == ["edit_question", "keep_question"]


def test_on_a_phone_the_grade_buttons_are_on_screen_without_scrolling_and_the_lease_warns(browser, team_server):
    base, ws = team_server(lease=45, long_chunk=True)
    OUTPUT.mkdir(parents=True, exist_ok=True)
    phone = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True,
                                has_touch=True)  # fmt: skip
    page = reviewing_page(phone, base, TOKEN)
    assert "Sentence 59" in page.inner_text("#chunk-text")  # the long chunk, far taller than the screen
    assert page.evaluate("document.documentElement.scrollHeight") > 2 * 844
    page.wait_for_selector("#lease.warn")  # 45 s left: under a minute, so the warning shows at once
    assert "ends in" in page.inner_text("#lease")
    page.screenshot(path=str(OUTPUT / "review-phone-390x844.png"))
    for grade in ("0", "1", "2"):
        box = page.locator(f"#item button[data-key='{grade}']").bounding_box()
        assert box and box["y"] >= 0 and box["y"] + box["height"] <= 844 and box["x"] + box["width"] <= 390, grade
    assert page.evaluate("window.scrollY") == 0
    assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing wider than the screen
    with page.expect_response(lambda response: response.url.endswith("/ui/verdict")):
        page.locator("#item button[data-key='1']").tap()
    page.wait_for_selector("#last")
    with open_workspace(ws) as workspace:
        assert [(j.chunk_id, j.grade) for j in rows.iter_judgments(workspace.db) if j.source.value == "human"] == [
            ("d0", 1)
        ]
    phone.close()


def test_on_a_phone_the_query_and_chunk_come_before_the_guidelines_and_on_a_wide_screen_after(browser, team_server):
    rules = "".join(f"{n}. Rule {n}: read the whole chunk before you grade it, grade once.\n" for n in range(1, 31))
    base, _ = team_server(guidelines=GUIDELINES + "\n" + rules)  # guidelines taller than a phone's screen
    OUTPUT.mkdir(parents=True, exist_ok=True)
    phone = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True,
                                has_touch=True)  # fmt: skip
    page = reviewing_page(phone, base, TOKEN)
    page.screenshot(path=str(OUTPUT / "review-phone-first-screen.png"))
    guidelines = page.locator("#guidelines").bounding_box()
    query, chunk = page.locator("#query").bounding_box(), page.locator(".chunk").bounding_box()
    assert guidelines["height"] > 844  # so, first, they would fill the screen
    assert query["y"] + query["height"] <= chunk["y"] < guidelines["y"]  # the query, the chunk, then the guidelines
    assert query["y"] >= 0 and chunk["y"] < 844 and page.evaluate("window.scrollY") == 0  # on the first screen
    grade = page.locator("#item button[data-key='2']").bounding_box()
    assert grade["y"] + grade["height"] <= 844  # the buttons still at the bottom of the screen
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    phone.close()
    wide = browser.new_context(viewport={"width": 1100, "height": 900})
    page = reviewing_page(wide, base, TOKEN)
    assert page.locator("#guidelines").bounding_box()["y"] < page.locator("#query").bounding_box()["y"]
    wide.close()
