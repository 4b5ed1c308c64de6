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

from ..corpus.chunkers import ChunkerConfig
from ..corpus.ingest import ingest
from ..corpus.loaders import LoadResult, load_beir
from ..errors import InputError
from ..records import Document, Judgment, JudgmentSource, JudgmentStatus, Query, QueryOrigin
from ..store import rows
from ..store.workspace import Workspace
from .propose import store_queries
from .queries import read_queries


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


def _beir_qrels(folder: Path) -> dict[str, dict[str, int]]:
    from ..export import read_qrels

    split = folder / "qrels" / "test.tsv"
    if not split.exists():
        found = sorted((folder / "qrels").glob("*.tsv")) if (folder / "qrels").is_dir() else []
        if not found:
            raise InputError("no qrels/test.tsv (or any qrels/*.tsv) in the BEIR folder", path=folder)
        split = found[0]
    return read_qrels(split).to_dict()


def _data_files(folder: Path) -> dict[str, list[Path]]:
    """Config name -> data files, from the dataset card's YAML ``configs`` (else the release layout's paths)."""
    import yaml

    card = folder / "README.md"
    configs = {}
    if card.exists():
        text = card.read_text(encoding="utf-8")
        if text.startswith("---\n"):
            front = yaml.safe_load(text.split("---\n", 2)[1]) or {}
            for config in front.get("configs", []):
                files = config.get("data_files", [])
                paths = [
                    f["path"] if isinstance(f, dict) else f for f in (files if isinstance(files, list) else [files])
                ]
                configs[config["config_name"]] = [p for pattern in paths for p in sorted(folder.glob(pattern))]
    for name, fallback in (
        ("corpus", "hf/corpus.parquet"),
        ("queries", "hf/queries.parquet"),
        ("default", "hf/qrels/test.parquet"),
    ):
        configs.setdefault(name, sorted(folder.glob(fallback)))
    return configs


def _read_rows(files: list[Path]) -> list[dict]:
    import pyarrow.json as pajson
    import pyarrow.parquet as pq

    rows_out: list[dict] = []
    for file in files:
        table = pq.read_table(file) if file.suffix == ".parquet" else pajson.read_json(file)
        rows_out.extend(table.to_pylist())
    return rows_out


def _hf_parts(folder: Path) -> tuple[LoadResult, dict[str, str], dict[str, dict[str, int]]]:
    """An MTEB-layout dataset directory, read straight from its parquet (or JSONL) files: no datasets cache, so
    what is read is what is on disk."""
    files = _data_files(folder)
    missing = [name for name in ("corpus", "queries", "default") if not files.get(name)]
    if missing:
        raise InputError(
            f"not an MTEB-layout dataset: no data files for the config(s) {', '.join(missing)}", path=folder
        )
    corpus = LoadResult(
        documents=[
            Document(doc_id=str(r["_id"]), text=r["text"], title=r.get("title") or "", source=str(folder))
            for r in _read_rows(files["corpus"])
        ]
    )
    texts = {str(r["_id"]): r["text"] for r in _read_rows(files["queries"])}
    labels: dict[str, dict[str, int]] = {}
    for row in _read_rows(files["default"]):
        labels.setdefault(str(row["query-id"]), {})[str(row["corpus-id"])] = int(row["score"])
    return corpus, texts, labels


def import_labelled_set(
    workspace: Workspace, source: str | Path, queries_file: str | Path | None = None
) -> ImportSummary:
    source = Path(source)
    kind = detect_kind(source)
    summary = ImportSummary(str(source), kind)
    if kind == "beir":
        loaded = load_beir(source, strict=True)
        texts = {q.query_id: q.text for q in read_queries(source / "queries.jsonl").queries}
        labels = _beir_qrels(source)
    elif kind == "hf":
        loaded, texts, labels = _hf_parts(source)
    else:
        from ..export import read_qrels

        if queries_file is None:
            raise InputError("importing TREC qrels needs --queries FILE with the query texts", path=source)
        loaded, labels = None, read_qrels(source).to_dict()
        texts = {q.query_id: q.text for q in read_queries(queries_file).queries}
    if loaded is not None:
        ingest(workspace, loaded, ChunkerConfig("prechunked", 1, 0), [source])
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
        done = rows.existing_judgment_ids(db, [j.judgment_id for j in judgments])
        summary.new_labels = rows.add_judgments(db, [j for j in judgments if j.judgment_id not in done])
    summary.queries, summary.labels = len(queries), len(judgments)
    return summary
