"""What a review team relies on beyond one verdict: one overlap for the whole workspace, one query's items together,
skipped items answered after all, a stop that gives the held item back, when held items come back, adjudication
with the grades to settle, the whole document on demand, guidelines and grade meanings on the page, a comment saved
with the verdict, and a terminal reviewer that shows progress and context."""

from __future__ import annotations

import html
import io
import itertools
import json
import re
from urllib.parse import quote

import pytest

from testset_builder.config import ReviewConfig, load_config
from testset_builder.errors import InputError
from testset_builder.records import JudgmentSource
from testset_builder.stages import review
from testset_builder.store import review as store
from testset_builder.store import rows
from testset_builder.store.workspace import utc_timestamp

TOKEN = "tok-" + "t" * 24


def grade(ws, reviewer, item, value, settings=None):
    key, overlap = f"{reviewer}-{item.item_id}", review.workspace_overlap(ws, settings)
    return review.submit(ws, reviewer, item.item_id, "grade", key, grade=value, overlap=overlap)


def graded_apart(ws):
    """Overlap 2, and the first item graded 0 by ann and 2 by bob: a disagreement to settle. Returns the item."""
    review.keep_overlap(ws, 2)
    first = review.next_item(ws, "ann")
    grade(ws, "ann", first, 0)
    assert review.next_item(ws, "bob").item_id == first.item_id
    grade(ws, "bob", first, 2)
    return first


@pytest.fixture
def client_for():
    from fastapi.testclient import TestClient

    from testset_builder.review_ui import create_app

    opened = []

    def make(ws, settings=None, token=TOKEN):
        client = TestClient(create_app(ws, TOKEN, settings))
        client.__enter__()
        client.headers["Authorization"] = f"Bearer {token}"
        opened.append(client)
        return client

    yield make
    for client in opened:
        client.__exit__(None, None, None)


# one overlap for the workspace -----------------------------------------------------------------------------------


def test_the_overlap_kept_in_the_workspace_is_what_every_reviewer_counts_with(queued_workspace):
    ws = queued_workspace
    assert review.workspace_overlap(ws) == 1 and review.stats(ws).verdicts_wanted == 3  # 1 until one is kept
    assert review.keep_overlap(ws, 2) == 1  # the one it replaced
    assert review.keep_overlap(ws, 2) is None  # unchanged
    assert review.stats(ws).verdicts_wanted == 6 and review.stats(ws, ReviewConfig()).verdicts_wanted == 6
    first = review.next_item(ws, "ann")
    grade(ws, "ann", first, 1)
    assert review.next_item(ws, "bob").item_id == first.item_id  # the item still wants a second reviewer
    with pytest.raises(InputError, match="whole number"):
        review.keep_overlap(ws, 0)


def test_an_overlap_given_to_one_command_is_kept_for_the_next_and_said(queued_workspace, tmp_path, capsys):
    from testset_builder.cli import main

    root = str(queued_workspace.root)
    assert main(["review-export", "-f", "label-studio", "-o", str(tmp_path / "a"), "-w", root, "--overlap", "2"]) == 0
    assert "review overlap of this workspace: 1 -> 2" in capsys.readouterr().err
    assert main(["review-export", "-f", "label-studio", "-o", str(tmp_path / "b"), "-w", root, "--json"]) == 0
    assert "overlap" not in capsys.readouterr().err  # kept: nothing to say, and the same pairs pending
    assert review.workspace_overlap(queued_workspace) == 2
    first = review.next_item(queued_workspace, "ann")
    grade(queued_workspace, "ann", first, 1)
    assert main(["review-export", "-f", "argilla", "-o", str(tmp_path / "c"), "-w", root, "--json"]) == 0
    assert '"items": 3' in capsys.readouterr().out  # the graded pair still wants its second reviewer


# what a reviewer is served ---------------------------------------------------------------------------------------


def test_a_reviewer_is_served_one_querys_items_together(pair_queue):
    order = []
    while (item := review.next_item(pair_queue, "ann")) is not None:
        order.append(item.query["query_id"])
        grade(pair_queue, "ann", item, 0)
    changes = sum(a != b for a, b in itertools.pairwise(order))
    assert len(order) == len(pair_queue.items) and changes == 1  # two queries: one change, not one per item


