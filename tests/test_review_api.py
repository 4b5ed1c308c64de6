"""The review JSON API and the page's form posts, in process (FastAPI's TestClient): the shapes scripts rely on,
the token on every route, a verdict stored once per idempotency key, and forms that work before htmx binds them."""

from __future__ import annotations

import re

import pytest

from testset_builder.errors import InputError
from testset_builder.records import JudgmentSource
from testset_builder.store import rows

TOKEN = "tok-" + "b" * 24


@pytest.fixture
def client(queued_workspace):
    from fastapi.testclient import TestClient

    from testset_builder.review_ui import create_app

    with TestClient(create_app(queued_workspace, TOKEN)) as test_client:
        test_client.headers["Authorization"] = f"Bearer {TOKEN}"
        test_client.workspace = queued_workspace
        yield test_client


def test_next_gives_the_item_in_the_documented_shape_and_204_when_nothing_is_left(client):
    served = client.get("/api/next", params={"reviewer": "ann"})
    assert served.status_code == 200
    body = served.json()
    assert {"item_id", "query", "chunk", "lease_expires_at"} <= body.keys()
    assert body["query"]["query_id"] == "r0" and body["query"]["text"] == "real query 0"
    assert body["chunk"]["chunk_id"] == client.workspace.chunk_ids[0] and "title" in body["chunk"]
    assert body["suggestion"] is None  # blind by default
    for _ in range(3):
        item = client.get("/api/next", params={"reviewer": "ann"}).json()
        verdict = {"item_id": item["item_id"], "reviewer": "ann", "action": "grade", "grade": 1}
        assert client.post("/api/verdicts", json={**verdict, "idempotency_key": item["item_id"]}).status_code == 201
    assert client.get("/api/next", params={"reviewer": "ann"}).status_code == 204


def test_a_repeated_idempotency_key_answers_200_with_the_same_verdict_and_stores_nothing(client):
    item = client.get("/api/next", params={"reviewer": "ann"}).json()
    verdict = {
        "item_id": item["item_id"], "reviewer": "ann", "action": "grade", "grade": 2, "idempotency_key": "k-1",
        "comment": "clearly about it",
    }  # fmt: skip
    first, again = client.post("/api/verdicts", json=verdict), client.post("/api/verdicts", json=verdict)
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == {**first.json(), "created": False}
    human = [j for j in rows.iter_judgments(client.workspace.db) if j.source is JudgmentSource.human]
    assert [(j.grade, j.rationale) for j in human] == [(2, "clearly about it")]
    stats = client.get("/api/stats").json()
    assert (stats["total"], stats["done"], stats["remaining"]) == (3, 1, 2)
    assert stats["per_reviewer"] == {"ann": {"grade": 1}}


@pytest.mark.parametrize(
    "verdict, status",
    [
        ({"item_id": "p-nope", "action": "grade", "grade": 1}, 404),
        ({"action": "grade", "grade": 7}, 400),
        ({"action": "drop_question", "reason": "ambiguous"}, 400),
        ({"action": "grade", "grade": "two"}, 422),
    ],
)
def test_a_bad_verdict_is_refused_with_a_reason_and_stores_nothing(client, verdict, status):
    item = client.get("/api/next", params={"reviewer": "ann"}).json()
    answer = client.post(
        "/api/verdicts", json={"item_id": item["item_id"], "reviewer": "ann", "idempotency_key": "k", **verdict}
    )
    assert answer.status_code == status and answer.json()
    assert client.get("/api/stats").json()["done"] == 0


@pytest.mark.parametrize(
    "method, path",
    [("get", "/api/next?reviewer=ann"), ("get", "/api/stats"), ("post", "/api/verdicts"), ("get", "/review")],
)
@pytest.mark.parametrize("authorization", [None, "Bearer wrong-token", f"Basic {TOKEN}"])
def test_every_route_needs_the_token(client, method, path, authorization):
    del client.headers["Authorization"]
    headers = {"Authorization": authorization} if authorization else {}
    assert getattr(client, method)(path, headers=headers).status_code == 401


def test_a_form_posted_without_htmx_records_the_verdict_and_redirects_back_to_the_page(client):
    client.cookies.set("tsb_reviewer", "ann")
    item = client.get("/api/next", params={"reviewer": "ann"}).json()
    form = {"item_id": item["item_id"], "action": "grade", "grade": "2", "idempotency_key": "f-1", "shown_at": "0"}
    posted = client.post("/ui/verdict", data=form, follow_redirects=False)
    assert posted.status_code == 303 and posted.headers["location"] == "/review"
    human = [j for j in rows.iter_judgments(client.workspace.db) if j.source is JudgmentSource.human]
    assert [(j.query_id, j.grade, j.reviewer) for j in human] == [("r0", 2, "ann")]
    swapped = client.post("/ui/verdict", data={**form, "idempotency_key": "f-2"}, headers={"HX-Request": "true"})
    assert swapped.status_code == 200 and 'id="item"' in swapped.text and "<html" not in swapped.text


