"""Reading releases back: load (every file checked against its manifest hash), diff two, export one format."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..._hashing import file_sha256 as sha256_file
from ...errors import InputError
from ...export import RELEASE_EXPORTS, ReleaseExport, register_release_export
from ...export.beir import read_beir_corpus, read_beir_qrels, read_beir_queries
from ...export.hf import hf_files
from ...export.jsonl import write_jsonl_qrels
from ...export.trec import write_trec_topics
from ...registry import load_plugins
from ...tables import Qrels, Run
from .estimated import ESTIMATES_FILE, read_estimates
from .layout import CHUNKS_META, EVIDENCE_META, QUERIES_META, REMAP_META
from .logged import LOGS_META, PRODUCTION_RUN, read_production_run


@dataclass
class LoadedRelease:
    path: Path
    manifest: dict
    corpus: dict[str, dict]  # _id -> {"title", "text"}
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    estimates: list[dict] = field(default_factory=list)  # estimates.jsonl's rows (.estimated), when it carries them
    # chunk id -> {doc_id, start, end, doc_sha256} (meta/chunks.jsonl; doc_sha256 from releases of issue 16 on)
    chunk_spans: dict[str, dict] = field(default_factory=dict)
    query_meta: dict[str, dict] = field(default_factory=dict)  # query id -> {origin, style, source_chunk_id}
    evidence: dict[tuple[str, str], dict] = field(default_factory=dict)  # (query, chunk) -> {start, end, text}
    remap_outcomes: list[dict] = field(default_factory=list)  # a remapped release's meta/remap.jsonl
    logs: dict[str, dict] = field(default_factory=dict)  # logged query id -> meta/logs.jsonl's row (.logged)
    production: Run | None = None  # runs/production.trec: the live system's logged retrieval
    production_note: str | None = None  # how runs/production.trec was read when it was not clean (read_production_run)

    @property
    def has_spans(self) -> bool:
        """Whether the release says where its chunks lie in their documents (meta/chunks.jsonl): releases written
        before it do not, and cannot be remapped."""
        return bool(self.chunk_spans)

    @property
    def version(self) -> str:
        return self.manifest["version"]

    def source_document(self, query_id: str) -> str | None:
        """The document a synthetic question was written from (None for a real query, or a release without meta/)."""
        source = self.query_meta.get(query_id, {}).get("source_chunk_id")
        return self.chunk_spans.get(source, {}).get("doc_id") if source else None

    def session(self, query_id: str) -> str | None:
        """The logged session of a real query, as the hash the release keeps (None where it was not logged with one)."""
        return self.logs.get(query_id, {}).get("session")

    def qrels_table(self) -> Qrels:
        return Qrels.from_dict(self.qrels)


def load_release(path: str | Path, verify: bool = True) -> LoadedRelease:
    """Read a release directory; with ``verify``, every file must match the sha256 its manifest lists."""
    path = Path(path)
    manifest_path = path / "manifest.json"
    if not manifest_path.is_file():
        raise InputError("not a release directory (no manifest.json)", path=path)
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        files = manifest["files"]
        manifest["version"]
    except (ValueError, KeyError, TypeError):
        raise InputError("manifest.json is not a testset-builder release manifest", path=path) from None
    if verify:
        for relative, expected in files.items():
            file = path / relative
            if not file.is_file() or sha256_file(file) != expected:
                raise InputError(
                    f"{relative} does not match the sha256 in manifest.json: the release was modified", path=path
                )
    beir = path / "beir"
    estimates = []
    if ESTIMATES_FILE in files:
        try:
            estimates = read_estimates((path / ESTIMATES_FILE).read_text(encoding="utf-8"))
        except ValueError:
            raise InputError(f"{ESTIMATES_FILE} is not JSON lines", path=path) from None
    production, production_note = (
        read_production_run(path / PRODUCTION_RUN) if PRODUCTION_RUN in files else (None, None)
    )
    return LoadedRelease(
        path,
        manifest,
        read_beir_corpus(beir / "corpus.jsonl"),
        read_beir_queries(beir / "queries.jsonl"),
        read_beir_qrels(beir / "qrels" / "test.tsv").to_dict(),
        estimates,
        _by_id(path, CHUNKS_META, files),
        _by_id(path, QUERIES_META, files),
        {
            (row.pop("query_id"), row.pop("chunk_id")): row
            for row in _rows(path, EVIDENCE_META, files, "query_id", "chunk_id")
        },
        _rows(path, REMAP_META, files, "query_id"),
        _by_id(path, LOGS_META, files),
        production,
        production_note,
    )


def qrel_origins(release: LoadedRelease) -> dict[tuple[str, str], str]:
    """(query, chunk) -> the origin of each qrel (human, synthetic-source, llm-unverified), from ``hf/judgments``;
    empty when the release has no such file."""
    import pyarrow.parquet as pq

    name = hf_files(release.manifest.get("content_sha256") or "")["judgments"][1]
    if name not in release.manifest["files"]:
        return {}
    table = pq.read_table(release.path / name, columns=["query-id", "corpus-id", "origin"]).to_pydict()
    return dict(zip(zip(table["query-id"], table["corpus-id"]), table["origin"]))


def _by_id(path: Path, relative: str, files: dict) -> dict[str, dict]:
    """A meta/ file's rows by ``_id`` (empty for a release written before it had one)."""
    return {row.pop("_id"): row for row in _rows(path, relative, files, "_id")}