def test_items_drawn_for_review_still_come_before_the_rest_of_the_reviewers_query(pair_queue):
    first = review.next_item(pair_queue, "ann")
    grade(pair_queue, "ann", first, 0)
    other = next(i for i in pair_queue.items if i.query_id != first.query["query_id"])
    drawn = store.QueuedItem(other.item_id, "pair", other.query_id, other.chunk_id, 3.0, "drawn", 1)
    with pair_queue.transaction() as db:
        store.enqueue(db, [drawn], utc_timestamp())
    assert review.next_item(pair_queue, "ann").item_id == drawn.item_id


def test_skipped_items_can_be_answered_after_all(queued_workspace):
    ws = queued_workspace
    skipped = review.next_item(ws, "ann")
    review.submit(ws, "ann", skipped.item_id, "skip", "skip-1")
    assert review.next_item(ws, "ann").item_id != skipped.item_id  # the queue goes on without it
    again = review.next_item(ws, "ann", skipped=True)
    assert again.item_id == skipped.item_id
    grade(ws, "ann", again, 2)
    assert review.next_item(ws, "ann", skipped=True) is None
    assert store.verdicts_per_reviewer(ws.db)["ann"] == {"grade": 1}  # the grade replaced the skip
    human = [j for j in rows.iter_judgments(ws.db) if j.source is JudgmentSource.human]
    assert [(j.query_id, j.grade) for j in human] == [(skipped.query["query_id"], 2)]


def test_a_reviewer_who_stops_gives_the_held_item_back_at_once(queued_workspace):
    ws = queued_workspace
    held = review.next_item(ws, "ann")
    assert review.next_item(ws, "bob").item_id != held.item_id
    assert review.leave(ws, "ann") == 1
    assert review.next_item(ws, "cid").item_id == held.item_id  # not after its 15-minute lease


def test_when_others_hold_what_is_left_the_reviewer_is_told_when_it_comes_back(queued_workspace):
    ws = queued_workspace
    settings = ReviewConfig(lease_s=600)
    held = [review.next_item(ws, who, settings) for who in ("bob", "cid", "dan")]
    assert review.next_item(ws, "ann", settings) is None
    assert review.free_again_at(ws, "ann", settings) == min(i.lease_expires_at for i in held)
    grade(ws, "bob", held[0], 1)
    grade(ws, "cid", held[1], 1)
    grade(ws, "dan", held[2], 1)
    assert review.free_again_at(ws, "ann", settings) is None  # nothing out: nothing will come back


def test_a_held_pair_of_a_question_dropped_meanwhile_is_not_a_time_to_come_back(queued_workspace):
    ws = queued_workspace
    settings = ReviewConfig(lease_s=600, questions=True)
    with ws.transaction() as db:  # a pair of the synthetic question, ahead of everything
        pair = store.QueuedItem(store.pair_item_id("s0", ws.chunk_ids[0]), "pair", "s0", ws.chunk_ids[0], 9.0, "x", 1)
        store.enqueue(db, [pair], utc_timestamp())
    review.queue_questions(ws)
    held = review.next_item(ws, "bob", settings)
    assert held.item_id == pair.item_id
    for item in iter(lambda: review.next_item(ws, "ann", settings), None):  # ann answers all else, and drops s0
        if item.kind == "question":
            review.submit(ws, "ann", item.item_id, "drop_question", f"drop-{item.item_id}", reason="ambiguous")
        else:
            grade(ws, "ann", item, 1, settings)
    assert "s0" in review.dropped_questions(ws)
    # bob's lease on the dropped question's pair would end in ten minutes, but that pair never comes back to anyone
    assert review.free_again_at(ws, "cid", settings) is None


def test_an_adjudicator_sees_each_reviewers_grade_on_the_pair_to_settle(queued_workspace):
    ws = queued_workspace
    review.keep_overlap(ws, 2)
    first = review.next_item(ws, "ann")
    grade(ws, "ann", first, 0)
    assert review.next_item(ws, "bob").item_id == first.item_id
    grade(ws, "bob", first, 2)
    settled = review.next_item(ws, "cid", adjudicate=True)
    assert settled.item_id == first.item_id and settled.graded_by == {"ann": 0, "bob": 2}
    assert review.next_item(ws, "dan").graded_by is None  # the queue shows no one's grade


