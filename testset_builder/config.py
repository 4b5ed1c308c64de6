"""Configuration: one :class:`Config`, the single source of every stage's settings.

A config is a YAML file validated by pydantic (an unknown key is an error naming itself and the file). ``--config``
takes a path or the name of a bundled config (``quickstart``, ``openai``, ``anthropic``); without one,
``$TESTSET_BUILDER_CONFIG`` names it, else the bundled config is chosen by the environment: OpenAI if
``OPENAI_API_KEY`` is set, else Anthropic if ``ANTHROPIC_API_KEY`` is, else the embedded local model.

Command-line flags change a config through :func:`override` only, validated like the file, so a flag and a config
key can never disagree. Relative paths in a file (``workspace``, ``prompts_dir``, ``prices``) are relative to the
file's folder.

Roles: ``generator`` writes questions and ``judge`` grades relevance; each names a provider and a model. The judge
defaults to the generator; a ``judge:`` without ``kind`` changes only the fields it names (``judge: {model:
gpt-4o}``), one with ``kind`` is a whole provider of its own.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from . import bundled
from .errors import InputError

DEFAULT_WORKSPACE = Path("testset")
LOCAL_MODEL = "gemma-3-270m"
CONFIG_ENV = "TESTSET_BUILDER_CONFIG"
ChunkerKind = Literal["recursive", "sentence", "markdown", "tokens", "prechunked"]
Style = Literal["natural", "keyword", "paraphrase", "multi"]
RETRIEVERS = ("bm25", "dense")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def known_provider_kind(kind: str) -> str:
    """``kind`` when a provider of that kind is registered (:func:`~testset_builder.registry.register_provider`)."""
    from .registry import provider_kinds

    if kind not in provider_kinds():
        raise ValueError(f"unknown provider kind {kind!r}: one of {', '.join(provider_kinds())}")
    return kind


class ProviderConfig(Strict):
    """One role's model: which provider serves it, and how to reach it. Keys come from the environment only."""

    kind: str = Field(description="openai, anthropic, local, or a kind registered with llm.register_provider")
    model: str | None = Field(
        default=None,
        description="the model name; for kind local, gemma-3-270m (the packaged model, the default) or a .gguf file",
    )
    base_url: str | None = Field(default=None, description="an OpenAI- or Anthropic-compatible server (vLLM, Ollama)")
    api_key_env: str | None = Field(
        default=None,
        description="variable holding the key (default OPENAI_API_KEY / ANTHROPIC_API_KEY; optional with base_url)",
    )
    timeout_s: float = Field(default=60.0, gt=0)
    prompt_style: Literal["auto", "chat", "completion"] = Field(
        default="auto", description="chat for instruction models, completion for base models; auto asks the adapter"
    )

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        return known_provider_kind(kind)

    @model_validator(mode="after")
    def _model_is_named(self) -> ProviderConfig:
        if self.kind != "local":
            if not self.model:
                raise ValueError(f"a {self.kind} provider needs a model name (model: ...)")
            return self
        if self.base_url:
            raise ValueError(
                "kind local starts its own server; for a server already running use kind openai with base_url"
            )
        if self.model is None:
            return self.model_copy(update={"model": LOCAL_MODEL})
        if self.model != LOCAL_MODEL and not self.model.endswith(".gguf"):
            raise ValueError(
                f"kind local runs the packaged {LOCAL_MODEL} or a .gguf file you name, not {self.model!r}; "
                "for a model behind a server use kind openai with base_url"
            )
        return self

    @property
    def model_name(self) -> str:
        """The name requests and lineage carry: the model, or a local GGUF file's name without its folder."""
        if self.kind == "local" and self.model.endswith(".gguf"):
            return Path(self.model).stem
        return self.model


