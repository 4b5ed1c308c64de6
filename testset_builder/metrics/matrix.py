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

from .._arrow import from_numpy, to_numpy
from .._hashing import string_hash64
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
    without_run_ids: tuple[str, ...] = ()  # the first NAMED of the queries the run gave nothing for

    def as_dict(self) -> dict:
        return {
            "evaluated_queries": self.evaluated_queries,
            "qrels_queries_without_run": self.queries_without_run,
            "qrels_queries_without_run_ids": list(self.without_run_ids),
            "dropped_run_queries": self.dropped_run_queries,
            "queries_without_relevant": self.queries_without_relevant,
        }


NAMED = 20  # queries named where a run has nothing for them (all are counted)


@dataclass(frozen=True, eq=False)
class GradeMatrix:
    """Grades of the ranked results, one row per evaluated query.

    ``grades[i, r]`` is the qrels grade of the chunk at rank ``r + 1`` for query ``query_ids[i]`` (0 when unjudged
    or when fewer than ``r + 1`` chunks were retrieved). ``ideal[i]`` holds the query's positive grades sorted
    descending (0-padded). ``num_relevant[i]`` counts its chunks with grade >= ``relevance_level`` (1 unless
    asked: trec_eval's ``-l``), the grade the binary metrics count as relevant; nDCG's gains are the grades.
    """

    query_ids: np.ndarray
    grades: np.ndarray
    ideal: np.ndarray
    num_relevant: np.ndarray
    num_retrieved: np.ndarray
    summary: MatchSummary
    relevance_level: int = RELEVANCE_THRESHOLD

    @property
    def depth(self) -> int:
        return self.grades.shape[1]

    @cached_property
    def relevant(self) -> np.ndarray:
        return self.grades >= self.relevance_level

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
    grades = to_numpy(qrels.column(GRADE))
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


def _rank_order(query_rows: np.ndarray, scores: np.ndarray, grouped: bool) -> np.ndarray | None:
    """Order that groups rows by query and sorts each group by score descending; None if already so.

    Runs are usually written grouped by query and sorted by score, so that case costs one linear check.
    ``grouped`` says each query's rows are already known to be contiguous.
    """
    if len(query_rows) == 0:
        return None
    same_query = query_rows[1:] == query_rows[:-1]
    groups_contiguous = grouped or len(query_rows) - np.count_nonzero(same_query) == np.count_nonzero(
        np.bincount(query_rows)
    )
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
    id_rank = pc.rank(chunk_ids.take(from_numpy(rows)), sort_keys="descending", tiebreaker="dense")
    return np.stack((positions, positions[np.lexsort((to_numpy(id_rank), segment))]))


def _single_precision(scores: pa.ChunkedArray) -> np.ndarray:
    """The scores as float32 (as trec_eval stores them), converted chunk by chunk: no float64 copy of the column."""
    out, start = np.empty(len(scores), dtype=np.float32), 0
    for chunk in scores.chunks:
        out[start : start + len(chunk)] = to_numpy(chunk)
        start += len(chunk)
    return out


def _group_starts(query_rows: np.ndarray) -> np.ndarray:
    """Position of the first row of each run of equal ``query_rows`` (each query's rows are contiguous)."""
    if len(query_rows) == 0:
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(np.concatenate(([True], query_rows[1:] != query_rows[:-1])))


_JOIN_BLOCK = 1 << 18  # run rows filtered at a time: the temporaries stay in cache whatever the run's size


def _pair_keys(query_rows: np.ndarray, chunk_hashes: np.ndarray, query_bits: int) -> np.ndarray:
    """Query-major 64-bit keys of (query row, chunk id hash): the query row in the top ``query_bits`` bits, the top
    of the hash below it. Equal pairs have equal keys; keys sort by query first."""
    keys = query_rows.astype(np.uint64)
    keys <<= np.uint64(64 - query_bits)
    keys |= chunk_hashes >> np.uint64(query_bits)
    return keys


