"""The plan of a run before it spends: for each LLM step, the calls, input and output tokens, cost and time.

``run --dry-run`` prints it and stops; every real ``run`` prints it before its first LLM call. The figures come from
the settings and the corpus at hand, corrected by what this workspace and this machine have measured:

- calls: synthesize sends requests in rounds until ``questions`` are accepted, as the stage does, at the yield
  (accepted questions per request) of this workspace's last synthesize run, else :data:`PRIOR_YIELD`; the critic
  asks the judge once per question that passed validation, and mining once per pooled other chunk, unless the
  relevance estimate decides (no call); propose judges each pooled pair of the queries not proposed yet (the pool
  size of the last proposal, else ``depth`` x pooled lists x :data:`POOL_OVERLAP`);
- input tokens: the stage's own prompts rendered over a sample of the corpus's chunks (and the real queries), at the
  characters per token this workspace measured for the model, else :data:`CHARS_PER_TOKEN`;
- output tokens: the mean this workspace measured for the same kind of request, else :data:`TYPICAL_OUTPUT`;
- cost: the price table (a model running on this machine, as its provider declares in ``abilities.local``, is free);
- time: such a model's prompt and generation speeds measured on this machine (see
  :mod:`~testset_builder.llm.throughput`; its measurements are those of providers whose identity starts with its
  kind), else the provider's measured seconds per call at the configured concurrency, else the assumptions the plan
  names.

Work a rerun repeats is answered from the cache and costs nothing: the questions the last synthesize run delivered
and the queries already proposed count as done.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from ..config import Config, ProviderConfig
from ..corpus.sampling import (
    SourceChunk,
    allocate_styles,
    corpus_fingerprint,
    round_chunks,
    skip_reason,
    stratified_sample,
)
from ..labels.judge import Judge, JudgePair
from ..llm import throughput
from ..llm.prices import PriceTable
from ..llm.types import LLMRequest, Usage
from ..prompts import PromptLibrary
from ..registry import abilities, provider_class
from ..retrieval.indexes import retriever_names
from .synthesize.generation import Generator, Slot

PRIOR_YIELD = {"completion": 0.75, "chat": 0.9}  # accepted / requested; the demo's local run: 6 of 8
PRIOR_VALIDATION_PASS = {"completion": 0.8, "chat": 0.95}
CHOOSE_ENCODER_S = 20.0  # once per machine: the ONNX files made and every encoder path timed on a sample
ENCODER_LOAD_S = 6.0  # seconds to load the dense model, the plan's allowance (make bench BENCH=encoding)
POOL_OVERLAP = 0.5  # on the docs at depth 5 from BM25, dense and fused: 7.5-8.5 mining pairs a question, 7 a query
CHARS_PER_TOKEN = 4.0  # English prose; Gemma's tokenizer measured 4.2 on the docs, GPT-4o's about 4
# tokens an answer takes until the workspace has measured its own: a base model's one-line question (the embedded
# model's run shorter on some corpora, longer on others); a chat model's question with its verbatim evidence quote;
# a grade digit and its stop; a chat verdict's JSON with its two-sentence rationale
TYPICAL_OUTPUT = {
    ("question", "completion"): 16,
    ("question", "chat"): 60,
    ("judge", "completion"): 2,
    ("judge", "chat"): 80,
}
SAMPLE = 40  # chunks whose prompts are rendered to count input tokens
ASSUMED_LOCAL = (250.0, 44.0)  # prompt and output tokens/s of the local model on an idle 2-core machine
ASSUMED_API_CALL_S = 1.5
LOCAL_START_S = 3.0  # llama-server up and the model loaded


@dataclass
class Step:
    stage: str
    step: str
    role: str
    model: str
    calls: int = 0
    cached: int = 0  # of the calls, answered before: from the cache, free
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = 0.0  # None: the model has no price in the table
    seconds: float = 0.0
    note: str | None = None  # why a step makes no call


@dataclass
class Plan:
    steps: list[Step] = field(default_factory=list)
    timing: list[str] = field(default_factory=list)  # how each model's time was estimated
    review: str = ""  # what the run will wait for a reviewer to answer before it releases ('' for nothing)
    warnings: list[str] = field(default_factory=list)
    max_cost_usd: float | None = None

    @property
    def calls(self) -> int:
        return sum(s.calls for s in self.steps)

    @property
    def paid_calls(self) -> int:
        return sum(s.calls - s.cached for s in self.steps)

    @property
    def input_tokens(self) -> int:
        return sum(s.input_tokens for s in self.steps)

    @property
    def output_tokens(self) -> int:
        return sum(s.output_tokens for s in self.steps)

    @property
    def cost_usd(self) -> float | None:
        costs = [s.cost_usd for s in self.steps]
        return None if any(c is None for c in costs) else sum(costs)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)

    @property
    def over_budget(self) -> bool:
        cost = self.cost_usd
        return self.max_cost_usd is not None and cost is not None and cost > self.max_cost_usd

    def as_dict(self) -> dict:
        return {
            "steps": [asdict(s) for s in self.steps],
            "calls": self.calls,
            "paid_calls": self.paid_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "seconds": round(self.seconds, 1),
            "timing": self.timing,
            "review": self.review,
            "warnings": self.warnings,
            "max_cost_usd": self.max_cost_usd,
            "over_budget": self.over_budget,
        }


@dataclass(frozen=True)
class Measurements:
    """What the workspace and the machine know: the last runs' counts, token figures per model, speeds."""

    synthesize: dict | None = None  # the last synthesize run's counts
    logged_drawn: tuple[int, int] = (0, 0)  # logged queries drawn, and of them already proposed
    propose: dict | None = None
    proposed_query_ids: frozenset[str] = frozenset()
    calls: Sequence[tuple[str, str, str]] = ()  # (model, request JSON, usage JSON) of answered calls
    machine: dict[str, throughput.Measured] = field(default_factory=dict)
    encoded: bool = False  # the live chunks' dense embeddings are in the workspace already
    drawn: bool = False  # a review round has drawn pairs in this workspace
    pairs_waiting: int = 0  # drawn pairs no reviewer has answered
    unanswered: tuple[int, int] = (0, 0)  # synthetic questions no reviewer answered: a weak generator's, and all


