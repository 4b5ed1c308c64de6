"""The workspace's chunks for an app to index (``export-chunks``): each chunk's id, its document, the document's
title and the chunk's text, as JSON lines or CSV.

An app that indexes these texts and keeps each chunk's id with it (LangChain: ``Document(page_content=text,
metadata={"chunk_id": chunk_id}, id=chunk_id)``) retrieves by the ids the test set labels: its logs import by id
and its retriever scores through the adapters with no text matching.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable
from typing import TextIO

CHUNK_FORMATS = ("jsonl", "csv")
COLUMNS = ("chunk_id", "doc_id", "title", "text")


def write_chunks(rows: Iterable[tuple[str, str, str, str]], handle: TextIO, format: str = "jsonl") -> int:
    """Write (chunk_id, doc_id, title, text) rows to ``handle`` in ``format``; how many were written."""
    if format not in CHUNK_FORMATS:
        raise ValueError(f"unknown chunks format {format!r}: one of {', '.join(CHUNK_FORMATS)}")
    count = 0
    writer = csv.writer(handle, lineterminator="\n") if format == "csv" else None
    if writer is not None:
        writer.writerow(COLUMNS)
    for row in rows:
        if writer is not None:
            writer.writerow(row)
        else:
            handle.write(json.dumps(dict(zip(COLUMNS, row)), ensure_ascii=False) + "\n")
        count += 1
    return count
