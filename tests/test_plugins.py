"""A plugin installed as a package works from the command line: its distribution names a module under the
``testset_builder`` entry-point group (as simonw/llm finds its plugins), the CLI imports it when it starts, and the
provider kind, log format and stage it registers are there for every command. A plugin that fails to load is named
in a one-line error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "examples" / "corpus"

PLUGIN = '''
"""A toy plugin: a provider kind, a log format and a stage, registered when imported."""

from dataclasses import dataclass

from testset_builder.llm.types import Completion, Usage
from testset_builder.registry import Abilities, LogFormat, Stage, register_log_format, register_provider, register_stage


class Echo:
    """A chat model that asks about the passage's first long words: no network, no key."""

    supports_completion = False
    prompt_style = "chat"
    supports_logprobs = False
    abilities = Abilities()

    def __init__(self, model):
        self.identity = f"echo:{model}"

    @classmethod
    def from_config(cls, config):
        return cls(config.model)

    async def complete(self, request):
        passage = request.messages[-1].content.split("Passage: ", 1)[-1]
        words = list(dict.fromkeys(w.lower() for w in passage.split() if w.isalpha() and len(w) > 4))
        first, second = words[request.seed % len(words)], words[(request.seed + 1) % len(words)]
        text = f"Query: how are {first} and {second} related?"
        text += f"\\nEvidence: {' '.join(passage.split()[:8])}"
        return Completion(text=text, model=request.model, usage=Usage(input_tokens=50, output_tokens=20))

    async def aclose(self):
        pass


def read_tab(path, fields):
    from testset_builder.export.logs import LogRecord, Retrieved

    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        query, _, ids = line.partition("\\t")
        ranked = [Retrieved(rank=r, chunk_id=c) for r, c in enumerate(filter(None, ids.split(",")), 1)]
        yield LogRecord(line=number, query=query.strip(), retrieved=ranked)


@dataclass
class Tally:
    questions: int

    def as_dict(self):
        return {"questions": self.questions}


def tally(step):
    made = step.result.stages["synthesize"]
    return Tally(made.made + made.already_made)


def tally_plan(planning):
    from testset_builder.stages.plan import Step

    return [Step("tally", "count", "judge", "-", note="no call")]


register_provider("echo", Echo)
register_log_format(LogFormat("tab", read_tab, "query<TAB>ids"))
register_stage(Stage("tally", tally, lambda d: f"{d['questions']} questions so far", tally_plan, after="synthesize"))
'''


def install(site: Path, distribution: str, module: str, source: str) -> None:
    """A package as pip leaves it: the module, and a dist-info whose entry_points.txt names it in our group."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{module}.py").write_text(source, encoding="utf-8")
    info = site / f"{distribution}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.1\n", encoding="utf-8")
    (info / "entry_points.txt").write_text(f"[testset_builder]\n{module} = {module}\n", encoding="utf-8")


def cli(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}
    return subprocess.run(
        [sys.executable, "-m", "testset_builder", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def test_a_plugin_installed_as_a_package_adds_a_provider_a_log_format_and_a_stage_to_the_cli(tmp_path):
    site = tmp_path / "site-packages"
    install(site, "toy-plugin", "toy_plugin", PLUGIN)
    (tmp_path / "echo.yaml").write_text(
        "generator: {kind: echo, model: echo-1}\n"
        "synthesize: {questions: 2, critic: false, mine: false, styles: {natural: 1.0}}\n"
        f"run: {{sources: [{DOCS}]}}\n",
        encoding="utf-8",
    )
    planned = cli(site, tmp_path, "run", "echo.yaml", "--dry-run", "--json")
    assert planned.returncode == 0, planned.stderr
    steps = [(s["stage"], s["step"], s["model"]) for s in json.loads(planned.stdout)["plan"]["steps"]]
    assert steps[:2] == [("synthesize", "questions", "echo-1"), ("tally", "count", "-")]  # its provider, its stage

    assert cli(site, tmp_path, "chunk", str(DOCS), "--workspace", "ws", "--json").returncode == 0
    made = cli(site, tmp_path, "synthesize", "--config", "echo.yaml", "--workspace", "ws", "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["made"] == 2

    (tmp_path / "requests.tab").write_text("how is ndcg computed\t\nwhat is recall\t\n", encoding="utf-8")
    imported = cli(site, tmp_path, "import-logs", "requests.tab", "--format", "tab", "--workspace", "ws", "--json")
    assert imported.returncode == 0, imported.stderr
    assert json.loads(imported.stdout)["records"] == 2

    without = cli(tmp_path / "nothing-installed", tmp_path, "run", "echo.yaml", "--dry-run", "--json")
    assert without.returncode == 1 and "unknown provider kind 'echo'" in without.stderr  # the plugin did that


def test_a_plugin_that_fails_to_load_is_named_in_a_one_line_error(tmp_path):
    site = tmp_path / "site-packages"
    install(site, "broken-plugin", "broken_plugin", "raise RuntimeError('needs a setting it does not have')\n")
    done = cli(site, tmp_path, "config", "quickstart", "--json")
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"] == (
        "plugin 'broken_plugin' (broken_plugin) failed to load: RuntimeError: needs a setting it does not have; fix "
        "it or uninstall its package"
    )
    assert "Traceback" not in done.stderr


RUN_FORMAT_PLUGIN = '''
"""A toy plugin: runs as ``qid,docid,score`` lines, recognised by their commas."""

from testset_builder.registry import TableFormat, register_run_format
from testset_builder.tables import Run


def read_commas(path, name=None):
    scored = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        query, chunk, value = line.split(",")
        scored.setdefault(query, {})[chunk] = float(value)
    return Run.from_dict(scored, name=name or path.stem)


register_run_format(TableFormat("commas", read_commas, detect=lambda path, line: line.count(",") == 2))
'''


def test_a_plugins_run_format_is_found_by_a_plain_score_line(tmp_path):
    site = tmp_path / "site-packages"
    install(site, "commas-plugin", "commas_plugin", RUN_FORMAT_PLUGIN)
    (tmp_path / "qrels.trec").write_text("q1 0 d1 1\nq2 0 d2 1\n", encoding="utf-8")
    (tmp_path / "run.csv").write_text("q1,d1,0.9\nq1,d2,0.5\nq2,d1,0.8\nq2,d2,0.4\n", encoding="utf-8")
    done = cli(site, tmp_path, "score", "--qrels", "qrels.trec", "--run", "run.csv", "--metrics", "mrr", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["metrics"]["mrr"]["mean"] == (1 + 1 / 2) / 2  # q1's d1 first, q2's d2 second

    without = cli(tmp_path / "nothing-installed", tmp_path, "score", "--qrels", "qrels.trec", "--run", "run.csv")
    assert without.returncode == 1 and "cannot tell the run format" in without.stderr
