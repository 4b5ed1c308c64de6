"""Real user queries from a file: JSONL, CSV (with a header) or plain text, one query per line.

Ids are kept when the file has them, else derived from the text (``q-`` + 12 hex digits of the sha256 of the
normalised text), so the same query gets the same id on every run. Queries whose normalised text (NFKC, case-folded,
whitespace collapsed) repeats are merged into the first and counted. Unreadable lines are skipped and reported with
file and line (or fatal with ``strict``); an id reused for a different text is an error.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

from .._hashing import normalise
from ..corpus.loaders import Skipped
from ..errors import InputError
from ..records import Query, QueryOrigin, id_problem
from ._lines import check_readable, json_objects

ID_FIELDS = ("_id", "id", "query_id", "query-id", "qid")
MAX_QUERY_CHARS = 2000  # longer is a document, not a query, and need not fit a judge's prompt
TEXT_FIELDS = ("text", "query", "question")


def derived_id(text: str) -> str:
    return "q-" + hashlib.sha256(normalise(text).encode("utf-8")).hexdigest()[:12]


@dataclass
class QueryFile:
    queries: list[Query] = field(default_factory=list)
    merged: int = 0  # duplicates folded into an earlier query
    skipped: list[Skipped] = field(default_factory=list)


def _pick(record: dict, wanted: str | None, fallbacks: tuple[str, ...]) -> str | None:
    if wanted is not None:
        return wanted if wanted in record else None
    return next((name for name in fallbacks if name in record), None)


def read_queries(
    path: str | Path, id_field: str | None = None, text_field: str | None = None, strict: bool = False
) -> QueryFile:
    """Queries from ``path``. ``id_field``/``text_field`` default to the usual names (``_id``, ``id``, ... and
    ``text``, ``query``, ``question``)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise InputError(f"cannot read queries ({error.strerror})", path=path) from None
    if b"\x00" in raw[:8192]:
        raise InputError("binary file, expected JSONL, CSV or one query per line", path=path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputError(f"not UTF-8 (byte {error.start}); re-encode the file as UTF-8", path=path) from None
    result, by_text, by_id = QueryFile(), {}, {}

    def skip(reason: str, line: int) -> None:
        if strict:
            raise InputError(reason, path=path, line=line)
        result.skipped.append(Skipped(str(path), line, reason))

    def add(query_id: str | None, query_text: str, line: int) -> None:
        query_text = query_text.strip()
        if not query_text:
            skip("empty query text", line)
            return
        if len(query_text) > MAX_QUERY_CHARS:
            skip(f"a query of {len(query_text)} characters (at most {MAX_QUERY_CHARS}: shorten it)", line)
            return
        key = normalise(query_text)
        query_id = str(query_id).strip() if query_id not in (None, "") else derived_id(query_text)
        if problem := id_problem(query_id):
            skip(problem, line)
            return
        if query_id in by_id and by_id[query_id] != key:
            raise InputError(f"query id {query_id!r} is used for two different texts", path=path, line=line)
        if key in by_text:
            result.merged += 1
            return
        by_text[key], by_id[query_id] = query_id, key
        result.queries.append(Query(query_id=query_id, text=query_text, origin=QueryOrigin.real))

    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".ndjson", ".json"):
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                skip(f"not JSON ({error.msg})", number)
                continue
            if not isinstance(record, dict):
                skip("not a JSON object", number)
                continue
            text_key = _pick(record, text_field, TEXT_FIELDS)
            if text_key is None or not isinstance(record[text_key], str):
                skip(f"no text field ({text_field or ' / '.join(TEXT_FIELDS)})", number)
                continue
            id_key = _pick(record, id_field, ID_FIELDS)
            add(record.get(id_key) if id_key else None, record[text_key], number)
    elif suffix in (".csv", ".tsv"):
        delimiter = "\t" if suffix == ".tsv" else ","
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
        try:
            header = next(reader, [])
            text_key = _pick(dict.fromkeys(header), text_field, TEXT_FIELDS)
            if text_key is None:
                raise InputError(f"no text column in the header {header} (use --text-field)", path=path, line=1)
            id_key = _pick(dict.fromkeys(header), id_field, ID_FIELDS)
            start = 1
            for row in reader:
                if len(row) != len(header):  # an unquoted comma, or a missing field: never guess which text is meant
                    raise InputError(
                        f"{len(row)} fields where the header has {len(header)}; quote a text holding "
                        f'{"a tab" if delimiter == chr(9) else "a comma"} ("why, oh why")',
                        path=path,
                        line=start + 1,
                    )
                values = dict(zip(header, row))
                add(values.get(id_key) if id_key else None, values.get(text_key) or "", start + 1)
                start = reader.line_num
        except csv.Error as error:
            raise InputError(
                f"not valid {suffix[1:].upper()} ({error}; an unclosed quote?)", path=path, line=reader.line_num
            ) from None
    else:
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                add(None, line, number)
    if not result.queries:
        raise InputError("no queries found", path=path)
    return result


def read_query_clusters(path: str | Path, field: str = "cluster", id_field: str | None = None) -> dict[str, str]:
    """Each query's cluster from a file the user keeps: JSON lines or CSV / TSV with a header, the query id under
    ``id_field`` (default: the usual names, ``_id``, ``id``, ``query_id``, ...) and the cluster under ``field`` (a
    session, a user, a topic: queries that are not independent of each other). A row without a cluster leaves its
    query alone; a query given two clusters is an error."""
    path = Path(path)
    check_readable(path)
    rows: list[tuple[int, dict]] = []
    if path.suffix.lower() in (".csv", ".tsv"):
        try:
            text = path.read_text(encoding="utf-8-sig")
        except OSError as error:
            raise InputError(f"cannot read the clusters file ({error.strerror})", path=path) from None
        except UnicodeDecodeError as error:
            raise InputError(f"not UTF-8 (byte {error.start})", path=path) from None
        reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t" if path.suffix.lower() == ".tsv" else ",")
        try:
            rows = [(reader.line_num, row) for row in reader]
        except csv.Error as error:
            raise InputError(f"not valid CSV ({error})", path=path, line=reader.line_num) from None
    else:
        rows = list(json_objects(path))
    clusters: dict[str, str] = {}
    for number, row in rows:
        id_key = _pick(row, id_field, ID_FIELDS)
        if id_key is None or row.get(id_key) in (None, ""):
            raise InputError(f"no query id ({id_field or ' / '.join(ID_FIELDS)})", path=path, line=number)
        if field not in row:
            raise InputError(
                f"no field {field!r} (name the cluster's field with --cluster-field)", path=path, line=number
            )
        query_id, cluster = str(row[id_key]).strip(), row[field]
        if cluster in (None, ""):
            continue
        if clusters.setdefault(query_id, str(cluster)) != str(cluster):
            raise InputError(f"query {query_id!r} is given two clusters", path=path, line=number)
    if not clusters:
        raise InputError(f"no query has a cluster in field {field!r}", path=path)
    return clusters
