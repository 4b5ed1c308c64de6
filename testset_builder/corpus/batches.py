"""The corpus stage's per-batch functions: plain records in, plain records out, no store, no randomness.

They are what an ingest engine runs on each batch of documents: in-process (:func:`local_engine`), or as Ray Data
``map_batches`` for ``chunk --engine ray``; both must give the same records byte for byte, so these are module-level
(picklable) and deterministic, and their records are dicts of str, int and bytes.

Record shapes:

- document record (:func:`document_record`): ``doc_id`` str, ``text`` str, ``title`` str, ``source`` str,
  ``metadata`` str (JSON, keys sorted).
- chunk record (:func:`chunk_batch`): ``chunk_id`` str, ``doc_id`` str, ``text`` str, ``start`` int, ``end`` int
  (``document.text[start:end] == text``), ``metadata`` str (JSON, keys sorted), ``text_sha256`` str (hex sha256 of
  the text's UTF-8), ``boilerplate`` str (why the chunk is page furniture, :func:`~.boilerplate.chunk_reason`; ''
  for content).
- signature record (:func:`signature_batch`): ``chunk_id`` str, ``normalised_sha256`` str (hex sha256 of the
  normalised text: equal for exact duplicates), ``band_keys`` bytes (the 16 LSH keys (:data:`~.dedup.BANDS`) as
  little-endian int64, 8 bytes each; empty when the chunk has fewer than two distinct shingles and so takes no part
  in near-duplicate detection), ``sketch`` bytes (:func:`~.dedup.signatures_and_sketches`: 64 truncated bin
  minima and the shingle count as 66 little-endian uint16, 132 bytes; empty when unsigned): what lets a first load
  rule out most candidate pairs without computing their Jaccard similarity.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import multiprocessing
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

from ..config import ChunkingConfig
from ..records import Document
from .boilerplate import FURNITURE_KEY, chunk_reason
from .chunkers import chunk_metadata, chunk_spans
from .dedup import band_keys, normalise, shingle_hashes, signatures_and_sketches

Record = dict[str, Any]
ChunkedBatch = tuple[list[Record], list[Record], list[Record]]
"""What an engine yields per batch: (document records, their chunk records, those chunks' signature records)."""
Engine = Callable[[Iterable[list[Record]], ChunkingConfig], Iterator[ChunkedBatch]]
"""An ingest engine: document-record batches in, each batch with its chunks and signatures out, in order."""


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def document_record(document: Document) -> Record:
    return {
        "doc_id": document.doc_id,
        "text": document.text,
        "title": document.title,
        "source": document.source,
        "metadata": _json(document.metadata) if document.metadata else "{}",  # as json.dumps gives an empty dict
    }


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chunk_batch(documents: list[Record], config: ChunkingConfig) -> list[Record]:
    """The chunk records of a batch of document records, document by document, each document's in order: the
    records of :func:`~.chunkers.chunk_document`'s chunks, built from the spans without a validated
    :class:`~..records.Chunk` each (a span is its text by construction; at 1.6M chunks the models and
    their metadata's ``json.dumps`` were a seventh of the chunking worker's time)."""
    records = []
    metadata = _metadata_json(config)
    for document in documents:
        doc_id, text = document["doc_id"], document["text"]
        furniture = furniture_spans(document["metadata"])
        for index, (chunk_id, start, end, extra) in enumerate(chunk_spans(doc_id, text, config)):
            piece = text[start:end]
            records.append(
                {
                    "chunk_id": chunk_id,
                    "doc_id": doc_id,
                    "text": piece,
                    "start": start,
                    "end": end,
                    "metadata": metadata(index, extra),
                    "text_sha256": text_sha256(piece),
                    "boilerplate": chunk_reason(piece, start, end, furniture),
                }
            )
    return records


def furniture_spans(metadata: str) -> list[list[int]]:
    """The furniture spans a document record's metadata JSON lists (none for most documents: parsed only when the
    key is there)."""
    if f'"{FURNITURE_KEY}"' not in metadata:
        return []
    spans = json.loads(metadata).get(FURNITURE_KEY)
    return spans if isinstance(spans, list) else []


def _metadata_json(config: ChunkingConfig) -> Callable[[int, dict], str]:
    """The metadata JSON of a chunk by its index and extra metadata: :func:`_json` of
    :func:`~.chunkers.chunk_metadata`, the same text, made by formatting the one part that varies into a template
    kept per extra metadata (a Markdown section's chunks share their heading path; most documents have none)."""
    if config.chunker == "prechunked":  # one chunk a document, index 0
        template = _json(chunk_metadata(config, 0, {}))
        return lambda index, extra: template
    templates: dict[tuple, list[str]] = {}

    def metadata(index: int, extra: dict) -> str:
        key = _template_key(extra)
        if key is None:
            return _json(chunk_metadata(config, index, extra))
        if (template := templates.get(key)) is None:
            # -1: an index no chunk has; a string's quotes are escaped in JSON, so only the key matches
            template = templates[key] = _json(chunk_metadata(config, -1, extra)).split('"index": -1', 1)
        return f'{template[0]}"index": {index}{template[1]}'

    return metadata


def _template_key(extra: dict) -> tuple | None:
    """A key for the metadata template of a chunk with ``extra`` metadata: none, or a heading path of strings;
    None (no template) for any other."""
    if not extra:
        return ()
    headings = extra.get("headings")
    if len(extra) == 1 and isinstance(headings, list) and all(type(h) is str for h in headings):
        return ("headings", *headings)
    return None


SIGNATURE_SLICE = 250_000  # characters signed at once: numpy holds ~60 bytes a character while it works (15 MB)


def signature_batch(chunks: list[Record]) -> list[Record]:
    """The signature record of each chunk record (needs ``chunk_id`` and ``text``), in order. Signed in slices of
    about :data:`SIGNATURE_SLICE` characters (a chunk's record does not depend on its neighbours)."""
    records, start, characters = [], 0, 0
    for end, chunk in enumerate(chunks, start=1):
        characters += len(chunk["text"])
        if characters >= SIGNATURE_SLICE or end == len(chunks):
            records.extend(_signature_slice(chunks[start:end]))
            start, characters = end, 0
    return records


def _signature_slice(chunks: list[Record]) -> list[Record]:
    normalised = [normalise(c["text"]) for c in chunks]
    hashes, offsets = shingle_hashes(normalised)
    minima, signed, sketches = signatures_and_sketches(hashes, offsets)
    keys = band_keys(minima).astype("<i8")
    return [
        {
            "chunk_id": chunk["chunk_id"],
            "normalised_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "band_keys": keys[i].tobytes() if signed[i] else b"",
            "sketch": sketches[i].tobytes() if signed[i] else b"",
        }
        for i, (chunk, text) in enumerate(zip(chunks, normalised, strict=True))
    ]


def chunk_and_sign(documents: list[Record], config: ChunkingConfig) -> ChunkedBatch:
    """One batch through both functions: what every engine computes per batch."""
    chunks = chunk_batch(documents, config)
    return documents, chunks, signature_batch(chunks)


def local_engine(batches: Iterable[list[Record]], config: ChunkingConfig) -> Iterator[ChunkedBatch]:
    """The local engine: each batch in turn, in order. With two or more batches and two or more cores, batches are
    chunked and signed in :data:`WORKERS` worker processes while this one writes the previous batch (what it does
    between yields): a pipeline of at most :data:`IN_FLIGHT` batches, so memory stays bounded. One batch (an
    incremental change) is done in this process: starting a worker would cost more than it saves."""
    stream = iter(batches)
    first = next(stream, None)
    if first is None:
        return
    second = next(stream, None)
    if second is None or (os.cpu_count() or 1) < 2:
        yield chunk_and_sign(first, config)
        if second is not None:
            yield chunk_and_sign(second, config)
            for documents in stream:
                yield chunk_and_sign(documents, config)
        return
    yield from _pipelined(itertools.chain([first, second], stream), config)


WORKERS = 2
"""Chunking processes beside the writing one: chunking and signing take more CPU than writing, so one worker would
keep the writer waiting. A machine with one core gets the single-process path."""
IN_FLIGHT = WORKERS + 1  # batches submitted to the workers and not yet written (each ~8 MB of text)
_START_METHOD = "fork" if sys.platform == "linux" else "spawn"
"""fork on Linux: spawn (and forkserver) run the caller's main script again in the worker unless it is guarded by
``if __name__ == "__main__"``, which a library cannot require of its callers. The forked worker only chunks and
signs: it never touches the parent's SQLite connection or progress bar, and it leaves by ``os._exit`` (as
multiprocessing's workers do), so nothing of the parent's is closed or flushed twice. macOS and Windows spawn."""


def _exit_with(parent: int) -> None:
    """In the worker: end when the parent process is gone (a SIGKILLed ingest would otherwise leave the worker
    waiting forever on a queue whose write end it holds itself)."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _pipelined(batches: Iterator[list[Record]], config: ChunkingConfig) -> Iterator[ChunkedBatch]:
    context = multiprocessing.get_context(_START_METHOD)
    with ProcessPoolExecutor(WORKERS, mp_context=context, initializer=_exit_with, initargs=(os.getpid(),)) as pool:
        waiting: deque[tuple[list[Record], Future]] = deque()
        for documents in batches:
            waiting.append((documents, pool.submit(_chunked_and_signed, documents, config)))
            if len(waiting) >= IN_FLIGHT:
                documents, future = waiting.popleft()
                yield documents, *future.result()
        while waiting:
            documents, future = waiting.popleft()
            yield documents, *future.result()


def _chunked_and_signed(documents: list[Record], config: ChunkingConfig) -> tuple[list[Record], list[Record]]:
    """:func:`chunk_and_sign` in a worker, which need not send the documents back: the writer has them."""
    _, chunks, signatures = chunk_and_sign(documents, config)
    return chunks, signatures
