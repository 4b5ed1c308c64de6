"""The synthesize stage: rounds of sampling, writing and filtering until the requested count is met.

Each round:
1. sample informative chunks across documents (:mod:`~testset_builder.corpus.sampling`) and give each question a
   style from the configured distribution; a ``multi`` question pairs its chunk with the most similar other chunk;
2. write one question per slot with the generator (:mod:`.generation`), each with its own seed; a slot whose
   question a rule rejects is asked again with a fresh seed, ``candidates`` tries in all;
3. filter, counting each removal: validation, the answerability critic (:mod:`.critic`), the optional round-trip
   check, then near-duplicates across the whole set.

Then the questions and their source labels are stored (:mod:`.labels`) and, with ``mine``, other chunks that answer
them are looked for (:mod:`.mining`). The critic and mining ask the LLM judge, or the relevance estimate with no LLM
call (``relevance_by``; ``auto``: the estimate when the judge is the embedded local model, which is near chance on
relevance, else the judge). A budget stop ends the rounds early; the summary says so and what was made
is kept. Every LLM answer is cached and query and judgment ids derive from content, so a rerun spends nothing twice
and stores nothing twice.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import asdict, astuple, dataclass, field

from ...config import JudgingConfig, SynthesizeConfig
from ...corpus.sampling import (
    SourceChunk,
    allocate_styles,
    corpus_fingerprint,
    eligible_chunks,
    round_chunks,
    slot_seed,
    stratified_sample,
)
from ...errors import BudgetExceededError, InputError
from ...labels.estimate import current_model, described
from ...labels.judge import Judge
from ...labels.labelling import JudgingCounts
from ...llm.roles import Role, Roles
from ...llm.types import Completion
from ...prompts import PromptLibrary
from ...questions import NearDuplicates, clean, lexical_overlap, split_evidence, validation_problem
from ...records import Query, QueryOrigin
from ...retrieval.indexes import WorkspaceIndexes, retriever_names
from ...store import corpus as corpus_store
from ...store import history, rows
from ...store import review as review_store
from ...store.workspace import Workspace, utc_timestamp
from .audit import draw_audit
from .batching import WaitingForBatch, submit_or_go_on
from .critic import critic, critic_by_estimate
from .doubt import check_sources, queue_doubted
from .generation import Generator, Slot, partner, query_id_for
from .labels import store_questions
from .mining import mine, mine_by_estimate


@dataclass
class SynthesizeSummary:
    requested: int = 0
    made: int = 0
    already_made: int = 0
    query_ids: list[str] = field(default_factory=list)  # the questions this run made or found already made
    rounds: int = 0
    chunks_eligible: int = 0
    chunks_skipped: dict[str, int] = field(default_factory=dict)
    chunks_sampled: int = 0
    corpus: str = ""  # the fingerprint of the live chunks it sampled from (corpus_fingerprint)
    documents_covered: int = 0
    generated: int = 0
    generation_failed: int = 0
    failure: str | None = None  # the first failed generation's error, in one line
    retried: int = 0  # questions asked again of their slot after a rule rejected the one before (in generated)
    not_generated_budget: int = 0
    removed: dict[str, int] = field(
        default_factory=lambda: {"validation": 0, "critic": 0, "round_trip": 0, "near_duplicate": 0}
    )
    validation_reasons: dict[str, int] = field(default_factory=dict)
    critic_failed: int = 0  # questions whose critic judgment failed: held back, judged again on a rerun
    surplus: int = 0
    styles: dict[str, int] = field(default_factory=dict)
    mean_overlap: dict[str, float] = field(default_factory=dict)
    source_labels: int = 0
    twin_labels: int = 0
    mining: JudgingCounts = field(default_factory=JudgingCounts)
    questions_with_extra_relevant: int = 0
    critic_by: str | None = None  # what decided: "estimate (prior five-domains-v6)" or "llm judge local:gemma-3-270m"
    mined_by: str | None = None
    doubted: int = 0  # questions whose source the estimate doubts: queued for review as questions
    doubted_waiting: int = 0  # of them, those no reviewer has answered yet (a release holds them back)
    held_waiting: int = 0  # questions a release holds back until answered (release.hold_unreviewed), unanswered
    audit_drawn: int = 0  # questions drawn at random for review: the audit of the unchecked labels
    calls: int = 0
    cache_hits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    budget_stopped: bool = False  # the cost limit refused a call: fewer questions or judgments than asked
    shortfall: str | None = None
    batch_id: str | None = None  # with batch: the stage stopped here, waiting for this batch
    batch_step: str | None = None
    seconds: float = 0.0

    @property
    def incomplete(self) -> bool:
        """Fewer questions than asked, or some LLM work left for a rerun (exit code 3)."""
        return bool(
            self.shortfall
            or self.generation_failed
            or self.critic_failed
            or self.budget_stopped
            or self.mining.incomplete
        )

    @property
    def retryable(self) -> bool:
        """Whether a rerun can make more: LLM work failed or the budget stopped it. A shortfall for want of chunks
        or rounds is not (temperature 0 and the cache give a rerun the same questions)."""
        return bool(self.generation_failed or self.critic_failed or self.budget_stopped or self.mining.incomplete)

    def as_dict(self) -> dict:
        return {**asdict(self), "incomplete": self.incomplete, "retryable": self.retryable}


async def synthesize(
    workspace: Workspace,
    roles: Roles,
    settings: SynthesizeConfig | None = None,
    *,
    judging: JudgingConfig | None = None,
    prompts: PromptLibrary | None = None,
    progress=None,
    batch: bool = False,
) -> SynthesizeSummary:
    """See the module docstring. The generator role writes; the judge role, or the relevance estimate, criticises and
    mines. With ``batch``, LLM calls go through the provider's batch API, one step per run."""
    settings = settings or SynthesizeConfig()
    with workspace.exclusive("synthesize"):
        try:
            return await _Run(workspace, roles, settings, judging, prompts, progress, batch).run()
        except WaitingForBatch as waiting:
            return SynthesizeSummary(requested=settings.questions, batch_id=waiting.batch_id, batch_step=waiting.step)