class RoleOverride(Strict):
    """A ``judge:`` section: without ``kind`` it changes the generator's fields it names; with ``kind`` it is a
    provider of its own."""

    kind: str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None
    timeout_s: float | None = Field(default=None, gt=0)
    prompt_style: Literal["auto", "chat", "completion"] | None = None

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str | None) -> str | None:
        return None if kind is None else known_provider_kind(kind)

    def over(self, generator: ProviderConfig) -> ProviderConfig:
        named = self.model_dump(exclude_none=True)
        if self.kind is not None:
            return ProviderConfig.model_validate(named)
        return ProviderConfig.model_validate({**generator.model_dump(), **named})


class LimitsConfig(Strict):
    """Per provider client: concurrency, rate limits and retries; the cost limit is shared by every role."""

    max_in_flight: int = Field(default=8, ge=1)
    requests_per_minute: float | None = Field(default=None, gt=0)
    tokens_per_minute: float | None = Field(default=None, gt=0)
    max_attempts: int = Field(default=6, ge=1)
    max_cost_usd: float | None = Field(default=None, ge=0, description="stop before spending could pass this")


class JudgingConfig(Strict):
    """How the judge asks. Any change here changes the judge's requests, so pairs are judged anew."""

    prompt: str | None = Field(
        default=None,
        description="a prompt name (judge/umbrela-chat) or .md file; default by the judge's prompt style",
    )
    max_passage_chars: int | None = Field(
        default=None, ge=100, description="passages are clipped to this many characters (default: the prompt's)"
    )
    logprobs: bool | None = Field(
        default=None, description="read grade probabilities from log-probabilities (default: when the provider can)"
    )


class ChunkingConfig(Strict):
    """How ``chunk`` loads and cuts documents. Sizes are characters, or tokens for the ``tokens`` chunker."""

    chunker: ChunkerKind = "recursive"
    size: int = Field(default=1000, ge=1)
    overlap: int = Field(default=100, ge=0)
    encoding: str = Field(default="cl100k_base", description="the tokenizer of the tokens chunker")
    id_field: str = "_id"
    text_field: str = "text"
    title_field: str = "title"
    max_removal_share: float = Field(
        default=0.25, ge=0, le=1, description="marking more of the live documents removed needs --allow-removal"
    )

    @model_validator(mode="after")
    def _overlap_below_size(self) -> ChunkingConfig:
        if self.chunker != "prechunked" and self.overlap >= self.size:
            raise ValueError(f"overlap ({self.overlap}) must be smaller than size ({self.size})")
        return self

    def chunker_sha256(self) -> str:
        """Identifies how chunks were cut (stored on each chunk: a change re-chunks every document). The text
        hashed is what earlier versions hashed, so upgrading does not re-chunk a corpus."""
        text = (
            f"ChunkerConfig(kind={self.chunker!r}, size={self.size!r}, overlap={self.overlap!r}, "
            f"encoding={self.encoding!r})"
        )
        return hashlib.sha256(text.encode()).hexdigest()


