"""A release carries its estimated labels (estimates.jsonl) beside the human ones, and `score --release` gives each
metric the figure that applies: prediction-powered from them where verdicts were drawn at random."""

from __future__ import annotations

import json

import pytest

from testset_builder.cli import main
from testset_builder.metrics import ppi, prediction


def drawn_and_answered(ws, capsys, budget: int = 6, reviewer: str = "ann") -> int:
    """A selection round, every drawn pair answered as the truth says; returns how many. The reviewer then leaves,
    giving back the lease on the first item after the drawn ones (a later round may draw it)."""
    from testset_builder.stages import review

    assert main(["select", "--budget", str(budget), "-w", str(ws.root), "--json", "--seed", "3"]) == 0
    capsys.readouterr()
    answered = 0
    while (item := review.next_item(ws, reviewer)) is not None and item.reason.startswith("drawn"):  # drawn first
        grade = int(ws.truth(item.query["query_id"], item.chunk["chunk_id"]))
        review.submit(ws, reviewer, item.item_id, "grade", f"k-{reviewer}-{answered}", grade=grade)
        answered += 1
    review.leave(ws, reviewer)
    return answered


def release_rows(ws, version: str) -> list[dict]:
    text = (ws.root / "releases" / version / "estimates.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines()]


def test_a_release_carries_every_estimated_pair_with_its_estimate_label_and_draw(pair_queue, capsys):
    from testset_builder.store import draws, estimates

    ws = pair_queue
    answered = drawn_and_answered(ws, capsys)
    assert answered > 0
    assert main(["release", "-w", str(ws.root), "--version", "1.0.0", "--json"]) == 0
    rows = release_rows(ws, "1.0.0")
    stored, considered = estimates.estimates(ws.db), draws.pair_draws(ws.db)
    assert [(r["query-id"], r["corpus-id"]) for r in rows] == sorted(stored)
    for row in rows:
        pair = (row["query-id"], row["corpus-id"])
        assert row["p_relevant"] == stored[pair].p_relevant and row["model"] == stored[pair].model
        draw = considered[pair]
        assert row["draw"] == {
            "round": 1, "probability": draw.probability, "drawn": draw.drawn, "stratum": draw.stratum
        }  # fmt: skip
        assert draw.stratum == "sample" or (draw.probability, draw.drawn) == (1.0, True)  # take-all: drawn for sure
        assert (row["origin"] == "human") == draw.drawn  # every drawn pair was answered, nothing else
        if draw.drawn:
            assert row["label"] == int(ws.truth(*pair))
    manifest = json.loads((ws.root / "releases" / "1.0.0" / "manifest.json").read_text(encoding="utf-8"))
    counts = manifest["counts"]["estimates"]
    assert (counts["pairs"], counts["drawn"], counts["drawn_answered"]) == (len(rows), answered, answered)
    assert counts["estimated_only"] == len(rows) - answered and manifest["counts"]["queries"] == 2
    assert "estimates.jsonl" in manifest["files"]
    card = (ws.root / "releases" / "1.0.0" / "README.md").read_text(encoding="utf-8")
    assert f"`estimates.jsonl` gives P(relevant) for {len(rows)} pairs of 2 queries" in card
    out = ws.root.parent / "hf-export"
    assert main(["export", "-w", str(ws.root), "--version", "1.0.0", "--format", "hf", "--out", str(out)]) == 0
    assert (out / "estimates.jsonl").read_text(encoding="utf-8").splitlines() == [json.dumps(r) for r in rows]
    capsys.readouterr()
    latest = ["export", "-w", str(ws.root), "--version", "latest", "--format", "trec", "--out", str(out.parent / "t")]
    assert main(latest) == 0
    assert "exported 1.0.0 as trec" in capsys.readouterr().out  # latest is named by its number


def test_without_estimates_a_release_holds_only_the_labelled_queries_and_no_estimates_file(pair_queue, capsys):
    ws = pair_queue
    drawn_and_answered(ws, capsys, budget=2)
    assert main(["release", "-w", str(ws.root), "--version", "1.0.0", "--no-estimates", "--json"]) == 0
    release = ws.root / "releases" / "1.0.0"
    manifest = json.loads((release / "manifest.json").read_text(encoding="utf-8"))
    assert not (release / "estimates.jsonl").exists() and "estimates" not in manifest["counts"]
    qrels = (release / "beir" / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()[1:]
    assert manifest["counts"]["queries"] == len({line.split("\t")[0] for line in qrels})


def test_score_on_a_release_with_estimates_gives_the_difference_estimator_for_precision(pair_queue, capsys, tmp_path):
    ws = pair_queue
    drawn_and_answered(ws, capsys)
    assert main(["release", "-w", str(ws.root), "--version", "1.0.0"]) == 0
    rows = release_rows(ws, "1.0.0")
    run = tmp_path / "run.trec"  # one drawn pair of each query first, then the rest by id
    ranked = {}
    for row in sorted(rows, key=lambda r: (r["query-id"], not (r["draw"] or {}).get("drawn"), r["corpus-id"])):
        ranked.setdefault(row["query-id"], []).append(row["corpus-id"])
    ranked = {q: [chunks[0], *sorted(chunks[1:])] for q, chunks in ranked.items()}
    run.write_text(
        "".join(
            f"{q} Q0 {c} {rank} {100 - rank} test\n" for q, chunks in ranked.items() for rank, c in enumerate(chunks, 1)
        ),
        encoding="utf-8",
    )
    capsys.readouterr()
    assert main(["score", "--release", f"{ws.root}@1.0.0", "-r", str(run), "-m", "precision@5", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["estimates"]["applies"] == "ppi" and document["estimates"]["queries"] == 2

    # the difference estimator over the top 5: f + (label - f) / pi where drawn at random, the label where known for
    # sure, f alone elsewhere; f is each pair's held-out estimate, pi its draw's probability times the answer rate
    top5 = {(q, c) for q, chunks in ranked.items() for c in chunks[:5]}
    expected, variance, estimated = 0.0, 0.0, 0.0  # the estimate alone: known labels, f for every other pair
    for q, c, f, pi, grade in prediction.release_pairs(rows):
        if (q, c) not in top5:
            continue
        if grade is None:
            expected += f
        elif pi >= 1.0:
            expected += int(grade >= 1)
        else:
            expected += f + (int(grade >= 1) - f) / pi
            variance += (1 - pi) / pi**2 * ((int(grade >= 1) - f) / 10) ** 2  # Poisson sampling's variance
        estimated += int(grade >= 1) if grade is not None and pi >= 1.0 else f
    figure = document["metrics"]["precision@5"]
    assert figure["kind"] == "prediction-powered"
    assert figure["mean"] == pytest.approx(min(1.0, max(0.0, expected / 10)))
    assert figure["ci_low"] == pytest.approx(max(0.0, expected / 10 - ppi.Z95 * variance**0.5), abs=1e-9)
    assert figure["ci_high"] == pytest.approx(min(1.0, expected / 10 + ppi.Z95 * variance**0.5), abs=1e-9)
    estimator = document["details"]["estimator"]["precision@5"]
    assert estimator["ppi"] == {k: figure[k] for k in ("mean", "ci_low", "ci_high")}
    assert estimator["estimate_only"]["mean"] == pytest.approx(estimated / 10)
    assert "precision@5" in document["details"]["labelled_pairs"]
    assert document["estimates"]["grade_2_share"] == 0.0  # the verdicts here are 0 or 1

    assert main(["score", "--release", f"{ws.root}@1.0.0", "-r", str(run), "-m", "precision@5,ndcg@5,mrr"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "figures: prediction-powered" in shown and "labelled pairs only" in shown
    assert "human-only" not in shown and "estimate-only" not in shown  # the other figures only with --details
    assert "from the drawn verdicts: 0% of relevant pairs are highly relevant" in shown
    assert main(["score", "--release", f"{ws.root}@1.0.0", "-r", str(run), "-m", "precision@5,mrr", "--details"]) == 0
    detailed = " ".join(capsys.readouterr().out.split())
    assert "human-only" in detailed and "estimate-only" in detailed and "labelled pairs" in detailed


def test_compare_on_a_release_with_estimates_gives_the_paired_prediction_powered_difference(
    pair_queue, capsys, tmp_path
):
    ws = pair_queue
    drawn_and_answered(ws, capsys)
    assert main(["release", "-w", str(ws.root), "--version", "1.0.0"]) == 0
    ranked = {}
    for row in release_rows(ws, "1.0.0"):
        ranked.setdefault(row["query-id"], []).append(row["corpus-id"])
    runs = []
    for name, order in (("by-id", sorted), ("reversed", lambda chunks: sorted(chunks, reverse=True))):
        path = tmp_path / f"{name}.trec"
        path.write_text(
            "".join(
                f"{q} Q0 {c} {rank} {100 - rank} {name}\n"
                for q, chunks in ranked.items()
                for rank, c in enumerate(order(chunks), 1)
            ),
            encoding="utf-8",
        )
        runs.append(path)
    means = []
    for path in runs:
        capsys.readouterr()
        assert main(["score", "--release", f"{ws.root}@1.0.0", "-r", str(path), "-m", "precision@5", "--json"]) == 0
        means.append(json.loads(capsys.readouterr().out)["metrics"]["precision@5"]["mean"])
    capsys.readouterr()
    assert main(["compare", *map(str, runs), "--release", f"{ws.root}@1.0.0", "-m", "precision@5", "--json"]) == 0
    [difference] = json.loads(capsys.readouterr().out)["prediction_powered"]
    assert (difference["run"], difference["metric"], difference["use"]) == ("reversed", "precision@5", "ppi")
    assert difference["mean"] == pytest.approx(means[1] - means[0])
    assert difference["ci_low"] <= difference["mean"] <= difference["ci_high"]


def test_a_run_with_no_drawn_verdict_in_its_top_k_is_warned_that_its_interval_may_be_too_narrow(
    pair_queue, capsys, tmp_path
):
    ws = pair_queue
    drawn_and_answered(ws, capsys)
    assert main(["release", "-w", str(ws.root), "--version", "1.0.0"]) == 0
    rows = release_rows(ws, "1.0.0")
    undrawn = [r for r in rows if not (r["draw"] or {}).get("drawn")]
    run = tmp_path / "undrawn.trec"  # each query's top 5: pairs no round drew
    ranked = {}
    for row in undrawn:
        ranked.setdefault(row["query-id"], []).append(row["corpus-id"])
    run.write_text(
        "".join(f"{q} Q0 {c} {r} {100 - r} t\n" for q, cs in ranked.items() for r, c in enumerate(cs[:5], 1)),
        encoding="utf-8",
    )
    capsys.readouterr()
    assert main(["score", "--release", f"{ws.root}@1.0.0", "-r", str(run), "-m", "precision@5"]) == 0
    shown = capsys.readouterr().out
    assert "no drawn verdict falls in this run's top results" in " ".join(shown.split())


def test_the_report_and_score_say_in_one_word_how_well_the_estimate_ranked_the_verdicts_it_did_not_see(
    pair_queue, capsys, tmp_path
):
    from sklearn.metrics import roc_auc_score

    from testset_builder.labels.fitting import quality

    ws = pair_queue
    drawn_and_answered(ws, capsys, budget=20)
    assert main(["estimate", "-w", str(ws.root), "--json"]) == 0  # after review, as the README says
    assert main(["release", "-w", str(ws.root), "--version", "1.0.0"]) == 0
    rows = release_rows(ws, "1.0.0")
    verdicts = [r for r in rows if r["origin"] == "human"]
    labels = [int(r["label"] >= 1) for r in verdicts]
    assert 0 < sum(labels) < len(labels)
    expected = roc_auc_score(labels, [r.get("p_heldout", r["p_relevant"]) for r in verdicts])
    out = tmp_path / "report.html"
    assert main(["report", "--release", str(ws.root / "releases" / "1.0.0"), "--out", str(out)]) == 0
    html = " ".join(out.read_text(encoding="utf-8").split())
    assert f"on {len(verdicts)} verdicts it did not see" in html.lower()
    assert f"(AUC {expected:.2f}; 0.5 is chance)" in html

    run = tmp_path / "run.trec"
    run.write_text("".join(f"{r['query-id']} Q0 {r['corpus-id']} 1 1 t\n" for r in rows[:2]), encoding="utf-8")
    capsys.readouterr()
    assert main(["score", "--release", f"{ws.root}@1.0.0", "-r", str(run), "-m", "precision@5", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)["estimate_quality"]
    assert said["auc"] == pytest.approx(expected, abs=1e-4) and said["verdicts"] == len(verdicts)
    assert said["quality"] == quality(said["auc"], said["ece"]) and f": {said['quality']}: " in html


def test_after_two_rounds_the_latest_is_the_design_and_the_first_rounds_labels_are_known(pair_queue, capsys):
    from testset_builder.metrics.prediction import release_pairs

    ws = pair_queue
    first = drawn_and_answered(ws, capsys, budget=8)
    second = drawn_and_answered(
        ws, capsys, budget=8, reviewer="bob"
    )  # select refits, then draws anew from the unlabelled pairs
    assert first > 0 and second > 0
    assert main(["release", "-w", str(ws.root), "--version", "1.0.0"]) == 0
    rows = release_rows(ws, "1.0.0")
    by_round = {}
    for row in rows:
        if row["origin"] == "human":
            by_round.setdefault(row["draw"]["round"], []).append(row)
    assert sorted(by_round) == [1, 2] and len(by_round[1]) == first and len(by_round[2]) == second
    probability = {(q, c): pi for q, c, _, pi, label in release_pairs(rows) if label is not None}
    assert all(probability[(r["query-id"], r["corpus-id"])] == 1.0 for r in by_round[1])  # known by round 2
    assert all(  # round 2's answers are its random draws, each at its probability (every drawn pair answered)
        probability[(r["query-id"], r["corpus-id"])] == pytest.approx(r["draw"]["probability"]) for r in by_round[2]
    )


def test_score_on_a_release_without_drawn_verdicts_says_the_estimate_alone_can_misrank_stronger_systems(
    pair_queue, capsys, tmp_path
):
    from testset_builder.stages import review

    ws = pair_queue
    item = review.next_item(ws, "ann")  # one verdict, from the queue's order: no pair was drawn at random
    review.submit(
        ws, "ann", item.item_id, "grade", "k-ann-0", grade=int(ws.truth(item.query["query_id"], item.chunk["chunk_id"]))
    )
    assert main(["estimate", "-w", str(ws.root), "--json"]) == 0
    assert main(["release", "-w", str(ws.root), "--version", "1.0.0", "--json"]) == 0
    rows = release_rows(ws, "1.0.0")
    assert rows and all(not r["draw"] for r in rows)
    run = tmp_path / "run.trec"
    run.write_text("".join(f"{r['query-id']} Q0 {r['corpus-id']} 1 1 test\n" for r in rows[:1]), encoding="utf-8")
    capsys.readouterr()
    assert main(["score", "--release", f"{ws.root}@1.0.0", "-r", str(run), "-m", "precision@5", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["estimates"]["applies"] == "estimate"
    why = document["estimates"]["why"]
    assert "select" in why and "rank that system below weaker ones" in why
    figure = document["metrics"]["precision@5"]
    assert figure["kind"] == "estimate-only" and "ci_low" not in figure  # no interval without a random draw
    assert document["details"]["estimator"]["precision@5"]["ppi"] is None