def decides_by_estimate(relevance_by: str, judge: Role) -> bool:
    """Whether the relevance estimate, not the LLM judge, decides for the critic and mining: ``auto`` picks it when
    the judge is a weak model such as the embedded one (near chance on relevance; the estimate is far better and costs
    no call)."""
    return relevance_by == "estimate" or (relevance_by == "auto" and judge.weak)


class _Run:
    """One synthesize run's state across rounds; each step a method."""

    def __init__(self, workspace, roles, settings, judging, prompts, progress, batch) -> None:
        self.workspace, self.roles, self.settings = workspace, roles, settings
        self.progress, self.batch = progress, batch
        self.summary = SynthesizeSummary(requested=settings.questions)
        prompts = prompts or PromptLibrary()
        self.generator = Generator(roles.generator, settings.temperature, prompts)
        self.by_estimate = decides_by_estimate(settings.relevance_by, roles.judge)
        judged = (settings.critic or settings.mine) and not self.by_estimate
        self.judge = Judge(roles.judge, judging, prompts) if judged else None
        self.judge_name = f"llm judge {roles.judge.provider.split(':', 1)[0]}:{roles.judge.model}"
        self.model = None  # the estimate's model, fitted once a run needs it
        self.accepted: list[tuple[Slot, Query]] = []
        self.sampled: set[str] = set()
        self.taken: Counter = Counter()
        self.attempted = 0

    async def run(self) -> SynthesizeSummary:
        started, clock, before = utc_timestamp(), time.perf_counter(), self.roles.spend()
        summary, settings = self.summary, self.settings
        self._load_chunks()
        self.existing = NearDuplicates()
        for text in rows.synthetic_query_texts(self.workspace.db):
            self.existing.add(text)
        for round_number in range(settings.max_rounds):
            want = settings.questions - len(self.accepted)
            if want <= 0 or self.roles.budget_stopped:
                break
            summary.rounds += 1
            slots = self._slots(round_number, want)
            if not slots:
                break
            await self._write(slots, round_number)
            survivors = [s for s in slots if s.problem is None]
            survivors = await self._criticise(survivors)
            survivors = self._round_trip(survivors)
            self._accept(survivors)
        summary.chunks_sampled = len(self.sampled)
        summary.documents_covered = len({self.by_id[c].doc_id for c in self.sampled})
        self._store()
        if len(self.accepted) < settings.questions:
            summary.shortfall = self._shortfall()
        if settings.mine and self.accepted:
            await self._mine()
        if settings.check_sources and self.accepted:
            self._doubt()
        if settings.audit and self.accepted:
            doubted = set(review_store.doubted_questions(self.workspace.db))
            self.summary.audit_drawn = draw_audit(
                self.workspace, [q.query_id for _, q in self.accepted], doubted, settings.audit, settings.seed
            )
        summary.budget_stopped = self.roles.budget_stopped
        spent = self.roles.spend() - before
        summary.calls, summary.cache_hits, summary.input_tokens, summary.output_tokens, summary.cost_usd = astuple(
            spent
        )
        summary.seconds = round(time.perf_counter() - clock, 3)
        roles = {
            name: {"provider": r.provider, "model": r.model}
            for name, r in (("generator", self.roles.generator), ("judge", self.roles.judge))
        }
        history.record_stage(
            self.workspace,
            "synthesize",
            {"settings": settings.model_dump(), "roles": roles},
            summary.as_dict(),
            started,
        )
        return summary

    # steps ------------------------------------------------------------------------------------------------------
    def _load_chunks(self) -> None:
        workspace, settings, summary = self.workspace, self.settings, self.summary
        live = [SourceChunk(*row) for row in rows.live_chunk_rows(workspace.db)]
        summary.corpus = corpus_fingerprint(live)
        if not live:
            raise InputError(
                "the workspace has no chunks yet: run `testset-builder chunk SOURCE --workspace ...` first",
                path=workspace.root,
            )
        self.duplicates = rows.live_duplicate_groups(workspace.db)
        self.group_of = {chunk_id: group for chunk_id, (group, _) in self.duplicates.items()}
        marked = corpus_store.boilerplate_chunks(workspace.db)
        self.eligible, skipped = eligible_chunks(live, self.group_of, settings.min_chars, marked)
        summary.chunks_eligible, summary.chunks_skipped = len(self.eligible), dict(skipped)
        if not self.eligible:
            reasons = ", ".join(f"{n} {r}" for r, n in skipped.items())
            raise InputError(f"no chunk is informative enough for a question ({reasons}); lower synthesize.min_chars?")
        self.by_id = {c.chunk_id: c for c in self.eligible}
        self.made_at = self._made_at(rows.synthetic_question_slots(workspace.db))
        # one index load for the stage: BM25 pairs multi-chunk questions and checks round trips; mining and the
        # estimate add dense
        dense = settings.mine or (settings.critic and self.by_estimate)
        self.indexes = WorkspaceIndexes(workspace, retriever_names("auto") if dense else ("bm25",), self.progress)
        self.bm25 = self.indexes.indexes["bm25"]

    def _made_at(self, stored: list[tuple[str, str, int]]) -> dict[str, dict[int, str]]:
        """The slots (chunk, position) of questions already made with these settings, and each one's style: a slot's
        seed names its chunk, style and position, so a stored question's seed says where it was asked (its first
        try's seed, or a later try's). A question made with another seed or another version's slots is not one."""
        settings, made_at = self.settings, {}
        for chunk_id, style, seed in stored:
            if chunk_id not in self.by_id:
                continue
            for position in range(settings.per_chunk):
                first = slot_seed(settings.seed, chunk_id, style, str(position))
                tries = {first} | {slot_seed(first, "candidate", str(k)) for k in range(1, settings.candidates)}
                if seed in tries:
                    made_at.setdefault(chunk_id, {})[position] = style
                    break
        return made_at

    def _slots(self, round_number: int, want: int) -> list[Slot]:
        """Sample chunks for this round (more than wanted after the first, by how many filters removed) and give
        each question slot a style and a seed of its own. The sample is the same on a rerun of the same corpus, and
        so are the styles; where a question already made sits on a slot given another style (the corpus changed
        around it, or another version sampled it), the slot keeps its question's style, so it is asked as before
        and costs nothing again."""
        settings = self.settings
        remaining = [c for c in self.eligible if c.chunk_id not in self.sampled]
        count = round_chunks(round_number, want, self.attempted, len(self.accepted), settings.per_chunk)
        picked = stratified_sample(
            remaining, count, settings.seed + round_number, settings.per_document_cap, self.taken
        )
        for chunk in picked:
            self.sampled.add(chunk.chunk_id)
            self.taken[chunk.doc_id] += 1
        keys = [f"{chunk.chunk_id}\x00{p}" for chunk in picked for p in range(settings.per_chunk)]
        styles = allocate_styles(keys, settings.styles, settings.seed + round_number)
        made = {
            i * settings.per_chunk + p: style
            for i, chunk in enumerate(picked)
            for p, style in self.made_at.get(chunk.chunk_id, {}).items()
        }
        moved = any(styles[i] != style and (styles[i], style) != ("multi", "natural") for i, style in made.items())
        if moved:  # a multi question asked as natural (no partner) is where it was: the replay is left as it is
            styles = allocate_styles(keys, settings.styles, settings.seed + round_number, made)
        slots = []
        for position, style in enumerate(styles):
            chunk = picked[position // settings.per_chunk]
            sources: tuple[SourceChunk, ...] = (chunk,)
            if style == "multi":
                second = partner(chunk, self.bm25, self.by_id, self.group_of)
                sources, style = ((chunk, second), style) if second else ((chunk,), "natural")
            seed = slot_seed(settings.seed, chunk.chunk_id, style, str(position % settings.per_chunk))
            slots.append(Slot(len(slots), style, sources, seed))
        self.attempted += len(slots)
        return slots

    async def _write(self, slots: list[Slot], round_number: int) -> None:
        """One question per slot; each answer cleaned and validated (a failure or the budget's stop marks it). A slot
        whose question a rule rejected is asked again, up to ``candidates`` tries in all: the sampled chunk keeps its
        place instead of the next round sampling another in its stead."""
        asking = slots
        for candidate in range(self.settings.candidates):
            if candidate:
                asking = [s for s in asking if s.problem == "validation"]
                if not asking:
                    break
                for slot in asking:
                    slot.next_candidate()
                self.summary.retried += len(asking)
            await self._ask(asking, round_number, candidate)

    async def _ask(self, slots: list[Slot], round_number: int, candidate: int) -> None:
        summary, client = self.summary, self.roles.generator.client
        requests = [self.generator.request(s) for s in slots]
        step = f"round {round_number + 1}" + (f", try {candidate + 1}" if candidate else "")
        await submit_or_go_on(client, self.batch, requests, f"questions, {step}")
        answers = await client.complete_many(requests, progress=self.progress, description=f"questions ({step})")
        for slot, answer in zip(slots, answers):
            if isinstance(answer, BudgetExceededError):
                summary.not_generated_budget += 1
                slot.problem = "budget"
                continue
            if not isinstance(answer, Completion):
                summary.generation_failed += 1
                summary.failure = summary.failure or " ".join(str(answer).split())[:300]
                slot.problem = "failed"
                continue
            summary.generated += 1
            text, slot.evidence = (
                split_evidence(answer.text) if self.generator.asks_for_evidence(slot.style) else (answer.text, None)
            )
            slot.completion, slot.text = answer, clean(text)
            problem = (
                validation_problem(
                    slot.text,
                    " ".join(s.text for s in slot.sources),
                    slot.style,
                    answer.finish_reason == "length",
                    rules=self.settings.question_rules,
                )
                if self.settings.validate_questions
                else None
            )
            if problem:
                slot.problem = "validation"
                summary.removed["validation"] += 1
                summary.validation_reasons[problem] = summary.validation_reasons.get(problem, 0) + 1

    async def _criticise(self, survivors: list[Slot]) -> list[Slot]:
        if not (self.settings.critic and survivors):
            return survivors
        if self.by_estimate:
            self.model = self.model or current_model(self.workspace, self.indexes)
            self.summary.critic_by = described(self.model.name, self.model.verdicts)
            outcome = critic_by_estimate(self.model, self.indexes, survivors, self.settings.critic_min_estimate)
        else:
            self.summary.critic_by = self.judge_name
            outcome = await critic(self.judge, survivors, self.settings.critic_min_grade, self.progress, self.batch)
        self.summary.removed["critic"] += outcome.removed
        self.summary.critic_failed += outcome.failed
        return outcome.kept

    def _round_trip(self, survivors: list[Slot]) -> list[Slot]:
        """Keep a question only if BM25 ranks one of its sources in the top ``round_trip_k`` (off by default)."""
        if not (self.settings.round_trip_k and survivors):
            return survivors
        ids, texts = [str(s.index) for s in survivors], [s.text for s in survivors]
        run = self.bm25.search(ids, texts, k=self.settings.round_trip_k).to_dict()
        kept = [s for s in survivors if any(src.chunk_id in run.get(str(s.index), {}) for src in s.sources)]
        self.summary.removed["round_trip"] += len(survivors) - len(kept)
        return kept

    def _accept(self, survivors: list[Slot]) -> None:
        """Near-duplicates of the set (earlier runs included) go; past the requested count, the rest is surplus."""
        summary, settings = self.summary, self.settings
        for slot in survivors:
            query_id = query_id_for(slot.sources, slot.text)
            if settings.dedupe:
                novel = self.existing.add(slot.text)
                if not novel and not rows.existing_query_ids(self.workspace.db, [query_id]):
                    summary.removed["near_duplicate"] += 1
                    continue
            if len(self.accepted) == settings.questions:
                summary.surplus += 1
                continue
            overlap = lexical_overlap(slot.text, " ".join(s.text for s in slot.sources))
            query = Query(
                query_id=query_id,
                text=slot.text,
                origin=QueryOrigin.synthetic,
                source_chunk_id=slot.sources[0].chunk_id,
                style=slot.style,
                metadata={"lexical_overlap": overlap, "source_chunk_ids": [s.chunk_id for s in slot.sources]},
                lineage=self.generator.lineage(slot),
            )
            self.accepted.append((slot, query))

    def _store(self) -> None:
        summary = self.summary
        stored = store_questions(self.workspace, self.accepted, self.duplicates)
        summary.made, summary.already_made = stored.made, stored.already_made
        summary.query_ids = [query.query_id for _, query in self.accepted]
        summary.source_labels, summary.twin_labels = stored.source_labels, stored.twin_labels
        overlaps: dict[str, list[float]] = {}
        for _, query in self.accepted:
            summary.styles[query.style] = summary.styles.get(query.style, 0) + 1
            overlaps.setdefault(query.style, []).append(query.metadata["lexical_overlap"])
        summary.mean_overlap = {style: round(sum(v) / len(v), 3) for style, v in sorted(overlaps.items())}

    async def _mine(self) -> None:
        summary, depth = self.summary, self.settings.mine_depth
        queries = [q for _, q in self.accepted]
        if self.by_estimate:
            summary.mining, summary.questions_with_extra_relevant, summary.mined_by = mine_by_estimate(
                self.workspace, self.indexes, queries, depth
            )
            return
        summary.mined_by = self.judge_name
        summary.mining, summary.questions_with_extra_relevant = await mine(
            self.workspace, self.judge, self.indexes, queries, depth, self.progress, self.batch
        )
        if summary.mining.batch_id:
            summary.batch_id, summary.batch_step = summary.mining.batch_id, "mining other chunks"

    def _doubt(self) -> None:
        """Queue for review the questions whose source the estimate doubts (:mod:`.doubt`); no LLM call."""
        self.model = self.model or current_model(self.workspace, self.indexes)
        checks = check_sources(self.model, self.indexes, [query for _, query in self.accepted])
        self.summary.doubted = queue_doubted(self.workspace, checks)
        answered = review_store.doubted_questions(self.workspace.db)
        self.summary.doubted_waiting = sum(c.doubt is not None and not answered.get(c.query_id) for c in checks)

    def _shortfall(self) -> str:
        settings, summary = self.settings, self.summary
        made = summary.made + summary.already_made
        removed = ", ".join(f"{n} by {name.replace('_', ' ')}" for name, n in summary.removed.items() if n)
        if self.roles.budget_stopped:
            why = f"the cost limit (${self.roles.generator.client.budget.max_cost_usd:.4f}) stopped the rounds"
        elif len(self.sampled) >= len(self.eligible):
            why = f"every one of the {len(self.eligible)} eligible chunks was used"
        else:
            why = f"{settings.max_rounds} sampling rounds were not enough (raise synthesize.max_rounds)"
        held = f", {summary.critic_failed} held back by failed critic judgments" if summary.critic_failed else ""
        return (
            f"made {made} of {settings.questions} questions: {why}; removed {removed or 'none'}; "
            f"{summary.generation_failed} generations failed{held}"
        )