def test_a_page_form_authorised_by_the_cookie_needs_the_form_token_and_this_origin(client):
    from testset_builder.review_ui.app import form_token

    del client.headers["Authorization"]
    client.cookies.set("tsb_token", TOKEN)
    client.cookies.set("tsb_reviewer", "ann")
    item = client.get("/review")  # the page itself reads with the cookie alone
    assert item.status_code == 200 and f'name="form_token" value="{form_token(TOKEN)}"' in item.text
    item_id = re.search(r'name="item_id" value="([^"]+)"', item.text).group(1)
    form = {"item_id": item_id, "action": "grade", "grade": "2", "idempotency_key": "f-1", "shown_at": "0"}
    assert client.post("/ui/verdict", data=form, follow_redirects=False).status_code == 403  # no form token
    signed = {**form, "form_token": form_token(TOKEN)}
    forged = ({"Sec-Fetch-Site": "same-site"}, {"Origin": "http://127.0.0.1:1"}, {"Sec-Fetch-Site": "cross-site"})
    for headers in forged:
        refused = client.post("/ui/verdict", data=signed, headers=headers, follow_redirects=False)
        assert refused.status_code == 403 and "another origin" in refused.json()["detail"], headers
    assert client.post("/ui/name", data={"reviewer": "mallory"}, follow_redirects=False).status_code == 403
    assert not [j for j in rows.iter_judgments(client.workspace.db) if j.source is JudgmentSource.human]
    same = {"Sec-Fetch-Site": "same-origin", "Origin": "http://testserver"}
    assert client.post("/ui/verdict", data=signed, headers=same, follow_redirects=False).status_code == 303
    assert client.get("/api/stats").status_code == 401  # the JSON API takes no cookie: a bearer token only
    client.headers["Authorization"] = f"Bearer {TOKEN}"
    assert client.get("/api/stats").json()["per_reviewer"] == {"ann": {"grade": 1}}
    refused = client.post("/api/verdicts", json={}, headers={"Origin": "http://127.0.0.1:1"})
    assert refused.status_code == 403  # another origin's page, even one that somehow holds the token


def test_only_the_holder_of_a_lease_may_answer_the_item_until_it_runs_out(client):
    held = client.get("/api/next", params={"reviewer": "ann"}).json()
    verdict = {"item_id": held["item_id"], "action": "grade", "grade": 0}
    refused = client.post("/api/verdicts", json={**verdict, "reviewer": "bob", "idempotency_key": "b-1"})
    assert refused.status_code == 409 and "leased to another reviewer" in refused.json()["error"]
    mine = client.post("/api/verdicts", json={**verdict, "grade": 2, "reviewer": "ann", "idempotency_key": "a-1"})
    assert mine.status_code == 201  # the holder is not told her lease ran out, and her verdict stands
    stored = rows.iter_judgments(client.workspace.db)
    assert [(j.reviewer, j.grade) for j in stored if j.source is JudgmentSource.human] == [("ann", 2)]
    offered = client.get("/api/next", params={"reviewer": "bob"}).json()
    assert offered["item_id"] != held["item_id"]  # ann's item wanted one reviewer and has her


