"""JSONL runs (``{"query_id", "results": [{"chunk_id", "score"}, ...]}`` per line) and qrels
(``{"query_id", "chunk_id", "grade"}`` per line)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..errors import InputError
from ..tables import CHUNK_ID, GRADE, QRELS_SCHEMA, QUERY_ID, RUN_SCHEMA, SCORE, Qrels, Run
from ._lines import INT64, check_id, check_pair, check_readable, json_objects


def _id_field(value: dict[str, Any], field: str, path: Path, line: int) -> str:
    ident = value.get(field)
    if isinstance(ident, bool) or not isinstance(ident, (str, int)) or str(ident) == "":
        raise InputError(f"missing or empty {field!r} (a string or integer)", path=path, line=line)
    return check_id(str(ident), path, line)


def _number(value: Any, field: str, path: Path, line: int, integer: bool = False) -> float | int:
    """A score (a finite number) or, with ``integer``, a grade (an integer within 64 bits; 2.0 is 2)."""
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{field!r} must be {kind}, got {value!r}", path=path, line=line)
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{field!r} must be finite, got {value!r}", path=path, line=line)
    if integer and isinstance(value, float) and not value.is_integer():
        raise InputError(f"{field!r} must be {kind}, got {value!r}", path=path, line=line)
    if integer:
        number = int(value)
        if not -INT64 <= number < INT64:
            raise InputError(f"{field!r} {value!r} is out of range (a 64-bit integer)", path=path, line=line)
        return number
    try:
        return float(value)
    except OverflowError:
        raise InputError(f"{field!r} is out of range (a 64-bit float)", path=path, line=line) from None


def read_jsonl_run(path: str | Path, name: str | None = None) -> Run:
    path = Path(path)
    check_readable(path)
    queries, chunks, scores, seen = [], [], [], {}
    for number, value in json_objects(path):
        query_id = _id_field(value, QUERY_ID, path, number)
        results = value.get("results")
        if not isinstance(results, list):
            raise InputError("missing 'results' (a list of {chunk_id, score})", path=path, line=number)
        for result in results:
            if not isinstance(result, dict):
                raise InputError("each result must be an object {chunk_id, score}", path=path, line=number)
            chunk_id = _id_field(result, CHUNK_ID, path, number)
            check_pair(seen, (query_id, chunk_id), path, number)
            queries.append(query_id)
            chunks.append(chunk_id)
            scores.append(_number(result.get(SCORE), SCORE, path, number))
    return Run(pa.table([queries, chunks, pa.array(scores, pa.float64())], schema=RUN_SCHEMA), name=name or path.stem)


def read_jsonl_qrels(path: str | Path) -> Qrels:
    path = Path(path)
    check_readable(path)
    queries, chunks, grades, seen = [], [], [], {}
    for number, value in json_objects(path):
        query_id = _id_field(value, QUERY_ID, path, number)
        chunk_id = _id_field(value, CHUNK_ID, path, number)
        check_pair(seen, (query_id, chunk_id), path, number)
        queries.append(query_id)
        chunks.append(chunk_id)
        grades.append(_number(value.get(GRADE), GRADE, path, number, integer=True))
    return Qrels(pa.table([queries, chunks, pa.array(grades, pa.int64())], schema=QRELS_SCHEMA))


def write_jsonl_run(run: Run, path: str | Path) -> None:
    """One line per query (sorted by id), results ranked by score desc, chunk id desc."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    for query_id, chunk_id, score, _ in run.ranked_rows():
        grouped.setdefault(query_id, []).append({CHUNK_ID: chunk_id, SCORE: score})
    with Path(path).open("w", encoding="utf-8") as handle:
        for query_id, results in grouped.items():
            handle.write(json.dumps({QUERY_ID: query_id, "results": results}, ensure_ascii=False) + "\n")


def write_jsonl_qrels(qrels: Qrels, path: str | Path) -> None:
    with Path(path).open("w", encoding="utf-8") as handle:
        for query_id, chunk_id, grade in qrels.sorted_rows():
            handle.write(json.dumps({QUERY_ID: query_id, CHUNK_ID: chunk_id, GRADE: grade}, ensure_ascii=False) + "\n")
