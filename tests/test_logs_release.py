"""A release of logged queries carries their logs and the production run, and its report gives the online signals."""

from __future__ import annotations

import json
import random
from pathlib import Path

from testset_builder.cli import main
from testset_builder.records import Judgment, JudgmentSource, JudgmentStatus
from testset_builder.stages.logs.failures import select_logged
from testset_builder.stages.logs.importer import import_logs
from testset_builder.stages.release import load_release, write_release
from testset_builder.stages.review import tag_failure
from testset_builder.store import logs as stored_logs
from testset_builder.store import rows

TOPICS = ["recall at k", "ndcg gain", "review queue", "release version", "bm25 ranking", "chunk spans"]


def label_production_tops(ws, drawn: list[dict], grade_of) -> dict:
    """A reviewer labels each drawn query's production top result, the n-th with ``grade_of(n)``; the production
    run, returned."""
    run = stored_logs.production_run(ws.db)
    with ws.transaction() as db:
        rows.add_judgments(
            db,
            [
                Judgment(
                    judgment_id=f"h-{d['query_id']}", query_id=d["query_id"], chunk_id=run[d["query_id"]][0][1],
                    grade=grade_of(n), source=JudgmentSource.human, reviewer="ann", status=JudgmentStatus.final,
                )
                for n, d in enumerate(drawn)
            ],
        )  # fmt: skip
    return run


def test_logged_queries_release_with_their_logs_and_production_run_and_the_report_weighs_them(
    docs_workspace, tmp_path, capsys
):
    ws = docs_workspace
    ids = [chunk_id for chunk_id, _, _ in rows.live_chunk_rows(ws.db)]
    pick = random.Random(5)
    records = [
        {"query": f"{pick.choice(TOPICS)} question {i}", "retrieved": pick.sample(ids, 3),
         "thumbs": "down" if i % 3 == 0 else "up", "cited": ids[:1], "clicked": ids[:1] if i % 2 else []}
        for i in range(40)
    ]  # fmt: skip
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    import_logs(ws, log)
    drawn = select_logged(ws, limit=12, seed=1).drawn_queries
    run = label_production_tops(ws, drawn, lambda n: 2 if n % 2 else 0)
    tags = ["retrieval", "generation", "none"]
    for n, d in enumerate(drawn):  # and tags each drawn query's failure
        tag_failure(ws, "ann", d["query_id"], tags[n % 3], f"tag-{n}")
    summary = write_release(ws, "1.0.0")
    released = load_release(summary.path)

    assert set(released.logs) == {d["query_id"] for d in drawn}  # the released queries that were logged
    for d in drawn:
        row = released.logs[d["query_id"]]
        assert row["drawn"] is True and round(row["probability"], 6) == d["probability"]
        assert row["frequency"] == 1 and "thumbs_down" in row
    assert [released.logs[d["query_id"]]["failure"] for d in drawn] == [tags[n % 3] for n in range(len(drawn))]
    production = released.production.to_dict()
    assert set(production) == set(released.logs)
    for query_id, ranked in production.items():
        assert sorted(ranked, key=ranked.get, reverse=True) == [c for _, c, _ in run[query_id]]  # the logged order

    out = tmp_path / "report.html"
    assert main(["report", "--release", str(summary.path), "--out", str(out), "--json"]) == 0
    online = json.loads(capsys.readouterr().out)["online"]
    assert online["drawn"] == len(drawn) and online["recall"]["queries"] == sum(1 for n, _ in enumerate(drawn) if n % 2)
    assert online["recall"]["unweighted"] == 1.0  # each labelled relevant chunk is the production top result
    assert online["failures"]["retrieval"]["queries"] == len(drawn)
    assert 'data-table="online"' in out.read_text(encoding="utf-8")