@dataclass(frozen=True)
class _Role:
    """What building a request needs of a role, without a client (planning opens no connection)."""

    model: str
    prompt_style: str
    logprobs: bool
    client: None = None


def _role(config: ProviderConfig, logprobs: bool | None) -> _Role:
    """The role as its provider's class declares it (its prompt style and log-probabilities), unless the config
    says otherwise: what the stage's role will be, with no client opened."""
    declared = provider_class(config.kind)
    style = declared.prompt_style if config.prompt_style == "auto" else config.prompt_style
    return _Role(config.model_name, style, declared.supports_logprobs if logprobs is None else logprobs)


class _Tokens:
    """Characters per token and output tokens per kind of request, as this workspace measured them."""

    def __init__(self, calls: Sequence[tuple[str, str, str]]) -> None:
        chars: dict[str, list[int]] = {}
        outputs: dict[tuple, list[int]] = {}
        for model, request_json, usage_json in calls:
            request = LLMRequest.model_validate_json(request_json)
            usage = Usage.model_validate_json(usage_json)
            if usage.input_tokens:
                pair = chars.setdefault(model, [0, 0])
                pair[0], pair[1] = pair[0] + len(request.text), pair[1] + usage.input_tokens
            outputs.setdefault(_kind(request), []).append(usage.output_tokens)
        self.chars = {model: c / t for model, (c, t) in chars.items() if t}
        self.outputs = {kind: sum(v) / len(v) for kind, v in outputs.items() if len(v) >= 3}

    def input(self, request: LLMRequest) -> float:
        return len(request.text) / self.chars.get(request.model, CHARS_PER_TOKEN)

    def output(self, request: LLMRequest, purpose: str) -> float:
        measured = self.outputs.get(_kind(request))
        if measured is not None:
            return measured
        typical = TYPICAL_OUTPUT.get((purpose, request.kind), request.max_tokens)
        return min(typical, request.max_tokens)


def _kind(request: LLMRequest) -> tuple:
    """What makes two requests the same kind for output length: model, chat or completion, the token cap, a schema."""
    return request.model, request.kind, request.max_tokens, request.response_schema is not None


def eligible(chunks: Sequence[SourceChunk], min_chars: int) -> list[SourceChunk]:
    return [c for c in chunks if skip_reason(c.text, min_chars) is None]


