"""The one place where LLM calls happen: cache, budget, rate limit, retries, structured output, ledger.

Around every call, in this order: cache lookup (sha256 of the canonical request and the provider identity) ->
budget reservation -> bounded concurrency and token buckets -> tenacity retries of retryable
:class:`ProviderError`s honouring ``Retry-After`` (else exponential backoff with jitter) -> ledger row in the
workspace's ``llm_calls`` (response, usage, cost, latency, attempts, or the error). A request answered once is never
paid for again: a rerun after a crash reads it from the cache.

A client holds its workspace (:meth:`~testset_builder.store.Workspace.exclusive`) from its first call or from
``async with`` until it closes, so a second process on the same workspace waits and then finds every answer
cached instead of paying for it again.

Fan-out has one contract, :meth:`LLMClient.gather`: every item is attempted, and what failed comes back as a value
(:data:`LLMFailure`: a provider error, an answer that failed validation, or the budget's stop), in input order.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from contextlib import ExitStack
from dataclasses import astuple, dataclass
from typing import TypeVar

from pydantic import BaseModel, ValidationError
from rich.progress import Progress
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential_jitter

from ..errors import BudgetExceededError, InputError, ProviderError, StructuredOutputError
from ..store import llm as ledger
from ..store.workspace import Workspace
from . import throughput
from .prices import PriceTable
from .providers import Provider
from .ratelimit import RateLimiter
from .types import Completion, LLMRequest, Message, Usage

Schema = TypeVar("Schema", bound=BaseModel)
Item = TypeVar("Item")
Result = TypeVar("Result")
LLMFailure = ProviderError | StructuredOutputError | BudgetExceededError
"""What a fanned-out call can end in besides its result; :meth:`LLMClient.gather` returns these as values."""


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

    def __add__(self, other: Spend) -> Spend:
        return Spend(*(a + b for a, b in zip(astuple(self), astuple(other))))


class Budget:
    """A cost limit shared by every client of one run (the generator's and the judge's): a call is refused when
    its worst-case cost, with what was spent and what calls in flight may cost, could pass the limit."""

    def __init__(self, max_cost_usd: float | None) -> None:
        self.max_cost_usd = max_cost_usd
        self.spent_usd = 0.0
        self.reserved_usd = 0.0
        self.stopped = False  # a call was refused: the run ends short, and says so

    def reserve(self, worst_case_usd: float) -> None:
        if self.max_cost_usd is None:
            return
        if self.spent_usd + self.reserved_usd + worst_case_usd > self.max_cost_usd:
            self.stopped = True
            raise BudgetExceededError(self.max_cost_usd, self.spent_usd, worst_case_usd)
        self.reserved_usd += worst_case_usd

    def settle(self, worst_case_usd: float, cost_usd: float | None) -> None:
        if self.max_cost_usd is not None:
            self.reserved_usd -= worst_case_usd
        self.spent_usd += cost_usd or 0.0


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
        budget: Budget | None = None,
    ) -> None:
        self.provider = provider
        self.workspace = workspace
        self.stage = stage
        self.retry = retry
        self.prices = prices or PriceTable.empty()
        self.budget = budget or Budget(max_cost_usd)
        self._semaphore = asyncio.Semaphore(max_in_flight)
        self._limiter = RateLimiter(requests_per_minute, tokens_per_minute)
        self._hold = ExitStack()
        self._holding = False
        self.calls_made = 0
        self.cache_hits = 0
        self.usage = Usage()
        self.cost_usd = 0.0
        self.measured: dict[str, throughput.Measured] = {}  # per model: what the provider delivered, for plans

    @property
    def max_cost_usd(self) -> float | None:
        return self.budget.max_cost_usd

    def _claim_workspace(self) -> None:
        if not self._holding:
            self._hold.enter_context(self.workspace.exclusive(self.stage))
            self._holding = True

    async def aclose(self) -> None:
        try:
            await self.provider.aclose()
        finally:
            self._hold.close()
            self._holding = False
            measured, self.measured = self.measured, {}
            throughput.record({throughput.key(self.provider.identity, m): v for m, v in measured.items()})

    def spend(self) -> Spend:
        return Spend(self.calls_made, self.cache_hits, self.usage.input_tokens, self.usage.output_tokens, self.cost_usd)

    async def __aenter__(self) -> LLMClient:
        self._claim_workspace()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.aclose()

    # cache and ledger ------------------------------------------------------------------------------------------
    def key(self, request: LLMRequest) -> str:
        """The request's cache key: what makes two requests the same call (judgment ids derive from it too)."""
        return request.cache_key(self.provider.identity)

    def cached(self, request: LLMRequest) -> Completion | None:
        response = ledger.cached_response(self.workspace.db, self.key(request))
        return (
            None if response is None else Completion.model_validate_json(response).model_copy(update={"cached": True})
        )

    def _record(self, key: str, request: LLMRequest, completion: Completion | None, cost: float | None,
                latency: float | None, attempts: int, error: str | None) -> None:  # fmt: skip
        call = ledger.CallRecord(
            key=key,
            stage=self.stage,
            provider=self.provider.identity,
            model=request.model,
            request=request.canonical_json(),
            response=completion.model_dump_json() if completion else None,
            usage=completion.usage.model_dump_json() if completion else None,
            cost_usd=cost,
            latency_s=latency,
            attempts=attempts,
            error=error,
        )
        with self.workspace.transaction() as db:
            ledger.record_call(db, call)

    # the call --------------------------------------------------------------------------------------------------
    def _wait(self, retry_state) -> float:
        error = retry_state.outcome.exception()
        if isinstance(error, ProviderError) and error.retry_after is not None:
            return min(error.retry_after, self.retry.max_retry_after)
        wait = wait_exponential_jitter(
            multiplier=self.retry.initial_wait, max=self.retry.max_wait, jitter=self.retry.jitter
        )
        return wait(retry_state)

    async def complete(self, request: LLMRequest) -> Completion:
        self._claim_workspace()
        cached = self.cached(request)
        if cached is not None:
            self.cache_hits += 1
            return cached
        worst_case = self._worst_case(request)
        self.budget.reserve(worst_case)
        cost = None
        try:
            async with self._semaphore:
                completion, cost = await self._call(self.key(request), request)
        finally:
            self.budget.settle(worst_case, cost)
        self.calls_made += 1
        self.usage = self.usage + completion.usage
        self.cost_usd += cost or 0.0
        return completion

    def _worst_case(self, request: LLMRequest) -> float:
        """What the call could cost at most (a token is at least a character); 0 without a cost limit."""
        if self.budget.max_cost_usd is None:
            return 0.0
        price = self.prices.price(request.model)
        if price is None:
            raise InputError(
                f"no price for model {request.model!r} in the price table, so a cost limit cannot be honoured "
                "(add it to a prices: file in the config)"
            )
        return (len(request.text) * price.input + request.max_tokens * price.output) / 1e6

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
        cost, latency = self.prices.cost(request.model, completion.usage), time.perf_counter() - started
        self._record(key, request, completion, cost, latency, attempts, None)
        self.measured.setdefault(request.model, throughput.Measured()).add(completion, latency)
        return completion, cost

    async def gather(
        self,
        call: Callable[[Item], Awaitable[Result]],
        items: Iterable[Item],
        progress: Progress | None = None,
        description: str = "LLM calls",
    ) -> list[Result | LLMFailure]:
        """``await call(item)`` for every item, concurrently up to ``max_in_flight``, in input order; a failure is
        returned as its error, never raised, so one bad answer or the budget's stop never loses the rest.

        With ``progress`` (see :func:`~testset_builder.llm.progress.llm_progress`), a task shows the count, the
        running cost and the cache hits."""
        items = list(items)
        task = None
        if progress is not None and items:
            task = progress.add_task(description, total=len(items), cost=self.cost_usd, cached=self.cache_hits)

        async def one(item: Item) -> Result | LLMFailure:
            try:
                return await call(item)
            except (ProviderError, StructuredOutputError, BudgetExceededError) as error:
                return error
            finally:
                if task is not None:
                    progress.update(task, advance=1, cost=self.cost_usd, cached=self.cache_hits)

        return list(await asyncio.gather(*(one(item) for item in items)))

    async def complete_many(
        self, requests: Iterable[LLMRequest], progress: Progress | None = None, description: str = "LLM calls"
    ) -> list[Completion | LLMFailure]:
        """Every request through :meth:`gather`."""
        return await self.gather(self.complete, requests, progress, description)

    # batch APIs: half price, hours of latency; results land in the same cache, so stage code is unchanged ----------
    async def submit_missing(self, requests: Iterable[LLMRequest]) -> str | None:
        """For a stage run with ``--batch``: submit the requests the cache cannot answer yet (None when it can answer
        them all, so the stage goes on). A stage that gets a batch id stops there; rerun it after ``resume``."""
        self._claim_workspace()
        missing = [r for r in requests if self.cached(r) is None]
        if not missing:
            return None
        return await self.submit_batch(missing) or "(already submitted)"

    async def submit_batch(self, requests: Iterable[LLMRequest]) -> str | None:
        """Submit the requests not yet answered nor already in a pending batch; returns the batch id (None if none).

        The batch is recorded as an intent before it is sent and confirmed with the provider's id after: a crash in
        between leaves the intent, and a later submission of the same requests is refused until ``resume
        --forget-interrupted`` says the provider has none of them, so no request is ever paid for twice."""
        if not hasattr(self.provider, "submit_batch"):
            raise InputError(f"{self.provider.identity} has no batch API; run without --batch")
        self._claim_workspace()
        interrupted = ledger.interrupted_submissions(self.workspace.db, self.provider.identity)
        if interrupted:
            intent, when, count = interrupted[0]
            raise InputError(
                f"a batch submission of {count} requests to {self.provider.identity} was interrupted at {when} "
                f"({intent}): the provider may have it. Check its batches; then `testset-builder resume "
                "--forget-interrupted` lets this command submit again"
            )
        pending = ledger.pending_batch_keys(self.workspace.db)
        items: dict[str, LLMRequest] = {}
        for request in requests:
            key = self.key(request)
            if key not in items and key not in pending and self.cached(request) is None:
                items[key] = request
        if not items:
            return None
        intent = f"intent-{uuid.uuid4().hex[:16]}"
        with self.workspace.transaction() as db:
            ledger.add_batch_intent(
                db, intent, self.provider.identity, self.stage, {k: r.canonical_json() for k, r in items.items()}
            )
        try:
            batch_id = await self.provider.submit_batch(list(items.items()))
        except ProviderError:
            with self.workspace.transaction() as db:  # the provider answered with an error: nothing was submitted
                ledger.drop_batch_intent(db, intent)
            raise
        with self.workspace.transaction() as db:
            ledger.confirm_batch(db, intent, batch_id)
        return batch_id

    def forget_interrupted(self) -> int:
        """Forget interrupted submissions (see :meth:`submit_batch`); returns how many."""
        self._claim_workspace()
        with self.workspace.transaction() as db:
            return ledger.abandon_interrupted(db, self.provider.identity)

    async def resume_batches(self) -> dict[str, int]:
        """Poll this provider's pending batches; ingest the ended ones into the cache and ledger."""
        self._claim_workspace()
        counts = {"running": 0, "ended": 0, "answered": 0, "failed": 0}
        for batch_id, requests_json in ledger.submitted_batches(self.workspace.db, self.provider.identity):
            requests = {key: LLMRequest.model_validate_json(text) for key, text in requests_json.items()}
            results = await self.provider.poll_batch(batch_id, requests)
            if results is None:
                counts["running"] += 1
                continue
            for key, result in results.items():
                if isinstance(result, Completion):
                    cost = self.prices.cost(requests[key].model, result.usage)
                    self._record(key, requests[key], result, cost, None, 1, None)
                    counts["answered"] += 1
                else:
                    self._record(key, requests[key], None, None, None, 1, result)
                    counts["failed"] += 1
            with self.workspace.transaction() as db:
                ledger.end_batch(db, batch_id)
            counts["ended"] += 1
        return counts

    async def structured(self, request: LLMRequest, schema: type[Schema]) -> tuple[Schema, Completion]:
        """A validated ``schema`` instance: one re-ask carrying the validation error, then
        :class:`StructuredOutputError`."""
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
