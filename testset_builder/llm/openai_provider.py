"""OpenAI chat and legacy completions; ``base_url`` reaches any OpenAI-compatible server (vLLM, Ollama, llama.cpp)."""

from __future__ import annotations

from typing import Any

from .providers import api_key_from_env, translate_sdk_error
from .types import Completion, LLMRequest, TokenLogprob, Usage

DEFAULT_KEY_VARIABLE = "OPENAI_API_KEY"


def _as_dict(value: Any) -> dict:
    if isinstance(value, dict):
        return value
    return value.model_dump() if hasattr(value, "model_dump") else dict(vars(value))


def parse_completion_logprobs(logprobs: Any) -> tuple[TokenLogprob, ...]:
    """Read log-probabilities of a legacy completion in either shape servers use.

    OpenAI: ``tokens`` / ``token_logprobs`` / ``top_logprobs`` (list of {token: logprob}). llama.cpp answers in the
    chat shape instead: ``content = [{token, logprob, top_logprobs: [{token, logprob}]}]`` as plain dicts.
    """
    if logprobs is None:
        return ()
    data = _as_dict(logprobs)
    content = data.get("content")
    if content:
        out = []
        for item in content:
            item = _as_dict(item)
            top = {(_as_dict(t)["token"]): float(_as_dict(t)["logprob"]) for t in item.get("top_logprobs") or []}
            out.append(TokenLogprob(token=item["token"], logprob=float(item["logprob"]), top=top))
        return tuple(out)
    tokens, values, tops = data.get("tokens") or [], data.get("token_logprobs") or [], data.get("top_logprobs") or []
    return tuple(
        TokenLogprob(token=token, logprob=float(value if value is not None else 0.0), top={k: float(v) for k, v in (tops[i] or {}).items()} if i < len(tops) else {})
        for i, (token, value) in enumerate(zip(tokens, values))
    )


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    data = _as_dict(usage)
    details = data.get("prompt_tokens_details") or {}
    cached = _as_dict(details).get("cached_tokens") if details else 0
    return Usage(input_tokens=data.get("prompt_tokens") or 0, output_tokens=data.get("completion_tokens") or 0, cached_input_tokens=cached or 0)


class OpenAIProvider:
    supports_completion = True

    def __init__(self, api_key: str | None = None, base_url: str | None = None, timeout: float = 60.0, key_variable: str = DEFAULT_KEY_VARIABLE, name: str = "openai") -> None:
        import openai

        self._key = api_key if api_key is not None else api_key_from_env(name, key_variable)
        self._client = openai.AsyncOpenAI(api_key=self._key, base_url=base_url, max_retries=0, timeout=timeout)
        self.name = name
        self.identity = f"{name}:{base_url or 'https://api.openai.com/v1'}"

    async def aclose(self) -> None:
        """Close the HTTP connections (call from the event loop that used them)."""
        await self._client.close()

    async def complete(self, request: LLMRequest) -> Completion:
        try:
            if request.kind == "chat":
                return await self._chat(request)
            return await self._completion(request)
        except Exception as error:  # translate_sdk_error re-raises what it does not know
            raise translate_sdk_error(self.name, error, self._key) from None

    async def _chat(self, request: LLMRequest) -> Completion:
        params: dict[str, Any] = dict(
            model=request.model,
            messages=[m.model_dump() for m in request.messages],
            temperature=request.temperature,
            max_tokens=request.max_tokens,
        )
        if request.stop:
            params["stop"] = list(request.stop)
        if request.seed is not None:
            params["seed"] = request.seed
        if request.top_logprobs is not None:
            params.update(logprobs=True, top_logprobs=request.top_logprobs)
        if request.response_schema is not None:
            params["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": request.schema_name or "answer", "schema": request.response_schema},
            }
        response = await self._client.chat.completions.create(**params)
        choice = response.choices[0]
        logprobs = ()
        if choice.logprobs is not None and choice.logprobs.content:
            logprobs = parse_completion_logprobs({"content": [_as_dict(c) for c in choice.logprobs.content]})
        return Completion(text=choice.message.content or "", model=response.model or request.model, usage=_usage(response.usage), finish_reason=choice.finish_reason, logprobs=logprobs)

    async def _completion(self, request: LLMRequest) -> Completion:
        params: dict[str, Any] = dict(model=request.model, prompt=request.prompt, temperature=request.temperature, max_tokens=request.max_tokens)
        if request.stop:
            params["stop"] = list(request.stop)
        if request.seed is not None:
            params["seed"] = request.seed
        if request.top_logprobs is not None:
            params["logprobs"] = request.top_logprobs
        response = await self._client.completions.create(**params)
        choice = response.choices[0]
        return Completion(
            text=choice.text or "", model=response.model or request.model, usage=_usage(response.usage),
            finish_reason=choice.finish_reason, logprobs=parse_completion_logprobs(choice.logprobs),
        )
