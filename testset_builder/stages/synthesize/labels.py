"""Storing accepted questions with their labels: each source chunk grade 2 (``synthetic-source``, final), and each
live duplicate twin of a source too (an exact or near copy answers the question as well).

When the generator quoted its evidence (the chat prompt asks for a verbatim quote), the quote is looked for in the
source chunk's text (verbatim, then with whitespace runs as one space) and the source label records where it lies
in the document: what ``remap`` projects onto another chunking. A quote found in no source is not evidence; the
label then stands on the chunk's own span."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ...records import Chunk, Judgment, JudgmentSource, JudgmentStatus, Query, Span
from ...spans import locate
from ...store import rows
from ...store.workspace import Workspace
from .generation import Slot


@dataclass
class StoredQuestions:
    made: int = 0
    already_made: int = 0
    source_labels: int = 0
    twin_labels: int = 0


def evidence_span(quote: str | None, chunk: Chunk) -> Span | None:
    """Where ``quote`` lies in the document, found inside ``chunk``'s text; None without a quote or when the chunk
    does not hold it."""
    found = locate(quote, chunk.text) if quote else None
    if found is None:
        return None
    start, end = found
    return Span(doc_id=chunk.doc_id, start=chunk.start + start, end=chunk.start + end, text=chunk.text[start:end])


def source_labels(
    accepted: list[tuple[Slot, Query]],
    duplicates: dict[str, tuple[str, str]],
    chunks: dict[str, Chunk] | None = None,
) -> tuple[list[Judgment], int]:
    """The grade-2 labels of the accepted questions, and how many of them label a duplicate twin. ``chunks`` (the
    source chunks by id) place each question's evidence quote on its source's label."""
    chunks = chunks or {}
    members: dict[str, list[tuple[str, str]]] = {}
    for chunk_id, (group, kind) in duplicates.items():
        members.setdefault(group, []).append((chunk_id, kind))
    labels, twins = [], 0
    for slot, query in accepted:
        labelled = set()
        for source in slot.sources:
            group = duplicates.get(source.chunk_id, (None, None))[0]
            targets = [(source.chunk_id, "source chunk")] + [
                (c, f"{kind} duplicate of the source chunk {source.chunk_id}")
                for c, kind in sorted(members.get(group, []))
                if c != source.chunk_id
            ]
            for chunk_id, why in targets:
                if chunk_id in labelled:
                    continue
                labelled.add(chunk_id)
                twins += why != "source chunk"
                chunk = chunks.get(chunk_id) if why == "source chunk" else None
                labels.append(
                    Judgment(
                        judgment_id="src-"
                        + hashlib.sha256(f"{query.query_id}\x00{chunk_id}".encode()).hexdigest()[:24],
                        query_id=query.query_id,
                        chunk_id=chunk_id,
                        grade=2,
                        source=JudgmentSource.synthetic_source,
                        status=JudgmentStatus.final,
                        rationale=why,
                        lineage=query.lineage,
                        evidence=evidence_span(slot.evidence, chunk) if chunk else None,
                    )
                )
    return labels, twins


def store_questions(
    workspace: Workspace, accepted: list[tuple[Slot, Query]], duplicates: dict[str, tuple[str, str]]
) -> StoredQuestions:
    """Questions and labels in one transaction; questions and labels already stored count as already made."""
    quoted = {source.chunk_id for slot, _ in accepted if slot.evidence for source in slot.sources}
    chunks = {chunk_id: rows.get_chunk(workspace.db, chunk_id) for chunk_id in sorted(quoted)}
    labels, twins = source_labels(accepted, duplicates, chunks)
    stored = StoredQuestions(source_labels=len(labels) - twins, twin_labels=twins)
    with workspace.transaction() as db:
        stored.already_made = len(rows.existing_query_ids(db, [q.query_id for _, q in accepted]))
        stored.made = len(accepted) - stored.already_made
        rows.put_queries(db, [q for _, q in accepted])
        rows.add_judgments(db, labels)
    return stored
