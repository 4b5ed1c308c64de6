"""End to end on real data (SciFact): labels part human, part estimated, and scores with intervals that hold.

A team has human qrels for some queries (imported) and new real queries without labels. It proposes pools for the new
ones with the embedded default (BM25 + dense, the relevance estimate; no LLM), draws 100 pairs for review, answers
them through the review API (SciFact's human qrels answer as the reviewer), releases, and scores two retrievers on
the release. SciFact's full human qrels give the figures the labels should yield; the prediction-powered 95%
intervals of precision@10, recall@10 and nDCG@10 must contain them, as 95% intervals do: over three seeded draws
of the review, all but one or two of the eighteen.
"""

from __future__ import annotations

import json
import random
import shutil

import pytest
from conftest import answer_drawn_through_api, require

from testset_builder.cli import main
from testset_builder.export import read_qrels, read_run
from testset_builder.metrics import evaluate
from testset_builder.store import open_workspace
from testset_builder.store import review as review_store

IMPORTED, PROPOSED, OTHER_DOCS, BUDGET, DRAWS = 20, 60, 1200, 100, 3


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


@pytest.fixture(scope="module")
def scifact_sample(scifact_dir, tmp_path_factory):
    """80 SciFact test queries with their qrels, and a corpus of their relevant abstracts plus 1,200 others."""
    rng = random.Random(7)
    qrels = read_qrels(scifact_dir / "qrels" / "test.tsv").to_dict()
    query_ids = sorted(rng.sample(sorted(qrels), IMPORTED + PROPOSED))
    texts = {q["_id"]: q["text"] for q in map(json.loads, (scifact_dir / "queries.jsonl").open(encoding="utf-8"))}
    corpus = [json.loads(line) for line in (scifact_dir / "corpus.jsonl").open(encoding="utf-8")]
    relevant = {doc for q in query_ids for doc in qrels[q]}
    others = rng.sample([d for d in corpus if d["_id"] not in relevant], OTHER_DOCS)
    root = tmp_path_factory.mktemp("scifact-sample")
    (root / "corpus").mkdir()
    write_jsonl(root / "corpus" / "corpus.jsonl", [d for d in corpus if d["_id"] in relevant] + others)
    imported, proposed = query_ids[:IMPORTED], query_ids[IMPORTED:]
    write_jsonl(root / "imported.jsonl", [{"_id": q, "text": texts[q]} for q in imported])
    write_jsonl(root / "proposed.jsonl", [{"_id": q, "text": texts[q]} for q in proposed])
    (root / "imported-qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q in imported for d, g in qrels[q].items()),
        encoding="utf-8",
    )
    (root / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q in query_ids for d, g in qrels[q].items()),
        encoding="utf-8",
    )
    return root, {q: qrels[q] for q in query_ids}


