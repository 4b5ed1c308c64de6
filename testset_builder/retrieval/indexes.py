"""The workspace's live chunks, indexed for pooling and mining: BM25, and dense with the extra. Indexes are cached
under ``<workspace>/indexes`` and rebuilt only when the live chunks change."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from ..corpus.language import corpus_languages
from ..errors import InputError
from ..records import Query
from ..store import rows
from ..store.workspace import Workspace
from ..tables import Run
from ._common import corpus_key
from .bm25 import BM25Index
from .dense import DenseIndex


def languages_of(directory: Path | None, chunk_ids: Sequence[str], texts: Sequence[str]) -> list[str]:
    """The corpus's languages (see :func:`~testset_builder.corpus.language.corpus_languages`), cached beside the
    indexes under the corpus's key, since detection takes a second and the corpus rarely changes."""
    path = Path(directory) / f"languages-{corpus_key('languages', chunk_ids, texts)}.json" if directory else None
    if path is not None and path.exists():
        return json.loads(path.read_text(encoding="utf-8"))
    found = corpus_languages(texts)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(found), encoding="utf-8")
        except OSError:  # a read-only workspace: detect again next time
            pass
    return found


class WorkspaceIndexes:
    """``names`` (bm25, dense) over the workspace's live chunks; ``passages`` maps chunk id -> title and text.
    BM25 tokenizes in the corpus's main language (``languages[0]``)."""

    def __init__(self, workspace: Workspace, names: Sequence[str]) -> None:
        self.chunk_ids, texts = rows.live_chunk_passages(workspace.db)
        if not self.chunk_ids:
            raise InputError(
                "the workspace has no chunks yet: run `testset-builder chunk SOURCE --workspace ...` first",
                path=workspace.root,
            )
        self.passages = dict(zip(self.chunk_ids, texts))
        directory = workspace.root / "indexes"
        self.languages = languages_of(directory, self.chunk_ids, texts)
        self.indexes = {
            name: BM25Index.cached(directory, self.chunk_ids, texts, language=self.languages[0])
            if name == "bm25"
            else DenseIndex.cached(directory, self.chunk_ids, texts)
            for name in names
        }

    def runs(self, queries: Sequence[Query], k: int) -> dict[str, Run]:
        ids, texts = [q.query_id for q in queries], [q.text for q in queries]
        return {name: index.search(ids, texts, k=k, name=name) for name, index in self.indexes.items()}


RETRIEVERS = ("bm25", "dense")


def retriever_names(setting: str | Sequence[str]) -> tuple[str, ...]:
    """The retrievers a ``propose.retrievers`` setting names: ``auto`` is BM25, plus dense when installed."""
    from .dense import INSTALL_HINT, dense_available

    if setting == "auto":
        return RETRIEVERS if dense_available() else ("bm25",)
    names = tuple(dict.fromkeys(setting))
    if "dense" in names and not dense_available():
        from ..errors import DenseUnavailableError

        raise DenseUnavailableError(f"the dense retriever needs the dense extra: {INSTALL_HINT}")
    return names
