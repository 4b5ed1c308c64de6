"""The one graded relevance judge, used by ``propose`` (real queries) and by synthesize's false-negative mining.

Pointwise: one call per (query, chunk) pair. Instruction models get the UMBRELA-style chat prompt
(``prompts/judge/umbrela-chat.md``, a 0-3 score with a short rationale, validated by pydantic with one re-ask) and
base models the few-shot completion prompt (``prompts/judge/few-shot-completion.md``, one digit). Either way the
prompt's ``scale`` maps the model's score to our grades 0/1/2.

Where the provider returns log-probabilities, the probability of each grade is read from the alternatives at the
score token and stored with the judgment (``grade_probs``; ``confidence`` is the largest of them). Otherwise the
sampled grade is stored with ``confidence`` unknown. Labels move with a prompt's wording, so every judgment keeps
the prompt's name and sha256, the model and the provider in its lineage.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from ..errors import BudgetExceededError, ProviderError, StructuredOutputError
from ..llm.client import LLMClient
from ..llm.types import Completion, LLMRequest, TokenLogprob
from ..prompts import Prompt, clip, load_prompt
from ..records import Judgment, JudgmentSource, JudgmentStatus, Lineage

CHAT_PROMPT = "judge/umbrela-chat"
COMPLETION_PROMPT = "judge/few-shot-completion"
TOP_LOGPROBS = 10


class JudgeVerdict(BaseModel):
    """What the chat judge must answer: reasoning first (it scores better after stating it), then the score."""

    rationale: str = Field(max_length=400)  # two sentences; also bounds a grammar-constrained answer
    score: int = Field(ge=0, le=3)


@dataclass(frozen=True)
class JudgePair:
    query_id: str
    query: str
    chunk_id: str
    passage: str


JudgeOutcome = Judgment | ProviderError | StructuredOutputError | BudgetExceededError


def score_probabilities(alternatives: dict[str, float], scale: Sequence[int]) -> dict[int, float] | None:
    """Probabilities of each score from one position's top log-probabilities (``" 2"`` and ``"2"`` count together),
    normalised over the scores seen; None when no score is among the alternatives."""
    mass: dict[int, float] = {}
    for token, logprob in alternatives.items():
        text = token.strip()
        if text.isdigit() and int(text) in scale:
            mass[int(text)] = mass.get(int(text), 0.0) + math.exp(logprob)
    total = sum(mass.values())
    if total <= 0:
        return None
    return {score: mass.get(score, 0.0) / total for score in scale}


def score_position(logprobs: Sequence[TokenLogprob], key: str | None) -> TokenLogprob | None:
    """The token carrying the score: the first non-blank one for a bare digit answer (``key`` None; Gemma's
    tokenizer answers " 2" as " " then "2"), else the first digit after ``"key":`` in a JSON answer."""
    if key is None:
        return next((item for item in logprobs if item.token.strip()), None)
    seen, pattern = "", re.compile(rf'"{re.escape(key)}"\s*:\s*$')
    for item in logprobs:
        if item.token.strip()[:1].isdigit() and pattern.search(seen):
            return item
        seen += item.token
    return None


def grade_probabilities(score_probs: dict[int, float], scale: dict[int, int]) -> dict[int, float]:
    grades: dict[int, float] = {0: 0.0, 1: 0.0, 2: 0.0}
    for score, p in score_probs.items():
        grades[scale[score]] += p
    return {grade: round(p, 6) for grade, p in grades.items()}


def judgment_id(pair: JudgePair, identity: str) -> str:
    """Deterministic: the same pair judged by the same provider, model and prompt is the same judgment on a rerun."""
    return "llm-" + hashlib.sha256(f"{pair.query_id}\x00{pair.chunk_id}\x00{identity}".encode()).hexdigest()[:24]


class Judge:
    """Grades pairs through ``client``. ``style`` and ``logprobs`` default to what the client's provider supports."""

    def __init__(
        self,
        client: LLMClient,
        model: str,
        *,
        style: str | None = None,
        logprobs: bool | None = None,
        prompt: Prompt | None = None,
        max_passage_chars: int | None = None,
    ) -> None:
        self.client = client
        self.model = model
        self.style = style or getattr(client.provider, "prompt_style", "chat")
        self.logprobs = getattr(client.provider, "supports_logprobs", False) if logprobs is None else logprobs
        self.prompt = prompt or load_prompt(COMPLETION_PROMPT if self.style == "completion" else CHAT_PROMPT)
        self.scale: dict[int, int] = {int(k): int(v) for k, v in self.prompt.meta["scale"].items()}
        self.max_passage_chars = max_passage_chars or int(self.prompt.meta.get("max_passage_chars", 4000))
        self.identity = f"{client.provider.identity}\x00{model}\x00{self.prompt.name}\x00{self.prompt.sha256}"

    def request(self, pair: JudgePair) -> LLMRequest:
        """The exact request for a pair (also what ``--batch`` submits, so batch answers land in the same cache)."""
        options: dict = dict(
            query=" ".join(pair.query.split()),
            passage=clip(pair.passage, self.max_passage_chars),
            temperature=0.0,
            max_tokens=int(self.prompt.meta.get("max_tokens", 300)),
        )
        if self.logprobs:
            options["top_logprobs"] = TOP_LOGPROBS
        if self.prompt.kind == "completion":
            options["stop"] = ("\n",)
        else:
            options.update(response_schema=JudgeVerdict.model_json_schema(), schema_name=JudgeVerdict.__name__)
        return self.prompt.request(self.model, **options)

    async def judge(self, pair: JudgePair) -> Judgment:
        request = self.request(pair)
        rationale = None
        if self.prompt.kind == "completion":
            completion = await self.client.complete(request)
            score, probs = self._read_digit(completion)
        else:
            verdict, completion = await self.client.structured(request, JudgeVerdict)
            score, rationale = verdict.score, verdict.rationale.strip() or None
            probs = self._probabilities(completion, "score")
        return self._judgment(pair, request, completion, score, probs, rationale)

    def _probabilities(self, completion: Completion, key: str | None) -> dict[int, float] | None:
        """Score probabilities at the score token (see :func:`score_position`); None without log-probabilities."""
        position = score_position(completion.logprobs, key)
        return (
            score_probabilities(position.top or {position.token: position.logprob}, list(self.scale))
            if position
            else None
        )

    def _read_digit(self, completion: Completion) -> tuple[int, dict[int, float] | None]:
        probs = self._probabilities(completion, None)
        text = completion.text.strip()[:1]
        if probs is not None:
            return max(probs, key=lambda s: (probs[s], -s)), probs
        if text.isdigit() and int(text) in self.scale:
            return int(text), None
        raise StructuredOutputError(
            "JudgeGrade",
            f"expected one of {sorted(self.scale)}, got {completion.text.strip()[:40]!r}",
            completion.text,
            1,
            completion.usage.model_dump(),
        )

    def _judgment(
        self,
        pair: JudgePair,
        request: LLMRequest,
        completion: Completion,
        score: int,
        probs: dict[int, float] | None,
        rationale: str | None,
    ) -> Judgment:
        grade_probs = grade_probabilities(probs, self.scale) if probs is not None else None
        grade = self.scale[score]
        return Judgment(
            judgment_id=judgment_id(pair, self.identity),
            query_id=pair.query_id,
            chunk_id=pair.chunk_id,
            grade=grade,
            source=JudgmentSource.llm,
            confidence=max(grade_probs.values()) if grade_probs else None,
            grade_probs=grade_probs,
            rationale=rationale,
            status=JudgmentStatus.pending,
            lineage=Lineage(
                provider=self.client.provider.identity,
                model=completion.model or self.model,
                prompt_name=self.prompt.name,
                prompt_sha256=self.prompt.sha256,
                temperature=request.temperature,
                seed=request.seed,
                usage=completion.usage.model_dump(),
                cost_usd=None if completion.cached else self.client.prices.cost(request.model, completion.usage),
            ),
        )

    async def judge_many(
        self, pairs: Iterable[JudgePair], progress=None, description: str = "judging"
    ) -> list[JudgeOutcome]:
        """Every pair, concurrently up to the client's limit; a pair that fails yields its error, in input order.

        After the budget is exhausted the remaining pairs yield :class:`BudgetExceededError` (nothing is lost: what
        was answered is in the cache)."""
        pairs = list(pairs)
        if progress is not None and not pairs:
            progress = None  # nothing to show
        task = (
            progress.add_task(description, total=len(pairs), cost=self.client.cost_usd, cached=self.client.cache_hits)
            if progress
            else None
        )

        async def one(pair: JudgePair) -> JudgeOutcome:
            try:
                return await self.judge(pair)
            except (ProviderError, StructuredOutputError, BudgetExceededError) as error:
                return error
            finally:
                if progress is not None:
                    progress.update(task, advance=1, cost=self.client.cost_usd, cached=self.client.cache_hits)

        return list(await asyncio.gather(*(one(p) for p in pairs)))
