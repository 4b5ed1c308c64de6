"""The README's five-minute tour, followed literally: each command of its code block, as written, in a fresh folder,
with a stand-in model in place of the embedded one (no network). `run` stops for review; the `serve` line serves
everything that `run` waits for, and the page says when those items are answered; the second `run` releases; `score`
scores a run on the release."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from fake_provider import FakeProvider, stand_in_model

import testset_builder.llm.roles as roles
from testset_builder.cli import main
from testset_builder.llm.local_provider import LocalProvider

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def tour_commands() -> list[str]:
    """The README tour's command lines, their comments cut."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    block = text.split("## The five-minute tour", 1)[1].split("```", 2)[1]
    return [line.split("  #", 1)[0].strip() for line in block.strip().splitlines() if line.strip()]


def edit_as_the_readme_says(comment: str, config: Path) -> None:
    """The `$EDITOR` line's comment (``run: {sources: [../docs], queries: queries.jsonl}``) applied to the config;
    and six questions rather than the default, to keep the test short."""
    settings = yaml.safe_load(config.read_text(encoding="utf-8"))
    settings["run"].update(yaml.safe_load(comment)["run"])
    settings["synthesize"]["questions"] = 6
    config.write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")


def serve(command: str, cwd: Path) -> tuple[subprocess.Popen, str, str]:
    """The `serve` line in a process of its own (on any free port: the tour's 8765 may be taken here); its URL and
    token."""
    args = shlex.split(command)[1:]
    server = subprocess.Popen(
        [sys.executable, "-m", "testset_builder", *args, "--port", "0"],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = server.stdout.readline()
    found = re.search(r"(http://\S+)/\?token=(\S+)", line)
    assert found, f"serve printed no link: {line!r}"
    return server, found.group(1), found.group(2)


def answer_everything_served(base: str, token: str) -> tuple[int, int, str]:
    """A reviewer answering whatever the served queue gives, through its JSON API (a pair: relevant when it shares
    the query's last word; a question: kept); then the progress line the page shows. Returns (pairs, questions,
    that line)."""
    pairs = questions = 0
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        while (served := client.get("/api/next", params={"reviewer": "ann"})).status_code == 200:
            item = served.json()
            verdict = {"item_id": item["item_id"], "reviewer": "ann", "idempotency_key": f"k-{item['item_id']}"}
            if item["kind"] == "question":
                verdict["action"] = "keep_question"
                questions += 1
            else:
                word = item["query"]["text"].lower().split()[-1].strip("?")
                verdict |= {"action": "grade", "grade": int(word in item["chunk"]["text"].lower())}
                pairs += 1
            assert client.post("/api/verdicts", json=verdict).status_code == 201
        stats = client.get("/api/stats").json()
        client.cookies.set("tsb_token", token)  # the page, as the printed link opens it for a reviewer named ann
        client.cookies.set("tsb_reviewer", "ann")
        page = client.get("/review").text
    assert stats["release_waiting"] == 0 and stats["release_status"].startswith("all ")
    progress = re.search(r'<p class="progress" id="progress">(.*?)</p>', page, re.DOTALL)
    return pairs, questions, re.sub(r"<[^>]+>", "", progress.group(1)) if progress else ""


def test_the_readme_tour_followed_literally_reaches_a_release_and_a_score(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    # the embedded model's stand-in, named as it is: its questions get the weak generator's treatment
    embedded = FakeProvider(stand_in_model(), identity="local:stand-in", abilities=LocalProvider.abilities)
    monkeypatch.setattr(roles, "make_provider", lambda config: embedded)
    shutil.copytree(ROOT / "examples" / "corpus", tmp_path / "docs")  # the `../docs` the tour's config names
    commands = tour_commands()
    assert [c.split()[1] if c.startswith("testset-builder") else c.split()[0] for c in commands] == [
        "init", "$EDITOR", "run", "run", "serve", "run", "score",
    ]  # fmt: skip
    init, _, dry_run, first_run, serve_line, second_run, score = commands  # the editor line: its comment below

    assert main(shlex.split(init)[1:]) == 0
    config = tmp_path / "my-set" / "testset-builder.yaml"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    edit_as_the_readme_says(re.search(r"\$EDITOR my-set/testset-builder.yaml\s+# (.*)", readme).group(1), config)
    assert main(shlex.split(dry_run)[1:]) == 0
    capsys.readouterr()

    assert main(shlex.split(first_run)[1:]) == 4  # it stops for review
    said = capsys.readouterr()
    stopped = said.out + said.err
    assert serve_line in stopped  # and names the README's next command, as written
    waiting = re.search(r"(\d+) pairs drawn for review (?:wait|and \d+ synthetic)", stopped)
    # the embedded model's questions: every one waits, since the release holds back those no reviewer checked
    held = re.search(r"(\d+) synthetic questions no reviewer has checked, which the release holds back", stopped)
    assert waiting and held and int(held.group(1)) == 6, stopped

    server, base, token = serve(serve_line, tmp_path)
    try:
        pairs, questions, progress = answer_everything_served(base, token)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert pairs >= int(waiting.group(1))
    assert questions == 6  # the questions the release waits for are served without a flag
    assert "items the release waits for are answered" in progress, progress

    assert main(shlex.split(second_run)[1:]) == 0
    released_run = capsys.readouterr().out
    assert "release 0.1.0" in released_run
    assert "held back" not in released_run  # every question was answered: none is said to wait
    released = tmp_path / "my-set" / "testset" / "releases" / "0.1.0"
    manifest = json.loads((released / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["policy"]["hold_unreviewed"] is None  # unset: held because the generator is weak
    assert manifest["counts"]["checked_by_human"]["unreviewed_held_back"] == 0
    baseline = next((tmp_path / "my-set" / "testset" / "reports" / "runs").glob("bm25-0.1.0.trec"))
    shutil.copy(baseline, tmp_path / "my-retriever.trec")  # the tour's own retriever: the BM25 baseline's run
    assert main(shlex.split(score)[1:]) == 0
    assert "queries scored" in capsys.readouterr().out


def test_after_run_with_a_workspace_of_its_own_the_next_commands_name_that_workspace():
    from testset_builder.cli.pipeline import next_commands

    told = next_commands("my-set/testset-builder.yaml", Path("elsewhere"))
    assert "serve --config my-set/testset-builder.yaml --workspace elsewhere" in told
    assert "run my-set/testset-builder.yaml --workspace elsewhere" in told
    assert "--workspace" not in next_commands("my-set/testset-builder.yaml", None)


def test_off_a_terminal_progress_is_printed_as_lines_a_tenth_of_the_way_apart():
    import io

    from rich.console import Console

    from testset_builder.llm.progress import llm_progress

    log = io.StringIO()
    with llm_progress(Console(file=log, width=200)) as progress:  # a file: not a terminal
        task = progress.add_task("questions (round 1)", total=40, cost=0.0, cached=0)
        for done in range(40):
            progress.update(task, advance=1, cached=done // 2)
    lines = log.getvalue().splitlines()
    assert len(lines) == 10 and lines[-1] == "questions (round 1): 40 of 40 (100%), $0.0000, 19 cached"
    assert all(
        re.fullmatch(r"questions \(round 1\): \d+ of 40 \(\d+%\), \$0\.0000, \d+ cached", line) for line in lines
    )


def test_scores_on_a_few_queries_say_how_few(capsys):
    examples = ROOT / "examples"
    qrels_queries = {line.split()[0] for line in (examples / "qrels.tsv").read_text().splitlines()[1:] if line}
    assert main(["score", "--qrels", str(examples / "qrels.tsv"), "--run", str(examples / "bm25.trec")]) == 0
    assert f"{len(qrels_queries)} queries: too few for a stable figure" in capsys.readouterr().out


def test_a_draw_over_its_budget_says_why():
    from testset_builder.stages.selection import SelectionSummary

    summary = SelectionSummary(
        round=1, considered=112, reconsidered=0, drawn=22, budget=20.0, uniform_share=0.2, smallest_probability=0.01,
        model="prior", take_all=8, take_all_queries=4, real_queries_without_likely=0, sampled=14, sample_budget=12.0,
        take_all_share=0.5, take_all_per_query=3, doubted_questions_waiting=0, why="",
    )  # fmt: skip
    assert summary.over_budget().startswith("22 drawn for a budget of 20: 8 taken for sure")
    assert "took 14 where 12 were expected" in summary.over_budget()
    assert SelectionSummary(**{**summary.as_dict(), "drawn": 20, "sampled": 12}).over_budget() == ""