def _judged_rows(
    qrels_table: pa.Table,
    qrels_rows: np.ndarray,
    query_rows: np.ndarray,
    chunk_hashes: np.ndarray,
    chunk_ids: pa.ChunkedArray,
    table_rows: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """The run rows whose (query, chunk) pair has a nonzero qrels grade, and those grades (ascending rows).

    Only these rows can put anything in the grade matrix, so they are all that is carried on (a few percent of a
    run, where a dense grade per row would be tens of MB to allocate, reorder and scan).

    Row i has query ``query_rows[i]``, chunk id hash ``chunk_hashes[i]`` and chunk id ``chunk_ids[table_rows[i]]``
    (``chunk_ids[i]`` when ``table_rows`` is None). Pairs are matched on query-major keys (:func:`_pair_keys`).
    A bitmap indexed by the keys' top bits discards almost every run row with one gather: each query owns
    ``2**bits`` slots, so a query's rows (contiguous in a run) touch one or two cache lines. The survivors are
    binary-searched in the sorted judged keys, where a query's searches land in the same few cache lines too. Each
    match is confirmed on the chunk id strings (query rows are exact codes), so a hash collision costs a comparison
    but cannot change a grade. This is several times faster than Arrow's hash join on the two string columns.
    """
    if len(query_rows) == 0 or qrels_table.num_rows == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    query_bits = int(qrels_rows.max()).bit_length() or 1  # every run query row is a qrels query row
    judged_keys = _pair_keys(qrels_rows, string_hash64(qrels_table.column(CHUNK_ID)), query_bits)
    judged_order = np.argsort(judged_keys, kind="stable")  # timsort: qrels are usually grouped by query already
    judged_keys = judged_keys[judged_order]
    per_query = len(judged_keys) * 16 // (1 << query_bits)  # slots per query: ~1/16 of unjudged rows pass
    bits = max(1, min(per_query.bit_length(), 26 - query_bits))
    to_slot = np.uint64(64 - query_bits - bits)
    bitmap = np.zeros(1 << (query_bits + bits), dtype=bool)
    bitmap[(judged_keys >> to_slot).view(np.int64)] = True
    candidate_rows, candidate_keys = [], []
    for start in range(0, len(query_rows), _JOIN_BLOCK):
        stop = start + _JOIN_BLOCK
        keys = _pair_keys(query_rows[start:stop], chunk_hashes[start:stop], query_bits)
        passed = np.flatnonzero(bitmap[(keys >> to_slot).view(np.int64)])
        candidate_rows.append(passed + start)
        candidate_keys.append(keys[passed])
    rows, keys = np.concatenate(candidate_rows), np.concatenate(candidate_keys)
    first = np.searchsorted(judged_keys, keys, side="left")
    matches = np.searchsorted(judged_keys, keys, side="right") - first  # usually 0 or 1; more only on a collision
    rows = np.repeat(rows, matches)
    match_starts = np.cumsum(matches) - matches
    positions = np.repeat(first - match_starts, matches) + np.arange(len(rows))
    judged_rows = judged_order[positions]
    run_ids = chunk_ids.take(from_numpy(rows if table_rows is None else table_rows[rows]))
    same_id = to_numpy(pc.equal(run_ids, qrels_table.column(CHUNK_ID).take(from_numpy(judged_rows))))
    rows, grades = rows[same_id], to_numpy(qrels_table.column(GRADE))[judged_rows[same_id]]
    nonzero = grades != 0
    return rows[nonzero], grades[nonzero]


def _moved_by(swaps: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """``positions`` after the tie-break permutation ``swaps`` (the row at ``swaps[1][i]`` moves to ``swaps[0][i]``)."""
    by_old = np.argsort(swaps[1])
    old, new = swaps[1][by_old], swaps[0][by_old]
    at = np.minimum(np.searchsorted(old, positions), len(old) - 1)
    return np.where(old[at] == positions, new[at], positions)


def build_grade_matrix(
    qrels: Qrels, run: Run, depth: int | None = None, relevance_level: int = RELEVANCE_THRESHOLD
) -> GradeMatrix:
    """Rank ``run`` per query and look up each result's grade in ``qrels``, keeping the top ``depth`` ranks.

    ``depth=None`` keeps every retrieved result (needed by metrics without a cutoff). ``relevance_level``: the
    grade a chunk needs to count as relevant (trec_eval's ``-l``).
    """
    if relevance_level < 1:
        raise ValueError(f"the relevance level is a grade of 1 or more, not {relevance_level}")
    qrels_table, run_table = qrels.table, run.table
    query_ids = pc.unique(qrels_table.column(QUERY_ID)).sort()
    n_queries = len(query_ids)
    qrels_rows = to_numpy(pc.index_in(qrels_table.column(QUERY_ID), value_set=query_ids))
    ideal = _ideal_grades(qrels_table, qrels_rows, n_queries)
    num_relevant = np.bincount(qrels_rows[to_numpy(qrels_table.column(GRADE)) >= relevance_level], minlength=n_queries)

    codes = run.query_codes
    first_ids = run_table.column(QUERY_ID).take(from_numpy(codes.first_rows))
    code_rows = to_numpy(pc.index_in(first_ids, value_set=query_ids), fill=-1)  # int32: half the traffic
    dropped = int(np.count_nonzero(code_rows < 0))
    query_rows = code_rows[codes.codes]
    scores = _single_precision(run_table.column(SCORE))
    table_rows = None  # row i of the arrays below is row table_rows[i] of the run table (None: the same row)
    if dropped:
        table_rows = np.flatnonzero(query_rows >= 0)
        query_rows, scores = query_rows[table_rows], scores[table_rows]

    chunk_hashes = run.chunk_hashes if table_rows is None else run.chunk_hashes[table_rows]
    (judged, judged_grades), order = in_parallel(
        lambda: _judged_rows(qrels_table, qrels_rows, query_rows, chunk_hashes, run_table.column(CHUNK_ID), table_rows),
        lambda: _rank_order(query_rows, scores, grouped=codes.contiguous),
        rows=len(query_rows),
    )
    if order is not None:
        table_rows = order if table_rows is None else table_rows[order]
        query_rows, scores = query_rows[order], scores[order]
        new_position = np.empty(len(order), dtype=np.int64)
        new_position[order] = np.arange(len(order))
        judged = new_position[judged]
    swaps = _break_ties(query_rows, scores, run_table.column(CHUNK_ID), table_rows)
    if swaps is not None:
        judged = _moved_by(swaps, judged)
    starts = _group_starts(query_rows)
    num_retrieved = np.zeros(n_queries, dtype=np.int64)
    num_retrieved[query_rows[starts]] = np.diff(np.append(starts, len(query_rows)))

    max_depth = int(num_retrieved.max()) if n_queries else 0
    width = max_depth if depth is None else min(depth, max_depth)
    rank = judged - starts[np.searchsorted(starts, judged, side="right") - 1]
    keep = rank < width
    judged, rank, judged_grades = judged[keep], rank[keep], judged_grades[keep]
    dtype = np.int8 if not len(judged_grades) or np.abs(judged_grades).max() < 127 else np.int64
    grades = np.zeros((n_queries, width), dtype=dtype)
    grades[query_rows[judged], rank] = judged_grades

    ids = np.asarray(query_ids.to_pylist(), dtype=object)
    summary = MatchSummary(
        evaluated_queries=n_queries,
        queries_without_run=int(np.count_nonzero(num_retrieved == 0)),
        dropped_run_queries=int(dropped),
        queries_without_relevant=int(np.count_nonzero(num_relevant == 0)),
        without_run_ids=tuple(str(q) for q in ids[num_retrieved == 0][:NAMED]),
    )
    return GradeMatrix(
        query_ids=ids,
        grades=grades,
        ideal=ideal,
        num_relevant=num_relevant,
        num_retrieved=num_retrieved,
        summary=summary,
        relevance_level=relevance_level,
    )
