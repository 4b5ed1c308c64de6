"""The command line: tables for people, JSON for scripts, per-query CSV, and exit codes scripts can trust."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES

from testset_builder.cli import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK, main
from testset_builder.export import write_beir_qrels, write_trec_run
from testset_builder.tables import Qrels, Run

QRELS = str(EXAMPLES / "qrels.tsv")
BM25 = str(EXAMPLES / "bm25.trec")
DENSE = str(EXAMPLES / "dense.trec")


def run_cli(capsys, *args):
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_score_prints_a_table_with_the_means_and_a_query_summary(capsys):
    code, out, _ = run_cli(capsys, "score", "--qrels", QRELS, "--run", BM25, "--metrics", "recall@5,ndcg@5,mrr")
    assert code == EXIT_OK
    assert "recall@5" in out and "0.8667" in out and "0.6997" in out and "0.6500" in out
    assert "5 queries scored" in out
    header = next(line for line in out.splitlines() if "metric" in line)
    assert [c.strip() for c in header.strip("┃│ ").split("┃")] == ["metric", "mean", "95% CI"]
    for metric in ("recall@5", "ndcg@5", "mrr"):  # every row has its interval
        row = next(line for line in out.splitlines() if f" {metric} " in line)
        assert re.search(r"\[\d\.\d{4}, \d\.\d{4}\]", row), row


def test_score_json_is_machine_readable_with_intervals(capsys):
    code, out, _ = run_cli(
        capsys, "score", "--qrels", QRELS, "--run", BM25, "--metrics", "precision@10,hit_rate@5", "--json"
    )
    assert code == EXIT_OK
    report = json.loads(out)
    assert report["run"] == "bm25"
    assert report["metrics"]["precision@10"]["mean"] == pytest.approx(0.26)
    assert report["metrics"]["precision@10"]["ci_low"] <= 0.26 <= report["metrics"]["precision@10"]["ci_high"]
    assert report["queries"] == {
        "evaluated_queries": 5,
        "qrels_queries_without_run": 0,
        "qrels_queries_without_run_ids": [],
        "dropped_run_queries": 0,
        "queries_without_relevant": 0,
    }


def test_score_writes_per_query_values_to_csv(capsys, tmp_path):
    path = tmp_path / "per_query.csv"
    code, _, _ = run_cli(capsys, "score", "--qrels", QRELS, "--run", BM25, "--metrics", "mrr", "--per-query", str(path))
    assert code == EXIT_OK
    rows = list(csv.DictReader(path.open()))
    assert [r["query_id"] for r in rows] == ["q1", "q2", "q3", "q4", "q5"]
    assert [float(r["mrr"]) for r in rows] == pytest.approx([0.5, 1.0, 0.25, 1.0, 0.5])


def test_score_reports_missing_and_dropped_queries(capsys, tmp_path):
    run = tmp_path / "partial.trec"
    run.write_text("q1 Q0 d1 1 2.0 partial\nq9 Q0 d1 1 1.0 partial\n")
    code, out, _ = run_cli(capsys, "score", "--qrels", QRELS, "--run", str(run), "--metrics", "mrr", "--no-ci")
    assert code == EXIT_OK
    assert "4 had no results in the run and score 0 (q2, q3, q4, q5)" in out
    assert "1 run queries not in the qrels were dropped" in out


def test_a_run_sharing_no_query_with_the_qrels_is_refused_not_scored_zero(capsys, tmp_path):
    """Zeros would read as a retriever finding nothing, when the run belongs to other queries (ids padded
    otherwise, another collection): score and compare say so and exit 1."""
    elsewhere = tmp_path / "elsewhere.trec"
    elsewhere.write_text("z1 Q0 d1 1 2.0 elsewhere\nz2 Q0 d2 1 1.0 elsewhere\n")
    for command in (["score", "--run", str(elsewhere)], ["compare", BM25, str(elsewhere)]):
        code, _, err = run_cli(capsys, *command, "--qrels", QRELS, "--metrics", "mrr")
        assert code == EXIT_BAD_INPUT
        said = " ".join(err.split())
        assert "run 'elsewhere' has no query in common with the labels" in said
        assert "'z1'" in said and "'q1'" in said


def test_a_run_on_queries_a_releases_estimates_cover_is_scored_not_refused():
    """On a release with estimates, a run on a real query no human labelled yet gets the estimate's figure."""
    from testset_builder.api.scoring import _meet_labels
    from testset_builder.errors import InputError
    from testset_builder.metrics import evaluate

    labels = Qrels.from_dict({"q1": {"d1": 1}})
    run = Run.from_dict({"q2": {"d2": 1.0}}, name="real-only")
    evaluations = [evaluate(labels, run, ["ndcg@10"])]
    _meet_labels([run], evaluations, [{"query-id": "q1"}, {"query-id": "q2"}])
    with pytest.raises(InputError, match="no query in common"):
        _meet_labels([run], evaluations)


