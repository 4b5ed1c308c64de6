"""The transfer check: scored on synthetic questions and on real queries apart, runs ranked alike give Kendall's tau
1 and no warning; runs the two subsets rank the other way round give tau -1 and a warning naming the pair; and the
optimism gap's interval covers the true gap (synthetic minus real) as often as it says."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import release_human_labels
from scipy.stats import kendalltau

from testset_builder.metrics.transfer import kendall_tau_b, transfer

RUNS = ["bm25", "dense", "hybrid"]


def simulated(p_synthetic, p_real, n: int, seed: int):
    """Per-query hits (0 or 1) of each run: on ``n`` synthetic questions with run i's hit rate ``p_synthetic[i]``,
    then ``n`` real queries with ``p_real[i]``; and the two masks."""
    rng = np.random.default_rng(seed)
    table = np.hstack([
        rng.random((len(RUNS), n)) < np.array(p_synthetic)[:, None],
        rng.random((len(RUNS), n)) < np.array(p_real)[:, None],
    ]).astype(float)  # fmt: skip
    synthetic = np.arange(2 * n) < n
    return {"recall@10": table}, synthetic, ~synthetic


def test_kendall_tau_b_is_scipys_with_and_without_ties():
    rng = np.random.default_rng(3)
    for _ in range(50):
        x, y = rng.integers(0, 4, 6).astype(float), rng.integers(0, 4, 6).astype(float)
        expected = kendalltau(x, y).statistic
        got = kendall_tau_b(x, y)
        assert (got is None and np.isnan(expected)) or got == pytest.approx(expected, abs=1e-12)


def test_subsets_that_rank_the_runs_alike_agree_without_a_warning():
    values, synthetic, real = simulated([0.3, 0.5, 0.7], [0.3, 0.5, 0.7], n=400, seed=1)
    found = transfer(RUNS, values, synthetic, real, resamples=500, seed=0)
    (recall,) = found.metrics
    assert recall.tau == 1.0 and recall.tau_interval[1] == 1.0 and recall.reversed_pairs == []
    assert found.warnings == [] and (found.synthetic_queries, found.real_queries) == (400, 400)
    assert all(low < 0 < high for low, high in recall.gap_interval)


def test_subsets_that_rank_the_runs_the_other_way_round_are_warned_of():
    values, synthetic, real = simulated([0.8, 0.6, 0.4], [0.3, 0.5, 0.7], n=400, seed=2)
    found = transfer(RUNS, values, synthetic, real, resamples=500, seed=0)
    (recall,) = found.metrics
    assert recall.tau == -1.0 and recall.tau_interval[0] == -1.0
    assert ("bm25", "hybrid") in recall.reversed_pairs  # better on synthetic, better on real
    assert any("rank bm25 above hybrid" in w for w in found.warnings)
    assert any("read 3 of 3 runs differently" in w for w in found.warnings)  # true gaps +0.5, +0.1, -0.3


def test_the_optimism_gaps_interval_covers_the_true_gap():
    """200 logs, each run's true gap known (0.15, 0, -0.1): each 95% interval covers its run's gap in at least 90%
    of the logs, and the gap is estimated without bias."""
    p_synthetic, p_real = np.array([0.75, 0.5, 0.4]), np.array([0.6, 0.5, 0.5])
    truth = p_synthetic - p_real
    covered, estimates = np.zeros(len(RUNS)), []
    logs = 200
    for seed in range(logs):
        values, synthetic, real = simulated(p_synthetic, p_real, n=150, seed=100 + seed)
        (recall,) = transfer(RUNS, values, synthetic, real, resamples=400, seed=seed).metrics
        covered += [low <= t <= high for t, (low, high) in zip(truth, recall.gap_interval)]
        estimates.append(recall.gap)
    assert (covered / logs >= 0.9).all(), covered / logs
    assert np.abs(np.mean(estimates, axis=0) - truth).max() < 0.01


def test_a_subset_too_small_gives_no_comparison():
    values, synthetic, real = simulated([0.5] * 3, [0.5] * 3, n=1, seed=0)
    assert transfer(RUNS, values, synthetic, real) is None


def test_score_on_a_release_with_both_subsets_says_whether_they_agree(tmp_path, capsys):
    """A release of 4 synthetic questions and 4 real queries, each labelled on two chunks; ``written`` finds both of
    every synthetic question's chunks and none of the real queries', ``asked`` one of each synthetic question's and
    both of each real query's: the synthetic set ranks them one way, real traffic the other, and score says so."""
    from pathlib import Path

    from testset_builder import api
    from testset_builder.cli import main
    from testset_builder.records import Query, QueryOrigin
    from testset_builder.store import open_workspace, rows
    from testset_builder.tables import Run

    docs = Path(__file__).resolve().parents[1] / "examples" / "corpus"
    assert main(["chunk", str(docs), "--workspace", str(tmp_path / "ws"), "--json"]) == 0
    capsys.readouterr()
    with open_workspace(tmp_path / "ws") as ws:
        chunks = [c for c, *_ in rows.live_chunk_rows(ws.db)]
        labelled = {f"q{n}": chunks[3 * n : 3 * n + 2] for n in range(8)}
        queries = [
            Query(query_id=q, text=f"question {q}", origin=QueryOrigin.synthetic if n < 4 else QueryOrigin.real,
                  source_chunk_id=labelled[q][0] if n < 4 else None)
            for n, q in enumerate(labelled)
        ]  # fmt: skip
        release_human_labels(ws, queries, labelled, grade=1)
    synthetic = [q.query_id for q in queries if q.origin == QueryOrigin.synthetic]
    written = Run.from_dict({q: {c: 1.0 for c in labelled[q]} for q in synthetic}, name="written")
    asked = Run.from_dict(
        {q: {c: 1.0 for c in (labelled[q] if q not in synthetic else labelled[q][:1])} for q in labelled}, name="asked"
    )
    spec = f"{tmp_path / 'ws'}@1.0.0"
    scored = api.score(spec, [written, asked], "recall@10", resamples=200)
    (recall,) = scored.transfer.metrics
    assert (scored.transfer.synthetic_queries, scored.transfer.real_queries) == (4, 4)
    assert recall.tau == -1.0 and recall.reversed_pairs == [("written", "asked")]
    assert recall.gap == [1.0, -0.5]  # written: 1 on synthetic, 0 on real; asked: 0.5 and 1
    assert scored.as_dict()["transfer"]["metrics"][0]["tau"] == -1.0
    for run in (written, asked):
        (tmp_path / f"{run.name}.trec").write_text(
            "".join(f"{q} Q0 {c} 1 1.0 {run.name}\n" for q, by in run.to_dict().items() for c in by), encoding="utf-8"
        )
    paths = [str(tmp_path / "written.trec"), str(tmp_path / "asked.trec")]
    assert main(["score", "--release", spec, "--run", paths[0], "--run", paths[1], "--metrics", "recall@10"]) == 0
    printed = capsys.readouterr()
    assert "synthetic against real (4 synthetic questions, 4 real queries" in printed.out
    assert "rank written above asked, real queries the other way round" in printed.err
    page = api.report(spec, [written, asked], out=tmp_path / "report.html").path.read_text(encoding="utf-8")
    assert 'data-table="transfer"' in page and "rank written above asked" in page
