"""Ids that survive every format: whatever id the tool accepts, each of its writers emits a file its own reader
reads back unchanged; whatever id no format can carry is refused at the edge with the file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testset_builder.cli import main
from testset_builder.corpus.loaders import load_jsonl
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
from testset_builder.export.beir import beir_corpus_text, beir_queries_text, read_beir_corpus, read_beir_queries
from testset_builder.export.queries import read_queries
from testset_builder.records import id_problem
from testset_builder.tables import Qrels, Run

HOSTILE = [
    "#1",
    '"quoted"',
    "it's",
    "{brace",
    "[list]",
    "漢字/文書",
    "é\u0301",
    "emoji-🧪",
    "zero\u200bwidth",
    "x" * 3000,
    "q0",
    "NaN",
    "-1",
    "query-id",
    "a,b;c|d",
    "back\\slash",
    "%20",
    "mid\ufeffbom",
]
# any character but whitespace (every Unicode category Z) and controls (Cc); surrogates cannot be written as UTF-8
id_text = st.text(st.characters(blacklist_categories=("Zs", "Zl", "Zp", "Cc", "Cs")), min_size=1, max_size=40).filter(
    lambda s: id_problem(s) is None
)
ids = st.one_of(id_text, st.sampled_from(HOSTILE))


def round_trips(tmp_path: Path, qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]) -> None:
    labels, ranked = Qrels.from_dict(qrels), Run.from_dict(run, name="hostile")
    for name, write in (("q.trec", write_trec_qrels), ("q.tsv", write_beir_qrels), ("q.jsonl", write_jsonl_qrels)):
        write(labels, tmp_path / name)
        assert read_qrels(tmp_path / name).to_dict() == qrels, name
    for name, write in (("r.trec", write_trec_run), ("r.jsonl", write_jsonl_run)):
        write(ranked, tmp_path / name)
        assert read_run(tmp_path / name).to_dict() == run, name


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.dictionaries(ids, st.dictionaries(ids, st.integers(0, 3), min_size=1, max_size=4), min_size=1, max_size=4)
)
def test_every_writer_emits_what_its_own_reader_reads_back_for_any_accepted_id(tmp_path, data):
    run = {q: {c: float(len(c) + i) for i, c in enumerate(chunks)} for q, chunks in data.items()}
    round_trips(tmp_path, data, run)
    corpus = [
        {"_id": c, "title": "", "text": f"text of {c}"} for c in sorted({c for chunks in data.values() for c in chunks})
    ]
    (tmp_path / "corpus.jsonl").write_text(beir_corpus_text(corpus), encoding="utf-8")
    assert list(read_beir_corpus(tmp_path / "corpus.jsonl")) == [d["_id"] for d in corpus]
    queries = [{"_id": q, "text": f"query {i}"} for i, q in enumerate(sorted(data))]
    (tmp_path / "queries.jsonl").write_text(beir_queries_text(queries), encoding="utf-8")
    assert list(read_beir_queries(tmp_path / "queries.jsonl")) == [q["_id"] for q in queries]


@pytest.mark.parametrize(
    "bad", ["a b", "tab\there", "new\nline", "nb\u00a0sp", "line\u2028sep", "bell\x07", "\ufeffbom", ""]
)
def test_an_id_no_format_can_carry_is_refused_with_file_and_line(tmp_path, bad):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"_id": "ok", "text": "fine"}) + "\n" + json.dumps({"_id": bad, "text": "t"}) + "\n")
    result = load_jsonl(corpus)
    assert [d.doc_id for d in result.documents] == ["ok"] and result.skipped[0].line == 2
    queries = tmp_path / "queries.jsonl"
    queries.write_text(json.dumps({"_id": "q1", "text": "fine"}) + "\n" + json.dumps({"_id": bad, "text": "t"}) + "\n")
    if bad:  # an empty id is taken as no id, and the query gets one derived from its text
        with pytest.raises(InputError, match=r"queries.jsonl:2: an id cannot (contain|start)"):
            read_queries(queries, strict=True)
    if bad and "\n" not in bad:
        qrels = tmp_path / "qrels.tsv"
        qrels.write_text(f"query-id\tcorpus-id\tscore\nq1\tok\t1\nq1\t{bad}\t1\n", encoding="utf-8")
        with pytest.raises(InputError, match=r"qrels.tsv:3: (an id cannot|expected 3 tab-separated fields)"):
            read_qrels(qrels)


def test_a_release_with_hostile_ids_loads_exports_and_scores_with_the_tools_own_commands(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    documents = {f"d-{n}{h}": f"passage {n} about retrieval and ranking {n}" for n, h in enumerate(HOSTILE[:8])}
    corpus.write_text("".join(json.dumps({"_id": d, "text": t}) + "\n" for d, t in documents.items()), encoding="utf-8")
    ws = str(tmp_path / "ws")
    assert main(["chunk", str(corpus), "--workspace", ws, "--chunker", "prechunked", "--json"]) == 0
    qrels = tmp_path / "qrels.tsv"
    queries = tmp_path / "queries.jsonl"
    query_ids = [f"q{h}" for h in HOSTILE[:4]]
    queries.write_text(
        "".join(json.dumps({"_id": q, "text": f"passage {i}"}) + "\n" for i, q in enumerate(query_ids)),
        encoding="utf-8",
    )
    chunk_ids = list(documents)
    qrels.write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{chunk_ids[i]}\t2\n" for i, q in enumerate(query_ids)),
        encoding="utf-8",
    )
    assert (
        main(["import", str(qrels), "--queries", str(queries), "--workspace", ws, "--version", "1.0.0", "--json"]) == 0
    )
    capsys.readouterr()
    run = tmp_path / "bm25.trec"
    assert main(["baseline", "--release", f"{ws}@1.0.0", "--out", str(run)]) == 0
    assert main(["score", "--release", f"{ws}@1.0.0", "--run", str(run), "--json"]) == 0
    capsys.readouterr()
    for fmt in ("hf", "beir", "trec", "jsonl"):
        assert (
            main(["export", "--version", "1.0.0", "--format", fmt, "--out", str(tmp_path / fmt), "--workspace", ws])
            == 0
        )
    assert read_qrels(tmp_path / "trec" / "qrels.trec").to_dict() == {
        q: {chunk_ids[i]: 2} for i, q in enumerate(query_ids)
    }
    assert (
        read_qrels(tmp_path / "jsonl" / "qrels.jsonl").to_dict()
        == read_qrels(tmp_path / "beir" / "qrels" / "test.tsv").to_dict()
    )