def synthesis_requests(
    questions: int,
    eligible_chunks: int,
    per_chunk: int,
    max_rounds: int,
    rate: float,
    candidates: int = 1,
    passing: float = 1.0,
) -> float:
    """Requests the synthesize stage sends to accept ``questions`` at ``rate`` accepted per request, ``passing`` of
    its requests passing validation: its rounds, each sampling more chunks than wanted by how many the filters
    removed, and each slot asked up to ``candidates`` times until its question passes validation, in expectation
    (what a later filter removes is not asked again)."""
    passing = min(1.0, max(passing, rate, 1e-9))
    validated_per_slot = 1 - (1 - passing) ** candidates
    asked_per_slot = validated_per_slot / passing  # 1 + (1 - passing) + ...: tries until one passes
    kept_per_slot = validated_per_slot * rate / passing
    slots, accepted, requests, remaining = 0, 0.0, 0.0, eligible_chunks
    for round_number in range(max_rounds):
        want = questions - math.floor(accepted + 1e-9)
        if want <= 0 or remaining <= 0:
            break
        chunks = min(remaining, round_chunks(round_number, want, slots, accepted, per_chunk))
        remaining -= chunks
        slots += chunks * per_chunk
        accepted += chunks * per_chunk * kept_per_slot
        requests += chunks * per_chunk * asked_per_slot
    return requests


@dataclass
class Planning:
    """What a stage's plan function (``Stage.plan``) is given: the config, the corpus's chunks worth a question and a
    sample of them, the real queries, what the workspace measured, the roles as their providers declare them, and
    judge requests like those the stages send (``judged``: the sample's chunks against the queries). Its
    :meth:`step` counts a step's tokens; ``warnings`` collects what the plan should say."""

    config: Config
    chunks: Sequence[SourceChunk]
    queries: Sequence[str] | None
    measured: Measurements
    propose_judges: bool = True
    query_ids: Sequence[str] = ()
    logged: int = 0
    logged_done: int = 0
    warnings: list[str] = field(default_factory=list)
    written: int | None = None  # the synthetic questions the run will write, as synthesize's steps expect them
    # derived from the above
    tokens: _Tokens = field(init=False)
    generator_config: ProviderConfig = field(init=False)
    judge_config: ProviderConfig = field(init=False)
    generator: _Role = field(init=False)
    prompts: PromptLibrary = field(init=False)
    pool: list[SourceChunk] = field(init=False)
    sample: list[SourceChunk] = field(init=False)
    by_estimate: bool = field(init=False)
    judged: list[LLMRequest] = field(init=False)

    def __post_init__(self) -> None:
        synth, config = self.config.synthesize, self.config
        self.tokens = _Tokens(self.measured.calls)
        self.generator_config, self.judge_config = config.generator_role(), config.judge_role()
        self.generator = _role(self.generator_config, None)
        self.prompts = PromptLibrary(config.prompts_dir)
        self.pool = eligible(self.chunks, synth.min_chars)
        self.sample = stratified_sample(self.pool, min(SAMPLE, len(self.pool)), synth.seed)
        weak_judge = abilities(self.judge_config.kind).weak
        self.by_estimate = synth.relevance_by == "estimate" or (synth.relevance_by == "auto" and weak_judge)
        judge = Judge(_role(self.judge_config, config.judging.logprobs), config.judging, self.prompts)
        # the critic, mining and propose ask the judge about (question, chunk) pairs like these
        queries = self.queries
        typical = "x" * (round(sum(map(len, queries)) / len(queries)) if queries else 60)
        texts = list(queries or ()) or [typical]
        self.judged = [
            judge.request(JudgePair("q", texts[i % len(texts)], c.chunk_id, c.text)) for i, c in enumerate(self.sample)
        ]

    def step(self, stage: str, step: str, role: str, calls: int, cached: int, requests, purpose: str) -> Step:
        """A step of ``calls`` requests like ``requests`` (``cached`` of them answered before) to ``role``
        ("generator" or "judge"), its tokens counted as this workspace measured them; ``purpose`` ("question" or
        "judge") picks the typical answer length when none was measured. A model with a small context
        (``abilities.context_tokens``) adds a warning when a request is longer than it."""
        provider = self.generator_config if role == "generator" else self.judge_config
        self._fits(provider, requests)
        return _step(stage, step, role, provider, calls, cached, requests, purpose, self.tokens)

    def _fits(self, provider: ProviderConfig, requests) -> None:
        window = abilities(provider.kind).context_tokens
        if window is None or not requests:
            return
        longer = sum(self.tokens.input(r) + r.max_tokens > window for r in requests)
        warning = (
            f"{longer} of {len(requests)} sampled requests to {provider.model_name} are longer than its context of "
            f"{window} tokens and will fail: chunk smaller (chunking.size) or clip passages (judging.max_passage_chars)"
        )
        if longer and warning not in self.warnings:
            self.warnings.append(warning)


