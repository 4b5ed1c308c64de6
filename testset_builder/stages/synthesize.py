"""Synthesize: questions generated from sampled chunks, each auto-labelling its source chunk (and the source's
duplicate twins) grade 2, filtered, deduplicated, and mined for other relevant chunks.

The flow, in rounds until the requested count is met or the eligible chunks run out:
1. sample informative chunks across documents (:mod:`~testset_builder.stages.sampling`) and give each question a
   style from the configured distribution; a ``multi`` question pairs its chunk with the most similar other chunk
   (BM25) and needs both;
2. generate one question per slot with the prompt for the provider's kind (``prompts/synthesize/chat.md`` for
   instruction models, the InPars-style ``completion-<style>.md`` for base models), each with its own seed;
3. filter, counting each removal: validation, the answerability critic (the judge must grade the source >= a
   minimum), the optional round-trip check, then near-duplicates across the whole set;
4. store the questions and their source labels; then (``mine``) judge the top-ranked *other* chunks for each
   question and queue the positive grades as ``llm`` proposals, since a synthetic set that labels only the source
   punishes a retriever for finding another chunk that answers.

Every LLM answer is cached, query and judgment ids are derived from content, so a rerun spends nothing twice and
stores nothing twice.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections import Counter
from dataclasses import asdict, astuple, dataclass, field

from ..config import SynthesizeConfig
from ..errors import BudgetExceededError, InputError, ProviderError
from ..llm.client import LLMClient
from ..llm.types import Completion
from ..prompts import clip, load_prompt
from ..records import Judgment, JudgmentSource, JudgmentStatus, Lineage, Query, QueryOrigin
from ..store import rows
from ..store.workspace import Workspace, utc_timestamp
from .judge import Judge, JudgePair
from .propose import JudgingCounts, PoolSettings, Retrievers, judge_and_queue, record_stage
from .queries import normalise
from .questions import NearDuplicates, clean, lexical_overlap, validation_problem
from .sampling import SourceChunk, allocate_styles, eligible_chunks, slot_seed, stratified_sample

CHAT_PROMPT = "synthesize/chat"
MAX_PASSAGE_CHARS = 3000


@dataclass
class Slot:
    index: int
    style: str
    sources: tuple[SourceChunk, ...]
    seed: int
    text: str = ""
    completion: Completion | None = None
    problem: str | None = None


@dataclass
class SynthesizeSummary:
    requested: int = 0
    made: int = 0
    already_made: int = 0
    rounds: int = 0
    chunks_eligible: int = 0
    chunks_skipped: dict[str, int] = field(default_factory=dict)
    chunks_sampled: int = 0
    documents_covered: int = 0
    generated: int = 0
    generation_failed: int = 0
    removed: dict[str, int] = field(
        default_factory=lambda: {"validation": 0, "critic": 0, "round_trip": 0, "near_duplicate": 0}
    )
    validation_reasons: dict[str, int] = field(default_factory=dict)
    surplus: int = 0
    styles: dict[str, int] = field(default_factory=dict)
    mean_overlap: dict[str, float] = field(default_factory=dict)
    source_labels: int = 0
    twin_labels: int = 0
    mining: JudgingCounts = field(default_factory=JudgingCounts)
    questions_with_extra_relevant: int = 0
    calls: int = 0
    cache_hits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    shortfall: str | None = None
    batch_id: str | None = None  # with batch: the stage stopped here, waiting for this batch
    batch_step: str | None = None
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def query_id_for(sources: tuple[SourceChunk, ...], text: str) -> str:
    key = "\x00".join([*(s.chunk_id for s in sources), normalise(text)])
    return "s-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


class Generator:
    """Builds the question request for a slot with the prompt that suits the provider."""

    def __init__(self, client: LLMClient, model: str, temperature: float) -> None:
        self.client, self.model, self.temperature = client, model, temperature
        self.kind = getattr(client.provider, "prompt_style", "chat")
        self._prompts = {}

    def prompt(self, style: str):
        name = CHAT_PROMPT if self.kind == "chat" else f"synthesize/completion-{style}"
        if name not in self._prompts:
            self._prompts[name] = load_prompt(name)
        return self._prompts[name]

    def request(self, slot: Slot):
        prompt = self.prompt(slot.style)
        options = dict(temperature=self.temperature, seed=slot.seed, max_tokens=int(prompt.meta.get("max_tokens", 64)))
        first = clip(slot.sources[0].text, MAX_PASSAGE_CHARS)
        if prompt.kind == "completion":
            options["stop"] = ("\n",)
            values = {"passage": " ".join(first.split())}
            if slot.style == "multi":
                values["second_passage"] = " ".join(clip(slot.sources[1].text, MAX_PASSAGE_CHARS).split())
            return prompt.request(self.model, **values, **options)
        if slot.style == "multi":
            passage = f"Passage 1: {first}\n\nPassage 2: {clip(slot.sources[1].text, MAX_PASSAGE_CHARS)}"
        else:
            passage = f"Passage: {first}"
        return prompt.request(
            self.model, style_instruction=prompt.meta["styles"][slot.style], passage=passage, **options
        )

    def lineage(self, slot: Slot) -> Lineage:
        prompt, completion = self.prompt(slot.style), slot.completion
        return Lineage(
            provider=self.client.provider.identity,
            model=completion.model or self.model,
            prompt_name=prompt.name,
            prompt_sha256=prompt.sha256,
            temperature=self.temperature,
            seed=slot.seed,
            usage=completion.usage.model_dump(),
            cost_usd=None if completion.cached else self.client.prices.cost(self.model, completion.usage),
        )


def _partner(chunk: SourceChunk, bm25, by_id: dict[str, SourceChunk], twins: dict[str, str]) -> SourceChunk | None:
    """The chunk most similar to ``chunk`` by BM25, other than itself and its duplicates: the second source of a
    multi-chunk question."""
    run = bm25.search([chunk.chunk_id], [chunk.text[:2000]], k=10)
    group = twins.get(chunk.chunk_id)
    for _, chunk_id, _, _ in run.ranked_rows():
        if chunk_id != chunk.chunk_id and chunk_id in by_id and (group is None or twins.get(chunk_id) != group):
            return by_id[chunk_id]
    return None


class _WaitingForBatch(Exception):
    def __init__(self, batch_id: str, step: str) -> None:
        self.batch_id, self.step = batch_id, step


async def _batched(client: LLMClient, batch: bool, requests: list, step: str) -> None:
    """With ``batch``, stop the stage at the first step whose answers are not all in the cache, after submitting
    them; each rerun after ``resume`` gets one step further, and a rerun with every answer cached makes no call."""
    if batch:
        batch_id = await client.submit_missing(requests)
        if batch_id is not None:
            raise _WaitingForBatch(batch_id, step)


async def synthesize(
    workspace: Workspace,
    client: LLMClient,
    model: str,
    settings: SynthesizeConfig = SynthesizeConfig(),
    *,
    progress=None,
    batch: bool = False,
) -> SynthesizeSummary:
    """See the module docstring. With ``batch``, LLM calls go through the provider's batch API, one step per run."""
    try:
        return await _synthesize(workspace, client, model, settings, progress, batch)
    except _WaitingForBatch as waiting:
        summary = SynthesizeSummary(requested=settings.questions, batch_id=waiting.batch_id, batch_step=waiting.step)
        return summary


