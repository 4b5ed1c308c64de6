"""SciFact as a production log: its real test queries asked by simulated users of a BM25 "production" system, with
feedback and answer failures planted; import -> failure-first draw -> simulated review -> release, and the
release's online signals recover what was planted."""

from __future__ import annotations

import json

import numpy as np

from testset_builder.cli import main
from testset_builder.export import read_qrels
from testset_builder.export.queries import derived_id
from testset_builder.metrics import evaluate
from testset_builder.metrics.online import online_signals
from testset_builder.records import Judgment, JudgmentSource, JudgmentStatus
from testset_builder.retrieval import BM25Index
from testset_builder.stages.logs.failures import select_logged
from testset_builder.stages.logs.importer import import_logs
from testset_builder.stages.release import load_release, write_release
from testset_builder.stages.review import tag_failure
from testset_builder.store import open_workspace, rows

GENERATION_FAILURES = 0.2  # of the queries whose relevant abstract was retrieved, the answer still failed


def test_a_scifact_log_goes_import_select_review_release_and_its_signals_match_what_was_planted(
    scifact_dir, tmp_path, capsys
):
    ws_root = tmp_path / "ws"
    assert main(["chunk", str(scifact_dir / "corpus.jsonl"), "--chunker", "prechunked", "-w", str(ws_root)]) == 0
    capsys.readouterr()
    qrels = read_qrels(scifact_dir / "qrels" / "test.tsv").to_dict()
    texts = {}
    for line in (scifact_dir / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record["_id"] in qrels:
            texts[record["_id"]] = record["text"]
    order = sorted(texts)
    rng = np.random.default_rng(17)
    with open_workspace(ws_root, create=False) as ws:
        ids, passages = rows.live_chunk_passages(ws.db)
        production = BM25Index(ids, passages).search(order, [texts[q] for q in order], k=10)
    ranked = production.to_dict()
    top = {q: sorted(ranked.get(q, {}), key=ranked[q].get, reverse=True) for q in order}
    found = {q: any(c in qrels[q] for c in top[q]) for q in order}
    generation = {q: found[q] and rng.random() < GENERATION_FAILURES for q in order}
    records = []
    for q in order:  # a few thousand records: each query asked 1 to 15 times
        failed = not found[q] or generation[q]
        for _ in range(int(rng.integers(1, 16))):
            down = rng.random() < (0.8 if failed else 0.05)
            clicked = found[q] and not generation[q] and rng.random() < 0.6
            records.append(
                {"query": texts[q], "retrieved": top[q], "thumbs": "down" if down else "up", "cited": top[q][:2],
                 "clicked": top[q][:1] if clicked else []}
            )  # fmt: skip
    rng.shuffle(records)
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")

    with open_workspace(ws_root, create=False) as ws:
        imported = import_logs(ws, log)
        assert imported.records == len(records) > 2000 and imported.unknown_ids == 0
        drawn = select_logged(ws, limit=120, seed=3).drawn_queries
        original = {derived_id(texts[q]): q for q in order}
        judgments, n = [], 0
        for d in drawn:  # the reviewers: SciFact's human labels, and the failure they can see
            q = original[d["query_id"]]
            for chunk_id, grade in qrels[q].items():
                n += 1
                judgments.append(Judgment(
                    judgment_id=f"h{n}", query_id=d["query_id"], chunk_id=chunk_id, grade=min(2, grade + 1),
                    source=JudgmentSource.human, reviewer="ann", status=JudgmentStatus.final,
                ))  # fmt: skip
            tag = "retrieval" if not found[q] else "generation" if generation[q] else "none"
            tag_failure(ws, "ann", d["query_id"], tag, f"tag-{q}")
        with ws.transaction() as db:
            rows.add_judgments(db, judgments)
        released = load_release(write_release(ws, "1.0.0").path)

    signals = online_signals(released.logs, released.qrels, released.production, k=10, resamples=1000)
    truth_recall = float(np.mean(list(evaluate(read_qrels(scifact_dir / "qrels" / "test.tsv"), production,
                                                "recall@10").per_query["recall@10"])))  # fmt: skip
    print(f"\nplanted recall@10 {truth_recall:.3f}; estimate {signals['recall']}")
    recall = signals["recall"]
    assert recall["ci_low"] <= truth_recall <= recall["ci_high"]
    shares = {
        "retrieval": np.mean([not found[q] for q in order]),
        "generation": np.mean([generation[q] for q in order]),
    }
    for tag, share in shares.items():
        figure = signals["failures"][tag]
        print(f"planted {tag} share {share:.3f}; estimate {figure}")
        assert figure["ci_low"] <= share <= figure["ci_high"]
