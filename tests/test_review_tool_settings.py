"""What Argilla and Label Studio are handed beside the records: the workspace's guidelines, what each grade means
and its overlap, read back by their own SDKs; and the open disagreements, each with every reviewer's grade and
comments, sent there to settle, whose answers come back as settlements (not votes) that leave agreement as it was."""

from __future__ import annotations

import inspect
import io
import json
import uuid
import zipfile

from conftest import require
from test_interchange import export, import_file, label_studio_export

from testset_builder.cli import main
from testset_builder.stages import review
from testset_builder.stages.release import load_release, write_release
from testset_builder.store import review as store

GUIDELINES = "Grade **2** only when the chunk answers the query on its own.\n\n<script>alert('x')</script>\n"
GRADES = {
    0: 'off topic: it only "shares words" with the <query>',
    1: "partial: answers part of it",
    2: "complete: answers it on its own",
}


def config_file(tmp_path):
    path = tmp_path / "review.yaml"
    path.write_text(json.dumps({"review": {"guidelines": GUIDELINES, "grades": GRADES}}), encoding="utf-8")
    return str(path)


def test_argilla_settings_carry_the_guidelines_grade_meanings_and_overlap(
    queued_workspace, tmp_path, capsys, argilla_client
):
    rg = require("argilla")
    out = tmp_path / "argilla"
    export(queued_workspace, "argilla", out, "--config", config_file(tmp_path), "--overlap", "2", capsys=capsys)
    settings = rg.Settings.from_json(out / "settings.json")  # built by the SDK from our file
    question = settings.questions["relevance"]
    assert "Grade **2** only when the chunk answers the query on its own." in settings.guidelines
    for grade, meaning in GRADES.items():
        assert f"{grade}: {meaning}" in question.description
        label, said = meaning.split(": ", 1)
        assert f"**{grade}** · {label}: {said}" in settings.guidelines
    assert question.values == [0, 1, 2]
    assert settings.distribution.min_submitted == 2  # each record wants the workspace's two reviewers


def test_label_studio_settings_carry_the_guidelines_grade_meanings_and_overlap(queued_workspace, tmp_path, capsys):
    require("label_studio_sdk")
    from label_studio_sdk.label_interface import LabelInterface
    from label_studio_sdk.projects.client import ProjectsClient

    review.keep_overlap(queued_workspace, 3)
    out = tmp_path / "ls"
    export(queued_workspace, "label-studio", out, "--config", config_file(tmp_path), capsys=capsys)
    interface = LabelInterface((out / "label_config.xml").read_text(encoding="utf-8"))
    hints = {label: attrs.attr["hint"] for label, attrs in interface.get_control("relevance").labels_attrs.items()}
    assert hints == {str(grade): meaning for grade, meaning in GRADES.items()}  # quotes and <> kept, as written
    project = json.loads((out / "project.json").read_text(encoding="utf-8"))
    assert set(project) <= set(inspect.signature(ProjectsClient.create).parameters)  # projects.create(**project)
    assert LabelInterface(project["label_config"]).get_control("relevance").labels == ["0", "1", "2"]
    assert project["maximum_annotations"] == 3 and project["show_instruction"] is True
    instruction = project["expert_instruction"]
    assert "<strong>2</strong> only when" in instruction  # the Markdown rendered, as on the review page
    assert "<script>" not in instruction and "&lt;script&gt;alert('x')&lt;/script&gt;" in instruction


PLAN = {  # query -> reviewer -> (grade, comment): r0 and r1 disagreements, r2 agreed on
    "r0": {"ann": (0, "only the title matches"), "bob": (2, None)},
    "r1": {"ann": (1, None), "bob": (2, "it answers the whole query")},
    "r2": {"ann": (2, None), "bob": (2, None)},
}


