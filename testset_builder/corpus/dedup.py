"""Exact and near-duplicate chunks, found so that a label on one copy can label its twins.

Exact: equal after normalisation (Unicode NFKC, case-folded, whitespace collapsed). Near: MinHash over word
3-shingles (64 values, LSH with 16 bands of 4), confirmed by the exact Jaccard similarity of the shingle
sets (default >= 0.8). Groups are the connected components of both relations.

The shingle hashes, signatures and band keys are computed for a whole batch of texts at once with numpy
(:func:`shingle_hashes`, :func:`signatures`, :func:`band_keys`): a word is a run of characters ``re``'s ``\\w``
matches (``str.isalnum()`` or ``_``), its hash a polynomial over its code points taken from prefix sums (so no
Python object per word), a shingle's hash a mix of its three words' hashes. The signature is one-permutation
MinHash (Li, Owen and Zhang 2012) with rotation densification: one hash per shingle instead of 64. The one-text
functions (:func:`shingles`, :func:`minhash`) and :func:`duplicate_groups`, the whole-corpus reference the
incremental index in the store must agree with, use the same definitions.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from .._disjoint import DisjointSets
from .._hashing import normalise, normalised_sha256

BANDS, ROWS = 16, 4
THRESHOLD = 0.8

_U64 = np.uint64
_WORD_BASE = _U64(0x100000001B3)  # odd, so invertible modulo 2**64
_WORD_BASE_INVERSE = _U64(pow(0x100000001B3, -1, 1 << 64))
_K = (_U64(0x9E3779B97F4A7C15), _U64(0xC2B2AE3D27D4EB4F), _U64(0x165667B19E3779F9))
_IS_WORD: np.ndarray | None = None
_WORD_BLOCKS: np.ndarray | None = None
_POWERS = _INVERSE_POWERS = np.zeros(0, dtype=_U64)


def _word_table(codes: np.ndarray) -> np.ndarray:
    """Which code points are word characters: the table is filled a block of 256 code points at a time, for the
    blocks ``codes`` use (filling all 1.1M at once is paid by every process, every run)."""
    global _IS_WORD, _WORD_BLOCKS
    if _IS_WORD is None:
        _IS_WORD = np.zeros(0x110000, dtype=bool)
        _WORD_BLOCKS = np.zeros(0x110000 >> 8, dtype=bool)
    used = np.bincount(codes >> 8, minlength=len(_WORD_BLOCKS)) > 0
    for block in np.flatnonzero(used & ~_WORD_BLOCKS).tolist():
        first = block << 8
        _IS_WORD[first : first + 256] = [chr(c).isalnum() or c == 95 for c in range(first, first + 256)]
        _WORD_BLOCKS[block] = True
    return _IS_WORD


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """``base**(i+1)`` and ``base**-(i+1)`` modulo 2**64 for i < n (at least), kept between calls and grown by
    doubling: recomputing them per batch was a tenth of the signing time."""
    global _POWERS, _INVERSE_POWERS
    if len(_POWERS) < n:
        size = max(n, 2 * len(_POWERS), 1 << 16)
        with np.errstate(over="ignore"):
            _POWERS = np.cumprod(np.full(size, _WORD_BASE, dtype=_U64))
            _INVERSE_POWERS = np.cumprod(np.full(size, _WORD_BASE_INVERSE, dtype=_U64))
    return _POWERS, _INVERSE_POWERS


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: every input bit moves every output bit (wrapping uint64 arithmetic)."""
    x = x ^ (x >> _U64(30))
    x = x * _U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U64(27))
    x = x * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


