"""Reading and writing qrels and runs: every format round-trips, and bad input names the file and line."""

from __future__ import annotations

import pytest

from testset_builder.errors import InputError
from testset_builder.export import (
    read_qrels,
    read_run,
    write_beir_qrels,
    write_jsonl_qrels,
    write_jsonl_run,
    write_trec_qrels,
    write_trec_run,
)
from testset_builder.tables import Qrels, Run

QRELS = {"q1": {"d1": 2, "d2": 0, "文档-7": 1}, "q2": {"d1": 1}}
RUN = {"q1": {"d1": 0.5, "d3": 1.25, "文档-7": -3.0}, "q2": {"d9": 2.0, "d1": 2.0}}


@pytest.mark.parametrize("writer", [write_trec_qrels, write_beir_qrels, write_jsonl_qrels])
def test_qrels_round_trip_through_every_format(tmp_path, writer):
    path = tmp_path / "qrels"
    writer(Qrels.from_dict(QRELS), path)
    assert read_qrels(path).to_dict() == QRELS


@pytest.mark.parametrize("writer", [write_trec_run, write_jsonl_run])
def test_runs_round_trip_through_every_format(tmp_path, writer):
    path = tmp_path / "run"
    writer(Run.from_dict(RUN, name="bm25"), path)
    assert read_run(path).to_dict() == RUN


def test_trec_run_ranks_are_written_in_trec_eval_order(tmp_path):
    path = tmp_path / "run.trec"
    write_trec_run(Run.from_dict(RUN, name="bm25"), path)
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[:3] == ["q1 Q0 d3 1 1.25 bm25", "q1 Q0 d1 2 0.5 bm25", "q1 Q0 文档-7 3 -3.0 bm25"]
    assert lines[3:] == ["q2 Q0 d9 1 2.0 bm25", "q2 Q0 d1 2 2.0 bm25"]


def test_the_run_name_is_the_tag_of_a_trec_run(tmp_path):
    path = tmp_path / "whatever.trec"
    path.write_text("q1 Q0 d1 1 1.0 my-system\n")
    assert read_run(path).name == "my-system"


def test_runs_of_spaces_and_tabs_are_read(tmp_path):
    path = tmp_path / "run.trec"
    path.write_text("q1  Q0\td1 1   0.5 tag\nq1 Q0 d2 2 0.25 tag\n\n")
    assert read_run(path).to_dict() == {"q1": {"d1": 0.5, "d2": 0.25}}


def test_the_rank_column_is_ignored_in_favour_of_the_score(tmp_path):
    path = tmp_path / "run.trec"
    path.write_text("q1 Q0 d1 1 0.1 tag\nq1 Q0 d2 2 0.9 tag\n")
    assert read_run(path).to_dict() == {"q1": {"d1": 0.1, "d2": 0.9}}


@pytest.mark.parametrize(
    "content, line, message",
    [
        ("q1 Q0 d1 1 0.5 tag\nq1 Q0 d2 2 tag\n", 2, "expected 6 fields"),
        ("q1 Q0 d1 1 0.5 tag\nq1 Q0 d2 2 high tag\n", 2, "score must be a number"),
        ("q1 Q0 d1 1 0.5 tag\nq1 Q0 d2 2 nan tag\n", 2, "score must be finite"),
        ("q1 Q0 d1 1 0.5 tag\nq1 Q0 d2 2 1e400 tag\n", 2, "score must be finite"),
        ("q1 Q0 d1 1 0.5 tag\nq1 Q0 d2 2 8_0 tag\n", 2, "score must be a number, got '8_0'"),
        ("q1 Q0 d1 1 0.5 tag\nq1 Q0 d2 2 \uff18 tag\n", 2, "score must be a number"),
        ("q1 Q0 d1 1 0.5 tag\nq2 Q0 d1 1 0.5 tag\nq1 Q0 d1 3 0.2 tag\n", 3, "repeats line 1"),
    ],
)
def test_a_bad_run_line_is_reported_with_file_and_line(tmp_path, content, line, message):
    path = tmp_path / "run.trec"
    path.write_text(content)
    with pytest.raises(InputError) as error:
        read_run(path)
    assert error.value.path == str(path) and error.value.line == line
    assert message in str(error.value)
    assert f"{path}:{line}:" in str(error.value)


