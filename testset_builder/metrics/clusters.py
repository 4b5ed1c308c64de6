"""Which queries resample together: clusters of queries that are not independent of each other.

Several synthetic questions written from one source document share its vocabulary and its difficulty: when one is
easy for a retriever, its siblings tend to be too. Treating them as independent makes intervals too narrow and
paired tests too eager (the issue's simulation: 43% false positives at alpha 0.05). Intervals and tests therefore
resample clusters: by default a synthetic question's source document, and the query itself otherwise (real
queries, or qrels that say nothing about where a question came from).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..errors import InputError

ClusterBy = Literal["auto", "query", "document"]
CLUSTER_CHOICES = ("auto", "query", "document")
DESIGN_EFFECT_THAT_MATTERS = 1.2  # intervals about 10% wider (sqrt(1.2)) than independence would make them


@dataclass(frozen=True)
class Clusters:
    """The cluster of each evaluated query (``codes[i]`` for ``query_ids[i]``), or None: each query alone.

    ``by`` is what the clusters are (``query`` or ``document``); ``alone`` counts the queries that are their own
    cluster because no source document is known for them, under ``document``/``auto``."""

    asked: str
    by: str
    codes: np.ndarray | None
    queries: int
    groups: int
    alone: int

    def describe(self) -> str:
        if self.codes is None and self.by == "query":
            why = " (no source document known)" if self.asked != "query" and self.alone else ""
            return f"by query: {self.queries} queries, each its own cluster{why}"
        documents = self.groups - self.alone
        text = f"by source document: {self.queries} queries in {self.groups} clusters ({documents} documents"
        if self.alone:
            text += f"; {self.alone} queries with no known source document are each their own cluster"
        return text + ")"

    def as_dict(self) -> dict:
        return {
            "asked": self.asked,
            "by": self.by,
            "queries": self.queries,
            "clusters": self.groups,
            "queries_alone": self.alone,
            "description": self.describe(),
        }


def resolve_clusters(
    query_ids: Sequence[str], cluster_by: str = "auto", source_document: Callable[[str], str | None] | None = None
) -> Clusters:
    """Clusters for ``query_ids``: ``query`` (each alone), ``document`` (a query's source document where known,
    else the query alone) or ``auto`` (``document`` when any source document is known, else ``query``).

    When every cluster holds a single query the codes are None, so scoring takes the plain path."""
    if cluster_by not in CLUSTER_CHOICES:
        raise InputError(f"--cluster-by: unknown choice {cluster_by!r}; use {', '.join(CLUSTER_CHOICES)}")
    n = len(query_ids)
    documents = [source_document(str(q)) for q in query_ids] if source_document and cluster_by != "query" else []
    known = sum(d is not None for d in documents)
    if cluster_by == "query" or known == 0:
        return Clusters(cluster_by, "query", None, n, n, n if cluster_by != "query" else 0)
    keys = [f"d:{d}" if d is not None else f"q:{q}" for q, d in zip(query_ids, documents)]
    _, codes = np.unique(np.asarray(keys, dtype=object), return_inverse=True)
    groups = int(codes.max()) + 1
    return Clusters(cluster_by, "document", None if groups == n else codes.astype(np.int64), n, groups, n - known)
