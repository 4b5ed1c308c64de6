"""BEIR qrels: a tab-separated file with the header ``query-id	corpus-id	score`` (``qrels/test.tsv``)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

from ..errors import InputError
from ..tables import CHUNK_ID, GRADE, QRELS_SCHEMA, QUERY_ID, Qrels
from ._lines import check_readable, check_unique_pair, fast_read, first_line, numbered_lines, read_with_fallback

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
        return fast_read(
            path,
            [QUERY_ID, CHUNK_ID, GRADE],
            {QUERY_ID: pa.string(), CHUNK_ID: pa.string(), GRADE: pa.int64()},
            "\t",
            skip_rows=1,
        )

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
            try:
                grade = int(parts[2])
            except ValueError:
                raise InputError(f"score must be an integer, got {parts[2]!r}", path=path, line=number) from None
            check_unique_pair(seen, (parts[0], parts[1]), path, number)
            queries.append(parts[0])
            chunks.append(parts[1])
            grades.append(grade)
        return pa.table([queries, chunks, pa.array(grades, pa.int64())], schema=QRELS_SCHEMA)

    return read_with_fallback(path, fast, slow, Qrels)


def write_beir_qrels(qrels: Qrels, path: str | Path) -> None:
    with Path(path).open("w", encoding="utf-8") as handle:
        handle.write("\t".join(BEIR_QRELS_HEADER) + "\n")
        for query_id, chunk_id, grade in qrels.sorted_rows():
            handle.write(f"{query_id}\t{chunk_id}\t{grade}\n")
