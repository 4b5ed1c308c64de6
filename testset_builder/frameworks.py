"""LangChain and LlamaIndex retrievers as the callables :func:`~testset_builder.api.score` runs, importing nothing of
those libraries (they are read by the attributes their results have).

A result names a chunk of the release by the workspace's id: ``metadata[id_key]`` (``chunk_id``: what an app that
indexed ``export-chunks`` keeps), else the framework's own id (a LangChain document's ``id``, a node's
``node_id``) when that is a chunk id of the release. Else its text names it: a document's ``page_content``, a
node's text, matched to the release's chunks exactly or after normalising, as ``import-logs`` matches logged texts
(:class:`~testset_builder.stages.logs.matching.ChunkMatcher`). A result that neither names is counted and said
(:attr:`FrameworkRetriever.unmatched`, and a warning from ``score``), never scored as a guess; a retriever none of
whose results match is refused, since every metric would read 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

SHOWN = 3  # unmatched results quoted in the message


@dataclass(frozen=True)
class Result:
    """What a framework's result says of itself: the id kept in its metadata, its own id, its text, its score."""

    kept_id: str | None
    own_id: str | None
    text: str | None
    score: float | None


class FrameworkRetriever:
    """A retriever callable (a query's text -> chunk ids, or (chunk id, score) pairs) over a framework's retriever.
    :meth:`for_release` gives it the release's chunks, so results are checked and matched by text; ``matched``
    counts how results were matched (``id``, ``exact``, ``normalised``), ``unmatched`` the others and ``examples``
    quotes a few."""

    def __init__(self, name: str, results: Callable[[str], Iterable[Result]], id_key: str) -> None:
        self.__name__ = name
        self._results, self.id_key = results, id_key
        self._chunk_ids: set[str] | None = None
        self._matcher = None
        self.matched: Counter = Counter()
        self.unmatched = 0
        self.examples: list[str] = []

    def for_release(self, chunks: Mapping[str, Mapping[str, str]]) -> FrameworkRetriever:
        """Match results against these chunks (chunk id -> ``{"title", "text"}``, a release's corpus)."""
        from .stages.logs.matching import ChunkMatcher

        self._chunk_ids = set(chunks)
        self._matcher = ChunkMatcher.over({c: (d.get("title") or "", d.get("text") or "") for c, d in chunks.items()})
        return self

    def __call__(self, text: str) -> list:
        results = list(self._results(text))
        unchecked = self._chunk_ids is None  # no release to check against: the ids the results give
        ids = [r.kept_id or r.own_id for r in results] if unchecked else self._resolved(text, results)
        found = [(chunk_id, r.score) for chunk_id, r in zip(ids, results) if chunk_id is not None]
        if any(score is None for _, score in found):  # no scores: the framework's order is the ranking
            return [chunk_id for chunk_id, _ in found]
        return [(chunk_id, float(score)) for chunk_id, score in found]

    def _resolved(self, query: str, results: list[Result]) -> list[str | None]:
        assert self._chunk_ids is not None and self._matcher is not None
        ids: list[str | None] = []
        by_id = [next((i for i in (r.kept_id, r.own_id) if i in self._chunk_ids), None) for r in results]
        texts = self._matcher.match_all(r.text for r, i in zip(results, by_id) if i is None and r.text)
        for rank, (result, chunk_id) in enumerate(zip(results, by_id), 1):
            if chunk_id is not None:
                self.matched["id"] += 1
            elif result.text and texts[result.text][0] is not None:
                chunk_id, how = texts[result.text]
                self.matched[how] += 1
            else:
                self.unmatched += 1
                if len(self.examples) < SHOWN:
                    self.examples.append(self._why(query, rank, result, texts))
            ids.append(chunk_id)
        return ids

    def _why(self, query: str, rank: int, result: Result, texts: dict) -> str:
        said = result.kept_id or result.own_id
        named = f"id {said!r} is no chunk of the release" if said else f"no metadata[{self.id_key!r}]"
        why = texts[result.text][1] if result.text else "no text"
        return f"query {query[:40]!r}, result {rank}: {named}, and its text: {why}"

    def problem(self) -> str | None:
        """What to tell the user when results matched no chunk (None when all did)."""
        if not self.unmatched:
            return None
        total = self.unmatched + sum(self.matched.values())
        return (
            f"{self.__name__}: {self.unmatched} of {total} results matched no chunk of the release, and count as not "
            f"relevant ({'; '.join(self.examples)}). Index the chunks with their ids (`testset-builder "
            f"export-chunks`) and keep each one's id in metadata[{self.id_key!r}], or return the chunks' texts"
        )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _id(value: Any) -> str | None:
    return None if value in (None, "") else str(value)


def langchain_retriever(retriever, id_key: str = "chunk_id") -> FrameworkRetriever:
    """A LangChain retriever (``invoke(text)`` gives ``Document`` objects): each document's ``metadata[id_key]``,
    else its ``id``, else its ``page_content``; ranked in the order LangChain returns them."""

    def results(text: str) -> Iterable[Result]:
        for document in retriever.invoke(text):
            metadata = getattr(document, "metadata", None) or {}
            yield Result(
                _id(metadata.get(id_key)),
                _id(getattr(document, "id", None)),  # langchain-core 0.2.11 on
                _text(getattr(document, "page_content", None)),
                None,
            )

    return FrameworkRetriever(type(retriever).__name__, results, id_key)


def llamaindex_retriever(retriever, id_key: str = "chunk_id") -> FrameworkRetriever:
    """A LlamaIndex retriever (``retrieve(text)`` gives ``NodeWithScore`` objects): each node's
    ``metadata[id_key]``, else its ``node_id``, else its text; with the node's score (none given: LlamaIndex's
    order is the ranking)."""

    def results(text: str) -> Iterable[Result]:
        for scored in retriever.retrieve(text):
            node = scored.node
            metadata = getattr(node, "metadata", None) or {}
            content = getattr(node, "text", None)
            if content is None and callable(getattr(node, "get_content", None)):
                content = node.get_content()
            yield Result(_id(metadata.get(id_key)), _id(getattr(node, "node_id", None)), _text(content), scored.score)

    return FrameworkRetriever(type(retriever).__name__, results, id_key)