def test_run_imports_a_log_draws_its_failures_proposes_them_and_releases_them_and_a_rerun_adds_nothing(
    tmp_path, capsys, embedded_model
):
    """`run` with `run.logs`: the log is imported, a failure-first draw picks queries, propose pools them, and the
    release carries their logs; the rerun imports nothing and draws nothing (the embedded model writes the two
    synthetic questions, so this needs the local extra; with no reviewer here, they are released unchecked)."""
    import yaml

    docs = Path(__file__).resolve().parents[1] / "examples" / "corpus"
    log = tmp_path / "log.jsonl"
    topics = ["how is ndcg computed", "what does recall count", "how do I review pairs", "what is a release"]
    log.write_text(
        "".join(json.dumps({"query": f"{t} ({i})", "thumbs": "down" if i % 2 else "up"}) + "\n"
                for i, t in enumerate(topics * 3)),
        encoding="utf-8",
    )  # fmt: skip
    config = tmp_path / "set.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "workspace": "ws", "generator": {"kind": "local"}, "release": {"hold_unreviewed": False},
                "synthesize": {"questions": 2, "critic": False, "mine": False, "styles": {"natural": 1.0}},
                "run": {"sources": [str(docs)], "logs": "log.jsonl", "log_limit": 4, "review_budget": 0,
                        "baselines": ["bm25"]},
            }
        ),
        encoding="utf-8",
    )  # fmt: skip
    assert main(["run", str(config), "--dry-run", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)["plan"]["steps"]
    assert ("propose", "judging logs") in {(s["stage"], s["step"]) for s in planned}

    assert main(["run", str(config), "--no-review", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert [s for s in first["stages"] if "logs" in s] == ["import-logs", "select-logs", "propose-logs"]
    drawn = first["stages"]["select-logs"]["result"]["drawn"]
    assert first["stages"]["propose-logs"]["result"]["queries"] == drawn > 0
    released = load_release(tmp_path / "ws" / "releases" / first["release"])
    assert len(released.logs) == drawn  # the log had no retrieval: no production run to carry

    assert main(["run", str(config), "--no-review", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["stages"]["import-logs"]["result"]["already_imported"] and "select-logs" not in again["stages"]


def test_logged_sessions_are_kept_as_hashes_and_score_resamples_real_queries_by_session(
    docs_workspace, tmp_path, capsys
):
    from testset_builder.stages.logs.importer import session_key

    ws = docs_workspace
    ids = [chunk_id for chunk_id, _, _ in rows.live_chunk_rows(ws.db)]
    sessions = {i: f"alice@example.com-{i // 4}" for i in range(24)}  # four queries a session; ids that are personal
    records = [
        {"query": f"{TOPICS[i % len(TOPICS)]} asked in turn {i}", "retrieved": ids[i % 5 : i % 5 + 3],
         "session": sessions[i], "timestamp": f"2026-11-01T10:{i:02d}:00Z"}
        for i in range(24)
    ]  # fmt: skip
    records.append({**records[0], "session": "someone-else", "timestamp": "2026-11-02T10:00:00Z"})  # asked again
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    import_logs(ws, log)
    drawn = select_logged(ws, limit=24, seed=1).drawn_queries
    run = label_production_tops(ws, drawn, lambda n: 2 if n % 3 else 0)
    summary = write_release(ws, "1.0.0")
    released = load_release(summary.path)
    turn = {q: int(t.rsplit(" ", 1)[1]) for q, t in released.queries.items()}
    stored = {q["query_id"]: q["session"] for q in stored_logs.logged_queries(ws.db)}
    for query_id in released.logs:  # the earliest record's session, as a hash; the later one is passed over
        assert stored[query_id] == session_key(sessions[turn[query_id]])
    numbered = {}
    for query_id in sorted(released.logs):  # numbered afresh for the release, in the order of the queries' ids
        numbered.setdefault(sessions[turn[query_id]], f"s{len(numbered) + 1}")
        assert released.logs[query_id]["session"] == numbered[sessions[turn[query_id]]]
    meta = (Path(summary.path) / "meta" / "logs.jsonl").read_text(encoding="utf-8")
    assert "alice" not in meta and "someone-else" not in meta and stored[query_id] not in meta  # nor their hashes

    trec = tmp_path / "run.trec"
    trec.write_text("".join(f"{q} Q0 {c} {r} {1 / r} prod\n" for q, ranked in run.items() for r, c, _ in ranked))
    assert main(["score", "--release", str(summary.path), "--run", str(trec), "--json"]) == 0
    clusters = json.loads(capsys.readouterr().out)["clusters"]
    n, by_session = len(released.queries), len({row["session"] for row in released.logs.values()})
    assert 1 < by_session < n == len(released.logs)  # the drawn queries, several to a session
    assert (clusters["by"], clusters["clusters"], clusters["queries_alone"]) == ("session", by_session, 0)
    assert f"by logged session: {n} queries in {by_session} clusters" in clusters["description"]
    assert main(["score", "--release", str(summary.path), "--run", str(trec), "--cluster-by", "query", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["clusters"]["clusters"] == n


def test_a_vector_store_holding_a_document_twice_gives_a_release_that_loads_and_scores(
    tmp_path, capsys, embedded_model
):
    """A LangChain store that ingested a document twice returns its text twice, under two ids the workspace does not
    know: both results match one chunk. `run` folds them into one result at its best rank and says how many it
    folded; the release's production run lists each chunk once, and `score --release`, `report` and
    `api.load_release` all read it (the embedded model proposes, so this needs the local extra)."""
    import yaml

    from testset_builder import api

    docs = Path(__file__).resolve().parents[1] / "examples" / "corpus"
    config = tmp_path / "set.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "workspace": "ws", "generator": {"kind": "local"}, "release": {"hold_unreviewed": False},
                "synthesize": {"questions": 2, "critic": False, "mine": False, "styles": {"natural": 1.0}},
                "run": {"sources": [str(docs)], "logs": "log.jsonl", "log_limit": 8, "review_budget": 0,
                        "baselines": ["bm25"]},
            }
        ),
        encoding="utf-8",
    )  # fmt: skip
    assert main(["chunk", str(docs), "--config", str(config), "--json"]) == 0  # the store the app indexes
    capsys.readouterr()
    with api.open_workspace(tmp_path / "ws") as ws:
        passages = dict(zip(*rows.live_chunk_passages(ws.db)))
    texts = list(passages.values())
    topics = ["how is ndcg computed", "what does recall count", "how do I review pairs", "what is a release"]
    records, expected = [], {}
    for i, topic in enumerate(topics * 2):
        twice, other = texts[i % len(texts)], texts[(i + 3) % len(texts)]
        retrieved = [{"id": f"uuid-{i}-a", "text": twice}, {"id": f"uuid-{i}-b", "text": other},
                     {"id": f"uuid-{i}-c", "text": twice}]  # fmt: skip
        records.append({"query": f"{topic} ({i})", "retrieved": retrieved, "thumbs": "down"})
        expected[f"{topic} ({i})"] = [twice, other]  # the repeat folded into its first, best, rank
    (tmp_path / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert main(["run", str(config), "--no-review", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    imported = first["stages"]["import-logs"]["result"]
    assert (imported["records"], imported["results"], imported["results_folded"]) == (8, 24, 8)
    release = tmp_path / "ws" / "releases" / first["release"]
    released = api.load_release(str(release))
    assert released.production is not None and released.production_note is None
    production = released.production.to_dict()
    assert production and set(production) <= set(released.logs)
    for query_id, scored in production.items():
        ranked = sorted(scored, key=scored.get, reverse=True)
        assert [passages[c] for c in ranked] == expected[released.queries[query_id]]

    trec = tmp_path / "production.trec"
    trec.write_text((release / "runs" / "production.trec").read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["score", "--release", str(release), "--run", str(trec), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main(["report", "--release", str(release), "--out", str(tmp_path / "r.html"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["online"]["logged_queries"] == len(released.logs)
    assert main(["run", str(config), "--no-review", "--json"]) == 0  # the rerun loads the release it wrote
    assert json.loads(capsys.readouterr().out)["stages"]["import-logs"]["result"]["already_imported"]


def test_a_release_whose_production_run_repeats_a_pair_still_loads_and_scores_another_run(
    docs_workspace, tmp_path, capsys
):
    """A release written before repeats were folded lists a chunk twice for a query in runs/production.trec. It is
    immutable, so loading it keeps each chunk at its best rank and says so; scoring another run against it works."""
    from testset_builder._hashing import file_sha256

    ws = docs_workspace
    ids = [chunk_id for chunk_id, _, _ in rows.live_chunk_rows(ws.db)]
    records = [{"query": f"{TOPICS[i]} question", "retrieved": ids[i : i + 3], "thumbs": "down"} for i in range(4)]
    log = tmp_path / "log.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    import_logs(ws, log)
    drawn = select_logged(ws, limit=4, seed=1).drawn_queries
    run = label_production_tops(ws, drawn, lambda n: 2)
    path = Path(write_release(ws, "1.0.0").path)
    production = path / "runs" / "production.trec"
    query_id, ranked = sorted(run.items())[0]
    repeated = f"{query_id} Q0 {ranked[0][1]} 4 0.25 production\n"  # its top chunk again, lower down
    production.write_text(production.read_text(encoding="utf-8") + repeated, encoding="utf-8")
    manifest = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    manifest["files"]["runs/production.trec"] = file_sha256(production)
    (path / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")

    released = load_release(path)
    assert "1 chunks twice" in released.production_note
    assert released.production.to_dict()[query_id][ranked[0][1]] == 1.0  # its best rank's score
    trec = tmp_path / "run.trec"
    trec.write_text("".join(f"{q} Q0 {c} {r} {1 / r} prod\n" for q, rs in run.items() for r, c, _ in rs))
    assert main(["score", "--release", str(path), "--run", str(trec), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main(["report", "--release", str(path), "--out", str(tmp_path / "r.html"), "--json"]) == 0
    assert "twice" in json.loads(capsys.readouterr().out)["online"]["production_note"]
