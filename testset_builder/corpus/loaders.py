"""Loaders: files (.txt, .md, .html, .pdf), JSONL, Parquet, BEIR folders and Hugging Face datasets, into Documents.

Bad input never stops a load: an empty or binary file, undecodable bytes, a broken PDF, a JSONL line that is not
JSON or lacks the text field, a repeated document id within a file, a file of a type no loader reads: each becomes a
:class:`Skipped` entry naming the source and line, and the rest is loaded. ``strict=True`` raises
:class:`InputError` on the first instead. Two sources giving the same document id is always an error naming both.

A folder loads every supported format in it (text, HTML, PDF, JSONL, Parquet, and a BEIR folder's corpus.jsonl);
hidden files and folders (``.git``) are passed over. A file's document id is its path under the folder it was
found in, prefixed with that folder's name when two or more folders are given (``teamA/notes.md``); whitespace,
control characters and ``%`` in a path are percent-encoded (``my%20notes.md``), so every id survives every format
and ``urllib.parse.unquote`` gives the path back.

:class:`LoadResult` also says which files were read (``read``) and under which roots (``roots``): a document may
be marked removed only when its own source was read and no longer holds it, or its file is gone from a root that
was walked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import warnings
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from .._hashing import file_sha256
from ..errors import InputError
from ..records import Document, id_problem
from .boilerplate import FURNITURE_KEY
from .html import html_document

TEXT_SUFFIXES = {".txt", ".md", ".markdown", ".rst"}
HTML_SUFFIXES = {".html", ".htm"}
FILE_SUFFIXES = TEXT_SUFFIXES | HTML_SUFFIXES | {".pdf"}
JSONL_SUFFIXES = {".jsonl", ".ndjson"}
SUPPORTED = ", ".join(sorted(FILE_SUFFIXES | JSONL_SUFFIXES | {".parquet"}))


@dataclass(frozen=True)
class Skipped:
    source: str
    line: int | None
    reason: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.reason}" if self.line else f"{self.source}: {self.reason}"


class UnreadFiles(NamedTuple):
    """In a stream, in place of files' documents: files its consumer called unchanged (see
    :attr:`LoadResult.unchanged_file` and :attr:`LoadResult.unchanged_records`), so they were not read; their
    documents' ids and sources, as reading them gives. A folder's files read as one document are handed on a
    thousand at a time (a rerun's common case: one item, not one per file); a JSONL file's documents in one."""

    doc_ids: list[str]
    sources: list[str]


FileCheck = Callable[[str, str, int, int], bool]
"""(resolved path, document id, size, mtime_ns) -> whether the file is known unchanged since its document was read."""
RecordsCheck = Callable[[str, int, int, str, Callable[[], str]], list[str] | None]
"""(resolved path, size, mtime_ns, reading, digest) -> the ids of the documents a file of records (JSONL) gave when it
was last read with the fields ``reading`` names (:func:`reading_of`), if it is known unchanged since; None: read it.
``digest()`` reads the file and gives the sha256 of its bytes (:func:`~.._hashing.file_sha256`), for when its stat
cannot tell."""


def reading_of(id_field: str, text_field: str, title_field: str) -> str:
    """What a file of records was read with, as one string: the same bytes read with other fields give other
    documents."""
    return json.dumps([id_field, text_field, title_field])


@dataclass(frozen=True)
class RecordsRead:
    """A file of records (JSONL) read whole without a skip: its resolved path, its stat taken before it was opened,
    the fields it was read with (:func:`reading_of`), the sha256 of the bytes read and the ids of the documents it
    gave, in order."""

    path: str
    size: int
    mtime_ns: int
    reading: str
    sha256: str
    doc_ids: list[str]


@dataclass
class LoadResult:
    documents: list[Document] = field(default_factory=list)  # an iterator when streamed (stream_sources)
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[Skipped] = field(default_factory=list)  # what a reader warned about in a file it did load
    read: set[str] = field(default_factory=set)  # resolved paths of the files read whole (or known unchanged)
    roots: list[Path] = field(default_factory=list)  # resolved folders (and single files) the sources name
    # doc_id -> (resolved path, size, mtime_ns) of a file read as one document: its stat, taken before reading it
    file_stats: dict[str, tuple[str, int, int]] = field(default_factory=dict)
    # set by the consumer of a stream before iterating it: a text/HTML/PDF file it calls unchanged is not read
    # but given in an UnreadFiles
    unchanged_file: FileCheck | None = None
    records_read: list[RecordsRead] = field(default_factory=list)  # the JSONL files read whole without a skip
    # as unchanged_file, for a JSONL file: one it gives the documents' ids of is not read but given in an UnreadFiles
    unchanged_records: RecordsCheck | None = None

    def extend(self, other: LoadResult) -> None:
        self.documents.extend(other.documents)
        self.skipped.extend(other.skipped)
        self.notes.extend(other.notes)
        self.read |= other.read
        self.roots.extend(other.roots)
        self.file_stats.update(other.file_stats)
        self.records_read.extend(other.records_read)


class _Collector:
    """Collects documents, refusing repeated ids, and skips (or raises, when strict)."""

    def __init__(self, strict: bool) -> None:
        self.strict = strict
        self.result = LoadResult()
        self._seen: dict[str, str] = {}

    def skip(self, source: str, reason: str, line: int | None = None) -> None:
        if self.strict:
            raise InputError(reason, path=source, line=line)
        self.result.skipped.append(Skipped(source, line, reason))

    def add(self, document: Document, source: str, line: int | None = None) -> None:
        if self.accepts(document, source, line):
            self.result.documents.append(document)

    def accepts(self, document: Document, source: str, line: int | None = None) -> bool:
        """False (a skip) for an id seen before in this collection."""
        if document.doc_id in self._seen:
            self.skip(
                source, f"duplicate document id {document.doc_id!r} (first seen in {self._seen[document.doc_id]})", line
            )
            return False
        self._seen[document.doc_id] = f"{source}:{line}" if line else source
        return True


def _decode(raw: bytes) -> str:
    if b"\x00" in raw[:8192]:
        raise ValueError("binary file (NUL bytes), not text")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ValueError(f"not valid UTF-8 ({error.reason} at byte {error.start})") from None


class _PdfWarnings(logging.Handler):
    """Collects what pypdf logs or warns while one file is read, with the page being read, instead of letting it
    reach stderr: it goes into the load's report, naming file and page."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.page: int | None = None
        self.notes: list[tuple[int | None, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.notes.append((self.page, record.getMessage()))


def _pdf_document(path: Path, doc_id: str) -> tuple[Document, list[tuple[int | None, str]]]:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    collected = _PdfWarnings()
    logger = logging.getLogger("pypdf")
    logger.addHandler(collected)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            reader = PdfReader(str(path))
            pages, parts, offset = [], [], 0
            for number, page in enumerate(reader.pages, start=1):
                collected.page = number
                text = (page.extract_text() or "").strip()
                if not text:
                    continue
                if parts:
                    parts.append("\n\n")
                    offset += 2
                pages.append({"page": number, "start": offset})
                parts.append(text)
                offset += len(text)
        collected.notes.extend((None, str(w.message)) for w in caught)
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as error:
        raise ValueError(f"cannot read PDF ({type(error).__name__}: {error})") from None
    finally:
        logger.removeHandler(collected)
    document = Document(
        doc_id=doc_id, text="".join(parts), source=str(path), metadata={"pages": pages, "format": "pdf"}
    )
    return document, collected.notes


def load_file_noting(
    path: Path, doc_id: str, raw: bytes | None = None
) -> tuple[Document, list[tuple[int | None, str]]]:
    """One file as a Document, with what its reader warned about (PDF: (page, message)); ValueError with the
    reason when it cannot be read as text. ``raw``: its bytes, when read already."""
    suffix = path.suffix.lower()
    if suffix == ".pdf":
        return _pdf_document(path, doc_id)
    text = _decode(path.read_bytes() if raw is None else raw)
    if suffix in HTML_SUFFIXES:
        title, body, furniture = html_document(text)
        metadata: dict = {"format": "html"} | ({FURNITURE_KEY: [list(span) for span in furniture]} if furniture else {})
        return Document(doc_id=doc_id, text=body, title=title, source=str(path), metadata=metadata), []
    return Document(doc_id=doc_id, text=text, source=str(path), metadata={"format": suffix.lstrip(".") or "txt"}), []


_ESCAPED = re.compile(r"[\s%\x00-\x1f\x7f]")


def file_doc_id(relative: str, prefix: str = "") -> str:
    """A document id from a file's path under its root: whitespace, control characters and ``%`` percent-encoded
    (reversible with ``urllib.parse.unquote``), so the id has no character any file format splits on."""
    path = f"{prefix}/{relative}" if prefix else relative
    return _ESCAPED.sub(lambda m: "".join(f"%{b:02X}" for b in m.group(0).encode("utf-8")), path)


def _load_one_file(
    collector: _Collector,
    path: Path,
    resolved: str,
    stat: os.stat_result,
    doc_id: str,
    unchanged: FileCheck | None,
    reading: Future | None = None,
) -> None:
    """One text, HTML or PDF file as one document into ``collector``: not read when ``unchanged`` says it is
    unchanged; its stat kept in ``file_stats`` when read. ``reading``: its bytes being read ahead."""
    if stat.st_size == 0:
        collector.skip(str(path), "empty file")
        return
    if unchanged is not None and unchanged(resolved, doc_id, stat.st_size, stat.st_mtime_ns):
        collector.result.read.add(resolved)
        collector.result.documents.append(UnreadFiles([doc_id], [str(path)]))
        return
    try:
        document, notes = load_file_noting(path, doc_id, None if reading is None else reading.result())
    except ValueError as error:
        collector.skip(str(path), str(error))
        return
    collector.result.notes.extend(Skipped(str(path), None, f"page {p}: {m}" if p else m) for p, m in notes)
    collector.result.read.add(resolved)
    if not document.text.strip():
        collector.skip(str(path), "no text in the file")
        return
    collector.result.file_stats[doc_id] = (resolved, stat.st_size, stat.st_mtime_ns)
    collector.add(document, str(path))


def _records(path: Path, digest: Any) -> Iterator[tuple[int, Any]]:
    """(line number, bytes) of each line that is not blank (``isspace`` stops at a line's first character where
    ``strip`` copies it whole; both know the same whitespace). Every byte read, blank lines' too, goes to ``digest``
    (a hashlib object): once the lines are exhausted it holds the hash of the bytes they came from."""
    with path.open("rb", buffering=1 << 20) as handle:
        for number, raw in enumerate(handle, start=1):
            digest.update(raw)
            if not raw.isspace():
                yield number, raw


def load_jsonl(
    path: Path, id_field: str = "_id", text_field: str = "text", title_field: str = "title", strict: bool = False
) -> LoadResult:
    """One document per line. The id falls back to ``id``; other fields go to metadata."""
    result = jsonl_part(path, id_field, text_field, title_field, strict)
    result.documents = list(result.documents)
    return result


def jsonl_part(
    path: Path, id_field: str = "_id", text_field: str = "text", title_field: str = "title", strict: bool = False,
    unchanged: RecordsCheck | None = None,
) -> LoadResult:  # fmt: skip
    """:func:`load_jsonl` streamed: ``documents`` is an iterator reading the file a line at a time (a file of any
    size holds one line in memory); ``skipped``, ``read`` and ``records_read`` are complete once it is exhausted.
    A file ``unchanged`` gives the documents' ids of is not opened: its documents are one :class:`UnreadFiles`."""
    collector = _Collector(strict)
    resolved, reading = str(path.resolve()), reading_of(id_field, text_field, title_field)
    try:
        stat = path.stat()
    except OSError:  # opening it says why
        stat = None
    known = None
    if unchanged is not None and stat is not None:
        known = unchanged(resolved, stat.st_size, stat.st_mtime_ns, reading, lambda: file_sha256(path))
    if known is not None:
        collector.result.documents = [UnreadFiles(known, [str(path)] * len(known))]
        collector.result.read.add(resolved)
        return collector.result
    digest = hashlib.sha256()
    documents = _jsonl_documents(path, id_field, text_field, title_field, collector, digest)
    collector.result.documents = (
        documents if stat is None else _noting_clean_read(documents, collector, resolved, stat, reading, digest)
    )
    return collector.result


def _noting_clean_read(
    documents: Iterator[Document], collector: _Collector, resolved: str, stat: os.stat_result, reading: str, digest: Any
) -> Iterator[Document]:
    """``documents`` passed on; once they are exhausted with nothing skipped, the file is added to ``records_read``
    with its stat (taken before it was opened: a write while it is read changes the stat a rerun compares) and the
    hash of the bytes its documents came from (``digest``, fed as they were read)."""
    doc_ids = []
    for document in documents:
        doc_ids.append(document.doc_id)
        yield document
    result = collector.result
    if not result.skipped:
        sha256 = digest.hexdigest()
        result.records_read.append(RecordsRead(resolved, stat.st_size, stat.st_mtime_ns, reading, sha256, doc_ids))


def _jsonl_documents(
    path: Path, id_field: str, text_field: str, title_field: str, collector: _Collector, digest: Any
) -> Iterator[Document]:
    source = str(path)
    for number, raw in _records(path, digest):
        try:
            record = _json_line(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            collector.skip(source, f"not valid JSON ({getattr(error, 'msg', None) or error.reason})", number)
            continue
        if not isinstance(record, dict):
            collector.skip(source, "not a JSON object", number)
            continue
        doc_id = record.get(id_field, record.get("id"))
        text = record.get(text_field)
        if doc_id is None or str(doc_id) == "":
            collector.skip(source, f"missing id field {id_field!r}", number)
            continue
        if problem := id_problem(str(doc_id)):
            collector.skip(source, problem, number)
            continue
        if not isinstance(text, str) or not text.strip():
            collector.skip(source, f"missing or empty text field {text_field!r}", number)
            continue
        metadata = {k: v for k, v in record.items() if k not in (id_field, "id", text_field, title_field)}
        title = record.get(title_field) or ""
        document = Document(doc_id=str(doc_id), text=text, title=str(title), metadata=metadata, source=source)
        if collector.accepts(document, source, number):
            yield document
    collector.result.read.add(str(path.resolve()))


def _json_line(raw: bytes) -> Any:
    """``json.loads(raw)``: a line that starts as a JSON object and has no NUL in its second byte is UTF-8 to
    :func:`json.detect_encoding` (no byte-order mark, not UTF-16 or -32), so it is decoded as ``json.loads`` would,
    without the detection; any other line is left to ``json.loads``."""
    if raw[:1] == b"{" and len(raw) > 1 and raw[1]:
        return json.loads(raw.decode("utf-8", "surrogatepass"))
    return json.loads(raw)


def load_beir(folder: Path, strict: bool = False) -> LoadResult:
    """A BEIR folder's ``corpus.jsonl`` (``_id``, ``title``, ``text``)."""
    return load_jsonl(folder / "corpus.jsonl", "_id", "text", "title", strict=strict)


def beir_part(folder: Path, strict: bool = False, unchanged: RecordsCheck | None = None) -> LoadResult:
    """:func:`load_beir` streamed (see :func:`jsonl_part`)."""
    return jsonl_part(folder / "corpus.jsonl", "_id", "text", "title", strict=strict, unchanged=unchanged)


def load_hf(
    dataset: Any,
    id_field: str = "_id",
    text_field: str = "text",
    title_field: str = "title",
    split: str | None = None,
    strict: bool = False,
) -> LoadResult:
    """A ``datasets.Dataset``, a ``.parquet`` file (read with pyarrow), or a saved dataset's folder or a hub name
    for ``datasets.load_dataset`` (offline: local). A file or dataset that cannot be read is an :class:`InputError`
    naming it."""
    result = hf_part(dataset, id_field, text_field, title_field, split, strict)
    result.documents = list(result.documents)
    return result


def hf_part(
    dataset: Any,
    id_field: str = "_id",
    text_field: str = "text",
    title_field: str = "title",
    split: str | None = None,
    strict: bool = False,
) -> LoadResult:
    """:func:`load_hf` streamed: ``documents`` is an iterator (a .parquet file is read a record batch at a time);
    ``skipped`` and ``read`` are complete once it is exhausted. A source that cannot be opened raises here."""
    import datasets

    read: set[str] = set()
    if isinstance(dataset, datasets.Dataset):
        source, rows = dataset.info.dataset_name or "dataset", iter(dataset)
    elif str(dataset).endswith(".parquet"):
        source, rows = str(dataset), _parquet_rows(Path(dataset))
        read = {str(Path(dataset).resolve())}
    else:
        source = str(dataset)
        try:
            loaded = datasets.load_dataset(source, split=split) if split else datasets.load_dataset(source)
        except Exception as error:  # datasets raises many kinds; each means "not a dataset we can read"
            raise InputError(
                f"cannot load as a Hugging Face dataset ({type(error).__name__}: {error})", path=source
            ) from None
        rows = iter(loaded if isinstance(loaded, datasets.Dataset) else loaded[next(iter(loaded))])
    collector = _Collector(strict)
    collector.result.documents = _row_documents(rows, source, read, collector, id_field, text_field, title_field)
    return collector.result


def _row_documents(
    rows: Iterator[dict], source: str, read: set[str], collector: _Collector, id_field: str, text_field: str,
    title_field: str,
) -> Iterator[Document]:  # fmt: skip
    for row_number, row in enumerate(rows, start=1):
        doc_id, text = row.get(id_field, row.get("id")), row.get(text_field)
        if doc_id is None or not isinstance(text, str) or not text.strip():
            collector.skip(source, f"row lacks {id_field!r} or a non-empty {text_field!r}", row_number)
            continue
        if problem := id_problem(str(doc_id)):
            collector.skip(source, problem, row_number)
            continue
        metadata = {k: v for k, v in row.items() if k not in (id_field, "id", text_field, title_field)}
        document = Document(
            doc_id=str(doc_id), text=text, title=str(row.get(title_field) or ""), metadata=metadata, source=source
        )
        if collector.accepts(document, source, row_number):
            yield document
    collector.result.read |= read


def _parquet_rows(path: Path) -> Iterator[dict]:
    """The file's rows, a record batch at a time; the file is opened (and refused, as an InputError) now."""
    import pyarrow.parquet as pq

    with _parquet_errors(path):
        batches = pq.ParquetFile(path).iter_batches(batch_size=1024)
    return _batch_rows(path, batches)


def _batch_rows(path: Path, batches: Iterator) -> Iterator[dict]:
    with _parquet_errors(path):
        for batch in batches:
            yield from batch.to_pylist()


@contextmanager
def _parquet_errors(path: Path) -> Iterator[None]:
    import pyarrow as pa

    try:
        yield
    except (pa.ArrowException, OSError) as error:
        reason = re.sub(r"^Could not open Parquet input source '.*?': ", "", str(error).splitlines()[0])
        raise InputError(f"cannot read as Parquet ({reason})", path=path) from None


def load_sources(
    sources: Iterable[str | Path],
    strict: bool = False,
    id_field: str = "_id",
    text_field: str = "text",
    title_field: str = "title",
) -> LoadResult:
    """Each source by its shape: a BEIR folder (has corpus.jsonl), a folder, a glob, a .jsonl, a .parquet, a file;
    every document in memory (:func:`stream_sources` streams them).

    A source that matches nothing is an error (a load that finds no document is for the caller to judge: chunking
    refuses it unless it removes documents that are gone). Two sources giving one id is an error naming both.
    """
    result = stream_sources(sources, strict, id_field, text_field, title_field)
    result.documents = list(result.documents)
    return result


def stream_sources(
    sources: Iterable[str | Path],
    strict: bool = False,
    id_field: str = "_id",
    text_field: str = "text",
    title_field: str = "title",
) -> LoadResult:
    """As :func:`load_sources`, but ``documents`` is an iterator read file by file: ``skipped``, ``notes``,
    ``read`` and ``roots`` are complete once it is exhausted. What it holds across files is ids (to refuse an id
    two sources give)."""
    result = LoadResult()
    result.documents = _stream(list(sources), result, strict, id_field, text_field, title_field)
    return result


def _stream(
    sources: list, into: LoadResult, strict: bool, id_field: str, text_field: str, title_field: str
) -> Iterator[Document]:
    first: dict[str, str] = {}
    for part in _source_parts(sources, into, strict, id_field, text_field, title_field):
        into.roots.extend(part.roots)
        into.file_stats.update(part.file_stats)
        for document in part.documents:  # a JSONL part reads its file as this goes: its skips come after
            if type(document) is UnreadFiles:
                for doc_id, source in zip(document.doc_ids, document.sources, strict=True):
                    _check_unique(first, doc_id, source)
            else:
                _check_unique(first, document.doc_id, document.source)
            yield document
        into.skipped.extend(part.skipped)
        into.notes.extend(part.notes)
        into.read |= part.read
        into.records_read.extend(part.records_read)


def _source_parts(
    sources: list, into: LoadResult, strict: bool, id_field: str, text_field: str, title_field: str
) -> Iterator[LoadResult]:
    """Each file's load in turn (a folder's files one at a time). ``into.unchanged_file`` and
    ``into.unchanged_records`` are read here, once the consumer has started iterating."""
    unchanged, records = into.unchanged_file, into.unchanged_records
    folders = [s for s in sources if Path(s).is_dir() or (not Path(s).exists() and _is_glob(s))]
    prefixed = len(folders) > 1  # two roots: a file's id starts with its root's name
    for source in sources:
        path = Path(source)
        if path.is_dir():
            yield from iter_folder(
                path, strict, id_field, text_field, title_field, prefix=path.resolve().name if prefixed else "",
                unchanged=unchanged, unchanged_records=records,
            )  # fmt: skip
        elif path.is_file():
            into.roots.append(path.resolve())
            yield _load_file_of_any_kind(
                path, path.parent, "", strict, id_field, text_field, title_field, unchanged, records
            )
        elif _is_glob(source):
            base = Path(str(source).split("*")[0].split("?")[0].split("[")[0] or ".")
            root = base if base.is_dir() else base.parent
            pattern = str(source)
            glob_root = Path("/") if Path(pattern).is_absolute() else Path()
            matches = sorted(
                p for p in glob_root.glob(pattern.lstrip("/") if glob_root == Path("/") else pattern) if p.is_file()
            )
            if not matches:
                raise InputError("the glob matches no file", path=source)
            into.roots.append(root.resolve())
            prefix = root.resolve().name if prefixed else ""
            for match in matches:
                yield _load_file_of_any_kind(
                    match, root, prefix, strict, id_field, text_field, title_field, unchanged, records
                )
        else:
            raise InputError("no such file, folder or glob match", path=source)


def _is_glob(source: str | Path) -> bool:
    return any(ch in str(source) for ch in "*?[")


def load_folder(
    folder: Path, strict: bool = False, id_field: str = "_id", text_field: str = "text", title_field: str = "title",
    prefix: str = "",
) -> LoadResult:  # fmt: skip
    """Every supported file under ``folder`` (hidden ones passed over); a BEIR folder contributes its corpus.jsonl
    (its queries and qrels are not documents); a file of another type is reported as skipped."""
    result = LoadResult()
    for part in iter_folder(folder, strict, id_field, text_field, title_field, prefix):
        result.extend(part)
    return result


def iter_folder(
    folder: Path, strict: bool = False, id_field: str = "_id", text_field: str = "text", title_field: str = "title",
    prefix: str = "", unchanged: FileCheck | None = None, unchanged_records: RecordsCheck | None = None,
) -> Iterator[LoadResult]:  # fmt: skip
    """:func:`load_folder` a file at a time: the first part names the folder as a root. The folder is walked once
    with ``os.scandir`` (a stat a file; symbolic links to folders are not followed, as ``Path.rglob`` does not),
    files in the order ``sorted(folder.rglob("*"))`` gives."""
    yield LoadResult(roots=[folder.resolve()])
    if (folder / "corpus.jsonl").is_file():
        yield beir_part(folder, strict=strict, unchanged=unchanged_records)
        return
    files = _walk(folder)
    beir_folders = [parts[:-1] for parts, _ in files if parts[-1] == "corpus.jsonl"]
    real_root = os.path.realpath(folder).rstrip("/") + "/"
    base = "" if str(folder) == "." else str(folder).rstrip("/") + "/"
    unread = UnreadFiles([], [])  # files found unchanged, handed on a thousand at a time (a rerun's common case)
    read: set[str] = set()

    def planned() -> Iterator[_Planned]:
        for parts, entry in files:
            inside_beir = _beir_folder_of(parts, beir_folders) if beir_folders else None
            if inside_beir is not None or _suffix(parts[-1]) not in FILE_SUFFIXES:
                yield _Planned(parts, entry, inside_beir)
                continue
            relative = "/".join(parts)
            resolved = os.path.realpath(entry.path) if entry.is_symlink() else real_root + relative
            stat, doc_id = entry.stat(), file_doc_id(relative, prefix)
            same = (
                unchanged is not None and stat.st_size and unchanged(resolved, doc_id, stat.st_size, stat.st_mtime_ns)
            )
            yield _Planned(parts, entry, None, True, resolved, stat, doc_id, bool(same))

    for plan, raw in _read_ahead(planned()):
        parts = plan.parts
        if plan.one_document and plan.unchanged:
            unread.doc_ids.append(plan.doc_id)
            unread.sources.append(base + "/".join(parts))
            read.add(plan.resolved)
            if len(read) >= 1000:
                yield LoadResult(documents=[unread], read=read)
                unread, read = UnreadFiles([], []), set()
            continue
        if read:
            yield LoadResult(documents=[unread], read=read)
            unread, read = UnreadFiles([], []), set()
        path = folder.joinpath(*parts)
        if plan.inside_beir is not None:
            if parts == (*plan.inside_beir, "corpus.jsonl"):
                yield beir_part(path.parent, strict=strict, unchanged=unchanged_records)
        elif plan.one_document:
            collector = _Collector(strict)
            _load_one_file(collector, path, plan.resolved, plan.stat, plan.doc_id, None, raw)
            yield collector.result
        else:
            yield _load_file_of_any_kind(
                path, folder, prefix, strict, id_field, text_field, title_field, unchanged_records=unchanged_records
            )
    if read:
        yield LoadResult(documents=[unread], read=read)


@dataclass
class _Planned:
    """A file of a walked folder, and what is known of it before it is read: a file read as one document has its
    resolved path, stat, id, and whether the caller found it unchanged (then it is not read at all)."""

    parts: tuple[str, ...]
    entry: os.DirEntry
    inside_beir: tuple[str, ...] | None
    one_document: bool = False
    resolved: str = ""
    stat: os.stat_result | None = None
    doc_id: str = ""
    unchanged: bool = False

    @property
    def to_read(self) -> bool:
        """Whether its bytes will be read whole: a one-document file, changed, not empty, not a PDF."""
        return (
            self.one_document and not self.unchanged and bool(self.stat.st_size) and _suffix(self.parts[-1]) != ".pdf"
        )


READ_AHEAD_FILES = 64
READ_AHEAD_BYTES = 16 << 20


def _read_ahead(plans: Iterator[_Planned]) -> Iterator[tuple[_Planned, Future | None]]:
    """The plans in order, each file to read with its bytes being read by a thread up to :data:`READ_AHEAD_FILES`
    files or :data:`READ_AHEAD_BYTES` ahead (reads wait on the disk, while this thread decodes and the ingest
    chunks: opening and reading small files would otherwise stall the writing process). A read that
    fails raises where the file's bytes are taken, as a read in place would."""
    with ThreadPoolExecutor(1, thread_name_prefix="read-ahead") as reader:
        waiting: deque[tuple[_Planned, Future | None]] = deque()
        ahead = 0
        try:
            for plan in plans:
                size = plan.stat.st_size if plan.to_read else 0
                while waiting and (len(waiting) >= READ_AHEAD_FILES or ahead + size > READ_AHEAD_BYTES):
                    done, future = waiting.popleft()
                    ahead -= done.stat.st_size if future is not None else 0
                    yield done, future
                future = reader.submit(_read_bytes, plan.entry.path) if plan.to_read else None
                ahead += size
                waiting.append((plan, future))
            while waiting:
                yield waiting.popleft()
        finally:
            for _, future in waiting:
                if future is not None:
                    future.cancel()


def _read_bytes(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _beir_folder_of(parts: tuple[str, ...], beir_folders: list[tuple[str, ...]]) -> tuple[str, ...] | None:
    return next((b for b in beir_folders if len(parts) > len(b) and parts[: len(b)] == b), None)


def _suffix(name: str) -> str:
    """``Path(name).suffix.lower()`` (without building a Path: a rerun asks it of every file)."""
    dot = name.rfind(".")
    return name[dot:].lower() if 0 < dot < len(name) - 1 else ""


def _walk(folder: Path) -> list[tuple[tuple[str, ...], os.DirEntry]]:
    """(path parts under ``folder``, entry) of every regular file below it, hidden ones (a part starting with a
    dot) passed over, sorted by parts."""
    found, stack = [], [((), str(folder))]
    while stack:
        parts, directory = stack.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append(((*parts, entry.name), entry.path))
                elif entry.is_file():
                    found.append(((*parts, entry.name), entry))
    found.sort(key=lambda item: item[0])
    return found


def _load_file_of_any_kind(
    path: Path, root: Path, prefix: str, strict: bool, id_field: str, text_field: str, title_field: str,
    unchanged: FileCheck | None = None, unchanged_records: RecordsCheck | None = None,
) -> LoadResult:  # fmt: skip
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        return jsonl_part(path, id_field, text_field, title_field, strict=strict, unchanged=unchanged_records)
    if suffix == ".parquet":
        return hf_part(str(path), id_field, text_field, title_field, strict=strict)
    if suffix in FILE_SUFFIXES:
        collector = _Collector(strict)
        doc_id = file_doc_id(path.relative_to(root).as_posix(), prefix)
        _load_one_file(collector, path, str(path.resolve()), path.stat(), doc_id, unchanged)
        return collector.result
    collector = _Collector(strict)
    collector.skip(str(path), f"not a supported file type ({suffix or 'no suffix'}; supported: {SUPPORTED})")
    return collector.result


def _check_unique(first: dict[str, str], doc_id: str, source: str) -> None:
    """Ids must be unique across sources: a second source giving an id is an error naming both."""
    known = first.setdefault(doc_id, source)
    if known != source:
        raise InputError(
            f"document id {doc_id!r} comes from two sources, {known} and {source}; give the folders separately "
            "named, or fix the ids"
        )


def nothing_loaded(result: LoadResult, sources: Iterable[str | Path]) -> InputError:
    """The error for a load that found no document: what was skipped, by reason."""
    reasons = Counter(s.reason.split(" (")[0] for s in result.skipped)
    detail = "; ".join(f"{n} {reason}" for reason, n in reasons.most_common()) or "no files"
    return InputError(f"no documents to chunk in {', '.join(_as_typed(s) for s in sources)} ({detail})")


def _as_typed(source: str | Path) -> str:
    """A resolved source as the user likely typed it: relative to the current folder when under it."""
    path, here = Path(source), Path.cwd()
    return str(path.relative_to(here)) if path.is_absolute() and path.is_relative_to(here) else str(source)
