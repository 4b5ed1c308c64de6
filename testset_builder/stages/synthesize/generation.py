"""Writing one question per slot: the request for a slot (the prompt that suits the generator's prompt style), the
question's id and lineage, and the second source of a multi-chunk question."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from ...corpus.dedup import normalise
from ...corpus.sampling import SourceChunk, slot_seed
from ...llm.roles import Role
from ...llm.types import Completion, LLMRequest
from ...prompts import Prompt, PromptLibrary, clip
from ...records import Lineage

CHAT_PROMPT = "synthesize/chat"
MAX_PASSAGE_CHARS = 3000


@dataclass
class Slot:
    """One question to write: its style, its source chunk(s) and seed; then the answer and why it was dropped."""

    index: int
    style: str
    sources: tuple[SourceChunk, ...]
    seed: int
    text: str = ""
    evidence: str | None = None  # the verbatim quote a chat generator gives with its question, when it gives one
    completion: Completion | None = None
    problem: str | None = None
    candidate: int = 0  # which try this is: a rule rejected the ones before it
    first_seed: int = field(init=False)

    def __post_init__(self) -> None:
        self.first_seed = self.seed

    def next_candidate(self) -> None:
        """Ask again, with a seed derived from the first (so a rerun asks, and finds cached, the same): a rule
        rejected this question."""
        self.candidate += 1
        self.seed = slot_seed(self.first_seed, "candidate", str(self.candidate))
        self.text, self.evidence, self.completion, self.problem = "", None, None, None


def query_id_for(sources: tuple[SourceChunk, ...], text: str) -> str:
    """Derived from the sources and the normalised text: the same question from the same chunks is the same query."""
    key = "\x00".join([*(s.chunk_id for s in sources), normalise(text)])
    return "s-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


class Generator:
    """Builds the question request for a slot with the prompt that suits the generator role."""

    def __init__(self, role: Role, temperature: float, prompts: PromptLibrary | None = None) -> None:
        self.role, self.temperature = role, temperature
        self.prompts = prompts or PromptLibrary()

    def asks_for_evidence(self, style: str) -> bool:
        """Whether the answer carries an evidence quote after the question: the chat prompt asks for one; the
        base-model completion prompts do not (a one-line continuation)."""
        return self.prompt(style).kind == "chat"

    def prompt(self, style: str) -> Prompt:
        return self.prompts.load(CHAT_PROMPT if self.role.prompt_style == "chat" else f"synthesize/completion-{style}")

    def request(self, slot: Slot) -> LLMRequest:
        prompt = self.prompt(slot.style)
        options = dict(temperature=self.temperature, seed=slot.seed, max_tokens=int(prompt.meta.get("max_tokens", 64)))
        first = clip(slot.sources[0].text, MAX_PASSAGE_CHARS)
        if prompt.kind == "completion":
            values = {"passage": " ".join(first.split())}
            if slot.style == "multi":
                values["second_passage"] = " ".join(clip(slot.sources[1].text, MAX_PASSAGE_CHARS).split())
            return prompt.request(self.role.model, **values, **options, stop=("\n",))
        if slot.style == "multi":
            passage = f"Passage 1: {first}\n\nPassage 2: {clip(slot.sources[1].text, MAX_PASSAGE_CHARS)}"
        else:
            passage = f"Passage: {first}"
        instruction = prompt.meta["styles"][slot.style]
        return prompt.request(self.role.model, style_instruction=instruction, passage=passage, **options)

    def lineage(self, slot: Slot) -> Lineage:
        prompt, completion, client = self.prompt(slot.style), slot.completion, self.role.client
        return Lineage(
            provider=self.role.provider,
            model=completion.public_model(self.role.model),
            prompt_name=prompt.name,
            prompt_sha256=prompt.sha256,
            temperature=self.temperature,
            seed=slot.seed,
            usage=completion.usage.model_dump(),
            cost_usd=None if completion.cached else client.prices.cost(self.role.model, completion.usage),
        )


def partner(chunk: SourceChunk, bm25, by_id: dict[str, SourceChunk], twins: dict[str, str]) -> SourceChunk | None:
    """The chunk most similar to ``chunk`` by BM25, other than itself and its duplicates: the second source of a
    multi-chunk question."""
    run = bm25.search([chunk.chunk_id], [chunk.text[:2000]], k=10)
    group = twins.get(chunk.chunk_id)
    for _, chunk_id, _, _ in run.ranked_rows():
        if chunk_id != chunk.chunk_id and chunk_id in by_id and (group is None or twins.get(chunk_id) != group):
            return by_id[chunk_id]
    return None
