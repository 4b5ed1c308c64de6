"""TREC formats: qrels (``qid 0 docid grade``) and runs (``qid Q0 docid rank score tag``).

As in trec_eval, the rank column of a run is read but ignored: ranking comes from the score. A file is
whitespace-separated; a line with the wrong number of fields, a non-numeric score or grade, a non-finite score,
or a (query, chunk) pair listed twice is an error that names the file and line.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ..errors import InputError
from ..tables import CHUNK_ID, GRADE, QRELS_SCHEMA, QUERY_ID, RUN_SCHEMA, SCORE, Qrels, Run
from ._lines import (
    check_pair,
    check_readable,
    fast_read,
    fields,
    first_line,
    integer_column,
    numbered_lines,
    parse_integer,
    parse_score,
    read_with_fallback,
    sniff_delimiter,
)


def read_trec_qrels(path: str | Path) -> Qrels:
    """Read ``qid iteration docid grade`` lines (the iteration column is ignored)."""
    path = Path(path)
    check_readable(path)

    def fast() -> pa.Table | None:
        line = first_line(path)
        delimiter = sniff_delimiter(line, 4) if line else None
        if delimiter is None:
            return None
        table = fast_read(
            path,
            [QUERY_ID, "iteration", CHUNK_ID, GRADE],
            {QUERY_ID: pa.string(), CHUNK_ID: pa.string(), GRADE: pa.string()},
            delimiter,
        )
        table = integer_column(table, GRADE)
        return table.select([QUERY_ID, CHUNK_ID, GRADE]) if table is not None else None

    def slow() -> pa.Table:
        queries, chunks, grades, seen = [], [], [], {}
        for number, line in numbered_lines(path):
            parts = fields(line)
            if len(parts) != 4:
                raise InputError(
                    f"expected 4 fields 'qid iteration docid grade', got {len(parts)}", path=path, line=number
                )
            grade = parse_integer(parts[3], "grade", path, number)
            check_pair(seen, (parts[0], parts[2]), path, number)
            queries.append(parts[0])
            chunks.append(parts[2])
            grades.append(grade)
        return pa.table([queries, chunks, pa.array(grades, pa.int64())], schema=QRELS_SCHEMA)

    return read_with_fallback(path, fast, slow, Qrels)


def read_trec_run(path: str | Path, name: str | None = None) -> Run:
    """Read a TREC run. The run's name is ``name``, else the tag of its first line, else the file stem."""
    path = Path(path)
    check_readable(path)
    line = first_line(path)
    if name is None:
        parts = fields(line) if line else []
        name = parts[5] if len(parts) == 6 else path.stem

    def fast() -> pa.Table | None:
        delimiter = sniff_delimiter(line, 6) if line else None
        if delimiter is None:
            return None
        columns = [QUERY_ID, "q0", CHUNK_ID, "rank", SCORE, "tag"]
        table = fast_read(path, columns, {QUERY_ID: pa.string(), CHUNK_ID: pa.string(), SCORE: pa.float64()}, delimiter)
        return table.select([QUERY_ID, CHUNK_ID, SCORE]) if table is not None else None

    def slow() -> pa.Table:
        queries, chunks, scores, seen = [], [], [], {}
        for number, text in numbered_lines(path):
            parts = fields(text)
            if len(parts) != 6:
                raise InputError(
                    f"expected 6 fields 'qid Q0 docid rank score tag', got {len(parts)}", path=path, line=number
                )
            score = parse_score(parts[4], path, number)
            check_pair(seen, (parts[0], parts[2]), path, number)
            queries.append(parts[0])
            chunks.append(parts[2])
            scores.append(score)
        return pa.table([queries, chunks, pa.array(scores, pa.float64())], schema=RUN_SCHEMA)

    return read_with_fallback(path, fast, slow, lambda table: Run(table, name=name))


def write_trec_qrels(qrels: Qrels, path: str | Path) -> None:
    """Write ``qid 0 docid grade`` lines, sorted by query id then chunk id."""
    with Path(path).open("w", encoding="utf-8") as handle:
        for query_id, chunk_id, grade in qrels.sorted_rows():
            handle.write(f"{query_id} 0 {chunk_id} {grade}\n")


def write_trec_run(run: Run, path: str | Path, tag: str | None = None) -> None:
    """Write a run ranked as trec_eval ranks it: per query by score desc, chunk id desc; ranks from 1."""
    tag = tag or run.name
    if any(ch.isspace() for ch in tag):
        raise InputError(f"run tag {tag!r} must not contain whitespace")
    with Path(path).open("w", encoding="utf-8") as handle:
        for query_id, chunk_id, score, rank in run.ranked_rows():
            handle.write(f"{query_id} Q0 {chunk_id} {rank} {score!r} {tag}\n")


def write_trec_topics(queries: dict[str, str], path: str | Path) -> None:
    """Queries as ``qid<TAB>text`` lines (the topics file trec_eval users pair with qrels), by id, one line each."""
    lines = "".join(f"{q}\t{' '.join(text.split())}\n" for q, text in sorted(queries.items()))
    Path(path).write_text(lines, encoding="utf-8")
