"""Chunkers on real text (SciFact) and on hard Unicode: exact spans, full coverage, bounded overlap, stable ids."""

from __future__ import annotations

import hashlib
import json
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testset_builder.corpus import ChunkingConfig, chunk_document
from testset_builder.corpus.chunkers import _encoding, _joins_previous
from testset_builder.records import Document

CONFIGS = [
    ChunkingConfig(chunker="recursive", size=400, overlap=80),
    ChunkingConfig(chunker="sentence", size=400, overlap=80),
    ChunkingConfig(chunker="tokens", size=96, overlap=16),
    ChunkingConfig(chunker="markdown", size=400, overlap=80),
]


def check_chunks(document: Document, config: ChunkingConfig, chunks, bounded: bool = True) -> None:
    """``bounded``: every chunk fits the size (false when single characters, such as a family emoji of 17 tokens,
    are longer than the window and are kept whole)."""
    text = document.text
    assert all(text[c.start : c.end] == c.text and c.end > c.start for c in chunks)
    if not text:
        assert chunks == []
        return
    assert chunks[0].start == 0 and chunks[-1].end == len(text), "spans must cover the document"
    for before, after in pairwise(chunks):
        assert before.start < after.start <= before.end, "no gap and forward progress"
        if config.chunker != "tokens":
            assert before.end - after.start <= config.overlap
    for chunk in chunks:
        assert not _joins_previous(chunk.text[0]) and not (chunk.start and text[chunk.start - 1] == "\u200d")
        if not bounded:
            continue
        if config.chunker == "tokens":
            assert len(_encoding(config.encoding).encode_ordinary(chunk.text)) <= config.size + 2
        elif " " in text:
            assert len(chunk.text) <= config.size


@pytest.fixture(scope="module")
def scifact_documents(scifact_dir):
    from testset_builder.corpus.loaders import load_sources

    loaded = load_sources([scifact_dir])  # ingested as a BEIR folder
    assert not loaded.skipped
    return loaded.documents


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.chunker)
def test_every_scifact_document_chunks_into_exact_covering_spans_with_stable_ids(scifact_documents, config):
    assert len(scifact_documents) == 5183
    first = [chunk_document(d, config) for d in scifact_documents]
    for document, chunks in zip(scifact_documents, first):
        check_chunks(document, config, chunks)
    again = [chunk_document(d, config) for d in scifact_documents]
    assert [[c.chunk_id for c in cs] for cs in again] == [[c.chunk_id for c in cs] for cs in first]
    ids = [c.chunk_id for cs in first for c in cs]
    assert len(ids) == len(set(ids))


def test_editing_one_document_changes_only_its_chunk_ids(scifact_documents):
    config = CONFIGS[0]
    documents = scifact_documents[:50]
    before = {c.chunk_id for d in documents for c in chunk_document(d, config)}
    edited = documents[7].model_copy(update={"text": documents[7].text + " An added closing sentence."})
    after_docs = [edited if d.doc_id == edited.doc_id else d for d in documents]
    after = {c.chunk_id for d in after_docs for c in chunk_document(d, config)}
    changed = before ^ after
    assert changed and all(chunk_id.startswith(f"{edited.doc_id}#") for chunk_id in changed)


UNICODE_TEXT = (
    "検索拡張生成は、関連する文書を見つけることから始まる。再現率が低ければ、後段は何も取り戻せない。"
    " الاسترجاع هو الخطوة الأولى؛ إذا لم يُسترجع المقطع الصحيح فلن يصلحه أي شيء بعده. "
    "Emoji: 👩‍👩‍👧‍👦 family, 👍🏽 thumbs, ❤️ heart, 🇯🇵 flag. "
    "Combining: e\u0301te\u0301, n\u0303, a\u0308\u0304, Z\u0351\u0352\u0353algo. "
    "한국어 문장도 있습니다. Ελληνικά κείμενα. Русский текст."
)


@pytest.mark.parametrize(
    "config",
    [
        ChunkingConfig(chunker="recursive", size=7, overlap=3),
        ChunkingConfig(chunker="sentence", size=11, overlap=4),
        ChunkingConfig(chunker="tokens", size=3, overlap=1),
        ChunkingConfig(chunker="tokens", size=1, overlap=0),
        ChunkingConfig(chunker="recursive", size=1, overlap=0),
    ],
    ids=lambda c: f"{c.chunker}-{c.size}-{c.overlap}",
)
def test_cjk_arabic_emoji_and_combining_marks_are_never_cut_inside_a_character(config):
    document = Document(doc_id="unicode", text=UNICODE_TEXT)
    chunks = chunk_document(document, config)
    check_chunks(document, config, chunks, bounded=False)
    for chunk in chunks:
        chunk.text.encode("utf-8")
        assert not _joins_previous(chunk.text[0])
    assert "".join(UNICODE_TEXT[c.start : c.end] for c in _non_overlapping(chunks)) == UNICODE_TEXT


def _non_overlapping(chunks):
    out, covered = [], 0
    for c in chunks:
        out.append(
            c.model_copy(update={"start": covered, "text": UNICODE_TEXT[covered : c.end]}) if c.start < covered else c
        )
        covered = c.end
    return out


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(st.characters(blacklist_categories=("Cs",)), max_size=8),
            st.sampled_from(["\n", "# ", "```", " ", ". ", "\u200d", "\u0301"]),
        ),
        max_size=60,
    ).map("".join),
    st.sampled_from(["recursive", "sentence", "tokens", "markdown"]),
    st.integers(2, 40),
    st.data(),
)
def test_any_text_chunks_into_exact_covering_spans(text, kind, size, data):
    overlap = data.draw(st.integers(0, size - 1))
    config = ChunkingConfig(chunker=kind, size=size, overlap=overlap)
    document = Document(doc_id="d", text=text)
    chunks = chunk_document(document, config)
    assert all(text[c.start : c.end] == c.text for c in chunks)
    if text:
        assert chunks[0].start == 0 and chunks[-1].end == len(text)
        assert all(a.start < b.start <= a.end for a, b in pairwise(chunks))


