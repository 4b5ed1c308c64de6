"""The LLM layer against a fault-injecting server, through the real openai and anthropic SDKs."""

from __future__ import annotations

import asyncio
import json

import pytest
from fault_server import FaultServer
from pydantic import BaseModel

from testset_builder.errors import MissingApiKeyError, ProviderError, StructuredOutputError
from testset_builder.llm import (
    AnthropicProvider,
    LLMClient,
    LLMRequest,
    Message,
    OpenAIProvider,
    PriceTable,
    RetryPolicy,
)
from testset_builder.store import open_workspace

PLANTED_KEY = "sk-test-PLANTED-9f8e7d6c5b4a"
FAST_RETRY = RetryPolicy(max_attempts=8, initial_wait=0.01, max_wait=0.05, jitter=0.01)


def chat(text: str = "what is recall?", model: str = "gpt-4o-mini") -> LLMRequest:
    return LLMRequest(kind="chat", model=model, messages=(Message(role="user", content=text),))


@pytest.fixture
def workspace(tmp_path):
    with open_workspace(tmp_path / "ws") as ws:
        yield ws


def ledger(workspace):
    return [dict(r) for r in workspace.db.execute("SELECT * FROM llm_calls ORDER BY created_at")]


def openai_client(server, workspace, timeout=5.0, **kwargs):
    provider = OpenAIProvider(api_key=PLANTED_KEY, base_url=server.openai_url, timeout=timeout)
    return LLMClient(provider, workspace, "test", retry=kwargs.pop("retry", FAST_RETRY), **kwargs)


# The client's timeout: short enough that the "slow" fault (6 s) trips it, long enough that a loaded CI machine
# answers every other request within it (0.5 s did not, once: an attempt timed out before the server read it).
TIMEOUT = 2.0

TRANSIENT_FAULTS = {
    "429": ("status", 429, 0, "rate limited"),
    "500": ("status", 500, None, "internal error"),
    "503": ("status", 503, None, "unavailable"),
    "timeout": ("slow", 6.0),
    "truncated-json": ("truncated",),
    "not-json": ("invalid_json",),
}


def test_every_transient_fault_is_retried_to_success_and_the_attempts_are_recorded(workspace):
    with FaultServer(list(TRANSIENT_FAULTS.values())) as server:
        client = openai_client(server, workspace, timeout=TIMEOUT, prices=PriceTable.load())
        completion = asyncio.run(client.complete(chat()))
    assert completion.text == "answer to: what is recall?"
    assert len(server.requests) == 7
    (row,) = ledger(workspace)
    assert row["attempts"] == 7 and row["error"] is None
    assert json.loads(row["usage"])["input_tokens"] == 11
    assert row["cost_usd"] == pytest.approx((11 * 0.15 + 7 * 0.60) / 1e6)


def test_anthropic_overloaded_529_is_retried(workspace):
    with FaultServer([("status", 529, None, "Overloaded")]) as server:
        provider = AnthropicProvider(api_key=PLANTED_KEY, base_url=server.anthropic_url)
        client = LLMClient(provider, workspace, "test", retry=FAST_RETRY)
        completion = asyncio.run(client.complete(chat(model="claude-3-5-haiku-latest")))
    assert completion.text == "answer to: what is recall?"
    assert [r["path"] for r in server.requests] == ["/v1/messages", "/v1/messages"]
    assert ledger(workspace)[0]["attempts"] == 2


@pytest.mark.parametrize("fault", TRANSIENT_FAULTS.values(), ids=TRANSIENT_FAULTS.keys())
def test_anthropic_recovers_from_every_transient_fault_through_its_sdk(workspace, fault):
    with FaultServer([fault]) as server:
        provider = AnthropicProvider(api_key=PLANTED_KEY, base_url=server.anthropic_url, timeout=TIMEOUT)
        client = LLMClient(provider, workspace, "test", retry=FAST_RETRY)
        completion = asyncio.run(client.complete(chat(model="claude-3-5-haiku-latest")))
    assert completion.text == "answer to: what is recall?"
    assert [r["path"] for r in server.requests] == ["/v1/messages", "/v1/messages"]
    (row,) = ledger(workspace)
    assert row["attempts"] == 2 and row["error"] is None and PLANTED_KEY not in json.dumps(row)