def test_score_and_compare_name_each_runs_empty_queries_and_no_detectable_difference_over_one(capsys, tmp_path):
    full, partial = tmp_path / "full.trec", tmp_path / "partial.trec"
    full.write_text("".join(f"q{i} Q0 d1 1 1.0 full\n" for i in range(1, 6)))
    partial.write_text("q1 Q0 d1 1 2.0 partial\nq2 Q0 d1 1 1.0 partial\n")
    for command in (["score", "--runs", str(partial), str(full)], ["compare", str(full), str(partial)]):
        code, out, _ = run_cli(capsys, *command, "--qrels", QRELS, "--metrics", "mrr")
        assert code == EXIT_OK
        flat = " ".join(out.split())
        assert "3 had no results in partial and score 0 (q3, q4, q5)" in flat  # said whichever run comes first
        assert "had no results in full" not in flat
    qrels = tmp_path / "three.qrels"
    qrels.write_text("q1 0 d1 1\nq2 0 d2 1\nq3 0 d3 1\n")
    runs = tmp_path / "a.trec", tmp_path / "b.trec"
    runs[0].write_text("q1 Q0 d1 1 3 a\nq2 Q0 d2 1 1 a\n")
    runs[1].write_text("q1 Q0 d1 1 3 b\n")
    code, out, _ = run_cli(capsys, "compare", *map(str, runs), "--qrels", str(qrels), "--metrics", "recall@10")
    detectable = " ".join(out.split()).split("smallest difference it detects", 1)[1]
    assert "none (it would take a difference over 1" in detectable  # 3 queries detect nothing a metric can show


def test_compare_flags_a_clearly_better_run_as_significant(capsys, tmp_path):
    qrels = {f"q{i}": {f"d{i}": 1} for i in range(60)}
    good = {q: {f"d{i}": 2.0, "noise": 1.0} for i, q in enumerate(qrels)}
    bad = {q: {"noise": 2.0, **{f"x{j}": 1.0 - j / 100 for j in range(8)}, f"d{i}": 0.0} for i, q in enumerate(qrels)}
    write_beir_qrels(Qrels.from_dict(qrels), tmp_path / "qrels.tsv")
    write_trec_run(Run.from_dict(bad, name="bad"), tmp_path / "bad.trec")
    write_trec_run(Run.from_dict(good, name="good"), tmp_path / "good.trec")
    code, out, _ = run_cli(
        capsys,
        "compare",
        "--qrels",
        str(tmp_path / "qrels.tsv"),
        str(tmp_path / "bad.trec"),
        str(tmp_path / "good.trec"),
        "--metrics",
        "ndcg@10,mrr",
        "--json",
        "--resamples",
        "2000",
    )
    assert code == EXIT_OK
    result = json.loads(out)
    assert result["baseline"] == "bad" and result["candidates"] == ["good"] and result["correction"] == "holm"
    assert all(row["significant"] and row["difference"] > 0 for row in result["rows"])
    assert all(row["p_adjusted"] >= row["p_randomization"] for row in result["rows"])