def test_the_whole_document_shows_the_chunk_where_it_stands(queued_workspace, monkeypatch):
    ws = queued_workspace
    chunk = rows.get_chunk(ws.db, ws.chunk_ids[1])
    document = rows.get_document(ws.db, chunk.doc_id)
    whole = review.document_around(ws, chunk.chunk_id)
    assert whole["before"] + whole["chunk"] + whole["after"] == document.text and whole["cut"] == 0
    assert whole["chunk"] == chunk.text and whole["title"] == document.title
    monkeypatch.setattr(review, "DOCUMENT_CHARS", len(chunk.text) + 20)  # a long document: cut around the chunk
    cut = review.document_around(ws, chunk.chunk_id)
    assert cut["chunk"] == chunk.text and len(cut["before"]) + len(cut["after"]) == 20
    assert cut["cut"] == len(document.text) - len(chunk.text) - 20
    assert document.text[chunk.start - len(cut["before"]) : chunk.end + len(cut["after"])] == (
        cut["before"] + cut["chunk"] + cut["after"]
    )


# the page --------------------------------------------------------------------------------------------------------


def test_the_page_shows_the_guidelines_as_markdown_and_never_runs_their_html(queued_workspace, client_for):
    guidelines = (
        "# How to grade\n\nA chunk is **relevant** when it *answers* the query.\n\n"
        "<script>alert('g')</script>\n\n[a trap](javascript:alert(1)) and [the wiki](https://example.org/wiki)\n"
    )
    client = client_for(queued_workspace, ReviewConfig(guidelines=guidelines))
    client.cookies.set("tsb_reviewer", "ann")
    page = client.get("/review").text
    assert "<h1>How to grade</h1>" in page and "<strong>relevant</strong>" in page and "<em>answers</em>" in page
    assert "<script>alert" not in page and "&lt;script&gt;alert('g')&lt;/script&gt;" in page
    assert 'href="javascript' not in page and '<a href="https://example.org/wiki">the wiki</a>' in page


RAW_HTML_GUIDELINES = (
    "# How to grade\n\n<div class='note'>\nRead the whole chunk.\n</div>\nGrade **2** only when it answers the query "
    "on its own.\n\nAn inline <b>tag</b> stays text, and *the rest* is still rendered.\n"
)  # CommonMark's HTML block runs to the blank line: the sentence after </div> is in it


def test_the_terminal_renders_the_guidelines_after_raw_html_as_the_page_does(
    queued_workspace, tmp_path, monkeypatch, capsys, client_for
):
    from testset_builder.cli import main

    config = tmp_path / "review.yaml"
    config.write_text(json.dumps({"review": {"guidelines": RAW_HTML_GUIDELINES}}), encoding="utf-8")
    monkeypatch.setattr("sys.stdin", io.StringIO("q\n"))
    monkeypatch.setenv("COLUMNS", "200")  # one line a paragraph: the words read as the page's
    args = ["review", "--reviewer", "ann", "--workspace", str(queued_workspace.root), "--config", str(config)]
    assert main(args) == 0
    shown = capsys.readouterr().out
    page = client_for(queued_workspace, ReviewConfig(guidelines=RAW_HTML_GUIDELINES))
    page.cookies.set("tsb_reviewer", "ann")
    guidelines = re.search(r'<div class="guidelines-text">(.*?)</div>\n</details>', page.get("/review").text, re.S)
    on_page = " ".join(html.unescape(re.sub(r"<[^>]+>", "", guidelines.group(1))).split())  # the text a reader sees
    for said in ("<div class='note'>", "Grade 2 only when it answers the query on its own.", "<b>tag</b> stays text"):
        assert said in shown, said  # the raw HTML as text, and what follows it, in the terminal
        assert said in on_page, said  # as on the page
    assert "**" not in shown and "*the rest*" not in shown  # the Markdown after the HTML is still rendered
    assert "How to grade" in shown and "# How" not in shown


def test_guidelines_come_from_a_markdown_file_beside_the_config(tmp_path):
    (tmp_path / "rules.md").write_text("# Our rules\n", encoding="utf-8")
    (tmp_path / "config.yaml").write_text("review:\n  guidelines_file: rules.md\n", encoding="utf-8")
    assert load_config(tmp_path / "config.yaml").review.guidelines_text() == "# Our rules\n"
    (tmp_path / "config.yaml").write_text("review:\n  guidelines_file: missing.md\n", encoding="utf-8")
    with pytest.raises(InputError, match="guidelines_file"):
        load_config(tmp_path / "config.yaml").review.guidelines_text()


