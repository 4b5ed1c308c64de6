"""Hashes: text normalised as duplicates are compared and its sha256 (:func:`normalise`), the sha256 of a file,
read in blocks (:func:`file_sha256`); and vectorised 64-bit hashes of Arrow string
columns, read straight from Arrow's buffers.

Arrow's own hashing (``dictionary_encode``, ``group_by``) takes seconds on ten million short ids; reading each
string as little-endian 8-byte words through an unaligned numpy view and mixing them costs a few passes of numpy
arithmetic. Strings of up to 8 bytes and equal length never collide (the mix is a bijection of the word). Hashes
only *find candidates*: callers confirm every match on the strings themselves, so a collision can cost time but
never change a result.
"""

from __future__ import annotations

import hashlib
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # imported where a function needs it: hashing text (every ingest) needs no Arrow
    import pyarrow as pa


def normalise(text: str) -> str:
    """Text as duplicates and query texts are compared: Unicode NFKC, case folded, whitespace runs as one space (and
    none at either end). A text whose only whitespace is single spaces (U+0020 is the one whitespace character
    ``str.isprintable`` accepts) needs only its ends stripped: most chunks, which then make no list of their words."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    if folded.isprintable() and "  " not in folded:
        return folded.strip()
    return " ".join(folded.split())


def normalised_sha256(text: str) -> str:
    """The exact-duplicate key: the sha256 of the normalised text."""
    return hashlib.sha256(normalise(text).encode()).hexdigest()


def file_sha256(path: str | Path, block: int = 1 << 22) -> str:
    """The sha256 of a file's bytes, read a block at a time (memory stays flat whatever its size)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for chunk in iter(lambda: handle.read(block), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fold_of(key: str, folds: int) -> int:
    """A key's fold among ``folds``, from the key alone (its sha256): stable across runs, processes and machines, so
    cross-fitting by query gives a rerun the same folds, and two modules that cross-fit agree on them."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:4], "big") % folds


_MUL_1 = np.uint64(0x9E3779B97F4A7C15)
_MUL_2 = np.uint64(0xBF58476D1CE4E5B9)
_MUL_3 = np.uint64(0x94D049BB133111EB)
_WORD_MASKS = np.array([(1 << (8 * i)) - 1 for i in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


def mix64(values: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, in place on a fresh uint64 array: a bijection that spreads every input bit."""
    values ^= values >> np.uint64(30)
    values *= _MUL_2
    values ^= values >> np.uint64(27)
    values *= _MUL_3
    values ^= values >> np.uint64(31)
    return values


def _words_at(data: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """The 8 bytes at each start offset of ``data``, as little-endian uint64 (zero past the end of the data)."""
    words = np.zeros(len(starts), dtype=np.uint64)
    if len(data) >= 8:
        view = np.ndarray(shape=(len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))
        inside = starts <= len(data) - 8
        if inside.all():
            return view[starts]
        words[inside] = view[starts[inside]]
    else:
        inside = np.zeros(len(starts), dtype=bool)
    tail = np.concatenate((data[-8:] if len(data) >= 8 else data, np.zeros(8, dtype=np.uint8)))
    tail_base = max(len(data) - 8, 0)
    for row in np.flatnonzero(~inside):
        local = int(starts[row]) - tail_base
        words[row] = np.frombuffer(tail[local : local + 8].tobytes(), dtype="<u8")[0]
    return words


def string_buffers(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Zero-copy views of a string (or binary) array: its ``len + 1`` offsets, and its data bytes up to the last
    offset. String i is ``data[offsets[i]:offsets[i + 1]]``; the bytes from ``offsets[0]`` on are all strings'."""
    import pyarrow as pa

    offset_type = np.int64 if pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type) else np.int32
    _, offsets_buffer, data_buffer = array.buffers()
    if offsets_buffer is None:  # an empty array may have no buffers
        return np.zeros(1, dtype=offset_type), np.zeros(0, dtype=np.uint8)
    offsets = np.frombuffer(offsets_buffer, dtype=offset_type)[array.offset : array.offset + len(array) + 1]
    data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, dtype=np.uint8)
    return offsets, data[: int(offsets[-1])]


def _array_hash(array: pa.Array) -> np.ndarray:
    n = len(array)
    if n == 0:
        return np.empty(0, dtype=np.uint64)
    if array.null_count:
        raise ValueError("cannot hash a column with missing values")
    offsets, data = string_buffers(array)
    offsets = offsets.astype(np.int64)
    starts, lengths = offsets[:-1], np.diff(offsets)
    digest = _words_at(data, starts)
    digest &= _WORD_MASKS[np.minimum(lengths, 8)]
    digest ^= lengths.astype(np.uint64) * _MUL_1
    digest *= _MUL_2
    digest ^= digest >> np.uint64(29)
    for word_index in range(1, int(-(-lengths.max() // 8))):
        longer = np.flatnonzero(lengths > 8 * word_index)
        word = _words_at(data, starts[longer] + 8 * word_index)
        word &= _WORD_MASKS[np.minimum(lengths[longer] - 8 * word_index, 8)]
        digest[longer] = mix64(digest[longer] ^ word)
    return digest


def string_hash64(column: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """One uint64 per string; equal strings hash equal, distinct strings collide with probability ~2^-64."""
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks == 0:
            return np.empty(0, dtype=np.uint64)
        return np.concatenate([_array_hash(chunk) for chunk in column.chunks])
    return _array_hash(column)


def pair_key64(group_codes: np.ndarray, string_hashes: np.ndarray) -> np.ndarray:
    """A candidate key for (group, string) pairs: equal pairs give equal keys."""
    keys = group_codes.astype(np.uint64)
    keys *= _MUL_3
    keys += string_hashes
    return keys
