"""Keep the duplicate groups in the store equal to :func:`~.dedup.duplicate_groups` over the live chunks, doing
work proportional to what changed.

Groups are the connected components of a graph on live chunks (an edge: equal normalised text, or a shared LSH
key and shingle Jaccard >= the threshold); an edge depends on its two chunks only. So:

- removing chunks can only split the groups they were in: those groups' remaining members are regrouped from
  scratch with the reference function (:func:`regroup_after_removal`);
- adding chunks can only join groups: a pending chunk is joined with every live chunk it has an edge to, and with
  those chunks' groups (:func:`settle_pending`). When most chunks are pending (a first load), the index is scanned
  once instead of looked up key by key.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterable, Iterator

import numpy as np

from ..store import duplicates as index
from ..store.corpus import live_chunk_count
from .dedup import THRESHOLD, duplicate_groups, jaccard_upper_bounds, normalise, pair_jaccards, shingle_sets

BULK_SHARE = 0.2  # pending above this share of the live chunks: scan the index rather than look keys up


class _Components:
    """Union-find over chunk ids, created as they are met."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, item: str) -> str:
        parent = self.parent.setdefault(item, item)
        while parent != item:
            grand = self.parent[parent]
            self.parent[item] = grand
            item, parent = parent, grand
        return item

    def root(self, item: str) -> str:
        """:meth:`find` without recording ``item`` (a chunk met only as a candidate stays out of the groups)."""
        while (parent := self.parent.get(item, item)) != item:
            item = parent
        return item

    def union(self, a: str, b: str) -> None:
        root_a, root_b = self.find(a), self.find(b)
        if root_a != root_b:
            self.parent[root_a] = root_b

    def groups(self) -> list[list[str]]:
        members: dict[str, list[str]] = {}
        for item in self.parent:
            members.setdefault(self.find(item), []).append(item)
        return [sorted(m) for m in members.values() if len(m) > 1]


def _kinded(groups: Iterable[list[str]], digests: dict[str, str]) -> list[tuple[str, list[str]]]:
    return sorted((("exact" if len({digests[c] for c in members}) == 1 else "near"), members) for members in groups)


def regroup_after_removal(db: sqlite3.Connection, removed: Iterable[str]) -> None:
    """Chunks just marked removed leave their groups; what remains of each is regrouped from scratch."""
    affected = [c for members in index.group_members(db, list(removed)).values() for c in members]
    if not affected:
        return
    live = sorted(index.live_ids(db, affected))
    texts = index.texts(db, live)
    index.replace_groups_of(db, affected, duplicate_groups(live, [texts[c] for c in live]))


def settle_pending(db: sqlite3.Connection, threshold: float = THRESHOLD) -> None:
    """Group the pending chunks with their live twins and near-twins, merging the groups those are in."""
    waiting = index.pending_count(db)
    if not waiting:
        return
    index.ensure_key_index(db)
    if not index.live_chunks_over(db, waiting / BULK_SHARE):  # a large load: every key sorted anew, into blocks
        # a first load's pending chunks are every live one: only then are their sketches kept (68 bytes a chunk)
        sketches = index.PendingSketches(db) if waiting >= live_chunk_count(db) else None
        index.rebuild_key_blocks(db, sketches)
        pending, exact = None, index.exact_buckets(db)
        pairs = _first_load_pairs(db, sketches, threshold)
        del sketches
        if pairs is not None:
            pairs = _by_component(pairs)
            ids = index.chunk_ids_by_rowid(db, np.unique(pairs).tolist())
            near = None
        else:
            near = _live_buckets(db, index.key_buckets(db))
    else:
        index.index_pending_keys(db)
        rows = index.live_pending(db)
        pending = {chunk_id for chunk_id, _ in rows}
        exact = index.live_by_normalised(db, sorted({digest for _, digest in rows})).values()
        near = list(index.live_by_key(db, index.pending_keys(db)))
    components = _Components()
    for bucket in exact:
        for chunk_id in bucket[1:]:
            components.union(bucket[0], chunk_id)
    if near is None:
        _join_pairs(db, components, _pair_ids(pairs, ids), threshold)
    else:
        _join_near(db, components, near, pending, threshold)
    touched = list(components.parent)
    for members in index.group_members(db, touched).values():
        for chunk_id in members[1:]:
            components.union(members[0], chunk_id)
    groups = components.groups()
    members = [c for group in groups for c in group]
    index.replace_groups_of(db, members, _kinded(groups, index.normalised_hashes(db, members)))
    index.clear_pending(db)


def _live_buckets(db: sqlite3.Connection, buckets: list[list[str]]) -> list[list[str]]:
    live = index.live_ids(db, sorted({c for bucket in buckets for c in bucket}))
    return [[c for c in bucket if c in live] for bucket in buckets]


