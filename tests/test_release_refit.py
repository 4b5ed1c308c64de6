"""A release ships estimates that have seen its verdicts (it refits them first, as `estimate` does), and each pair's
held-out prediction (``p_heldout``), which no verdict of its own query's fold made."""

from __future__ import annotations

import json

from testset_builder.cli import main
from testset_builder.errors import FitError
from testset_builder.labels.estimate import estimate_workspace
from testset_builder.labels.fitting import expected_calibration_error, fold_of
from testset_builder.labels.prior import PRIOR, PRIOR_LEXICAL

PRIORS = (PRIOR.name, PRIOR_LEXICAL.name)


def reviewed(ws) -> dict[tuple[str, str], int]:
    """Every queued pair graded by a notion of relevance the prior does not share (the chunks that do not name the
    query's metric), after the prior estimated them: a refit learns it and is kept. Returns the verdicts."""
    from testset_builder.stages import review

    estimate_workspace(ws)
    verdicts = {}
    for item in ws.items:
        verdicts[(item.query_id, item.chunk_id)] = int(not ws.truth(item.query_id, item.chunk_id))
        review.submit(ws, "ann", item.item_id, "grade", item.item_id, grade=verdicts[(item.query_id, item.chunk_id)])
    return verdicts


def released(ws, version: str) -> tuple[dict[tuple[str, str], dict], dict]:
    """The rows of a release's estimates.jsonl by pair, and its manifest."""
    assert main(["release", "-w", str(ws.root), "--version", version, "--json"]) == 0
    directory = ws.root / "releases" / version
    lines = (directory / "estimates.jsonl").read_text(encoding="utf-8").splitlines()
    rows = {(row["query-id"], row["corpus-id"]): row for row in map(json.loads, lines)}
    return rows, json.loads((directory / "manifest.json").read_text(encoding="utf-8"))


def test_a_release_after_review_ships_the_estimate_refitted_on_its_verdicts_and_no_worse_calibrated(pair_queue):
    from testset_builder.store import estimates

    ws = pair_queue
    verdicts = reviewed(ws)
    prior = {pair: e.p_relevant for pair, e in estimates.estimates(ws.db).items()}
    assert {e.model for e in estimates.estimates(ws.db).values()} <= set(PRIORS)  # nothing refitted after review

    rows, manifest = released(ws, "1.0.0")
    assert all(row["model"].startswith("refit:") for row in rows.values())
    refit = manifest["estimates_refit"]
    assert (refit["refit"], refit["at_release"], refit["verdicts"]) == (True, True, len(verdicts))
    assert refit["why"].startswith(f"refit on {len(verdicts)} verdicts")
    labels = [verdicts[pair] for pair in sorted(verdicts)]
    shipped = [rows[pair]["p_relevant"] for pair in sorted(verdicts)]
    assert expected_calibration_error(shipped, labels) <= expected_calibration_error(
        [prior[pair] for pair in sorted(verdicts)], labels
    )

    _, again = released(ws, "1.0.1")  # nothing new since: the stored estimates ship as they are
    assert again["estimates_refit"] == {
        "refit": True, "at_release": False, "verdicts": len(verdicts),
        "why": f"the stored estimates saw all {len(verdicts)} verdicts",
    }  # fmt: skip


def test_a_pairs_heldout_estimate_does_not_move_when_its_own_verdict_flips(pair_queue):
    from testset_builder.stages import review

    ws = pair_queue
    verdicts = reviewed(ws)
    before, _ = released(ws, "1.0.0")
    flipped = next(item for item in ws.items if item.query_id == "q-ndcg")
    pair = (flipped.query_id, flipped.chunk_id)
    review.submit(ws, "ann", flipped.item_id, "grade", "flip", grade=1 - verdicts[pair])  # the reviewer thinks again

    after, manifest = released(ws, "1.1.0")
    assert manifest["estimates_refit"]["at_release"] and "refit kept" in manifest["estimates_refit"]["why"]
    same_fold = [p for p in before if fold_of(p[0]) == fold_of(pair[0])]
    other_fold = [p for p in before if fold_of(p[0]) != fold_of(pair[0])]
    assert same_fold and other_fold
    assert [after[p]["p_heldout"] for p in same_fold] == [before[p]["p_heldout"] for p in same_fold]
    assert [after[p]["p_heldout"] for p in other_fold] != [before[p]["p_heldout"] for p in other_fold]  # it counted
    assert all(row["p_heldout"] == row["p_relevant"] for row in after.values())  # each estimate its fold's model's


