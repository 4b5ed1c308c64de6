"""Identity across tools and the reviewers a lead manages: an outside annotator named as an existing reviewer is
that reviewer (not a second one beside them); a users list's unusable entries are skipped with a warning unless they
annotated; `reviewers` lists who reviewed what, and revokes a token (it stops working, the verdicts stay)."""

from __future__ import annotations

import json

import pytest
from test_interchange import export, human_grades, label_studio_export

from testset_builder.cli import main
from testset_builder.errors import InputError
from testset_builder.export import review_tools
from testset_builder.stages import review
from testset_builder.stages.review import interchange

WHEN = "2026-01-01T10:00:00Z"
TOKEN = "tok-" + "i" * 24


def annotated_by(ws, tmp_path, capsys, annotations: dict) -> object:
    export(ws, "label-studio", tmp_path / "ls", capsys=capsys)
    tasks = json.loads((tmp_path / "ls" / "tasks.json").read_text())
    path = tmp_path / "export.json"
    path.write_text(json.dumps(label_studio_export(tasks, annotations)))
    return path


def test_an_annotator_named_as_an_existing_reviewer_is_that_reviewer(queued_workspace, tmp_path, capsys):
    ws = queued_workspace
    review.add_reviewer(ws, "ann")
    first = review.next_item(ws, "ann")
    review.submit(ws, "ann", first.item_id, "grade", "ann-page", grade=2)  # ann on the page
    path = annotated_by(ws, tmp_path, capsys, {"r1": [(4, 1, WHEN, False)], "r2": [(5, 0, WHEN, False)]})
    (tmp_path / "users.yaml").write_text("4: ann\n5: eve\n")
    args = ["review-import", str(path), "--workspace", str(ws.root), "--json"]
    assert main([*args, "--annotators", str(tmp_path / "users.yaml")]) == 0
    assert json.loads(capsys.readouterr().out)["reviewers"] == ["ann", "label-studio:eve"]
    assert human_grades(ws) == {("r0", "ann"): 2, ("r1", "ann"): 1, ("r2", "label-studio:eve"): 0}
    assert [row.name for row in review.reviewers(ws)] == ["ann", "label-studio:eve"]  # one ann, not two


def test_unusable_users_are_skipped_with_a_warning_unless_they_annotated(queued_workspace, tmp_path, capsys):
    ws = queued_workspace
    users = [{"id": 7, "username": "ann"}, {"id": 8, "username": "x" * 81}, {"email": "no-id@example.org"}]
    (tmp_path / "users.json").write_text(json.dumps(users))
    names = review_tools.read_annotators(tmp_path / "users.json")
    assert names.names == {"7": "ann"} and set(names.skipped) == {"8", "user 3"}
    path = annotated_by(ws, tmp_path, capsys, {"r0": [(7, 2, WHEN, False)]})
    assert main(["review-import", str(path), "-w", str(ws.root), "--annotators", str(tmp_path / "users.json")]) == 0
    warned = " ".join(capsys.readouterr().err.split())
    assert "skipped '8' (a name of 81 characters (at most 80))" in warned and "skipped 'user 3' (no id)" in warned
    assert human_grades(ws) == {("r0", "label-studio:ann"): 2}
    path = annotated_by(ws, tmp_path, capsys, {"r1": [(8, 1, WHEN, False)]})
    with pytest.raises(InputError, match=r"entry for label-studio annotator '8' is unusable .* annotated in this file"):
        interchange.import_annotations(ws, path, annotators=names)
    assert human_grades(ws) == {("r0", "label-studio:ann"): 2}


def test_reviewers_lists_who_reviewed_and_a_revoked_token_stops_working(queued_workspace, capsys):
    from fastapi.testclient import TestClient

    from testset_builder.review_ui import create_app

    ws = queued_workspace
    ann = review.add_reviewer(ws, "ann")
    review.add_reviewer(ws, "cho", "admin")
    with TestClient(create_app(ws, TOKEN)) as client:
        client.headers["Authorization"] = f"Bearer {ann}"
        item = client.get("/api/next").json()
        verdict = {"item_id": item["item_id"], "action": "grade", "grade": 1, "idempotency_key": "ann-1"}
        assert client.post("/api/verdicts", json=verdict).status_code == 201
        root = str(ws.root)
        assert main(["reviewers", "--workspace", root, "--json"]) == 0
        listed = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
        assert (listed["ann"]["role"], listed["ann"]["token"], listed["ann"]["standing"]) == (
            "reviewer", "active", {"grade": 1},
        )  # fmt: skip
        assert (listed["cho"]["role"], listed["cho"]["standing"]) == ("admin", {})
        assert main(["reviewers", "revoke", "ann", "--workspace", root]) == 0
        assert "no longer works" in capsys.readouterr().out
        assert client.get("/api/next").status_code == 401
    assert main(["reviewers", "--workspace", root, "--json"]) == 0
    again = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert (again["ann"]["token"], again["ann"]["role"], again["ann"]["standing"]) == ("revoked", None, {"grade": 1})
    assert human_grades(ws) == {(item["query"]["query_id"], "ann"): 1}  # the verdict stays
    assert main(["reviewers", "revoke", "nobody", "--workspace", root]) == 1
    assert "holds no token to revoke" in capsys.readouterr().err
