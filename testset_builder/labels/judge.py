"""The one graded relevance judge, used by ``propose`` (real queries) and by synthesize's false-negative mining.

Pointwise: one call per (query, chunk) pair. Instruction models get the UMBRELA-style chat prompt
(``prompts/judge/umbrela-chat.md``, a 0-3 score with a short rationale, validated by pydantic with one re-ask) and
base models the few-shot completion prompt (``prompts/judge/few-shot-completion.md``, one digit). Either way the
prompt's ``scale`` maps the model's score to our grades 0/1/2.

Where the provider returns log-probabilities, the probability of each grade is read from the alternatives at the
score token and stored with the judgment (``grade_probs``), and the grade follows from them by one rule
(:func:`coherent_grade`), so that the grade and the relevant / not-relevant decision never disagree: relevant when
P(relevant) = P(1) + P(2) is above one half, and then 2 when P(2) > P(1), else 1; otherwise 0. ``confidence`` is the
probability of that decision (P(relevant) or P(0)). Before, the grade was the single most likely one, so a pair with
P(0) = 0.4, P(1) = 0.3, P(2) = 0.3 was graded 0 while being more likely relevant than not. Without
log-probabilities the sampled grade is stored with ``confidence`` unknown. Labels move with a prompt's wording, so
every judgment keeps the prompt's name and sha256, the model and the provider in its lineage.

A judgment's id derives from the pair and the request's cache key, so "already judged" and "already paid for"
are the same question: change anything the judge sends (the prompt, the model, the passage clipping,
log-probabilities) and the pairs are judged anew; change nothing and a rerun judges nothing.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from ..config import JudgingConfig
from ..errors import StructuredOutputError
from ..llm.client import LLMFailure
from ..llm.roles import Role
from ..llm.types import Completion, LLMRequest, TokenLogprob
from ..prompts import PromptLibrary, clip
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


JudgeOutcome = Judgment | LLMFailure


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


def coherent_grade(grade_probs: dict[int, float]) -> tuple[int, float]:
    """The grade that agrees with the binary decision, and that decision's probability (see the module docstring)."""
    p_relevant = grade_probs.get(1, 0.0) + grade_probs.get(2, 0.0)
    if p_relevant > 0.5:
        return (2 if grade_probs.get(2, 0.0) > grade_probs.get(1, 0.0) else 1), min(1.0, p_relevant)
    return 0, min(1.0, 1.0 - p_relevant)


def judgment_id(pair: JudgePair, request_key: str) -> str:
    """Deterministic: the same pair asked with the same request (provider, model, prompt, options) is the same
    judgment on a rerun."""
    return "llm-" + hashlib.sha256(f"{pair.query_id}\x00{pair.chunk_id}\x00{request_key}".encode()).hexdigest()[:24]


class Judge:
    """Grades pairs with the judge ``role``: its prompt style picks the prompt unless ``settings.prompt`` names one;
    ``settings`` may also clip passages and turn log-probabilities off or on."""

    def __init__(self, role: Role, settings: JudgingConfig | None = None, prompts: PromptLibrary | None = None) -> None:
        settings = settings or JudgingConfig()
        self.role = role
        self.client = role.client
        self.model = role.model
        self.style = role.prompt_style
        self.logprobs = role.logprobs if settings.logprobs is None else settings.logprobs
        prompts = prompts or PromptLibrary()
        self.prompt = prompts.load(
            settings.prompt or (COMPLETION_PROMPT if self.style == "completion" else CHAT_PROMPT)
        )
        self.scale: dict[int, int] = {int(k): int(v) for k, v in self.prompt.meta["scale"].items()}
        self.max_passage_chars = settings.max_passage_chars or int(self.prompt.meta.get("max_passage_chars", 4000))

    @property
    def weak(self) -> bool:
        return self.role.weak

    def judgment_id(self, pair: JudgePair) -> str:
        return judgment_id(pair, self.client.key(self.request(pair)))

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
        grade, confidence = coherent_grade(grade_probs) if grade_probs else (self.scale[score], None)
        return Judgment(
            judgment_id=judgment_id(pair, self.client.key(request)),
            query_id=pair.query_id,
            chunk_id=pair.chunk_id,
            grade=grade,
            source=JudgmentSource.llm,
            confidence=None if confidence is None else round(confidence, 6),
            grade_probs=grade_probs,
            rationale=rationale,
            status=JudgmentStatus.pending,
            lineage=Lineage(
                provider=self.client.provider.identity,
                model=completion.public_model(request.model),
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
        """Every pair through the client's one fan-out (:meth:`~testset_builder.llm.client.LLMClient.gather`): a
        pair that fails yields its error, in input order; after a budget stop the rest yield the budget's error
        (nothing is lost: what was answered is in the cache)."""
        return await self.client.gather(self.judge, pairs, progress, description)