def test_an_empty_document_has_no_chunks():
    assert chunk_document(Document(doc_id="e", text=""), CONFIGS[0]) == []


MARKDOWN = """# Metrics

Recall@k is the share of relevant chunks found in the top k. It answers: did we find it at all?

## nDCG

nDCG rewards putting the most relevant chunks first. Grades are 0, 1 and 2.

```python
def dcg(grades):
    return sum(g / math.log2(i + 2) for i, g in enumerate(grades))
# a heading inside code is not a heading
```

### Ideal ranking

The ideal ranking sorts every judged chunk by grade.

# Pipeline

Chunk, synthesize, propose, review, release, score.
"""


def test_markdown_chunks_keep_heading_paths_and_never_split_code_blocks():
    document = Document(doc_id="guide.md", text=MARKDOWN)
    config = ChunkingConfig(chunker="markdown", size=60, overlap=10)
    chunks = chunk_document(document, config)
    check_chunks(document, config, chunks, bounded=False)
    code = MARKDOWN[MARKDOWN.index("```python") : MARKDOWN.index("```\n\n###") + 4]
    assert any(c.text == code for c in chunks), "the code block is one chunk"
    assert all(len(c.text) <= 60 for c in chunks if "```" not in c.text)
    paths = {c.text.split("\n")[0]: c.metadata["headings"] for c in chunks}
    assert paths["### Ideal ranking"] == ["Metrics", "nDCG", "Ideal ranking"]
    assert paths["# Pipeline"] == ["Pipeline"]
    for chunk in chunks:
        assert chunk.text.count("# ") <= 1 or "```" in chunk.text, "a chunk never crosses a heading"


@pytest.mark.parametrize("chunker", ["recursive", "sentence", "markdown"])
def test_the_overlap_asked_for_is_present_between_neighbours_even_when_sentences_are_longer_than_it(chunker):
    sentence = "Retrieval evaluation compares what a system found with what a person judged relevant to the need. "
    text = "# Notes\n\n" + sentence * 30 if chunker == "markdown" else sentence * 30
    document = Document(doc_id="d", text=text)
    config = ChunkingConfig(chunker=chunker, size=300, overlap=60)  # each sentence (99 characters) exceeds the overlap
    chunks = chunk_document(document, config)
    check_chunks(document, config, chunks)
    pairs = list(pairwise(chunks))
    assert len(pairs) > 5
    for before, after in pairs:
        repeated = before.end - after.start
        assert 0 < repeated <= 60, (before.end, after.start)
        assert text[after.start - 1].isspace()  # a carried tail starts at a word
    none = chunk_document(document, ChunkingConfig(chunker=chunker, size=300, overlap=0))
    assert all(before.end == after.start for before, after in pairwise(none))


def chunk_record(chunk) -> dict:
    """A validated chunk as the ingest's chunk record (corpus/batches.py's module docstring gives the shape)."""
    from testset_builder.corpus.boilerplate import text_reason

    return {
        "chunk_id": chunk.chunk_id,
        "doc_id": chunk.doc_id,
        "text": chunk.text,
        "start": chunk.start,
        "end": chunk.end,
        "metadata": json.dumps(chunk.metadata, ensure_ascii=False, sort_keys=True),
        "text_sha256": hashlib.sha256(chunk.text.encode("utf-8")).hexdigest(),
        "boilerplate": text_reason(chunk.text),  # these documents carry no furniture spans: the text decides
    }


EVERY_CHUNKER = [
    *CONFIGS,
    ChunkingConfig(chunker="prechunked"),
    ChunkingConfig(chunker="recursive", size=60, overlap=0),
]


@pytest.mark.parametrize("config", EVERY_CHUNKER, ids=lambda c: f"{c.chunker}-{c.size}-{c.overlap}")
def test_ingest_batches_give_the_records_of_the_validated_chunks(config):
    """The ingest worker builds chunk records straight from spans (no model a chunk); they must be the records of
    :func:`chunk_document`'s validated chunks, metadata JSON included, byte for byte."""
    from testset_builder.corpus.batches import chunk_batch, document_record

    documents = [
        Document(doc_id="guide.md", text=MARKDOWN, title="Guide", metadata={"lang": "en"}),
        Document(doc_id="emoji.txt", text="Family 👨‍👩‍👧‍👦 photo. Café e\u0301 ok! " * 9),
        Document(doc_id="same.txt", text="Repeat me. " * 40),  # identical pieces: occurrence ranks in the ids
        Document(doc_id="empty.txt", text=""),
        Document(doc_id="one.txt", text="x"),
    ]
    expected = [chunk_record(c) for d in documents for c in chunk_document(d, config)]
    assert chunk_batch([document_record(d) for d in documents], config) == expected
    assert len(expected) > len(documents) or config.chunker == "prechunked"


def test_ingest_batches_give_the_records_of_the_validated_chunks_on_scifact(scifact_documents):
    from testset_builder.corpus.batches import chunk_batch, document_record

    for config in CONFIGS:
        expected = [chunk_record(c) for d in scifact_documents[:500] for c in chunk_document(d, config)]
        assert chunk_batch([document_record(d) for d in scifact_documents[:500]], config) == expected