def with_a_synthetic_question(ws) -> None:
    """A synthetic question labelling its source chunk: a release's qrel, no human verdict."""
    from testset_builder.records import Judgment, JudgmentSource, JudgmentStatus, Query, QueryOrigin
    from testset_builder.store import rows

    chunk_id = ws.items[0].chunk_id
    question = Query(query_id="s0", text="what is ndcg?", origin=QueryOrigin.synthetic, source_chunk_id=chunk_id)
    label = Judgment(
        judgment_id="src", query_id="s0", chunk_id=chunk_id, grade=2, source=JudgmentSource.synthetic_source,
        status=JudgmentStatus.final,
    )  # fmt: skip
    with ws.transaction() as db:
        rows.put_queries(db, [question])
        rows.add_judgments(db, [label])


def test_a_release_without_verdicts_ships_the_prior_as_its_own_heldout_estimate_and_says_why_nothing_was_refit(
    pair_queue, capsys
):
    ws = pair_queue
    estimate_workspace(ws)
    with_a_synthetic_question(ws)
    capsys.readouterr()
    rows, manifest = released(ws, "1.0.0")
    estimated = [row for row in rows.values() if row["p_relevant"] is not None]
    assert estimated and all(row["model"] in PRIORS and row["p_heldout"] == row["p_relevant"] for row in estimated)
    assert rows[("s0", ws.items[0].chunk_id)]["p_heldout"] is None  # a label nothing estimated
    assert manifest["estimates_refit"] == {
        "refit": False, "at_release": False, "verdicts": 0,
        "why": "no human verdict on an estimated pair yet: nothing to refit on",
    }  # fmt: skip
    assert json.loads(capsys.readouterr().out)["estimates_refit"] == manifest["estimates_refit"]


def test_a_release_whose_refit_cannot_run_ships_the_stored_estimates_and_says_why(pair_queue, monkeypatch, capsys):
    from testset_builder.stages.release import refit

    ws = pair_queue
    verdicts = reviewed(ws)

    def failing(*args, **kwargs):
        raise FitError("the relevance model's fit did not converge")

    monkeypatch.setattr(refit, "estimate_workspace", failing)
    assert main(["release", "-w", str(ws.root), "--version", "1.0.0"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    manifest = json.loads((ws.root / "releases" / "1.0.0" / "manifest.json").read_text(encoding="utf-8"))
    said = manifest["estimates_refit"]
    assert (said["refit"], said["at_release"], said["verdicts"]) == (False, False, len(verdicts))
    assert "the refit could not run (the relevance model's fit did not converge)" in said["why"]
    assert "design-unbiased for any prediction fixed before the draw" in said["why"] and said["why"] in shown
    text = (ws.root / "releases" / "1.0.0" / "estimates.jsonl").read_text(encoding="utf-8")
    assert {json.loads(line)["model"] for line in text.splitlines()} <= set(PRIORS)


def test_the_api_release_refits_before_it_compares_with_the_latest_release(pair_queue):
    from testset_builder.stages.release import release_if_changed

    ws = pair_queue
    verdicts = reviewed(ws)
    made, version = release_if_changed(ws)
    assert version == "0.1.0" and made.estimates_refit["at_release"] and made.estimates_refit["refit"]
    assert made.estimates_refit["verdicts"] == len(verdicts)
    assert release_if_changed(ws) == (None, "0.1.0")  # refitted already: the same content


def test_a_fold_models_estimate_of_a_pair_is_fitted_without_its_querys_verdicts():
    import numpy as np

    from testset_builder.labels.estimate import fitted_on
    from testset_builder.labels.features import FEATURES

    chance = np.random.default_rng(7)
    keys = [(f"q{i // 10}", f"c{i}") for i in range(300)]
    matrix = chance.normal(size=(len(keys), len(FEATURES)))
    y = (chance.random(len(keys)) < 1 / (1 + np.exp(-(matrix[:, 0] - matrix[:, 2])))).astype(float)

    def heldout(verdict: int) -> np.ndarray:
        labels = y.copy()
        labels[0] = verdict
        fitted = fitted_on(matrix, keys, range(len(keys)), labels, np.ones(len(keys)), PRIOR, ())
        assert fitted.validation.kept
        return fitted.scored()[0]

    own = np.array([fold_of(q) == fold_of(keys[0][0]) for q, _ in keys])
    relevant, irrelevant = heldout(1), heldout(0)
    assert list(relevant[own]) == list(irrelevant[own])  # the pair's own fold: fitted without its verdict
    assert list(relevant[~own]) != list(irrelevant[~own])  # the other folds' models saw it
