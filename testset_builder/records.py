"""The records every stage passes around, named in IR terms. All are frozen pydantic models.

A retrieval test set is a corpus of chunks, a set of queries, and graded judgments ``(query_id, chunk_id, grade)``.
Judgments are append-only: a new verdict *supersedes* an older one by id, nothing is overwritten.

Metrics take qrels and runs as columnar tables (:mod:`testset_builder.tables`), not as lists of these models:
validating ten million rows one pydantic object at a time would cost more than scoring them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from .errors import InputError
from .ids import id_problem

GRADE_IRRELEVANT = 0
GRADE_RELEVANT = 1
GRADE_HIGHLY_RELEVANT = 2


def utc_now() -> datetime:
    return datetime.now(UTC)


def reviewer_name(name: str) -> str:
    """A reviewer's name as stored: whitespace runs made one space; 1 to 80 characters, else an InputError."""
    name = " ".join(str(name or "").split())
    if not name or len(name) > 80:
        raise InputError("a reviewer needs a name of 1 to 80 characters")
    return name


def _valid_id(value: str) -> str:
    problem = id_problem(value)
    if problem:
        raise ValueError(problem)
    return value


RecordId = Annotated[str, AfterValidator(_valid_id)]
"""A document, chunk, query or judgment id (see :func:`id_problem`)."""


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Lineage(Record):
    """How an LLM-made row came to be: enough to reproduce it and to price it."""

    provider: str
    model: str
    prompt_name: str | None = None
    prompt_sha256: str | None = None
    temperature: float | None = None
    seed: int | None = None
    usage: dict[str, int] = Field(default_factory=dict)
    cost_usd: float | None = None
    created_at: datetime = Field(default_factory=utc_now)


class Document(Record):
    doc_id: RecordId
    text: str
    title: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)
    source: str = ""


def passage_text(title: str, text: str) -> str:
    """What retrievers index and judges read for a chunk: its document's title on a line above it, when it has one."""
    return f"{title}\n{text}" if title else text


class Chunk(Record):
    """A span of a document: ``document.text[start:end] == chunk.text`` always holds."""

    chunk_id: RecordId
    doc_id: RecordId
    text: str
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _span_matches_text(self) -> Chunk:
        if self.end - self.start != len(self.text):
            raise ValueError(
                f"span [{self.start}, {self.end}) has length {self.end - self.start}, text has {len(self.text)}"
            )
        return self


class Span(Record):
    """A stretch of one version of a document: ``text[start:end]`` of the document ``doc_id`` whose text's sha256
    is ``doc_sha256`` (None when unknown). What a label is about, so that it can outlive a chunking."""

    doc_id: RecordId
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    doc_sha256: str | None = None
    text: str | None = None  # the spanned text, when kept (a synthetic question's evidence quote)

    @model_validator(mode="after")
    def _ordered(self) -> Span:
        if self.end < self.start:
            raise ValueError(f"span [{self.start}, {self.end}) ends before it starts")
        return self


class QueryOrigin(str, Enum):
    synthetic = "synthetic"
    real = "real"


class Query(Record):
    query_id: RecordId
    text: str = Field(min_length=1)
    origin: QueryOrigin
    source_chunk_id: str | None = None
    style: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    lineage: Lineage | None = None


class JudgmentSource(str, Enum):
    synthetic_source = "synthetic-source"
    llm = "llm"
    human = "human"


class JudgmentStatus(str, Enum):
    pending = "pending"
    accepted = "accepted"
    rejected = "rejected"
    regraded = "regraded"
    final = "final"
    withdrawn = "withdrawn"  # an undone verdict: it supersedes the one it takes back and says nothing itself
    adjudicated = "adjudicated"  # an admin's grade settling a disagreement: it decides the pair, it is not a vote


class Judgment(Record):
    """One graded relevance statement. ``grade`` is 0 irrelevant, 1 relevant, 2 highly relevant."""

    judgment_id: RecordId
    query_id: RecordId
    chunk_id: RecordId
    grade: int = Field(ge=0, le=GRADE_HIGHLY_RELEVANT)
    source: JudgmentSource
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    grade_probs: dict[int, float] | None = None
    rationale: str | None = None
    reviewer: str | None = None
    status: JudgmentStatus = JudgmentStatus.pending
    supersedes: str | None = None
    created_at: datetime = Field(default_factory=utc_now)
    lineage: Lineage | None = None
    # the evidence inside the chunk that answers the query, in document offsets, when known (a synthetic question's
    # generator quotes it); the store also records the chunk's own span with every judgment
    evidence: Span | None = None

    @property
    def p_relevant(self) -> float | None:
        """P(grade >= 1) under ``grade_probs``; None without probabilities."""
        return None if not self.grade_probs else sum(p for grade, p in self.grade_probs.items() if grade >= 1)

    @property
    def expected_grade(self) -> float | None:
        """The mean grade under ``grade_probs`` (a graded judge's best single number); None without probabilities."""
        return None if self.grade_probs is None else sum(g * p for g, p in self.grade_probs.items())


class Qrel(Record):
    """A resolved relevance label, as released and as scored. Grades are integers; relevant means grade >= 1."""

    query_id: RecordId
    chunk_id: RecordId
    grade: int


class ScoredChunk(Record):
    chunk_id: RecordId
    score: float


class RankedList(Record):
    """One query's results in a retriever run: chunk ids with scores (ranking is by score, not by list order)."""

    query_id: RecordId
    results: tuple[ScoredChunk, ...]