@pytest.mark.parametrize("form", ["seconds", "http-date"])
def test_anthropic_honours_retry_after_in_seconds_and_as_an_http_date(workspace, form):
    import email.utils
    import time

    # An HTTP date has whole seconds, and the client reads it some time after it was written: three seconds ahead
    # leaves at least two when it is written and a second of slack for a loaded machine.
    wait = "2" if form == "seconds" else email.utils.formatdate(time.time() + 3, usegmt=True)
    with FaultServer([("status", 429, wait, "slow down")]) as server:
        provider = AnthropicProvider(api_key=PLANTED_KEY, base_url=server.anthropic_url)
        client = LLMClient(provider, workspace, "test", retry=FAST_RETRY)
        asyncio.run(client.complete(chat(model="claude-3-5-haiku-latest")))
    first, second = server.requests
    assert second["time"] - first["time"] >= 1.0


def test_retry_after_is_honoured(workspace):
    with FaultServer([("status", 429, 1, "slow down")]) as server:
        client = openai_client(server, workspace)
        asyncio.run(client.complete(chat()))
    first, second = server.requests
    assert second["time"] - first["time"] >= 1.0


@pytest.mark.parametrize("status, message", [(400, "max_tokens is too large"), (401, "Incorrect API key provided")])
def test_permanent_errors_are_not_retried_and_carry_the_providers_message(workspace, status, message):
    with FaultServer([("status", status, None, message)]) as server:
        client = openai_client(server, workspace)
        with pytest.raises(ProviderError) as error:
            asyncio.run(client.complete(chat()))
    assert len(server.requests) == 1
    assert error.value.status == status and message in str(error.value) and not error.value.retryable
    (row,) = ledger(workspace)
    assert row["attempts"] == 1 and message in row["error"] and row["response"] is None


def test_a_fault_that_outlasts_the_attempts_is_reported_not_swallowed(workspace):
    with FaultServer([("status", 500, None, "down")] * 3) as server:
        client = openai_client(
            server, workspace, retry=RetryPolicy(max_attempts=3, initial_wait=0.01, max_wait=0.01, jitter=0)
        )
        with pytest.raises(ProviderError, match="500: down"):
            asyncio.run(client.complete(chat()))
    assert len(server.requests) == 3 and ledger(workspace)[0]["attempts"] == 3


def test_an_answered_request_is_never_sent_again(workspace):
    with FaultServer() as server:
        client = openai_client(server, workspace)
        first = asyncio.run(client.complete(chat()))
        again = asyncio.run(openai_client(server, workspace).complete(chat()))
    assert len(server.requests) == 1
    assert again.cached and again.text == first.text


def test_completions_and_concurrent_batches_go_through_one_client(workspace):
    requests = [
        LLMRequest(kind="completion", model="gemma-3-270m", prompt=f"Document: {i}\nRelevant Query:") for i in range(20)
    ]
    with FaultServer(latency=0.05) as server:
        client = openai_client(server, workspace, max_in_flight=4)
        results = asyncio.run(client.complete_many(requests))
    assert [r.text for r in results] == [f" completion of: {r.prompt[-20:]}" for r in requests]
    assert client.calls_made == 20 and client.usage.output_tokens == 140 and client.cost_usd == 0.0


class Verdict(BaseModel):
    grade: int
    rationale: str


def test_structured_output_reasks_once_with_the_validation_error(workspace):
    answers = iter(['{"grade": "high"}', '{"grade": 2, "rationale": "states the definition"}'])
    with FaultServer(answer=lambda body: next(answers)) as server:
        verdict, _ = asyncio.run(openai_client(server, workspace).structured(chat(), Verdict))
    assert verdict == Verdict(grade=2, rationale="states the definition")
    reask = server.requests[1]["body"]["messages"]
    assert reask[1] == {"role": "assistant", "content": '{"grade": "high"}'}
    assert "grade" in reask[2]["content"] and "not valid" in reask[2]["content"]
    assert server.requests[0]["body"]["response_format"]["json_schema"]["name"] == "Verdict"


def test_structured_output_that_fails_twice_is_a_recorded_failure_with_what_was_spent(workspace):
    with FaultServer(answer=lambda body: "I think it is relevant.") as server:
        with pytest.raises(StructuredOutputError) as error:
            asyncio.run(openai_client(server, workspace).structured(chat(), Verdict))
    assert error.value.attempts == 2 and error.value.usage["input_tokens"] == 22
    assert error.value.last_text == "I think it is relevant."


