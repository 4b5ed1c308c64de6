"""One workspace, several runs: two processes never pay twice, roles keep their own models, a cost limit stops a
run cleanly, and what the judge sends decides what is judged again. Through the real openai SDK against the
fault-injecting server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from fault_server import FaultServer

from testset_builder.cli import EXIT_OK, EXIT_PARTIAL, main
from testset_builder.store import open_workspace, rows

DOCS = Path(__file__).resolve().parents[1] / "examples" / "corpus"
QUERIES = ["how is ndcg computed", "what does recall at k ignore", "why pool candidates from several retrievers"]


def answer(body: dict) -> str:
    """Questions for the generator (a question per passage and seed), verdicts for the judge (a JSON schema)."""
    if body.get("response_format"):
        return json.dumps({"rationale": "the passage answers it", "score": 3})
    digest = hashlib.sha256(json.dumps(body["messages"], sort_keys=True).encode() + str(body.get("seed")).encode())
    passage = body["messages"][-1]["content"].split("Passage: ", 1)[-1]
    words = sorted({w.lower() for w in passage.split() if w.isalpha() and len(w) > 4})
    at = int(digest.hexdigest()[:8], 16)
    first, second = words[at % len(words)], words[(at + 1 + at % (len(words) - 1)) % len(words)]
    return f"How are {first} and {second} related?"


def config(tmp_path: Path, server: FaultServer, extra: str = "", name: str = "shared.yaml") -> str:
    path = tmp_path / name
    path.write_text(
        f"generator: {{kind: openai, model: gpt-4o-mini, base_url: '{server.openai_url}', timeout_s: 10}}\n"
        "limits: {max_in_flight: 2, max_attempts: 2}\n"
        "synthesize: {styles: {natural: 1.0}, mine_depth: 2}\n"
        "propose: {depth: 3}\n" + extra,
        encoding="utf-8",
    )
    return str(path)


def chunked(root: Path) -> Path:
    assert (
        main(
            [
                "chunk",
                str(DOCS),
                "--workspace",
                str(root),
                "--chunker",
                "markdown",
                "--size",
                "600",
                "--overlap",
                "60",
                "--json",
            ]
        )
        == 0
    )
    return root


def cli_process(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "testset_builder", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def bodies(server: FaultServer) -> Counter:
    return Counter(json.dumps(r["body"], sort_keys=True) for r in server.requests)


def labelled_state(root: Path) -> tuple[set, set]:
    with open_workspace(root, create=False) as ws:
        queries = {(q, rows.get_query(ws.db, q).text) for q in {j.query_id for j in rows.iter_judgments(ws.db)}}
        judgments = {
            (j.judgment_id, j.query_id, j.chunk_id, j.grade, j.source.value) for j in rows.iter_judgments(ws.db)
        }
    return queries, judgments


def run_twice_at_once(args: list[str], workspace: Path) -> list[subprocess.CompletedProcess]:
    """The second process starts once the first holds the workspace (so it must wait, on any machine's timing)."""
    first = cli_process(*args)
    lock, deadline = workspace / "testset.lock", time.monotonic() + 120
    while first.poll() is None and time.monotonic() < deadline:
        if lock.exists() and f'"pid": {first.pid}' in lock.read_text(encoding="utf-8", errors="replace"):
            break
        time.sleep(0.01)
    processes = [first, cli_process(*args)]
    outputs = [p.communicate(timeout=300) for p in processes]
    return [subprocess.CompletedProcess(p.args, p.returncode, out, err) for p, (out, err) in zip(processes, outputs)]


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["synthesize", "propose"])
def test_two_processes_on_one_workspace_send_every_request_once_and_end_as_one_run_would(stage, tmp_path, capsys):
    with FaultServer(answer=answer, latency=0.15) as server:
        shared, single = chunked(tmp_path / "shared"), chunked(tmp_path / "single")
        capsys.readouterr()
        (tmp_path / "queries.txt").write_text("\n".join(QUERIES) + "\n", encoding="utf-8")
        stage_args = ["-n", "4"] if stage == "synthesize" else ["--queries", str(tmp_path / "queries.txt")]
        args = [stage, *stage_args, "--config", config(tmp_path, server)]

        both = run_twice_at_once([*args, "--workspace", str(shared)], shared)
        sent = bodies(server)
        server.requests.clear()
        assert main([*args, "--workspace", str(single), "--json"]) == EXIT_OK
        alone = bodies(server)

    assert [done.returncode for done in both] == [EXIT_OK, EXIT_OK], [done.stderr for done in both]
    assert max(sent.values()) == 1, "a request was sent twice"
    assert set(sent) == set(alone), "the two runs together sent exactly what one run sends"
    assert "waiting:" not in both[0].stderr and "in use by pid" in both[1].stderr  # the second waited for the first
    assert labelled_state(shared) == labelled_state(single)
    indexes = sorted(p.name for p in (shared / "indexes").iterdir())
    assert not [name for name in indexes if ".partial" in name] and any(name.startswith("bm25-") for name in indexes)