def test_on_scifact_the_prediction_powered_intervals_contain_the_human_qrels_figures_of_two_retrievers(
    scifact_sample, tmp_path, capsys
):
    require("sentence_transformers")
    source, truth = scifact_sample
    ws = tmp_path / "ws"
    assert main(["chunk", str(source / "corpus"), "--chunker", "prechunked", "-w", str(ws)]) == 0
    assert (
        main(["import", str(source / "imported-qrels.tsv"), "-Q", str(source / "imported.jsonl"), "-w", str(ws)]) == 0
    )
    assert main(["propose", "-Q", str(source / "proposed.jsonl"), "--no-judge", "-w", str(ws), "--json"]) == 0
    capsys.readouterr()
    base = tmp_path / "proposed"
    shutil.copytree(ws, base)
    covered = []  # (draw, retriever, metric, the human figure, inside the interval, the interval)
    widths = []  # precision@10's interval widths per draw and retriever: prediction-powered, human-only (right?)
    for seed in range(DRAWS):  # each draw a review of its own on the same pools
        ws = tmp_path / f"draw-{seed}"
        shutil.copytree(base, ws)
        assert main(["select", "--budget", str(BUDGET), "--seed", str(seed), "-w", str(ws), "--json"]) == 0
        selection = json.loads(capsys.readouterr().out)
        answered = answer_drawn_through_api(
            ws, lambda item: truth.get(item["query"]["query_id"], {}).get(item["chunk"]["chunk_id"], 0)
        )
        assert answered == selection["drawn"] and 80 <= answered <= 120  # Poisson sampling: about the budget
        with open_workspace(ws) as opened:
            assert len(review_store.queued_items(opened.db)) == answered  # nothing but the drawn pairs was queued
        assert main(["estimate", "-w", str(ws), "--json"]) == 0  # after a review, as the README says (and run does)
        refit = json.loads(capsys.readouterr().out)
        assert refit["verdicts"] == answered and refit["validation"]["labels"] == answered
        assert main(["release", "-w", str(ws), "--version", "1.0.0", "--json"]) == 0
        manifest = json.loads((ws / "releases" / "1.0.0" / "manifest.json").read_text(encoding="utf-8"))
        carried = manifest["counts"]["estimates"]
        assert carried["queries"] == IMPORTED + PROPOSED and carried["drawn_answered"] == answered
        assert carried["estimated_only"] > 10 * answered  # most of the labels are estimates

        human = read_qrels(source / "qrels.tsv")
        rows = (ws / "releases" / "1.0.0" / "estimates.jsonl").read_text(encoding="utf-8").splitlines()
        carried_pairs = {(row["query-id"], row["corpus-id"]) for row in map(json.loads, rows)}
        proposed = {json.loads(line)["_id"] for line in (source / "proposed.jsonl").read_text().splitlines()}
        for retriever in ("bm25", "dense"):
            run_file = tmp_path / f"{retriever}.trec"
            assert main(["baseline", "--release", f"{ws}@1.0.0", "--retriever", retriever, "--out", str(run_file)]) == 0
            capsys.readouterr()
            assert main(["score", "--release", f"{ws}@1.0.0", "-r", str(run_file), "--json"]) == 0
            document = json.loads(capsys.readouterr().out)
            report, estimator = document["estimates"], document["details"]["estimator"]
            assert report["applies"] == "ppi" and report["queries"] == IMPORTED + PROPOSED
            reference = evaluate(human, read_run(run_file), "precision@10,recall@10,ndcg@10").means()
            for metric, figure in reference.items():
                ppi = estimator[metric]["ppi"]
                assert document["metrics"][metric]["kind"] == "prediction-powered"  # the figure that applies
                assert document["metrics"][metric]["mean"] == ppi["mean"]
                covered.append((seed, retriever, metric, figure, ppi["ci_low"] <= figure <= ppi["ci_high"], ppi))
                # wide where a query's few verdicts leave its totals unsure, but not so wide as to say nothing
                assert ppi["ci_high"] - ppi["ci_low"] < (0.2 if metric == "precision@10" else 0.65), (
                    retriever,
                    metric,
                    ppi,
                )
            precision = estimator["precision@10"]
            assert precision["design"].startswith("design-unbiased")
            ppi, human_only = precision["ppi"], precision["human_only"]
            human_right = human_only["ci_low"] <= reference["precision@10"] <= human_only["ci_high"]
            widths.append((ppi["ci_high"] - ppi["ci_low"], human_only["ci_high"] - human_only["ci_low"], human_right))
            top10 = [(q, c) for q, c, _, rank in read_run(run_file).ranked_rows() if rank <= 10]
            # the pool holds both retrievers' top 10
            assert all((q, c) in carried_pairs for q, c in top10 if q in proposed)
            expected = sum((q, c) in carried_pairs for q, c in top10) / len(top10)  # imported queries: their qrels only
            assert report["diagnostics"]["pool_coverage@10"] == pytest.approx(expected, abs=1e-4)
    # narrower than the human-only intervals where those hold the truth, on the whole
    right = [(ppi, human) for ppi, human, human_right in widths if human_right]
    assert right and sum(ppi for ppi, _ in right) < sum(human for _, human in right), widths
    assert len(covered) == DRAWS * 6
    misses = [
        (seed, retriever, metric, round(figure, 3), ppi)
        for seed, retriever, metric, figure, inside, ppi in covered
        if not inside
    ]
    # 95% intervals: over 3 draws x 2 retrievers x 3 metrics, a miss or two keeps the promise (one draw that reads
    # low misses for both retrievers at once: they share its verdicts)
    assert len(misses) <= 2, misses
