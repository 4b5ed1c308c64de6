"""`run`: init, then the whole job from one config with the embedded local model; it stops for review (exit 4), a
reviewer answers through the review API, and the second run releases and writes a report that opens in Chromium."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import TEST_OUTPUT, answer_drawn_through_api, answer_questions_through_api

from testset_builder.cli import main

pytestmark = pytest.mark.slow
DOCS = Path(__file__).resolve().parents[1] / "examples" / "corpus"


def run(config: Path, *flags: str) -> tuple[int, dict]:
    """`testset-builder run CONFIG --json` in its own process (the browser's event loop holds this one)."""
    done = subprocess.run(
        [sys.executable, "-m", "testset_builder", "run", str(config), "--json", *flags], capture_output=True, text=True
    )
    return done.returncode, json.loads(done.stdout)


def within_half_again(planned: float, spent: float) -> bool:
    return spent > 0 and 1 / 1.5 <= planned / spent <= 1.5


def by_last_word(item: dict) -> int:
    """A reviewer's rule here: relevant when the chunk holds the query's last word."""
    return int(item["query"]["text"].lower().split()[-1].strip("?") in item["chunk"]["text"].lower())


def test_init_then_run_stops_for_review_and_the_second_run_releases_and_reports(tmp_path, browser):
    target = tmp_path / "my-set"
    assert main(["init", str(target)]) == 0
    config = target / "testset-builder.yaml"
    settings = yaml.safe_load(config.read_text(encoding="utf-8"))
    settings["run"].update(sources=[str(DOCS)], queries="queries.jsonl", review_budget=6)
    settings["synthesize"]["questions"] = 6  # the demo's count: the plan is checked against it
    config.write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")
    (target / "queries.jsonl").write_text(
        '{"_id": "r1", "text": "how is ndcg computed"}\n{"_id": "r2", "text": "what does recall at k count"}\n',
        encoding="utf-8",
    )
    code, dry = run(config, "--dry-run")
    assert code == 0 and not (target / "testset").exists()  # a dry run writes nothing
    code, first = run(config)
    assert code == 4
    assert first["waiting"] > 0 and "testset-builder serve" in first["message"] and "--config" in first["message"]
    assert [s for s in first["stages"]] == ["chunk", "plan", "synthesize", "propose", "select"]
    made = first["stages"]["synthesize"]["result"]
    assert made["made"] == 6
    # the plan, made before anything was chunked, is within half again of what the local model spent
    questions = dry["plan"]["steps"][0]
    assert questions["step"] == "questions" and questions["cost_usd"] == 0
    for figure in ("calls", "input_tokens", "output_tokens"):
        assert within_half_again(questions[figure], made[figure]), (figure, questions, made)
    assert "not measured on this machine yet" in dry["plan"]["timing"][0]
    # and what the run will stop for: the drawn pairs and each question the embedded model writes
    assert dry["plan"]["review"].endswith(
        "6 synthetic questions (release.hold_unreviewed: a weak generator writes them)"
    )
    assert not (target / "testset" / "releases").exists()  # nothing released while review is pending

    assert answer_drawn_through_api(target / "testset", by_last_word) == first["waiting"]
    # the embedded generator's questions wait for a human too: the release holds back those no reviewer checked
    assert first["doubted"] == made["made"] and "which the release holds back" in first["message"]
    assert answer_questions_through_api(target / "testset") == made["made"]
    code, second = run(config)
    assert code == 0
    assert second["release"] == "0.1.0" and second["stages"]["release"]["result"]["new"]
    assert second["stages"]["synthesize"]["result"]["calls"] == 0  # the rerun pays for nothing twice
    refit = second["stages"]["estimate"]["result"]  # the verdicts refit the estimate before the release carries it
    assert refit["verdicts"] == first["waiting"] and refit["validation"]["labels"] == first["waiting"]
    replanned = second["stages"]["plan"]["result"]
    assert replanned["paid_calls"] == 0 and replanned["seconds"] == 0  # and its plan said so
    assert "measured on this machine," in replanned["timing"][0]  # the first run's calls timed the model
    manifest = json.loads((target / "testset" / "releases" / "0.1.0" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["counts"]["qrels_by_origin"]["human"] == first["waiting"]
    assert manifest["counts"]["estimates"]["drawn_answered"] == first["waiting"]

    page_file = Path(second["report"])
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto(page_file.as_uri())
    assert page.locator("figure[data-plot] svg").count() >= 6 and page.locator("h3").count() >= 1  # runs scored
    TEST_OUTPUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(TEST_OUTPUT / "run-report.png"), full_page=True)
    page.close()
    assert errors == []

    code, third = run(config)  # once more: nothing changed, no new release
    assert code == 0
    assert third["release"] == "0.1.0" and not third["stages"]["release"]["result"]["new"]
