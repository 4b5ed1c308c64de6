"""Which queries resample together: clusters of queries that are not independent of each other.

Several synthetic questions written from one source document share its vocabulary and its difficulty: when one is
easy for a retriever, its siblings tend to be too. Treating them as independent makes intervals too narrow and
paired tests too eager (the issue's simulation: 43% false positives at alpha 0.05). Intervals and tests therefore
resample clusters: by default a synthetic question's source document, a logged query's session (from the release's
logs), and the query itself otherwise (qrels that say nothing about where a question came from). Real queries can
be clustered by a field the user keeps (a session, a user, a topic: ``given``) too, or by the relevant documents
they share (``relevant``: queries joined whenever they share one, transitively), which the summary suggests where
it matters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._arrow import from_numpy, to_numpy
from ..errors import InputError
from ..tables import CHUNK_ID, GRADE, QUERY_ID

ClusterBy = Literal["auto", "query", "document", "session", "relevant", "given"]
CLUSTER_CHOICES = ("auto", "query", "document", "session", "relevant", "given")
DOCUMENT = ("auto", "document")  # the choices that cluster synthetic questions by their source document
DESIGN_EFFECT_THAT_MATTERS = 1.2  # intervals about 10% wider (sqrt(1.2)) than independence would make them


@dataclass(frozen=True)
class Clusters:
    """The cluster of each evaluated query (``codes[i]`` for ``query_ids[i]``), or None: each query alone.

    ``by`` is what the clusters are (``query``, ``document``, ``session``, ``document and session``, ``relevant`` or
    ``given``); ``alone`` counts the queries that are their own cluster because nothing joins them to another;
    ``sharing``: queries that share a relevant document with another (said where each query is its own cluster,
    since they may not be independent)."""

    asked: str
    by: str
    codes: np.ndarray | None
    queries: int
    groups: int
    alone: int
    sharing: int = 0
    relevant_usable: bool = False  # whether --cluster-by relevant would leave enough clusters to resample

    @property
    def worth_saying(self) -> bool:
        """Whether a summary should say how queries resample: they are clustered, document clusters were asked
        for, or queries that may not be independent are resampled alone."""
        return self.by != "query" or self.asked in ("document", "session") or bool(self.sharing)

    def describe(self) -> str:
        if self.codes is None and self.by == "query":
            unknown = {"session": "no session known", "document": "no source document known"}.get(
                self.asked, "no source document or session known"
            )
            why = f" ({unknown})" if self.asked not in ("query", "relevant", "given") and self.alone else ""
            text = f"by query: {self.queries} queries, each its own cluster{why}"
            if self.sharing:
                how = "--cluster-by relevant resamples them together, or " if self.relevant_usable else ""
                text += (
                    f"; {self.sharing} of them share relevant documents with others and may not be independent: "
                    f"{how}--clusters FILE by a field you keep (a session, a user)"
                )
            return text
        if self.by == "relevant":
            return (
                f"by shared relevant documents: {self.queries} queries in {self.groups} clusters "
                f"({self.alone} queries share none and are each their own cluster)"
            )
        if self.by == "given":
            return (
                f"by the clusters file: {self.queries} queries in {self.groups} clusters "
                f"({self.alone} queries it gives no cluster are each their own)"
            )
        if self.by == "session":
            text = f"by logged session: {self.queries} queries in {self.groups} clusters ({self.groups - self.alone} "
            text += "sessions" + (
                f"; {self.alone} queries with no session known are each their own cluster" if self.alone else ""
            )
            return text + ")"
        if self.by == "document and session":
            return (
                f"by source document (synthetic questions) and logged session (real queries): {self.queries} queries "
                f"in {self.groups} clusters ({self.alone} queries with neither are each their own cluster)"
            )
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
            "queries_sharing_relevant_documents": self.sharing,
            "description": self.describe(),
        }


def resolve_clusters(
    query_ids: Sequence[str],
    cluster_by: str = "auto",
    source_document: Callable[[str], str | None] | None = None,
    relevant: Mapping[str, Iterable[str]] | RelevantPairs | None = None,
    given: Mapping[str, str] | None = None,
    session: Callable[[str], str | None] | None = None,
) -> Clusters:
    """Clusters for ``query_ids``: ``query`` (each alone), ``document`` (a query's source document where known,
    else the query alone), ``session`` (a logged query's session where known, else the query alone), ``relevant``
    (queries sharing a document in ``relevant``, query -> its relevant documents or :class:`RelevantPairs`, joined
    transitively), ``given`` (the cluster ``given`` names for a query, else the query alone) or ``auto`` (``given``
    when a clusters file is given, else each query's source document or, for a logged query, its session, where
    any is known, else ``query``, saying how many queries share relevant documents).

    When every cluster holds a single query the codes are None, so scoring takes the plain path."""
    if cluster_by not in CLUSTER_CHOICES:
        raise InputError(f"--cluster-by: unknown choice {cluster_by!r}; use {', '.join(CLUSTER_CHOICES)}")
    n = len(query_ids)
    if cluster_by == "given" and not given:
        raise InputError("--cluster-by given needs --clusters FILE (each query's cluster)")
    if given and cluster_by in ("auto", "given"):
        keys = [f"c:{given[str(q)]}" if str(q) in given else f"q:{q}" for q in query_ids]
        alone = sum(str(q) not in given for q in query_ids)
        return _clusters(cluster_by, "given", keys, alone)
    if cluster_by == "relevant":
        keys, alone, largest = _shared(query_ids, relevant or {})
        if n and largest > n / 2:
            raise InputError(
                f"--cluster-by relevant: sharing relevant documents joins {largest} of the {n} queries into one "
                "cluster, so there is too little to resample; give --clusters FILE (a session, a user) or "
                "--cluster-by query"
            )
        return _clusters(cluster_by, "relevant", keys, alone)
    documents = [source_document(str(q)) for q in query_ids] if source_document and cluster_by in DOCUMENT else []
    sessions = [session(str(q)) for q in query_ids] if session and cluster_by in ("auto", "session") else []
    documents, sessions = documents or [None] * n, sessions or [None] * n
    keys = [
        f"d:{d}" if d is not None else f"s:{s}" if s is not None else f"q:{q}"
        for q, d, s in zip(query_ids, documents, sessions)
    ]
    by_document = sum(d is not None for d in documents)
    by_session = sum(d is None and s is not None for d, s in zip(documents, sessions))
    if cluster_by == "query" or by_document + by_session == 0:
        sharing, usable = 0, False
        if relevant and cluster_by == "auto":
            _, alone, largest = _shared(query_ids, relevant)
            sharing, usable = n - alone, largest <= n / 2
        return Clusters(cluster_by, "query", None, n, n, n if cluster_by != "query" else 0, sharing, usable)
    by = "document" if not by_session else "session" if not by_document else "document and session"
    return _clusters(cluster_by, by, keys, n - by_document - by_session)


def clusters_for(
    query_ids: Sequence[str],
    labels: pa.Table,
    cluster_by: str = "auto",
    *,
    source_document: Callable[[str], str | None] | None = None,
    session: Callable[[str], str | None] | None = None,
    document_of: Callable[[str], str] | None = None,
    given: Mapping[str, str] | None = None,
    relevance_level: int = 1,
) -> Clusters:
    """:func:`resolve_clusters` over a qrels table (``labels``): the relevant pairs (graded ``relevance_level`` or
    more, each chunk's document from ``document_of``, None: the chunk is its own document) are read only where
    ``cluster_by`` needs them (``auto``, to say how many queries share one; ``relevant``)."""
    pairs = None
    if cluster_by in ("auto", "relevant"):
        pairs = RelevantPairs.from_table(labels, relevance_level, document_of)
    return resolve_clusters(query_ids, cluster_by, source_document, pairs, given, session)


def _clusters(asked: str, by: str, keys: list[str], alone: int) -> Clusters:
    n = len(keys)
    if n == 0:
        return Clusters(asked, by, None, 0, 0, 0)
    _, codes = np.unique(np.asarray(keys, dtype=object), return_inverse=True)
    groups = int(codes.max()) + 1
    return Clusters(asked, by, None if groups == n else codes.astype(np.int64), n, groups, alone)


@dataclass(frozen=True)
class RelevantPairs:
    """The relevant (query, document) pairs, coded: pair ``i`` joins query ``queries[query_codes[i]]`` to the
    document coded ``document_codes[i]``. What :func:`resolve_clusters` joins queries on, made from a qrels table's
    columns (:meth:`from_table`) without a set per query, or from a mapping (:meth:`from_mapping`)."""

    queries: list[str]
    query_codes: np.ndarray
    document_codes: np.ndarray

    @classmethod
    def from_table(
        cls, table: pa.Table, relevance_level: int = 1, document_of: Callable[[str], str] | None = None
    ) -> RelevantPairs:
        """The pairs of a qrels table graded ``relevance_level`` or more; ``document_of`` gives a chunk's document
        (None: each chunk id is a document)."""
        keep = from_numpy(to_numpy(table.column(GRADE)) >= relevance_level)
        queries = pc.dictionary_encode(table.column(QUERY_ID).filter(keep).combine_chunks())
        chunks = pc.dictionary_encode(table.column(CHUNK_ID).filter(keep).combine_chunks())
        document_codes = to_numpy(chunks.indices).astype(np.int64)
        if document_of is not None:  # the chunks of one document share its code
            code_of: dict[str, int] = {}
            names = chunks.dictionary.to_pylist()
            by_chunk = np.array([code_of.setdefault(document_of(c), len(code_of)) for c in names], dtype=np.int64)
            document_codes = by_chunk[document_codes]
        return cls(queries.dictionary.to_pylist(), to_numpy(queries.indices).astype(np.int64), document_codes)

    @classmethod
    def from_mapping(cls, relevant: Mapping[str, Iterable[str]]) -> RelevantPairs:
        """The pairs of ``{query id: its relevant documents}``."""
        code_of: dict[str, int] = {}
        queries, query_codes, document_codes = [], [], []
        for query, documents in relevant.items():
            queries.append(str(query))
            for document in documents:
                query_codes.append(len(queries) - 1)
                document_codes.append(code_of.setdefault(document, len(code_of)))
        return cls(queries, np.asarray(query_codes, dtype=np.int64), np.asarray(document_codes, dtype=np.int64))


def _edges(query_ids: Sequence[str], pairs: RelevantPairs) -> tuple[np.ndarray, np.ndarray, int]:
    """(query row, document code) of each relevant pair whose query is evaluated, and the number of codes."""
    row_of = {str(q): i for i, q in enumerate(query_ids)}
    row_by_code = np.array([row_of.get(q, -1) for q in pairs.queries], dtype=np.int64)
    rows = row_by_code[pairs.query_codes]
    evaluated = rows >= 0
    documents = int(pairs.document_codes.max()) + 1 if len(pairs.document_codes) else 0
    return rows[evaluated], pairs.document_codes[evaluated], documents


def _components(n: int, rows: np.ndarray, codes: np.ndarray, documents: int) -> np.ndarray:
    """Each query row's root: the smallest row joined to it through shared documents, transitively.

    Each document's queries are joined to its smallest query (a star per document). Then, in rounds, each edge
    hooks the larger of its two ends' labels onto the smaller (the labels themselves, so whole trees move at once,
    not a row at a time) and labels are shortened by pointer jumping, until a round changes nothing: a few
    vectorised passes where a union-find walks every pair in Python. Labels
    only ever fall to a row of the same component, ``labels[i] <= i`` always, and at the fixed point both ends of
    every edge hold the same root, which is then its component's smallest row."""
    labels = np.arange(n)
    if len(rows) == 0:
        return labels
    first = np.full(documents, n)
    np.minimum.at(first, codes, rows)
    hub = first[codes]
    while True:
        before = labels.copy()
        at_row, at_hub = labels[rows], labels[hub]
        np.minimum.at(labels, at_hub, at_row)  # hook the roots, not only the rows
        np.minimum.at(labels, at_row, at_hub)
        np.minimum.at(labels, rows, at_hub)
        while True:  # pointer jumping: labels[i] <= i, so labels[labels] only shortens the chains
            jumped = labels[labels]
            if np.array_equal(jumped, labels):
                break
            labels = jumped
        if np.array_equal(labels, before):
            return labels


def _shared(
    query_ids: Sequence[str], relevant: Mapping[str, Iterable[str]] | RelevantPairs
) -> tuple[list[str], int, int]:
    """Each query's cluster key when queries sharing a relevant document join (transitively), how many queries
    share none, and the size of the largest cluster."""
    n = len(query_ids)
    pairs = relevant if isinstance(relevant, RelevantPairs) else RelevantPairs.from_mapping(relevant)
    roots = _components(n, *_edges(query_ids, pairs))
    sizes = np.bincount(roots, minlength=n)
    keys = [f"r:{r}" for r in roots.tolist()]
    return keys, int(np.count_nonzero(sizes[roots] == 1)), int(sizes.max(initial=0))
