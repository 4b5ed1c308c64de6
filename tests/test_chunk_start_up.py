"""`chunk` starts without the layers it does not use: the config checks its ``logs.format`` against the built-in log
formats' names without importing the modules that register them (the export layer, Arrow), and hashing text needs
no Arrow. The names it knows are those the modules register."""

from __future__ import annotations

import json

from conftest import imported_by

from testset_builder import registry

NOT_FOR_CHUNKING = ("pyarrow", "pandas", "scipy", "torch", "testset_builder.export", "testset_builder.tables")


def test_a_chunk_process_imports_neither_the_export_layer_nor_arrow(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "docs.jsonl").write_text(json.dumps({"_id": "d1", "text": "Pooled judgments at depth ten."}) + "\n")
    code, modules = imported_by(["chunk", str(corpus), "--workspace", str(tmp_path / "ws"), "--json"])
    assert code == 0
    assert "testset_builder.corpus.ingest" in modules  # it did chunk
    assert [m for m in modules if any(m == n or m.startswith(f"{n}.") for n in NOT_FOR_CHUNKING)] == []


def test_the_built_in_log_format_names_are_those_their_modules_register():
    registry.load_built_in_formats()
    registered = {}
    for fmt in registry.LOG_FORMATS.values():
        if fmt.read.__module__.startswith("testset_builder."):
            registered.update({name: fmt.name for name in (fmt.name, *fmt.aliases)})
    assert registered == registry.BUILT_IN_LOG_FORMATS
