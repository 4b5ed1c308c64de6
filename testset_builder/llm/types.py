"""What goes to a provider and what comes back, independent of any SDK."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Literal["system", "user", "assistant"]
    content: str


class LLMRequest(BaseModel):
    """One model call. ``kind="chat"`` sends ``messages``; ``kind="completion"`` sends a raw ``prompt`` (what a base
    model such as the packaged Gemma 3 270M wants). ``response_schema`` asks for JSON matching a JSON schema.

    The request never holds credentials; :meth:`cache_key` hashes its canonical JSON plus the provider identity.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["chat", "completion"] = "chat"
    model: str
    messages: tuple[Message, ...] = ()
    prompt: str | None = None
    temperature: float = 0.0
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    response_schema: dict[str, Any] | None = None
    schema_name: str | None = None

    @model_validator(mode="after")
    def _has_input(self) -> LLMRequest:
        if self.kind == "chat" and not self.messages:
            raise ValueError("a chat request needs messages")
        if self.kind == "completion" and self.prompt is None:
            raise ValueError("a completion request needs a prompt")
        return self

    @property
    def text(self) -> str:
        """Everything the model reads: the prompt, or the messages' contents joined."""
        return self.prompt if self.prompt is not None else "".join(m.content for m in self.messages)

    def canonical_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, ensure_ascii=False, separators=(",", ":"))

    def cache_key(self, provider: str) -> str:
        return hashlib.sha256(f"{provider}\n{self.canonical_json()}".encode()).hexdigest()


class TokenLogprob(BaseModel):
    model_config = ConfigDict(frozen=True)

    token: str
    logprob: float
    top: dict[str, float] = Field(default_factory=dict)


class Usage(BaseModel):
    model_config = ConfigDict(frozen=True)

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
        )


class Completion(BaseModel):
    """A provider's answer: the text (or a tool call's JSON arguments for structured output), usage, log-probs."""

    model_config = ConfigDict(frozen=True)

    text: str
    model: str
    usage: Usage = Usage()
    finish_reason: str | None = None
    logprobs: tuple[TokenLogprob, ...] = ()
    cached: bool = False
    server_seconds: tuple[float, float] | None = None  # (prompt, generation) as the server timed them (llama.cpp)

    def public_model(self, requested: str) -> str:
        """The model to name in lineage: the one the provider reports (often a dated version of the one asked
        for), unless it reports a file path of its machine (llama.cpp, some vLLM setups); then the one asked for."""
        reported = self.model
        if not reported or reported.startswith(("/", "~", "\\")) or reported[1:3] in (":\\", ":/"):
            return requested
        if reported.endswith((".gguf", ".bin", ".safetensors")):
            return requested
        return reported
