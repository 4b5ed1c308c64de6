"""Every crash point resumable: a stage killed with SIGKILL at a point of its run repeats no answered request on the
rerun and ends where an uninterrupted run ends. Real processes, the real openai SDK, the fault server on 127.0.0.1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from batch_server import BatchServer
from conftest import answered_requests
from fault_server import FaultServer
from test_shared_workspace import answer, chunked, labelled_state

from testset_builder.cli import main
from testset_builder.stages.release import existing_versions, load_release
from testset_builder.store import open_workspace

pytestmark = pytest.mark.slow
QUERIES = ["how is ndcg computed", "what does recall at k ignore", "why pool candidates from several retrievers"]


def body_key(body: dict) -> str:
    return json.dumps([body["model"], body["messages"], body.get("seed")], sort_keys=True)


def answered_before(db_path: Path) -> set[str]:
    """The requests the ledger holds answers for (what a rerun must not send again), keyed as the server sees them."""
    keys = set()
    for text in answered_requests(db_path):
        request = json.loads(text)
        messages = [{"role": m["role"], "content": m["content"]} for m in request["messages"]]
        keys.add(json.dumps([request["model"], messages, request.get("seed")], sort_keys=True))
    return keys


def kill_when(args: list[str], db_path: Path, answered: int, timeout: float = 120) -> set[str]:
    """Run the command and SIGKILL it once the ledger holds ``answered`` answers; what it held at the kill."""
    process = subprocess.Popen(
        [sys.executable, "-m", "testset_builder", *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + timeout
    while len(answered_before(db_path)) < answered and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process.poll() is None, "the run ended before the kill point"
    process.send_signal(signal.SIGKILL)
    process.wait()
    time.sleep(0.3)  # the server finishes what was already on the wire
    return answered_before(db_path)


def config(tmp_path: Path, server: FaultServer) -> str:
    path = tmp_path / "kill.yaml"
    path.write_text(
        f"generator: {{kind: openai, model: gpt-4o-mini, base_url: '{server.openai_url}', timeout_s: 10}}\n"
        "limits: {max_in_flight: 2, max_attempts: 2}\n"
        "synthesize: {styles: {natural: 1.0}, mine_depth: 3}\npropose: {depth: 4}\n",
        encoding="utf-8",
    )
    return str(path)


def killed_and_resumed(tmp_path: Path, capsys, stage_args: list[str], kill_at) -> None:
    """Run uninterrupted on one workspace, then killed at ``kill_at(total)`` answers and rerun on another: no
    answered request is sent again, and both end in the same state."""
    with FaultServer(answer=answer, latency=0.05) as server:
        reference, killed = chunked(tmp_path / "reference"), chunked(tmp_path / "killed")
        capsys.readouterr()
        args = [*stage_args, "--config", config(tmp_path, server)]
        assert main([*args, "--workspace", str(reference), "--json"]) == 0
        capsys.readouterr()
        total = len(server.requests)
        server.requests.clear()
        done_before = kill_when([*args, "--workspace", str(killed)], killed / "testset.db", kill_at(total))
        sent_before = len(server.requests)
        rerun = subprocess.run(
            [sys.executable, "-m", "testset_builder", *args, "--workspace", str(killed)], capture_output=True, text=True
        )
        assert rerun.returncode == 0, rerun.stderr
        after = Counter(body_key(r["body"]) for r in server.requests[sent_before:])
    assert 0 < len(done_before) < total
    assert not set(after) & done_before, "a request answered before the kill was paid for again"
    assert labelled_state(killed) == labelled_state(reference)


@pytest.mark.parametrize("share", [0.25, 0.5, 0.8])
def test_propose_killed_while_judging_resumes_paying_for_nothing_twice(tmp_path, capsys, share):
    (tmp_path / "queries.txt").write_text("\n".join(QUERIES) + "\n", encoding="utf-8")
    killed_and_resumed(
        tmp_path, capsys, ["propose", "--queries", str(tmp_path / "queries.txt")], lambda n: int(n * share)
    )


@pytest.mark.parametrize("step", ["critic", "mining"])
def test_synthesize_killed_in_the_critic_or_in_mining_resumes_paying_for_nothing_twice(tmp_path, capsys, step):
    # six questions: six generations, six critic judgments, then mining; kill half way through the step
    killed_and_resumed(
        tmp_path, capsys, ["synthesize", "-n", "6"], lambda n: 9 if step == "critic" else 12 + (n - 12) // 2
    )


def test_a_batch_sent_but_not_recorded_before_a_kill_is_never_submitted_again_unasked(tmp_path, capsys):
    with BatchServer(create_delay=4.0) as server:
        root = chunked(tmp_path / "ws")
        capsys.readouterr()
        path = tmp_path / "batch.yaml"
        path.write_text(
            f"generator: {{kind: openai, model: gpt-4o-mini, base_url: '{server.openai_url}'}}\n"
            "synthesize: {styles: {natural: 1.0}, critic: false, mine: false}\n",
            encoding="utf-8",
        )
        args = [
            sys.executable,
            "-m",
            "testset_builder",
            "synthesize",
            "-n",
            "3",
            "--batch",
            "--workspace",
            str(root),
            "--config",
            str(path),
        ]
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not server.batches and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.5)
        process.send_signal(signal.SIGKILL)  # the provider has the batch; the workspace never learnt its id
        process.wait()
        again = subprocess.run(args, capture_output=True, text=True)
        assert again.returncode == 1 and "was interrupted" in again.stderr and "--forget-interrupted" in again.stderr
        assert len(server.batches) == 1, "the same requests were submitted twice"
        forget = [
            sys.executable,
            "-m",
            "testset_builder",
            "resume",
            "--forget-interrupted",
            "--workspace",
            str(root),
            "--config",
            str(path),
            "--json",
        ]
        assert json.loads(subprocess.run(forget, capture_output=True, text=True, check=True).stdout)["forgotten"] == 1


def test_a_release_killed_at_any_point_leaves_nothing_in_the_way_and_a_rerun_completes(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(
            json.dumps({"_id": f"d{i}", "text": f"passage {i} " + "about ranking " * 40}) + "\n" for i in range(4000)
        ),
        encoding="utf-8",
    )
    queries, qrels = tmp_path / "q.jsonl", tmp_path / "qrels.tsv"
    queries.write_text("".join(json.dumps({"_id": f"q{i}", "text": f"passage {i}"}) + "\n" for i in range(50)))
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(50)))
    ws = tmp_path / "ws"
    assert main(["chunk", str(corpus), "--workspace", str(ws), "--chunker", "prechunked", "--json"]) == 0
    assert main(["import", str(qrels), "--queries", str(queries), "--workspace", str(ws), "--json"]) == 0
    capsys.readouterr()
    (ws / "releases" / ".partial-1.0.0-999999").mkdir(parents=True)  # what a killed release of another process left
    release = [sys.executable, "-m", "testset_builder", "release", "--version", "1.0.0", "--workspace", str(ws)]
    for delay in (0.4, 0.8, 1.2, 1.6):
        process = subprocess.Popen(release, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait()
        if (ws / "releases" / "1.0.0").exists():
            break
    if not (ws / "releases" / "1.0.0").exists():
        done = subprocess.run(release, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (ws / "releases").iterdir()) == ["1.0.0"]
    released = load_release(ws / "releases" / "1.0.0")  # every file checked against the manifest
    assert released.qrels == {f"q{i}": {f"d{i}": 1} for i in range(50)} and len(released.corpus) == 4000
    with open_workspace(ws) as workspace:
        assert existing_versions(workspace) == ["1.0.0"]
