"""The Ray engine of ``chunk --engine ray``: the corpus stage's per-batch functions run as Ray Data ``map_batches``.

It is an :data:`~.batches.Engine` like :func:`~.batches.local_engine`: document-record batches in, each batch with its
chunk and signature records out, in the order given, so ingest stores exactly what the in-process engine would. The
functions are the same ones (:func:`~.batches.chunk_batch`, :func:`~.batches.signature_batch`); this module only moves
records to Ray's workers and back.

Records cross Ray as pickled bytes in one Arrow column, tagged with their batch, position and rank: pickle gives back
the very str, int and bytes values the functions made (Arrow would re-type them), and the tags put them back in order
whatever order Ray finished its tasks in. The input is taken a window of batches at a time (one Ray dataset each), so
a streamed corpus is never held whole by the driver.

An exception in a batch function is caught on the worker and sent back as data naming the document (or chunks) and
the exception; the driver raises :class:`~testset_builder.errors.EngineError` before handing on anything of that
window. A task that Ray itself loses (a worker killed, the cluster gone) is an :class:`EngineError` too.

Ray is imported only when the engine is made (:func:`ray_engine`), and started when it runs. Locally it starts a
private Ray instance (``address="local"``, no dashboard, a modest object store) and stops it at the end; given an
address it joins that cluster, shipping this package to the workers, and leaves the cluster running. A Ray already
initialised in this process is used as it is (the address is then not used).
"""

from __future__ import annotations

import logging
import pickle
import socket
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from itertools import groupby
from typing import Any

import pyarrow as pa

from ..config import ChunkingConfig
from ..errors import EngineError
from .batches import ChunkedBatch, Engine, Record, chunk_batch, signature_batch

INSTALL_HINT = 'pip install "testset-builder[ray]"'
WINDOW_DOCUMENTS = 20_000  # documents per Ray dataset: the driver holds one window's records at a time
DOCUMENTS_PER_BLOCK = 256  # documents per Ray task: big enough that a task's overhead (milliseconds) is small
LOCAL_OBJECT_STORE_BYTES = 512 * 1024**2  # a window's records in flight; Ray spills to disk beyond it
CONNECT_TIMEOUT_S = 10.0  # a cluster's head answers at once; nothing answering is a wrong address or a firewall
TASK_RETRIES = 2  # a task on a worker that died is tried again (a preempted node), then reported

# the rows Ray moves: where a record belongs (input batch, document's position in it, rank among the document's
# chunks), what failed (empty when nothing did), and the pickled records
_TAGS = [("batch", pa.int64()), ("position", pa.int64()), ("ordinal", pa.int64()), ("error", pa.string())]
CHUNK_ROWS = pa.schema([*_TAGS, ("record", pa.binary())])
SIGNED_ROWS = pa.schema([*CHUNK_ROWS, ("signature", pa.binary())])

ChunkFunction = Callable[[list[Record], ChunkingConfig], list[Record]]