def test_compare_on_the_bundled_example_is_not_significant_with_five_queries(capsys):
    code, out, _ = run_cli(capsys, "compare", "--qrels", QRELS, BM25, DENSE, "--metrics", "ndcg@10,mrr")
    assert code == EXIT_OK
    assert "dense vs baseline bm25" in out and "Holm" in out
    assert " yes " not in out
    header = next(line for line in out.splitlines() if "metric" in line)
    columns = [c.strip() for c in header.strip("┃│ ").split("┃")]
    assert columns == ["metric", "base", "run", "diff [95% CI]", "p t", "p rand", "Holm", "sig."]
    for metric in ("ndcg@10", "mrr"):
        cells = [
            c.strip() for c in next(line for line in out.splitlines() if f" {metric} " in line).strip("│ ").split("│")
        ]
        assert len(cells) == len(columns) and all(cells), cells


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["score", "--qrels", QRELS, "--run", BM25, "--metrics", "ndcg@ten"],
            "unknown metric 'ndcg@ten'; valid metrics: recall[@k]",
        ),
        (["score", "--qrels", "no-such-file.tsv", "--run", BM25], "no-such-file.tsv: no such file"),
        (["score", "--qrels", QRELS, "--run", BM25, "--metrics", "precision"], "needs a cutoff"),
        (["compare", "--qrels", QRELS, BM25], "at least two runs"),
        (["score", "--release", "no-such-workspace@latest", "--run", BM25], "no workspace 'no-such-workspace'"),
        (["score", "--qrels", QRELS], "Missing option '--run'"),
    ],
)
def test_bad_input_exits_1_with_one_clear_line(capsys, args, message):
    code, _, err = run_cli(capsys, *args)
    assert code == EXIT_BAD_INPUT
    assert message in " ".join(err.split())
    assert "Traceback" not in err


def test_an_internal_error_exits_2_and_says_it_is_a_bug(capsys, monkeypatch):
    import testset_builder.metrics.many

    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(testset_builder.metrics.many, "evaluate_with_curve", broken)
    code, _, err = run_cli(capsys, "score", "--qrels", QRELS, "--run", BM25)
    assert code == EXIT_INTERNAL
    assert "internal error: ZeroDivisionError: boom" in err and "TESTSET_BUILDER_DEBUG=1" in err


@pytest.mark.parametrize("through_typer", [False, True])  # a plain score line skips Typer, which maps Ctrl-C itself
def test_ctrl_c_exits_130_and_says_what_was_kept(capsys, monkeypatch, through_typer):
    import testset_builder.metrics.many

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(testset_builder.metrics.many, "evaluate_with_curve", interrupted)
    line = ["score", "--qrels", QRELS, "--run", BM25] + (["--metrics=mrr"] if through_typer else [])
    code, _, err = run_cli(capsys, *line)
    assert code == 130
    assert "interrupted: what was finished is kept; rerun to go on" in err


