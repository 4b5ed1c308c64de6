"""The guides' Python examples, run as written: guides/python.md's blocks in order on a fresh set (a stand-in model in
place of the embedded one), and guides/extending.md's plugin from Python and from the launcher script it shows; and
the Python guide names every command's function."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fake_provider import FakeProvider, stand_in_model

import testset_builder.llm.roles as roles
from testset_builder.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def test_the_python_guide_and_the_readme_name_the_function_of_every_command():
    from test_commands_over_api import commands

    functions = sorted({name for called in commands().values() for name in called})
    guide = (ROOT / "guides" / "python.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8").split("## From Python", 1)[1].split("\n## ", 1)[0]
    assert [f for f in functions if f"api.{f}(" not in guide] == []
    assert [f for f in functions if f"`{f}`" not in readme] == []


def python_blocks(guide: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (ROOT / "guides" / guide).read_text(encoding="utf-8"), re.S)


def a_fresh_set(folder: Path) -> None:
    """What python.md's examples assume: `init my-set` with the documents under docs/ and the queries in
    queries.jsonl, as the README's tour sets them (six questions, to keep the test short)."""
    assert main(["init", str(folder / "my-set")]) == 0
    shutil.copytree(EXAMPLES / "corpus", folder / "docs")
    texts = [t for t in (EXAMPLES / "queries.txt").read_text(encoding="utf-8").splitlines() if t.strip()]
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"id": f"q{n}", "text": t}) + "\n" for n, t in enumerate(texts, 1)), encoding="utf-8"
    )
    config = folder / "my-set" / "testset-builder.yaml"
    settings = yaml.safe_load(config.read_text(encoding="utf-8"))
    settings["run"].update({"sources": ["../docs"], "queries": "../queries.jsonl"})
    settings["synthesize"]["questions"] = 6
    config.write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")


@pytest.mark.slow
def test_every_example_of_the_python_guide_runs_in_order_on_a_fresh_set(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(roles, "make_provider", lambda config: FakeProvider(stand_in_model()))
    a_fresh_set(tmp_path)
    monkeypatch.chdir(tmp_path)
    names: dict = {}
    for number, block in enumerate(python_blocks("python.md"), 1):
        exec(compile(block, f"guides/python.md, block {number}", "exec"), names)
    assert names["released"].version == "0.1.0" and (tmp_path / names["released"].path).is_dir()
    assert names["release"].version == "0.1.0" and names["release"].qrels
    assert 0 <= names["scored"].metrics["recall@10"]["mean"] <= 1
    assert Path(names["page"].path).exists()


@pytest.mark.slow
def test_the_extending_guides_plugin_works_from_python_and_from_its_launcher_script(tmp_path):
    use, launcher, *plugin = python_blocks("extending.md")
    (tmp_path / "my_plugin.py").write_text("\n\n".join(plugin), encoding="utf-8")
    (tmp_path / "my_testset_builder.py").write_text(launcher, encoding="utf-8")
    shutil.copytree(EXAMPLES / "corpus", tmp_path / "docs")
    (tmp_path / "my-set").mkdir()
    (tmp_path / "my-set" / "testset-builder.yaml").write_text(
        "generator: {kind: echo, model: echo-1}\n"
        "synthesize: {questions: 3, critic: false, mine: false, styles: {natural: 1.0}}\n"
        "run: {sources: [../docs]}\n",
        encoding="utf-8",
    )
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    script = use + (
        "\napi.chunk(config)\nprint(api.synthesize(config).made)\n"
        "from testset_builder.review_actions import extra_actions\nprint([a.name for a in extra_actions('pair')])\n"
        "from testset_builder.export import read_qrels\n"
        f"my_plugin.write_csv_qrels(read_qrels({str(EXAMPLES / 'qrels.tsv')!r}), Path('qrels.csv'))\n"
    )
    used = subprocess.run(
        [sys.executable, "-c", "from pathlib import Path\n" + script],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert used.returncode == 0, used.stderr
    assert used.stdout.splitlines() == ["3", "['flag_garbled']"]  # the echo provider wrote them; the action is there
    scores = []
    for qrels in (tmp_path / "qrels.csv", EXAMPLES / "qrels.tsv"):
        scored = subprocess.run(
            [sys.executable, "my_testset_builder.py", "score", "--qrels", str(qrels), "--run",
             str(EXAMPLES / "bm25.trec"), "-m", "ndcg@10,recall@5", "--json", "--no-ci"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert scored.returncode == 0, scored.stderr
        scores.append(json.loads(scored.stdout)["metrics"])
    assert scores[0] == scores[1]  # the CSV file, recognised by its header, scores as the TSV it was written from
