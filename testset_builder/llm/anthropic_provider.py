"""Anthropic messages. Structured output goes through a forced tool whose input schema is the requested schema."""

from __future__ import annotations

import json
from typing import Any

from ..errors import ProviderError
from .providers import HostedProvider, translate_sdk_error
from .types import Completion, LLMRequest, Usage

DEFAULT_KEY_VARIABLE = "ANTHROPIC_API_KEY"


class AnthropicProvider(HostedProvider):
    supports_completion = False
    prompt_style = "chat"
    supports_logprobs = False

    kind = "anthropic"
    key_variable = DEFAULT_KEY_VARIABLE
    default_url = "https://api.anthropic.com"

    def make_client(self, key: str, base_url: str | None, timeout: float) -> Any:
        import anthropic

        return anthropic.AsyncAnthropic(api_key=key, base_url=base_url, max_retries=0, timeout=timeout)

    async def complete(self, request: LLMRequest) -> Completion:
        params = self._params(request)
        try:
            response = await self._client.messages.create(**params)
        except Exception as error:
            raise translate_sdk_error(self.name, error, self._key) from None
        return parse_message(response, request)

    def _params(self, request: LLMRequest) -> dict[str, Any]:
        if request.kind != "chat":
            raise ProviderError(self.name, "the Messages API has no raw completions; use a chat prompt")
        return message_params(request)

    # Message Batches: results land in the same cache as live calls -------------------------------------------------
    async def submit_batch(self, items: list[tuple[str, LLMRequest]]) -> str:
        requests = []
        for custom_id, request in items:
            params = self._params(request)
            params.update(params.pop("extra_body"))  # in a batch, every parameter travels in the body
            requests.append({"custom_id": custom_id, "params": params})
        try:
            batch = await self._client.messages.batches.create(requests=requests)
        except Exception as error:
            raise translate_sdk_error(self.name, error, self._key) from None
        return batch.id

    async def poll_batch(self, batch_id: str, requests: dict[str, LLMRequest]) -> dict[str, Completion | str] | None:
        try:
            batch = await self._client.messages.batches.retrieve(batch_id)
            if batch.processing_status != "ended":
                return None
            results: dict[str, Completion | str] = {}
            async for entry in await self._client.messages.batches.results(batch_id):
                if entry.custom_id not in requests:
                    continue
                if entry.result.type == "succeeded":
                    results[entry.custom_id] = parse_message(entry.result.message, requests[entry.custom_id])
                else:
                    detail = getattr(entry.result, "error", None)
                    results[entry.custom_id] = f"batch request {entry.result.type}: {detail}"[:300]
        except Exception as error:
            raise translate_sdk_error(self.name, error, self._key) from None
        for custom_id in requests:
            results.setdefault(custom_id, f"batch {batch_id} ended without a result for this request")
        return results


def message_params(request: LLMRequest) -> dict[str, Any]:
    system = "\n\n".join(m.content for m in request.messages if m.role == "system")
    params: dict[str, Any] = dict(
        model=request.model,
        max_tokens=request.max_tokens,
        # this SDK's create() no longer names temperature; the Messages API still reads it from the body
        extra_body={"temperature": request.temperature},
        messages=[m.model_dump() for m in request.messages if m.role != "system"],
    )
    if system:
        params["system"] = system
    if request.stop:
        params["stop_sequences"] = list(request.stop)
    if request.response_schema is not None:
        tool_name = request.schema_name or "answer"
        params["tools"] = [
            {"name": tool_name, "description": "Record the answer.", "input_schema": request.response_schema}
        ]
        params["tool_choice"] = {"type": "tool", "name": tool_name}
    return params


def parse_message(response: Any, request: LLMRequest) -> Completion:
    text = ""
    for block in response.content:
        if block.type == "tool_use" and request.response_schema is not None:
            text = json.dumps(block.input, ensure_ascii=False)
            break
        if block.type == "text":
            text += block.text
    usage = response.usage
    return Completion(
        text=text,
        model=response.model or request.model,
        usage=Usage(
            input_tokens=usage.input_tokens or 0,
            output_tokens=usage.output_tokens or 0,
            cached_input_tokens=getattr(usage, "cache_read_input_tokens", 0) or 0,
        ),
        finish_reason=response.stop_reason,
    )