class SynthesizeConfig(Strict):
    """Synthetic questions: how many, in which styles, from which chunks, through which filters."""

    questions: int = Field(default=100, ge=1, description="questions to make (exactly, or a statement of why fewer)")
    per_chunk: int = Field(default=1, ge=1, description="questions asked of each sampled chunk")
    # 1 by default: on hand-graded questions of the embedded model, the tries after a rejection pass the rules but are
    # usable less often than first tries of other chunks (make bench BENCH=questions), so retrying keeps more of the
    # sample's chunks at the cost of the set's share of usable questions
    candidates: int = Field(
        default=1,
        ge=1,
        le=10,
        description="tries a question slot gets: when a rule rejects the question, its chunk is asked again with a "
        "fresh seed, up to this many times in all, so the sample keeps its chunks (1: no retry; the next round "
        "samples other chunks instead)",
    )
    styles: dict[Style, float] = Field(
        default_factory=lambda: {"natural": 0.4, "keyword": 0.2, "paraphrase": 0.2, "multi": 0.2},
        description="share of each question style (normalised); multi needs two related chunks, both labelled",
    )
    seed: int = 0
    temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    min_chars: int = Field(default=200, ge=1, description="shorter chunks are not worth a question")
    per_document_cap: int | None = Field(default=None, ge=1, description="most chunks sampled from one document")
    validate_questions: bool = Field(default=True, description="drop empty, too short or long, non-questions, copies")
    question_rules: bool = Field(
        default=True,
        description="with validate_questions, also drop questions that repeat themselves, list names, copy code, are "
        "cut off, point at what only the chunk shows, or name what the source lacks (off only to measure the rules)",
    )
    dedupe: bool = Field(default=True, description="drop near-duplicate questions (content-word Jaccard >= 0.8)")
    critic: bool = Field(
        default=True,
        description="the judge must grade the source chunk >= critic_min_grade (the estimate: P(relevant) >= "
        "critic_min_estimate)",
    )
    critic_min_grade: int = Field(default=1, ge=1, le=2)
    # low: the prior rates a question off its source (bananas against a docs chunk) just under it and on-topic ones
    # well above it; a higher bar trims the set to what the estimate's own signals find easily, which skews how the
    # set ranks retrievers (benchmarks/synthetic_agreement.py measures it)
    critic_min_estimate: float = Field(default=0.1, ge=0.0, le=1.0)
    check_sources: bool = Field(
        default=True,
        description="queue for review (as questions) those whose source the relevance estimate does not rank near "
        "the top of what the retrievers find, or below another chunk by a clear margin (no LLM call)",
    )
    audit: int = Field(
        default=10,
        ge=0,
        description="about this many new questions a run draws at random for question review: their verdicts "
        "estimate how many unchecked synthetic labels are wrong (0: no audit; releases then say so)",
    )
    round_trip_k: int | None = Field(
        default=None,
        ge=1,
        description="keep a question only if BM25 ranks its source in the top k; biases the set toward BM25",
    )
    mine: bool = Field(default=True, description="judge other top-ranked chunks to find unlabelled relevant ones")
    mine_depth: int = Field(default=5, ge=1)
    relevance_by: Literal["auto", "estimate", "llm"] = Field(
        default="auto",
        description="who decides for the critic and mining: the relevance estimate (no LLM call), the LLM judge, or "
        "auto: the estimate when the judge is the embedded local model (near chance), else the judge",
    )
    max_rounds: int = Field(default=4, ge=1, description="rounds of sampling more chunks when filters removed some")

    @model_validator(mode="after")
    def _some_style(self) -> SynthesizeConfig:
        if not any(share > 0 for share in self.styles.values()):
            raise ValueError("styles: at least one style needs a share above 0")
        if any(share < 0 for share in self.styles.values()):
            raise ValueError("styles: shares cannot be negative")
        return self


class ProposeConfig(Strict):
    """Candidate pools for real queries: each retriever's top ``depth`` plus the RRF fusion's top ``fused_depth``."""

    retrievers: str | list[str] = Field(
        default="auto", description="auto is BM25, plus dense when the dense extra is installed; or [bm25, dense]"
    )
    depth: int = Field(default=20, ge=1)
    fused_depth: int | None = Field(default=None, ge=1, description="default: depth")
    rrf_k: int = Field(default=60, ge=1)
    run_depth: int = Field(
        default=100,
        ge=1,
        description="each run given to `propose --runs` (the systems the set will score) pools its top k: score's "
        "deepest cutoff, so their figures rest on estimates, not on the pooling assumption",
    )

    @field_validator("retrievers")
    @classmethod
    def _known_retrievers(cls, value: str | list[str]) -> str | list[str]:
        if value == "auto":
            return value
        names = [value] if isinstance(value, str) else value
        unknown = [name for name in names if name not in RETRIEVERS]
        if unknown or not names:
            raise ValueError(
                f"unknown retriever {', '.join(map(repr, unknown)) or '(none)'}; use bm25, dense or both (or auto)"
            )
        return names