CANDIDATE_SLICE = 200_000  # candidate pairs made and bounded at once (~55 MB of numpy), however many there are


def _first_load_pairs(
    db: sqlite3.Connection, sketches: index.PendingSketches | None, threshold: float
) -> np.ndarray | None:
    """When every live chunk is pending (a first load: no pair reaches outside them), the pairs of chunk rowids to
    judge (:func:`_possible_pairs`) from the key blocks just rebuilt; otherwise None, before any key is read. A later
    copy of a normalised text (a live chunk with the same one and a smaller rowid exists) takes no part: the first
    copy stands for it (same keys and shingles; the exact buckets join the copies), as in the reference.
    ``sketches``: those of the pending chunks, taken as the blocks were rebuilt (None: fewer chunks are pending
    than are live)."""
    if sketches is None or sketches.live != live_chunk_count(db):
        return None
    judged = sketches.signed
    judged[index.later_copies(db)] = False
    rowids, later = _shared_key_runs(index.key_blocks(db), judged)
    return _possible_pairs(sketches.table, rowids, later, threshold)


def _possible_pairs(sketches: np.ndarray, rowids: np.ndarray, later: np.ndarray, threshold: float) -> np.ndarray:
    """The distinct pairs of rows in one run of :func:`_shared_key_runs` whose Jaccard similarity their sketches
    (rows by rowid) do not rule out (:func:`~.dedup.jaccard_upper_bounds`, exact: a pair ruled out is below
    ``threshold`` for certain), as uint32 (a, b) rowid rows, a < b. Candidates are made and bounded
    :data:`CANDIDATE_SLICE` at a time and only survivors kept, so memory grows with the rows and the survivors,
    not with the candidates (18M at 1 GB of the benchmark)."""
    if not len(rowids):
        return np.zeros((0, 2), dtype=np.uint32)
    survivors = []
    for first, second in _candidate_slices(rowids, later):
        kept = (jaccard_upper_bounds(sketches[first], sketches[second]) >= threshold - 1e-9) & (first != second)
        a, b = first[kept], second[kept]
        survivors.append(np.minimum(a, b).astype(np.uint64) << np.uint64(32) | np.maximum(a, b))
    return np.unique(np.concatenate(survivors)).view("<u4").reshape(-1, 2)[:, ::-1].copy()


def _by_component(pairs: np.ndarray) -> np.ndarray:
    """The pairs ordered by the connected component of the graph they make, so that a slice of them judged at once
    touches the rows of a few components (sorted by rowid, a slice of 5,000 touched ~3,900 rows and each row's
    text was read and shingled ~15 times over)."""
    if not len(pairs):
        return pairs
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    rows, inverse = np.unique(pairs, return_inverse=True)
    local = inverse.reshape(pairs.shape)
    graph = coo_matrix((np.ones(len(pairs), dtype=np.int8), (local[:, 0], local[:, 1])), shape=(len(rows),) * 2)
    _, label = connected_components(graph, directed=False)
    return pairs[np.argsort(label[local[:, 0]], kind="stable")]


