"""export-chunks gives an app the workspace's chunk ids and texts before any release, so the app indexes them with
the tool's ids: its logs then import by id, and its retriever scores through the adapters by id."""

from __future__ import annotations

import csv
import io
import json

from testset_builder import api
from testset_builder.cli import main
from testset_builder.config import LogsConfig
from testset_builder.stages.logs.importer import import_logs
from testset_builder.store import rows


def test_every_live_chunk_is_written_once_with_its_id_and_text_as_jsonl_or_csv(docs_workspace, tmp_path, capsys):
    live = {chunk_id for chunk_id, _, _ in rows.live_chunk_rows(docs_workspace.db)}
    stored = {c.chunk_id: c for c in rows.iter_chunks(docs_workspace.db) if c.chunk_id in live}
    root = str(docs_workspace.root)
    assert main(["export-chunks", "--workspace", root, "--out", str(tmp_path / "chunks.jsonl"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "chunks": len(stored), "out": str(tmp_path / "chunks.jsonl"), "format": "jsonl"
    }  # fmt: skip
    lines = [json.loads(line) for line in (tmp_path / "chunks.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {row["chunk_id"]: (row["doc_id"], row["text"]) for row in lines} == {
        c.chunk_id: (c.doc_id, c.text) for c in stored.values()
    }
    assert len(lines) == len(stored)
    assert main(["export-chunks", "--workspace", root, "--format", "csv"]) == 0  # to standard output
    table = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [(r["chunk_id"], r["text"]) for r in table] == [(row["chunk_id"], row["text"]) for row in lines]


def test_a_wrong_format_or_an_unwritable_file_is_refused_and_writes_nothing(docs_workspace, tmp_path, capsys):
    root = str(docs_workspace.root)
    assert main(["export-chunks", "--workspace", root, "--format", "xml", "--json"]) == 1
    assert "jsonl, csv" in json.loads(capsys.readouterr().out)["error"]
    missing = tmp_path / "no-such-folder" / "chunks.jsonl"
    assert main(["export-chunks", "--workspace", root, "--out", str(missing), "--json"]) == 1
    assert "cannot write" in json.loads(capsys.readouterr().out)["error"] and not missing.parent.exists()


def test_an_app_that_indexed_the_exported_chunks_logs_results_that_import_by_id(docs_workspace, tmp_path):
    """The app keeps each chunk's id in the metadata of what it indexed (as LangChain's OpenInference spans write
    it, ``document.metadata`` JSON text) and shows its own rendering: every result imports by that id."""
    buffer = io.StringIO()
    api.export_chunks(api.load_config(), buffer, workspace=docs_workspace)
    indexed = [json.loads(line) for line in buffer.getvalue().splitlines()]
    log = tmp_path / "app.jsonl"
    with log.open("w", encoding="utf-8") as handle:
        for n in range(5):
            shown = indexed[n : n + 3]
            retrieved = [{"text": f"rendered {c['chunk_id']}", "chunk_id": c["chunk_id"]} for c in shown]
            handle.write(json.dumps({"query": f"question {n}", "retrieved": retrieved}) + "\n")
    settings = LogsConfig.model_validate({"fields": {"retrieved_id": "chunk_id"}})
    summary = import_logs(docs_workspace, log, settings)
    assert (summary.records, summary.by_id, summary.unknown_ids, summary.unmatched_texts) == (5, 15, 0, 0)
