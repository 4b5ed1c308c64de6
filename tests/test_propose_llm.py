"""Propose and audit through real SDKs: the packaged local model on real SciFact queries, and the OpenAI SDK
against the fault-injecting server for retries and answers that fail validation."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from fault_server import FaultServer

from testset_builder.cli import main
from testset_builder.config import ChunkingConfig, ProposeConfig
from testset_builder.corpus.ingest import ingest
from testset_builder.corpus.loaders import load_sources
from testset_builder.export import read_qrels
from testset_builder.export.queries import read_queries
from testset_builder.labels.judge import Judge, JudgePair, coherent_grade
from testset_builder.llm import LLMClient
from testset_builder.llm.roles import Role
from testset_builder.stages.propose import propose
from testset_builder.store import open_workspace, rows
from testset_builder.store import review as review_store

SCIFACT_QUERIES = 3


@pytest.fixture(scope="module")
def scifact_sample(scifact_dir, tmp_path_factory):
    """A BEIR folder with the first test queries, their relevant abstracts and 300 others (the real texts)."""
    qrels = read_qrels(scifact_dir / "qrels" / "test.tsv").to_dict()
    chosen = sorted(qrels, key=int)[:SCIFACT_QUERIES]
    relevant = {d for q in chosen for d in qrels[q]}
    folder = tmp_path_factory.mktemp("scifact-sample")
    with (
        (scifact_dir / "corpus.jsonl").open(encoding="utf-8") as source,
        (folder / "corpus.jsonl").open("w", encoding="utf-8") as corpus,
    ):
        others = 0
        for line in source:
            doc_id = json.loads(line)["_id"]
            if doc_id in relevant or others < 300:
                corpus.write(line)
                others += doc_id not in relevant
    texts = {q["_id"]: q["text"] for q in map(json.loads, (scifact_dir / "queries.jsonl").open(encoding="utf-8"))}
    (folder / "real-queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": texts[q]}) + "\n" for q in chosen), encoding="utf-8"
    )
    (folder / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{g}\n" for q in chosen for d, g in qrels[q].items()),
        encoding="utf-8",
    )
    return folder


def sample_workspace(folder, path):
    workspace = open_workspace(path)
    ingest(workspace, load_sources([folder]), ChunkingConfig(chunker="prechunked", size=1, overlap=0), [folder])
    return workspace


def test_the_local_model_judges_real_scifact_pools_end_to_end_and_a_rerun_calls_nothing(
    scifact_sample, local_server, tmp_path
):
    from testset_builder.llm.local_provider import LocalProvider

    queries = read_queries(scifact_sample / "real-queries.jsonl")
    with sample_workspace(scifact_sample, tmp_path / "ws") as ws:
        judge = Judge(Role(LLMClient(LocalProvider(local_server), ws, "propose", max_in_flight=2), "gemma-3-270m"))
        summary = asyncio.run(propose(ws, queries, judge, ProposeConfig(retrievers=["bm25"], depth=3)))
        judgments = list(rows.iter_judgments(ws.db))
        assert summary.judging.judged == len(judgments) == summary.judging.pairs == SCIFACT_QUERIES * 3
        assert summary.judging.failed == 0 and summary.judging.calls == len(judgments)
        for judgment in judgments:  # the base model's answer is read from its log-probabilities
            assert judgment.grade_probs is not None and math.isclose(
                sum(judgment.grade_probs.values()), 1.0, abs_tol=1e-4
            )
            assert judgment.grade == coherent_grade(judgment.grade_probs)[0]
            assert (
                judgment.lineage.provider == "local:gemma-3-270m@sha256:a5fd3b62230aa5ec"
                and judgment.lineage.model == "gemma-3-270m"  # its name, never the server's path to the file
                and judgment.lineage.prompt_name == "judge/few-shot-completion"
            )
        assert review_store.queue_size(ws.db) == len(judgments)
        rerun = Judge(Role(LLMClient(LocalProvider(local_server), ws, "propose"), "gemma-3-270m"))
        again = asyncio.run(propose(ws, queries, rerun, ProposeConfig(retrievers=["bm25"], depth=3)))
        assert again.judging.calls == 0 and again.judging.already_judged == len(judgments)


def test_the_chat_judge_through_the_openai_sdk_gets_a_valid_verdict_from_llama_server(local_server, tmp_path):
    from testset_builder.llm.local_provider import LocalProvider

    with open_workspace(tmp_path / "ws") as ws:
        judge = Judge(Role(LLMClient(LocalProvider(local_server), ws, "propose"), "gemma-3-270m", prompt_style="chat"))
        pair = JudgePair(
            "q",
            "does vitamin D lower fracture risk",
            "c",
            "Vitamin D supplements reduced fractures by 22% in older adults.",
        )
        judgment = asyncio.run(judge.judge(pair))
    assert judgment.grade in (0, 1, 2) and judgment.lineage.prompt_name == "judge/umbrela-chat"
    assert judgment.grade_probs is None or math.isclose(sum(judgment.grade_probs.values()), 1.0, abs_tol=1e-4)


def openai_config(tmp_path, server) -> str:
    path = tmp_path / "fault.yaml"
    path.write_text(
        f"llm:\n  provider:\n    kind: openai\n    model: gpt-4o-mini\n    base_url: {server.openai_url}\n    "
        "timeout_s: 5\n  limits:\n    max_attempts: 4\n",
        encoding="utf-8",
    )
    return str(path)


def test_propose_through_the_openai_sdk_retries_faults_and_counts_answers_that_fail_validation(
    scifact_sample, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-PLANTED-propose-0042")
    first_query = json.loads((scifact_sample / "real-queries.jsonl").read_text().splitlines()[0])["text"]

    def answer(body):  # every pair of the first query gets prose instead of JSON, re-ask included
        return (
            "not json at all"
            if any(first_query in m["content"] for m in body["messages"])
            else json.dumps({"rationale": "on topic", "score": 3})
        )

    schedule = [("status", 429, 0, "slow down"), ("status", 503, None, "unavailable")]
    with FaultServer(schedule, answer=answer) as server, sample_workspace(scifact_sample, tmp_path / "ws") as ws:
        ws_root = str(ws.root)
        ws.close()
        argv = [
            "propose",
            "--queries",
            str(scifact_sample / "real-queries.jsonl"),
            "--workspace",
            ws_root,
            "--config",
            openai_config(tmp_path, server),
            "--retrievers",
            "bm25",
            "--depth",
            "2",
            "--json",
        ]
        code = main(argv)
    report = json.loads(capsys.readouterr().out)
    judging = report["judging"]
    assert code == 3  # finished, but two pairs failed validation after their re-asks
    assert judging["failed"] == 2 and judging["judged"] == judging["pairs"] - 2 == SCIFACT_QUERIES * 2 - 2
    assert judging["grades"]["2"] == judging["judged"] and "JudgeVerdict validation" in judging["failures"][0]
    assert len(server.requests) == judging["pairs"] + 2 + 2  # two re-asks, two retried faults
    with open_workspace(ws_root) as ws:
        logged = "\n".join(str(tuple(r)) for r in ws.db.execute("SELECT * FROM llm_calls"))
    assert "PLANTED" not in logged


def test_audit_against_scifact_labels_through_the_cli(scifact_sample, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-audit")

    def verdict(body):
        return json.dumps({"rationale": "r", "score": 0 if "Fracture" in body["messages"][-1]["content"] else 3})

    with FaultServer(answer=verdict) as server, sample_workspace(scifact_sample, tmp_path / "ws") as ws:
        ws.close()
        out = tmp_path / "disagreements.tsv"
        code = main(
            [
                "audit",
                "--qrels",
                str(scifact_sample / "qrels.tsv"),
                "--queries",
                str(scifact_sample / "real-queries.jsonl"),
                "--workspace",
                str(ws.root),
                "--config",
                openai_config(tmp_path, server),
                "--out",
                str(out),
                "--json",
            ]
        )
    report = json.loads(capsys.readouterr().out)
    labelled = sum(1 for line in (scifact_sample / "qrels.tsv").read_text().splitlines()[1:])
    assert code == 0 and report["pairs"] == report["judged"] == labelled
    assert len(report["audited"]) == labelled and all(0 <= d["p_relevant"] <= 1 for d in report["audited"])
    flagged = out.read_text().splitlines()
    assert flagged[0].split("\t") == ["query-id", "corpus-id", "label", "judge", "confidence", "rationale"]
    assert len(flagged) - 1 == len(report["disagreements"]) == round((1 - report["agreement"]) * labelled)


def test_propose_with_batch_submits_once_and_a_rerun_after_resume_judges_from_the_cache(
    scifact_sample, tmp_path, monkeypatch, capsys
):
    from batch_server import BatchServer

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-batch")

    def verdict(body):
        return json.dumps({"rationale": "r", "score": 2})

    with (
        BatchServer(polls_until_done=1, answer=verdict) as server,
        sample_workspace(scifact_sample, tmp_path / "ws") as ws,
    ):
        ws.close()
        config = openai_config(tmp_path, server)
        argv = [
            "propose",
            "--queries",
            str(scifact_sample / "real-queries.jsonl"),
            "--workspace",
            str(ws.root),
            "--config",
            config,
            "--retrievers",
            "bm25",
            "--depth",
            "2",
            "--json",
        ]
        assert main([*argv, "--batch"]) == 0
        submitted = json.loads(capsys.readouterr().out)["judging"]
        assert submitted["batch_id"] and submitted["judged"] == 0 and submitted["calls"] == 0
        assert main([*argv, "--batch"]) == 0  # nothing new to submit while the batch runs
        assert json.loads(capsys.readouterr().out)["judging"]["batch_id"] == "(already submitted)"
        assert len([c for c in server.calls if c[0] == "POST"]) == 2  # one file upload, one batch: not submitted twice
        assert main(["resume", "--workspace", str(ws.root), "--config", config, "--json"]) == 0
        assert '"answered": 6' in capsys.readouterr().out
        assert main(argv) == 0
        judging = json.loads(capsys.readouterr().out)["judging"]
    assert (
        judging["judged"] == 6 and judging["calls"] == 0 and judging["cache_hits"] == 6 and judging["grades"]["1"] == 6
    )