def test_the_context_of_a_chunk_in_a_subfolder_is_shown(tmp_path):
    from urllib.parse import quote

    from fastapi.testclient import TestClient

    from testset_builder.config import ChunkingConfig
    from testset_builder.corpus.ingest import ingest
    from testset_builder.corpus.loaders import load_sources
    from testset_builder.review_ui import create_app
    from testset_builder.store import open_workspace

    docs = tmp_path / "docs"
    (docs / "teamA").mkdir(parents=True)
    text = (
        "# Recall\n\nRecall counts the relevant chunks found.\n\n# Precision\n\nPrecision counts the share of hits.\n"
    )
    (docs / "teamA" / "notes.md").write_text(text, encoding="utf-8")
    with open_workspace(tmp_path / "ws") as ws:
        ingest(ws, load_sources([docs]), ChunkingConfig(chunker="markdown", size=60, overlap=0), [docs])
        chunk_id, *others = sorted(
            c for c, *_ in rows.live_chunk_rows(ws.db) if "Precision" in rows.get_chunk(ws.db, c).text
        )
        assert chunk_id.startswith("teamA/notes.md#") and not others
        with TestClient(create_app(ws, TOKEN), headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            shown = client.get("/ui/context/" + quote(chunk_id, safe="/"))
    assert shown.status_code == 200 and "Recall counts the relevant chunks found." in shown.text


def test_the_page_and_the_api_take_the_same_limits_and_a_grade_must_be_a_number(client):
    item = client.get("/api/next", params={"reviewer": "ann"}).json()
    verdict = {"item_id": item["item_id"], "reviewer": "ann", "action": "grade", "idempotency_key": "k"}
    assert client.post("/api/verdicts", json={**verdict, "grade": True}).status_code == 422
    long = {**verdict, "action": "skip", "reason": "x" * 2001}
    assert client.post("/api/verdicts", json=long).status_code == 422
    client.cookies.set("tsb_reviewer", "ann")
    form = {"item_id": item["item_id"], "action": "skip", "idempotency_key": "f", "shown_at": "0", "reason": "x" * 2001}
    assert client.post("/ui/verdict", data=form).status_code == 422
    assert not list(client.workspace.db.execute("SELECT 1 FROM review_verdicts"))


def test_an_idempotency_key_reused_for_another_item_is_refused_not_swallowed(client):
    first = client.get("/api/next", params={"reviewer": "ann"}).json()
    verdict = {"reviewer": "ann", "action": "grade", "grade": 1, "idempotency_key": "same"}
    assert client.post("/api/verdicts", json={**verdict, "item_id": first["item_id"]}).status_code == 201
    second = client.get("/api/next", params={"reviewer": "ann"}).json()
    reused = client.post("/api/verdicts", json={**verdict, "item_id": second["item_id"]})
    assert reused.status_code == 409 and "was used for another verdict" in reused.json()["error"]


def test_a_reviewers_own_token_is_who_they_are_and_they_cannot_act_or_undo_as_anyone_else(client):
    from testset_builder.review_ui.app import form_token
    from testset_builder.stages.review import add_reviewer

    ann, bob = add_reviewer(client.workspace, "ann"), add_reviewer(client.workspace, "bob")
    as_ann, as_bob = {"Authorization": f"Bearer {ann}"}, {"Authorization": f"Bearer {bob}"}
    item = client.get("/api/next", headers=as_ann).json()  # no name given: the token says who
    verdict = {"item_id": item["item_id"], "action": "grade", "grade": 2, "idempotency_key": "a-1"}
    forged = client.post("/api/verdicts", json={**verdict, "reviewer": "bob"}, headers=as_ann)
    assert forged.status_code == 403 and "this token is ann's" in forged.json()["error"]
    assert client.post("/api/verdicts", json=verdict, headers=as_ann).status_code == 201
    assert (
        client.post("/api/undo", json={"reviewer": "ann", "idempotency_key": "u-0"}, headers=as_bob).status_code == 403
    )
    assert client.post("/api/undo", json={"idempotency_key": "u-1"}, headers=as_bob).status_code == 204  # bob has none
    stored = [(j.reviewer, j.grade, j.status.value) for j in rows.iter_judgments(client.workspace.db)
              if j.source is JudgmentSource.human]  # fmt: skip
    assert stored == [("ann", 2, "final")]  # bob could not take back ann's verdict
    assert client.post("/api/undo", json={"idempotency_key": "u-2"}, headers=as_ann).status_code == 201
    add_reviewer(client.workspace, "bob")  # a new token for bob: the old one stops working
    assert client.get("/api/stats", headers=as_bob).status_code == 401
    del client.headers["Authorization"]
    client.cookies.set("tsb_token", ann)
    client.cookies.set("tsb_reviewer", "mallory")  # a name cookie does not make ann someone else
    page = client.get("/review")
    assert page.status_code == 200 and '<b id="who">ann</b>' in page.text
    renamed = client.post("/ui/name", data={"reviewer": "bob", "form_token": form_token(ann)}, follow_redirects=False)
    assert renamed.status_code == 403


def test_add_reviewer_prints_a_token_once_and_keeps_only_its_hash(queued_workspace, capsys):
    import json

    from testset_builder.cli import main
    from testset_builder.stages.review import principal

    root = str(queued_workspace.root)
    assert main(["add-reviewer", "ann", "--workspace", root, "--admin", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["reviewer"] == "ann" and shown["role"] == "admin"
    who = principal(queued_workspace, shown["token"], TOKEN)
    assert (who.name, who.role) == ("ann", "admin")
    stored = list(queued_workspace.db.execute("SELECT * FROM reviewer_tokens"))
    assert shown["token"] not in repr(stored)  # only its SHA-256
    assert main(["add-reviewer", "   ", "--workspace", root]) == 1
    capsys.readouterr()
    assert main(["add-reviewer", "ann", "--workspace", root]) == 0  # again: a new token, and the old one is dead
    assert "ann's earlier token stopped working" in capsys.readouterr().err
    assert principal(queued_workspace, shown["token"], TOKEN) is None


def test_serve_refuses_a_non_loopback_address_unless_asked_for_by_host():
    from testset_builder.api.reviewing import check_bind as _check_bind

    with pytest.raises(InputError, match=r"pass --host 0\.0\.0\.0"):
        _check_bind("0.0.0.0", explicit=False)
    _check_bind("0.0.0.0", explicit=True)
    _check_bind("::1", explicit=False)
    _check_bind("localhost", explicit=False)


def test_serve_on_a_busy_port_says_so_and_a_wildcard_address_prints_a_link_a_browser_can_open(queued_workspace, capsys):
    import socket

    from testset_builder.api.reviewing import reachable as _reachable
    from testset_builder.cli import main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert main(["serve", "--workspace", str(queued_workspace.root), "--port", str(port)]) == 1
    said = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in said and "--port 0" in said and "bug" not in said
    assert _reachable("0.0.0.0") not in ("0.0.0.0", "") and _reachable("::") != "[::]"
    assert _reachable("127.0.0.1") == "127.0.0.1" and _reachable("::1") == "[::1]"


def test_progress_counts_the_verdicts_overlap_wants_and_each_reviewers_own(queued_workspace):
    from fastapi.testclient import TestClient

    from testset_builder.config import ReviewConfig
    from testset_builder.review_ui import create_app

    app = create_app(queued_workspace, TOKEN, ReviewConfig(overlap=2))
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        item = client.get("/api/next", params={"reviewer": "ann"}).json()
        verdict = {"item_id": item["item_id"], "reviewer": "ann", "action": "grade", "grade": 1, "idempotency_key": "a"}
        assert client.post("/api/verdicts", json=verdict).status_code == 201
        stats = client.get("/api/stats").json()
        assert (stats["verdicts"], stats["verdicts_wanted"], stats["done"]) == (1, 6, 0)  # 3 pairs, 2 reviewers each
        client.cookies.set("tsb_reviewer", "bob")
        page = client.get("/review").text
    assert "1 of 6 verdicts given (0 of 3 items done) · 0 by you" in page


def test_a_verdict_no_longer_wanted_answers_409_and_the_page_says_it_was_not_saved(queued_workspace):
    import time

    from fastapi.testclient import TestClient

    from testset_builder.config import ReviewConfig
    from testset_builder.review_ui import create_app

    app = create_app(queued_workspace, TOKEN, ReviewConfig(overlap=1, lease_s=0.1))
    with TestClient(app, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        late = client.get("/api/next", params={"reviewer": "ann"}).json()
        time.sleep(0.2)  # ann's lease runs out; bob takes and finishes the item
        taken = client.get("/api/next", params={"reviewer": "bob"}).json()
        assert taken["item_id"] == late["item_id"]
        verdict = {"item_id": late["item_id"], "action": "grade", "grade": 1}
        assert (
            client.post("/api/verdicts", json={**verdict, "reviewer": "bob", "idempotency_key": "b"}).status_code == 201
        )
        refused = client.post("/api/verdicts", json={**verdict, "reviewer": "ann", "idempotency_key": "a"})
        assert refused.status_code == 409 and "as many reviewers as it wants (1" in refused.json()["error"]
        client.cookies.set("tsb_reviewer", "ann")
        form = {"item_id": late["item_id"], "action": "grade", "grade": "2", "idempotency_key": "a2", "shown_at": "0"}
        page = client.post("/ui/verdict", data=form, headers={"HX-Request": "true"})
        assert page.status_code == 200 and "Not saved" in page.text
        assert client.get("/api/stats").json()["per_reviewer"] == {"bob": {"grade": 1}}


def test_the_terminal_reviewer_names_the_run_to_start_again_with_its_config(queued_workspace):
    from dataclasses import replace

    from testset_builder.stages.review import stats

    answered = replace(stats(queued_workspace), release_waits_for=3, release_waiting=0)
    assert "run `testset-builder run my-set/testset-builder.yaml` again" in answered.release_words(
        "testset-builder run my-set/testset-builder.yaml"
    )
    assert "run `testset-builder run` again" in answered.release_words()
