"""A run killed with SIGKILL half way repeats no completed request on rerun and ends with the same answers."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from conftest import answered_requests
from fault_server import FaultServer

JOB = Path(__file__).with_name("llm_job.py")
N = 200


def completed_prompts(db_path: Path) -> set[str]:
    return {json.loads(request)["messages"][0]["content"] for request in answered_requests(db_path)}


def test_a_rerun_after_kill_9_repeats_no_completed_request_and_gives_the_same_answers(tmp_path):
    with FaultServer(latency=0.02) as server:
        uninterrupted = tmp_path / "clean.json"
        subprocess.run(
            [sys.executable, str(JOB), str(tmp_path / "clean"), server.openai_url, str(uninterrupted), str(N)],
            check=True,
        )
        server.requests.clear()

        workspace, answers = tmp_path / "killed", tmp_path / "answers.json"
        job = subprocess.Popen([sys.executable, str(JOB), str(workspace), server.openai_url, str(answers), str(N)])
        deadline = time.monotonic() + 120
        while len(completed_prompts(workspace / "testset.db")) < N // 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        job.kill()
        job.wait()
        time.sleep(0.5)  # let the server finish reading what was already on the wire
        done_before_kill = completed_prompts(workspace / "testset.db")
        sent_before_kill = len(server.requests)
        assert N // 2 <= len(done_before_kill) < N and not answers.exists()

        subprocess.run([sys.executable, str(JOB), str(workspace), server.openai_url, str(answers), str(N)], check=True)

    sent = Counter(r["body"]["messages"][0]["content"] for r in server.requests)
    resent = {prompt for prompt, count in sent.items() if count > 1}
    assert not (resent & done_before_kill), "a request completed before the kill was paid for again"
    assert len(server.requests) - sent_before_kill == N - len(done_before_kill)
    assert json.loads(answers.read_text()) == json.loads(uninterrupted.read_text())