def plan_run(
    config: Config,
    chunks: Sequence[SourceChunk],
    queries: Sequence[str] | None,
    measured: Measurements,
    *,
    propose_judges: bool = True,
    query_ids: Sequence[str] = (),
    logged: int = 0,
    logged_done: int = 0,
    review: bool = True,
) -> Plan:
    """The plan of ``run`` with ``config`` over ``chunks`` and the real ``queries`` (None: synthetic only); see the
    module docstring. ``query_ids`` are the queries' ids (those already proposed count as done); ``logged``: the
    logged queries a failure-first draw will hand propose (``logged_done`` of them proposed before); ``review``: the
    run stops for reviewers (not ``run --no-review``), so the plan says for what. Each stage of
    ``run`` gives its own steps (``Stage.plan``), in the stages' order; the dense encoding follows them."""
    from ..registry import run_stages

    plan = Plan(max_cost_usd=config.limits.max_cost_usd)
    planning = Planning(config, chunks, queries, measured, propose_judges, query_ids, logged, logged_done)
    for stage in run_stages():
        if stage.plan is not None:
            plan.steps += stage.plan(planning)
    plan.warnings += planning.warnings
    _encoding(plan, config, chunks, measured, queries is not None or bool(logged), planning.by_estimate)
    _price_and_time(plan, config, measured.machine)
    if review:
        plan.review = review_words(config, measured, queries is not None or bool(logged), planning.written)
    return plan


def review_words(config: Config, measured: Measurements, pools: bool, written: int | None = None) -> str:
    """What ``run`` will wait for a reviewer to answer before it releases, in words: the pairs its review round
    draws (or the drawn ones still unanswered) and the synthetic questions a release holds back
    (``release.hold_unreviewed``: with a weak generator, each question it writes), or the doubted ones; '' for
    nothing. ``written``: the questions this run will write, as the synthesize plan expects them (what the corpus
    can give); None, all those asked for that earlier runs did not make. The plan's time is the machine's; this is
    the reviewers'."""
    from ..labels.policy import holds_unreviewed
    from ..registry import abilities

    parts = []
    if measured.drawn:
        if measured.pairs_waiting:
            parts.append(f"{measured.pairs_waiting} pairs drawn for review")
    elif pools and config.run.review_budget:
        parts.append(f"up to {config.run.review_budget} pooled pairs drawn for review (run.review_budget)")
    hold, weak = holds_unreviewed(config), abilities(config.generator_role().kind).weak
    last = measured.synthesize or {}
    if written is None:
        written = config.synthesize.questions - min(
            config.synthesize.questions, last.get("made", 0) + last.get("already_made", 0)
        )
    if hold is not False:  # held: those written now (all, or a weak generator's) and those still unanswered
        waiting = (written if hold or weak else 0) + measured.unanswered[1 if hold else 0]
        if waiting:
            why = "release.hold_unreviewed" + ("" if hold else ": a weak generator writes them")
            parts.append(f"{waiting} synthetic questions ({why})")
    elif weak and written:
        parts.append("the doubted ones of the new synthetic questions")
    if not parts:
        return ""
    return "before it releases, run waits for a reviewer to answer " + " and ".join(parts)


