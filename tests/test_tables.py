"""Columnar qrels and runs: validation finds every repeated pair, whatever the row layout."""

from __future__ import annotations

import numpy as np
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


def test_arrow_columns_read_into_numpy_as_pyarrow_reads_them_slices_chunks_and_nulls_included():
    from testset_builder._arrow import from_numpy, to_numpy

    columns = [
        pa.array([3, -1, 7, 2], pa.int64()).slice(1),
        pa.array([0.5, 1.5, float("nan")], pa.float32()),
        pa.array([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], pa.uint8()).slice(3, 5),
        pa.array([True, False, True, True, False, False, True, False, True, True] * 3).slice(5, 17),
        pa.chunked_array([pa.array([1, 2, 3]).slice(2), pa.array([], pa.int64()), pa.array([4, 5])]),
        pa.chunked_array([], pa.int32()),
    ]
    for column in columns:
        ours = to_numpy(column)
        theirs = column.to_numpy() if isinstance(column, pa.ChunkedArray) else column.to_numpy(zero_copy_only=False)
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs, equal_nan=True)
    with_nulls = pa.array([1, None, 3, None, 5], pa.int32()).slice(1)
    assert to_numpy(with_nulls, fill=-1).tolist() == with_nulls.fill_null(-1).to_pylist()
    assert to_numpy(pa.array([True, None, False]), fill=True).tolist() == [True, True, False]
    for values in (np.arange(5, dtype=np.int64)[::2], np.array([0.25, -2.0]), np.array([True, False, True] * 4)):
        assert from_numpy(values).to_pylist() == values.tolist()
    with pytest.raises(TypeError, match="one-dimensional numeric"):
        from_numpy(np.array(["a"]))
    with pytest.raises(TypeError, match="one-dimensional numeric"):
        from_numpy(np.ones((2, 3), dtype=bool))
    table = pa.table({"grade": pa.array([0, 1, 2], pa.int8())})
    view = to_numpy(table.column("grade"))
    with pytest.raises(ValueError, match="read-only"):
        view[0] = 9  # a view of the table's buffer: writing it would change the table
    assert table.column("grade").to_pylist() == [0, 1, 2]


def test_scoring_trec_files_never_imports_pandas(tmp_path):
    """pandas is a tenth of a second of start-up that `score` does not need (pyarrow's to_numpy imports it)."""
    import subprocess
    import sys

    (tmp_path / "qrels.trec").write_text("q1 0 d1 2\nq1 0 d2 0\nq2 0 d3 1\n")
    (tmp_path / "run.trec").write_text("q1 Q0 d2 1 2.0 r\nq1 Q0 d1 2 2.0 r\nq2 Q0 d9 1 1.0 r\nq3 Q0 d3 1 1.0 r\n")
    script = (
        "import sys\nfrom testset_builder.cli import main\n"
        "code = main(['score', '--qrels', 'qrels.trec', '--run', 'run.trec', '--cluster-by', 'relevant'])\n"
        "print(code, 'pandas' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert done.stdout.split()[-2:] == ["0", "False"], done.stdout + done.stderr