def _rows(path: Path, relative: str, files: dict, *keys: str) -> list[dict]:
    """A meta/ file's rows, each an object with every one of ``keys`` (empty for a release written without the
    file)."""
    if relative not in files:
        return []
    try:
        rows = [json.loads(line) for line in (path / relative).read_text(encoding="utf-8").splitlines() if line]
    except ValueError:
        rows = None
    if rows is None or not all(isinstance(row, dict) and all(k in row for k in keys) for row in rows):
        raise InputError(f"{relative} is not JSON lines with {' and '.join(keys)} on each", path=path)
    return rows


@dataclass
class ReleaseDiff:
    old: str
    new: str
    queries_added: list[str] = field(default_factory=list)
    queries_removed: list[str] = field(default_factory=list)
    queries_changed: list[str] = field(default_factory=list)  # same id, new text
    qrels_added: list[tuple[str, str, int]] = field(default_factory=list)
    qrels_removed: list[tuple[str, str, int]] = field(default_factory=list)
    qrels_regraded: list[tuple[str, str, int, int]] = field(default_factory=list)
    corpus_added: int = 0
    corpus_removed: int = 0

    @property
    def unchanged(self) -> bool:
        return not any(
            (
                self.queries_added, self.queries_removed, self.queries_changed, self.qrels_added,
                self.qrels_removed, self.qrels_regraded, self.corpus_added, self.corpus_removed,
            )
        )  # fmt: skip

    def as_dict(self) -> dict:
        return {**asdict(self), "unchanged": self.unchanged}


def diff_releases(old: LoadedRelease, new: LoadedRelease) -> ReleaseDiff:
    result = ReleaseDiff(old.version, new.version)
    result.queries_added = sorted(new.queries.keys() - old.queries.keys())
    result.queries_removed = sorted(old.queries.keys() - new.queries.keys())
    shared = old.queries.keys() & new.queries.keys()
    result.queries_changed = sorted(q for q in shared if old.queries[q] != new.queries[q])
    before = {(q, c): g for q, chunks in old.qrels.items() for c, g in chunks.items()}
    after = {(q, c): g for q, chunks in new.qrels.items() for c, g in chunks.items()}
    result.qrels_added = sorted((q, c, after[(q, c)]) for q, c in after.keys() - before.keys())
    result.qrels_removed = sorted((q, c, before[(q, c)]) for q, c in before.keys() - after.keys())
    result.qrels_regraded = sorted(
        (q, c, before[(q, c)], after[(q, c)])
        for q, c in before.keys() & after.keys()
        if before[(q, c)] != after[(q, c)]
    )
    result.corpus_added = len(new.corpus.keys() - old.corpus.keys())
    result.corpus_removed = len(old.corpus.keys() - new.corpus.keys())
    return result


def export(release: LoadedRelease, fmt: str, out_dir: str | Path) -> list[Path]:
    """Copy ``release`` out in a registered export format (:data:`~testset_builder.export.RELEASE_EXPORTS`: ``hf``,
    ``beir``, ``trec``, ``jsonl``, and any added); refuses a non-empty ``out_dir``. Returns the files written."""
    if fmt not in RELEASE_EXPORTS:
        raise InputError(f"unknown export format {fmt!r}; use {', '.join(RELEASE_EXPORTS)}")
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError("--out is a file; give a directory to create", path=out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise InputError("the output directory is not empty; choose a new one", path=out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    RELEASE_EXPORTS[fmt].write(release, out_dir)
    return sorted(p for p in out_dir.rglob("*") if p.is_file())


def _export_hf(release: LoadedRelease, out_dir: Path) -> None:
    shutil.copytree(release.path / "hf", out_dir / "hf")
    for name in ("README.md", "manifest.json", ESTIMATES_FILE):
        if (release.path / name).is_file():
            shutil.copy2(release.path / name, out_dir / name)


def _export_beir(release: LoadedRelease, out_dir: Path) -> None:
    shutil.copytree(release.path / "beir", out_dir, dirs_exist_ok=True)


def _export_trec(release: LoadedRelease, out_dir: Path) -> None:
    shutil.copy2(release.path / "qrels.trec", out_dir / "qrels.trec")
    write_trec_topics(release.queries, out_dir / "queries.tsv")


def _export_jsonl(release: LoadedRelease, out_dir: Path) -> None:
    write_jsonl_qrels(release.qrels_table(), out_dir / "qrels.jsonl")
    shutil.copy2(release.path / "beir" / "queries.jsonl", out_dir / "queries.jsonl")
    shutil.copy2(release.path / "beir" / "corpus.jsonl", out_dir / "corpus.jsonl")


for _export in (
    ReleaseExport("hf", _export_hf, "parquet + dataset card (MTEB layout), manifest, estimates.jsonl"),
    ReleaseExport("beir", _export_beir, "corpus.jsonl, queries.jsonl, qrels/test.tsv"),
    ReleaseExport("trec", _export_trec, "qrels.trec and queries.tsv"),
    ReleaseExport("jsonl", _export_jsonl, "qrels, queries and corpus as JSONL"),
):
    if _export.name not in RELEASE_EXPORTS:
        register_release_export(_export)
load_plugins()  # the built-in release exports are registered: now a plugin's, after them
