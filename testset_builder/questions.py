"""Cleaning and checking generated questions: pure functions, each filter switchable by the caller.

- :func:`clean` takes the first line of an answer without quotes, numbering or a "Query:" prefix.
- :func:`split_evidence` takes the "Evidence:" quote out of a chat generator's answer (the query, then a verbatim
  quote from the passage that answers it).
- :func:`validation_problem` says why a question is unusable: empty, too short or long, not a question (for the
  question styles), a copy of its source passage, or one of the rules of :mod:`.question_rules` (degenerate text,
  no referent, a self-comparison, a name its source lacks).
- :class:`NearDuplicates` finds a question whose content words overlap an earlier one's by Jaccard >= 0.8.
- :func:`lexical_overlap` is the share of a question's content words found in its source (stored on each query:
  paraphrase questions should score low).
"""

from __future__ import annotations

import re
from collections import defaultdict

from . import question_rules
from .corpus.dedup import normalise

QUESTION_STYLES = {"natural", "paraphrase", "multi"}
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "did",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "their",
        "there",
        "this",
        "to",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "whose",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "about",
        "into",
        "than",
        "then",
        "these",
        "those",
        "should",
        "could",
        "may",
        "might",
        "must",
        "not",
        "no",
    ]
)
QUESTION_START = re.compile(
    r"^(what|why|how|when|where|which|who|whom|whose|is|are|was|were|do|does|did|can|could|should|would|will"
    r"|has|have|had|in what|to what)\b",
    re.I,
)
MIN_WORDS, MAX_WORDS, MAX_CHARS = 2, 40, 300


def clean(answer: str) -> str:
    line = next((part for part in answer.strip().splitlines() if part.strip()), "")
    line = re.sub(
        r"^\s*(?:\d+[.)]|[-*•]|(?:relevant )?(?:query|question|search keywords)\s*:)\s*", "", line, flags=re.I
    )
    line = line.strip().strip("\"“”'`").strip()
    return " ".join(line.split())


_EVIDENCE = re.compile(r"(?:^|\s)evidence\s*:\s*(.*)", re.I | re.S)
_QUOTES = "\"“”'`«»"


def split_evidence(answer: str) -> tuple[str, str | None]:
    """(the answer without its evidence, the evidence quote or None). The quote follows an ``Evidence:`` label, on
    its own line or after the query on the same one; surrounding quotes and ellipses are dropped, and only its
    first line is kept."""
    match = _EVIDENCE.search(answer)
    if not match:
        return answer, None
    lines = [line for line in match.group(1).splitlines() if line.strip()]
    quote = lines[0].strip() if lines else ""
    for _ in range(2):  # "“...text...”" has both an ellipsis and quotes, in either order
        quote = quote.strip(_QUOTES).strip().removeprefix("...").removesuffix("...").strip("… ").strip()
    return answer[: match.start()], quote or None


def words(text: str) -> list[str]:
    return re.findall(r"\w+", normalise(text))


def content_words(text: str) -> set[str]:
    return {w for w in words(text) if w not in STOPWORDS and len(w) > 1}


def lexical_overlap(question: str, passage: str) -> float:
    """Share of the question's content words that occur in the passage (0 when it has none)."""
    asked = content_words(question)
    return round(len(asked & set(words(passage))) / len(asked), 4) if asked else 0.0


def validation_problem(
    question: str, passage: str, style: str, ran_out: bool = False, rules: bool = True
) -> str | None:
    """Why ``question`` (of ``style``, asked of ``passage``) is unusable, or None. ``ran_out``: the model stopped at
    its token limit, so the text is cut. Without ``rules``, only the checks of form run, not
    :mod:`~testset_builder.question_rules` (which also owns the cut-text check)."""
    tokens = words(question)
    if not tokens:
        return "empty"
    if len(tokens) < (MIN_WORDS if style == "keyword" else 3):
        return "too short"
    if len(tokens) > MAX_WORDS or len(question) > MAX_CHARS:
        return "too long"
    if style in QUESTION_STYLES and not (question.rstrip().endswith("?") or QUESTION_START.match(question)):
        return "not a question"
    if len(tokens) >= 5 and " ".join(tokens) in " ".join(words(passage)):
        return "copies the passage"
    return question_rules.problem(question, passage, ran_out) if rules else None


class NearDuplicates:
    """Questions seen so far; :meth:`add` refuses one whose content words match an earlier one's by Jaccard >= 0.8."""

    def __init__(self, threshold: float = 0.8) -> None:
        self.threshold = threshold
        self._sets: list[set[str]] = []
        self._by_word: dict[str, list[int]] = defaultdict(list)

    @staticmethod
    def _key(question: str) -> set[str]:
        return content_words(question) or set(words(question))

    def duplicate_of(self, question: str) -> int | None:
        return self._match(self._key(question))

    def _match(self, mine: set[str]) -> int | None:
        candidates = {i for w in mine for i in self._by_word.get(w, ())}
        for i in sorted(candidates):
            other = self._sets[i]
            if len(mine & other) / len(mine | other) >= self.threshold:
                return i
        return None

    def add(self, question: str) -> bool:
        mine = self._key(question)
        if self._match(mine) is not None:
            return False
        index = len(self._sets)
        self._sets.append(mine)
        for w in mine:
            self._by_word[w].append(index)
        return True
