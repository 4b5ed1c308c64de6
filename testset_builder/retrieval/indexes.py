"""The workspace's live chunks, indexed for pooling and mining: BM25, and dense with the extra. Indexes are cached
under ``<workspace>/indexes`` and rebuilt only when the live chunks change."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import InputError
from ..records import Query
from ..store import rows
from ..store.workspace import Workspace
from ..tables import Run
from .bm25 import BM25Index
from .dense import DenseIndex


class WorkspaceIndexes:
    """``names`` (bm25, dense) over the workspace's live chunks; ``passages`` maps chunk id -> title and text."""

    def __init__(self, workspace: Workspace, names: Sequence[str]) -> None:
        self.chunk_ids, texts = rows.live_chunk_passages(workspace.db)
        if not self.chunk_ids:
            raise InputError(
                "the workspace has no chunks yet: run `testset-builder chunk SOURCE --workspace ...` first",
                path=workspace.root,
            )
        self.passages = dict(zip(self.chunk_ids, texts))
        directory = workspace.root / "indexes"
        self.indexes = {
            name: BM25Index.cached(directory, self.chunk_ids, texts)
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
