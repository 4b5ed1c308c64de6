"""Exact and near-duplicate chunks, found so that a label on one copy can label its twins.

Exact: equal after normalisation (Unicode NFKC, case-folded, whitespace collapsed). Near: MinHash over word
3-shingles (64 hash functions, LSH with 16 bands of 4), confirmed by the exact Jaccard similarity of the shingle
sets (default >= 0.8). Groups are the connected components of both relations.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
import zlib
from collections import defaultdict
from collections.abc import Sequence

import numpy as np

_WORD = re.compile(r"\w+", re.UNICODE)
_PRIME = (1 << 61) - 1
_RNG = np.random.default_rng(20261202)
_A = _RNG.integers(1, 1 << 31, size=64, dtype=np.uint64)
_B = _RNG.integers(0, 1 << 31, size=64, dtype=np.uint64)
BANDS, ROWS = 16, 4


def normalise(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def shingles(text: str, width: int = 3) -> set[int]:
    words = _WORD.findall(normalise(text))
    if len(words) < width:
        return {zlib.crc32(" ".join(words).encode())} if words else set()
    return {zlib.crc32(" ".join(words[i : i + width]).encode()) for i in range(len(words) - width + 1)}


def minhash(values: set[int]) -> np.ndarray:
    if not values:
        return np.full(64, np.iinfo(np.uint64).max, dtype=np.uint64)
    x = np.fromiter(values, dtype=np.uint64, count=len(values))
    return ((np.outer(_A, x) + _B[:, None]) % np.uint64(_PRIME)).min(axis=1)


def duplicate_groups(
    chunk_ids: Sequence[str], texts: Sequence[str], threshold: float = 0.8
) -> list[tuple[str, list[str]]]:
    """``[(kind, [chunk ids])]`` for every group of two or more; kind is "exact" when all members normalise equal."""
    parent = list(range(len(texts)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(i: int, j: int) -> None:
        parent[find(i)] = find(j)

    digests = [hashlib.sha256(normalise(t).encode()).hexdigest() for t in texts]
    first_of: dict[str, int] = {}
    for i, digest in enumerate(digests):
        if digest in first_of:
            union(i, first_of[digest])
        else:
            first_of[digest] = i
    shingle_sets = [shingles(t) for t in texts]
    buckets: dict[tuple[int, bytes], list[int]] = defaultdict(list)
    for i in first_of.values():  # one representative per exact group is enough
        if len(shingle_sets[i]) < 2:
            continue
        signature = minhash(shingle_sets[i])
        for band in range(BANDS):
            buckets[(band, signature[band * ROWS : (band + 1) * ROWS].tobytes())].append(i)
    checked: set[tuple[int, int]] = set()
    for members in buckets.values():
        for a_index, a in enumerate(members):
            for b in members[a_index + 1 :]:
                pair = (min(a, b), max(a, b))
                if pair in checked or find(a) == find(b):
                    continue
                checked.add(pair)
                sa, sb = shingle_sets[a], shingle_sets[b]
                if len(sa & sb) / len(sa | sb) >= threshold:
                    union(a, b)
    components: dict[int, list[int]] = defaultdict(list)
    for i in range(len(texts)):
        components[find(i)].append(i)
    groups = []
    for members in components.values():
        if len(members) > 1:
            kind = "exact" if len({digests[i] for i in members}) == 1 else "near"
            groups.append((kind, sorted(chunk_ids[i] for i in members)))
    return sorted(groups, key=lambda g: g[1])