def test_the_installed_command_sets_the_process_exit_code():
    done = subprocess.run(
        [sys.executable, "-m", "testset_builder", "score", "--qrels", QRELS, "--run", "missing.trec"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == EXIT_BAD_INPUT
    assert "missing.trec: no such file" in done.stderr
    help_text = subprocess.run(
        [sys.executable, "-m", "testset_builder", "compare", "--help"], capture_output=True, text=True
    )
    assert help_text.returncode == EXIT_OK and "baseline" in help_text.stdout


def _setup_mistake(kind: str, tmp_path: Path) -> tuple[list[str], str]:
    """A user mistake and the file or option its one-line message must name."""
    if kind == "corrupt parquet source":
        (tmp_path / "corpus.parquet").write_bytes(b"not parquet at all")
        return [
            "chunk",
            str(tmp_path / "corpus.parquet"),
            "--workspace",
            str(tmp_path / "ws"),
        ], "corpus.parquet: cannot read as Parquet"
    if kind == "per-query into a missing folder":
        return [
            "score",
            "--qrels",
            QRELS,
            "--run",
            BM25,
            "--per-query",
            str(tmp_path / "nope" / "q.csv"),
        ], "--per-query: no such folder"
    if kind == "a release directory without a manifest":
        (tmp_path / "rel").mkdir()
        return [
            "score",
            "--release",
            str(tmp_path / "rel"),
            "--run",
            BM25,
        ], "rel: not a release directory (no manifest.json)"
    if kind == "an MTEB directory missing _id":
        import pyarrow as pa
        import pyarrow.parquet as pq

        (tmp_path / "set" / "hf" / "qrels").mkdir(parents=True)
        pq.write_table(pa.table({"id": ["d1"], "text": ["hello"]}), tmp_path / "set" / "hf" / "corpus.parquet")
        pq.write_table(pa.table({"_id": ["q1"], "text": ["hi?"]}), tmp_path / "set" / "hf" / "queries.parquet")
        qrels = pa.table({"query-id": ["q1"], "corpus-id": ["d1"], "score": [1]})
        pq.write_table(qrels, tmp_path / "set" / "hf" / "qrels" / "test.parquet")
        return ["import", str(tmp_path / "set"), "--workspace", str(tmp_path / "ws")], "corpus.parquet: no column '_id'"
    if kind == "an unknown bundled config":
        return ["config", "speedy"], "no config 'speedy': give a file, or one of anthropic, openai, quickstart"
    if kind == "a config flag out of range":
        return ["chunk", str(EXAMPLES), "--size", "50", "--overlap", "80", "--workspace", str(tmp_path / "ws")], (
            "invalid setting: chunking: overlap (80) must be smaller than size (50)"
        )
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind",
    [
        "corrupt parquet source",
        "per-query into a missing folder",
        "a release directory without a manifest",
        "an MTEB directory missing _id",
        "an unknown bundled config",
        "a config flag out of range",
    ],
)
def test_a_user_mistake_exits_1_with_one_line_naming_the_file_or_option(kind, tmp_path, capsys):
    args, message = _setup_mistake(kind, tmp_path)
    code, _, err = run_cli(capsys, *args)
    assert code == EXIT_BAD_INPUT, err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


def test_push_while_the_hub_cannot_be_reached_is_a_clear_error_not_a_bug(tmp_path):
    from testset_builder.records import Chunk, Document, Judgment, JudgmentSource, JudgmentStatus, Query, QueryOrigin
    from testset_builder.stages.release import write_release
    from testset_builder.store import open_workspace, rows

    with open_workspace(tmp_path / "ws") as ws, ws.transaction() as db:
        rows.put_documents(db, [Document(doc_id="d", text="some text")])
        rows.put_chunks(db, [Chunk(chunk_id="c", doc_id="d", text="some text", start=0, end=9)])
        rows.put_queries(db, [Query(query_id="q", text="what text?", origin=QueryOrigin.real)])
        label = Judgment(
            judgment_id="j",
            query_id="q",
            chunk_id="c",
            grade=2,
            source=JudgmentSource.human,
            reviewer="ann",
            status=JudgmentStatus.final,
        )
        rows.add_judgments(db, [label])
    with open_workspace(tmp_path / "ws") as ws:
        write_release(ws, "1.0.0")
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env["HF_ENDPOINT"] = "http://127.0.0.1:9"  # nothing listens there
    args = ["push", "--version", "1.0.0", "--repo-id", "acme/set", "--workspace", str(tmp_path / "ws")]
    done = subprocess.run([sys.executable, "-m", "testset_builder", *args], env=env, capture_output=True, text=True)
    assert done.returncode == EXIT_BAD_INPUT and "internal error" not in done.stderr
    assert "cannot reach the hub at http://127.0.0.1:9" in done.stderr


@pytest.fixture
def read_only_view(tmp_path):
    """A read-only bind mount of a folder (root may write anywhere else, so the media must refuse it)."""
    mounted = []

    def view(folder: Path) -> Path:
        target = tmp_path / f"read-only-{folder.name}"
        target.mkdir()
        done = subprocess.run(["mount", "--bind", str(folder), str(target)], capture_output=True, text=True)
        if done.returncode == 0:
            mounted.append(target)
            done = subprocess.run(["mount", "-o", "remount,ro,bind", str(target)], capture_output=True, text=True)
        if done.returncode != 0:
            if os.environ.get("CI"):
                pytest.fail(f"CI must be able to make a read-only bind mount: {done.stderr.strip()}")
            pytest.skip(f"cannot make a read-only bind mount here: {done.stderr.strip()}")
        return target

    yield view
    for target in mounted:
        subprocess.run(["umount", "--lazy", str(target)], capture_output=True)  # detached even if a file is open


def test_read_only_commands_work_on_a_read_only_workspace(tmp_path, capsys, read_only_view):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"d{i}", "text": f"passage {i} on ranking"}) + "\n" for i in range(6)))
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"_id": "q1", "text": "passage 1"}) + "\n")
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\nq1\td1\t2\n")
    ws = tmp_path / "ws"
    assert main(["chunk", str(corpus), "--workspace", str(ws), "--chunker", "prechunked", "--json"]) == EXIT_OK
    assert main(["import", str(qrels), "--queries", str(queries), "--workspace", str(ws), "--version", "1.0.0"]) == 0
    capsys.readouterr()
    before = sorted(p.name for p in ws.iterdir())
    frozen = read_only_view(ws)
    run = tmp_path / "run.trec"
    commands = [
        ["queue", "--workspace", str(frozen), "--json"],
        ["costs", "--workspace", str(frozen), "--json"],
        ["diff", "1.0.0", "latest", "--workspace", str(frozen), "--json"],
        [
            "export",
            "--version",
            "1.0.0",
            "--format",
            "beir",
            "--out",
            str(tmp_path / "out"),
            "--workspace",
            str(frozen),
        ],
        ["baseline", "--release", f"{frozen}@1.0.0", "--out", str(run)],
        ["score", "--release", f"{frozen}@latest", "--run", str(run), "--json"],
    ]
    for args in commands:
        code, _, err = run_cli(capsys, *args)
        assert code == EXIT_OK, (args[0], err)
    assert sorted(p.name for p in ws.iterdir()) == before
    code, _, err = run_cli(capsys, "chunk", str(corpus), "--workspace", str(frozen), "--chunker", "prechunked")
    assert code == EXIT_BAD_INPUT and "cannot write to this workspace" in err, err