HOLD = """
import sys
from testset_builder.store import open_workspace
wait_s = None if sys.argv[2] == "forever" else float(sys.argv[2])
ws = open_workspace(sys.argv[1], wait_s=wait_s, on_wait=lambda holder: print("waiting for", holder, flush=True))
try:
    with ws.exclusive("synthesize"):
        print("held", flush=True)
except Exception as error:
    print(type(error).__name__, error)
"""


def test_a_second_process_waits_while_the_workspace_is_held_and_can_give_up_with_a_clear_error(tmp_path):
    root = str(tmp_path / "ws")
    with open_workspace(root) as ws:
        with ws.exclusive("propose"):
            refused = subprocess.run(
                [sys.executable, "-c", HOLD, root, "0.5"], capture_output=True, text=True, timeout=60
            )
            waiter = subprocess.Popen([sys.executable, "-c", HOLD, root, "forever"], stdout=subprocess.PIPE, text=True)
            threading.Event().wait(3.0)
            assert waiter.poll() is None, "the second process must wait while the first holds the workspace"
        out, _ = waiter.communicate(timeout=60)
    assert "WorkspaceBusyError" in refused.stdout and "(propose, since" in refused.stdout
    assert "gave up after waiting" in refused.stdout
    assert out.startswith("waiting for pid") and out.rstrip().endswith("held")


def test_a_hold_is_reentrant_within_a_process_and_released_by_the_last_holder(tmp_path):
    root = str(tmp_path / "ws")
    with open_workspace(root) as ws:
        with ws.exclusive("synthesize"), ws.exclusive("judge"):
            pass
        assert (
            subprocess.run([sys.executable, "-c", HOLD, root, "5"], capture_output=True, text=True).stdout == "held\n"
        )


def test_a_cost_limit_stops_synthesize_with_the_summary_and_exit_3_and_a_rerun_goes_on_without_paying_twice(
    tmp_path, capsys
):
    with FaultServer(answer=answer, usage=(1200, 60)) as server:
        root = chunked(tmp_path / "ws")
        capsys.readouterr()
        args = [
            "synthesize",
            "-n",
            "12",
            "--no-mine",
            "--no-critic",
            "--workspace",
            str(root),
            "--config",
            config(tmp_path, server),
        ]
        code = main([*args, "--max-cost-usd", "0.0012"])
        first = capsys.readouterr()
        paid = bodies(server)
        code_again = main(args)
        again = capsys.readouterr()
        repaid = bodies(server) - paid

    assert code == EXIT_PARTIAL
    assert "of 12 questions" in first.out and "LLM:" in first.out and "not asked for lack of budget" in first.out
    assert "stopped by the cost limit" in first.err and "error:" not in first.err
    assert 0 < sum(paid.values()) < 12
    assert code_again == EXIT_OK and "12 of 12 questions" in again.out
    assert not set(repaid) & set(paid), "the rerun paid again for an answered request"


def test_the_generator_and_the_judge_each_use_their_own_model_and_the_ledger_shows_it(tmp_path, capsys):
    with FaultServer(answer=answer) as server:
        root = chunked(tmp_path / "ws")
        roles = config(tmp_path, server, "judge: {model: gpt-4.1-mini}\n")
        assert main(["synthesize", "-n", "3", "--workspace", str(root), "--config", roles, "--json"]) == EXIT_OK
        capsys.readouterr()
        sent = list(server.requests)
    assert main(["costs", "--workspace", str(root), "--json"]) == EXIT_OK
    ledger = {row["model"]: row for row in json.loads(capsys.readouterr().out) if row["stage"] == "synthesize"}
    generations = [r for r in sent if not r["body"].get("response_format")]
    judgments = [r for r in sent if r["body"].get("response_format")]
    assert {r["body"]["model"] for r in generations} == {"gpt-4o-mini"}
    assert {r["body"]["model"] for r in judgments} == {"gpt-4.1-mini"}
    assert ledger["gpt-4o-mini"]["calls"] == len(generations) and ledger["gpt-4.1-mini"]["calls"] == len(judgments) > 0
    with open_workspace(root, create=False) as ws:
        made = list(rows.iter_judgments(ws.db))
    assert {j.lineage.model for j in made if j.source.value == "llm"} == {"gpt-4.1-mini"}
    assert {j.lineage.model for j in made if j.source.value == "synthetic-source"} == {"gpt-4o-mini"}


def test_an_index_built_by_two_processes_at_once_is_kept_whole(tmp_path, monkeypatch):
    import os

    from testset_builder.retrieval import bm25

    ids, texts = [f"c{i}" for i in range(50)], [f"passage about topic{i:03d} and retrieval" for i in range(50)]
    real_rename = os.rename

    def other_process_finishes_first(source, target):
        monkeypatch.setattr(bm25.os, "rename", real_rename)
        bm25.BM25Index.cached(tmp_path, ids, texts)  # the other process's build lands first
        real_rename(source, target)  # ours now finds the target there

    monkeypatch.setattr(bm25.os, "rename", other_process_finishes_first)
    index = bm25.BM25Index.cached(tmp_path, ids, texts)
    assert index.search(["q"], ["topic007"], k=1).to_dict()["q"].keys() == {"c7"}
    assert [p.name for p in tmp_path.iterdir() if ".partial" in p.name] == []