def graded_apart(ws) -> dict[str, str]:
    """Overlap 2, ann and bob grade as :data:`PLAN` says. Returns each query's item id."""
    review.keep_overlap(ws, 2)
    items = {}
    for reviewer in ("ann", "bob"):
        while (item := review.next_item(ws, reviewer)) is not None:
            query = item.query["query_id"]
            grade, comment = PLAN[query][reviewer]
            review.submit(ws, reviewer, item.item_id, "grade", f"{reviewer}-{item.item_id}", grade=grade,
                          comment=comment, overlap=2)  # fmt: skip
            items[query] = item.item_id
    return items


def independent(report: dict) -> tuple:
    """The agreement figures over the reviewers' own grades."""
    return report["pairwise"], report["krippendorff_alpha"], report["agreement"]


def test_disagreements_settled_in_argilla_come_back_as_settlements_that_leave_agreement_as_it_was(
    queued_workspace, tmp_path, capsys, argilla_client
):
    rg = require("argilla")
    from argilla.records._io import GenericIO

    ws = queued_workspace
    items = graded_apart(ws)
    review.add_reviewer(ws, "cho", "admin")
    before = review.agreement(ws)
    out = tmp_path / "settle"
    summary = export(ws, "argilla", out, "--disagreements", capsys=capsys)
    assert (summary["items"], summary["disagreements"]) == (2, True)
    settings = rg.Settings.from_json(out / "settings.json")
    assert [f.name for f in settings.fields] == ["query", "chunk", "reviews"]
    assert settings.distribution.min_submitted == 1  # one admin settles each
    assert settings.guidelines.startswith("Reviewers graded these pairs differently")
    records = [rg.Record.from_dict(r) for r in json.loads((out / "records.json").read_text(encoding="utf-8"))]
    reviews = {r.metadata["query_id"]: r.fields["reviews"] for r in records}
    assert reviews == {  # what the adjudicator sees: both grades, and what was said
        "r0": "ann: 0\nbob: 2\n\nann said: only the title matches",
        "r1": "ann: 1\nbob: 2\n\nbob said: it answers the whole query",
    }

    lead = uuid.uuid4()
    settled_there = next(r for r in records if r.metadata["query_id"] == "r0")
    settled_there.responses.add(rg.Response("relevance", 1, user_id=lead, status="submitted"))
    path = tmp_path / "settled.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in GenericIO.to_list(records, flatten=True)))
    (tmp_path / "users.json").write_text(json.dumps({str(lead): "cho"}))
    args = ["review-import", str(path), "--workspace", str(ws.root), "--json"]
    assert main([*args, "--annotators", str(tmp_path / "users.json")]) == 0
    first = json.loads(capsys.readouterr().out)
    assert (first["settled"], first["new_verdicts"], first["unanswered"], first["reviewers"]) == (1, 0, 1, ["cho"])
    after = review.agreement(ws)
    assert independent(after) == independent(before)  # a settlement is not one more vote
    assert [(s["query_id"], s["grade"], s["by"], s["self_settled"]) for s in after["settled"]] == [
        ("r0", 1, "cho", False)
    ]
    assert [d["query_id"] for d in after["disagreements"]] == ["r1"]
    assert review.disagreements(ws) == {items["r1"]}
    assert store.verdicts_by(ws.db, "cho") == 1  # the settlement, stored once
    again = import_file(ws, path, capsys)
    assert (again["settled"], again["unchanged"]) == (0, 1)  # the same file again stores nothing
    released = load_release(write_release(ws, "1.0.0").path)
    assert released.qrels["r0"] == {ws.chunk_ids[0]: 1}  # the settled grade, not a tie among votes


