"""Integration: the real openai and anthropic SDKs against a real llama-server running the packaged Gemma 3 270M."""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import require
from pydantic import BaseModel, Field

from testset_builder.llm import LLMClient, LLMRequest, Message
from testset_builder.store import open_workspace

local = require("testset_builder.llm.local_provider")


@pytest.fixture(scope="session")
def server(local_server):
    return local_server


@pytest.fixture
def client(server, tmp_path):
    with open_workspace(tmp_path / "ws") as workspace:
        yield LLMClient(local.LocalProvider(server), workspace, "integration")


INPARS = (
    "Document: Recall@k counts the relevant chunks found in the top k results.\n"
    "Relevant Query: what does recall@k measure\n\nDocument: {doc}\nRelevant Query:"
)


def test_a_chat_completion_through_the_openai_sdk(client):
    request = LLMRequest(
        kind="chat", model="gemma-3-270m", messages=(Message(role="user", content="Name a color."),), max_tokens=8
    )
    completion = asyncio.run(client.complete(request))
    assert completion.text.strip() and completion.usage.output_tokens > 0


def test_a_legacy_completion_returns_log_probabilities(client):
    request = LLMRequest(
        kind="completion",
        model="gemma-3-270m",
        prompt=INPARS.format(doc="BM25 ranks documents by term frequency."),
        max_tokens=12,
        stop=("\n",),
        top_logprobs=5,
    )
    completion = asyncio.run(client.complete(request))
    assert completion.text.strip()
    assert completion.logprobs and all(t.logprob <= 0 for t in completion.logprobs)
    first = completion.logprobs[0]
    assert len(first.top) == 5 and first.top[first.token] == first.logprob
    assert math.isclose(max(first.top.values()), first.logprob, abs_tol=1e-6)  # temperature 0 takes the likeliest


def test_the_servers_own_timings_come_back_and_the_machine_keeps_them_when_the_client_closes(server, tmp_path):
    """llama.cpp times each answer's prompt and generation; a plan's time for the local model is made of them."""
    from testset_builder.llm import throughput

    request = LLMRequest(
        kind="completion", model="gemma-3-270m", prompt=INPARS.format(doc="Ties are broken by document id."),
        max_tokens=12, stop=("\n",), seed=7,
    )  # fmt: skip

    async def ask():
        with open_workspace(tmp_path / "ws") as workspace:
            async with LLMClient(local.LocalProvider(server), workspace, "integration") as client:
                return await client.complete(request)

    completion = asyncio.run(ask())
    prompt_s, output_s = completion.server_seconds
    assert prompt_s > 0 and output_s > 0  # llama.cpp evaluates at least the prompt's last token, cached or not
    kept = [m for key, m in throughput.load().items() if key.startswith("local:gemma-3-270m@")]
    assert len(kept) == 1 and kept[0].timed_calls == 1
    assert kept[0].prompt_s == pytest.approx(prompt_s)
    assert kept[0].timed_output_tokens == completion.usage.output_tokens
    assert kept[0].output_s == pytest.approx(output_s)


def test_an_anthropic_message_through_the_anthropic_sdk(server):
    import anthropic

    async def ask():
        sdk = anthropic.AsyncAnthropic(api_key="local", base_url=server.base_url, max_retries=0)
        return await sdk.messages.create(
            model="gemma-3-270m", max_tokens=8, messages=[{"role": "user", "content": "Say hi."}]
        )

    message = asyncio.run(ask())
    assert message.type == "message" and message.content and message.usage.output_tokens > 0


def test_the_projects_anthropic_provider_talks_to_llama_servers_messages_endpoint(server, tmp_path):
    from testset_builder.llm import AnthropicProvider

    with open_workspace(tmp_path / "ws") as workspace:
        client = LLMClient(AnthropicProvider(api_key="local", base_url=server.base_url), workspace, "integration")
        request = LLMRequest(
            kind="chat", model="gemma-3-270m", max_tokens=8, messages=(Message(role="user", content="Say hi."),)
        )
        completion = asyncio.run(client.complete(request))
        again = asyncio.run(client.complete(request))
    assert completion.usage.output_tokens > 0 and completion.model and again.cached


class Grade(BaseModel):
    grade: int = Field(ge=0, le=2)


def test_structured_output_from_the_local_model_validates(client):
    request = LLMRequest(
        kind="chat",
        model="gemma-3-270m",
        messages=(Message(role="user", content="Grade 0, 1 or 2 as JSON."),),
        max_tokens=20,
    )
    grade, _ = asyncio.run(client.structured(request, Grade))
    assert grade.grade in (0, 1, 2)


def test_the_server_dies_with_its_parent_even_after_kill_9(tmp_path, server):
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from testset_builder.llm.local_provider import LocalServer
        s = LocalServer(Path({str(server.model)!r}), log_dir=Path({str(tmp_path)!r}))
        print(s.process.pid, flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child_pid = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    status = f"/proc/{child_pid}/status"
    for _ in range(100):
        try:
            with open(status) as handle:
                state = next(line for line in handle if line.startswith("State:"))
        except (FileNotFoundError, ProcessLookupError):
            return
        if "Z" in state.split()[1]:  # exited, waiting for init to reap it
            return
        time.sleep(0.1)
    os.kill(child_pid, 9)
    pytest.fail("llama-server outlived its killed parent")


def test_one_server_is_shared_per_process_and_replaced_if_it_died(server):
    first = local.shared_server(server.model.parent)
    try:
        assert local.shared_server(server.model.parent) is first
        provider = local.LocalProvider(model=str(server.model))
        assert provider.server is first
        assert provider.identity == "local:gemma-3-270m@sha256:a5fd3b62230aa5ec"  # the model and its file, no path
        first.stop()
        second = local.shared_server(server.model.parent)
        assert second is not first and second.process.poll() is None
    finally:
        local.shared_server(server.model.parent).stop()
