"""The provider protocol and what every adapter shares: turning SDK exceptions into :class:`ProviderError`.

A provider has one method, ``async complete(request) -> Completion``. Adapters import their SDK lazily, create
their client with ``max_retries=0`` (the LLM layer is the only place that retries) and never put a key in an error.
"""

from __future__ import annotations

import email.utils
import json
import os
import time
from typing import Any, ClassVar, Protocol, runtime_checkable

from ..errors import MissingApiKeyError, ProviderError
from ..registry import Abilities
from .types import Completion, LLMRequest

RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 529}


@runtime_checkable
class Provider(Protocol):
    """``identity`` names the provider and endpoint (it is part of the cache key); ``complete`` makes one call.

    ``prompt_style`` is the kind of prompt its model follows ("chat" for instruction models, "completion" for base
    models prompted few-shot); ``supports_logprobs`` says whether answers carry token log-probabilities;
    ``abilities`` what the model is (:class:`~testset_builder.registry.Abilities`: weak, a small context, local).
    """

    identity: str
    supports_completion: bool
    prompt_style: str
    supports_logprobs: bool
    abilities: Abilities

    async def complete(self, request: LLMRequest) -> Completion: ...

    async def aclose(self) -> None: ...


class HostedProvider:
    """What the adapters over a hosted SDK share: the key read from the environment (unless given), one SDK client
    that never retries by itself, an identity naming the endpoint, and building from a role's config.

    A subclass names its ``kind``, ``key_variable`` and ``default_url`` and makes its client in :meth:`make_client`;
    a hosted model is neither weak nor local (a subclass serving a small model says so in ``abilities``)."""

    abilities: ClassVar[Abilities] = Abilities()
    kind: ClassVar[str]
    key_variable: ClassVar[str]
    default_url: ClassVar[str]

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        key_variable: str | None = None,
        name: str | None = None,
    ) -> None:
        self.name = name or self.kind
        self._key = api_key if api_key is not None else api_key_from_env(self.name, key_variable or self.key_variable)
        self._client = self.make_client(self._key, base_url, timeout)
        self.identity = f"{self.name}:{base_url or self.default_url}"

    def make_client(self, key: str, base_url: str | None, timeout: float) -> Any:
        raise NotImplementedError

    @classmethod
    def from_config(cls, config) -> HostedProvider:
        """The provider a role's config names (a missing key fails here, before any work starts; a server given
        by ``base_url`` with no ``api_key_env`` needs no key)."""
        return cls(
            api_key=keyless(config, cls.key_variable), base_url=config.base_url, timeout=config.timeout_s,
            key_variable=config.api_key_env or cls.key_variable,
        )  # fmt: skip

    async def aclose(self) -> None:
        """Close the HTTP connections (call from the event loop that used them)."""
        await self._client.close()


def keyless(config, default_variable: str) -> str | None:
    """A placeholder key for a self-hosted server that asks for none (``base_url``, no ``api_key_env`` and the
    default variable unset); None means "read the key variable"."""
    if config.base_url and not config.api_key_env and not os.environ.get(default_variable, "").strip():
        return "no-key-needed"
    return None


def api_key_from_env(provider: str, variable: str) -> str:
    """The key in ``variable``; a clear error naming the variable (never a value) when it is unset or empty."""
    key = os.environ.get(variable, "").strip()
    if not key:
        raise MissingApiKeyError(provider, variable)
    return key


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date; None when absent or unreadable."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, moment.timestamp() - time.time())


def redact(text: str, secret: str | None) -> str:
    if secret and secret in text:
        text = text.replace(secret, "[redacted]")
    return text


def _status_message(error: Exception) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
    return str(getattr(error, "message", None) or error)


def translate_sdk_error(provider: str, error: Exception, secret: str | None) -> ProviderError:
    """Map an openai/anthropic SDK exception (they share names and shapes) onto :class:`ProviderError`."""
    name = type(error).__name__
    status = getattr(error, "status_code", None)
    if status is not None:
        response = getattr(error, "response", None)
        headers = getattr(response, "headers", {}) or {}
        retry_after = parse_retry_after(headers.get("retry-after"))
        return ProviderError(
            provider,
            redact(_status_message(error), secret),
            status=status,
            retryable=status in RETRYABLE_STATUS or status >= 500,
            retry_after=retry_after,
        )
    if name in ("APITimeoutError", "APIConnectionError"):
        return ProviderError(
            provider,
            f"{'timed out' if 'Timeout' in name else 'connection failed'}: {redact(str(error), secret)}",
            retryable=True,
        )
    if name == "APIResponseValidationError" or isinstance(error, (json.JSONDecodeError, UnicodeDecodeError)):
        return ProviderError(provider, f"malformed response: {redact(str(error), secret)[:200]}", retryable=True)
    raise error