def every_command() -> list[str]:
    from testset_builder.cli import PIPELINE

    return [name for name in PIPELINE if name not in ("serve", "review")]  # interactive: a server, a terminal session


@pytest.mark.parametrize("command", every_command())
def test_with_json_a_mistake_is_one_json_document_on_stdout_for_every_command(command, capsys):
    from testset_builder.cli import main

    assert main([command, "--no-such-option", "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["exit_code"] == 1 and "--no-such-option" in document["error"]


@pytest.mark.parametrize(
    "argv",
    [
        ["score", "--qrels", "missing.tsv", "--run", "missing.trec"],
        ["release", "--version", "1.0.0", "--workspace", "empty-ws"],
        ["config", "no-such-config"],
        ["run", "missing.yaml"],
        ["remap", "--release", "missing-ws@1.0.0", "--to-workspace", "empty-ws", "--version", "1.0.0"],
        ["import-logs", "missing.jsonl", "--workspace", "empty-ws"],
    ],
)
def test_with_json_a_failure_of_the_work_itself_is_one_json_document_too(argv, capsys, tmp_path, monkeypatch):
    from testset_builder.cli import main

    monkeypatch.chdir(tmp_path)
    assert main([*argv, "--json"]) == 1
    document = json.loads(capsys.readouterr().out)
    assert document["exit_code"] == 1 and document["error"]


def every_command_with_its_click_command() -> dict:
    import typer.main

    from testset_builder.cli import app

    return typer.main.get_command(app).commands


EXAMPLE_SPAN = re.compile(r"`([^`]*testset-builder [^`]*)`")


@pytest.mark.parametrize("command", list(every_command_with_its_click_command()))
def test_the_help_of_every_command_shows_an_example_using_only_options_it_has(command, capsys):
    assert main([command, "--help"]) == EXIT_OK
    assert "Example" in capsys.readouterr().out
    clicked = every_command_with_its_click_command()[command]
    example = clicked.help[clicked.help.index("Example:") :]
    own = [" ".join(span.split()) for span in EXAMPLE_SPAN.findall(example) if f"testset-builder {command} " in span]
    assert own, f"the example of {command} never runs `testset-builder {command} ...`"
    options = {name for param in clicked.params for name in (*param.opts, *param.secondary_opts)}
    for invocation in own:
        spelled = set(re.findall(r"(?<!\S)(--[a-z][a-z-]*)", invocation.split(f"testset-builder {command} ", 1)[1]))
        assert spelled <= options, f"{command}'s example uses options it does not have: {spelled - options}"


def test_quiet_anywhere_on_the_line_silences_stdout_and_keeps_the_exit_code(capsys, tmp_path):
    from testset_builder.cli.typer_app import out

    score = ["score", "--qrels", QRELS, "--run", BM25, "--metrics", "mrr"]
    assert run_cli(capsys, *score)[1], "without --quiet, score prints its table"
    for argv in ([*score, "--quiet"], ["--quiet", *score]):
        code, printed, _ = run_cli(capsys, *argv)
        assert (code, printed) == (EXIT_OK, "")
    chunk = ["chunk", str(EXAMPLES / "queries.txt"), "--workspace", str(tmp_path / "ws")]
    code, printed, err = run_cli(capsys, *chunk, "--quiet")
    assert (code, printed, err) == (EXIT_OK, "", "")  # not even the progress bar's end
    assert run_cli(capsys, *chunk)[1], "without --quiet, chunk prints its summary"
    assert not out.quiet, "--quiet lasts only as long as its command"


def test_quiet_keeps_an_error_on_stderr_and_its_exit_code(capsys):
    code, printed, err = run_cli(capsys, "score", "--qrels", "missing.tsv", "--run", BM25, "--quiet")
    assert (code, printed) == (EXIT_BAD_INPUT, "")
    assert "missing.tsv: no such file" in err
    code, printed, err = run_cli(capsys, "score", "--qrels", QRELS, "--quiet", "--no-such-option")
    assert (code, printed) == (EXIT_BAD_INPUT, "") and "--no-such-option" in err


@pytest.mark.parametrize(
    "argv, code",
    [
        (["score", "--qrels", QRELS, "--run", BM25, "--metrics", "mrr"], EXIT_OK),
        (["score", "--qrels", "missing.tsv", "--run", BM25], EXIT_BAD_INPUT),
    ],
)
def test_quiet_with_json_still_prints_the_one_json_document(argv, code, capsys):
    got, printed, _ = run_cli(capsys, *argv, "--quiet", "--json")
    assert got == code
    document = json.loads(printed)
    assert ("error" in document) == (code != EXIT_OK)


def test_quiet_turns_the_llm_progress_bar_off(monkeypatch):
    import contextlib
    import importlib

    cli = importlib.import_module("testset_builder.cli.typer_app")  # the package's `app` attribute is the Typer app
    bars = []
    monkeypatch.setattr(
        "testset_builder.llm.progress.llm_progress",
        lambda console: bars.append(console) or contextlib.nullcontext("bar"),
    )
    with cli.llm_bar(False) as progress:
        assert progress == "bar" and len(bars) == 1
    monkeypatch.setattr(cli.out, "quiet", True)
    with cli.llm_bar(False) as progress:
        assert progress is None and len(bars) == 1


def test_quiet_does_not_hide_the_items_the_terminal_reviewer_asks_about(queued_workspace, capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("q\n"))
    code, printed, _ = run_cli(
        capsys, "review", "--reviewer", "ann", "--workspace", str(queued_workspace.root), "--quiet"
    )
    assert code == EXIT_OK and "real query 0" in printed


def test_run_json_on_a_failing_stage_still_lists_the_stages_that_ended_before_it(tmp_path, capsys, monkeypatch):
    import yaml

    import testset_builder.api.stages as declared  # the stages as run calls them
    from testset_builder.errors import InputError

    target = tmp_path / "my-set"
    assert main(["init", str(target)]) == 0
    config = target / "testset-builder.yaml"
    settings = yaml.safe_load(config.read_text(encoding="utf-8"))
    settings["run"]["sources"] = [str(Path(__file__).resolve().parents[1] / "examples" / "corpus")]
    config.write_text(yaml.safe_dump(settings, sort_keys=False), encoding="utf-8")

    failure = {"error": InputError("the generator's endpoint refused the key")}

    def fails(*args, **kwargs):
        raise failure["error"]

    monkeypatch.setattr(declared, "synthesize", fails)  # the third stage fails, after chunk and plan ended
    capsys.readouterr()
    assert main(["run", str(config), "--json"]) == EXIT_BAD_INPUT
    document = json.loads(capsys.readouterr().out)
    assert document["exit_code"] == EXIT_BAD_INPUT and "refused the key" in document["error"]
    assert list(document["stages"]) == ["chunk", "plan"]
    assert document["stages"]["chunk"]["result"]["chunks_added"] > 0
    failure["error"] = KeyboardInterrupt()  # Ctrl-C there: the same document, exit code 130
    assert main(["run", str(config), "--json"]) == 130
    document = json.loads(capsys.readouterr().out)
    assert document["error"] == "interrupted" and list(document["stages"]) == ["chunk", "plan"]


def test_relevance_level_counts_only_grades_at_or_above_it_as_trec_eval_l_does(capsys, tmp_path):
    pytrec_eval = pytest.importorskip("pytrec_eval")
    graded = {f"q{i}": {f"d{j}": (i + j) % 4 for j in range(8)} for i in range(6)}
    graded = {q: {d: g for d, g in by.items() if g} for q, by in graded.items()}
    ranked = {f"q{i}": {f"d{j}": float((7 * j + i) % 11) for j in range(10)} for i in range(6)}
    qrels, run = tmp_path / "graded.qrels", tmp_path / "run.trec"
    qrels.write_text("".join(f"{q} 0 {d} {g}\n" for q, by in graded.items() for d, g in by.items()))
    run.write_text("".join(f"{q} Q0 {d} 1 {s} r\n" for q, by in ranked.items() for d, s in by.items()))
    names = {"recall@5": "recall_5", "precision@5": "P_5", "map": "map", "mrr": "recip_rank", "ndcg@10": "ndcg_cut_10"}
    for level in (1, 2, 3):
        code, out, _ = run_cli(capsys, "score", "--qrels", str(qrels), "--run", str(run), "--metrics",
                               ",".join(names), "--relevance-level", str(level), "--json", "--no-ci")  # fmt: skip
        assert code == EXIT_OK
        ours = json.loads(out)["metrics"]
        reference = pytrec_eval.RelevanceEvaluator(graded, set(names.values()), relevance_level=level).evaluate(ranked)
        for name, theirs in names.items():
            expected = sum(reference[q][theirs] for q in graded) / len(graded)
            assert ours[name]["mean"] == pytest.approx(expected, abs=1e-12), (level, name)
    code, out, _ = run_cli(capsys, "score", "--qrels", str(qrels), "--run", str(run), "-m", "recall@5",
                           "--relevance-level", "2", "--no-ci")  # fmt: skip
    assert "relevant: grade >= 2" in " ".join(out.split())


def test_runs_propose_line_says_real_queries_get_labels_only_from_review_when_no_judge_ran():
    from testset_builder.cli.pipeline import said

    pooled = {"queries": 5, "candidates": 75, "judging": {"judged": 0, "already_judged": 0}}
    assert "get labels only from reviewers' verdicts" in said("propose", pooled)
    judged = {"queries": 5, "candidates": 75, "judging": {"judged": 75, "already_judged": 0}}
    assert said("propose", judged) == "5 queries, 75 candidate rows pooled"


def test_query_ids_that_look_like_markup_are_printed_as_they_are(capsys, tmp_path):
    qrels, run = tmp_path / "q.qrels", tmp_path / "r.trec"
    qrels.write_text("q[/x] 0 d1 1\na[red]b 0 d2 1\nq1 0 d1 1\n")
    run.write_text("q1 Q0 d1 1 1.0 r\n")
    code, out, _ = run_cli(capsys, "score", "--qrels", str(qrels), "--run", str(run), "-m", "recall@10", "--no-ci")
    assert code == EXIT_OK
    assert "2 had no results in the run and score 0 (a[red]b, q[/x])" in " ".join(out.split())
