"""Matching logged retrieved texts back to chunks: exactly, else by normalised text (Unicode NFKC, case-folded,
whitespace collapsed); never by similarity. A text that matches no chunk, or matches chunks that are not
duplicates of one another, stays unmatched and is counted, so no label ever rests on a guess.

A logged text may be the chunk's text, or the passage retrievers index (the document's title on a line above the
text). Matching looks texts up by their sha256 in the store's index of live chunks (the duplicate index's text and
normalised-text hashes), a batch of texts at a time, so the corpus's texts are never held in memory; a passage
matches when its text part does and the chunk's document carries its title part.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from ...corpus.batches import text_sha256
from ...corpus.dedup import normalise, normalised_sha256
from ...store import corpus as stored_corpus
from ...store import logs as stored_logs

TITLE_WORDS = 64  # a normalised passage's title is looked for in its first words, at most this many
Lookup = Callable[[list[str]], dict[str, list[str]]]  # hashes -> {hash: chunk ids}


@dataclass(frozen=True)
class _Form:
    """One way a logged text may hold a chunk: the hash its chunk text would have, and the title its document must
    then have (None: any title)."""

    how: str  # "exact" | "normalised"
    sha256: str
    title: str | None = None


def _forms(text: str) -> list[_Form]:
    """The forms looked up first: the chunk text verbatim, a passage's text part verbatim, the normalised text."""
    forms = [_Form("exact", text_sha256(text))]
    if "\n" in text:
        title, rest = text.split("\n", 1)
        forms.append(_Form("exact", text_sha256(rest), title))
    return [*forms, _Form("normalised", normalised_sha256(text))]


def _titled_forms(text: str) -> list[_Form]:
    """A normalised passage: its title is some of its first words (a newline normalises to a space), so each split
    is a form; looked up only for texts no other form found."""
    words = normalise(text).split(" ")
    return [
        _Form("normalised", normalised_sha256(" ".join(words[split:])), " ".join(words[:split]))
        for split in range(1, min(TITLE_WORDS, len(words) - 1) + 1)
    ]


class ChunkMatcher:
    """Resolves logged texts to live chunk ids through the store's hash index. ``by_text``, ``by_normalised``,
    ``titles`` and ``groups`` are the store reads (chunk ids -> document title; chunk ids -> duplicate group), so a
    test can give them directly."""

    def __init__(
        self,
        by_text: Lookup,
        by_normalised: Lookup,
        titles: Callable[[list[str]], Mapping[str, str]],
        groups: Callable[[list[str]], Mapping[str, str]],
    ) -> None:
        self._lookups = {"exact": by_text, "normalised": by_normalised}
        self._titles, self._groups = titles, groups

    @classmethod
    def of(cls, db) -> ChunkMatcher:
        return cls(
            lambda hashes: stored_corpus.chunks_by_text_sha256(db, hashes),
            lambda hashes: stored_corpus.chunks_by_normalised_sha256(db, hashes),
            lambda ids: stored_logs.chunk_titles(db, ids),
            lambda ids: stored_logs.duplicate_groups_of(db, ids),
        )

    @classmethod
    def over(cls, chunks: Mapping[str, tuple[str, str]]) -> ChunkMatcher:
        """A matcher over chunks held in memory (chunk id -> (its document's title, its text)), such as a release's
        corpus: no duplicate groups, so a text two chunks hold is ambiguous."""
        by_text: dict[str, list[str]] = {}
        by_normalised: dict[str, list[str]] = {}
        for chunk_id, (_, text) in chunks.items():
            by_text.setdefault(text_sha256(text), []).append(chunk_id)
            by_normalised.setdefault(normalised_sha256(text), []).append(chunk_id)

        def lookup(table: dict[str, list[str]]) -> Lookup:
            return lambda hashes: {h: table[h] for h in hashes if h in table}

        return cls(
            lookup(by_text),
            lookup(by_normalised),
            lambda ids: {c: chunks[c][0] for c in ids if c in chunks},
            lambda ids: {},
        )

    def match_all(self, texts: Iterable[str]) -> dict[str, tuple[str | None, str]]:
        """text -> (chunk id, how: "exact" | "normalised") or (None, why: "no chunk has this text" | "ambiguous: N
        chunks have this text"), for every distinct text, with a few lookups for all of them."""
        forms = {text: _forms(text) for text in set(texts)}
        chosen = self._candidates(forms)
        chosen.update(self._candidates({text: _titled_forms(text) for text in forms if text not in chosen}))
        several = sorted({c for _, kept in chosen.values() if len(kept) > 1 for c in kept})
        groups = self._groups(several) if several else {}
        results: dict[str, tuple[str | None, str]] = {text: (None, "no chunk has this text") for text in forms}
        for text, (how, kept) in chosen.items():
            if len(kept) == 1 or len({groups.get(c, c) for c in kept}) == 1:  # twins of one group are one answer
                results[text] = (min(kept), how)
            else:
                results[text] = (None, f"ambiguous: {len(kept)} chunks have this text")
        return results

    def _candidates(self, forms: Mapping[str, list[_Form]]) -> dict[str, tuple[str, set[str]]]:
        """text -> (how, the chunks it holds) for the texts some form finds: exact forms first; a passage form only
        where the chunk's document has the passage's title."""
        if not forms:
            return {}
        found = {
            how: lookup(sorted({f.sha256 for fs in forms.values() for f in fs if f.how == how}))
            for how, lookup in self._lookups.items()
        }
        hits_of = {
            text: [(f.how, c, f.title) for f in text_forms for c in found[f.how].get(f.sha256, ())]
            for text, text_forms in forms.items()
        }
        titled = sorted({c for hits in hits_of.values() for _, c, title in hits if title is not None})
        titles = self._titles(titled) if titled else {}
        chosen = {}
        for text, hits in hits_of.items():
            for how in ("exact", "normalised"):
                kept = {c for h, c, title in hits if h == how and _titled(titles.get(c), title, how)}
                if kept:
                    chosen[text] = (how, kept)
                    break
        return chosen

    def match(self, text: str) -> tuple[str | None, str]:
        return self.match_all([text])[text]


def _titled(title: str | None, wanted: str | None, how: str) -> bool:
    """Whether a chunk whose document has ``title`` holds a form that wants ``wanted`` (None: any title)."""
    if wanted is None:
        return True
    return bool(title) and (title == wanted if how == "exact" else normalise(title) == wanted)
