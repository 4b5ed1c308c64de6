"""The one place where LLM calls happen: cache, rate limit, retries, structured output, ledger.

Around every call, in this order: cache lookup (sha256 of the canonical request and the provider identity) ->
bounded concurrency and token buckets -> tenacity retries of retryable :class:`ProviderError`s honouring
``Retry-After`` (else exponential backoff with jitter) -> ledger row in the workspace's ``llm_calls`` (response,
usage, cost, latency, attempts, or the error). A request answered once is never paid for again: a rerun after a
crash reads it from the cache.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterable
from dataclasses import astuple, dataclass
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from rich.progress import Progress
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from ..errors import BudgetExceededError, InputError, ProviderError, StructuredOutputError
from ..store.workspace import Workspace, utc_timestamp
from .prices import PriceTable
from .providers import Provider
from .ratelimit import RateLimiter
from .types import Completion, LLMRequest, Message, Usage

Schema = TypeVar("Schema", bound=BaseModel)


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 6
    initial_wait: float = 1.0
    max_wait: float = 60.0
    jitter: float = 1.0
    max_retry_after: float = 300.0


@dataclass(frozen=True)
class Spend:
    """What a client has spent so far; ``after - before`` is what one stage spent."""

    calls: int = 0
    cache_hits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    def __sub__(self, other: Spend) -> Spend:
        return Spend(*(a - b for a, b in zip(astuple(self), astuple(other))))


def estimate_tokens(request: LLMRequest) -> int:
    """A cheap upper-side estimate for the tokens-per-minute bucket (4 characters a token, plus the answer)."""
    return len(request.text) // 4 + request.max_tokens


def extract_json(text: str) -> str:
    """The JSON object in an answer, without code fences or chatter around it."""
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, re.DOTALL)
    if fenced:
        text = fenced.group(1)
    start, end = text.find("{"), text.rfind("}")
    return text[start : end + 1] if start != -1 and end > start else text.strip()


class LLMClient:
    """Calls ``provider`` for the stage ``stage`` of ``workspace``; safe to share across asyncio tasks."""

    def __init__(
        self,
        provider: Provider,
        workspace: Workspace,
        stage: str,
        *,
        max_in_flight: int = 8,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        retry: RetryPolicy = RetryPolicy(),
        prices: PriceTable | None = None,
        max_cost_usd: float | None = None,
    ) -> None:
        self.provider = provider
        self.workspace = workspace
        self.stage = stage
        self.retry = retry
        self.prices = prices or PriceTable.empty()
        self._semaphore = asyncio.Semaphore(max_in_flight)
        self._limiter = RateLimiter(requests_per_minute, tokens_per_minute)
        self.calls_made = 0
        self.cache_hits = 0
        self.usage = Usage()
        self.cost_usd = 0.0
        self.max_cost_usd = max_cost_usd
        self._reserved_usd = 0.0  # worst-case cost of calls in flight, so concurrent calls cannot overshoot together

    async def aclose(self) -> None:
        await self.provider.aclose()

    def spend(self) -> Spend:
        return Spend(self.calls_made, self.cache_hits, self.usage.input_tokens, self.usage.output_tokens, self.cost_usd)

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.aclose()

    # cache and ledger ------------------------------------------------------------------------------------------
    def _cached(self, key: str) -> Completion | None:
        row = self.workspace.db.execute(
            "SELECT response FROM llm_calls WHERE request_sha256 = ? AND response IS NOT NULL", (key,)
        ).fetchone()
        if row is None:
            return None
        return Completion.model_validate_json(row[0]).model_copy(update={"cached": True})

    def _record(
        self,
        key: str,
        request: LLMRequest,
        completion: Completion | None,
        cost: float | None,
        latency: float,
        attempts: int,
        error: str | None,
    ) -> None:
        with self.workspace.transaction() as db:
            db.execute(
                "INSERT INTO llm_calls (request_sha256, stage, provider, model, request, response, usage, cost_usd, "
                "latency_s, attempts, error, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(request_sha256) DO UPDATE SET response = "
                "excluded.response, "
                "usage = excluded.usage, cost_usd = excluded.cost_usd, latency_s = excluded.latency_s, "
                "attempts = llm_calls.attempts + excluded.attempts, error = excluded.error",
                (
                    key,
                    self.stage,
                    self.provider.identity,
                    request.model,
                    request.canonical_json(),
                    completion.model_dump_json() if completion else None,
                    completion.usage.model_dump_json() if completion else None,
                    cost,
                    latency,
                    attempts,
                    error,
                    utc_timestamp(),
                ),
            )

    # the call --------------------------------------------------------------------------------------------------
    def _wait(self, retry_state) -> float:
        error = retry_state.outcome.exception()
        if isinstance(error, ProviderError) and error.retry_after is not None:
            return min(error.retry_after, self.retry.max_retry_after)
        return wait_exponential_jitter(
            multiplier=self.retry.initial_wait, max=self.retry.max_wait, jitter=self.retry.jitter
        )(retry_state)

    async def complete(self, request: LLMRequest) -> Completion:
        key = request.cache_key(self.provider.identity)
        cached = self._cached(key)
        if cached is not None:
            self.cache_hits += 1
            return cached
        worst_case = self._reserve(request)
        try:
            async with self._semaphore:
                completion, cost = await self._call(key, request)
        finally:
            self._reserved_usd -= worst_case
        self.calls_made += 1
        self.usage = self.usage + completion.usage
        self.cost_usd += cost or 0.0
        return completion

    def _reserve(self, request: LLMRequest) -> float:
        """Refuse a call whose worst-case cost could take spending past the budget; else reserve that cost."""
        if self.max_cost_usd is None:
            return 0.0
        price = self.prices.price(request.model)
        if price is None:
            raise InputError(
                f"no price for model {request.model!r} in the price table, so a cost limit cannot be honoured"
            )
        worst_case = (
            len(request.text) * price.input + request.max_tokens * price.output
        ) / 1e6  # a token is at least a character
        if self.cost_usd + self._reserved_usd + worst_case > self.max_cost_usd:
            raise BudgetExceededError(self.max_cost_usd, self.cost_usd, worst_case)
        self._reserved_usd += worst_case
        return worst_case

    async def _call(self, key: str, request: LLMRequest) -> tuple[Completion, float | None]:
        """Rate-limited, retried provider call; its ledger row is written whether it succeeds or fails."""
        attempts, started = 0, time.perf_counter()
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.retry.max_attempts),
            wait=self._wait,
            retry=retry_if_exception(lambda e: isinstance(e, ProviderError) and e.retryable),
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    await self._limiter.acquire(estimate_tokens(request))  # every attempt is a request to the provider
                    attempts += 1
                    completion = await self.provider.complete(request)
        except ProviderError as error:
            self._record(key, request, None, None, time.perf_counter() - started, attempts, str(error))
            raise
        cost = self.prices.cost(request.model, completion.usage)
        self._record(key, request, completion, cost, time.perf_counter() - started, attempts, None)
        return completion, cost

    async def complete_many(
        self, requests: Iterable[LLMRequest], progress: Progress | None = None, description: str = "LLM calls"
    ) -> list[Completion | ProviderError]:
        """Every request, concurrently up to ``max_in_flight``; a failed one yields its error, in input order.

        With ``progress`` (see :func:`~testset_builder.llm.progress.llm_progress`), a task shows the count, the
        running cost and the cache hits.
        """
        requests = list(requests)
        task = (
            progress.add_task(description, total=len(requests), cost=self.cost_usd, cached=self.cache_hits)
            if progress
            else None
        )

        async def one(request: LLMRequest) -> Completion | ProviderError:
            try:
                return await self.complete(request)
            except ProviderError as error:
                return error
            finally:
                if progress is not None:
                    progress.update(task, advance=1, cost=self.cost_usd, cached=self.cache_hits)

        return list(await asyncio.gather(*(one(r) for r in requests)))

    # batch APIs: half price, hours of latency; results land in the same cache, so stage code is unchanged ----------
    async def submit_missing(self, requests: Iterable[LLMRequest]) -> str | None:
        """For a stage run with ``--batch``: submit the requests the cache cannot answer yet (None when it can answer
        them all, so the stage goes on). A stage that gets a batch id stops there; rerun it after ``resume``."""
        missing = [r for r in requests if self._cached(r.cache_key(self.provider.identity)) is None]
        if not missing:
            return None
        return await self.submit_batch(missing) or "(already submitted)"

    async def submit_batch(self, requests: Iterable[LLMRequest]) -> str | None:
        """Submit the requests not yet answered nor already in a pending batch; returns the batch id (None if none)."""
        if not hasattr(self.provider, "submit_batch"):
            raise InputError(f"{self.provider.identity} has no batch API; run without --batch")
        pending_keys = set()
        for (requests_json,) in self.workspace.db.execute(
            "SELECT requests FROM llm_batches WHERE status = 'submitted'"
        ):
            pending_keys.update(json.loads(requests_json))
        items, seen = [], set()
        for request in requests:
            key = request.cache_key(self.provider.identity)
            if key in seen or key in pending_keys or self._cached(key) is not None:
                continue
            seen.add(key)
            items.append((key, request))
        if not items:
            return None
        batch_id = await self.provider.submit_batch(items)
        with self.workspace.transaction() as db:
            db.execute(
                "INSERT INTO llm_batches (batch_id, provider, stage, status, requests, submitted_at) VALUES (?, ?, "
                "?, 'submitted', ?, ?)",
                (
                    batch_id,
                    self.provider.identity,
                    self.stage,
                    json.dumps({k: r.canonical_json() for k, r in items}),
                    utc_timestamp(),
                ),
            )
        return batch_id

    async def resume_batches(self) -> dict[str, int]:
        """Poll this provider's pending batches; ingest the ended ones into the cache and ledger."""
        counts = {"running": 0, "ended": 0, "answered": 0, "failed": 0}
        rows = self.workspace.db.execute(
            "SELECT batch_id, requests FROM llm_batches WHERE status = 'submitted' AND provider = ?",
            (self.provider.identity,),
        ).fetchall()
        for batch_id, requests_json in rows:
            requests = {key: LLMRequest.model_validate_json(text) for key, text in json.loads(requests_json).items()}
            results = await self.provider.poll_batch(batch_id, requests)
            if results is None:
                counts["running"] += 1
                continue
            for key, result in results.items():
                if isinstance(result, Completion):
                    self._record(
                        key, requests[key], result, self.prices.cost(requests[key].model, result.usage), None, 1, None
                    )
                    counts["answered"] += 1
                else:
                    self._record(key, requests[key], None, None, None, 1, result)
                    counts["failed"] += 1
            with self.workspace.transaction() as db:
                db.execute(
                    "UPDATE llm_batches SET status = 'ended', ended_at = ? WHERE batch_id = ?",
                    (utc_timestamp(), batch_id),
                )
            counts["ended"] += 1
        return counts

    async def structured(self, request: LLMRequest, schema: type[Schema]) -> tuple[Schema, Completion]:
        """A validated ``schema`` instance: one re-ask carrying the validation error, then :class:`StructuredOutputError`."""
        request = request.model_copy(
            update={"response_schema": schema.model_json_schema(), "schema_name": schema.__name__}
        )
        usage, attempts = Usage(), 0
        while True:
            completion = await self.complete(request)
            usage, attempts = usage + completion.usage, attempts + 1
            try:
                return schema.model_validate_json(extract_json(completion.text)), completion
            except ValidationError as error:
                detail = "; ".join(
                    f"{'.'.join(map(str, e['loc'])) or 'answer'}: {e['msg']}" for e in error.errors()[:5]
                )
            if attempts == 2:
                raise StructuredOutputError(schema.__name__, detail, completion.text, attempts, usage.model_dump())
            request = _reask(request, completion.text, detail)


def _reask(request: LLMRequest, answer: str, detail: str) -> LLMRequest:
    feedback = f"That answer is not valid ({detail}). Reply again with only a JSON object that matches the schema."
    if request.kind == "chat":
        messages = (
            *request.messages,
            Message(role="assistant", content=answer),
            Message(role="user", content=feedback),
        )
        return request.model_copy(update={"messages": messages})
    return request.model_copy(update={"prompt": f"{request.prompt}{answer}\n{feedback}\n"})