class ReviewConfig(Strict):
    """How reviewers are served: ``serve`` (web) and ``review`` (terminal) read these."""

    lease_s: float = Field(default=900, gt=0, description="an item handed out comes back to the queue after this")
    overlap: int | None = Field(
        default=None,
        ge=1,
        description="distinct reviewers each item should get; kept in the workspace, so every reviewer and command "
        "counts the same (set it once; unset: the workspace's, 1 at first)",
    )
    blind: bool = Field(default=True, description="hide the LLM's grade and others' verdicts until one answers")
    questions: bool | None = Field(
        default=None,
        description="also queue every synthetic question for review (keep, drop or edit); unset: serve the questions "
        "already queued, the doubted ones a release waits for; false: pairs only",
    )
    guidelines: str | None = Field(
        default=None,
        description="what reviewers should know, in Markdown, shown on the review page (raw HTML is shown as text)",
    )
    guidelines_file: Path | None = Field(
        default=None, description="the guidelines from a Markdown file instead (relative to the config's folder)"
    )
    grades: dict[int, str] = Field(
        default_factory=lambda: dict(GRADE_MEANINGS),
        description="what each grade means, shown beside its button and in the terminal ('label: meaning', the "
        "label on the button)",
    )

    @field_validator("grades")
    @classmethod
    def _three_grades(cls, grades: dict[int, str]) -> dict[int, str]:
        if set(grades) != {0, 1, 2} or not all(str(text).strip() for text in grades.values()):
            raise ValueError("grades gives the meaning of each of 0, 1 and 2 (and only those)")
        return {grade: " ".join(str(grades[grade]).split()) for grade in (0, 1, 2)}

    def guidelines_text(self) -> str | None:
        """The guidelines' Markdown: ``guidelines``, else the file ``guidelines_file`` names."""
        if self.guidelines is not None or self.guidelines_file is None:
            return self.guidelines
        try:
            return self.guidelines_file.read_text(encoding="utf-8")
        except OSError as error:
            raise InputError(f"cannot read review.guidelines_file ({error.strerror or error})") from None
        except UnicodeDecodeError:
            raise InputError("review.guidelines_file is not UTF-8 text") from None


GRADE_MEANINGS = {
    0: "not relevant: does not help answer the query (another topic, or only shares its words)",
    1: "relevant: on the query's topic and answers part of it, or answers it only together with other text",
    2: "highly relevant: answers the query on its own",
}


class ReleaseConfig(Strict):
    """The release policy and the dataset card's facts."""

    include_unverified: bool = Field(default=False, description="release unverified LLM proposals, marked as such")
    estimates: bool = Field(
        default=True,
        description="carry each pooled pair's relevance estimate and review draw (estimates.jsonl), with the queries "
        "they cover, for prediction-powered scoring",
    )
    adjudicator: str | None = Field(default=None, description="the reviewer whose verdict breaks a tie")
    hold_doubted: bool = Field(
        default=True,
        description="leave out the synthetic questions whose source the estimate doubts until a reviewer keeps them "
        "(synthesize.check_sources queues them for review)",
    )
    hold_unreviewed: bool | None = Field(
        default=None,
        description="leave out every synthetic question no reviewer kept, so each synthetic label released is one a "
        "person checked; unset: those a weak generator wrote, as the embedded model is (most of its questions are "
        "unusable), unless review.questions is false; false: release them, the audit estimating how many are wrong",
    )
    license: str = Field(default="other", description="the dataset card's license (the corpus's license decides)")
    name: str | None = Field(default=None, description="the set's name in the card (default: the workspace's)")


class RemapConfig(Strict):
    """How ``remap`` projects a release's labels onto another chunking of the same corpus."""

    min_coverage: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="a new chunk inherits a label when it covers at least this share of the label's evidence span "
        "(or of its old chunk's span when no evidence is known)",
    )


