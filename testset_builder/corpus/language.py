"""Which languages a corpus is written in, and how to cut text of a language into BM25 tokens.

Detection is langdetect's (seeded, so a corpus always gets the same answer) over an evenly spaced sample of texts;
a language counts when at least a tenth of the sample is in it. Tokens: Chinese, Japanese and Korean runs become
overlapping character bigrams (no spaces separate their words; bigrams are the usual strong baseline); every other
script is cut into words, with the language's stop words and Snowball stemmer where there is one.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

DEFAULT = "en"
# ISO 639-1 -> (Snowball stemmer, bm25s stop-word list name) where the language has them
STEMMERS = {
    "ar": "arabic", "ca": "catalan", "cs": "czech", "da": "danish", "de": "german", "el": "greek", "en": "english",
    "es": "spanish", "et": "estonian", "eu": "basque", "fa": "persian", "fi": "finnish", "fr": "french",
    "ga": "irish", "hi": "hindi", "hu": "hungarian", "hy": "armenian", "id": "indonesian", "it": "italian",
    "lt": "lithuanian", "ne": "nepali", "nl": "dutch", "no": "norwegian", "pl": "polish", "pt": "portuguese",
    "ro": "romanian", "ru": "russian", "sr": "serbian", "sv": "swedish", "ta": "tamil", "tr": "turkish",
}  # fmt: skip
STOPWORDS = {
    "en": "STOPWORDS_EN", "de": "STOPWORDS_GERMAN", "fr": "STOPWORDS_FRENCH", "es": "STOPWORDS_SPANISH",
    "it": "STOPWORDS_ITALIAN", "nl": "STOPWORDS_DUTCH", "pt": "STOPWORDS_PORTUGUESE", "ru": "STOPWORDS_RUSSIAN",
    "sv": "STOPWORDS_SWEDISH", "da": "STOPWORDS_DANISH", "no": "STOPWORDS_NORWEGIAN", "tr": "STOPWORDS_TURKISH",
    "zh": "STOPWORDS_CHINESE", "ko": "STOPWORDS_KOREAN",
}  # fmt: skip
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")


def detect_language(text: str) -> str | None:
    """The ISO 639-1 code of ``text``'s language (zh for either Chinese script), or None when it cannot tell."""
    from langdetect import DetectorFactory, LangDetectException, detect

    DetectorFactory.seed = 0  # langdetect samples; a fixed seed makes the answer a function of the text
    try:
        code = detect(text[:1000])
    except LangDetectException:
        return None
    return code.split("-")[0]


def corpus_languages(texts: Sequence[str], sample: int = 60, min_share: float = 0.1) -> list[str]:
    """The languages of at least ``min_share`` of an evenly spaced sample of ``texts``, most frequent first."""
    if not texts:
        return [DEFAULT]
    step = max(1, len(texts) // sample)
    counts = Counter(code for code in (detect_language(t) for t in texts[::step][:sample]) if code)
    total = sum(counts.values())
    found = [code for code, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])) if n >= min_share * total]
    return found or [DEFAULT]


def cjk_bigrams(text: str) -> str:
    """``text`` with each run of CJK characters replaced by its overlapping character bigrams, space-separated."""

    def bigrams(match: re.Match) -> str:
        run = match.group(0)
        return " " + " ".join(run[i : i + 2] for i in range(max(1, len(run) - 1))) + " "

    return _CJK.sub(bigrams, text)


def tokenize(texts: Sequence[str], language: str = DEFAULT, stem: bool = True):
    """BM25 tokens (bm25s's Tokenized) of ``texts`` in ``language``: CJK bigrams, stop words, Snowball stems."""
    import bm25s
    from bm25s import stopwords as lists

    stopwords = list(getattr(lists, STOPWORDS[language])) if language in STOPWORDS else []
    stemmer = None
    if stem and language in STEMMERS:
        import Stemmer

        stemmer = Stemmer.Stemmer(STEMMERS[language])
    prepared = [cjk_bigrams(text) for text in texts]
    return bm25s.tokenize(prepared, stopwords=stopwords, stemmer=stemmer, show_progress=False)
