"""The Ray embedding engine of ``index --engine ray``: chunk embeddings encoded by Ray Data actors.

It is an :data:`~.dense.EncodeBatches` like :func:`~.dense.encode_in_process`: (chunk ids, texts) batches in, one
float32 array per batch out, in the order given, so :meth:`~.dense.DenseIndex.for_corpus` writes the same float16 file.
Each batch is encoded as one call to the same :func:`~.dense.encode` the in-process engine makes (a batch's make-up
decides the padding, and so the last bits of its vectors), on an actor that loaded the model once; this module only
moves texts to the actors and vectors back.

Texts cross Ray pickled, one row per batch, tagged with the batch's place; the vectors come back as float32 bytes
and are put back in order whatever order the actors finished in. The input is taken a window of batches at a time
(one Ray dataset, and one pool of actors, each), so the driver never holds the corpus's texts or vectors whole.

An exception while encoding is caught on the actor and sent back naming the batch's first chunk; the driver raises
:class:`~testset_builder.errors.EngineError`, as it does when an actor dies. Ray's session and the reachability check
are the chunk engine's (:mod:`testset_builder.corpus.ray_engine`).
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from ..corpus.ray_engine import check_reachable, first_line, import_ray, ray_session, windows
from ..errors import EngineError
from .dense import Batch, EncodeBatches, encode, encoder

WINDOW_TEXTS = 50_000  # texts per Ray dataset: the driver holds one window's texts and float32 vectors (~80 MB)

# the rows Ray moves back: the batch's place, what failed (empty when nothing did), its vectors' width and bytes
VECTOR_ROWS = pa.schema(
    [("batch", pa.int64()), ("error", pa.string()), ("dimensions", pa.int64()), ("vectors", pa.binary())]
)

EncodeFunction = Callable[[Sequence[str], str], np.ndarray]


def ray_encoder(address: str | None = None, *, encode_texts: EncodeFunction = encode) -> EncodeBatches:
    """An embedding engine on Ray: a private local instance when ``address`` is None, else the cluster at
    ``address``. ``encode_texts`` is what an actor calls on each batch's texts (tests plant a failing one). Raises
    :class:`EngineError` at once when Ray Data is not installed or nothing answers at ``address``; Ray itself is
    started only when there are texts to encode."""
    ray = import_ray()
    if address:
        check_reachable(address)

    def encode_batches(batches: Iterable[Batch], model: str) -> Iterator[np.ndarray]:
        with ray_session(ray, address):
            for window in windows(batches, WINDOW_TEXTS):
                yield from encode_window(ray, window, model, encode_texts)

    return encode_batches


def encode_window(ray, window: list[Batch], model: str, encode_texts: EncodeFunction) -> list[np.ndarray]:
    """One window's batches encoded by a pool of actors (one CPU each): their vectors in order, or an
    :class:`EngineError`."""
    rows = [{"batch": b, "record": pickle.dumps(batch)} for b, batch in enumerate(window) if batch[1]]
    if not rows:
        return [np.zeros((0, 0), dtype=np.float32) for _ in window]
    actors = max(1, min(len(rows), int(ray.cluster_resources().get("CPU", 1))))
    dataset = ray.data.from_items(rows, override_num_blocks=len(rows))  # a block per batch: a task per batch
    dataset.context.enable_progress_bars = False
    encoded = map_on_actors(ray, dataset, BatchEncoder, {"model": model, "encode_texts": encode_texts}, actors)
    try:
        tables = list(encoded.iter_batches(batch_format="pyarrow", batch_size=None))
    except ray.exceptions.RayError as error:  # an actor lost (out of memory, killed), or Ray itself failing
        ids = [chunk_id for chunk_ids, _ in window for chunk_id in chunk_ids]
        raise EngineError(
            f"the Ray engine failed while encoding {len(ids)} chunks ({ids[0]!r} to {ids[-1]!r}): {first_line(error)}"
        ) from None
    return in_order(window, [row for table in tables for row in table.to_pylist()])


def map_on_actors(ray, dataset, actor_class, arguments: dict, actors: int):
    """``dataset.map_batches`` through a pool of ``actors`` instances of ``actor_class`` (one CPU each), whole blocks
    of Arrow rows at a time. An actor that dies ends the run (Ray Data's default restarts it and retries its batch
    forever; an encoder dies of a batch too large for its memory, which a retry would not cure). Ray 2.60's warning
    that these options move is silenced for the reason :func:`~testset_builder.corpus.ray_engine.map_batches`
    gives."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ray_remote_args.* is deprecated")
        return dataset.map_batches(
            actor_class,
            fn_constructor_kwargs=arguments,
            compute=ray.data.ActorPoolStrategy(size=actors),
            num_cpus=1,
            batch_format="pyarrow",
            batch_size=None,
            max_restarts=0,
            max_task_retries=0,
        )


def in_order(window: list[Batch], results: list[dict]) -> list[np.ndarray]:
    """Each batch's vectors from the actors' rows in any order (an empty batch gets an empty array)."""
    failed = sorted((row["batch"], row["error"]) for row in results if row["error"])
    if failed:
        more = f" (and {len(failed) - 1} more failures)" if len(failed) > 1 else ""
        raise EngineError(f"the Ray engine failed: {failed[0][1]}{more}")
    by_batch = {row["batch"]: row for row in results}
    out = []
    for b, (chunk_ids, _) in enumerate(window):
        row = by_batch.get(b)
        if row is None:
            out.append(np.zeros((0, 0), dtype=np.float32))
            continue
        out.append(np.frombuffer(row["vectors"], dtype=np.float32).reshape(len(chunk_ids), row["dimensions"]))
    return out


class BatchEncoder:
    """On a Ray actor: the model loaded once, then each row's batch encoded as one call to ``encode_texts``, or a
    row naming the batch's first chunk when it fails."""

    def __init__(self, model: str, encode_texts: EncodeFunction) -> None:
        self.model, self.encode_texts = model, encode_texts
        encoder(model)  # seconds, once per actor rather than once per batch

    def __call__(self, table: pa.Table) -> pa.Table:
        out = []
        for row in table.to_pylist():
            chunk_ids, texts = pickle.loads(row["record"])
            try:
                vectors = np.ascontiguousarray(self.encode_texts(texts, self.model), dtype=np.float32)
            except Exception as error:
                failure = f"encoding {len(texts)} chunks from {chunk_ids[0]!r} failed: {type(error).__name__}: {error}"
                out.append({"batch": row["batch"], "error": failure, "dimensions": 0, "vectors": b""})
                continue
            out.append(
                {"batch": row["batch"], "error": "", "dimensions": vectors.shape[1], "vectors": vectors.tobytes()}
            )
        return pa.Table.from_pylist(out, schema=VECTOR_ROWS)
