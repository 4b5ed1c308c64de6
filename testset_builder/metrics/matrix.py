"""Turn a run and qrels into the (queries x depth) grade matrix every metric kernel reads.

trec_eval's conventions, applied here once for every metric:

* the evaluated queries are the queries of the qrels, sorted by id; run queries absent from the qrels are dropped;
  qrels queries absent from the run are kept with nothing retrieved (they score 0), as ``trec_eval -c`` does;
* a query's results are ranked by score descending, ties broken by chunk id descending (byte order, like
  ``strcmp``); the order of rows in the run file is ignored;
* scores are compared in single precision, because trec_eval stores them as a C ``float``: two scores that differ
  only beyond float32 precision tie (and the tie is broken by chunk id);
* a retrieved chunk missing from the qrels has grade 0; grades below 0 count as 0 gain and as not relevant.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._threads import in_parallel
from ..tables import CHUNK_ID, GRADE, QUERY_ID, SCORE, Qrels, Run

RELEVANCE_THRESHOLD = 1


@dataclass(frozen=True)
class MatchSummary:
    """How the run's queries met the qrels' queries."""

    evaluated_queries: int
    queries_without_run: int
    dropped_run_queries: int
    queries_without_relevant: int

    def as_dict(self) -> dict[str, int]:
        return {
            "evaluated_queries": self.evaluated_queries,
            "qrels_queries_without_run": self.queries_without_run,
            "dropped_run_queries": self.dropped_run_queries,
            "queries_without_relevant": self.queries_without_relevant,
        }


@dataclass(frozen=True, eq=False)
class GradeMatrix:
    """Grades of the ranked results, one row per evaluated query.

    ``grades[i, r]`` is the qrels grade of the chunk at rank ``r + 1`` for query ``query_ids[i]`` (0 when unjudged
    or when fewer than ``r + 1`` chunks were retrieved). ``ideal[i]`` holds the query's positive grades sorted
    descending (0-padded). ``num_relevant[i]`` counts its chunks with grade >= 1.
    """

    query_ids: np.ndarray
    grades: np.ndarray
    ideal: np.ndarray
    num_relevant: np.ndarray
    num_retrieved: np.ndarray
    summary: MatchSummary

    @property
    def depth(self) -> int:
        return self.grades.shape[1]

    @cached_property
    def relevant(self) -> np.ndarray:
        return self.grades >= RELEVANCE_THRESHOLD

    @cached_property
    def relevant_cumsum(self) -> np.ndarray:
        """Relevant chunks retrieved at or above each rank: ``relevant_cumsum[i, r]`` counts ranks 1..r+1."""
        return np.cumsum(self.relevant, axis=1, dtype=np.int32)

    def relevant_at(self, k: int | None) -> np.ndarray:
        """Relevant chunks in the top ``k`` (the whole list when ``k`` is None)."""
        if self.depth == 0:
            return np.zeros(len(self.query_ids), dtype=np.int32)
        column = self.depth if k is None else min(k, self.depth)
        return self.relevant_cumsum[:, column - 1]


def _ideal_grades(qrels: pa.Table, rows: np.ndarray, n_queries: int) -> np.ndarray:
    grades = qrels.column(GRADE).to_numpy()
    positive = grades > 0
    rows, grades = rows[positive], grades[positive]
    if len(rows) == 0:
        return np.zeros((n_queries, 0), dtype=np.int64)
    order = np.lexsort((-grades, rows))
    rows, grades = rows[order], grades[order]
    starts = np.searchsorted(rows, np.arange(n_queries))
    position = np.arange(len(rows)) - starts[rows]
    ideal = np.zeros((n_queries, int(position.max()) + 1), dtype=np.int64)
    ideal[rows, position] = grades
    return ideal


def _rank_order(query_rows: np.ndarray, scores: np.ndarray) -> np.ndarray | None:
    """Order that groups rows by query and sorts each group by score descending; None if already so.

    Runs are usually written grouped by query and sorted by score, so that case costs one linear check.
    """
    if len(query_rows) == 0:
        return None
    same_query = query_rows[1:] == query_rows[:-1]
    groups_contiguous = len(query_rows) - np.count_nonzero(same_query) == np.count_nonzero(np.bincount(query_rows))
    if groups_contiguous and not np.any(same_query & (scores[1:] > scores[:-1])):
        return None
    return np.lexsort((-scores, query_rows))


def _break_ties(
    query_rows: np.ndarray, scores: np.ndarray, chunk_ids: pa.ChunkedArray, table_rows: np.ndarray | None
) -> np.ndarray | None:
    """Within runs of equal (query, score), the permutation that orders rows by chunk id descending.

    Rows are already grouped and score-sorted; ``chunk_ids[table_rows[i]]`` is row i's id (``chunk_ids[i]``
    when ``table_rows`` is None). Returns the positions
    of the tied rows and their new order as one array ``(positions, reordered positions)``, or None when no
    score is tied, so the common case touches no string.
    """
    tied_after = np.flatnonzero((query_rows[1:] == query_rows[:-1]) & (scores[1:] == scores[:-1]))
    if len(tied_after) == 0:
        return None
    positions = np.union1d(tied_after, tied_after + 1)
    starts_segment = np.ones(len(positions), dtype=bool)
    starts_segment[1:] = ~np.isin(positions[1:] - 1, tied_after, assume_unique=True)
    segment = np.cumsum(starts_segment)
    rows = positions if table_rows is None else table_rows[positions]
    id_rank = pc.rank(chunk_ids.take(pa.array(rows)), sort_keys="descending", tiebreaker="dense")
    return np.stack((positions, positions[np.lexsort((id_rank.to_numpy(), segment))]))


def _rank_within_groups(query_rows: np.ndarray) -> np.ndarray:
    """0-based position of each row within its run of equal ``query_rows`` (groups are contiguous)."""
    n = len(query_rows)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    starts = np.flatnonzero(np.concatenate(([True], query_rows[1:] != query_rows[:-1])))
    return np.arange(n) - np.repeat(starts, np.diff(np.append(starts, n)))


def _run_grades(qrels_table: pa.Table, run_table: pa.Table) -> np.ndarray:
    """The qrels grade of every run row, 0 where the (query, chunk) pair is not judged (an Arrow hash join)."""
    grades = np.zeros(run_table.num_rows, dtype=np.int64)
    if run_table.num_rows == 0 or qrels_table.num_rows == 0:
        return grades
    probe = run_table.select([QUERY_ID, CHUNK_ID]).append_column("_row", pa.array(np.arange(run_table.num_rows)))
    matched = probe.join(qrels_table, keys=[QUERY_ID, CHUNK_ID], join_type="inner", use_threads=True)
    grades[matched.column("_row").to_numpy()] = matched.column(GRADE).to_numpy()
    return grades


def build_grade_matrix(qrels: Qrels, run: Run, depth: int | None = None) -> GradeMatrix:
    """Rank ``run`` per query and look up each result's grade in ``qrels``, keeping the top ``depth`` ranks.

    ``depth=None`` keeps every retrieved result (needed by metrics without a cutoff).
    """
    qrels_table, run_table = qrels.table, run.table
    query_ids = pc.unique(qrels_table.column(QUERY_ID)).sort()
    n_queries = len(query_ids)
    qrels_rows = pc.index_in(qrels_table.column(QUERY_ID), value_set=query_ids).to_numpy()
    ideal = _ideal_grades(qrels_table, qrels_rows, n_queries)
    num_relevant = np.bincount(
        qrels_rows[qrels_table.column(GRADE).to_numpy() >= RELEVANCE_THRESHOLD], minlength=n_queries
    )

    codes = run.query_codes
    first_ids = run_table.column(QUERY_ID).take(pa.array(codes.first_rows))
    code_rows = pc.index_in(first_ids, value_set=query_ids).fill_null(-1).to_numpy().astype(np.int64)
    dropped = int(np.count_nonzero(code_rows < 0))
    query_rows = code_rows[codes.codes]
    scores = run_table.column(SCORE).to_numpy().astype(np.float32)
    table_rows = None  # row i of the arrays below is row table_rows[i] of the run table (None: the same row)
    if dropped:
        table_rows = np.flatnonzero(query_rows >= 0)
        query_rows, scores = query_rows[table_rows], scores[table_rows]

    all_grades, order = in_parallel(
        lambda: _run_grades(qrels_table, run_table), lambda: _rank_order(query_rows, scores)
    )
    if order is not None:
        table_rows = order if table_rows is None else table_rows[order]
        query_rows, scores = query_rows[order], scores[order]
    grades_of_rows = all_grades if table_rows is None else all_grades[table_rows]
    swaps = _break_ties(query_rows, scores, run_table.column(CHUNK_ID), table_rows)
    if swaps is not None:
        grades_of_rows[swaps[0]] = grades_of_rows[swaps[1]]
    if order is None and codes.contiguous:  # rows are in file order: rank is the offset within the query's block
        file_rows = np.arange(run_table.num_rows) if table_rows is None else table_rows
        rank = file_rows - codes.first_rows[codes.codes[file_rows]]
    else:
        rank = _rank_within_groups(query_rows)
    num_retrieved = np.bincount(query_rows, minlength=n_queries)

    max_depth = int(num_retrieved.max()) if n_queries else 0
    width = max_depth if depth is None else min(depth, max_depth)
    keep = (rank < width) & (grades_of_rows != 0)
    dtype = np.int8 if not len(grades_of_rows) or np.abs(grades_of_rows).max() < 127 else np.int64
    grades = np.zeros((n_queries, width), dtype=dtype)
    grades[query_rows[keep], rank[keep]] = grades_of_rows[keep]

    summary = MatchSummary(
        evaluated_queries=n_queries,
        queries_without_run=int(np.count_nonzero(num_retrieved == 0)),
        dropped_run_queries=int(dropped),
        queries_without_relevant=int(np.count_nonzero(num_relevant == 0)),
    )
    return GradeMatrix(
        query_ids=np.asarray(query_ids.to_pylist(), dtype=object),
        grades=grades,
        ideal=ideal,
        num_relevant=num_relevant,
        num_retrieved=num_retrieved,
        summary=summary,
    )
