"""Matching logged retrieved texts back to chunks: exactly, else by normalised text (Unicode NFKC, case-folded,
whitespace collapsed); never by similarity. A text that matches no chunk, or matches chunks that are not
duplicates of one another, stays unmatched and is counted, so no label ever rests on a guess."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ...corpus.dedup import normalise


class ChunkMatcher:
    """Chunk ids by exact text and by normalised text, over the workspace's live chunks. ``group_of`` maps a chunk to
    its duplicate group: texts shared by one group's twins resolve to its smallest id."""

    def __init__(self, chunks: Iterable[tuple[str, str]], group_of: Mapping[str, str] | None = None) -> None:
        self.exact: dict[str, set[str]] = {}
        self.normal: dict[str, set[str]] = {}
        self.group_of = dict(group_of or {})
        self.ids: set[str] = set()
        for chunk_id, text in chunks:
            self.ids.add(chunk_id)
            self.exact.setdefault(text, set()).add(chunk_id)
            self.normal.setdefault(normalise(text), set()).add(chunk_id)

    def _one(self, candidates: set[str]) -> str | None:
        if len(candidates) == 1:
            return next(iter(candidates))
        groups = {self.group_of.get(c, c) for c in candidates}
        return min(candidates) if len(groups) == 1 else None  # twins of one group are one answer; others ambiguous

    def match(self, text: str) -> tuple[str | None, str]:
        """(chunk id, how: "exact" | "normalised") or (None, why: "no chunk has this text" | "ambiguous: N chunks")."""
        for how, index, key in (("exact", self.exact, text), ("normalised", self.normal, normalise(text))):
            candidates = index.get(key)
            if candidates:
                found = self._one(candidates)
                return (found, how) if found else (None, f"ambiguous: {len(candidates)} chunks have this text")
        return None, "no chunk has this text"
