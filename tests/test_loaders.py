"""Loading a corpus: every format a user has, and bad input reported with file and line while the rest loads."""

from __future__ import annotations

import json

import pytest

from testset_builder.corpus.loaders import load_hf, load_jsonl, load_sources
from testset_builder.errors import InputError


def pdf_bytes(pages: list[str]) -> bytes:
    """A minimal valid PDF with one line of Helvetica text per page."""
    objects = [
        "<</Type/Catalog/Pages 2 0 R>>",
        f"<</Type/Pages/Kids[{' '.join(f'{3 + 2 * i} 0 R' for i in range(len(pages)))}]/Count {len(pages)}>>",
    ]
    font = 3 + 2 * len(pages)
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 20 100 Td ({text}) Tj ET"
        objects.append(
            f"<</Type/Page/Parent 2 0 R/MediaBox[0 0 400 144]/Contents {4 + 2 * i} 0 R/Resources<</Font<</F1 {font} "
            "0 R>>>>>>"
        )
        objects.append(f"<</Length {len(stream)}>>stream\n{stream}\nendstream")
    objects.append("<</Type/Font/Subtype/Type1/BaseFont/Helvetica>>")
    body, offsets = "%PDF-1.4\n", []
    for number, obj in enumerate(objects, start=1):
        offsets.append(len(body))
        body += f"{number} 0 obj\n{obj}\nendobj\n"
    xref = len(body)
    body += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n" + "".join(f"{o:010d} 00000 n \n" for o in offsets)
    body += f"trailer\n<</Size {len(objects) + 1}/Root 1 0 R>>\nstartxref\n{xref}\n%%EOF\n"
    return body.encode("latin-1")


