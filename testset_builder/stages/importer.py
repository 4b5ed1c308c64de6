"""Import a labelled set a team already has, so it can be extended: a BEIR folder, an MTEB-layout Hugging Face
dataset (a directory with the ``corpus``, ``queries`` and ``default`` configs, such as a testset-builder release),
or TREC qrels over chunks already in the workspace.

Documents become one chunk each and keep their ids (qrels name them); queries are stored as ``real``; each label
becomes a ``human`` judgment (reviewer ``import:<source>``, status ``final``), since somebody made it. Grades
outside 0-2 are clamped (and counted). Ids are derived from the source, so importing twice stores nothing twice.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..config import ChunkingConfig
from ..corpus.ingest import ingest
from ..corpus.loaders import LoadResult, load_beir
from ..errors import InputError
from ..export import read_qrels
from ..export.beir import read_beir_queries, read_beir_split
from ..export.hf import read_hf
from ..export.queries import read_queries
from ..labels.labelling import store_queries
from ..records import Document, Judgment, JudgmentSource, JudgmentStatus, Query, QueryOrigin
from ..store import rows
from ..store.workspace import Workspace


@dataclass
class ImportSummary:
    source: str
    kind: str
    documents: int = 0
    queries: int = 0
    new_queries: int = 0
    labels: int = 0
    new_labels: int = 0
    clamped_grades: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def detect_kind(source: Path) -> str:
    if source.is_dir() and (source / "corpus.jsonl").exists():
        return "beir"
    if source.is_dir() and ((source / "README.md").exists() or (source / "hf").is_dir()):
        return "hf"
    if source.is_file():
        return "trec"
    raise InputError(
        "cannot tell what to import: expected a BEIR folder (corpus.jsonl), an MTEB-layout dataset directory, or a "
        "qrels file",
        path=source,
    )


def import_labelled_set(
    workspace: Workspace, source: str | Path, queries_file: str | Path | None = None
) -> ImportSummary:
    """Import ``source`` (see the module docstring) into ``workspace``."""
    with workspace.exclusive("import"):
        return _import(workspace, Path(source), queries_file)


def _import(workspace: Workspace, source: Path, queries_file: str | Path | None) -> ImportSummary:
    kind = detect_kind(source)
    summary = ImportSummary(str(source), kind)
    if kind == "beir":
        loaded = load_beir(source, strict=True)
        texts = read_beir_queries(source / "queries.jsonl")
        labels = read_beir_split(source).to_dict()
    elif kind == "hf":
        corpus, texts, labels = read_hf(source)
        loaded = LoadResult(
            documents=[
                Document(doc_id=doc_id, text=d["text"], title=d["title"], source=source.name)
                for doc_id, d in corpus.items()
            ]
        )
    else:
        if queries_file is None:
            raise InputError("importing TREC qrels needs --queries FILE with the query texts", path=source)
        loaded, labels = None, read_qrels(source).to_dict()
        texts = {q.query_id: q.text for q in read_queries(queries_file).queries}
    if loaded is not None:
        ingest(workspace, loaded, ChunkingConfig(chunker="prechunked", size=1, overlap=0), [source])
        summary.documents = len(loaded.documents)
    known_chunks = set(rows.live_chunk_passages(workspace.db)[0])
    missing_chunks = sorted({c for chunks in labels.values() for c in chunks} - known_chunks)
    missing_queries = sorted(set(labels) - set(texts))
    if missing_chunks or missing_queries:
        shown = ", ".join(repr(i) for i in (missing_queries + missing_chunks)[:5])
        raise InputError(
            f"the qrels name {len(missing_queries)} unknown query and {len(missing_chunks)} unknown chunk id(s): "
            f"{shown}",
            path=source,
        )
    reviewer = f"import:{source.name}"
    queries = [Query(query_id=q, text=texts[q], origin=QueryOrigin.real) for q in sorted(labels)]
    judgments = []
    for query_id, chunks in sorted(labels.items()):
        for chunk_id, grade in sorted(chunks.items()):
            clamped = min(2, max(0, grade))
            summary.clamped_grades += clamped != grade
            judgments.append(
                Judgment(
                    judgment_id="imp-"
                    + hashlib.sha256(json.dumps([reviewer, query_id, chunk_id]).encode()).hexdigest()[:24],
                    query_id=query_id,
                    chunk_id=chunk_id,
                    grade=clamped,
                    source=JudgmentSource.human,
                    reviewer=reviewer,
                    status=JudgmentStatus.final,
                    rationale=f"imported from {source.name}"
                    + (f" (grade {grade} clamped)" if clamped != grade else ""),
                )
            )
    summary.new_queries = store_queries(workspace, queries)  # an id already stored must keep its text
    with workspace.transaction() as db:
        summary.new_labels = rows.add_judgments(db, judgments)
    summary.queries, summary.labels = len(queries), len(judgments)
    return summary
