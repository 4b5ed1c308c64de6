"""Columnar qrels and runs: the inputs to metrics.

A run of 100,000 queries x 100 results is ten million rows; as Python objects that is gigabytes and seconds of
allocation. ``Qrels`` and ``Run`` hold Arrow columns instead, validated once for the whole table. Readers in
:mod:`testset_builder.export` produce them from files; ``from_dict`` / ``to_dict`` bridge to the
``{query_id: {chunk_id: value}}`` dicts that pytrec_eval and ranx use.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._arrow import from_numpy, to_numpy
from ._hashing import pair_key64, string_buffers, string_hash64
from ._threads import in_parallel
from .errors import InputError

if TYPE_CHECKING:  # the records are pydantic models: imported where rows become records, not by every score
    from .records import Qrel, RankedList

QUERY_ID = "query_id"
CHUNK_ID = "chunk_id"
GRADE = "grade"
SCORE = "score"

QRELS_SCHEMA = pa.schema([(QUERY_ID, pa.string()), (CHUNK_ID, pa.string()), (GRADE, pa.int64())])
RUN_SCHEMA = pa.schema([(QUERY_ID, pa.string()), (CHUNK_ID, pa.string()), (SCORE, pa.float64())])


@dataclass(frozen=True, eq=False)
class QueryCodes:
    """Dense integer codes for a query id column: ``codes[i]`` is the same for rows with the same query id.

    ``first_rows[c]`` is the first row carrying code ``c``. When every query's rows are contiguous (as runs are
    written) the codes are block numbers, found with one pass of adjacent comparisons; otherwise they come from
    Arrow's dictionary encoding.
    """

    codes: np.ndarray
    first_rows: np.ndarray
    contiguous: bool


def _adjacent_changes(column: pa.ChunkedArray) -> np.ndarray:
    """``changes[i]`` is True when row i + 1 holds a different value from row i (exact string comparison)."""
    parts, previous = [], None
    for chunk in column.chunks:
        if len(chunk) == 0:
            continue
        if previous is not None:
            parts.append(np.array([chunk[0].as_py() != previous]))
        if len(chunk) > 1:
            parts.append(to_numpy(pc.not_equal(chunk.slice(1), chunk.slice(0, len(chunk) - 1))))
        previous = chunk[len(chunk) - 1].as_py()
    return np.concatenate(parts) if parts else np.empty(0, dtype=bool)


def query_codes(query_ids: pa.ChunkedArray) -> QueryCodes:
    n = len(query_ids)
    if n == 0:
        return QueryCodes(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), True)
    starts = np.flatnonzero(np.concatenate(([True], _adjacent_changes(query_ids))))
    if pc.count_distinct(query_ids.take(from_numpy(starts))).as_py() == len(starts):
        code_type = np.int32 if len(starts) < 2**31 else np.int64  # int32: half the memory of a ten-million-row run
        codes = np.repeat(np.arange(len(starts), dtype=code_type), np.diff(np.append(starts, n)))
        return QueryCodes(codes, starts, True)
    codes = to_numpy(pc.dictionary_encode(query_ids.combine_chunks()).indices)  # int32 (Arrow's dictionary index)
    first_rows = np.full(int(codes.max()) + 1, n, dtype=np.int64)
    np.minimum.at(first_rows, codes, np.arange(n))
    return QueryCodes(codes, first_rows, False)


def codes_and_hashes(table: pa.Table) -> tuple[QueryCodes, np.ndarray]:
    """Query codes and chunk id hashes of a qrels or run table, computed side by side."""
    return tuple(
        in_parallel(
            lambda: query_codes(table.column(QUERY_ID)),
            lambda: string_hash64(table.column(CHUNK_ID)),
            rows=table.num_rows,
        )
    )


_PAD = np.uint64(2**64 - 1)
_GRID_SLAB = 1 << 20  # hashes sorted per slab of the duplicate grid: an 8 MB copy whatever the run's size


def _candidate_repeat_rows(codes: QueryCodes, chunk_hashes: np.ndarray) -> np.ndarray:
    """Rows whose (query, chunk id hash) occurs more than once: a superset of the true repeats.

    When each query's rows are contiguous, the hashes are laid out one query per row of a grid and sorted row by
    row (three times faster than one global sort of pair keys), a slab of about a million hashes at a time so the
    sorted copy stays small; otherwise pair keys are sorted globally.
    """
    n = len(chunk_hashes)
    blocks = len(codes.first_rows)
    width = int(np.diff(np.append(codes.first_rows, n)).max()) if codes.contiguous else 0
    if codes.contiguous and blocks * width <= 2 * n and not np.any(chunk_hashes == _PAD):
        bounds = np.append(codes.first_rows, n)
        step = max(1, _GRID_SLAB // width)
        suspect_blocks, suspect_hashes = [], []
        for first in range(0, blocks, step):
            last = min(first + step, blocks)
            if blocks * width == n:
                grid = np.sort(chunk_hashes[first * width : last * width].reshape(last - first, width), axis=1)
            else:
                rows = np.arange(bounds[first], bounds[last])
                grid = np.full((last - first, width), _PAD, dtype=np.uint64)
                grid[codes.codes[rows] - first, rows - codes.first_rows[codes.codes[rows]]] = chunk_hashes[rows]
                grid.sort(axis=1)
            repeated = (grid[:, 1:] == grid[:, :-1]) & (grid[:, 1:] != _PAD)
            if repeated.any():
                grid_rows, columns = np.nonzero(repeated)
                suspect_blocks.append(grid_rows + first)
                suspect_hashes.append(grid[grid_rows, columns])
        if not suspect_blocks:
            return np.empty(0, dtype=np.int64)
        suspects = np.isin(codes.codes, np.concatenate(suspect_blocks)) & np.isin(
            chunk_hashes, np.concatenate(suspect_hashes)
        )
        return np.flatnonzero(suspects)
    keys = pair_key64(codes.codes, chunk_hashes)
    sorted_keys = np.sort(keys)
    repeated_keys = sorted_keys[1:][sorted_keys[1:] == sorted_keys[:-1]]
    if len(repeated_keys) == 0:
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(np.isin(keys, repeated_keys))


def duplicate_pair_rows(
    table: pa.Table, codes: QueryCodes | None = None, chunk_hashes: np.ndarray | None = None
) -> np.ndarray:
    """Row indices of every repeat of a (query_id, chunk_id) pair seen on an earlier row (empty when none).

    Hashes find candidate repeats; the candidates are then confirmed on the strings themselves.
    """
    if table.num_rows < 2:
        return np.empty(0, dtype=np.int64)
    if codes is None or chunk_hashes is None:
        codes, chunk_hashes = codes_and_hashes(table)
    candidates = _candidate_repeat_rows(codes, chunk_hashes)
    if len(candidates) == 0:
        return candidates
    indices = from_numpy(candidates)
    pairs = zip(table.column(QUERY_ID).take(indices).to_pylist(), table.column(CHUNK_ID).take(indices).to_pylist())
    seen: set[tuple[str, str]] = set()
    repeats = []
    for row, pair in zip(candidates.tolist(), pairs):
        if pair in seen:
            repeats.append(row)
        seen.add(pair)
    return np.asarray(repeats, dtype=np.int64)


def _has_empty_string(values: pa.ChunkedArray) -> bool:
    for chunk in values.chunks:
        offsets, _ = string_buffers(chunk)
        if np.any(offsets[1:] == offsets[:-1]):
            return True
    return False


def _all_printable_ascii(values: pa.ChunkedArray) -> bool:
    """True when every byte of every string is printable ASCII other than space (0x21 to 0x7E).

    Such ids cannot hold what the hostile-id pattern looks for (a BOM, a Unicode space or a control character: all
    outside that byte range), so the regex scan, ten times the cost of these two byte reductions, can be skipped.
    """
    for chunk in values.chunks:
        offsets, data = string_buffers(chunk)
        data = data[int(offsets[0]) :]
        if len(data) and (data.min() < 0x21 or data.max() > 0x7E):
            return False
    return True


def _check_ids(table: pa.Table, what: str) -> None:
    for column in (QUERY_ID, CHUNK_ID):
        values = table.column(column)
        if values.null_count:
            raise InputError(f"{what} has a missing {column}")
        if _has_empty_string(values):
            raise InputError(f"{what} has an empty {column}")
        if _all_printable_ascii(values):
            continue
        hostile = pc.match_substring_regex(values, r"^\x{FEFF}|[\pZ\p{Cc}]")  # as records.id_problem
        if table.num_rows and pc.any(hostile).as_py():
            first = values.filter(hostile)[0].as_py()
            raise InputError(f"{what} has a {column} with whitespace or control characters: {first[:60]!r}")


@dataclass(frozen=True)
class Qrels:
    """Graded relevance labels: one row per (query_id, chunk_id), integer grade. Relevant means grade >= 1."""

    table: pa.Table

    def __post_init__(self) -> None:
        if self.table.schema != QRELS_SCHEMA:
            object.__setattr__(self, "table", self.table.select([QUERY_ID, CHUNK_ID, GRADE]).cast(QRELS_SCHEMA))
        _check_ids(self.table, "qrels")
        if self.table.column(GRADE).null_count:
            raise InputError("qrels has a missing grade")
        duplicates = duplicate_pair_rows(self.table)
        if len(duplicates):
            row = int(duplicates[0])
            raise InputError(
                f"qrels list ({self.table[QUERY_ID][row]}, {self.table[CHUNK_ID][row]}) more than once "
                f"({len(duplicates)} repeated pairs)"
            )

    @classmethod
    def from_dict(cls, qrels: Mapping[str, Mapping[str, int]]) -> Qrels:
        queries, chunks, grades = [], [], []
        for query_id, judged in qrels.items():
            for chunk_id, grade in judged.items():
                if isinstance(grade, bool) or int(grade) != grade:
                    raise InputError(f"qrels grade for ({query_id}, {chunk_id}) must be an integer, got {grade!r}")
                queries.append(str(query_id))
                chunks.append(str(chunk_id))
                grades.append(int(grade))
        return cls(pa.table([queries, chunks, pa.array(grades, pa.int64())], schema=QRELS_SCHEMA))

    @classmethod
    def from_records(cls, qrels: Iterable[Qrel]) -> Qrels:
        rows = list(qrels)
        return cls(
            pa.table(
                [[q.query_id for q in rows], [q.chunk_id for q in rows], pa.array([q.grade for q in rows], pa.int64())],
                schema=QRELS_SCHEMA,
            )
        )

    def sorted_rows(self) -> Iterator[tuple[str, str, int]]:
        """``(query_id, chunk_id, grade)`` sorted by query id, then chunk id: the order every writer uses."""
        table = self.table.sort_by([(QUERY_ID, "ascending"), (CHUNK_ID, "ascending")])
        return zip(*(table.column(c).to_pylist() for c in (QUERY_ID, CHUNK_ID, GRADE)))

    def to_dict(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for query_id, chunk_id, grade in zip(*(self.table.column(c).to_pylist() for c in (QUERY_ID, CHUNK_ID, GRADE))):
            out.setdefault(query_id, {})[chunk_id] = grade
        return out

    def to_records(self) -> list[Qrel]:
        from .records import Qrel

        return [
            Qrel(query_id=q, chunk_id=c, grade=g)
            for q, c, g in zip(*(self.table.column(n).to_pylist() for n in (QUERY_ID, CHUNK_ID, GRADE)))
        ]

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    def query_ids(self) -> list[str]:
        return sorted(pc.unique(self.table.column(QUERY_ID)).to_pylist())


@dataclass(frozen=True)
class Run:
    """A retriever's output: scored chunks per query. Ranking is by score (descending), not by row order.

    ``name`` is the run's tag (the last column of a TREC run); it is what reports call the system.
    """

    table: pa.Table
    name: str = "run"

    def __post_init__(self) -> None:
        if self.table.schema != RUN_SCHEMA:
            object.__setattr__(self, "table", self.table.select([QUERY_ID, CHUNK_ID, SCORE]).cast(RUN_SCHEMA))
        _check_ids(self.table, "run")
        scores = self.table.column(SCORE)
        if scores.null_count or (self.table.num_rows and not pc.all(pc.is_finite(scores)).as_py()):
            raise InputError(f"run {self.name!r} has a missing, NaN or infinite score")
        codes, chunk_hashes = codes_and_hashes(self.table)
        object.__setattr__(self, "_query_codes", codes)
        object.__setattr__(self, "_chunk_hashes", chunk_hashes)
        duplicates = duplicate_pair_rows(self.table, codes, chunk_hashes)
        if len(duplicates):
            row = int(duplicates[0])
            raise InputError(
                f"run {self.name!r} lists ({self.table[QUERY_ID][row]}, {self.table[CHUNK_ID][row]}) more than once "
                f"({len(duplicates)} repeated pairs); a run must not repeat a chunk for a query"
            )

    @classmethod
    def from_dict(cls, run: Mapping[str, Mapping[str, float]], name: str = "run") -> Run:
        queries, chunks, scores = [], [], []
        for query_id, results in run.items():
            for chunk_id, score in results.items():
                queries.append(str(query_id))
                chunks.append(str(chunk_id))
                scores.append(float(score))
        return cls(pa.table([queries, chunks, pa.array(scores, pa.float64())], schema=RUN_SCHEMA), name=name)

    @classmethod
    def from_ranked_lists(cls, lists: Iterable[RankedList], name: str = "run") -> Run:
        return cls.from_dict({r.query_id: {s.chunk_id: s.score for s in r.results} for r in lists}, name=name)

    def ranked_rows(self) -> Iterator[tuple[str, str, float, int]]:
        """``(query_id, chunk_id, score, rank)`` by query id, then ranked as trec_eval ranks (score desc, chunk id
        desc), ranks from 1. Writers and rank fusion read runs through this one ordering."""
        table = self.table.sort_by([(QUERY_ID, "ascending"), (SCORE, "descending"), (CHUNK_ID, "descending")])
        previous, rank = None, 0
        for query_id, chunk_id, score in zip(*(table.column(c).to_pylist() for c in (QUERY_ID, CHUNK_ID, SCORE))):
            rank = rank + 1 if query_id == previous else 1
            previous = query_id
            yield query_id, chunk_id, score, rank

    def to_dict(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for query_id, chunk_id, score in zip(*(self.table.column(c).to_pylist() for c in (QUERY_ID, CHUNK_ID, SCORE))):
            out.setdefault(query_id, {})[chunk_id] = score
        return out

    @property
    def num_rows(self) -> int:
        return self.table.num_rows

    def query_ids(self) -> list[str]:
        """The queries with at least one result, sorted."""
        return sorted(pc.unique(self.table.column(QUERY_ID)).to_pylist())

    @property
    def query_codes(self) -> QueryCodes:
        """Integer codes of the query id column, computed once when the run was validated."""
        return self._query_codes

    @property
    def chunk_hashes(self) -> np.ndarray:
        """64-bit hashes of the chunk id column (see :func:`~testset_builder._hashing.string_hash64`), computed
        once when the run was validated."""
        return self._chunk_hashes