def test_disagreements_settled_in_label_studio_keep_out_a_pair_settled_meanwhile(queued_workspace, tmp_path, capsys):
    require("label_studio_sdk")
    from label_studio_sdk.label_interface import LabelInterface

    ws = queued_workspace
    items = graded_apart(ws)
    out = tmp_path / "settle"
    assert export(ws, "label-studio", out, "--disagreements", "--blind", capsys=capsys)["items"] == 2
    interface = LabelInterface((out / "label_config.xml").read_text(encoding="utf-8"))
    tasks = json.loads((out / "tasks.json").read_text(encoding="utf-8"))
    assert all(interface.validate_task({"data": task["data"]}) for task in tasks)
    assert {t["data"]["query_id"]: t["data"]["reviews"].splitlines()[:2] for t in tasks} == {
        "r0": ["ann: 0", "bob: 2"], "r1": ["ann: 1", "bob: 2"],
    }  # fmt: skip
    assert json.loads((out / "project.json").read_text(encoding="utf-8"))["maximum_annotations"] == 1

    review.add_reviewer(ws, "cho", "admin")
    review.settle(ws, "cho", items["r0"], 2, "settled-on-the-page")  # meanwhile, on the page
    earlier, later = "2026-03-01T10:00:00Z", "2026-03-02T10:00:00Z"
    answered = label_studio_export(
        tasks, {"r0": [(9, 0, earlier, False)], "r1": [(9, 1, earlier, False), (10, 2, later, False)]}
    )
    for task in answered:
        assert all(interface.validate_annotation(annotation) for annotation in task["annotations"])
    (tmp_path / "export.json").write_text(json.dumps(answered))
    assert main(["review-import", str(tmp_path / "export.json"), "--workspace", str(ws.root)]) == 0
    said = capsys.readouterr()
    assert "1 disagreements settled" in said.out and "1 answers to disagreements no longer open" in said.out
    assert "answered by more than one annotator: the latest answer settles each" in said.err
    settled = {s["query_id"]: (s["grade"], s["by"]) for s in review.agreement(ws)["settled"]}
    assert settled == {"r0": (2, "cho"), "r1": (2, "label-studio:10")}  # the page's stands; the latest answer
    assert review.disagreements(ws) == set()
    # the settlement undone, then answered again in the tool (the same grade, later): it settles the pair again
    assert review.undo(ws, "label-studio:10", "undo-the-import").created
    assert review.disagreements(ws) == {items["r1"]}
    again = label_studio_export(tasks, {"r1": [(10, 2, "2026-03-03T10:00:00Z", False)]})
    (tmp_path / "again.json").write_text(json.dumps(again))
    assert main(["review-import", str(tmp_path / "again.json"), "--workspace", str(ws.root)]) == 0
    assert "1 disagreements settled" in capsys.readouterr().out
    assert review.disagreements(ws) == set()


def test_the_leads_page_hands_out_the_disagreements_as_files_for_each_tool(queued_workspace):
    from fastapi.testclient import TestClient

    from testset_builder.review_ui import create_app

    ws = queued_workspace
    graded_apart(ws)
    admin, reviewer = review.add_reviewer(ws, "cho", "admin"), review.add_reviewer(ws, "dan")
    with TestClient(create_app(ws, "tok-" + "w" * 24)) as client:
        page = client.get("/lead", headers={"Authorization": f"Bearer {admin}"}).text
        for fmt in ("argilla", "label-studio"):
            assert f'href="/lead/disagreements/{fmt}.zip"' in page
        got = client.get("/lead/disagreements/label-studio.zip", headers={"Authorization": f"Bearer {admin}"})
        assert got.status_code == 200 and "disagreements-label-studio.zip" in got.headers["content-disposition"]
        with zipfile.ZipFile(io.BytesIO(got.content)) as archive:
            assert sorted(archive.namelist()) == ["label_config.xml", "project.json", "tasks.json"]
            tasks = json.loads(archive.read("tasks.json"))
        assert sorted(t["data"]["query_id"] for t in tasks) == ["r0", "r1"]
        assert all(t["data"]["review_task"] == "settle" and "ann: " in t["data"]["reviews"] for t in tasks)
        assert all("predictions" not in t for t in tasks)  # blind by default: the judge's grade stays hidden
        refused = client.get("/lead/disagreements/argilla.zip", headers={"Authorization": f"Bearer {reviewer}"})
        assert refused.status_code == 403  # the lead's, not every reviewer's
        unknown = client.get("/lead/disagreements/prodigy.zip", headers={"Authorization": f"Bearer {admin}"})
        assert unknown.status_code == 404
