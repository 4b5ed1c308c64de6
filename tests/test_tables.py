"""Columnar qrels and runs: validation finds every repeated pair, whatever the row layout."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testset_builder import tables
from testset_builder._hashing import string_hash64
from testset_builder.tables import duplicate_pair_rows, query_codes

IDS = st.sampled_from(["a", "b", "abcdefgh", "abcdefghi", "ünï", "文档", "x" * 30, "x" * 31, "q1", "q10"])


def reference_repeats(pairs):
    seen, repeats = set(), []
    for row, pair in enumerate(pairs):
        if pair in seen:
            repeats.append(row)
        seen.add(pair)
    return repeats


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(IDS, IDS), max_size=40), st.booleans())
def test_duplicate_detection_matches_a_plain_python_check(pairs, grouped):
    if grouped:  # each query's rows contiguous, as runs are written: the grid path
        pairs = sorted(pairs, key=lambda p: p[0])
    table = pa.table(
        {"query_id": [p[0] for p in pairs], "chunk_id": [p[1] for p in pairs]},
        schema=pa.schema([("query_id", pa.string()), ("chunk_id", pa.string())]),
    )
    assert duplicate_pair_rows(table).tolist() == reference_repeats(pairs)
    with pytest.MonkeyPatch.context() as patch:  # the grid sorted a few queries at a time, as on a large run
        patch.setattr(tables, "_GRID_SLAB", 3)
        assert duplicate_pair_rows(table).tolist() == reference_repeats(pairs)


@settings(max_examples=200, deadline=None)
@given(st.lists(IDS, min_size=1, max_size=30))
def test_query_codes_are_equal_exactly_for_equal_ids(ids):
    codes = query_codes(
        pa.chunked_array([pa.array(ids[: len(ids) // 2], pa.string()), pa.array(ids[len(ids) // 2 :], pa.string())])
    )
    for i in range(len(ids)):
        for j in range(len(ids)):
            assert (codes.codes[i] == codes.codes[j]) == (ids[i] == ids[j])
        assert ids[codes.first_rows[codes.codes[i]]] == ids[i]


def test_string_hashes_agree_across_slices_and_chunks():
    values = ["", "a", "a\\x00", "abcdefgh", "abcdefghi", "é漢字🙂", "abcdefghi", "x" * 100, "x" * 99]
    array = pa.array(values)
    hashes = string_hash64(array)
    assert hashes[4] == hashes[6] and len(set(hashes.tolist())) == len(set(values))
    assert string_hash64(array.slice(2, 5))[2] == hashes[4]
    assert (string_hash64(pa.chunked_array([array.slice(0, 4), array.slice(4)])) == hashes).all()
