"""What the BM25 and dense indexes share: the cache key of an indexed corpus, and turning top-k arrays into a Run."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from ..tables import RUN_SCHEMA, Run


def corpus_key(settings: str, chunk_ids: Sequence[str], texts: Sequence[str]) -> str:
    """The cache key of an index: sha256 of its settings and of every (chunk id, text), in order."""
    digest = hashlib.sha256(f"{settings}\n".encode())
    for chunk_id, text in zip(chunk_ids, texts):
        digest.update(f"{chunk_id}\x00{text}\x01".encode())
    return digest.hexdigest()[:24]


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
            np.asarray(chunk_ids, dtype=object)[flat_positions].tolist(),
            pa.array(flat_scores),
        ],
        schema=RUN_SCHEMA,
    )
    return Run(table, name=name)
