"""The command line: tables for people, JSON for scripts, per-query CSV, and exit codes scripts can trust."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

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
    assert "4 had no results in the run and score 0" in out
    assert "1 run queries not in the qrels were dropped" in out


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
        (["score", "--qrels", QRELS], "Missing option '--run'"),
    ],
)
def test_bad_input_exits_1_with_one_clear_line(capsys, args, message):
    code, _, err = run_cli(capsys, *args)
    assert code == EXIT_BAD_INPUT
    assert message in " ".join(err.split())
    assert "Traceback" not in err


def test_an_internal_error_exits_2_and_says_it_is_a_bug(capsys, monkeypatch):
    import testset_builder.metrics

    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(testset_builder.metrics, "evaluate", broken)
    code, _, err = run_cli(capsys, "score", "--qrels", QRELS, "--run", BM25)
    assert code == EXIT_INTERNAL
    assert "internal error: ZeroDivisionError: boom" in err and "TESTSET_BUILDER_DEBUG=1" in err


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