def synthesize_steps(p: Planning) -> list[Step]:
    """The synthesize stage's steps: its question requests, in rounds until the questions asked are accepted, then
    the critic's and mining's judge calls (none when the relevance estimate decides)."""
    synth, last = p.config.synthesize, p.measured.synthesize or {}
    delivered_before = min(synth.questions, last.get("made", 0) + last.get("already_made", 0))
    rate = _yield(last, p.generator.prompt_style)
    passes = _validation_pass(last, p.generator.prompt_style)
    counts = (len(p.pool), synth.per_chunk, synth.max_rounds, rate, synth.candidates, passes)
    requests = math.ceil(synthesis_requests(synth.questions, *counts))
    repeated = math.ceil(synthesis_requests(delivered_before, *counts))
    delivered = min(synth.questions, requests * rate)
    p.written = 0 if _exhausted(last, p.chunks) else max(0, math.floor(delivered + 0.5) - delivered_before)
    if delivered < synth.questions - 0.5:
        p.warnings.append(
            f"about {delivered:.0f} of {synth.questions} questions: the corpus has {len(p.pool)} chunks worth a "
            f"question and {synth.per_chunk} asked of each (raise synthesize.per_chunk, or add documents)"
        )
    question_requests = _question_requests(Generator(p.generator, synth.temperature, p.prompts), p.sample, synth)
    steps = [
        p.step("synthesize", "questions", "generator", requests, min(repeated, requests), question_requests, "question")
    ]
    mined = _per_query(last.get("mining", {}).get("pairs"), last, synth.mine_depth, _lists("auto"))
    for step, wanted, calls, cached in (
        ("critic", synth.critic, requests * passes, repeated * passes),
        ("mining", synth.mine, delivered * mined, delivered_before * mined),
    ):
        if not wanted:
            continue
        if p.by_estimate:
            steps.append(Step("synthesize", step, "judge", "-", note="by the relevance estimate: no call"))
        else:
            steps.append(p.step("synthesize", step, "judge", round(calls), round(cached), p.judged, "judge"))
    return steps


def propose_steps(p: Planning) -> list[Step]:
    """The propose stage's judging of the real queries' pools (none without ``run.queries``)."""
    if p.queries is None:
        return []
    return [_judging(p, "judging", len(p.queries), sum(q in p.measured.proposed_query_ids for q in p.query_ids))]


def logged_propose_steps(p: Planning) -> list[Step]:
    """The judging of the pools of the logged queries a failure-first draw hands propose (none without logs)."""
    return [_judging(p, "judging logs", p.logged, p.logged_done)] if p.logged else []


def _judging(p: Planning, step: str, count: int, done: int) -> Step:
    """Propose's judge calls for ``count`` queries' pools, ``done`` of them proposed before (none with a judge that
    grades no pool)."""
    if not p.propose_judges:
        note = "pools only: the judge is a weak model, near chance, the relevance estimate grades"
        return Step("propose", step, "judge", "-", note=note)
    settings = p.config.propose
    per_query = (p.measured.propose or {}).get("pool_mean") or _pool_size(settings.depth, _lists(settings.retrievers))
    calls, cached = round(count * per_query), round(done * per_query)
    return p.step("propose", step, "judge", calls, cached, p.judged, "judge")


def _encoding(
    plan: Plan, config: Config, chunks: Sequence[SourceChunk], measured: Measurements, pools: bool, by_estimate: bool
) -> None:
    """The dense encoding of the corpus, when a stage will need it and the workspace does not hold it yet: once per
    corpus, its time from this machine's measured rate (else assumed)."""
    from ..retrieval.dense import (
        PATH_NAMES,
        default_model,
        dense_available,
        encode_prior,
        encoding_rate,
        machine_choice,
    )
    from ..retrieval.encoder_choice import SAMPLE

    synth = config.synthesize
    needed = dense_available() and (
        (pools and "dense" in retriever_names(config.propose.retrievers))
        or synth.mine
        or (synth.critic and by_estimate)
    )  # as the stages open their indexes: propose's retrievers; synthesize's mining, or its critic by estimate
    if not needed or not chunks:
        return
    choice = machine_choice()  # never measured here: the first encoding does
    model = choice.model if choice is not None else default_model()
    if measured.encoded:
        plan.steps.append(Step("index", "dense encoding", "encoder", model, note="encoded before: read back"))
        return
    choosing = choice is None and len(chunks) >= SAMPLE
    rate, measured_here = encoding_rate(model)
    if not measured_here and choice is not None and choice.rates.get(model, 0) > 0:
        rate, measured_here = choice.rates[model], True  # timed on the sample it was chosen by
    seconds = len(chunks) / rate + ENCODER_LOAD_S + (CHOOSE_ENCODER_S if choosing else 0.0)
    plan.steps.append(Step("index", "dense encoding", "encoder", model, seconds=round(seconds, 1)))
    how = (
        f"measured on this machine, {rate:.0f} chunks/s"
        if measured_here
        else f"not measured on this machine yet, assumed {encode_prior(model):.0f} chunks/s (an idle 2-core machine)"
    )
    plan.timing.append(f"dense encoding of {len(chunks):,} chunks, once ({model}): {how}")
    plan.timing.append(f"dense encoder: {encoder_path(choice, PATH_NAMES, choosing, model)}")


