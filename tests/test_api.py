"""The library under the commands: the whole pipeline from Python with no CLI in the call chain, and a retriever
callable scored on a release exactly as its TREC run is."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testset_builder import api
from testset_builder.cli import main
from testset_builder.errors import InputError

HERE = Path(__file__).resolve().parent


@pytest.mark.slow
def test_the_whole_pipeline_runs_from_python_with_no_cli_in_the_call_chain(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"),) if p)}
    done = subprocess.run(
        [sys.executable, str(HERE / "python_pipeline.py"), str(tmp_path)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    first, second = seen["first"], seen["second"]
    assert first["status"] == "review" and first["waiting"] > 0  # drawn pairs wait for a reviewer
    assert seen["seen"] == list(first["stages"]) == ["chunk", "plan", "synthesize", "propose", "select"]
    assert seen["answered"] >= first["waiting"]
    assert second["status"] == "done" and second["release"] == "0.1.0" and seen["report_exists"]
    assert second["stages"]["synthesize"]["result"]["calls"] == 0  # nothing paid twice
    assert second["stages"]["estimate"]["result"]["verdicts"] == seen["graded"]  # pairs; questions are kept
    assert 0 <= seen["recall"] <= 1
    assert seen["cli_modules"] == []  # no command in the call chain: the CLI was never imported


@pytest.fixture
def released(tmp_path, capsys):
    """A small workspace released: queries over the docs corpus, each labelled on two chunks."""
    from testset_builder.records import Judgment, JudgmentSource, JudgmentStatus, Query, QueryOrigin
    from testset_builder.stages.release import write_release
    from testset_builder.store import open_workspace, rows

    docs = HERE.parent / "examples" / "corpus"
    assert main(["chunk", str(docs), "--workspace", str(tmp_path / "ws"), "--json"]) == 0
    capsys.readouterr()
    with open_workspace(tmp_path / "ws") as ws:
        chunks = [c for c, *_ in rows.live_chunk_rows(ws.db)]
        texts = {c: text for c, _, text in rows.live_chunk_rows(ws.db)}
        queries = [Query(query_id=f"q{n}", text=" ".join(texts[chunks[n * 3]].split()[:8]), origin=QueryOrigin.real)
                   for n in range(8)]  # fmt: skip
        labels = [
            Judgment(judgment_id=f"j{n}-{m}", query_id=f"q{n}", chunk_id=chunks[n * 3 + m], grade=2 - m,
                     source=JudgmentSource.human, reviewer="ann", status=JudgmentStatus.final)
            for n in range(8) for m in range(2)
        ]  # fmt: skip
        with ws.transaction() as db:
            rows.put_queries(db, queries)
            rows.add_judgments(db, labels)
        write_release(ws, "1.0.0")
    return f"{tmp_path / 'ws'}@1.0.0", chunks


def test_a_retriever_callable_scores_exactly_as_its_trec_run(released, tmp_path, capsys):
    spec, _ = released
    loaded = api.load_release(spec)
    bm25 = api.baseline(spec, "bm25", k=20, out=tmp_path / "bm25.trec")
    ranked = bm25.run.to_dict()
    by_text = {loaded.queries[q]: ranked.get(q, {}) for q in loaded.queries}

    def retriever(text: str) -> list[tuple[str, float]]:  # a Python retriever: (chunk id, score), best first
        by_id = sorted(by_text[text].items(), reverse=True)  # ties broken as trec_eval does: the larger id first
        return sorted(by_id, key=lambda pair: -pair[1])

    def ids_only(text: str) -> list[str]:  # or just chunk ids, in rank order
        return [chunk for chunk, _ in retriever(text)]

    metrics = "recall@10,ndcg@10,mrr,map,precision@5"
    from_callable = api.score(spec, retriever, metrics, ci=False)
    from_ids = api.score(spec, ids_only, metrics, ci=False)
    assert main(["score", "--release", spec, "--run", str(tmp_path / "bm25.trec"), "-m", metrics, "--json",
                 "--no-ci"]) == 0  # fmt: skip
    from_file = json.loads(capsys.readouterr().out)
    for name in ("recall@10", "ndcg@10", "mrr", "map", "precision@5"):
        expected = from_file["metrics"][name]["mean"]
        assert from_callable.metrics[name]["mean"] == pytest.approx(expected, abs=1e-12), name
        assert from_ids.metrics[name]["mean"] == pytest.approx(expected, abs=1e-12), name
    assert from_file["metrics"]["recall@10"]["mean"] > 0  # the run finds some of the labels: not a vacuous match


def test_a_langchain_or_llamaindex_retriever_is_scored_through_its_own_ids(released):
    spec, _ = released
    loaded = api.load_release(spec)
    relevant = {loaded.queries[q]: list(by) for q, by in loaded.qrels.items()}

    class Document:  # the shapes those libraries return, without importing them
        def __init__(self, chunk_id):
            self.metadata = {"chunk_id": chunk_id}

    class LangChainLike:
        def invoke(self, text):
            return [Document(c) for c in relevant[text]]

    class Node:
        def __init__(self, chunk_id, score):
            self.node, self.score = type("N", (), {"metadata": {"chunk_id": chunk_id}, "node_id": "x"})(), score

    class LlamaIndexLike:
        def retrieve(self, text):
            return [Node(c, 1.0 / (n + 1)) for n, c in enumerate(relevant[text])]

    class Unscored(LlamaIndexLike):  # a retriever giving no scores: its order is the ranking
        def retrieve(self, text):
            return [Node(c, None) for c in relevant[text]]

    wrapped_all = (api.langchain_retriever(LangChainLike()), api.llamaindex_retriever(LlamaIndexLike()),
                   api.llamaindex_retriever(Unscored()))  # fmt: skip
    for wrapped in wrapped_all:
        scored = api.score(spec, wrapped, "recall@10,ndcg@10", ci=False)
        assert scored.metrics["recall@10"]["mean"] == 1.0 and scored.metrics["ndcg@10"]["mean"] == 1.0


def test_a_retriever_giving_something_else_is_refused_with_what_it_gave(released):
    spec, _ = released
    with pytest.raises(Exception, match="gave int"):
        api.score(spec, lambda text: [1, 2], "recall@10", ci=False)

    def sketch(text):  # a stub whose body is still `...`
        ...

    with pytest.raises(InputError, match="the retriever gave NoneType for query"):
        api.score(spec, sketch, "recall@10", ci=False)


def test_compare_from_python_is_the_compare_command_and_takes_a_retriever(released, tmp_path, capsys):
    spec, _ = released
    deep = api.baseline(spec, "bm25", k=20, out=tmp_path / "deep.trec")
    api.baseline(spec, "bm25", k=3, out=tmp_path / "shallow.trec")
    files = [str(tmp_path / "deep.trec"), str(tmp_path / "shallow.trec")]
    compared = api.compare(spec, files, "recall@10,ndcg@10", resamples=1000, fail_if_worse=["recall@10:0.0"])
    assert main(["compare", *files, "--release", spec, "-m", "recall@10,ndcg@10", "--resamples", "1000",
                 "--fail-if-worse", "recall@10:0.0", "--json"]) in (0, 5)  # fmt: skip
    document = json.loads(capsys.readouterr().out)
    assert document["gate"].pop("exit_code") == (5 if compared.failed else 0)  # the command adds its exit code
    assert compared.as_dict() == document
    ranked = deep.run.to_dict()
    texts = api.load_release(spec).queries
    by_text = {texts[q]: ranked.get(q, {}) for q in texts}
    with_callable = api.compare(spec, [files[0], lambda text: sorted(by_text[text], key=by_text[text].get)[::-1]])
    assert len(with_callable.runs) == 2 and not with_callable.failed


def test_the_queue_from_python_is_what_queue_json_prints(queued_workspace, capsys):
    ws = queued_workspace
    config = api.load_config(workspace=str(ws.root))
    head = api.queue(config, limit=2)
    assert main(["queue", "--workspace", str(ws.root), "--limit", "2", "--json"]) == 0
    assert head.as_dict() == json.loads(capsys.readouterr().out)
    assert head.total == 3 and [i["query_id"] for i in head.items] == ["r0", "r1"]  # priorities 3, 2, then 1
    assert head.items[0]["grade"] == 2 and head.items[0]["rationale"] == "looks right"
    assert len(api.queue(config, limit=5).items) == 3
    listed = api.queue(config, questions=True)
    assert listed.total == 1 and listed.questions[0]["query_id"] == "s0"
    assert listed.questions[0]["status"] == "not reviewed"  # nobody kept it (nor dropped it) yet
    assert main(["queue", "--workspace", str(ws.root), "--questions", "--json"]) == 0
    assert listed.as_dict() == json.loads(capsys.readouterr().out)


def test_a_run_asked_for_more_questions_than_the_corpus_gives_makes_what_it_can_says_so_and_goes_on(
    tmp_path, monkeypatch
):
    from fake_provider import FakeProvider, demo_config, stand_in_model

    import testset_builder.llm.roles as roles

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name, topic in (("one.md", "Recall"), ("two.md", "Precision")):  # two documents, a chunk each
        (corpus / name).write_text(
            f"# {topic}\n\n{topic} at k is a share of the chunks a retriever returns in its top k results; it is "
            f"averaged over the queries of a test set, each query counting the same, and reported with an interval "
            f"so that a reader knows how far the figure could move on another sample of queries.\n",
            encoding="utf-8",
        )
    monkeypatch.setattr(roles, "make_provider", lambda config: FakeProvider(stand_in_model()))
    config = api.load_config(
        demo_config(), workspace=tmp_path / "ws", run__sources=[str(corpus)], synthesize__questions=6,
        run__baselines=["bm25"],
    )  # fmt: skip
    done = api.run(config, review=False)
    made = done.stages["synthesize"]
    assert 0 < made.made < 6 and made.incomplete and not made.retryable
    assert "eligible chunks was used" in made.shortfall
    assert done.status == "done" and done.release and Path(done.report).exists()  # it went on to release and report
    assert not done.fell_short("synthesize") and done.as_dict()["stages"]["synthesize"]["fell_short"] is False


def test_runs_report_names_the_configs_runs_as_propose_pooled_them_and_a_clashing_baseline_apart(tmp_path):
    def trec(name: str, tag: str) -> Path:
        path = tmp_path / name
        path.write_text(f"q1 Q0 c1 1 1.0 {tag}\n", encoding="utf-8")
        return path

    baselines = [trec("bm25-0.1.0.trec", "bm25"), trec("dense-0.1.0.trec", "dense")]
    mine = [trec("mine.trec", "bm25")]  # a user's own BM25 run, tagged as the baseline is
    from testset_builder.export import read_runs

    assert [r.name for r in read_runs(mine)] == ["bm25"]  # what propose pooled it as: run:bm25
    assert [r.name for r in api.pipeline.report_runs(baselines, mine)] == ["bm25 (baseline)", "dense", "bm25"]