class LogFieldsConfig(Strict):
    """Where each part of a log record is (dotted paths reach into nested JSON objects; CSV columns by name)."""

    query: str = Field(
        default="query", description="traces: looked up first when set, on the retrieval span then the app's"
    )
    question: list[str] = Field(
        default_factory=lambda: ["question", "query", "input"],
        description="a query that is a JSON object (a chain called with a dict): the first of these keys holding text",
    )
    retrieved: str = Field(default="retrieved", description="a list of chunk ids, or of objects with the keys below")
    retrieved_id: str = "id"
    retrieved_text: str = Field(default="text", description="matched back to a chunk exactly or normalised")
    retrieved_score: str = "score"
    answer: str = "answer"
    thumbs: str = Field(default="thumbs", description="up/down, +1/-1, true/false")
    rating: str = "rating"
    comment: str = "comment"
    cited: str = Field(default="cited", description="chunk ids the answer cited")
    clicked: str = Field(default="clicked", description="cited chunk ids the user opened")
    timestamp: str = "timestamp"
    session: str = "session"
    trace_id: str = Field(
        default="trace_id",
        description="a request's id (traces: the trace id): a request seen before is not counted again",
    )


class LogsConfig(Strict):
    """How ``import-logs`` reads production RAG logs."""

    format: str = Field(
        default="jsonl",
        description="jsonl, csv, otel, langfuse, or a format registered with export.register_log_format",
    )
    fields: LogFieldsConfig = LogFieldsConfig()
    scrub_pii: bool = Field(default=True, description="replace e-mails and phone numbers before anything is stored")
    pii_patterns: list[str] = Field(default_factory=list, description="more regular expressions to replace")

    @field_validator("format")
    @classmethod
    def _known_format(cls, name: str) -> str:
        from .registry import known_log_format

        return known_log_format(name)


class RunConfig(Strict):
    """What ``testset-builder run`` does: chunk the sources, synthesize, propose for the queries, draw pairs for review,
    release when something changed, score the baselines and write the report. Paths are relative to the config."""

    sources: list[Path] = Field(default_factory=list, description="documents to chunk: files or folders")
    queries: Path | None = Field(
        default=None, description="real queries for propose (JSONL, CSV or one per line); none: synthetic only"
    )
    logs: Path | None = Field(
        default=None, description="a production RAG log to import (its format and fields: the logs: section)"
    )
    log_limit: int = Field(default=200, ge=1, description="logged queries a failure-first draw picks to label")
    review_budget: int = Field(
        default=30,
        ge=0,
        description="pairs the first selection round draws for review: sized for a first try; raise it (or run "
        "`select` again) to narrow the figures' intervals (0: release without review)",
    )
    baselines: list[Literal["bm25", "dense"]] = Field(
        default_factory=lambda: ["bm25", "dense"],
        description="runs scored on each release in the report (dense when installed)",
    )
    runs: list[Path] = Field(
        default_factory=list,
        description="the systems this set will score (TREC or JSONL run files): propose pools each one's top "
        "propose.run_depth, and the report scores them beside the baselines",
    )


