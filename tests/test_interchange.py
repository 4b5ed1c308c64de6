"""Argilla and Label Studio round trips by file: export the pending pairs (their shapes checked by those packages'
own code), annotate in their format, import, release: the grades arrive as human verdicts."""

from __future__ import annotations

import json
import uuid

import pytest
from conftest import require

from testset_builder.cli import main
from testset_builder.errors import InputError
from testset_builder.export import review_tools
from testset_builder.records import JudgmentSource
from testset_builder.stages.release import load_release, write_release
from testset_builder.stages.review import interchange
from testset_builder.store import review as store
from testset_builder.store import rows


def export(ws, fmt, out, *extra, capsys):
    code = main(["review-export", "--format", fmt, "--out", str(out), "--workspace", str(ws.root), "--json", *extra])
    assert code == 0
    return json.loads(capsys.readouterr().out)


def import_file(ws, path, capsys):
    assert main(["review-import", str(path), "--workspace", str(ws.root), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def human_grades(ws):
    """Each human reviewer's standing grade per query (nothing withdrawn or superseded)."""
    judgments = list(rows.iter_judgments(ws.db))
    superseded = {j.supersedes for j in judgments if j.supersedes}
    return {
        (j.query_id, j.reviewer): j.grade
        for j in judgments
        if j.source is JudgmentSource.human and j.judgment_id not in superseded and j.status.value == "final"
    }


def test_an_argilla_round_trip_brings_grades_back_as_human_verdicts(queued_workspace, tmp_path, capsys, argilla_client):
    rg = require("argilla")
    from argilla.records._io import GenericIO, JsonIO

    ws, out = queued_workspace, tmp_path / "argilla"
    summary = export(ws, "argilla", out, capsys=capsys)
    assert summary["items"] == 3 and summary["with_suggestion"] == 3
    settings = rg.Settings.from_json(out / "settings.json")  # the SDK reads our settings file
    assert [q.name for q in settings.questions] == ["relevance"] and [f.name for f in settings.fields] == [
        "query",
        "chunk",
    ]
    exported = json.loads((out / "records.json").read_text())
    records = [rg.Record.from_dict(record) for record in exported]  # and our records
    assert [r.to_dict() for r in records] == exported
    suggestion = records[0].suggestions["relevance"]
    assert (suggestion.value, suggestion.score, suggestion.agent) == (2, 0.7, "testset-builder judge")
    assert records[0].fields["query"] == "real query 0" and records[0].metadata["query_id"] == "r0"

    ann, bob = uuid.uuid4(), uuid.uuid4()
    answers = {"r0": {ann: 2, bob: 2}, "r1": {ann: 0}, "r2": {}}
    for record in records:
        for user, value in answers[record.metadata["query_id"]].items():
            record.responses.add(rg.Response("relevance", value, user_id=user, status="submitted"))
    # what dataset.records.to_json() writes leaves out each response's status: a draft would pass for a verdict
    JsonIO.to_json(records, tmp_path / "annotated.json")
    assert main(["review-import", str(tmp_path / "annotated.json"), "--workspace", str(ws.root)]) == 1
    assert "has no status" in capsys.readouterr().err and human_grades(ws) == {}
    flat = GenericIO.to_list(records, flatten=True)  # the flattened export, as JSON lines, keeps it
    (tmp_path / "flat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in flat))
    first = import_file(ws, tmp_path / "flat.jsonl", capsys)
    assert (first["format"], first["grades"], first["new_verdicts"], first["unanswered"]) == ("argilla", 3, 3, 1)
    again = import_file(ws, tmp_path / "flat.jsonl", capsys)
    assert (again["new_verdicts"], again["unchanged"]) == (0, 3)

    records[2].responses.add(rg.Response("relevance", 1, user_id=bob, status="submitted"))
    records[1].responses.add(rg.Response("relevance", 2, user_id=bob, status="draft"))  # a draft: not a verdict
    flat = GenericIO.to_list(records, flatten=True)
    (tmp_path / "flat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in flat))
    third = import_file(ws, tmp_path / "flat.jsonl", capsys)
    assert (third["new_verdicts"], third["unchanged"]) == (1, 3)
    assert human_grades(ws) == {
        ("r0", f"argilla:{ann}"): 2, ("r0", f"argilla:{bob}"): 2, ("r1", f"argilla:{ann}"): 0,
        ("r2", f"argilla:{bob}"): 1,
    }  # fmt: skip
    released = load_release(write_release(ws, "1.0.0").path)
    assert [released.qrels[q] for q in ("r0", "r1", "r2")] == [
        {ws.chunk_ids[0]: 2},
        {ws.chunk_ids[1]: 0},
        {ws.chunk_ids[2]: 1},
    ]
    assert released.manifest["lineage"]["reviewers"] == sorted([f"argilla:{ann}", f"argilla:{bob}"])


def label_studio_export(tasks, annotations):
    """A Label Studio project's JSON export: the imported tasks, given ids, with annotations per query id."""
    exported = []
    for number, task in enumerate(tasks, 1):
        made = []
        for index, (who, grade, when, cancelled) in enumerate(annotations.get(task["data"]["query_id"], [])):
            made.append(
                {
                    "id": number * 10 + index, "completed_by": who, "was_cancelled": cancelled, "lead_time": 4.5,
                    "result": [] if cancelled else [review_tools._choice(grade)], "ground_truth": False,
                    "created_at": when, "updated_at": when, "task": number, "project": 1,
                }
            )  # fmt: skip
        exported.append({"id": number, **task, "annotations": made})
    return exported


def test_a_label_studio_round_trip_brings_grades_back_as_human_verdicts(queued_workspace, tmp_path, capsys):
    require("label_studio_sdk")
    from label_studio_sdk.label_interface import LabelInterface

    ws, out = queued_workspace, tmp_path / "ls"
    assert export(ws, "label-studio", out, capsys=capsys)["items"] == 3
    interface = LabelInterface((out / "label_config.xml").read_text())  # the SDK parses our labelling config
    tasks = json.loads((out / "tasks.json").read_text())
    for task in tasks:
        assert interface.validate_task({"data": task["data"]})
        for prediction in task["predictions"]:
            assert interface.validate_prediction(prediction, return_errors=True) == []
            assert prediction["score"] == 0.7 and prediction["result"][0]["value"] == {"choices": ["2"]}

    earlier, later = "2026-01-01T10:00:00Z", "2026-01-02T10:00:00Z"
    annotated = label_studio_export(
        tasks,
        {
            "r0": [(1, 1, earlier, False), ({"id": 2, "email": "bo@example.com"}, 2, earlier, False)],
            "r1": [(1, 0, earlier, False), (3, None, earlier, True)],  # user 3 skipped it
        },
    )
    for task in annotated:
        for annotation in task["annotations"]:
            assert interface.validate_annotation(annotation)
    (tmp_path / "export.json").write_text(json.dumps(annotated))
    first = import_file(ws, tmp_path / "export.json", capsys)
    assert (first["format"], first["new_verdicts"], first["unanswered"]) == ("label-studio", 3, 1)
    assert first["reviewers"] == ["label-studio:1", "label-studio:bo@example.com"]

    annotated[0]["annotations"][0].update(result=[review_tools._choice(2)], updated_at=later)  # user 1 changed to 2
    (tmp_path / "export.json").write_text(json.dumps(annotated))
    second = import_file(ws, tmp_path / "export.json", capsys)
    assert (second["new_verdicts"], second["unchanged"]) == (1, 2)
    assert human_grades(ws) == {
        ("r0", "label-studio:1"): 2, ("r0", "label-studio:bo@example.com"): 2, ("r1", "label-studio:1"): 0,
    }  # fmt: skip
    seconds = {v.seconds for v, _ in store.effective_verdicts(ws.db)}
    assert seconds == {4.5}
    released = load_release(write_release(ws, "1.0.0").path)
    assert released.qrels["r0"] == {ws.chunk_ids[0]: 2} and released.qrels["r1"] == {ws.chunk_ids[1]: 0}
    assert "r2" not in released.qrels  # nobody graded it: an unverified proposal stays out


def test_a_blind_export_carries_no_llm_grade(queued_workspace, tmp_path, capsys):
    ws = queued_workspace
    assert export(ws, "argilla", tmp_path / "a", "--blind", capsys=capsys)["with_suggestion"] == 0
    assert all(not r["suggestions"] for r in json.loads((tmp_path / "a" / "records.json").read_text()))
    export(ws, "label-studio", tmp_path / "l", "--blind", capsys=capsys)
    assert all("predictions" not in t for t in json.loads((tmp_path / "l" / "tasks.json").read_text()))


def test_pairs_already_graded_enough_are_not_exported_again(queued_workspace, tmp_path, capsys):
    from testset_builder.stages import review

    item = review.next_item(queued_workspace, "ann")
    review.submit(queued_workspace, "ann", item.item_id, "grade", "k", grade=1)
    exported = export(queued_workspace, "label-studio", tmp_path / "l", capsys=capsys)
    assert exported["items"] == 2
    assert export(queued_workspace, "label-studio", tmp_path / "l2", "--overlap", "2", capsys=capsys)["items"] == 3


def grade_record(item_id, value, user="u1", status="submitted", question="relevance"):
    answer = {"value": value, "user_id": user, "status": status}
    return {"id": item_id, "fields": {}, "responses": {question: [{k: v for k, v in answer.items() if v != "-"}]}}


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "the file is empty"),
        ("[1, 2]", "expected a list of records"),
        ('{"a": 1}\nnot json\n', "line 2 is not JSON"),
        (json.dumps([{"something": "else"}]), "cannot tell the format"),
        (json.dumps([grade_record("ITEM0", 3)]), "record 1, annotator 'u1': 3 is not a grade"),
        (json.dumps([grade_record("ITEM0", 1, user=None)]), "a response without a user_id"),
        (json.dumps([grade_record("ITEM0", 1, status="-")]), "record 1: the response of user 'u1' has no status"),
        (json.dumps([grade_record("ITEM0", 1, status="draft")]), "none of its 1 records holds a submitted grade"),
        (json.dumps([grade_record("ITEM0", 1, question="relevant?")]), "was the question renamed"),
        (json.dumps([grade_record("ITEM0", 1), grade_record("ITEM0", 2, user="u" * 80)]), "record 2: annotator 'uuu"),
        (
            json.dumps([grade_record("ITEM0", 1), grade_record("p-<script>", 1, user="u2")]),
            r"1 grades are on items that are not .*'p-<script>' \(record 2 at line 1, annotator 'u2'\)",
        ),
        (
            json.dumps([{"data": {"item_id": "ITEM0"}, "annotations": [{"result": [review_tools._choice(1)]}]}]),
            "without",
        ),
    ],
)
def test_a_bad_annotation_file_is_refused_whole_with_what_is_wrong(queued_workspace, tmp_path, content, message):
    item_id = store.queued_items(queued_workspace.db)[0].item_id
    path = tmp_path / "bad.json"
    path.write_text(content.replace("ITEM0", item_id))
    with pytest.raises(InputError, match=message):
        interchange.import_annotations(queued_workspace, path)
    assert human_grades(queued_workspace) == {}


def test_a_binary_annotation_file_is_refused_and_an_unknown_format_named(queued_workspace, tmp_path, capsys):
    path = tmp_path / "annotations.json"
    path.write_bytes(b"\xff\xfe\x00\x00binary")
    assert main(["review-import", str(path), "--workspace", str(queued_workspace.root)]) != 0
    assert "not UTF-8" in capsys.readouterr().err
    args = [
        "review-export",
        "--format",
        "prodigy",
        "--out",
        str(tmp_path / "x"),
        "--workspace",
        str(queued_workspace.root),
    ]
    assert main(args) != 0
    assert "unknown format 'prodigy'" in capsys.readouterr().err and not (tmp_path / "x").exists()


def test_imported_annotators_carry_the_readable_names_their_tool_knows_them_by(queued_workspace, tmp_path, capsys):
    ws, out = queued_workspace, tmp_path / "ls"
    export(ws, "label-studio", out, capsys=capsys)
    tasks = json.loads((out / "tasks.json").read_text())
    when = "2026-01-01T10:00:00Z"
    annotated = label_studio_export(
        tasks, {"r0": [(7, 1, when, False), (8, 2, when, False)], "r1": [(9, 0, when, False)]}
    )
    (tmp_path / "export.json").write_text(json.dumps(annotated))
    users = [  # Label Studio's /api/users: id and username or email
        {"id": 7, "username": "ann", "email": "ann@example.com"}, {"id": 8, "email": "bob@example.com"},
    ]  # fmt: skip
    (tmp_path / "users.json").write_text(json.dumps(users))
    args = ["review-import", str(tmp_path / "export.json"), "--workspace", str(ws.root), "--json"]
    assert main([*args, "--annotators", str(tmp_path / "users.json")]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["reviewers"] == ["label-studio:9", "label-studio:ann", "label-studio:bob@example.com"]
    annotated[0]["annotations"][0]["result"] = [review_tools._choice(0)]  # ann changed her mind
    annotated[0]["annotations"][0]["updated_at"] = "2026-01-02T10:00:00Z"
    (tmp_path / "export.json").write_text(json.dumps(annotated))
    assert main(args) == 0  # no file this time: the names are kept in the workspace
    again = json.loads(capsys.readouterr().out)
    assert again["reviewers"] == first["reviewers"] and again["new_verdicts"] == 1
    assert human_grades(ws)[("r0", "label-studio:ann")] == 0
    (tmp_path / "late.yaml").write_text(
        "'9': cid\n"
    )  # 9's verdicts are stored under the id: naming them now is refused
    assert main([*args, "--annotators", str(tmp_path / "late.yaml")]) != 0
    assert "would count one person as two" in capsys.readouterr().err
    (tmp_path / "clash.yaml").write_text("'7': someone else\n")
    assert main([*args, "--annotators", str(tmp_path / "clash.yaml")]) != 0
    assert "already named 'ann'" in capsys.readouterr().err
    assert human_grades(ws)[("r0", "label-studio:ann")] == 0 and ("r1", "label-studio:cid") not in human_grades(ws)


@pytest.mark.parametrize(
    "content, message",
    [
        ("[1, 2]", "a list of users"),
        ("{x: [unclosed", "not JSON or YAML"),
        ('"just a name"', "a list of users"),
    ],
)
def test_a_bad_annotators_file_is_refused_with_what_is_wrong(tmp_path, content, message):
    (tmp_path / "users.json").write_text(content)
    with pytest.raises(InputError, match=message):
        review_tools.read_annotators(tmp_path / "users.json")
