"""`init`: a new set's folder with a config that explains every setting, loads back as the config it started from,
and names the key and line of a mistake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testset_builder.cli import main
from testset_builder.config import Config, bundled_config, load_config


@pytest.mark.parametrize("starting_from", ["quickstart", "openai", "anthropic"])
def test_init_writes_a_commented_config_that_loads_back_as_the_one_it_started_from(tmp_path, capsys, starting_from):
    target = tmp_path / "my-set"
    assert main(["init", str(target), "--from", starting_from, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert sorted(summary["files"]) == ["README.md", "queries.jsonl", "testset-builder.yaml"]
    text = (target / "testset-builder.yaml").read_text(encoding="utf-8")
    loaded = load_config(target / "testset-builder.yaml")
    expected = bundled_config(starting_from)
    assert loaded.model_dump(exclude={"workspace"}) == expected.model_dump(exclude={"workspace"})
    assert loaded.workspace == target / "testset"  # beside the config
    for section in Config.model_fields:  # every section is there, and every described key says why
        assert f"\n{section}:" in "\n" + text
    described = [f for f in Config.model_fields["synthesize"].annotation.model_fields.values() if f.description]
    assert all(f"# {f.description.split()[0]}" in text for f in described)
    assert max(len(line) for line in text.splitlines()) <= 120
    queries = [json.loads(line) for line in (target / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    assert queries and all({"_id", "text"} <= q.keys() for q in queries)


def test_init_refuses_to_overwrite_unless_forced(tmp_path, capsys):
    assert main(["init", str(tmp_path)]) == 0
    (tmp_path / "testset-builder.yaml").write_text("workspace: mine\n", encoding="utf-8")
    assert main(["init", str(tmp_path)]) == 1
    assert "already there" in capsys.readouterr().err
    assert (tmp_path / "testset-builder.yaml").read_text(encoding="utf-8") == "workspace: mine\n"
    assert main(["init", str(tmp_path), "--force"]) == 0
    assert "# testset-builder config" in (tmp_path / "testset-builder.yaml").read_text(encoding="utf-8")


def test_a_mistake_in_a_config_names_the_key_and_its_line(tmp_path, capsys):
    assert main(["init", str(tmp_path)]) == 0
    path = tmp_path / "testset-builder.yaml"
    lines = path.read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("questions:"))
    lines[at] = "  questions: many"
    lines.insert(at + 1, "  qestions_typo: 3")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert main(["config", str(path)]) == 1
    error = capsys.readouterr().err
    assert f"synthesize.questions (line {at + 1})" in error
    assert f"synthesize.qestions_typo (line {at + 2})" in error


def test_the_full_config_printed_from_a_file_runs_when_saved_beside_it(tmp_path, capsys, monkeypatch):
    """`config FILE > FOLDER/full.yaml`, run from elsewhere: the printed paths are the file's own (read from its
    folder), so the saved copy finds the same workspace and sources."""
    from testset_builder.config import load_config

    folder = tmp_path / "my-set"
    (tmp_path / "docs").mkdir()
    folder.mkdir()
    (folder / "testset-builder.yaml").write_text("workspace: testset\nrun:\n  sources: [../docs]\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(["config", "my-set/testset-builder.yaml"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("# relative paths are read from the config's folder: save this in my-set/")
    (folder / "full.yaml").write_text(printed, encoding="utf-8")
    saved, original = load_config(folder / "full.yaml"), load_config(folder / "testset-builder.yaml")
    assert Path(saved.workspace).resolve() == Path(original.workspace).resolve() == (folder / "testset").resolve()
    assert [Path(s).resolve() for s in saved.run.sources] == [(tmp_path / "docs").resolve()]
    assert main(["config", str(folder / "testset-builder.yaml")]) == 0  # named by an absolute path: the same values
    again = capsys.readouterr().out
    assert again.split("\n", 1)[1] == printed.split("\n", 1)[1] and "- ../docs" in again


def test_chunk_without_sources_chunks_the_configs_run_sources_as_api_chunk_does(tmp_path, capsys):
    docs = Path(__file__).resolve().parents[1] / "examples" / "corpus"
    config = tmp_path / "testset-builder.yaml"
    config.write_text(f"workspace: ws\nrun:\n  sources: [{docs}]\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["chunk", "--config", str(config), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chunks_added"] > 0
    assert main(["chunk", "--workspace", str(tmp_path / "other")]) == 1  # no config with sources: said, not guessed
    assert "no sources to chunk" in capsys.readouterr().err
