"""OpenAI chat and legacy completions; ``base_url`` reaches any OpenAI-compatible server (vLLM, Ollama, llama.cpp)."""

from __future__ import annotations

import json
from typing import Any

from .providers import HostedProvider, translate_sdk_error
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
        TokenLogprob(
            token=token,
            logprob=float(value if value is not None else 0.0),
            top={k: float(v) for k, v in (tops[i] or {}).items()} if i < len(tops) else {},
        )
        for i, (token, value) in enumerate(zip(tokens, values))
    )


def _usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    data = _as_dict(usage)
    details = data.get("prompt_tokens_details") or {}
    cached = _as_dict(details).get("cached_tokens") if details else 0
    return Usage(
        input_tokens=data.get("prompt_tokens") or 0,
        output_tokens=data.get("completion_tokens") or 0,
        cached_input_tokens=cached or 0,
    )


class OpenAIProvider(HostedProvider):
    supports_completion = True
    prompt_style = "chat"
    supports_logprobs = True

    kind = "openai"
    key_variable = DEFAULT_KEY_VARIABLE
    default_url = "https://api.openai.com/v1"

    def make_client(self, key: str, base_url: str | None, timeout: float) -> Any:
        import openai

        return openai.AsyncOpenAI(api_key=key, base_url=base_url, max_retries=0, timeout=timeout)

    async def complete(self, request: LLMRequest) -> Completion:
        try:
            if request.kind == "chat":
                return await self._chat(request)
            return await self._completion(request)
        except Exception as error:  # translate_sdk_error re-raises what it does not know
            raise translate_sdk_error(self.name, error, self._key) from None

    async def _chat(self, request: LLMRequest) -> Completion:
        return parse_chat(await self._client.chat.completions.create(**chat_params(request)), request)

    async def _completion(self, request: LLMRequest) -> Completion:
        return parse_completion(await self._client.completions.create(**completion_params(request)), request)

    # batch API: requests as a JSONL file, results read back into the same Completion shape ----------------------
    async def submit_batch(self, items: list[tuple[str, LLMRequest]]) -> str:
        """Upload ``(custom_id, request)`` pairs (one kind per batch) and start a 24 h batch; returns its id."""
        kinds = {request.kind for _, request in items}
        if len(kinds) != 1:
            raise ValueError("a batch holds requests of one kind")
        endpoint = "/v1/chat/completions" if kinds == {"chat"} else "/v1/completions"
        lines = [
            json.dumps(
                {
                    "custom_id": custom_id,
                    "method": "POST",
                    "url": endpoint,
                    "body": chat_params(r) if r.kind == "chat" else completion_params(r),
                }
            )
            for custom_id, r in items
        ]
        try:
            uploaded = await self._client.files.create(
                file=("batch.jsonl", ("\n".join(lines) + "\n").encode()), purpose="batch"
            )
            batch = await self._client.batches.create(
                input_file_id=uploaded.id, endpoint=endpoint, completion_window="24h"
            )
        except Exception as error:
            raise translate_sdk_error(self.name, error, self._key) from None
        return batch.id

    async def poll_batch(self, batch_id: str, requests: dict[str, LLMRequest]) -> dict[str, Completion | str] | None:
        """None while the batch runs; when it has ended, each custom id's completion or error message."""
        try:
            batch = await self._client.batches.retrieve(batch_id)
            if batch.status in ("validating", "in_progress", "finalizing", "cancelling"):
                return None
            results: dict[str, Completion | str] = {}
            for file_id in (batch.output_file_id, batch.error_file_id):
                if file_id:
                    content = await self._client.files.content(file_id)
                    for line in content.text.splitlines():
                        if line.strip():
                            results.update(_batch_result(json.loads(line), requests))
        except Exception as error:
            raise translate_sdk_error(self.name, error, self._key) from None
        for custom_id in requests:
            results.setdefault(custom_id, f"batch {batch_id} ended ({batch.status}) without a result for this request")
        return results


def _batch_result(line: dict, requests: dict[str, LLMRequest]) -> dict[str, Completion | str]:
    custom_id = line.get("custom_id")
    if custom_id not in requests:
        return {}
    response = line.get("response") or {}
    if line.get("error") or response.get("status_code", 200) >= 400:
        detail = line.get("error") or response.get("body", {}).get("error") or response
        return {custom_id: f"batch request failed: {json.dumps(detail)[:300]}"}
    request = requests[custom_id]
    import openai.types as types
    import openai.types.chat as chat_types

    if request.kind == "chat":
        return {custom_id: parse_chat(chat_types.ChatCompletion.model_validate(response["body"]), request)}
    return {custom_id: parse_completion(types.Completion.model_validate(response["body"]), request)}


def chat_params(request: LLMRequest) -> dict[str, Any]:
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
    return params


def completion_params(request: LLMRequest) -> dict[str, Any]:
    params: dict[str, Any] = dict(
        model=request.model, prompt=request.prompt, temperature=request.temperature, max_tokens=request.max_tokens
    )
    if request.stop:
        params["stop"] = list(request.stop)
    if request.seed is not None:
        params["seed"] = request.seed
    if request.top_logprobs is not None:
        params["logprobs"] = request.top_logprobs
    return params


def parse_chat(response: Any, request: LLMRequest) -> Completion:
    choice = response.choices[0]
    logprobs = ()
    if choice.logprobs is not None and choice.logprobs.content:
        logprobs = parse_completion_logprobs({"content": [_as_dict(c) for c in choice.logprobs.content]})
    return Completion(
        text=choice.message.content or "",
        model=response.model or request.model,
        usage=_usage(response.usage),
        finish_reason=choice.finish_reason,
        logprobs=logprobs,
        server_seconds=_server_seconds(response),
    )


def parse_completion(response: Any, request: LLMRequest) -> Completion:
    choice = response.choices[0]
    return Completion(
        text=choice.text or "",
        model=response.model or request.model,
        usage=_usage(response.usage),
        finish_reason=choice.finish_reason,
        logprobs=parse_completion_logprobs(choice.logprobs),
        server_seconds=_server_seconds(response),
    )


def _server_seconds(response: Any) -> tuple[float, float] | None:
    """The prompt and generation seconds llama.cpp's server reports beside the OpenAI fields (``timings``)."""
    timings = getattr(response, "timings", None)
    if not isinstance(timings, dict):
        return None
    try:
        return float(timings["prompt_ms"]) / 1000, float(timings["predicted_ms"]) / 1000
    except (KeyError, TypeError, ValueError):
        return None
