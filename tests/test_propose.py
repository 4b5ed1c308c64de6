"""Propose: reading real queries, pooling candidates, judging them into a prioritised review queue, auditing qrels."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from fake_provider import FakeProvider, digit_completion

from testset_builder.cli import main
from testset_builder.config import JudgingConfig, ProposeConfig
from testset_builder.errors import InputError
from testset_builder.export.queries import derived_id, read_queries
from testset_builder.labels.judge import Judge
from testset_builder.labels.queue import review_priority
from testset_builder.llm import LLMClient, PriceTable, Usage
from testset_builder.llm.roles import Role
from testset_builder.records import Judgment, JudgmentSource
from testset_builder.retrieval.pool import pool, pool_recall
from testset_builder.stages.propose import audit, propose
from testset_builder.store import open_workspace, rows
from testset_builder.store import review as review_store
from testset_builder.tables import Qrels, Run

QUERIES = ["how is ndcg computed", "what does the response cache do", "how are chunk ids made stable"]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def workspace(docs_workspace):
    return docs_workspace


def relevance_by_overlap(request) -> object:
    """A deterministic stand-in judge: grade by how many query words the passage repeats."""
    prompt = request.prompt
    query = prompt.rsplit("Query: ", 1)[1].split("\n", 1)[0].lower().split()
    passage = prompt.rsplit("Passage: ", 1)[1].lower()
    hits = sum(word in passage for word in query if len(word) > 3)
    p2 = min(0.9, 0.1 + 0.3 * hits)
    p1 = (1 - p2) * (0.25 if hits == 0 else 0.5)  # no word in common: more likely not relevant than relevant
    return digit_completion({"2": p2, "1": p1, "0": 1 - p2 - p1})


# reading queries ------------------------------------------------------------------------------------------------
def test_a_csv_row_with_an_unquoted_comma_is_an_error_naming_its_line_not_a_cut_query(tmp_path):
    path = write(tmp_path / "q.csv", 'id,text\nq1,"why, oh why, is espresso sour"\nq2,why, oh why, is espresso sour\n')
    with pytest.raises(InputError, match=r"q.csv:3: 4 fields where the header has 2; quote a text"):
        read_queries(path)
    quoted = write(tmp_path / "ok.csv", 'id,text\nq1,"why, oh why, is espresso sour"\nq2,"a ""quoted"" word"\n')
    assert [q.text for q in read_queries(quoted).queries] == ["why, oh why, is espresso sour", 'a "quoted" word']


def test_a_query_too_long_for_any_prompt_is_refused_naming_its_line_not_left_to_fail_as_a_retry(tmp_path):
    path = write(tmp_path / "q.txt", "a fine query\n" + "word " * 2000 + "\n")
    result = read_queries(path)
    assert [q.text for q in result.queries] == ["a fine query"]
    assert (result.skipped[0].line, result.skipped[0].reason) == (
        2,
        "a query of 9999 characters (at most 2000: shorten it)",
    )
    with pytest.raises(InputError, match=r"q.txt:2: a query of 9999 characters"):
        read_queries(path, strict=True)


def test_an_unclosed_quote_in_a_csv_is_an_error_not_a_swallowed_file(tmp_path):
    path = write(tmp_path / "q.csv", 'id,text\nq1,"never closed\nq2,second\nq3,third\n')
    with pytest.raises(InputError, match=r"q.csv:\d+: not valid CSV \(unexpected end of data; an unclosed quote\?\)"):
        read_queries(path)


def test_queries_from_jsonl_keep_their_ids_and_duplicates_are_merged_and_counted(tmp_path):
    path = write(
        tmp_path / "q.jsonl",
        '{"_id": "a", "text": "What is BM25?"}\n\n{"_id": "b", "text": "what is  bm25?"}\n'
        '{"id": "c", "query": "dense retrieval"}\n',
    )
    result = read_queries(path)
    assert [(q.query_id, q.text) for q in result.queries] == [("a", "What is BM25?"), ("c", "dense retrieval")]
    assert result.merged == 1 and not result.skipped


def test_queries_from_text_lines_get_ids_derived_from_their_text(tmp_path):
    result = read_queries(write(tmp_path / "q.txt", "how is ndcg computed\n\n  How is NDCG computed \nwhat is MRR\n"))
    assert [q.query_id for q in result.queries] == [derived_id("how is ndcg computed"), derived_id("what is mrr")]
    assert result.merged == 1 and derived_id("what is MRR") == derived_id("what  is mrr")


def test_queries_from_csv_use_the_named_columns(tmp_path):
    path = write(tmp_path / "q.csv", 'qid,question,clicks\n7,"recall, precision?",3\n8,map,1\n')
    assert [(q.query_id, q.text) for q in read_queries(path).queries] == [("7", "recall, precision?"), ("8", "map")]
    assert read_queries(path, id_field="clicks", text_field="question").queries[0].query_id == "3"
    with pytest.raises(InputError, match="no text column"):
        read_queries(path, text_field="body")


def test_bad_query_lines_are_skipped_with_their_line_and_fatal_when_strict(tmp_path):
    path = write(tmp_path / "q.jsonl", '{"_id": "a", "text": "ok"}\n{not json\n{"_id": "b"}\n[1]\n')
    result = read_queries(path)
    assert [str(s).split(": ", 1)[0] for s in result.skipped] == [f"{path}:2", f"{path}:3", f"{path}:4"]
    with pytest.raises(InputError, match=r"q.jsonl:2: not JSON"):
        read_queries(path, strict=True)


def test_unusable_query_files_are_refused_clearly(tmp_path):
    with pytest.raises(InputError, match="binary"):
        read_queries(write(tmp_path / "b.txt", "a\x00b"))
    (tmp_path / "l.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(InputError, match="not UTF-8"):
        read_queries(tmp_path / "l.txt")
    with pytest.raises(InputError, match="no queries"):
        read_queries(write(tmp_path / "e.txt", "\n \n"))
    with pytest.raises(InputError, match="two different texts"):
        read_queries(write(tmp_path / "d.jsonl", '{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n'))


# pools and priority ---------------------------------------------------------------------------------------------
def test_the_pool_is_each_retrievers_top_k_plus_the_fused_top_k_with_retriever_and_rank():
    bm25 = Run.from_dict({"q": {"a": 9.0, "b": 8.0, "c": 7.0, "d": 6.0}})
    dense = Run.from_dict({"q": {"d": 0.9, "e": 0.8, "a": 0.7}})
    candidates = pool({"bm25": bm25, "dense": dense}, depth=2, fused_depth=1)
    assert {(c.retriever, c.chunk_id, c.rank) for c in candidates} == {
        ("bm25", "a", 1),
        ("bm25", "b", 2),
        ("dense", "d", 1),
        ("dense", "e", 2),
        ("rrf", "a", 1),
    }
    assert pool_recall(candidates, {"q": {"a", "c"}}) == 0.5
    assert {c.retriever for c in pool({"bm25": bm25}, depth=2)} == {"bm25"}  # one retriever: nothing to fuse


def judgment(grade: int, probs: dict[int, float] | None) -> Judgment:
    return Judgment(
        judgment_id="j", query_id="q", chunk_id="c", grade=grade, source=JudgmentSource.llm, grade_probs=probs
    )


def test_review_priority_puts_uncertain_likely_relevant_proposals_first_and_confident_irrelevant_last():
    coin_flip_relevant = review_priority(judgment(1, {0: 0.3, 1: 0.4, 2: 0.3}))
    confident_relevant = review_priority(judgment(2, {0: 0.0, 1: 0.02, 2: 0.98}))
    unknown_relevant = review_priority(judgment(2, None))
    unknown_irrelevant = review_priority(judgment(0, None))
    confident_irrelevant = review_priority(judgment(0, {0: 0.98, 1: 0.02, 2: 0.0}))
    assert coin_flip_relevant > unknown_relevant > confident_relevant > unknown_irrelevant > confident_irrelevant
    assert review_priority(judgment(0, None), disagreement=True) > coin_flip_relevant


# the stage ------------------------------------------------------------------------------------------------------
def run_propose(workspace, queries, judge, **settings):
    return asyncio.run(propose(workspace, queries, judge, ProposeConfig(retrievers=["bm25"], **settings)))


def test_propose_pools_judges_and_queues_every_pair_and_a_rerun_spends_nothing(workspace, tmp_path):
    queries = read_queries(write(tmp_path / "q.txt", "\n".join(QUERIES)))
    provider = FakeProvider(relevance_by_overlap)
    judge = Judge(Role(LLMClient(provider, workspace, "propose"), "fake-model"))
    summary = run_propose(workspace, queries, judge, depth=5)
    pairs = workspace.db.execute("SELECT COUNT(DISTINCT query_id || chunk_id) FROM candidates").fetchone()[0]
    assert (
        summary.new_queries == 3 and summary.pool_max <= 5 and summary.judging.judged == pairs == len(provider.history)
    )
    assert sum(summary.judging.grades.values()) == pairs and summary.judging.queued == pairs
    stored = list(rows.iter_judgments(workspace.db))
    assert len(stored) == pairs and all(j.status.value == "pending" and j.source.value == "llm" for j in stored)
    queue = review_store.queued_items(workspace.db)
    assert [r.priority for r in queue] == sorted((r.priority for r in queue), reverse=True)
    by_pair = {(j.query_id, j.chunk_id): j for j in stored}
    assert queue[0].priority == review_priority(by_pair[(queue[0].query_id, queue[0].chunk_id)])
    ranks = workspace.db.execute("SELECT retriever, MIN(rank), MAX(rank) FROM candidates GROUP BY retriever").fetchall()
    assert [tuple(r) for r in ranks] == [("bm25", 1, 5)]

    again = run_propose(
        workspace, queries, Judge(Role(LLMClient(provider, workspace, "propose"), "fake-model")), depth=5
    )
    assert len(provider.history) == pairs and again.judging.judged == 0 and again.judging.already_judged == pairs
    assert again.new_queries == 0 and again.judging.queued == 0 and again.judging.grades == summary.judging.grades
    assert len(list(rows.iter_judgments(workspace.db))) == pairs


def test_changing_what_the_judge_sends_judges_again_and_changing_nothing_judges_nothing(workspace, tmp_path):
    queries = read_queries(write(tmp_path / "q.txt", "\n".join(QUERIES)))
    provider = FakeProvider(relevance_by_overlap)
    client = LLMClient(provider, workspace, "propose")

    def judged_with(settings: JudgingConfig):
        before = len(provider.history)
        summary = run_propose(workspace, queries, Judge(Role(client, "fake-model"), settings), depth=4)
        return summary.judging, len(provider.history) - before

    first, calls = judged_with(JudgingConfig())
    assert first.judged == first.pairs == calls > 0
    unchanged, calls = judged_with(JudgingConfig())
    assert (unchanged.judged, unchanged.already_judged, calls) == (0, first.pairs, 0)
    clipped, calls = judged_with(JudgingConfig(max_passage_chars=150))  # the docs' chunks are longer than that
    assert clipped.judged == first.pairs == calls and all(
        "..." in r.prompt.rsplit("Passage: ", 1)[1] for r in provider.history[-calls:]
    )
    without_logprobs, calls = judged_with(JudgingConfig(logprobs=False))
    assert without_logprobs.judged == first.pairs == calls
    assert all(r.top_logprobs is None for r in provider.history[-calls:])
    assert len(list(rows.iter_judgments(workspace.db))) == 3 * first.pairs


def test_a_query_id_reused_with_another_text_is_refused(workspace, tmp_path):
    run_propose(
        workspace, read_queries(write(tmp_path / "a.jsonl", '{"_id": "q1", "text": "how is ndcg computed"}\n')), None
    )
    with pytest.raises(InputError, match="already in the workspace with another text"):
        run_propose(
            workspace, read_queries(write(tmp_path / "b.jsonl", '{"_id": "q1", "text": "what is mrr"}\n')), None
        )


def test_propose_on_an_empty_workspace_says_to_chunk_first(tmp_path):
    with open_workspace(tmp_path / "empty") as ws, pytest.raises(InputError, match="run `testset-builder chunk"):
        run_propose(ws, read_queries(write(tmp_path / "q.txt", "x")), None)


def test_a_budget_stops_judging_keeps_what_was_done_and_a_rerun_finishes(workspace, tmp_path):
    queries = read_queries(write(tmp_path / "q.txt", "\n".join(QUERIES)))

    def expensive(request):  # 2,000 input tokens a call: about $0.0003 at gpt-4o-mini's price
        return relevance_by_overlap(request).model_copy(update={"usage": Usage(input_tokens=2000, output_tokens=1)})

    provider = FakeProvider(expensive)
    prices = PriceTable.load()
    model = "gpt-4o-mini"  # priced, so the budget applies
    tight = LLMClient(provider, workspace, "propose", prices=prices, max_cost_usd=0.002, max_in_flight=1)
    first = run_propose(workspace, queries, Judge(Role(tight, model)), depth=5)
    assert first.judging.not_judged_budget > 0 and first.judging.judged > 0
    assert first.judging.judged + first.judging.not_judged_budget == first.judging.pairs
    paid = len(provider.history)
    second = run_propose(
        workspace, queries, Judge(Role(LLMClient(provider, workspace, "propose", prices=prices), model)), depth=5
    )
    assert (
        second.judging.already_judged == first.judging.judged
        and second.judging.judged == first.judging.not_judged_budget
    )
    assert len(provider.history) == paid + first.judging.not_judged_budget


def test_audit_flags_pairs_where_the_judge_and_the_labels_disagree(workspace, tmp_path):
    chunk_ids, texts = rows.live_chunk_passages(workspace.db)
    ndcg = next(c for c, t in zip(chunk_ids, texts) if "ndcg" in t.lower())
    unrelated = next(c for c, t in zip(chunk_ids, texts) if "ndcg" not in t.lower() and "computed" not in t.lower())
    queries = read_queries(write(tmp_path / "q.jsonl", '{"_id": "q1", "text": "how is ndcg computed"}\n'))
    qrels = Qrels.from_dict({"q1": {ndcg: 1, unrelated: 2}})
    judge = Judge(Role(LLMClient(FakeProvider(relevance_by_overlap), workspace, "audit"), "fake-model"))
    summary = asyncio.run(audit(workspace, qrels, queries, judge))
    assert summary.pairs == 2 and summary.judged == 2 and summary.agreement == 0.5
    assert [(d["chunk_id"], d["label"], d["judge"]) for d in summary.disagreements] == [(unrelated, 2, 0)]
    assert review_store.queued_items(workspace.db, limit=1)[0].chunk_id == unrelated  # disagreements first
    audited = {d["chunk_id"]: d for d in summary.audited}  # every pair, with the tool's estimate beside the label
    assert audited.keys() == {ndcg, unrelated} and summary.estimate_model.startswith("prior:")
    assert (audited[ndcg]["label"], audited[ndcg]["judge"]) == (1, 2)
    assert audited[ndcg]["p_relevant"] > audited[unrelated]["p_relevant"]  # the chunk about ndcg looks likelier
    with pytest.raises(InputError, match="1 chunk id"):
        asyncio.run(audit(workspace, Qrels.from_dict({"q1": {"nope": 1}}), queries, judge))


# the command ----------------------------------------------------------------------------------------------------
def test_the_propose_command_pools_without_a_judge_and_prints_json(workspace, tmp_path, capsys):
    path = write(tmp_path / "q.txt", "\n".join([*QUERIES, QUERIES[0].upper()]))
    code = main(
        [
            "propose",
            "--queries",
            str(path),
            "--workspace",
            str(workspace.root),
            "--no-judge",
            "--retrievers",
            "bm25",
            "--depth",
            "4",
            "--json",
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["queries"] == 3 and report["merged_duplicates"] == 1 and report["pool_max"] == 4
    assert report["retrievers"] == ["bm25"] and report["judging"]["judged"] == 0
    from testset_builder.retrieval import dense_available

    if dense_available():
        assert report["estimate"] is None  # a BM25-only pool: no dense encoding behind the user's back


def test_propose_with_every_signal_estimates_every_pooled_pair(workspace, tmp_path, capsys):
    from testset_builder.retrieval import dense_available
    from testset_builder.store import estimates

    path = write(tmp_path / "q.txt", "\n".join(QUERIES))
    args = ["propose", "--queries", str(path), "--workspace", str(workspace.root), "--no-judge", "--json"]
    assert main([*args, "--depth", "3"]) == 0
    report = json.loads(capsys.readouterr().out)
    pooled = {(q, c) for q, c in workspace.db.execute("SELECT query_id, chunk_id FROM candidates")}
    assert report["retrievers"] == (["bm25", "dense"] if dense_available() else ["bm25"])
    assert report["estimate"]["pairs"] == len(pooled) and report["estimate"]["model"].startswith("prior:")
    assert set(estimates.estimates(workspace.db)) == pooled


def test_runs_given_to_propose_join_the_pool_at_their_ranks_and_chunks_the_workspace_lacks_are_counted(
    workspace, tmp_path, capsys
):
    from testset_builder.store import estimates

    path = write(tmp_path / "q.txt", "\n".join(QUERIES))
    query = derived_id(QUERIES[0])
    live = [c for (c,) in workspace.db.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id DESC LIMIT 4")]
    ranked = [live[0], "no-such-chunk", live[1], live[2], live[3]]  # ranks 1-5; the run's top 3 pool two chunks
    run = write(
        tmp_path / "mine.trec",
        "".join(f"{query} Q0 {c} {r} {10 - r} mine\n" for r, c in enumerate(ranked, 1)) + "elsewhere Q0 x 1 1 mine\n",
    )
    args = ["propose", "--queries", str(path), "--workspace", str(workspace.root), "--no-judge", "--json"]
    assert main([*args, "--depth", "2", "--runs", str(run), "--run-depth", "3"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["runs"] == [{"name": "run:mine", "queries": 1, "candidates": 2, "unknown_chunks": 1}]
    pooled = workspace.db.execute("SELECT chunk_id, rank FROM candidates WHERE retriever = 'run:mine'").fetchall()
    assert sorted(map(tuple, pooled)) == sorted([(live[0], 1), (live[1], 3)])
    if report["estimate"]:  # the run's pairs are estimated with the rest of the pool
        assert {(query, live[0]), (query, live[1])} <= set(estimates.estimates(workspace.db))

    other = write(tmp_path / "other.trec", f"{query} Q0 doc-from-another-corpus 1 1 theirs\n")
    assert main([*args, "--runs", str(other)]) != 0
    assert "names none of this workspace's chunks" in capsys.readouterr().err

    # the same run pooled again, changed: pooling only adds (as for every retriever), pairs take their new ranks
    write(run, "".join(f"{query} Q0 {c} {r} {10 - r} mine\n" for r, c in enumerate(reversed(live), 1)))
    assert main([*args, "--depth", "2", "--runs", str(run), "--run-depth", "3"]) == 0
    capsys.readouterr()
    pooled = workspace.db.execute("SELECT chunk_id, rank FROM candidates WHERE retriever = 'run:mine'").fetchall()
    assert sorted(map(tuple, pooled)) == sorted([(live[3], 1), (live[2], 2), (live[1], 3), (live[0], 1)])


def test_a_run_with_results_for_none_of_the_queries_is_refused_before_anything_is_stored(workspace, tmp_path, capsys):
    path = write(tmp_path / "q.txt", "\n".join(QUERIES))  # plain text: the ids are derived from the texts
    chunk = workspace.db.execute("SELECT chunk_id FROM chunks LIMIT 1").fetchone()[0]
    run = write(tmp_path / "mine.trec", f"my-query-1 Q0 {chunk} 1 1 mine\n")
    args = ["propose", "--queries", str(path), "--workspace", str(workspace.root), "--no-judge"]
    assert main([*args, "--runs", str(run)]) != 0
    said = " ".join(capsys.readouterr().err.split())
    assert "run 'mine' has results for none of these queries (its query ids: my-query-1)" in said
    assert workspace.db.execute("SELECT COUNT(*) FROM queries").fetchone()[0] == 0


def test_the_propose_command_refuses_a_missing_workspace_and_an_unknown_retriever(tmp_path, capsys):
    path = write(tmp_path / "q.txt", "x")
    assert main(["propose", "--queries", str(path), "--workspace", str(tmp_path / "none"), "--no-judge"]) == 1
    with open_workspace(tmp_path / "ws"):
        pass
    assert (
        main(
            [
                "propose",
                "--queries",
                str(path),
                "--workspace",
                str(tmp_path / "ws"),
                "--no-judge",
                "--retrievers",
                "splade",
            ]
        )
        == 1
    )
    assert "propose.retrievers: unknown retriever 'splade'; use bm25, dense or both" in capsys.readouterr().err


def test_the_queue_command_lists_proposals_highest_priority_first(workspace, tmp_path, capsys):
    queries = read_queries(write(tmp_path / "q.txt", "\n".join(QUERIES)))
    run_propose(
        workspace,
        queries,
        Judge(Role(LLMClient(FakeProvider(relevance_by_overlap), workspace, "propose"), "fake-model")),
        depth=3,
    )
    assert main(["queue", "--workspace", str(workspace.root), "--limit", "4", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["total"] == review_store.queue_size(workspace.db) and len(listed["items"]) == 4
    priorities = [item["priority"] for item in listed["items"]]
    assert priorities == sorted(priorities, reverse=True) and all(item["query"] in QUERIES for item in listed["items"])
    assert all(0.0 <= item["p_relevant"] <= 1.0 and item["grade"] in (0, 1, 2) for item in listed["items"])
    assert main(["queue", "--workspace", str(workspace.root)]) == 0 and "review queue" in capsys.readouterr().out


def test_the_propose_command_pools_only_by_default_when_the_judge_is_the_embedded_model(
    docs_workspace, tmp_path, capsys, monkeypatch
):
    import testset_builder.llm.roles as roles

    def no_model(config):  # the embedded judge must not even start
        raise AssertionError("the embedded judge was started")

    monkeypatch.setattr(roles, "make_provider", no_model)
    queries = Path(__file__).resolve().parents[1] / "examples" / "queries.txt"
    root = str(docs_workspace.root)
    args = ["propose", "--queries", str(queries), "--workspace", root, "--config", "quickstart", "--retrievers", "bm25"]
    assert main([*args, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["judging"]["judged"] == 0 and document["candidates"] > 0
    assert main(args) == 0
    assert "pools only (the embedded local judge is near chance" in capsys.readouterr().err