@pytest.fixture
def messy_folder(tmp_path):
    folder = tmp_path / "docs"
    (folder / "guide").mkdir(parents=True)
    (folder / "guide" / "metrics.md").write_text("# Metrics\n\nRecall@k counts what was found.\n", encoding="utf-8")
    (folder / "notes.txt").write_text("Plain notes about nDCG.", encoding="utf-8")
    (folder / "page.html").write_text(
        "<html><head><title>RAG  eval</title><script>var x=1;</script></head><body><nav>Home | About</nav>"
        "<p>Retrieval is the first failure surface.</p><footer>(c) 2026</footer></body></html>",
        encoding="utf-8",
    )
    (folder / "paper.pdf").write_bytes(pdf_bytes(["First page on recall", "Second page on precision"]))
    (folder / "empty.txt").write_bytes(b"")
    (folder / "blob.txt").write_bytes(b"\x00\x01\x02binary")
    (folder / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (folder / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    (folder / "ignored.bin").write_bytes(b"not a corpus file")
    return folder


def test_a_folder_loads_every_readable_file_and_reports_the_rest(messy_folder):
    result = load_sources([messy_folder])
    documents = {d.doc_id: d for d in result.documents}
    assert sorted(documents) == ["guide/metrics.md", "notes.txt", "page.html", "paper.pdf"]
    assert (
        documents["page.html"].text == "Retrieval is the first failure surface."
        and documents["page.html"].title == "RAG eval"
    )
    pdf = documents["paper.pdf"]
    assert "First page on recall" in pdf.text and "Second page on precision" in pdf.text
    assert [p["page"] for p in pdf.metadata["pages"]] == [1, 2]
    assert pdf.text[pdf.metadata["pages"][1]["start"] :].startswith("Second page")
    reasons = {s.source.rsplit("/", 1)[1]: s.reason for s in result.skipped}
    assert reasons["empty.txt"] == "empty file"
    assert reasons["blob.txt"].startswith("binary file")
    assert reasons["latin1.txt"].startswith("not valid UTF-8")
    assert reasons["broken.pdf"].startswith("cannot read PDF")
    assert reasons["ignored.bin"].startswith("not a supported file type (.bin; supported: .htm, .html, .jsonl")


def test_strict_makes_the_first_bad_file_fatal(messy_folder):
    with pytest.raises(InputError, match="binary file"):
        load_sources([messy_folder], strict=True)


def test_a_jsonl_corpus_reports_bad_lines_and_repeated_ids_with_line_numbers(tmp_path):
    path = tmp_path / "corpus.jsonl"
    lines = [
        {"_id": "d1", "title": "One", "text": "first", "lang": "en"},
        "{not json",
        {"_id": "d2"},
        ["a", "list"],
        {"_id": "d1", "text": "again"},
        {"id": 3, "text": "numeric id via the fallback field"},
    ]
    path.write_text(
        "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines) + "\n", encoding="utf-8"
    )
    result = load_jsonl(path)
    assert [(d.doc_id, d.title, d.metadata) for d in result.documents] == [("d1", "One", {"lang": "en"}), ("3", "", {})]
    assert [(s.line, s.reason.split(" (")[0]) for s in result.skipped] == [
        (2, "not valid JSON"),
        (3, "missing or empty text field 'text'"),
        (4, "not a JSON object"),
        (5, "duplicate document id 'd1'"),
    ]


def test_scifact_loads_as_a_beir_folder(scifact_dir):
    result = load_sources([scifact_dir])
    assert len(result.documents) == 5183 and not result.skipped
    assert result.documents[0].title and result.documents[0].text


def test_hugging_face_datasets_load_from_memory_and_from_parquet(tmp_path):
    import datasets

    dataset = datasets.Dataset.from_dict(
        {"_id": ["a", "b"], "title": ["A", ""], "text": ["alpha text", "beta text"], "year": [2020, 2021]}
    )
    in_memory = load_hf(dataset)
    assert [(d.doc_id, d.text, d.metadata) for d in in_memory.documents] == [
        ("a", "alpha text", {"year": 2020}),
        ("b", "beta text", {"year": 2021}),
    ]
    dataset.to_parquet(str(tmp_path / "corpus.parquet"))
    from_file = load_sources([tmp_path / "corpus.parquet"])
    assert [d.doc_id for d in from_file.documents] == ["a", "b"]


def test_the_same_file_name_in_two_source_folders_gives_two_documents_named_by_their_folder(tmp_path):
    (tmp_path / "teamA").mkdir()
    (tmp_path / "teamB").mkdir()
    (tmp_path / "teamA" / "notes.md").write_text("one")
    (tmp_path / "teamB" / "notes.md").write_text("two")
    result = load_sources([tmp_path / "teamA", tmp_path / "teamB"])
    assert sorted((d.doc_id, d.text) for d in result.documents) == [
        ("teamA/notes.md", "one"),
        ("teamB/notes.md", "two"),
    ]
    assert [d.doc_id for d in load_sources([tmp_path / "teamA"]).documents] == ["notes.md"]  # one root: no prefix


def test_a_true_id_clash_between_sources_is_an_error_naming_both(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.jsonl").write_text('{"_id": "d1", "text": "one"}\n')
    (tmp_path / "b.jsonl").write_text('{"_id": "d1", "text": "two"}\n')
    with pytest.raises(InputError, match=r"document id 'd1' comes from two sources, .*x.jsonl and .*b.jsonl"):
        load_sources([tmp_path / "a", tmp_path / "b.jsonl"])


def test_a_folder_loads_jsonl_and_parquet_beside_its_text_files_and_a_beir_folder_inside_it(tmp_path):
    import datasets

    corpus = tmp_path / "corpus"
    (corpus / "docs").mkdir(parents=True)
    (corpus / "docs" / "a.md").write_text("# A\n\ntext a", encoding="utf-8")
    (corpus / "claims.jsonl").write_text('{"_id": "c1", "text": "a claim"}\n', encoding="utf-8")
    datasets.Dataset.from_dict({"_id": ["p1"], "text": ["a parquet row"]}).to_parquet(str(corpus / "rows.parquet"))
    (corpus / "beir").mkdir()
    (corpus / "beir" / "corpus.jsonl").write_text('{"_id": "b1", "title": "T", "text": "beir doc"}\n', encoding="utf-8")
    (corpus / "beir" / "queries.jsonl").write_text(
        '{"_id": "q1", "text": "a query, not a document"}\n', encoding="utf-8"
    )
    (corpus / ".git").mkdir()
    (corpus / ".git" / "HEAD").write_text("ref: refs/heads/main")
    result = load_sources([corpus])
    assert sorted(d.doc_id for d in result.documents) == ["b1", "c1", "docs/a.md", "p1"] and not result.skipped


def test_file_ids_escape_whitespace_reversibly(tmp_path):
    from urllib.parse import unquote

    (tmp_path / "my notes").mkdir()
    (tmp_path / "my notes" / "tab\there 100%.md").write_text("text")
    (document,) = load_sources([tmp_path]).documents
    assert document.doc_id == "my%20notes/tab%09here%20100%25.md"
    assert unquote(document.doc_id) == "my notes/tab\there 100%.md"


@pytest.mark.parametrize("make", ["empty folder", "all skipped", "glob without match"])
def test_chunking_a_load_that_finds_no_document_is_an_error_not_an_empty_corpus(make, tmp_path):
    from testset_builder.config import ChunkingConfig
    from testset_builder.corpus.ingest import ingest
    from testset_builder.store import open_workspace

    folder = tmp_path / "corpus"
    folder.mkdir()
    source = str(folder)
    if make == "all skipped":
        (folder / "empty.txt").write_bytes(b"")
        (folder / "image.png").write_bytes(b"\x89PNG")
    if make == "glob without match":
        source = str(folder / "*.md")
    if make == "glob without match":
        with pytest.raises(InputError, match="the glob matches no file"):
            load_sources([source])
        return
    loaded = load_sources([source])
    assert not loaded.documents
    with open_workspace(tmp_path / "ws") as ws, pytest.raises(InputError, match=r"no documents to chunk in .*corpus"):
        ingest(ws, loaded, ChunkingConfig())


def test_a_source_with_nothing_to_chunk_is_named_as_typed_not_as_an_absolute_path(tmp_path, monkeypatch):
    (tmp_path / "typo" / "bad").mkdir(parents=True)
    (tmp_path / "typo" / "bad" / "x.md").write_bytes(b"\x00\x01")
    from testset_builder.config import ChunkingConfig
    from testset_builder.corpus.ingest import ingest
    from testset_builder.store import open_workspace

    monkeypatch.chdir(tmp_path)
    with open_workspace(tmp_path / "ws") as ws, pytest.raises(InputError) as error:
        ingest(ws, load_sources(["typo/bad"]), ChunkingConfig())
    assert "no documents to chunk in typo/bad (1 binary file)" in str(error.value)
    assert str(tmp_path) not in str(error.value)


def test_a_missing_source_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="no such file, folder or glob match"):
        load_sources([tmp_path / "nope"])


def test_what_pypdf_warns_about_goes_into_the_report_with_the_file_not_to_stderr(tmp_path):
    import subprocess
    import sys

    folder = tmp_path / "pdfs"
    folder.mkdir()
    good = pdf_bytes(["Recall counts relevant chunks found", "Precision divides by k"])
    pointer = good.rsplit(b"startxref\n", 1)[1].split(b"\n")[0]
    damaged = good.replace(b"startxref\n" + pointer, b"startxref\n" + str(int(pointer) + 7).encode())
    (folder / "damaged.pdf").write_bytes(damaged)  # readable, but its cross-reference pointer is off
    args = ["chunk", str(folder), "--workspace", str(tmp_path / "ws"), "--json"]
    done = subprocess.run([sys.executable, "-m", "testset_builder", *args], capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    report = json.loads(done.stdout)
    assert report["documents"] == 1 and any(
        w.startswith(f"{folder / 'damaged.pdf'}: ") and "startxref" in w for w in report["warnings"]
    ), report["warnings"]
    loaded = load_sources([folder])
    assert loaded.notes and "Precision divides by k" in loaded.documents[0].text


def test_html_keeps_paragraphs_headings_code_and_table_rows_and_the_markdown_chunker_follows_its_headings(tmp_path):
    from testset_builder.config import ChunkingConfig
    from testset_builder.corpus.chunkers import chunk_document

    page = tmp_path / "guide.html"
    page.write_text(
        """<!doctype html><html><head><title>Eval  guide</title><style>p{}</style></head><body>
        <nav>Home | Docs</nav><header>site header</header>
        <h1>Retrieval
        metrics</h1>
        <p>Recall at k counts the relevant chunks
        found in the first k results.</p>
        <h2>Code</h2><pre>def recall(found, relevant):
            return len(found &amp; relevant) / len(relevant)</pre>
        <table><tr><th>metric</th><th>range</th></tr><tr><td>nDCG</td><td>0 to 1</td></tr></table>
        <ul><li>first <b>point</b></li><li>second</li></ul><p>a line<br>another line</p>
        <footer>(c) 2026</footer><script>track()</script></body></html>""",
        encoding="utf-8",
    )
    (document,) = load_sources([page]).documents
    assert document.title == "Eval guide"
    assert document.text.split("\n\n") == [
        "# Retrieval metrics",
        "Recall at k counts the relevant chunks found in the first k results.",  # a wrapped line is not a break
        "## Code",
        "```\ndef recall(found, relevant):\n            return len(found & relevant) / len(relevant)\n```",
        "metric | range\nnDCG | 0 to 1",  # cells apart, rows on lines
        "- first point\n- second",
        "a line\nanother line",
    ]
    chunks = chunk_document(document, ChunkingConfig(chunker="markdown", size=200, overlap=0))
    assert [c.metadata["headings"] for c in chunks] == [["Retrieval metrics"], ["Retrieval metrics", "Code"]]
    assert all(document.text[c.start : c.end] == c.text for c in chunks)


def test_a_jsonl_source_is_streamed_a_line_at_a_time_its_skips_known_once_read(tmp_path):
    from testset_builder.corpus.loaders import stream_sources

    path = tmp_path / "corpus.jsonl"
    lines = [json.dumps({"_id": f"d{i}", "text": f"text {i}"}) for i in range(3)] + ["{broken", '{"_id": "d9"}']
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    loaded = stream_sources([path])
    first = next(loaded.documents)
    assert first.doc_id == "d0" and loaded.skipped == [] and loaded.read == set()  # the rest is not read yet
    rest = list(loaded.documents)
    assert [d.doc_id for d in rest] == ["d1", "d2"]
    assert [(s.line, s.reason.split(" (")[0]) for s in loaded.skipped] == [
        (4, "not valid JSON"),
        (5, "missing or empty text field 'text'"),
    ]
    assert loaded.read == {str(path.resolve())}


@pytest.mark.parametrize("files, bytes_ahead", [(1, 1), (2, 50), (64, 16 << 20)])
def test_files_read_ahead_load_exactly_as_read_in_place(tmp_path, monkeypatch, files, bytes_ahead):
    """A folder's files are read by a thread a few ahead of the loop; whatever the window, the documents, their
    order and every skip reason are those of reading each file in place."""
    from testset_builder.corpus import loaders

    folder = tmp_path / "mixed"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("First document about recall.", encoding="utf-8")
    (folder / "b.md").write_text("# Title\n\nSecond, in markdown.", encoding="utf-8")
    (folder / "empty.txt").write_bytes(b"")
    (folder / "binary.txt").write_bytes(b"\x00\x01\x02 not text")
    (folder / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    (folder / "blank.txt").write_text("   \n", encoding="utf-8")
    (folder / "page.html").write_text("<html><title>T</title><body><p>Body text.</p></body></html>", "utf-8")
    (folder / "sub" / "c.txt").write_text("Third, in a subfolder. " * 40, encoding="utf-8")
    (folder / "rows.jsonl").write_text('{"_id": "r1", "text": "A row."}\n', encoding="utf-8")

    def loaded():
        result = load_sources([folder])
        return (
            [(d.doc_id, d.text, d.title, d.source) for d in result.documents],
            sorted((s.source, s.reason) for s in result.skipped),
            sorted(result.read),
        )

    with monkeypatch.context() as patch:  # no thread: each file read where it is loaded
        patch.setattr(loaders, "_read_ahead", lambda plans: ((plan, None) for plan in plans))
        in_place = loaded()
    monkeypatch.setattr(loaders, "READ_AHEAD_FILES", files)
    monkeypatch.setattr(loaders, "READ_AHEAD_BYTES", bytes_ahead)
    assert loaded() == in_place
    assert len(in_place[0]) == 5 and len(in_place[1]) == 4
