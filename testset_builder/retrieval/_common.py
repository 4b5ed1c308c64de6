"""What the BM25 and dense indexes share: the corpus they index (ids, a fingerprint, texts read in batches), the
cache key of an index, and turning top-k arrays into a Run."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..errors import CorpusChangedError
from ..tables import RUN_SCHEMA, Run

BATCH = 10_000  # chunks read, tokenized or encoded at a time: bounded memory at any corpus size

Batches = Callable[[], Iterable[tuple[list[str], list[str]]]]


def _digest_update(digest, chunk_ids: Sequence[str], texts: Sequence[str]) -> None:
    digest.update("".join(f"{chunk_id}\x00{text}\x01" for chunk_id, text in zip(chunk_ids, texts)).encode())


@dataclass(frozen=True)
class Corpus:
    """The chunks an index covers: ids in index order, a fingerprint (sha256 of every id and text, in order) that
    changes whenever any of them does, texts read again in batches, and a lookup of some chunks' texts.

    A corpus larger than memory is never held whole: :meth:`streamed` reads it once for the ids and fingerprint,
    and an index that must be built reads it again with :meth:`text_batches`, which checks it still is the corpus
    the fingerprint was taken of (stages that build indexes hold the workspace, so it is, unless the database was
    changed behind the lock)."""

    chunk_ids: list[str]
    fingerprint: str
    read: Batches
    passages_of: Callable[[Sequence[str]], Mapping[str, str]]

    @classmethod
    def of(cls, chunk_ids: Sequence[str], texts: Sequence[str]) -> Corpus:
        """A corpus held in memory."""
        ids, texts = list(chunk_ids), list(texts)
        if len(ids) != len(texts):
            raise ValueError(f"{len(ids)} chunk ids for {len(texts)} texts")
        digest = hashlib.sha256()
        for start in range(0, len(ids), BATCH):
            _digest_update(digest, ids[start : start + BATCH], texts[start : start + BATCH])
        by_id = dict(zip(ids, texts))

        def read() -> Iterator[tuple[list[str], list[str]]]:
            for start in range(0, len(ids), BATCH):
                yield ids[start : start + BATCH], texts[start : start + BATCH]

        return cls(ids, digest.hexdigest(), read, lambda wanted: {c: by_id[c] for c in wanted if c in by_id})

    @classmethod
    def streamed(cls, read: Batches, passages_of: Callable[[Sequence[str]], Mapping[str, str]]) -> Corpus:
        """A corpus read in (ids, texts) batches by ``read`` (callable again for each pass), whose texts
        ``passages_of`` looks up by id."""
        ids: list[str] = []
        digest = hashlib.sha256()
        for batch_ids, texts in read():
            ids.extend(batch_ids)
            _digest_update(digest, batch_ids, texts)
        return cls(ids, digest.hexdigest(), read, passages_of)

    def text_batches(self) -> Iterator[list[str]]:
        """The texts in index order, in batches; raises when the corpus is no longer the one fingerprinted (the
        index being built from them must then be thrown away)."""
        digest, position = hashlib.sha256(), 0
        for batch_ids, texts in self.read():
            if batch_ids != self.chunk_ids[position : position + len(batch_ids)]:
                raise CorpusChangedError()
            position += len(batch_ids)
            _digest_update(digest, batch_ids, texts)
            yield texts
        if position != len(self.chunk_ids) or digest.hexdigest() != self.fingerprint:
            raise CorpusChangedError()

    def sample(self, size: int) -> list[str]:
        """``size`` texts spread evenly over the corpus (every ``len // size``-th from the first)."""
        step = max(1, len(self.chunk_ids) // size)
        ids = self.chunk_ids[::step][:size]
        found = self.passages_of(ids)
        return [found[c] for c in ids if c in found]


def corpus_key(settings: str, corpus: Corpus) -> str:
    """The cache key of an index: sha256 of its settings and of the corpus's fingerprint."""
    return hashlib.sha256(f"{settings}\n{corpus.fingerprint}".encode()).hexdigest()[:24]


def top_k_run(
    query_ids: Sequence[str],
    chunk_ids: Sequence[str],
    positions: np.ndarray,
    scores: np.ndarray,
    name: str,
    keep: np.ndarray | None = None,
) -> Run:
    """A Run from (queries x k) arrays of chunk positions and their scores; ``keep`` drops entries (e.g. score 0)."""
    rows = np.repeat(np.arange(len(query_ids)), positions.shape[1])
    flat_positions, flat_scores = positions.ravel(), scores.ravel().astype(np.float64)
    if keep is not None:
        keep = keep.ravel()
        rows, flat_positions, flat_scores = rows[keep], flat_positions[keep], flat_scores[keep]
    table = pa.table(
        [
            np.asarray(query_ids, dtype=object)[rows].tolist(),
            [chunk_ids[p] for p in flat_positions.tolist()],
            pa.array(flat_scores),
        ],
        schema=RUN_SCHEMA,
    )
    return Run(table, name=name)
