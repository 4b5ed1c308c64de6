"""A stage a user adds in one file: its work and one declaration (a ``Stage`` registered with ``register_stage``).
``run`` calls it in its place, its line is printed with the others, and the plan shows its step; nothing else in
the tool names it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from fake_provider import FakeProvider, stand_in_model

from testset_builder import api, registry
from testset_builder.cli import main
from testset_builder.registry import Stage, register_stage
from testset_builder.stages.plan import Step


@dataclass
class Tally:
    """What the toy stage found: the synthetic questions the run holds so far."""

    questions: int

    def as_dict(self) -> dict:
        return {"questions": self.questions}


def tally(step) -> Tally:
    """How ``run`` calls it: from the stages before it (the workspace is open too, as ``step.workspace``)."""
    made = step.result.stages["synthesize"]
    return Tally(made.made + made.already_made)


TALLY = Stage(
    "tally",
    tally,
    summary=lambda document: f"{document['questions']} questions so far",
    plan=lambda planning: [Step("tally", "count", "judge", "-", note=f"{len(planning.sample)} chunks: no call")],
    after="synthesize",
)


@pytest.fixture
def tally_stage(monkeypatch):
    import testset_builder.llm.roles as roles

    register_stage(TALLY)
    monkeypatch.setattr(roles, "make_provider", lambda config: FakeProvider(stand_in_model()))  # no network
    yield TALLY
    registry.STAGES.pop(TALLY.name, None)


def write_config(tmp_path: Path) -> Path:
    corpus = Path(__file__).resolve().parents[1] / "examples" / "corpus"
    config = tmp_path / "config.yaml"
    config.write_text(
        "generator: {kind: openai, model: gpt-4o-mini, base_url: 'http://127.0.0.1:9/v1', prompt_style: completion}\n"
        f"workspace: {tmp_path / 'ws'}\n"
        "synthesize: {questions: 2, critic: false, mine: false, styles: {natural: 1.0}}\n"
        f"run: {{sources: [{corpus}], baselines: [bm25]}}\n",
        encoding="utf-8",
    )
    return config


def test_a_stage_declared_in_one_file_runs_in_its_place_prints_its_line_and_is_planned(tmp_path, tally_stage, capsys):
    config = write_config(tmp_path)
    assert main(["run", str(config), "--dry-run", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)["plan"]["steps"]
    assert [(s["stage"], s["step"]) for s in planned][:2] == [("synthesize", "questions"), ("tally", "count")]
    assert planned[1]["note"].endswith("chunks: no call")

    assert main(["run", str(config), "--no-review"]) == 0
    printed = [line.split(":", 1)[0] for line in capsys.readouterr().out.splitlines() if ":" in line]
    named = [name for name in printed if name in ("chunk", "synthesize", "tally", "release", "report")]
    assert named == ["chunk", "synthesize", "tally", "release", "report"]  # its line, in its place

    done = api.run(api.load_config(str(config)), review=False)  # a rerun, from Python: the same stages
    assert list(done.stages)[:4] == ["chunk", "plan", "synthesize", "tally"] and done.status == "done"
    assert done.stages["tally"].questions == done.stages["synthesize"].already_made == 2


def test_a_stage_placed_after_one_there_is_not_is_refused_by_name():
    register_stage(Stage("orphan", tally, after="no-such-stage"))
    try:
        with pytest.raises(ValueError, match="'orphan' after 'no-such-stage'"):
            registry.run_stages()
    finally:
        registry.STAGES.pop("orphan", None)
    with pytest.raises(ValueError, match="registered already"):
        register_stage(Stage("synthesize", tally))
