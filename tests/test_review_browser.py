"""The web reviewer in a real headless Chromium (Debian's, driven by Playwright): a review session by keyboard only,
an undo, a question dropped, a reload that loses nothing, a wrong token refused, and hostile chunk text shown inert.
Screenshots of the review screen land in test-output/."""

from __future__ import annotations

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
HOSTILE = 'Beware <script>alert("x")</script> {{ 7*7 }} "><img src=x onerror=alert(1)> and ranking.'


@pytest.fixture
def served(tmp_path, capsys):
    """A workspace with three queued pairs (one chunk holding hostile markup) and one synthetic question, and a
    real `testset-builder serve` on a free port; yields (base URL, token, workspace path)."""
    yield from serving(tmp_path, capsys, questions=1)


@pytest.fixture
def served_two_questions(tmp_path, capsys):
    yield from serving(tmp_path, capsys, questions=2)


def serving(tmp_path, capsys, questions: int):
    corpus = tmp_path / "corpus.jsonl"
    texts = {
        "d-ndcg": "nDCG discounts each relevant chunk by the log of its rank and divides by the ideal ranking.",
        "d-hostile": HOSTILE,
        "d-recall": "Recall at k counts the relevant chunks found among the first k results.",
    }
    corpus.write_text("".join(json.dumps({"_id": d, "text": t}) + "\n" for d, t in texts.items()), encoding="utf-8")
    ws = tmp_path / "ws"
    assert main(["chunk", str(corpus), "--workspace", str(ws), "--chunker", "prechunked", "--json"]) == 0
    capsys.readouterr()
    from testset_builder.records import Judgment, JudgmentSource, JudgmentStatus, Query, QueryOrigin
    from testset_builder.store import review as store
    from testset_builder.store.workspace import utc_timestamp

    real = Query(query_id="q1", text="how is ranking evaluated", origin=QueryOrigin.real)
    texts_of_questions = ["what does recall count?", "what does ndcg discount?"][:questions]
    sources = ["d-recall", "d-ndcg"]
    asked = [
        Query(
            query_id=f"s{n + 1}", text=text, origin=QueryOrigin.synthetic, source_chunk_id=sources[n], style="natural"
        )
        for n, text in enumerate(texts_of_questions)
    ]
    labels = [
        Judgment(
            judgment_id=f"src{n + 1}", query_id=f"s{n + 1}", chunk_id=sources[n], grade=2,
            source=JudgmentSource.synthetic_source, status=JudgmentStatus.final,
        )
        for n in range(questions)
    ]  # fmt: skip
    items = [
        store.QueuedItem(store.pair_item_id("q1", d), "pair", "q1", d, 3.0 - i, "llm proposal", 1)
        for i, d in enumerate(texts)
    ]
    with open_workspace(ws) as workspace, workspace.transaction() as db:
        rows.put_queries(db, [real, *asked])
        rows.add_judgments(db, labels)
        store.enqueue(db, items, utc_timestamp())
    env = {**os.environ, "TESTSET_BUILDER_REVIEW_TOKEN": "tok-" + "a" * 24}
    server = subprocess.Popen(
        [sys.executable, "-m", "testset_builder", "serve", "--workspace", str(ws), "--port", "0", "--questions"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    line = server.stdout.readline()
    match = re.search(r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", line)
    assert match, line + server.stderr.read()
    yield match.group(1), match.group(2), ws
    server.send_signal(signal.SIGTERM)
    server.wait(timeout=20)


def test_a_keyboard_only_session_with_undo_a_dropped_question_and_a_reload_loses_nothing(browser, served):
    base, token, ws = served
    OUTPUT.mkdir(parents=True, exist_ok=True)
    page = reviewing_page(browser, base, token)
    dialogs = page.dialogs
    assert page.url.endswith("/review") and "token" not in page.url  # the token left the address bar
    first = page.inner_text("#chunk-text")
    page.screenshot(path=str(OUTPUT / "review-screen.png"), full_page=True)
    press(page, "2")
    assert "Saved: grade 2" in page.inner_text("#last")
    second = page.inner_text("#chunk-text")
    assert second != first and HOSTILE in second  # shown literally: the markup is text
    assert "49" not in second and not dialogs and page.locator("#chunk-text img").count() == 0
    press(page, "u")  # take back the grade 2: its item comes straight back
    assert "taken back" in page.inner_text("#last") and page.inner_text("#chunk-text") == first
    page.reload()  # mid-session: the leased item comes back, nothing is lost
    page.wait_for_selector("#query")
    assert page.inner_text("#chunk-text") == first
    press(page, "1")  # graded again, differently
    assert page.inner_text("#chunk-text") == second  # the item ann was holding when she undid
    press(page, "0")  # the hostile chunk: not relevant
    press(page, "1")  # the recall chunk
    assert page.get_attribute("#item", "data-kind") == "question" and "recall count" in page.inner_text("#query")
    page.screenshot(path=str(OUTPUT / "review-question.png"), full_page=True)
    press(page, "d")  # drop the question (the reason list's first choice)
    page.wait_for_selector("#done")
    assert not dialogs
    with open_workspace(ws) as workspace:
        human = [j for j in rows.iter_judgments(workspace.db) if j.source.value == "human"]
        from testset_builder.store import review as store

        assert "s1" in store.dropped_queries(workspace.db)
    grades = sorted((j.chunk_id, j.grade, j.status.value) for j in human)
    assert grades == [
        ("d-hostile", 0, "final"), ("d-ndcg", 1, "final"), ("d-ndcg", 2, "final"), ("d-ndcg", 2, "withdrawn"),
        ("d-recall", 1, "final"),
    ]  # fmt: skip


def test_a_wrong_token_is_refused_by_the_page_and_the_api(browser, served):
    base, _, _ = served
    page = browser.new_page()
    response = page.goto(f"{base}/?token=wrong")
    assert response.status == 401
    assert page.goto(f"{base}/review").status == 401
    api = page.request.get(f"{base}/api/stats")
    assert api.status == 401
    assert page.request.get(f"{base}/api/stats", headers={"Authorization": "Bearer wrong"}).status == 401


@pytest.fixture
def other_port():
    """Another site's page on another port of 127.0.0.1: a form that posts a verdict to the review server as soon
    as it loads, and one that renames the reviewer (the same *site* as the server, so SameSite cookies go along)."""
    import http.server
    import threading

    pages: dict[str, str] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = pages.get(self.path, "").encode()
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", pages
    server.shutdown()


def forged(action: str, fields: dict[str, str]) -> str:
    inputs = "".join(f'<input type="hidden" name="{name}" value="{value}">' for name, value in fields.items())
    return f'<form method="post" action="{action}">{inputs}</form><script>document.forms[0].submit()</script>'


def test_a_form_posted_from_another_port_is_refused_and_the_pages_own_form_works(browser, served, other_port):
    base, token, ws = served
    attacker, pages = other_port
    page = browser.new_page()
    page.goto(f"{base}/?token={token}")
    page.fill("#reviewer", "ann")
    page.keyboard.press("Enter")  # the page's own form: ann is named and shown her first item
    page.wait_for_selector("#query")
    item_id = page.locator("#item input[name=item_id]").first.get_attribute("value")
    verdict = {"item_id": item_id, "action": "grade", "grade": "2", "idempotency_key": "forged", "shown_at": "0"}
    pages["/verdict"] = forged(f"{base}/ui/verdict", verdict)
    pages["/name"] = forged(f"{base}/ui/name", {"reviewer": "mallory"})
    for path in ("/verdict", "/name"):
        with page.expect_response(lambda response: response.url.startswith(base + "/ui/")) as posted:
            page.goto(attacker + path)
        assert posted.value.status == 403, path
    page.goto(f"{base}/review")
    assert page.inner_text("#who") == "ann"
    with open_workspace(ws) as workspace:
        assert not [j for j in rows.iter_judgments(workspace.db) if j.source.value == "human"]
    press(page, "2")  # and the page's own form still stores ann's verdict
    assert "Saved: grade 2" in page.inner_text("#last")
    with open_workspace(ws) as workspace:
        assert [(j.grade, j.reviewer) for j in rows.iter_judgments(workspace.db) if j.source.value == "human"] == [
            (2, "ann")
        ]


def test_after_a_question_edit_the_next_shortcut_answers_the_next_item_and_types_nothing(browser, served_two_questions):
    base, token, ws = served_two_questions
    page = browser.new_page()
    page.goto(f"{base}/?token={token}")
    page.fill("#reviewer", "ann")
    page.keyboard.press("Enter")
    page.wait_for_selector("#query")
    for key in ("2", "0", "1"):  # the three pairs
        press(page, key)
    assert page.get_attribute("#item", "data-kind") == "question"
    first_question = page.inner_text("#query")
    page.fill("#edited-text", "")  # an empty edit is refused, and the page says so
    page.press("#edited-text", "Enter")
    page.wait_for_selector("#last.refused")  # the answer's own line (the last grade's "Saved" is there until then)
    assert "Not saved" in page.inner_text("#last") and page.inner_text("#query") == first_question
    page.fill("#edited-text", "what does recall at k count?")
    shown = page.query_selector("#item")
    page.press("#edited-text", "Enter")  # saved with Enter from the edit box
    shown.wait_for_element_state("hidden")
    page.wait_for_selector("#item")
    assert page.inner_text("#query") != first_question  # the next question
    page.wait_for_selector("#item button[data-key='k']:focus")  # its first action has the focus, not its edit box
    press(page, "k")  # keep it: nothing typed into its edit box
    page.wait_for_selector("#done")
    with open_workspace(ws) as workspace:
        texts = set(rows.synthetic_query_texts(workspace.db))
        verdicts = [row[0] for row in workspace.db.execute("SELECT action FROM review_verdicts ORDER BY rowid")]
    assert "what does recall at k count?" in texts and not any(t.endswith("k") and "count?" in t for t in texts)
    assert verdicts == ["grade", "grade", "grade", "edit_question", "keep_question"]
