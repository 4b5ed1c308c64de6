"""Configuration: pydantic models of ``configs/*.yaml`` (unknown keys are errors), and what they build."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .errors import InputError

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProviderConfig(Strict):
    kind: Literal["openai", "anthropic", "local"]
    model: str
    base_url: str | None = None
    api_key_env: str | None = Field(
        default=None, description="environment variable holding the key (default per provider)"
    )
    timeout_s: float = Field(default=60.0, gt=0)
    prompt_style: Literal["auto", "chat", "completion"] = Field(
        default="auto", description="chat for instruction models, completion for base models; auto asks the adapter"
    )


class LimitsConfig(Strict):
    max_in_flight: int = Field(default=8, ge=1)
    requests_per_minute: float | None = Field(default=None, gt=0)
    tokens_per_minute: float | None = Field(default=None, gt=0)
    max_attempts: int = Field(default=6, ge=1)
    max_cost_usd: float | None = Field(default=None, ge=0)


class LLMConfig(Strict):
    provider: ProviderConfig
    limits: LimitsConfig = LimitsConfig()
    prices: Path = CONFIG_DIR / "prices.yaml"


class ChunkingConfig(Strict):
    chunker: Literal["recursive", "sentence", "markdown", "tokens", "prechunked"] = "recursive"
    size: int = Field(default=1000, ge=1)
    overlap: int = Field(default=100, ge=0)
    id_field: str = "_id"
    text_field: str = "text"
    title_field: str = "title"


class SynthesizeConfig(Strict):
    """Synthetic questions: how many, in which styles, from which chunks, through which filters."""

    questions: int = Field(default=100, ge=1, description="questions to make (exactly, or a statement of why fewer)")
    per_chunk: int = Field(default=1, ge=1, description="questions asked of each sampled chunk")
    styles: dict[Literal["natural", "keyword", "paraphrase", "multi"], float] = Field(
        default_factory=lambda: {"natural": 0.4, "keyword": 0.2, "paraphrase": 0.2, "multi": 0.2},
        description="share of each question style (normalised); multi needs two related chunks, both labelled",
    )
    seed: int = 0
    temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    min_chars: int = Field(default=200, ge=1, description="shorter chunks are not worth a question")
    per_document_cap: int | None = Field(default=None, ge=1, description="most chunks sampled from one document")
    validate_questions: bool = Field(default=True, description="drop empty, too short or long, non-questions, copies")
    dedupe: bool = Field(default=True, description="drop near-duplicate questions (content-word Jaccard >= 0.8)")
    critic: bool = Field(default=True, description="the judge must grade the source chunk >= critic_min_grade")
    critic_min_grade: int = Field(default=1, ge=1, le=2)
    round_trip_k: int | None = Field(
        default=None,
        ge=1,
        description="keep a question only if BM25 ranks its source in the top k; biases the set toward BM25, so off by default",
    )
    mine: bool = Field(default=True, description="judge other top-ranked chunks to find unlabelled relevant ones")
    mine_depth: int = Field(default=5, ge=1)
    max_rounds: int = Field(
        default=4, ge=1, description="rounds of sampling more chunks when filters removed questions"
    )


class Config(Strict):
    workspace: Path = Path("testset")
    chunking: ChunkingConfig = ChunkingConfig()
    synthesize: SynthesizeConfig = SynthesizeConfig()
    llm: LLMConfig


def load_config(path: str | Path) -> Config:
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as error:
        raise InputError(f"cannot read config ({error.strerror})", path=path) from None
    except yaml.YAMLError as error:
        raise InputError(f"not valid YAML ({error})", path=path) from None
    try:
        return Config.model_validate(data)
    except ValidationError as error:
        raise InputError(f"invalid config: {_problems(error)}", path=path) from None


def _problems(error: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors())


def with_overrides(settings: SynthesizeConfig, overrides: dict) -> SynthesizeConfig:
    """``settings`` with some fields replaced (command-line flags), validated like the config file."""
    try:
        return SynthesizeConfig.model_validate({**settings.model_dump(), **overrides})
    except ValidationError as error:
        raise InputError(f"invalid synthesize settings: {_problems(error)}") from None


def default_config() -> Config:
    """OpenAI if OPENAI_API_KEY is set, else Anthropic if ANTHROPIC_API_KEY is, else the embedded local model."""
    if os.environ.get("OPENAI_API_KEY"):
        return load_config(CONFIG_DIR / "openai.yaml")
    if os.environ.get("ANTHROPIC_API_KEY"):
        return load_config(CONFIG_DIR / "anthropic.yaml")
    return load_config(CONFIG_DIR / "quickstart.yaml")


def make_provider(config: ProviderConfig):
    """The provider a config names; a missing key fails here, before any work starts."""
    if config.kind == "openai":
        from .llm import OpenAIProvider

        provider = OpenAIProvider(
            base_url=config.base_url, timeout=config.timeout_s, key_variable=config.api_key_env or "OPENAI_API_KEY"
        )
    elif config.kind == "anthropic":
        from .llm import AnthropicProvider

        provider = AnthropicProvider(
            base_url=config.base_url, timeout=config.timeout_s, key_variable=config.api_key_env or "ANTHROPIC_API_KEY"
        )
    else:
        from .llm.local_provider import LocalProvider

        provider = LocalProvider(timeout=config.timeout_s)
    if config.prompt_style != "auto":  # e.g. a base model behind an OpenAI-compatible server
        provider.prompt_style = config.prompt_style
    return provider


def make_client(config: LLMConfig, workspace, stage: str, provider=None):
    from .llm import LLMClient, PriceTable, RetryPolicy

    return LLMClient(
        provider or make_provider(config.provider),
        workspace,
        stage,
        max_in_flight=config.limits.max_in_flight,
        requests_per_minute=config.limits.requests_per_minute,
        tokens_per_minute=config.limits.tokens_per_minute,
        retry=RetryPolicy(max_attempts=config.limits.max_attempts),
        prices=PriceTable.load(config.prices),
        max_cost_usd=config.limits.max_cost_usd,
    )