def _shared_key_runs(
    blocks: Iterable[tuple[np.ndarray, np.ndarray]], judged: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """From (keys, rowids) slices in key order (:func:`~..store.duplicates.key_blocks`), the entries of the rows
    ``judged`` (a boolean array by rowid) whose key another of them has: their rowids run by run of equal key
    (uint32), and for each how many entries after it are in its run. One slice and the run it ends on are held at
    a time: memory grows with the shared entries, not with the keys (26M at 1 GB of the benchmark)."""
    rowid_parts, later_parts = [], []
    for keys, rows in index.whole_runs(_judged_entries(blocks, judged)):
        _runs_in(keys, rows, rowid_parts, later_parts)
    if not rowid_parts:
        return np.zeros(0, np.uint32), np.zeros(0, np.int64)
    return np.concatenate(rowid_parts).astype(np.uint32), np.concatenate(later_parts)


def _judged_entries(
    blocks: Iterable[tuple[np.ndarray, np.ndarray]], judged: np.ndarray
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for keys, rows in blocks:
        kept = judged[rows]
        yield keys[kept], rows[kept]


def _runs_in(keys: np.ndarray, rows: np.ndarray, rowid_parts: list, later_parts: list) -> None:
    """The shared entries of whole runs of equal ``keys`` (sorted), appended as :func:`_shared_key_runs` gives them."""
    if len(keys) < 2:
        return
    repeat = keys[1:] == keys[:-1]  # entry i + 1 has entry i's key
    shared = np.zeros(len(keys), dtype=bool)
    shared[1:] = repeat
    shared[:-1] |= repeat
    keys, rows = keys[shared], rows[shared]
    if not len(keys):
        return
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    ends = np.repeat(np.append(starts[1:], len(keys)), np.diff(np.append(starts, len(keys))))
    rowid_parts.append(rows)
    later_parts.append(ends - np.arange(len(keys)) - 1)


def _candidate_slices(rowids: np.ndarray, later: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Each pair of entries in one run as (first, second) rowids, about :data:`CANDIDATE_SLICE` pairs at a time: a
    slice is the pairs of a range of entries with the entries after them (at least one entry's)."""
    made = np.cumsum(later)  # pairs of the entries up to each
    start = 0
    while start < len(rowids):
        before = int(made[start - 1]) if start else 0
        end = max(int(np.searchsorted(made, before + CANDIDATE_SLICE, side="right")), start + 1)
        counts = later[start:end]
        owner = np.repeat(np.arange(start, end), counts)
        step = np.arange(1, len(owner) + 1) - np.repeat(made[start:end] - counts - before, counts)
        yield rowids[owner], rowids[owner + step]
        start = end


def _pair_ids(pairs: np.ndarray, ids: dict[int, str]) -> Iterator[tuple[str, str]]:
    """The rowid pairs as chunk id pairs, converted a slice at a time (no Python list of them all)."""
    for start in range(0, len(pairs), PAIR_SLICE):
        for a, b in pairs[start : start + PAIR_SLICE].tolist():
            yield ids[a], ids[b]


def _join_pairs(db: sqlite3.Connection, components: _Components, pairs: Iterable[tuple[str, str]], threshold) -> None:
    """Union the given candidate pairs whose Jaccard similarity reaches ``threshold``, :data:`PAIR_SLICE` at a time."""
    batch: list[tuple[str, str]] = []
    for a, b in pairs:
        if components.root(a) != components.root(b):
            batch.append((a, b))
        if len(batch) >= PAIR_SLICE:
            _join_similar(db, components, batch, threshold)
            batch = []
    _join_similar(db, components, batch, threshold)


PAIR_SLICE = 5_000  # candidate pairs whose Jaccard is computed at once (~50 MB of numpy and their chunks' texts)
BUCKET_SLICE = 20_000  # buckets whose candidate pairs are listed at once: memory stays bounded however many there are


def _join_near(
    db: sqlite3.Connection, components: _Components, buckets: Iterable[list[str]], pending: set[str] | None, threshold
) -> None:
    """Union each candidate pair in a bucket (one of them pending; any, when ``pending`` is None) whose shingle
    sets are similar enough. One chunk stands for the chunks of its normalised text (same shingles). Buckets are
    taken :data:`BUCKET_SLICE` at a time and the pairs' Jaccard similarities computed :data:`PAIR_SLICE` at a time,
    vectorised (:func:`~.dedup.pair_jaccards`), so memory does not grow with the number of candidates; a pair two
    slices both list is judged twice (same answer)."""
    for bucket_slice in _slices(buckets, BUCKET_SLICE):
        bucket_slice = [b for b in bucket_slice if len(b) > 1 and (pending is None or any(c in pending for c in b))]
        digests = index.normalised_hashes(db, sorted({c for b in bucket_slice for c in b}))
        _join_pairs(db, components, sorted(_candidate_pairs(bucket_slice, digests, pending)), threshold)


def _slices(items: Iterable, size: int) -> Iterator[list]:
    iterator = iter(items)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def _join_similar(db: sqlite3.Connection, components: _Components, pairs: list[tuple[str, str]], threshold) -> None:
    """Union the pairs whose shingle sets' Jaccard similarity reaches ``threshold`` (each chunk's shingles once)."""
    if not pairs:
        return
    ids = sorted({c for pair in pairs for c in pair})
    texts = index.texts(db, ids)
    position = {chunk_id: i for i, chunk_id in enumerate(ids)}
    sets = shingle_sets([normalise(texts[c]) for c in ids])
    first = np.array([position[a] for a, _ in pairs], dtype=np.int64)
    second = np.array([position[b] for _, b in pairs], dtype=np.int64)
    for (a, b), similar in zip(pairs, (pair_jaccards(sets, first, second) >= threshold).tolist(), strict=True):
        if similar:
            components.union(a, b)


def _candidate_pairs(buckets: list[list[str]], digests: dict[str, str], pending: set[str] | None) -> set:
    """The distinct (a, b), a < b, of representatives sharing a bucket, one of them pending (any: None)."""
    pairs = set()
    for bucket in buckets:
        by_digest: dict[str, str] = {}
        for chunk_id in sorted(bucket):
            by_digest.setdefault(digests[chunk_id], chunk_id)
        representatives = sorted(by_digest.values())
        for i, a in enumerate(representatives):
            for b in representatives[i + 1 :]:
                if pending is None or a in pending or b in pending:
                    pairs.add((a, b))
    return pairs