def encoder_path(choice, names: dict[str, str], choosing: bool, model: str) -> str:
    """What the plan says of the dense encoder's path: the machine's choice and what it was chosen from, else how
    it will be chosen."""
    from ..retrieval.encoder_choice import SAMPLE

    if choice is not None:
        return choice.describe(names)
    if choosing:
        return (
            f"not chosen on this machine yet: the first encoding times {', '.join(names.values())} on {SAMPLE} of its "
            f"chunks (once per machine) and keeps the fastest that passes the quality guard"
        )
    return f"{names.get(model, model)} (not chosen on this machine yet: an encoding of {SAMPLE}+ chunks chooses)"


def _pool_size(depth: int, lists: int) -> float:
    """Chunks a pool holds per query from ``lists`` ranked lists of ``depth``: one list's top ``depth`` whole; the
    union of several, less what they share (:data:`POOL_OVERLAP`)."""
    return float(depth) if lists == 1 else depth * lists * POOL_OVERLAP


def _lists(setting) -> int:
    """Ranked lists a pool takes from: each retriever's, and their fusion's when there are two or more."""
    count = len(retriever_names(setting))
    return count + 1 if count > 1 else count


def _exhausted(last: dict, chunks: Sequence[SourceChunk]) -> bool:
    """Whether the last synthesize run used every chunk worth a question of this very corpus with nothing left to
    retry: a rerun then makes no question it did not make."""
    return bool(
        last.get("chunks_sampled")
        and last["chunks_sampled"] >= last.get("chunks_eligible", 0)
        and not last.get("retryable")
        and last.get("corpus") == corpus_fingerprint(chunks)
    )


def _yield(last: dict, style: str) -> float:
    """Accepted questions per request: the last run's, else the prior for the prompt style (the critic's removals
    are not in the prior: a run measures them). Failed requests are left out: a rerun asks them again, and a server
    that died says nothing of what the corpus gives."""
    requested = last.get("generated", 0)
    if requested >= 5:
        return max(0.05, (last.get("made", 0) + last.get("already_made", 0) + last.get("surplus", 0)) / requested)
    return PRIOR_YIELD[style]


def _validation_pass(last: dict, style: str) -> float:
    generated = last.get("generated", 0)
    if generated >= 5:
        return (generated - last.get("removed", {}).get("validation", 0)) / generated
    return PRIOR_VALIDATION_PASS[style]


def _per_query(pairs: int | None, last: dict, depth: int, lists: int) -> float:
    """Pooled other chunks per question: the last run's, else as a pool of ``lists`` ranked lists holds them."""
    questions = last.get("made", 0) + last.get("already_made", 0)
    if pairs and questions:
        return pairs / questions
    return _pool_size(depth, lists)


def _question_requests(generator: Generator, sample: Sequence[SourceChunk], settings) -> list[LLMRequest]:
    """The question requests of a sample of chunks in the configured styles (a multi question's second passage is
    the next chunk of the sample; with one chunk, a multi question is asked as natural, as the stage does)."""
    requests = []
    for i, (chunk, style) in enumerate(
        zip(sample, allocate_styles([c.chunk_id for c in sample], settings.styles, settings.seed))
    ):
        sources = (chunk, sample[(i + 1) % len(sample)]) if style == "multi" and len(sample) > 1 else (chunk,)
        style = "natural" if style == "multi" and len(sources) == 1 else style
        requests.append(generator.request(Slot(i, style, sources, settings.seed)))
    return requests


def _step(stage, step, role, provider: ProviderConfig, calls, cached, requests, purpose, tokens: _Tokens) -> Step:
    if not requests:
        return Step(stage, step, role, provider.model_name, calls, min(cached, calls))
    per_input = sum(tokens.input(r) for r in requests) / len(requests)
    per_output = sum(tokens.output(r, purpose) for r in requests) / len(requests)
    return Step(
        stage, step, role, provider.model_name, calls, min(cached, calls),
        round(calls * per_input), round(calls * per_output),
    )  # fmt: skip


