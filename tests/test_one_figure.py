"""On a release whose labels are partly estimated, each metric has one figure, the one that applies: `score` prints
it first, `api.score(...).metrics` returns it, and the best run and the tests are decided on it."""

from __future__ import annotations

import json

import pytest
from test_release_estimates import drawn_and_answered, release_rows

from testset_builder import api
from testset_builder.cli import main
from testset_builder.metrics.figures import LABELLED_ONLY, PAIRED_TEST

METRICS = "precision@5,recall@5,ndcg@5,mrr,map"


def released_with_runs(ws, capsys, tmp_path) -> tuple[str, list]:
    """A release with estimates and verdicts drawn at random, and two runs over its pairs: one that ranks each
    query's relevant chunks first (by the truth), one that ranks them last."""
    drawn_and_answered(ws, capsys, budget=12)
    assert main(["release", "-w", str(ws.root), "--version", "1.0.0"]) == 0
    chunks = {}
    for row in release_rows(ws, "1.0.0"):
        chunks.setdefault(row["query-id"], []).append(row["corpus-id"])
    paths = []
    for name, relevant_first in (("good", True), ("poor", False)):
        path = tmp_path / f"{name}.trec"
        lines = []
        for q, ids in chunks.items():
            ranked = sorted(ids, key=lambda c: (ws.truth(q, c) != relevant_first, c))
            lines += [f"{q} Q0 {c} {rank} {100 - rank} {name}\n" for rank, c in enumerate(ranked, 1)]
        path.write_text("".join(lines), encoding="utf-8")
        paths.append(path)
    capsys.readouterr()
    return f"{ws.root}@1.0.0", paths


def printed_rows(text: str) -> dict[str, list[str]]:
    """The cells of each row of the tables printed, by their first cell."""
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split("│")[1:-1]]
        if cells and cells[0]:
            rows.setdefault(cells[0], cells[1:])
    return rows


def test_api_metrics_are_the_figures_score_prints_first(pair_queue, capsys, tmp_path):
    release, (good, _) = released_with_runs(pair_queue, capsys, tmp_path)
    metrics = api.score(release, [good], METRICS).metrics
    assert main(["score", "--release", release, "-r", str(good), "-m", METRICS]) == 0
    shown = printed_rows(capsys.readouterr().out)
    for name, entry in metrics.items():
        assert shown[name][0] == f"{entry['mean']:.4f}", name  # the first figure printed for the metric
        assert shown[name][-1] == entry["kind"]
    assert {metrics[name]["kind"] for name in ("precision@5", "recall@5", "ndcg@5")} == {"prediction-powered"}
    assert metrics["mrr"]["kind"] == metrics["map"]["kind"] == LABELLED_ONLY
    halving = metrics["ndcg@5"]["more_verdicts_to_halve"]
    assert halving and halving > 0


def test_the_best_run_and_its_tests_are_decided_on_the_figure_that_applies(pair_queue, capsys, tmp_path):
    release, paths = released_with_runs(pair_queue, capsys, tmp_path)
    scored = api.score(release, paths, METRICS)
    document = scored.as_dict()
    assert [run["run"] for run in document["runs"]] == ["good", "poor"]  # the order given, in every table
    good, poor = (run["metrics"] for run in document["runs"])
    for name in ("precision@5", "recall@5", "ndcg@5"):
        best = document["against_best"][name]
        assert best["test"] == PAIRED_TEST
        assert best["best"] == ("good" if good[name]["mean"] >= poor[name]["mean"] else "poor")
        other = "poor" if best["best"] == "good" else "good"
        by_run = {"good": good, "poor": poor}
        difference = best["runs"][other]
        assert difference["difference"] == pytest.approx(
            by_run[other][name]["mean"] - by_run[best["best"]][name]["mean"]
        )
        assert difference["ci_low"] <= difference["difference"] <= difference["ci_high"]
        assert difference["p_adjusted"] >= difference["p_normal"]
        assert difference["significant"] == (difference["p_adjusted"] < 0.05)
    assert document["against_best"]["mrr"]["test"] == "paired randomization test"

    assert main(["score", "--release", release, "--runs", str(tmp_path / "*.trec"), "-m", METRICS]) == 0
    text = capsys.readouterr().out
    shown = printed_rows(text)
    assert list(shown).index("good") < list(shown).index("poor")
    for name_index, name in enumerate(METRICS.split(",")):
        for run, metrics in (("good", good), ("poor", poor)):
            cell = shown[run][name_index]
            assert cell.startswith(f"{metrics[name]['mean']:.3f}")
            assert cell.endswith("●") == (document["against_best"][name]["best"] == run)
    flat = " ".join(text.split())
    assert "labelled pairs only" in flat and "more verdicts drawn at random" in flat
    assert "human-only" not in flat  # the other figures only with --details


def test_json_keeps_the_other_figures_under_details(pair_queue, capsys, tmp_path):
    release, (good, _) = released_with_runs(pair_queue, capsys, tmp_path)
    assert main(["score", "--release", release, "-r", str(good), "-m", METRICS, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert set(document["details"]) == {"labelled_pairs", "estimator"}
    assert set(document["details"]["labelled_pairs"]) == set(METRICS.split(","))
    assert set(document["details"]["estimator"]) == {"precision@5", "recall@5", "ndcg@5"}
    for name, figures in document["details"]["estimator"].items():
        assert set(figures) == {"design", "ppi", "human_only", "estimate_only"}
        assert figures["ppi"]["mean"] == document["metrics"][name]["mean"]
    assert document["metrics"]["mrr"]["mean"] == document["details"]["labelled_pairs"]["mrr"]["mean"]
    assert document["estimates"]["applies"] == "ppi" and "diagnostics" in document["estimates"]
    assert document["estimate_quality"]["verdicts"] > 0
