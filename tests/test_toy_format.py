"""A file format added in one file: CSV qrels (a header, then query-id,corpus-id,score), registered with its reader,
writer and how to recognise a file of it. `score --qrels` reads such a file by itself, and `export --format csv`
writes a release in it; both go through the one registry every built-in format is in. A production log's format is
added the same way: `import-logs --format` and the config's `logs.format` take it; and an annotation tool's files:
`review-export --format` writes them, `review-import` recognises and reads them back as verdicts."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from testset_builder import registry
from testset_builder.cli import main
from testset_builder.errors import InputError
from testset_builder.export import (
    LOG_FORMATS,
    RELEASE_EXPORTS,
    REVIEW_FORMATS,
    LogFormat,
    ReleaseExport,
    ReviewFormat,
    TableFormat,
    read_qrels,
    register_log_format,
    register_qrels_format,
    register_release_export,
    register_review_format,
)
from testset_builder.tables import Qrels

HEADER = "query-id,corpus-id,score"


def read_csv_qrels(path: Path) -> Qrels:
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle))
    if not rows or ",".join(rows[0]) != HEADER:
        raise InputError(f"a CSV qrels file starts with the header {HEADER}", path=path)
    graded: dict[str, dict[str, int]] = {}
    for number, row in enumerate(rows[1:], 2):
        if len(row) != 3 or not row[2].lstrip("-").isdigit():
            raise InputError("expected query-id,corpus-id,score", path=path, line=number)
        graded.setdefault(row[0], {})[row[1]] = int(row[2])
    return Qrels.from_dict(graded)


def write_csv_qrels(qrels: Qrels, path: Path) -> None:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER.split(","))
        writer.writerows(qrels.sorted_rows())


@pytest.fixture
def csv_format():
    register_qrels_format(
        TableFormat("csv", read_csv_qrels, write_csv_qrels, lambda path, line: line.strip() == HEADER, "CSV")
    )
    register_release_export(
        ReleaseExport("csv", lambda release, out: write_csv_qrels(release.qrels_table(), out / "qrels.csv"), "CSV")
    )
    yield
    registry.QRELS.pop("csv", None)
    RELEASE_EXPORTS.pop("csv", None)


def test_a_format_registered_in_one_file_is_read_by_itself_and_written_by_export(tmp_path, csv_format, capsys):
    examples = Path(__file__).resolve().parents[1] / "examples"
    reference = read_qrels(examples / "qrels.tsv")
    write_csv_qrels(reference, tmp_path / "qrels.csv")
    assert read_qrels(tmp_path / "qrels.csv").to_dict() == reference.to_dict()  # recognised by its header
    metrics = "recall@5,ndcg@10,mrr"
    assert main(["score", "--qrels", str(tmp_path / "qrels.csv"), "--run", str(examples / "bm25.trec"), "-m",
                 metrics, "--json", "--no-ci"]) == 0  # fmt: skip
    from_csv = json.loads(capsys.readouterr().out)
    assert main(["score", "--qrels", str(examples / "qrels.tsv"), "--run", str(examples / "bm25.trec"), "-m",
                 metrics, "--json", "--no-ci"]) == 0  # fmt: skip
    assert from_csv["metrics"] == json.loads(capsys.readouterr().out)["metrics"]


def test_a_release_exports_in_a_registered_format(released_workspace, tmp_path, csv_format, capsys):
    root, version, qrels = released_workspace
    assert main(["export", "--version", version, "--format", "csv", "--out", str(tmp_path / "out"),
                 "--workspace", str(root), "--json"]) == 0  # fmt: skip
    written = read_qrels(tmp_path / "out" / "qrels.csv")
    assert written.to_dict() == qrels and qrels  # the release's labels, in the new format
    assert main(["export", "--version", version, "--format", "xml", "--out", str(tmp_path / "x"),
                 "--workspace", str(root)]) == 1  # fmt: skip
    assert "csv" in capsys.readouterr().err  # the refusal lists every format there is, the added one too


@pytest.fixture
def released_workspace(tmp_path, capsys):
    from testset_builder.records import Judgment, JudgmentSource, JudgmentStatus, Query, QueryOrigin
    from testset_builder.stages.release import write_release
    from testset_builder.store import open_workspace, rows

    docs = Path(__file__).resolve().parents[1] / "examples" / "corpus"
    assert main(["chunk", str(docs), "--workspace", str(tmp_path / "ws"), "--json"]) == 0
    capsys.readouterr()
    with open_workspace(tmp_path / "ws") as ws:
        chunks = [c for c, *_ in rows.live_chunk_rows(ws.db)][:3]
        with ws.transaction() as db:
            rows.put_queries(db, [Query(query_id="q1", text="how is ndcg computed", origin=QueryOrigin.real)])
            rows.add_judgments(db, [
                Judgment(judgment_id=f"j{n}", query_id="q1", chunk_id=c, grade=2 - n, source=JudgmentSource.human,
                         reviewer="ann", status=JudgmentStatus.final)
                for n, c in enumerate(chunks)
            ])  # fmt: skip
        write_release(ws, "1.0.0")
    return tmp_path / "ws", "1.0.0", {"q1": {c: 2 - n for n, c in enumerate(chunks)}}


def read_tab_log(path: Path, fields):
    """A toy log: one request a line, ``query<TAB>chunk id,chunk id,...`` (the ids ranked), nothing else."""
    from testset_builder.export.logs import LogRecord, Retrieved, Unreadable

    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        query, tab, ids = line.partition("\t")
        if not tab or not query.strip():
            yield Unreadable(number, "expected query<TAB>ids")
            continue
        ranked = [Retrieved(rank=r, chunk_id=c) for r, c in enumerate(filter(None, ids.split(",")), 1)]
        yield LogRecord(line=number, query=query.strip(), retrieved=ranked)


@pytest.fixture
def tab_log_format():
    register_log_format(LogFormat("tab", read_tab_log, "query<TAB>ids"))
    yield
    LOG_FORMATS.pop("tab", None)


def test_a_log_format_registered_in_one_file_is_imported_by_import_logs(tmp_path, tab_log_format, capsys):
    from testset_builder.config import LogsConfig
    from testset_builder.store import logs as stored_logs
    from testset_builder.store import open_workspace, rows

    docs = Path(__file__).resolve().parents[1] / "examples" / "corpus"
    assert main(["chunk", str(docs), "--workspace", str(tmp_path / "ws"), "--json"]) == 0
    with open_workspace(tmp_path / "ws") as ws:
        chunks = [c for c, *_ in rows.live_chunk_rows(ws.db)][:2]
    log = tmp_path / "requests.tab"
    log.write_text(f"how is ndcg computed\t{chunks[0]},{chunks[1]}\nno tab here\nwhat is recall\t{chunks[1]}\n",
                   encoding="utf-8")  # fmt: skip
    capsys.readouterr()
    assert main(["import-logs", str(log), "--format", "tab", "--workspace", str(tmp_path / "ws"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["records"] == 2 and summary["unreadable"] == 1
    with open_workspace(tmp_path / "ws") as ws:
        texts = {q["query_id"]: rows.get_query(ws.db, q["query_id"]).text for q in stored_logs.logged_queries(ws.db)}
        retrieved = {texts[q]: [c for _, c, _ in ranked] for q, ranked in stored_logs.production_run(ws.db).items()}
    assert retrieved == {"how is ndcg computed": chunks, "what is recall": chunks[1:]}
    assert LogsConfig(format="tab").format == "tab"  # the config takes it too
    with pytest.raises(ValueError, match="tab"):  # and an unknown one is refused, naming the registered ones
        LogsConfig(format="xml")


def read_sheet(records: list[dict]):
    """A toy annotation tool's export: one record a grade, ``{"sheet_item", "annotator", "grade"}`` (no grade yet:
    unanswered)."""
    from testset_builder.export.review_tools import ImportedGrade, named_annotator

    grades = [
        ImportedGrade(r["sheet_item"], named_annotator("sheet", r["annotator"], f"row {n}"), int(r["grade"]))
        for n, r in enumerate(records, 1)
        if r.get("grade") is not None
    ]
    return grades, sum(r.get("grade") is None for r in records)


@pytest.fixture
def sheet_format():
    register_review_format(
        ReviewFormat(
            "sheet",
            lambda pairs, suggestions: {"sheet.json": [{"sheet_item": p.item_id, "query": p.query} for p in pairs]},
            read_sheet,
            lambda record: "sheet_item" in record,
            "a toy annotation sheet",
        )
    )
    yield
    REVIEW_FORMATS.pop("sheet", None)


def test_a_review_format_registered_in_one_file_is_exported_and_imported_as_verdicts(
    queued_workspace, tmp_path, sheet_format, capsys
):
    from testset_builder.records import JudgmentSource
    from testset_builder.store import rows

    ws = queued_workspace
    assert main(["review-export", "--format", "sheet", "--out", str(tmp_path / "out"), "--workspace", str(ws.root),
                 "--json"]) == 0  # fmt: skip
    assert json.loads(capsys.readouterr().out)["items"] == 3  # the three pending pairs
    sheet = json.loads((tmp_path / "out" / "sheet.json").read_text(encoding="utf-8"))
    answered = [{**row, "annotator": "kim", "grade": n % 3} for n, row in enumerate(sheet)]
    answered[-1]["grade"] = None
    (tmp_path / "answered.json").write_text(json.dumps(answered), encoding="utf-8")
    assert main(["review-import", str(tmp_path / "answered.json"), "--workspace", str(ws.root), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["format"] == "sheet" and summary["new_verdicts"] == 2 and summary["unanswered"] == 1
    humans = [j for j in rows.iter_judgments(ws.db) if j.source is JudgmentSource.human]
    assert sorted((j.reviewer, j.grade) for j in humans) == [("sheet:kim", 0), ("sheet:kim", 1)]
