"""LLM layer: providers behind one protocol, and the client that caches, limits, retries and records each call."""

from ..registry import provider_class, provider_kinds, register_provider
from .anthropic_provider import AnthropicProvider
from .client import LLMClient, RetryPolicy
from .openai_provider import OpenAIProvider
from .prices import PriceTable
from .providers import Provider
from .types import Completion, LLMRequest, Message, TokenLogprob, Usage

__all__ = [
    "AnthropicProvider",
    "Completion",
    "LLMClient",
    "LLMRequest",
    "Message",
    "OpenAIProvider",
    "PriceTable",
    "Provider",
    "RetryPolicy",
    "TokenLogprob",
    "Usage",
    "provider_class",
    "provider_kinds",
    "register_provider",
]
