"""Roles: the generator writes questions, the judge grades relevance; each is a provider and a model.

:func:`open_roles` builds them from a :class:`~testset_builder.config.Config`. Two roles on the same provider share
one client (one rate limiter, one connection pool); roles on different providers get a client each. Every client
of a run shares one :class:`~testset_builder.llm.client.Budget`, so ``max_cost_usd`` bounds the run, not each role.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import Config, ProviderConfig
from ..registry import abilities, provider_class
from ..store.workspace import Workspace
from .client import Budget, LLMClient, RetryPolicy, Spend
from .prices import PriceTable
from .providers import Provider


def make_provider(config: ProviderConfig) -> Provider:
    """The provider a role names, built by its kind's class (:func:`~testset_builder.registry.provider_class`). A
    missing key fails here, before any work starts; a provider with a ``base_url`` and no ``api_key_env`` (vLLM, Ollama,
    llama.cpp on localhost) needs no key."""
    return provider_class(config.kind).from_config(config)


@dataclass(frozen=True)
class Role:
    """A model doing a job: the client that calls it, the model's name, and how to prompt it. ``prompt_style`` and
    ``logprobs`` default to what the client's provider says it supports."""

    client: LLMClient
    model: str
    prompt_style: str = ""
    logprobs: bool | None = None

    def __post_init__(self) -> None:
        if not self.prompt_style:
            object.__setattr__(self, "prompt_style", self.client.provider.prompt_style)
        if self.logprobs is None:
            object.__setattr__(self, "logprobs", self.client.provider.supports_logprobs)

    @property
    def provider(self) -> str:
        return self.client.provider.identity

    @property
    def weak(self) -> bool:
        """A small model, near chance as a judge of relevance, as its provider's class declares it."""
        return self.client.provider.abilities.weak


@dataclass
class Roles:
    """The generator and the judge, and the distinct clients behind them."""

    generator: Role
    judge: Role
    clients: list[LLMClient] = field(init=False)

    def __post_init__(self) -> None:
        self.clients = list({id(r.client): r.client for r in (self.generator, self.judge)}.values())

    @classmethod
    def single(cls, client: LLMClient, model: str) -> Roles:
        """One client and model in both roles (what tests and small scripts want)."""
        role = Role(client, model)
        return cls(role, role)

    def spend(self) -> Spend:
        total = Spend()
        for client in self.clients:
            total = total + client.spend()
        return total

    @property
    def budget_stopped(self) -> bool:
        """A call was refused for the cost limit: the run ended short of what it was asked."""
        return any(client.budget.stopped for client in self.clients)

    async def __aenter__(self) -> Roles:
        for client in self.clients:
            await client.__aenter__()
        return self

    async def __aexit__(self, *exc_info) -> None:
        for client in self.clients:
            await client.aclose()


def _connection(config: ProviderConfig) -> tuple:
    """What makes two roles the same client: provider, endpoint, key variable, timeout (and, for a model running on
    this machine, its model: a server of its own each)."""
    return (
        config.kind,
        config.base_url,
        config.api_key_env,
        config.timeout_s,
        config.model if abilities(config.kind).local else None,
    )


def open_roles(config: Config, workspace: Workspace, stage: str) -> Roles:
    """The generator and judge roles of ``config`` with their clients (use ``async with``)."""
    budget = Budget(config.limits.max_cost_usd)
    prices = PriceTable.load(config.prices)
    clients: dict[tuple, LLMClient] = {}
    roles = []
    for provider_config in (config.generator_role(), config.judge_role()):
        connection = _connection(provider_config)
        if connection not in clients:
            limits = config.limits
            clients[connection] = LLMClient(
                make_provider(provider_config),
                workspace,
                stage,
                max_in_flight=limits.max_in_flight,
                requests_per_minute=limits.requests_per_minute,
                tokens_per_minute=limits.tokens_per_minute,
                retry=RetryPolicy(max_attempts=limits.max_attempts),
                prices=prices,
                budget=budget,
            )
        style = "" if provider_config.prompt_style == "auto" else provider_config.prompt_style
        roles.append(Role(clients[connection], provider_config.model_name, style))
    generator, judge = roles
    if config.judging.logprobs is not None:
        judge = Role(judge.client, judge.model, judge.prompt_style, config.judging.logprobs)
    return Roles(generator, judge)