def _price_and_time(plan: Plan, config: Config, machine: dict[str, throughput.Measured]) -> None:
    """Each step's cost (of the calls not cached) and time; ``plan.timing`` says how each model was timed."""
    prices = PriceTable.load(config.prices)
    providers = {"generator": config.generator_role(), "judge": config.judge_role()}
    local_started = False
    for step in plan.steps:
        if not step.calls:
            continue
        provider = providers[step.role]
        share = (step.calls - step.cached) / step.calls
        usage = Usage(input_tokens=round(step.input_tokens * share), output_tokens=round(step.output_tokens * share))
        local = abilities(provider.kind).local
        step.cost_usd = 0.0 if local else prices.cost(provider.model_name, usage)
        figures, how = _speeds(provider, config, machine)
        if how not in plan.timing:
            plan.timing.append(how)
        paid = step.calls - step.cached
        if local:
            prompt_rate, output_rate = figures
            step.seconds = usage.input_tokens / prompt_rate + usage.output_tokens / output_rate + 0.01 * paid
            if paid and not local_started:
                step.seconds += LOCAL_START_S
                local_started = True
        else:
            per_call = figures[0]
            step.seconds = paid * per_call / config.limits.max_in_flight
            if config.limits.requests_per_minute:
                step.seconds = max(step.seconds, paid / config.limits.requests_per_minute * 60)
        step.seconds = round(step.seconds, 1)


def _speeds(provider: ProviderConfig, config: Config, machine: dict[str, throughput.Measured]):
    """(prompt tokens/s, output tokens/s) for a model on this machine, (seconds per call,) for a hosted one; and how
    known."""
    name = provider.model_name
    if abilities(provider.kind).local:
        timed = [m for k, m in machine.items() if k.startswith(f"{provider.kind}:") and k.endswith(f" {name}")]
        total = sum(timed, throughput.Measured())
        if total.timed_calls >= 5 and total.prompt_s > 0 and total.output_s > 0:
            prompt_rate, output_rate = (
                total.timed_input_tokens / total.prompt_s,
                total.timed_output_tokens / total.output_s,
            )
            return (prompt_rate, output_rate), (
                f"{name}: measured on this machine, {prompt_rate:.0f} prompt and {output_rate:.0f} output tokens/s "
                "over its recent calls (prompt-cache reuse included)"
            )
        return ASSUMED_LOCAL, (
            f"{name}: not measured on this machine yet, assumed {ASSUMED_LOCAL[0]:.0f} prompt and "
            f"{ASSUMED_LOCAL[1]:.0f} output tokens/s (an idle 2-core machine) until its first calls here measure it"
        )
    where = provider.base_url or ""
    seen = [
        m for k, m in machine.items() if k.startswith(f"{provider.kind}:") and where in k and k.endswith(f" {name}")
    ]
    total = sum(seen, throughput.Measured())
    if total.calls >= 5:
        per_call = total.latency_s / total.calls
        return (per_call,), f"{name}: measured on this machine, {per_call:.2f} s a call over its recent calls"
    return (ASSUMED_API_CALL_S,), f"{name}: not measured on this machine yet, assumed {ASSUMED_API_CALL_S} s a call"


def measurements(workspace) -> Measurements:
    """What ``workspace`` (None: a workspace not made yet) and this machine have measured."""
    from ..store import history, rows
    from ..store import llm as ledger
    from ..store import logs as stored_logs

    machine = throughput.load()
    if workspace is None:
        return Measurements(machine=machine)
    db = workspace.db
    from ..labels.policy import unanswered_questions
    from ..store import draws

    return Measurements(
        drawn=draws.next_round(db) > 1,
        pairs_waiting=draws.waiting_pairs(db),
        unanswered=(len(unanswered_questions(db, None)), len(unanswered_questions(db, True))),
        synthesize=history.latest_counts(db, "synthesize"),
        propose=history.latest_counts(db, "propose"),
        proposed_query_ids=frozenset(rows.pooled_query_ids(db)),
        logged_drawn=stored_logs.drawn_counts(db),
        calls=ledger.answered_calls(db),
        machine=machine,
        encoded=_encoded(workspace),
    )


def _encoded(workspace) -> bool:
    """Whether the workspace holds the dense embeddings of its live chunks as they are now."""
    from ..retrieval.dense import DenseIndex, dense_available
    from ..retrieval.indexes import indexes_directory, live_corpus
    from ..store import rows

    if not dense_available() or not rows.has_live_chunks(workspace.db):
        return False
    return DenseIndex.encoded_by(indexes_directory(workspace), live_corpus(workspace)) is not None