class Config(Strict):
    workspace: Path = DEFAULT_WORKSPACE
    prompts_dir: Path | None = Field(default=None, description="your prompt files; the bundled ones fill the gaps")
    prices: Path | None = Field(default=None, description="a price table (default: the bundled prices.yaml)")
    generator: ProviderConfig | None = Field(default=None, description="default: chosen by the environment's keys")
    judge: RoleOverride | None = Field(default=None, description="default: the generator")
    limits: LimitsConfig = LimitsConfig()
    judging: JudgingConfig = JudgingConfig()
    chunking: ChunkingConfig = ChunkingConfig()
    synthesize: SynthesizeConfig = SynthesizeConfig()
    propose: ProposeConfig = ProposeConfig()
    review: ReviewConfig = ReviewConfig()
    release: ReleaseConfig = ReleaseConfig()
    remap: RemapConfig = RemapConfig()
    logs: LogsConfig = LogsConfig()
    run: RunConfig = RunConfig()

    @model_validator(mode="before")
    @classmethod
    def _earlier_layout(cls, data: Any) -> Any:
        """Configs written before roles had ``llm: {provider, limits, prices}``; read them as the generator."""
        if isinstance(data, dict) and isinstance(data.get("llm"), dict):
            data = dict(data)
            llm = data.pop("llm")
            for old, new in (("provider", "generator"), ("limits", "limits"), ("prices", "prices")):
                if old in llm and new not in data:
                    data[new] = llm[old]
            if unknown := set(llm) - {"provider", "limits", "prices"}:
                raise ValueError(f"llm: unknown keys {sorted(unknown)}")
        return data

    @model_validator(mode="after")
    def _judge_is_valid(self) -> Config:
        if self.judge is not None and self.generator is not None:
            try:
                self.judge.over(self.generator)
            except ValidationError as error:
                raise ValueError(f"judge: {_problems(error)}") from None
        return self

    @model_validator(mode="after")
    def _held_questions_are_served(self) -> Config:
        if self.release.hold_unreviewed and self.review.questions is False:
            raise ValueError(
                "release.hold_unreviewed: true holds back every question no reviewer kept, but review.questions: "
                "false serves reviewers pairs only, so none could be kept: drop one of the two"
            )
        return self

    def generator_role(self) -> ProviderConfig:
        return self.generator or default_generator()

    def judge_role(self) -> ProviderConfig:
        return self.judge.over(self.generator_role()) if self.judge else self.generator_role()


def _problems(error: ValidationError, text: str | None = None) -> str:
    """Each problem as ``section.key (line N): what is wrong``; the line when the YAML ``text`` is at hand."""

    def where(e: dict) -> str:
        path = [str(part) for part in e["loc"] if not str(part).startswith("function-after")]
        line = _line(text, path) if text else None
        return ".".join(path) + (f" (line {line})" if line else "")

    return "; ".join(f"{where(e) or 'config'}: {e['msg'].removeprefix('Value error, ')}" for e in error.errors())


def _line(text: str, path: list[str]) -> int | None:
    """The line of the deepest key of ``path`` found in the YAML ``text`` (1-based)."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return None
    line = None
    for part in path:
        if not isinstance(node, yaml.MappingNode):
            break
        match = next(((key, value) for key, value in node.value if str(key.value) == part), None)
        if match is None:
            break
        line, node = match[0].start_mark.line + 1, match[1]
    return line


def _read(text: str, where: str | Path) -> dict:
    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise InputError(f"not valid YAML ({error})", path=where) from None
    if not isinstance(data, dict):
        raise InputError("a config is a YAML mapping of sections (workspace:, generator:, ...)", path=where)
    return data


def _validate(data: dict, where: str | Path, text: str | None = None) -> Config:
    try:
        return Config.model_validate(data)
    except ValidationError as error:
        raise InputError(f"invalid config: {_problems(error, text)}", path=where) from None


def bundled_config(name: str) -> Config:
    """A config the package carries: quickstart (the local model), openai or anthropic."""
    resource = bundled.config_files() / f"{name}.yaml"
    if not resource.is_file() or name == "prices":
        raise InputError(f"no config {name!r}: give a file, or one of {', '.join(bundled.config_names())}")
    text = resource.read_text(encoding="utf-8")
    return _validate(_read(text, f"{name} (bundled)"), f"{name} (bundled)", text)


def load_config(source: str | Path) -> Config:
    """A config file; relative paths in it are taken from the file's folder. A bundled config's name works too."""
    path = Path(source)
    if not path.exists() and path.suffix == "" and "/" not in str(source):
        return bundled_config(str(source))  # a bundled config's name (or a clear error listing them)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise InputError(f"cannot read config ({error.strerror or error})", path=path) from None
    except UnicodeDecodeError:
        raise InputError("config is not UTF-8 text", path=path) from None
    data = _with_paths(_read(text, path), lambda value: _beside(path, value))
    return _validate(data, path, text)


def _with_paths(data: dict, convert: Callable[[Any], Any]) -> dict:
    """``data`` (a config as a mapping) with ``convert`` applied to each path a config holds: the workspace, prompts
    and prices, run's queries, logs, sources and runs, and review's guidelines file."""
    data = dict(data)
    for key in ("workspace", "prompts_dir", "prices"):
        if data.get(key) is not None:
            data[key] = convert(data[key])
    if isinstance(data.get("run"), dict):  # run's paths too
        run = data["run"] = dict(data["run"])
        for key in ("queries", "logs"):
            if run.get(key) is not None:
                run[key] = convert(run[key])
        for key in ("sources", "runs"):
            if isinstance(run.get(key), list):
                run[key] = [convert(item) for item in run[key]]
    if isinstance(data.get("review"), dict) and data["review"].get("guidelines_file") is not None:
        data["review"] = {**data["review"], "guidelines_file": convert(data["review"]["guidelines_file"])}
    return data


def _beside(config_file: Path, value):
    """A relative path written in a config, taken from the config's folder (anything else as it is)."""
    if isinstance(value, str) and not Path(value).expanduser().is_absolute():
        return str(config_file.parent / value)
    return value


