"""The BEIR layout: ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``, ``text``) and
``qrels/<split>.tsv`` (header ``query-id	corpus-id	score``). One reader and one writer of each; the writers'
bytes are canonical (keys sorted, compact JSON, rows by id), so the same content always gives the same files."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..errors import InputError
from ..tables import CHUNK_ID, GRADE, QRELS_SCHEMA, QUERY_ID, Qrels
from ._lines import (
    check_pair,
    check_readable,
    fast_read,
    first_line,
    integer_column,
    json_objects,
    numbered_lines,
    parse_integer,
    read_with_fallback,
)

BEIR_QRELS_HEADER = ("query-id", "corpus-id", "score")


def is_beir_qrels_header(line: str | None) -> bool:
    return line is not None and tuple(part.strip().lower() for part in line.split("\t")) == BEIR_QRELS_HEADER


def read_beir_qrels(path: str | Path) -> Qrels:
    path = Path(path)
    check_readable(path)
    if not is_beir_qrels_header(first_line(path)):
        raise InputError(
            "expected the BEIR header 'query-id<TAB>corpus-id<TAB>score' on the first line", path=path, line=1
        )

    def fast() -> pa.Table | None:
        table = fast_read(
            path,
            [QUERY_ID, CHUNK_ID, GRADE],
            {QUERY_ID: pa.string(), CHUNK_ID: pa.string(), GRADE: pa.string()},
            "\t",
            skip_rows=1,
        )
        return integer_column(table, GRADE)

    def slow() -> pa.Table:
        queries, chunks, grades, seen = [], [], [], {}
        lines = numbered_lines(path)
        next(lines)
        for number, line in lines:
            parts = [part.strip() for part in line.split("\t")]
            if len(parts) != 3 or not all(parts):
                raise InputError(
                    f"expected 3 tab-separated fields 'query-id corpus-id score', got {line!r}", path=path, line=number
                )
            grade = parse_integer(parts[2], "score", path, number)
            check_pair(seen, (parts[0], parts[1]), path, number)
            queries.append(parts[0])
            chunks.append(parts[1])
            grades.append(grade)
        return pa.table([queries, chunks, pa.array(grades, pa.int64())], schema=QRELS_SCHEMA)

    return read_with_fallback(path, fast, slow, Qrels)


def beir_qrels_text(qrels: Qrels) -> str:
    return "\t".join(BEIR_QRELS_HEADER) + "\n" + "".join(f"{q}\t{c}\t{g}\n" for q, c, g in qrels.sorted_rows())


def write_beir_qrels(qrels: Qrels, path: str | Path) -> None:
    Path(path).write_text(beir_qrels_text(qrels), encoding="utf-8")


def jsonl_line(record: dict) -> str:
    """A record as one canonical JSON line (sorted keys, no spaces, UTF-8 as is)."""
    return json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n"


def beir_corpus_text(corpus: Iterable[dict]) -> str:
    """``{"_id", "title", "text"}`` records, in the order given (callers sort by id)."""
    return "".join(jsonl_line({"_id": d["_id"], "title": d.get("title", ""), "text": d["text"]}) for d in corpus)


def beir_queries_text(queries: Iterable[dict]) -> str:
    """``{"_id", "text"}`` records, in the order given (callers sort by id)."""
    return "".join(jsonl_line({"_id": q["_id"], "text": q["text"]}) for q in queries)


def _records(path: Path, fields: tuple[str, ...]) -> Iterable[tuple[int, dict]]:
    check_readable(path)
    for number, record in json_objects(path):
        missing = [f for f in fields if not isinstance(record.get(f), (str, int)) or str(record.get(f)) == ""]
        if missing:
            raise InputError(f"missing {' and '.join(repr(f) for f in missing)}", path=path, line=number)
        yield number, record


def _by_id(path: Path, kind: str, value: Callable[[dict], Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, record in _records(path, ("_id", "text")):
        ident = str(record["_id"])
        if ident in out:
            raise InputError(f"{kind} id {ident!r} repeats an earlier line", path=path, line=number)
        out[ident] = value(record)
    return out


def read_beir_corpus(path: str | Path) -> dict[str, dict]:
    """``_id`` -> ``{"title", "text"}``; a repeated id or a record without ``_id`` or ``text`` names its line."""
    return _by_id(Path(path), "document", lambda r: {"title": str(r.get("title") or ""), "text": str(r["text"])})


def read_beir_queries(path: str | Path) -> dict[str, str]:
    """``_id`` -> text, in file order; a repeated id or a record without ``_id`` or ``text`` names its line."""
    return _by_id(Path(path), "query", lambda r: str(r["text"]))


def read_beir_split(folder: str | Path, split: str = "test") -> Qrels:
    """A BEIR folder's ``qrels/<split>.tsv``, or its only qrels file when that split is absent."""
    folder = Path(folder)
    path = folder / "qrels" / f"{split}.tsv"
    if not path.exists():
        found = sorted((folder / "qrels").glob("*.tsv")) if (folder / "qrels").is_dir() else []
        if not found:
            raise InputError(f"no qrels/{split}.tsv (or any qrels/*.tsv) in the BEIR folder", path=folder)
        path = found[0]
    return read_beir_qrels(path)
