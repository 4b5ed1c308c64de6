"""Rules that reject a generated question by reading it and its source chunk alone: pure functions, no retriever.

Each rule returns the reason it rejects a question, or None. :func:`problem` runs them in order and gives the first
reason (the synthesize summary counts rejections by it). None reads BM25, the dense model or the relevance
estimate: a filter on the retrievers' own signals keeps the questions those retrievers find easily, and bends the
set toward the systems it will rank.

- repeats itself: a word twice in a row ("translate translate"), a run of three or more words said twice, or an
  identifier made of a repeated part (``textwrap_wrap_wrap``);
- lists identifiers: three or more comma-separated items that are names, not a sentence;
- code or markup: a copied signature (``name(a, b=None)``), a Sphinx permalink mark, or mostly options and symbols
  (``timeit - python -h -n -n -s``);
- truncated: the model ran out of tokens, or the text stops on a word that cannot end a question;
- no referent: it points at something only the chunk shows ("this function", "the two", "in this case", "the
  following", "the study", "the parameter" with no name);
- compares a thing with itself: "the difference between pprint.pp and pprint.pp";
- names what its source lacks: a name (``os.getlogin()``, ``PDE7``) that does not occur in the source chunk, so
  the chunk cannot be what answers it.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

from .corpus.dedup import normalise

_TOKEN = re.compile(r"[\w.()\[\]\-+/'’]+")
_WORD = re.compile(r"\w+")
_IDENTIFIER = re.compile(
    r"(?<![\w.])(?:[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)+(?:\(\))?"  # dotted: os.getlogin, pprint.pp()
    r"|[A-Za-z_]\w*\(\)"  # called: getpass()
    r"|[A-Za-z]*_[A-Za-z_]\w*"  # snake_case: sort_dicts
    r"|[a-z]+[A-Z]\w*"  # camelCase: namedTemporaryFile
    r"|[A-Za-z]*\d+[A-Za-z]\w*|[A-Z]{2,}\d*[A-Za-z]*\d*"  # codes and acronyms: P533R, PDE7, KRAS
    r")(?![\w(])"
)
_SIGNATURE = re.compile(r"\w\([^)]*(?:=|\*)[^)]*\)?")
_DANGLING = re.compile(
    r"\b(?:this|these)\b(?!\s+(?:is|are)\b)"  # "this function", "how is this useful", "these results"
    r"|\bthe (?:two|both|above|latter|former|following)\b"
    r"|\bwhich of (?:the following|these|them)\b|\(a\)"
    r"|\bin (?:this|that|the) (?:case|example|context|code|passage|text|document|section|study|paper)\b"
    r"|\bthe (?:passage|text|document|article|paper|study|trial|authors?|researchers|results|findings|example|"
    r"snippet|excerpt|section|chapter)\b(?!\s+(?:of|on|from|for|about)\b)",
    re.I,
)
_GENERIC = re.compile(
    r"\bthe (?:parameter|argument|function|method|class|module|option|variable|value|code|program|command|"
    r"feature|approach|technique|model|system|tool)s?\b(?!\s+[\w.]*[_.(])",
    re.I,
)
_SAME_PAIR = (
    re.compile(r"\bbetween (?P<a>.+?) and (?P<b>.+?)(?:\?|$|\s+(?:in|when|for|on|with|as)\b)", re.I),
    re.compile(r"\b(?:do|does|are|is) (?P<a>.+?) and (?P<b>.+?) (?:differ|compare|the same)", re.I),
    re.compile(r"(?P<a>\S+) (?:vs\.?|versus) (?P<b>\S+)", re.I),
)
_CANNOT_END = frozenset(
    {"a", "an", "and", "are", "as", "at", "between", "by", "for", "from", "if", "in", "into", "is", "of", "on", "or",
     "than", "that", "the", "to", "was", "were", "whether", "which", "with", "without"}
)  # fmt: skip
_NOT_NAMES = frozenset({"i", "a", "ok", "vs", "etc", "e.g", "i.e", "faq", "api", "url", "id"})


def repeats_itself(question: str) -> str | None:
    words = [w.lower() for w in _WORD.findall(question)]
    if any(a == b and not a.isdigit() for a, b in itertools.pairwise(words)):
        return "repeats itself"
    for n in (3, 4, 5):
        grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
        if len(grams) != len(set(grams)):
            return "repeats itself"
    for token in re.findall(r"[\w.]+", question):
        parts = [p.lower() for p in re.split(r"[_.]", token) if p]
        if len(parts) >= 3 and len(set(parts)) < len(parts):
            return "repeats itself"
    return None


def lists_identifiers(question: str) -> str | None:
    items = [item.strip() for item in re.split(r"[,;]", question.rstrip("?. ")) if item.strip()]
    if len(items) < 3:
        return None
    names = [item for item in items if len(item.split()) == 1 or (len(item.split()) <= 2 and _IDENTIFIER.search(item))]
    return "lists identifiers" if len(names) >= max(3, len(items) - 1) else None


def code_or_markup(question: str) -> str | None:
    if "¶" in question or _SIGNATURE.search(question):
        return "code or markup"
    tokens = question.split()
    symbolic = [t for t in tokens if t.startswith("-") or not _WORD.search(t)]
    return "code or markup" if len(tokens) >= 4 and len(symbolic) / len(tokens) >= 0.3 else None


def truncated(question: str, ran_out: bool = False) -> str | None:
    if ran_out:
        return "truncated"
    stripped = question.rstrip()
    if stripped.endswith(("?", ".", ")", "!")):
        return None
    words = _WORD.findall(stripped.lower())
    return "truncated" if stripped.endswith((",", ":", "-", "(")) or (words and words[-1] in _CANNOT_END) else None


def no_referent(question: str) -> str | None:
    if _DANGLING.search(question):
        return "no referent"
    if _GENERIC.search(question) and not _IDENTIFIER.search(question):
        return "no referent"
    return None


def _same(a: str, b: str) -> bool:
    def key(text: str) -> str:
        return " ".join(_WORD.findall(normalise(re.sub(r"\(\)", "", text))))

    return bool(key(a)) and key(a) == key(b)


def compares_with_itself(question: str) -> str | None:
    for pattern in _SAME_PAIR:
        for match in pattern.finditer(question):
            if _same(match.group("a"), match.group("b")):
                return "compares a thing with itself"
    return None


def proper_nouns(text: str) -> set[str]:
    """Capitalised words after the first (lower case), unless the text capitalises most of its words (a title)."""
    words = re.findall(r"[A-Za-z][\w'’]*", text)[1:]
    capitalised = [w for w in words if w[0].isupper() and len(w) > 2]
    if len(capitalised) * 2 > len(words):
        return set()
    return {re.sub(r"['’]s$", "", w).lower() for w in capitalised}


def names(text: str) -> set[str]:
    """The names in ``text``: dotted, called, snake_case or camelCase identifiers, codes, acronyms and proper nouns
    (lower case, without a trailing ``()``)."""
    found = {m.group(0).removesuffix("()").lower() for m in _IDENTIFIER.finditer(text)} | proper_nouns(text)
    return {n for n in found if n not in _NOT_NAMES and len(n) > 1}


def names_what_source_lacks(question: str, passage: str) -> str | None:
    source = normalise(passage).lower()
    flat = re.sub(r"[\s_\-]", "", source)
    for name in names(question):
        if name not in source and re.sub(r"[_\-]", "", name) not in flat:
            return "names what its source lacks"
    return None


RULES: tuple[Callable[[str], str | None], ...] = (
    repeats_itself,
    lists_identifiers,
    code_or_markup,
    truncated,
    compares_with_itself,
    no_referent,
)


def problem(question: str, passage: str, ran_out: bool = False) -> str | None:
    """The first rule that rejects ``question`` asked of ``passage``, or None. ``ran_out``: the model stopped at its
    token limit."""
    if ran_out:
        return "truncated"
    for rule in RULES:
        reason = rule(question)
        if reason:
            return reason
    return names_what_source_lacks(question, passage)