@pytest.mark.parametrize(
    "content, line, message",
    [
        ("q1 0 d1 1\nq1 0 d2\n", 2, "expected 4 fields"),
        ("q1 0 d1 1\nq1 0 d2 1.5\n", 2, "grade must be an integer"),
        ("q1 0 d1 1\nq1 0 d2 NA\n", 2, "grade must be an integer, got 'NA'"),
        ("q1 0 d1 null\nq1 0 d2 1\n", 1, "grade must be an integer, got 'null'"),
        ("q1 0 d1 1\nq1 0 d2 0x10\n", 2, "grade must be an integer, got '0x10'"),
        ("q1 0 d1 1\nq1 0 d2 1_0\n", 2, "grade must be an integer, got '1_0'"),
        ("q1 0 d1 1\nq1 0 d2 99999999999999999999\n", 2, "out of range"),
        ("q1 0 d1 1\nq1 0 d1 2\n", 2, "repeats line 1"),
    ],
)
def test_a_bad_trec_qrels_line_is_reported_with_file_and_line(tmp_path, content, line, message):
    path = tmp_path / "qrels.txt"
    path.write_text(content)
    with pytest.raises(InputError, match=message) as error:
        read_qrels(path)
    assert error.value.line == line


@pytest.mark.parametrize("grade", ["very", "", "NA", "NaN", "0x1", "2.0"])
def test_a_bad_beir_qrels_line_is_reported_with_file_and_line(tmp_path, grade):
    path = tmp_path / "test.tsv"
    path.write_text(f"query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t{grade}\n")
    with pytest.raises(InputError, match=r"expected 3 tab-separated fields|score must be an integer") as error:
        read_qrels(path)
    assert error.value.line == 3


def test_a_file_that_starts_with_a_byte_order_mark_is_read_by_every_reader(tmp_path):
    """Excel and Notepad save a BOM: the line-by-line reader (runs of spaces send a file to it) and the format
    detection drop it as Arrow's parser does."""
    bom = "\ufeff"
    files = {
        "qrels.trec": "q1 0 d1 2\nq1  0 d2 1\n",
        "qrels.tsv": "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\t1\n",
        "qrels.jsonl": '{"query_id": "q1", "chunk_id": "d1", "grade": 2}\n'
        '{"query_id": "q1", "chunk_id": "d2", "grade": 1}\n',
    }
    for name, text in files.items():
        (tmp_path / name).write_text(bom + text, encoding="utf-8")
        assert read_qrels(tmp_path / name).to_dict() == {"q1": {"d1": 2, "d2": 1}}, name
    (tmp_path / "run.trec").write_text(bom + "q1 Q0 d1 1 0.5 tag\nq1  Q0 d2 2 0.25 tag\n", encoding="utf-8")
    (tmp_path / "run.jsonl").write_text(
        bom + '{"query_id": "q1", "results": [{"chunk_id": "d1", "score": 0.5}]}\n', encoding="utf-8"
    )
    assert read_run(tmp_path / "run.trec").to_dict() == {"q1": {"d1": 0.5, "d2": 0.25}}
    assert read_run(tmp_path / "run.jsonl").to_dict() == {"q1": {"d1": 0.5}}


@pytest.mark.parametrize(
    "line, message",
    [
        ('{"query_id": "q1", "chunk_id": "d1", "grade": 1e20}', "out of range"),
        ('{"query_id": "q1", "chunk_id": "d1", "grade": 100000000000000000000}', "out of range"),
        ('{"query_id": "q1", "chunk_id": "d1", "grade": 1.5}', "must be an integer"),
        ('{"query_id": "q1", "chunk_id": "d1", "grade": null}', "must be an integer"),
    ],
)
def test_a_jsonl_grade_that_is_no_64_bit_integer_is_refused_with_its_line(tmp_path, line, message):
    path = tmp_path / "qrels.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(InputError, match=message) as error:
        read_qrels(path)
    assert error.value.line == 1


def test_a_jsonl_score_too_large_for_a_float_is_refused_with_its_line(tmp_path):
    path = tmp_path / "run.jsonl"
    path.write_text('{"query_id": "q1", "results": [{"chunk_id": "d1", "score": 1' + "0" * 400 + "}]}\n")
    with pytest.raises(InputError, match="'score' is out of range") as error:
        read_run(path)
    assert error.value.line == 1