def default_config() -> Config:
    """``$TESTSET_BUILDER_CONFIG`` if set, else the bundled config the environment's keys allow: OpenAI if
    OPENAI_API_KEY is set, else Anthropic if ANTHROPIC_API_KEY is, else the embedded local model."""
    if os.environ.get(CONFIG_ENV):
        return load_config(os.environ[CONFIG_ENV])
    if os.environ.get("OPENAI_API_KEY"):
        return bundled_config("openai")
    if os.environ.get("ANTHROPIC_API_KEY"):
        return bundled_config("anthropic")
    return bundled_config("quickstart")


def default_generator() -> ProviderConfig:
    generator = default_config().generator
    return generator if generator is not None else bundled_config("quickstart").generator_role()


def override(config: Config, overrides: dict[str, Any]) -> Config:
    """``config`` with settings replaced by dotted key (``{"synthesize.questions": 5, "workspace": "ws"}``),
    validated as the file is. ``None`` values are left out: a flag not given changes nothing."""
    data = config.model_dump(exclude_none=False)
    for key, value in overrides.items():
        if value is None:
            continue
        *parents, leaf = key.split(".")
        section = data
        for part in parents:
            if section.get(part) is None:
                section[part] = {}
            section = section[part]
        section[leaf] = value
    try:
        return Config.model_validate(data)
    except ValidationError as error:
        raise InputError(f"invalid setting: {_problems(error)}") from None


def resolve_config(source: str | Path | None, overrides: dict[str, Any] | None = None) -> Config:
    """What every command runs with: the named config (or the default one) with the command line's overrides."""
    config = load_config(source) if source is not None else default_config()
    return override(config, overrides or {})


def as_yaml(config: Config, folder: str | Path | None = None) -> str:
    """The config with every default filled in, as a file a user can start from. ``folder``: the folder of the file
    it was read from; its relative paths (read from that folder) are written for a file saved there again."""
    data = config.model_dump(mode="json")
    data["generator"] = config.generator_role().model_dump(mode="json")
    header = ""
    if folder is not None:
        inside = str(folder).rstrip("/\\") + os.sep  # a value read from the file: the folder, then what it wrote

        def from_folder(value):
            if not isinstance(value, str):
                return value
            if value.startswith(inside):
                return value[len(inside) :]
            return os.path.relpath(value, folder) if not Path(value).expanduser().is_absolute() else value

        data = _with_paths(data, from_folder)
        header = f"# relative paths are read from the config's folder: save this in {Path(folder).as_posix()}/\n"
    return header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
