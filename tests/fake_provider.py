"""A scripted provider for unit tests of stage logic (the SDK paths are tested against real servers elsewhere), and
a stand-in model and the demo's settings for the plan and the Python pipeline (test_plan.py, python_pipeline.py).

``answer(request) -> str | Completion`` decides each reply; every request is kept in ``history``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from testset_builder.config import Config, ProviderConfig
from testset_builder.llm.types import Completion, LLMRequest, TokenLogprob, Usage
from testset_builder.registry import Abilities


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


def shared_words_grade(prompt: str, relevant_others: bool = False) -> Completion | None:
    """For a few-shot judge prompt (it ends with "Relevance:"): grade 2 when the query shares two or more long words
    with the passage (or always, with ``relevant_others``), else 0; None for any other prompt."""
    import re

    if not prompt.rstrip().endswith("Relevance:"):
        return None
    query = prompt.rsplit("Query: ", 1)[1].split("\n", 1)[0]
    passage = prompt.rsplit("Passage: ", 1)[1].lower()
    shared = sum(w in passage for w in re.findall(r"\w{5,}", query.lower()))
    return digit_completion({"2": 0.8, "0": 0.2} if shared >= 2 or relevant_others else {"0": 0.9, "2": 0.1})


def passage_of(prompt: str) -> str:
    """The passage a few-shot question prompt asks about (the last document in it)."""
    return prompt.rsplit("Document: ", 1)[1] if "Document: " in prompt else prompt.rsplit("Document A: ", 1)[1]


def question_words(text: str) -> list[str]:
    """The distinct words of five letters or more in ``text``, lower case, in order, without the function words a
    question cannot end on: what the stand-in generators ask about (a real question repeats no word twice in a
    row and does not stop on "which")."""
    import re

    skip = {"which", "there", "their", "these", "those", "between", "without", "whether", "about", "where"}
    return [w for w in dict.fromkeys(w.lower() for w in re.findall(r"[A-Za-z]{5,}", text)) if w not in skip]


def quoting(request) -> str:
    """A chat generator: a question from the passage's words and, as evidence, the passage's second sentence with
    its spaces doubled (so locating it needs the whitespace-normalised match)."""
    import re

    passage = request.messages[-1].content.split("Passage: ", 1)[1].split("\n\nReply with", 1)[0]
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", passage) if len(s.split()) >= 4]
    words = question_words(passage)[:3]
    evidence = sentences[min(1, len(sentences) - 1)].replace(" ", "  ") if sentences else "not in the passage at all"
    return f"Query: how does {' '.join(words).lower()} matter number {request.seed % 97}?\nEvidence: {evidence}"


HOSTED = Abilities()  # neither weak nor on this machine


class FakeProvider:
    supports_completion = True

    def __init__(
        self,
        answer: Callable[[LLMRequest], str | Completion],
        prompt_style: str = "completion",
        supports_logprobs: bool = True,
        identity: str = "fake:test",
        abilities: Abilities = HOSTED,
    ) -> None:
        self.answer = answer
        self.prompt_style = prompt_style
        self.supports_logprobs = supports_logprobs
        self.identity = identity
        self.abilities = abilities
        self.history: list[LLMRequest] = []

    async def complete(self, request: LLMRequest) -> Completion:
        self.history.append(request)
        reply = self.answer(request)
        if isinstance(reply, Completion):
            return reply
        return Completion(text=reply, model=request.model, usage=Usage(input_tokens=100, output_tokens=10))

    async def aclose(self) -> None:
        pass


def tokens(text: str) -> int:
    """The stand-in model's tokenizer: words and punctuation marks (not the plan's characters-per-token rule)."""
    return len(re.findall(r"\w+|[^\w\s]", text))


def stand_in_model():
    """A model that writes a question from the passage (about as long as the local model's, 18 to 30 tokens) and
    grades a pair by shared words, its usage counted with :func:`tokens`. Every fourth question copies the passage,
    which validation removes: the embedded local model delivered 6 questions of 8 requests on the demo."""
    written = {"n": 0}

    def answer(request):
        if not request.prompt.rstrip().endswith("Relevance:"):
            written["n"] += 1
            if written["n"] % 4 == 0:
                passage = request.prompt.rsplit("Document", 1)[1].split(":", 1)[1]
                text = " " + " ".join(passage.split()[:12])
                return Completion(
                    text=text, model=request.model, usage=Usage(input_tokens=tokens(request.prompt), output_tokens=12)
                )
        return model_answer(request)

    return answer


def model_answer(request):
    prompt = request.prompt
    grade = shared_words_grade(prompt)
    if grade is not None:
        return grade.model_copy(update={"usage": Usage(input_tokens=tokens(prompt), output_tokens=2)})
    words = question_words(passage_of(prompt))
    if "Search Keywords:" in prompt:
        text = " " + " ".join(words[:3]).lower()
    else:
        text = (
            f" how does {' '.join(words[: 4 + request.seed % 4]).lower()} work in practice, and what changes for "
            f"a retriever when case {request.seed % 97} applies to it?"
        )
    return Completion(
        text=text, model=request.model, usage=Usage(input_tokens=tokens(prompt), output_tokens=tokens(text))
    )


def demo_config(**synthesize) -> Config:
    """The demo's settings (examples/demo.yaml) with an OpenAI-compatible model in both roles, so that every LLM
    step of a run calls it: questions, the critic, mining and propose's judge."""
    return Config(
        generator=ProviderConfig(
            kind="openai", model="gpt-4o-mini", base_url="http://127.0.0.1:9/v1", prompt_style="completion"
        ),
        chunking={"chunker": "markdown", "size": 600, "overlap": 60},
        synthesize={
            "questions": 6, "styles": {"natural": 0.4, "keyword": 0.2, "paraphrase": 0.2, "multi": 0.2},
            "critic": True, "mine": True, "relevance_by": "llm", **synthesize,
        },
        propose={"depth": 5},
    )  # fmt: skip