def test_each_grade_button_has_its_meaning_beside_it_and_a_config_can_say_its_own(queued_workspace, client_for):
    client = client_for(queued_workspace)
    client.cookies.set("tsb_reviewer", "ann")
    page = client.get("/review").text
    assert '<dd id="meaning-2">answers the query on its own</dd>' in page
    assert 'aria-describedby="meaning-0"' in page and "<b>1 · relevant</b>" in page
    own = ReviewConfig(grades={0: "off: nothing on it", 1: "partial: some of it", 2: "full: all of it"})
    mine = client_for(queued_workspace, own)
    mine.cookies.set("tsb_reviewer", "bob")
    assert '<dd id="meaning-1">some of it</dd>' in mine.get("/review").text
    with pytest.raises(ValueError, match="0, 1 and 2"):
        ReviewConfig(grades={0: "a", 1: "b"})


def test_a_comment_typed_on_the_page_is_saved_with_the_grade(queued_workspace, client_for):
    from testset_builder.review_ui.app import form_token

    client = client_for(queued_workspace, token=TOKEN)
    del client.headers["Authorization"]
    client.cookies.set("tsb_token", TOKEN)
    client.cookies.set("tsb_reviewer", "ann")
    page = client.get("/review").text
    item_id = page.split('name="item_id" value="')[1].split('"')[0]
    form = {
        "form_token": form_token(TOKEN), "item_id": item_id, "action": "grade", "grade": "1", "idempotency_key": "c-1",
        "shown_at": "0", "comment": "  only the second half is about it ", "mode": "queue",
    }  # fmt: skip
    assert client.post("/ui/verdict", data=form, headers={"HX-Request": "true"}).status_code == 200
    human = [j for j in rows.iter_judgments(queued_workspace.db) if j.source is JudgmentSource.human]
    assert [(j.grade, j.rationale) for j in human] == [(1, "only the second half is about it")]
    assert store.verdict_by_key(queued_workspace.db, "c-1").comment == "only the second half is about it"
    too_long = {**form, "idempotency_key": "c-2", "comment": "x" * 2001}
    assert client.post("/ui/verdict", data=too_long).status_code == 422  # the API's limit, and the box's maxlength


def test_only_an_admin_settles_disagreements_in_the_browser(queued_workspace, client_for):
    ws = queued_workspace
    graded_apart(ws)
    reviewer = client_for(ws, token=review.add_reviewer(ws, "cid"))
    assert reviewer.get("/review", params={"mode": "adjudicate"}).status_code == 403
    assert reviewer.get("/review", params={"mode": "anything"}).status_code == 400
    admin = client_for(ws, token=review.add_reviewer(ws, "dora", "admin"))
    page = admin.get("/review", params={"mode": "adjudicate"}).text
    assert 'id="graded-by"' in page and "<b>0</b> by ann, <b>2</b> by bob" in page
    assert 'name="mode" value="adjudicate"' in page


def test_the_page_offers_the_skipped_items_and_says_when_held_items_come_back(queued_workspace, client_for):
    ws = queued_workspace
    client = client_for(ws)
    client.cookies.set("tsb_reviewer", "ann")
    skipped = review.next_item(ws, "ann")
    for who in ("bob", "cid"):
        review.next_item(ws, who)  # the two other items are out with them
    review.submit(ws, "ann", skipped.item_id, "skip", "skip-ann")
    page = client.get("/review").text
    assert 'id="done"' in page and 'id="come-back"' in page and "comes back by" in page
    assert "Go back to the 1 item you skipped" in page
    again = client.get("/review", params={"mode": "skipped"}).text
    assert skipped.item_id in again and 'name="mode" value="skipped"' in again


def test_the_whole_document_route_takes_any_chunk_id_escaped_in_its_url(queued_workspace, client_for):
    client = client_for(queued_workspace)
    chunk_id = queued_workspace.chunk_ids[0]
    assert "#" in chunk_id
    shown = client.get(f"/ui/document/{quote(chunk_id, safe='/')}")
    assert shown.status_code == 200 and 'id="this-chunk"' in shown.text
    assert client.get("/ui/document/no/such/chunk").status_code == 404


# the terminal ----------------------------------------------------------------------------------------------------