def shingle_hashes(normalised: Sequence[str], width: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """For already normalised texts: every word ``width``-shingle's 64-bit hash, concatenated text by
    text, and each text's offset into it (``len(normalised) + 1`` offsets). A text of fewer words than ``width``
    has one shingle made of the words it has; a text without words has none. Repeats are kept."""
    if width != 3:
        raise ValueError("shingles are word 3-shingles")
    buffer = " ".join(normalised)
    codes = np.frombuffer(buffer.encode("utf-32-le"), dtype=np.uint32)
    text_starts = np.zeros(len(normalised), dtype=np.int64)
    if len(normalised) > 1:
        text_starts[1:] = np.cumsum([len(t) + 1 for t in normalised[:-1]])
    is_word = _word_table(codes)[codes] if len(codes) else np.zeros(0, dtype=bool)
    edges = np.diff(np.concatenate(([False], is_word, [False])).astype(np.int8))
    word_starts, word_ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    if not len(word_starts):
        return np.zeros(0, dtype=_U64), np.zeros(len(normalised) + 1, dtype=np.int64)
    with np.errstate(over="ignore"):
        powers, inverse = _powers(len(codes) + 1)
        prefix = np.zeros(len(codes) + 1, dtype=_U64)
        np.cumsum(codes.astype(_U64) * powers[: len(codes)], out=prefix[1:])
        words = _mix((prefix[word_ends] - prefix[word_starts]) * inverse[word_starts] + _U64(1))
        owner = np.searchsorted(text_starts, word_starts, side="right") - 1
        counts = np.bincount(owner, minlength=len(normalised))
        first_word = np.concatenate(([0], np.cumsum(counts)))
        # a shingle starts at each word with two more words of its text after it, or at a short text's first word
        shingle_counts = np.where(counts >= width, counts - width + 1, np.minimum(counts, 1))
        offsets = np.concatenate(([0], np.cumsum(shingle_counts))).astype(np.int64)
        starts = _shingle_starts(first_word, counts, shingle_counts, offsets)
        total = np.zeros(len(starts), dtype=_U64)
        length = np.minimum(counts, width)[np.repeat(np.arange(len(normalised)), shingle_counts)]
        for position in range(width):
            present = position < length
            index = np.where(present, starts + position, 0)
            total = total + np.where(present, words[index] * _K[position], _U64(0))
        hashes = _mix(total)
    return hashes, offsets


def _shingle_starts(first_word, counts, shingle_counts, offsets) -> np.ndarray:
    """The word index each shingle starts at."""
    text_of = np.repeat(np.arange(len(counts)), shingle_counts)
    return first_word[text_of] + (np.arange(offsets[-1]) - offsets[text_of])


def shingles(text: str, width: int = 3) -> set[int]:
    hashes, _ = shingle_hashes([normalise(text)], width)
    return set(hashes.tolist())


_VALUE_BITS = _U64(58)
_VALUE_MASK = _U64((1 << 58) - 1)
_EMPTY = np.iinfo(np.uint64).max
_DENSIFY_STEP = _U64(0x2545F4914F6CDD1D)


def _bin_minima(hashes: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """One-permutation MinHash: a shingle's 64-bit hash picks one of the 64 bins by its top 6 bits; each bin keeps
    the least of its shingles' other 58 bits (empty: the largest uint64)."""
    n = len(offsets) - 1
    minima = np.full(n * 64, _EMPTY, dtype=_U64)
    owner = np.repeat(np.arange(n, dtype=np.int64), np.diff(offsets))
    slot = owner * 64 + (hashes >> _VALUE_BITS).astype(np.int64)
    np.minimum.at(minima, slot, hashes & _VALUE_MASK)
    return minima.reshape(n, 64)


def _densify(minima: np.ndarray) -> np.ndarray:
    """An empty bin borrows the value of the nearest non-empty bin to its right (circularly), offset by the
    distance, so that two texts' signatures agree in a bin about as often as their shingle sets overlap (rotation
    densification, Shrivastava and Li 2014). A text without shingles keeps every bin empty."""
    result = minima.copy()
    filled = minima != _EMPTY
    pending = ~filled & filled.any(axis=1, keepdims=True)
    with np.errstate(over="ignore"):
        for distance in range(1, 64):
            if not pending.any():
                break
            donor = np.roll(minima, -distance, axis=1)
            takes = pending & np.roll(filled, -distance, axis=1)
            result[takes] = donor[takes] + _DENSIFY_STEP * _U64(distance)
            pending &= ~takes
    return result


def minhash(values: set[int]) -> np.ndarray:
    """The 64-value signature of one shingle set (what :func:`signatures` gives for it in a batch)."""
    hashes = np.fromiter(values, dtype=_U64, count=len(values))
    return signatures(hashes, np.array([0, len(values)], dtype=np.int64))[0][0]


def signatures(hashes: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each text's MinHash signature (``(texts, 64)`` uint64; one-permutation hashing, densified) and whether it
    has two or more distinct shingles (fewer: not signed, as too short to be a near-duplicate). Repeated shingles
    change nothing: a minimum over a multiset is the minimum over its set."""
    return _densify(_bin_minima(hashes, offsets)), _signed(hashes, offsets)


def _signed(hashes: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    sizes = np.diff(offsets)
    signed = np.zeros(len(sizes), dtype=bool)
    nonempty = np.flatnonzero(sizes > 0)
    if len(nonempty):
        starts = offsets[nonempty]
        signed[nonempty] = np.minimum.reduceat(hashes, starts) != np.maximum.reduceat(hashes, starts)
    return signed


def signatures_and_sketches(hashes: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`signatures` and each text's sketch for :func:`jaccard_upper_bounds`: ``(texts, 66)`` uint16, the low
    16 bits of its 64 bin minima before densification, then its shingle count (repeats included) as two uint16s."""
    minima = _bin_minima(hashes, offsets)
    sketch = np.empty((len(minima), 66), dtype="<u2")
    sketch[:, :64] = (minima & _U64(0xFFFF)).astype("<u2")
    counts = np.minimum(np.diff(offsets), 0xFFFFFFFF).astype("<u4")
    sketch[:, 64:] = counts.view("<u2").reshape(-1, 2) if len(counts) else np.zeros((0, 2), dtype="<u2")
    return _densify(minima), _signed(hashes, offsets), sketch


def jaccard_upper_bounds(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """For pairs of sketches (rows of :func:`signatures_and_sketches`' third array, or of a narrower copy: the 64
    minima truncated further, then the count's 4 bytes, as the store reads them): a number the Jaccard similarity
    of the two shingle sets cannot exceed, exactly (not an estimate). Where two texts' minima differ in a bin, the
    smaller one's shingle is in one set and not the other, and bins are disjoint, so the d bins whose (truncated)
    minima differ witness d distinct elements of the symmetric difference: |A xor B| = S - 2|A & B| >= d with
    S = |A| + |B| (at most the shingle counts with repeats), hence J = I / (S - I) <= (S - d) / (S + d). Equal
    truncations count as agreeing, which only loosens the bound."""
    differ = np.count_nonzero(first[:, :64] != second[:, :64], axis=1)
    total = _counts(first) + _counts(second)
    return np.where(total + differ > 0, (total - differ) / np.maximum(total + differ, 1), 0.0)


def _counts(sketch: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(sketch[:, 64:]).view("<u4")[:, 0].astype(np.int64)


def band_keys(signature_rows: np.ndarray) -> np.ndarray:
    """``(texts, BANDS)`` int64 LSH keys: band b's four MinHash values and b mixed into one 64-bit key. Two texts
    are near-duplicate candidates when they share a key in some band (a 64-bit key collision only adds a candidate
    that the Jaccard check then judges, in the reference and the store alike)."""
    keys = np.empty((len(signature_rows), BANDS), dtype=_U64)
    with np.errstate(over="ignore"):
        for band in range(BANDS):
            h = np.full(len(signature_rows), _U64(band + 1), dtype=_U64)
            for row in range(ROWS):
                h = _mix(h * _K[0] + signature_rows[:, band * ROWS + row])
            keys[:, band] = h
    return keys.view(np.int64)


SLICE_CHARACTERS = 1_000_000  # characters hashed at once: numpy holds ~60 bytes a character while it works


def shingle_sets(normalised: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each already normalised text's shingle set as a sorted run of distinct hashes, concatenated, and each text's
    offset into it: :func:`shingles` of every text, in numpy passes of about :data:`SLICE_CHARACTERS`."""
    runs, counts, start, characters = [], [np.zeros(1, dtype=np.int64)], 0, 0
    for end, text in enumerate(normalised, start=1):
        characters += len(text)
        if characters >= SLICE_CHARACTERS or end == len(normalised):
            hashes, sizes = _distinct_shingles(normalised[start:end])
            runs.append(hashes)
            counts.append(sizes)
            start, characters = end, 0
    if not runs:
        return np.zeros(0, dtype=_U64), np.zeros(1, dtype=np.int64)
    return np.concatenate(runs), np.cumsum(np.concatenate(counts)).astype(np.int64)


def _distinct_shingles(normalised: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(the texts' distinct shingle hashes, sorted text by text; how many each text has)."""
    hashes, offsets = shingle_hashes(normalised)
    owner = np.repeat(np.arange(len(normalised), dtype=np.int64), np.diff(offsets))
    order = np.lexsort((hashes, owner))
    hashes, owner = hashes[order], owner[order]
    keep = np.ones(len(hashes), dtype=bool)
    keep[1:] = (hashes[1:] != hashes[:-1]) | (owner[1:] != owner[:-1])
    return hashes[keep], np.bincount(owner[keep], minlength=len(normalised)).astype(np.int64)


def _members(offsets: np.ndarray, texts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(for each element of each listed text's run: its position in the list, its index into the hashes)."""
    sizes = offsets[texts + 1] - offsets[texts]
    which = np.repeat(np.arange(len(texts), dtype=np.int64), sizes)
    starts = np.repeat(offsets[texts] - np.concatenate(([0], np.cumsum(sizes)[:-1])), sizes)
    return which, starts + np.arange(len(which), dtype=np.int64)


def pair_jaccards(sets: tuple[np.ndarray, np.ndarray], first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """The Jaccard similarity of each pair of shingle sets (indices into :func:`shingle_sets`' texts), as
    :func:`jaccard` gives it (same float: intersection over union of the counts). Every element of both sets of
    every pair, keyed ``pair * distinct + rank of the hash``, is sorted once: an element of the intersection is a
    key met twice (each set holds a hash once). Each side's keys are already ascending (pairs in order, a set's
    hashes sorted), so a stable sort (timsort) merges the two runs in linear time."""
    hashes, offsets = sets
    if not len(first):
        return np.zeros(0)
    distinct, rank = np.unique(hashes, return_inverse=True)
    keys = []
    for side in (first, second):
        pair, element = _members(offsets, np.asarray(side, dtype=np.int64))
        keys.append(pair * len(distinct) + rank[element])
    merged = np.sort(np.concatenate(keys), kind="stable")
    twice = merged[1:][merged[1:] == merged[:-1]] // len(distinct)
    both = np.bincount(twice, minlength=len(first))
    either = np.diff(offsets)[first] + np.diff(offsets)[second] - both
    return np.where(either > 0, both / np.maximum(either, 1), 0.0)


def jaccard(a: set[int], b: set[int]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


def duplicate_groups(
    chunk_ids: Sequence[str], texts: Sequence[str], threshold: float = THRESHOLD
) -> list[tuple[str, list[str]]]:
    """``[(kind, [chunk ids])]`` for every group of two or more; kind is "exact" when all members normalise equal.
    The whole-corpus reference: the store's incremental index gives the same groups."""
    sets = DisjointSets(len(texts))
    find, union = sets.find, sets.union
    digests = [normalised_sha256(t) for t in texts]
    first_of: dict[str, int] = {}
    for i, digest in enumerate(digests):
        if digest in first_of:
            union(i, first_of[digest])
        else:
            first_of[digest] = i
    shingle_sets = [shingles(t) for t in texts]
    buckets: dict[int, list[int]] = defaultdict(list)
    for i in first_of.values():  # one representative per exact group is enough
        if len(shingle_sets[i]) < 2:
            continue
        for key in band_keys(minhash(shingle_sets[i])[None, :])[0].tolist():
            buckets[key].append(i)
    checked: set[tuple[int, int]] = set()
    for members in buckets.values():
        for a_index, a in enumerate(members):
            for b in members[a_index + 1 :]:
                pair = (min(a, b), max(a, b))
                if pair in checked or find(a) == find(b):
                    continue
                checked.add(pair)
                if jaccard(shingle_sets[a], shingle_sets[b]) >= threshold:
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
