"""A scripted provider for unit tests of stage logic (the SDK paths are tested against real servers elsewhere).

``answer(request) -> str | Completion`` decides each reply; every request is kept in ``history``.
"""

from __future__ import annotations

from collections.abc import Callable

from testset_builder.llm.types import Completion, LLMRequest, TokenLogprob, Usage


def digit_completion(probs: dict[str, float], text: str | None = None) -> Completion:
    """A one-token answer whose top log-probabilities give ``probs`` (token -> probability)."""
    import math

    top = {token: math.log(p) for token, p in probs.items() if p > 0}
    token = text if text is not None else max(top, key=top.get)
    return Completion(
        text=token,
        model="fake-model",
        usage=Usage(input_tokens=100, output_tokens=1),
        logprobs=(TokenLogprob(token=token, logprob=top.get(token, -9.0), top=top),),
    )


class FakeProvider:
    supports_completion = True

    def __init__(
        self,
        answer: Callable[[LLMRequest], str | Completion],
        prompt_style: str = "completion",
        supports_logprobs: bool = True,
        identity: str = "fake:test",
    ) -> None:
        self.answer = answer
        self.prompt_style = prompt_style
        self.supports_logprobs = supports_logprobs
        self.identity = identity
        self.history: list[LLMRequest] = []

    async def complete(self, request: LLMRequest) -> Completion:
        self.history.append(request)
        reply = self.answer(request)
        if isinstance(reply, Completion):
            return reply
        return Completion(text=reply, model=request.model, usage=Usage(input_tokens=100, output_tokens=10))

    async def aclose(self) -> None:
        pass