def test_anthropic_structured_output_goes_through_a_forced_tool(workspace):
    with FaultServer(answer=lambda body: '{"grade": 1, "rationale": "partly"}') as server:
        provider = AnthropicProvider(api_key=PLANTED_KEY, base_url=server.anthropic_url)
        verdict, _ = asyncio.run(
            LLMClient(provider, workspace, "judge").structured(chat(model="claude-sonnet-4-0"), Verdict)
        )
    assert verdict.grade == 1
    body = server.requests[0]["body"]
    assert (
        body["tool_choice"] == {"type": "tool", "name": "Verdict"}
        and body["tools"][0]["input_schema"]["title"] == "Verdict"
    )


def test_a_missing_key_names_the_variable_before_any_call(monkeypatch):
    with pytest.raises(MissingApiKeyError, match="set the environment variable OPENAI_API_KEY"):
        OpenAIProvider()
    with pytest.raises(MissingApiKeyError, match="MY_GATEWAY_KEY"):
        AnthropicProvider(key_variable="MY_GATEWAY_KEY")


def test_the_api_key_never_reaches_the_database_or_errors(workspace, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", PLANTED_KEY)
    schedule = [("status", 401, None, f"Incorrect API key provided: {PLANTED_KEY}")]
    with FaultServer(schedule) as server:
        client = LLMClient(OpenAIProvider(base_url=server.openai_url), workspace, "test", retry=FAST_RETRY)

        async def calls():
            with pytest.raises(ProviderError) as error:
                await client.complete(chat())
            await client.complete(chat("another question"))
            return error

        error = asyncio.run(calls())
    assert {k.lower(): v for k, v in server.requests[0]["headers"].items()}[
        "authorization"
    ] == f"Bearer {PLANTED_KEY}"  # it was sent, to the server only
    assert PLANTED_KEY not in str(error.value) and "[redacted]" in str(error.value)
    workspace.db.execute("PRAGMA wal_checkpoint(FULL)")
    for path in workspace.root.rglob("*"):
        if path.is_file():
            assert PLANTED_KEY.encode() not in path.read_bytes(), path


def test_a_cost_limit_stops_before_it_is_exceeded_and_keeps_what_was_done(workspace):
    from testset_builder.errors import BudgetExceededError

    prices = PriceTable.load()
    with FaultServer() as server:
        client = openai_client(server, workspace, prices=prices, max_cost_usd=0.0005)

        async def spend():
            done = 0
            with pytest.raises(BudgetExceededError, match="stopped before exceeding the budget"):
                for i in range(100):
                    await client.complete(chat(f"question {i}"))
                    done += 1
            return done

        done = asyncio.run(spend())
    assert 0 < done < 100 and client.cost_usd <= 0.0005
    assert len(ledger(workspace)) == done == len(server.requests)


def test_costs_summarises_the_ledger_by_stage_and_model(workspace, capsys):
    from testset_builder.cli import main

    with FaultServer([("status", 400, None, "bad request")]) as server:
        client = openai_client(server, workspace, prices=PriceTable.load())

        async def calls():
            with pytest.raises(ProviderError):
                await client.complete(chat("rejected"))
            await client.complete(chat("a"))
            await client.complete(chat("b"))

        asyncio.run(calls())
    assert main(["costs", "--workspace", str(workspace.root), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["stage"] == "test" and row["model"] == "gpt-4o-mini" and row["calls"] == 2 and row["failed"] == 1
    assert row["input_tokens"] == 22 and row["cost_usd"] == pytest.approx(2 * (11 * 0.15 + 7 * 0.60) / 1e6)
    assert main(["costs", "--workspace", str(workspace.root)]) == 0
    assert "gpt-4o-mini" in capsys.readouterr().out


def test_the_progress_bar_shows_the_running_cost_and_cache_hits(workspace):
    import io

    from rich.console import Console

    from testset_builder.llm.progress import llm_progress

    buffer = io.StringIO()
    with FaultServer() as server:
        client = openai_client(server, workspace, prices=PriceTable.load())

        async def run():
            await client.complete(chat("question 0"))  # answered once already: a cache hit below
            with llm_progress(Console(file=buffer, width=150, force_terminal=False)) as progress:
                await client.complete_many(
                    [chat(f"question {i}") for i in range(10)], progress=progress, description="judging"
                )

        asyncio.run(run())
    final = buffer.getvalue().strip().splitlines()[-1]
    assert "judging" in final and "10 of 10" in final and "1 cached" in final  # off a terminal: plain lines
    assert f"${client.cost_usd:.4f}" in final and client.cost_usd > 0