async def _synthesize(
    workspace: Workspace, client: LLMClient, model: str, settings: SynthesizeConfig, progress, batch: bool
) -> SynthesizeSummary:
    started, clock = utc_timestamp(), time.perf_counter()
    summary = SynthesizeSummary(requested=settings.questions)
    before = client.spend()
    live = [SourceChunk(*row) for row in rows.live_chunk_rows(workspace.db)]
    if not live:
        raise InputError(
            "the workspace has no chunks yet: run `testset-builder chunk SOURCE --workspace ...` first",
            path=workspace.root,
        )
    duplicates = rows.live_duplicate_groups(workspace.db)
    group_of = {chunk_id: group for chunk_id, (group, _) in duplicates.items()}
    eligible, skipped = eligible_chunks(live, group_of, settings.min_chars)
    summary.chunks_eligible, summary.chunks_skipped = len(eligible), dict(skipped)
    if not eligible:
        raise InputError(
            f"no chunk is informative enough for a question ({', '.join(f'{n} {r}' for r, n in skipped.items())}); "
            "lower synthesize.min_chars?"
        )
    by_id = {c.chunk_id: c for c in eligible}
    # one index load for the whole stage: BM25 pairs multi-chunk questions and checks round trips; mining adds dense
    retrievers = Retrievers(workspace, PoolSettings().names() if settings.mine else ("bm25",))
    bm25 = retrievers.indexes["bm25"]
    generator = Generator(client, model, settings.temperature)
    judge = Judge(client, model) if settings.critic or settings.mine else None

    existing = NearDuplicates()
    for (text,) in workspace.db.execute("SELECT text FROM queries WHERE origin = 'synthetic'"):
        existing.add(text)
    accepted: list[tuple[Slot, Query]] = []
    taken: Counter = Counter()
    sampled: set[str] = set()
    attempted = 0
    for round_number in range(settings.max_rounds):
        want = settings.questions - len(accepted)
        if want <= 0:
            break
        summary.rounds += 1
        factor = 1.0 if round_number == 0 else min(4.0, max(1.5, attempted / max(1, len(accepted))))
        remaining = [c for c in eligible if c.chunk_id not in sampled]
        picked = stratified_sample(
            remaining,
            math.ceil(want * factor / settings.per_chunk),
            settings.seed + round_number,
            settings.per_document_cap,
            taken,
        )
        if not picked:
            break
        for chunk in picked:
            sampled.add(chunk.chunk_id)
            taken[chunk.doc_id] += 1
        styles = allocate_styles(len(picked) * settings.per_chunk, settings.styles, settings.seed + round_number)
        slots = []
        for position, style in enumerate(styles):
            chunk = picked[position // settings.per_chunk]
            sources = (chunk,)
            if style == "multi":
                partner = _partner(chunk, bm25, by_id, group_of)
                sources, style = ((chunk, partner), style) if partner else ((chunk,), "natural")
            slots.append(
                Slot(
                    len(slots),
                    style,
                    sources,
                    slot_seed(settings.seed, chunk.chunk_id, style, str(position % settings.per_chunk)),
                )
            )
        attempted += len(slots)
        requests = [generator.request(s) for s in slots]
        await _batched(client, batch, requests, f"questions, round {round_number + 1}")
        answers = await client.complete_many(
            requests, progress=progress, description=f"questions (round {round_number + 1})"
        )
        for slot, answer in zip(slots, answers):
            if isinstance(answer, BudgetExceededError | ProviderError):
                summary.generation_failed += 1
                slot.problem = "failed"
                continue
            summary.generated += 1
            slot.completion, slot.text = answer, clean(answer.text)
            if settings.validate_questions:
                problem = validation_problem(slot.text, slot.sources[0].text, slot.style)
                if problem:
                    slot.problem = "validation"
                    summary.removed["validation"] += 1
                    summary.validation_reasons[problem] = summary.validation_reasons.get(problem, 0) + 1
        survivors = [s for s in slots if s.problem is None]
        if settings.critic and survivors:
            survivors = await _critic(judge, survivors, settings, summary, progress, batch)
        if settings.round_trip_k and survivors:
            run = bm25.search(
                [str(s.index) for s in survivors], [s.text for s in survivors], k=settings.round_trip_k
            ).to_dict()
            kept = [s for s in survivors if any(src.chunk_id in run.get(str(s.index), {}) for src in s.sources)]
            summary.removed["round_trip"] += len(survivors) - len(kept)
            survivors = kept
        for slot in survivors:
            query_id = query_id_for(slot.sources, slot.text)
            if (
                settings.dedupe
                and not existing.add(slot.text)
                and not rows.existing_query_ids(workspace.db, [query_id])
            ):
                summary.removed["near_duplicate"] += 1
                continue
            if len(accepted) == settings.questions:
                summary.surplus += 1
                continue
            query = Query(
                query_id=query_id,
                text=slot.text,
                origin=QueryOrigin.synthetic,
                source_chunk_id=slot.sources[0].chunk_id,
                style=slot.style,
                metadata={
                    "lexical_overlap": lexical_overlap(slot.text, " ".join(s.text for s in slot.sources)),
                    "source_chunk_ids": [s.chunk_id for s in slot.sources],
                },
                lineage=generator.lineage(slot),
            )
            accepted.append((slot, query))
    summary.chunks_sampled, summary.documents_covered = len(sampled), len({by_id[c].doc_id for c in sampled})
    _store(workspace, accepted, duplicates, summary)
    if len(accepted) < settings.questions:
        summary.shortfall = _shortfall(settings, summary, len(eligible), len(sampled))
    if settings.mine and accepted:
        await _mine(workspace, judge, retrievers, [q for _, q in accepted], settings, summary, progress, batch)
    spent = client.spend() - before
    summary.calls, summary.cache_hits, summary.input_tokens, summary.output_tokens, summary.cost_usd = astuple(spent)
    summary.seconds = round(time.perf_counter() - clock, 3)
    record_stage(
        workspace,
        "synthesize",
        {"settings": settings.model_dump(), "provider": client.provider.identity, "model": model},
        summary.as_dict(),
        started,
    )
    return summary


async def _critic(
    judge: Judge,
    slots: list[Slot],
    settings: SynthesizeConfig,
    summary: SynthesizeSummary,
    progress,
    batch: bool = False,
) -> list[Slot]:
    """Keep the questions whose every source the judge grades at least ``critic_min_grade`` (1 for a multi
    question's sources: each answers only part of it). A failed judgment keeps nothing."""
    pairs = [JudgePair(f"slot-{s.index}", s.text, src.chunk_id, src.text) for s in slots for src in s.sources]
    await _batched(judge.client, batch, [judge.request(p) for p in pairs], "answerability critic")
    outcomes = iter(await judge.judge_many(pairs, progress=progress, description="answerability critic"))
    kept = []
    for slot in slots:
        minimum = 1 if slot.style == "multi" else settings.critic_min_grade
        verdicts = [next(outcomes) for _ in slot.sources]
        if all(isinstance(v, Judgment) and v.grade >= minimum for v in verdicts):
            kept.append(slot)
        else:
            summary.removed["critic"] += 1
    return kept


def _store(
    workspace: Workspace,
    accepted: list[tuple[Slot, Query]],
    duplicates: dict[str, tuple[str, str]],
    summary: SynthesizeSummary,
) -> None:
    """The questions and their labels: each source chunk grade 2 (``synthetic-source``, final), and each live
    duplicate twin of a source too (an exact or near copy answers the question as well)."""
    members: dict[str, list[tuple[str, str]]] = {}
    for chunk_id, (group, kind) in duplicates.items():
        members.setdefault(group, []).append((chunk_id, kind))
    labels: list[Judgment] = []
    for slot, query in accepted:
        labelled = set()
        for source in slot.sources:
            targets = [(source.chunk_id, "source chunk")]
            group = duplicates.get(source.chunk_id, (None, None))[0]
            targets += [
                (c, f"{kind} duplicate of the source chunk {source.chunk_id}")
                for c, kind in sorted(members.get(group, []))
                if c != source.chunk_id
            ]
            for chunk_id, why in targets:
                if chunk_id in labelled:
                    continue
                labelled.add(chunk_id)
                is_twin = why != "source chunk"
                summary.twin_labels += is_twin
                summary.source_labels += not is_twin
                labels.append(
                    Judgment(
                        judgment_id="src-"
                        + hashlib.sha256(f"{query.query_id}\x00{chunk_id}".encode()).hexdigest()[:24],
                        query_id=query.query_id,
                        chunk_id=chunk_id,
                        grade=2,
                        source=JudgmentSource.synthetic_source,
                        status=JudgmentStatus.final,
                        rationale=why,
                        lineage=query.lineage,
                    )
                )
        summary.styles[query.style] = summary.styles.get(query.style, 0) + 1
    overlaps: dict[str, list[float]] = {}
    for _, query in accepted:
        overlaps.setdefault(query.style, []).append(query.metadata["lexical_overlap"])
    summary.mean_overlap = {style: round(sum(v) / len(v), 3) for style, v in sorted(overlaps.items())}
    with workspace.transaction() as db:
        known = rows.existing_query_ids(db, [q.query_id for _, q in accepted])
        summary.already_made = len(known)
        summary.made = len(accepted) - len(known)
        rows.put_queries(db, [q for _, q in accepted])
        done = rows.existing_judgment_ids(db, [j.judgment_id for j in labels])
        rows.add_judgments(db, [j for j in labels if j.judgment_id not in done])


async def _mine(
    workspace: Workspace,
    judge: Judge,
    retrievers: Retrievers,
    queries: list[Query],
    settings: SynthesizeConfig,
    summary: SynthesizeSummary,
    progress,
    batch: bool = False,
) -> None:
    """False-negative mining: the judge grades each question's top-ranked chunks other than its labelled ones
    (BM25, plus dense and their fusion when the dense extra is installed); positive grades are queued for review."""
    from ..retrieval.pool import pool, pooled_pairs
    from ..tables import Run

    labelled: dict[str, set[str]] = {}
    for query in queries:
        labelled[query.query_id] = {
            j.chunk_id
            for j in rows.iter_judgments(workspace.db, query.query_id)
            if j.source is JudgmentSource.synthetic_source
        }
    depth = settings.mine_depth + max(len(v) for v in labelled.values())  # deep enough to hold k others
    runs = retrievers.runs(queries, k=depth)
    others = {
        name: Run.from_dict(
            {
                q: {c: score for c, score in ranked.items() if c not in labelled[q]}
                for q, ranked in run.to_dict().items()
            },
            name=name,
        )
        for name, run in runs.items()
    }
    pairs_wanted = set(
        pooled_pairs(pool(others, settings.mine_depth))
    )  # each retriever's top k other chunks, and the fused top k
    texts = {q.query_id: q.text for q in queries}
    pairs = [JudgePair(q, texts[q], c, retrievers.passages[c]) for q, c in sorted(pairs_wanted)]
    candidates = [c for c in pool(runs, depth) if (c.query_id, c.chunk_id) in pairs_wanted]
    with workspace.transaction() as db:
        rows.put_candidates(db, candidates)  # with their ranks among all chunks, labelled ones included
    summary.mining, every = await judge_and_queue(
        workspace,
        judge,
        pairs,
        batch=batch,
        progress=progress,
        queue_if=lambda j: j.grade >= 1,
        description="mining other chunks",
    )
    if summary.mining.batch_id:
        summary.batch_id, summary.batch_step = summary.mining.batch_id, "mining other chunks"
    summary.questions_with_extra_relevant = len({q for (q, _), j in every.items() if j.grade >= 1})


def _shortfall(settings: SynthesizeConfig, summary: SynthesizeSummary, eligible: int, sampled: int) -> str:
    made = summary.made + summary.already_made
    removed = ", ".join(f"{n} by {name.replace('_', ' ')}" for name, n in summary.removed.items() if n)
    if sampled >= eligible:
        why = f"every one of the {eligible} eligible chunks was used"
    else:
        why = f"{settings.max_rounds} sampling rounds were not enough (raise synthesize.max_rounds)"
    return f"made {made} of {settings.questions} questions: {why}; removed {removed or 'none'}; {summary.generation_failed} generations failed"