def import_ray():
    """The ``ray`` module with Ray Data, or an :class:`EngineError` saying which extra to install."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise EngineError(f"--engine ray needs Ray Data: {INSTALL_HINT}") from None
    return ray


def ray_engine(address: str | None = None, *, chunk: ChunkFunction = chunk_batch) -> Engine:
    """An ingest engine running on Ray: a private local instance when ``address`` is None, else the cluster at
    ``address`` (``ray://head:10001`` or ``head:6379``). ``chunk`` is the batch function chunking documents (tests
    plant a failing one). Raises :class:`EngineError` at once when Ray Data is not installed or nothing answers at
    ``address``."""
    ray = import_ray()
    if address:
        check_reachable(address)

    def engine(batches: Iterable[list[Record]], config: ChunkingConfig) -> Iterator[ChunkedBatch]:
        with ray_session(ray, address):
            for window in windows(batches, WINDOW_DOCUMENTS):
                yield from run_window(ray, window, config, chunk)

    return engine


@contextmanager
def ray_session(ray, address: str | None):
    """Ray for the engine's run: the one already initialised, else a local instance or the cluster at ``address``,
    shut down afterwards (a cluster keeps running; only this process's connection ends)."""
    if ray.is_initialized():
        yield
        return
    quiet = {"logging_level": logging.WARNING, "log_to_driver": False}
    try:
        if address:  # the workers get this package's files: its root module, loaded already as our parent
            package = sys.modules[__name__.partition(".")[0]]
            ray.init(address=address, runtime_env={"py_modules": [package]}, **quiet)
        else:
            ray.init(address="local", object_store_memory=LOCAL_OBJECT_STORE_BYTES, include_dashboard=False, **quiet)
    except (ConnectionError, RuntimeError, ValueError) as error:
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        raise EngineError(f"could not start {where}: {first_line(error)}") from None
    try:
        yield
    finally:
        ray.shutdown()


def check_reachable(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """An :class:`EngineError` at once when nothing answers at ``address`` (``ray.init`` would wait for minutes).
    An address without a port (``auto``) is left to Ray."""
    host, colon, port = address.removeprefix("ray://").rpartition(":")
    if not colon or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as error:
        raise EngineError(f"could not reach the Ray cluster at {address}: {error}") from None


def windows(batches: Iterable[list[Record]], documents: int) -> Iterator[list[list[Record]]]:
    """Consecutive input batches, grouped until a group holds at least ``documents`` documents."""
    window: list[list[Record]] = []
    held = 0
    for batch in batches:
        window.append(batch)
        held += len(batch)
        if held >= documents:
            yield window
            window, held = [], 0
    if window:
        yield window


def run_window(ray, window: list[list[Record]], config: ChunkingConfig, chunk: ChunkFunction) -> list[ChunkedBatch]:
    """One window through Ray: chunk, then sign; the batches back in their order, or an :class:`EngineError`."""
    rows = [
        {"batch": b, "position": p, "ordinal": 0, "error": "", "record": pickle.dumps(document)}
        for b, documents in enumerate(window)
        for p, document in enumerate(documents)
    ]
    if not rows:
        return [(documents, [], []) for documents in window]
    dataset = ray.data.from_items(rows, override_num_blocks=max(1, -(-len(rows) // DOCUMENTS_PER_BLOCK)))
    dataset.context.enable_progress_bars = False  # this dataset's own context: the process's stays as it was
    chunked = map_batches(dataset, chunk_task, fn_kwargs={"chunk": chunk, "config": config})
    signed = map_batches(chunked, sign_task)
    try:
        tables = list(signed.iter_batches(batch_format="pyarrow", batch_size=None))
    except ray.exceptions.RayError as error:  # a task lost more often than retried, or Ray itself failing
        held = [document["doc_id"] for documents in window for document in documents]
        raise EngineError(
            f"the Ray engine failed while chunking and signing {len(held)} documents ({held[0]!r} to {held[-1]!r}): "
            f"{first_line(error)}"
        ) from None
    results = [row for table in tables for row in table.to_pylist()]
    return regroup(window, results)


def map_batches(dataset, function, **options):
    """``dataset.map_batches(function)`` on whole blocks of Arrow rows, a lost task tried at most ``TASK_RETRIES``
    more times: Ray Data's default tries it forever, and a document that kills its worker must end the run. Ray
    2.60 warns that ``max_retries`` (a Ray remote argument) goes in 2.64 and offers no replacement yet, so the
    warning is silenced here and pyproject bounds Ray below 2.64."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ray_remote_args.* is deprecated")
        return dataset.map_batches(
            function, batch_format="pyarrow", batch_size=None, max_retries=TASK_RETRIES, **options
        )


def regroup(window: list[list[Record]], results: list[dict[str, Any]]) -> list[ChunkedBatch]:
    """The window's batches with their chunk and signature records, from Ray's rows in any order."""
    results.sort(key=lambda row: (row["batch"], row["position"], row["ordinal"]))
    failed = [row["error"] for row in results if row["error"]]
    if failed:
        more = f" (and {len(failed) - 1} more failures)" if len(failed) > 1 else ""
        raise EngineError(f"the Ray engine failed: {failed[0]}{more}")
    by_batch = {b: list(rows) for b, rows in groupby(results, key=lambda row: row["batch"])}
    return [
        (
            documents,
            [pickle.loads(row["record"]) for row in by_batch.get(b, [])],
            [pickle.loads(row["signature"]) for row in by_batch.get(b, [])],
        )
        for b, documents in enumerate(window)
    ]


def chunk_task(table: pa.Table, chunk: ChunkFunction, config: ChunkingConfig) -> pa.Table:
    """The chunk stage on a worker: each document's chunk records, ranked, or a row naming the document that
    failed."""
    out = []
    for row in table.to_pylist():
        document = pickle.loads(row["record"])
        tag = {"batch": row["batch"], "position": row["position"]}
        try:
            chunks = chunk([document], config)
        except Exception as error:
            failure = f"chunking document {document['doc_id']!r} failed: {type(error).__name__}: {error}"
            out.append({**tag, "ordinal": 0, "error": failure, "record": b""})
            continue
        out.extend({**tag, "ordinal": i, "error": "", "record": pickle.dumps(c)} for i, c in enumerate(chunks))
    return pa.Table.from_pylist(out, schema=CHUNK_ROWS)


def sign_task(table: pa.Table) -> pa.Table:
    """The signature stage on a worker: each chunk row gains its signature record (rows that failed pass through)."""
    rows = table.to_pylist()
    chunked = [row for row in rows if not row["error"]]
    records = [pickle.loads(row["record"]) for row in chunked]
    try:
        signatures = signature_batch(records) if records else []
    except Exception as error:
        failure = (
            f"signing {len(records)} chunks from {records[0]['chunk_id']!r} failed: {type(error).__name__}: {error}"
        )
        return pa.Table.from_pylist([{**chunked[0], "error": failure, "signature": b""}], schema=SIGNED_ROWS)
    signed = [{**row, "signature": pickle.dumps(s)} for row, s in zip(chunked, signatures, strict=True)]
    failed = [{**row, "signature": b""} for row in rows if row["error"]]
    return pa.Table.from_pylist(signed + failed, schema=SIGNED_ROWS)


def first_line(error: BaseException) -> str:
    """An exception's name and the first line of what it says (Ray's carry a worker's whole traceback)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__
