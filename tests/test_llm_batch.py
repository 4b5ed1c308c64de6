"""Batch submission through the real openai SDK against a server implementing the Batch API's contract."""

from __future__ import annotations

import asyncio

from batch_server import BatchServer

from testset_builder.llm import LLMClient, LLMRequest, Message, OpenAIProvider, PriceTable
from testset_builder.store import open_workspace


def chat(text: str) -> LLMRequest:
    return LLMRequest(model="gpt-4o-mini", messages=(Message(role="user", content=text),))


def test_a_batch_is_submitted_once_resumed_later_and_lands_in_the_cache(tmp_path):
    requests = [chat(f"question {i}") for i in range(5)] + [chat("FAIL this one")]
    with BatchServer(polls_until_done=2) as server:
        with open_workspace(tmp_path / "ws") as workspace:

            def client():
                return LLMClient(
                    OpenAIProvider(api_key="sk-batch", base_url=server.openai_url),
                    workspace,
                    "synthesize",
                    prices=PriceTable.load(),
                )

            async def submit():
                async with client() as c:
                    first = await c.submit_batch(requests)
                    again = await c.submit_batch(requests)  # already pending: nothing is sent twice
                    still_running = await c.resume_batches()
                    return first, again, still_running

            batch_id, again, running = asyncio.run(submit())
            assert batch_id == "batch_1" and again is None and running["running"] == 1

            async def resume_then_use():  # a later process: resume, then the stage asks as usual
                async with client() as c:
                    counts = await c.resume_batches()
                    answers = [await c.complete(r) for r in requests[:5]]
                    return counts, answers, c.calls_made

            counts, answers, calls_made = asyncio.run(resume_then_use())
            assert counts == {"running": 0, "ended": 1, "answered": 5, "failed": 1}
            assert [a.text for a in answers] == [f"answer to: question {i}" for i in range(5)]
            assert all(a.cached for a in answers) and calls_made == 0
            failed = workspace.db.execute("SELECT error FROM llm_calls WHERE response IS NULL").fetchone()[0]
            assert "invalid request" in failed
            assert workspace.db.execute("SELECT status FROM llm_batches").fetchone()[0] == "ended"
    assert server.calls.count(("POST", "/v1/batches")) == 1


def test_resume_command_ingests_ended_batches(tmp_path, monkeypatch, capsys):
    from testset_builder.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", "sk-batch")
    with BatchServer(polls_until_done=1) as server:
        config = tmp_path / "openai.yaml"
        config.write_text(f"llm:\n  provider: {{kind: openai, model: gpt-4o-mini, base_url: '{server.openai_url}'}}\n")
        with open_workspace(tmp_path / "ws") as workspace:

            async def submit():
                async with LLMClient(OpenAIProvider(base_url=server.openai_url), workspace, "judge") as c:
                    return await c.submit_batch([chat("a"), chat("b")])

            assert asyncio.run(submit()) == "batch_1"
        assert main(["resume", "--workspace", str(tmp_path / "ws"), "--config", str(config), "--json"]) == 0
    assert '"answered": 2' in capsys.readouterr().out


def test_anthropic_message_batches_land_in_the_same_cache(tmp_path):
    from testset_builder.llm import AnthropicProvider

    requests = [
        LLMRequest(model="claude-3-5-haiku-latest", messages=(Message(role="user", content=t),), temperature=0.0)
        for t in ("a", "b", "FAIL c")
    ]
    with BatchServer(polls_until_done=2) as server, open_workspace(tmp_path / "ws") as workspace:

        def client():
            return LLMClient(
                AnthropicProvider(api_key="sk-ant-batch", base_url=server.anthropic_url), workspace, "judge"
            )

        async def first_session():
            async with client() as c:
                return await c.submit_batch(requests), await c.resume_batches()

        batch_id, running = asyncio.run(first_session())
        assert batch_id == "msgbatch_1" and running["running"] == 1

        async def second_session():
            async with client() as c:
                counts = await c.resume_batches()
                return counts, [await c.complete(r) for r in requests[:2]], c.calls_made

        counts, answers, calls_made = asyncio.run(second_session())
    assert counts == {"running": 0, "ended": 1, "answered": 2, "failed": 1}
    assert [a.text for a in answers] == ["answer to: a", "answer to: b"] and calls_made == 0
    sent = server.batches["msgbatch_1"]["requests"][0]
    assert sent["params"]["temperature"] == 0.0 and "extra_body" not in sent["params"]