def test_the_terminal_reviewer_shows_progress_meanings_and_context_and_gives_back_the_item_on_quit(
    queued_workspace, monkeypatch, capsys
):
    from testset_builder.cli import main

    ws = queued_workspace
    monkeypatch.setattr("sys.stdin", io.StringIO("2\nc\nq\n"))
    assert main(["review", "--reviewer", "ann", "--workspace", str(ws.root)]) == 0
    shown = capsys.readouterr().out
    assert "0 of 3 verdicts given (0 of 3 items done)" in shown and "1 of 3 verdicts given" in shown
    assert "answers the query on its own" in shown  # the grade meanings
    assert "around the chunk in its document" in shown
    assert "1 verdicts given this session; the item you held went back to the queue" in shown
    assert store.held_lease(ws.db, "ann", utc_timestamp()) is None
    assert review.next_item(ws, "bob").query["query_id"] == "r1"  # what ann held, at once


def test_the_terminal_reviewer_gives_back_the_item_when_its_input_ends(queued_workspace, monkeypatch, capsys):
    from testset_builder.cli import main

    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # Ctrl-D at the first prompt
    main(["review", "--reviewer", "ann", "--workspace", str(queued_workspace.root)])
    assert "went back to the queue" in capsys.readouterr().out
    assert store.held_lease(queued_workspace.db, "ann", utc_timestamp()) is None


def test_the_api_serves_skipped_items_disagreements_for_an_admin_and_says_when_to_retry(queued_workspace, client_for):
    ws = queued_workspace
    first = graded_apart(ws)
    admin = client_for(ws, token=review.add_reviewer(ws, "dora", "admin"))
    settle = admin.get("/api/next", params={"mode": "adjudicate"}).json()
    assert settle["item_id"] == first.item_id and settle["graded_by"] == {"ann": 0, "bob": 2}
    verdict = {"item_id": first.item_id, "action": "grade", "grade": 1, "idempotency_key": "settle-1"}
    assert admin.post("/api/verdicts", json=verdict).status_code == 409  # in the queue, the pair has its two
    assert admin.post("/api/verdicts", json={**verdict, "mode": "adjudicate"}).status_code == 201
    cid = client_for(ws, token=review.add_reviewer(ws, "cid"))
    assert cid.get("/api/next", params={"mode": "adjudicate"}).status_code == 403
    assert cid.post("/api/verdicts", json={**verdict, "idempotency_key": "x", "mode": "adjudicate"}).status_code == 403
    held = cid.get("/api/next").json()
    skip = {"item_id": held["item_id"], "action": "skip", "idempotency_key": "cid-skip"}
    assert cid.post("/api/verdicts", json=skip).status_code == 201
    assert cid.get("/api/next", params={"mode": "skipped"}).json()["item_id"] == held["item_id"]
    for who in ("eve", "fay", "gus", "hal"):
        review.next_item(ws, who)  # every place left is out with someone
    nothing = cid.get("/api/next")
    assert nothing.status_code == 204 and 0 < int(nothing.headers["Retry-After"]) <= 901


def test_skipping_again_among_ones_skipped_items_goes_on_to_the_next(queued_workspace):
    ws = queued_workspace
    skipped = []
    for n in range(2):
        item = review.next_item(ws, "ann")
        review.submit(ws, "ann", item.item_id, "skip", f"skip-{n}")
        skipped.append(item.item_id)
    first = review.next_item(ws, "ann", skipped=True)
    assert first.item_id == skipped[0]  # the oldest skip first
    review.submit(ws, "ann", first.item_id, "skip", "skip-again")
    assert review.next_item(ws, "ann", skipped=True).item_id == skipped[1]  # not the same one for ever


def test_an_item_held_for_adjudication_is_not_served_where_its_verdict_would_be_refused(queued_workspace):
    ws = queued_workspace
    first = graded_apart(ws)
    settling = review.next_item(ws, "dora", adjudicate=True)
    assert settling.item_id == first.item_id
    served = review.next_item(ws, "dora")  # back in the queue: another item, one her grade can go to
    assert served.item_id != first.item_id
    grade(ws, "dora", served, 1)


def test_stopping_without_javascript_shows_a_pause_and_leases_nothing(queued_workspace, client_for):
    from testset_builder.review_ui.app import form_token

    ws = queued_workspace
    client = client_for(ws)
    del client.headers["Authorization"]
    client.cookies.set("tsb_token", TOKEN)
    client.cookies.set("tsb_reviewer", "ann")
    assert client.get("/review").status_code == 200  # ann holds the first item
    stopped = client.post("/ui/leave", data={"form_token": form_token(TOKEN)}, follow_redirects=False)
    assert stopped.status_code == 200 and "Paused" in stopped.text
    assert store.held_lease(ws.db, "ann", utc_timestamp()) is None  # given back, and nothing taken in its place