def test_qrels_built_in_memory_refuse_a_missing_grade():
    import pyarrow as pa

    table = pa.table({"query_id": ["q1", "q1"], "chunk_id": ["a", "b"], "grade": pa.array([1, None], pa.int64())})
    with pytest.raises(InputError, match="missing grade"):
        Qrels(table)


@pytest.mark.parametrize(
    "content, line, message",
    [
        (
            '{"query_id": "q1", "results": [{"chunk_id": "a", "score": 1}]}\n{"query_id": "q2", "results": [\n',
            2,
            "not valid JSON",
        ),
        ('{"query_id": "q1"}\n', 1, "missing 'results'"),
        ('{"query_id": "q1", "results": [{"chunk_id": "a", "score": "high"}]}\n', 1, "'score' must be a number"),
        ('{"results": []}\n', 1, "missing or empty 'query_id'"),
        ("[1, 2]\n", 1, "expected a JSON object"),
        (
            '{"query_id": "q1", "results": [{"chunk_id": "a", "score": 1}, {"chunk_id": "a", "score": 2}]}\n',
            1,
            "repeats line 1",
        ),
    ],
)
def test_a_bad_jsonl_run_line_is_reported_with_file_and_line(tmp_path, content, line, message):
    path = tmp_path / "run.jsonl"
    path.write_text(content)
    with pytest.raises(InputError, match=message) as error:
        read_run(path)
    assert error.value.line == line


def test_undecodable_bytes_are_reported_with_the_line(tmp_path):
    path = tmp_path / "run.trec"
    path.write_bytes(b"q1 Q0 d1 1 0.5 tag\nq1 Q0 d\xff\xfe2 2 0.25 tag\n")
    with pytest.raises(InputError, match="not valid UTF-8") as error:
        read_run(path)
    assert error.value.line == 2


@pytest.mark.parametrize("reader", [read_qrels, read_run])
def test_empty_missing_and_directory_inputs_are_clear_errors(tmp_path, reader):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    with pytest.raises(InputError, match="is empty"):
        reader(empty)
    with pytest.raises(InputError, match="no such file"):
        reader(tmp_path / "missing.txt")
    with pytest.raises(InputError, match="is a directory"):
        reader(tmp_path)


def test_an_unrecognised_layout_says_which_formats_are_expected(tmp_path):
    path = tmp_path / "odd.txt"
    path.write_text("q1,d1,1\n")
    with pytest.raises(InputError, match="cannot tell the qrels format"):
        read_qrels(path)


def test_duplicate_pairs_in_a_run_built_in_memory_are_an_error_not_merged():
    import pyarrow as pa

    table = pa.table({"query_id": ["q1", "q1", "q2"], "chunk_id": ["a", "a", "a"], "score": [1.0, 2.0, 1.0]})
    with pytest.raises(InputError, match=r"lists \(q1, a\) more than once"):
        Run(table)


def test_qrels_from_dict_refuses_non_integer_grades():
    with pytest.raises(InputError, match="must be an integer"):
        Qrels.from_dict({"q1": {"d1": 0.5}})


@pytest.mark.parametrize(
    "name, text", [("qrels.trec", "q1\u00a0x 0 d1 1\n"), ("run.trec", "q1\u00a0x Q0 d1 1 0.5 t\n")]
)
def test_a_no_break_space_in_an_id_is_named_not_taken_for_a_field_gap(tmp_path, name, text):
    """trec_eval splits fields on ASCII whitespace alone, so the no-break space is inside the id, which the id check
    refuses; it is not an unknown layout with five fields."""
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match="cannot contain whitespace") as error:
        (read_qrels if name.startswith("qrels") else read_run)(path)
    assert error.value.line == 1


def test_a_grade_with_a_plus_sign_is_read_as_trec_eval_reads_it(tmp_path):
    (tmp_path / "qrels.trec").write_text("q1 0 d1 +1\nq1 0 d2 -1\n", encoding="utf-8")
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t+1\nq1\td2\t-1\n", encoding="utf-8")
    for name in ("qrels.trec", "qrels.tsv"):
        assert read_qrels(tmp_path / name).to_dict() == {"q1": {"d1": 1, "d2": -1}}, name
