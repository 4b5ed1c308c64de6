"""Imports ordered by time: each imported grade keeps the time its tool gives it, and a grade older than the one its
annotator stands by (imported before, or given on the page) never replaces it, so importing an older export after a
newer one changes nothing, and the import says how many were older. Errors on an unknown item name the task, its
line and the annotator. Files are built with the tools' own SDKs where they are installed."""

from __future__ import annotations

import json
import uuid

import pytest
from conftest import require
from test_interchange import export, human_grades, label_studio_export

from testset_builder.cli import main
from testset_builder.errors import InputError
from testset_builder.stages import review
from testset_builder.stages.review import interchange

DAY1, DAY2 = "2026-01-01T10:00:00Z", "2026-01-02T10:00:00.5+00:00"


def labelled(ws, tmp_path, capsys, grade_by_4, when, name):
    """A Label Studio export, checked by the SDK's own validator, in which annotator 4 graded r0 and annotator 5
    graded r1 (once, on day 1)."""
    require("label_studio_sdk")
    from label_studio_sdk.label_interface import LabelInterface

    out = tmp_path / "ls"
    export(ws, "label-studio", out, capsys=capsys)
    interface = LabelInterface((out / "label_config.xml").read_text())
    tasks = json.loads((out / "tasks.json").read_text())
    annotated = label_studio_export(tasks, {"r0": [(4, grade_by_4, when, False)], "r1": [(5, 0, DAY1, False)]})
    for task in annotated:
        for annotation in task["annotations"]:
            assert interface.validate_annotation(annotation)
    path = tmp_path / name
    path.write_text(json.dumps(annotated, indent=2))
    return path


def run_import(ws, path, capsys) -> tuple[dict, str]:
    assert main(["review-import", str(path), "--workspace", str(ws.root), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert main(["review-import", str(path), "--workspace", str(ws.root)]) == 0
    return summary, capsys.readouterr().out


def test_an_older_label_studio_export_after_a_newer_one_changes_nothing(queued_workspace, tmp_path, capsys):
    ws = queued_workspace
    first = labelled(ws, tmp_path, capsys, 1, DAY1, "monday.json")
    later = labelled(ws, tmp_path, capsys, 2, DAY2, "tuesday.json")
    assert run_import(ws, first, capsys)[0]["new_verdicts"] == 2
    assert human_grades(ws)[("r0", "label-studio:4")] == 1
    summary, _ = run_import(ws, later, capsys)
    assert (summary["new_verdicts"], summary["older"]) == (1, 0)
    assert human_grades(ws)[("r0", "label-studio:4")] == 2
    rollback, said = run_import(ws, first, capsys)
    assert (rollback["new_verdicts"], rollback["older"], rollback["unchanged"]) == (0, 1, 1)
    assert human_grades(ws)[("r0", "label-studio:4")] == 2  # not rolled back to 1
    said = " ".join(said.split())
    assert "0 new verdicts" in said and "1 older than the grade already stored (kept out)" in said


def test_an_imported_grade_older_than_one_given_on_the_page_is_kept_out(queued_workspace, tmp_path, capsys):
    ws = queued_workspace
    review.keep_overlap(ws, 2)  # r0 stays in the export after one grade
    item = review.next_item(ws, "label-studio:4")  # the same person, on the page, after the export was made
    assert item.query["query_id"] == "r0"
    review.submit(ws, "label-studio:4", item.item_id, "grade", "on-page", grade=0)
    summary, _ = run_import(ws, labelled(ws, tmp_path, capsys, 2, DAY1, "old.json"), capsys)
    assert summary["older"] == 1 and human_grades(ws)[("r0", "label-studio:4")] == 0


def argilla_records(ws, tmp_path, capsys, value, when):
    """Records built with the Argilla SDK (one submitted response by one user on r0), nested as
    ``Record.to_dict`` writes them, each response with the status and ``updated_at`` Argilla's API gives it."""
    rg = require("argilla")
    out = tmp_path / "argilla"
    export(ws, "argilla", out, capsys=capsys)
    records = [rg.Record.from_dict(r) for r in json.loads((out / "records.json").read_text())]
    user = uuid.UUID(int=7)
    records[0].responses.add(rg.Response("relevance", value, user_id=user, status="submitted"))
    nested = [r.to_dict() for r in records]
    for answer in nested[0]["responses"]["relevance"]:
        answer.update(status="submitted", updated_at=when)
    path = tmp_path / f"argilla-{value}.json"
    path.write_text(json.dumps(nested))
    return path, f"argilla:{user}"


def test_an_older_argilla_export_after_a_newer_one_changes_nothing(queued_workspace, tmp_path, capsys):
    ws = queued_workspace
    older, who = argilla_records(ws, tmp_path, capsys, 0, DAY1)
    newer, _ = argilla_records(ws, tmp_path, capsys, 2, DAY2)
    assert run_import(ws, newer, capsys)[0]["new_verdicts"] == 1
    summary, _ = run_import(ws, older, capsys)
    assert (summary["new_verdicts"], summary["older"]) == (0, 1)
    assert human_grades(ws) == {("r0", who): 2}


def test_an_unknown_item_is_named_with_its_task_line_and_annotator(queued_workspace, tmp_path, capsys):
    ws = queued_workspace
    path = labelled(ws, tmp_path, capsys, 1, DAY1, "export.json")
    tasks = json.loads(path.read_text())
    tasks[1]["data"]["item_id"] = "p-not-here"
    path.write_text(json.dumps(tasks, indent=2))
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if text == "  {" and n > 2)
    with pytest.raises(InputError, match=rf"'p-not-here' \(task 2 at line {line}, annotator '5'\)"):
        interchange.import_annotations(ws, path)
    assert human_grades(ws) == {}


def test_an_export_time_that_is_not_a_time_is_refused_with_where_it_is(queued_workspace, tmp_path, capsys):
    path = labelled(queued_workspace, tmp_path, capsys, 1, "yesterday", "export.json")
    with pytest.raises(InputError, match="task 1, annotator '4': 'yesterday' is not an ISO 8601 time"):
        interchange.import_annotations(queued_workspace, path)
