"""The local engine gives every batch's records in order, byte for byte what ``chunk_and_sign`` gives in this process,
whether it works in a worker process (several batches) or not (one batch)."""

from __future__ import annotations

from testset_builder.config import ChunkingConfig
from testset_builder.corpus.batches import chunk_and_sign, local_engine

CONFIG = ChunkingConfig(size=120, overlap=12)


def batch(n: int) -> list[dict]:
    return [
        {"doc_id": f"b{n}/d{i}", "text": f"Batch {n} document {i} is about pooling depth and recall. " * (i + 2),
         "title": "", "source": "", "metadata": "{}"}
        for i in range(4)
    ]  # fmt: skip


def test_several_batches_come_back_in_order_as_this_process_computes_them():
    batches = [batch(n) for n in range(5)]
    assert list(local_engine(iter(batches), CONFIG)) == [chunk_and_sign(b, CONFIG) for b in batches]


def test_one_batch_and_no_batch_are_done_in_this_process():
    assert list(local_engine([batch(0)], CONFIG)) == [chunk_and_sign(batch(0), CONFIG)]
    assert list(local_engine([], CONFIG)) == []


def test_a_failure_in_the_worker_reaches_the_caller():
    import pytest

    broken = [{"doc_id": "x", "text": 3, "title": "", "source": "", "metadata": "{}"}]
    with pytest.raises(Exception):  # noqa: B017 - whatever the worker raised, re-raised here
        list(local_engine([batch(0), broken, batch(1)], CONFIG))
