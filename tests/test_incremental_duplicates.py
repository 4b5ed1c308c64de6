"""The duplicate groups the store keeps incrementally are those the whole-corpus reference gives on the same live
chunks, whatever sequence of additions, changes and removals led there."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testset_builder.config import ChunkingConfig
from testset_builder.corpus.batches import chunk_batch, signature_batch
from testset_builder.corpus.dedup import duplicate_groups, minhash, shingles
from testset_builder.corpus.ingest import ingest
from testset_builder.corpus.loaders import stream_sources
from testset_builder.store import corpus as stored
from testset_builder.store import open_workspace

BASES = [
    "Recall at k measures the share of relevant chunks that the retriever places among the top k results for a query",
    "Graded gains in nDCG reward a highly relevant chunk at rank one more than a marginal one at rank five or six",
    "Reviewers disagree most on partially relevant passages, so kappa is reported per grade and per reviewer pair",
]
VARIANTS = [lambda t: t, lambda t: t.upper() + "  ", lambda t: t.replace("the", "a", 1), lambda t: t + " indeed"]
PRECHUNKED = ChunkingConfig(chunker="prechunked", size=1, overlap=0)


def stored_groups(db) -> list[tuple[str, list[str]]]:
    groups: dict[str, tuple[str, list[str]]] = {}
    for chunk_id, (group_id, kind) in sorted(stored_live_groups(db).items()):
        groups.setdefault(group_id, (kind, []))[1].append(chunk_id)
    return sorted(((kind, sorted(m)) for kind, m in groups.values()), key=lambda g: g[1])


def stored_live_groups(db):
    from testset_builder.store.rows import live_duplicate_groups

    return live_duplicate_groups(db)


def reference_groups(db):
    live = stored.live_chunk_texts(db)
    return duplicate_groups([r[0] for r in live], [r[1] for r in live])


operation = st.tuples(st.sampled_from(["put", "remove"]), st.integers(0, 7), st.integers(0, 2), st.integers(0, 3))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(operation, min_size=1, max_size=8))
def test_incremental_groups_equal_the_whole_corpus_reference_after_any_adds_changes_and_removals(tmp_path, ops):
    check_groups_after(tmp_path, ops)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(operation, min_size=1, max_size=8), st.integers(1, 4), st.integers(1, 40))
def test_groups_equal_the_reference_when_a_key_runs_over_blocks_and_keys_are_spilled_to_many_files(
    tmp_path, ops, block_keys, spill_entries
):
    """Tiny key blocks (a key shared by a few chunks runs over two or more) and tiny spill files (a large load's
    keys sorted in many parts)."""
    from testset_builder.store import duplicates

    original = duplicates.BLOCK_KEYS, duplicates.SPILL_ENTRIES
    duplicates.BLOCK_KEYS, duplicates.SPILL_ENTRIES = block_keys, spill_entries
    try:
        check_groups_after(tmp_path, ops)
    finally:
        duplicates.BLOCK_KEYS, duplicates.SPILL_ENTRIES = original


def check_groups_after(tmp_path, ops):
    import tempfile

    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    (folder / "anchor.txt").write_text("An anchor document that never changes, about pooling depth.", encoding="utf-8")
    with open_workspace(Path(tempfile.mkdtemp(dir=tmp_path)) / "ws", create=True) as ws:
        for kind, doc, base, variant in ops:
            path = folder / f"d{doc}.txt"
            if kind == "put":
                path.write_text(VARIANTS[variant](BASES[base]), encoding="utf-8")
            elif path.exists():
                path.unlink()
            ingest(ws, stream_sources([folder]), PRECHUNKED, allow_removal=True)
            assert stored_groups(ws.db) == reference_groups(ws.db)


def test_adding_one_file_counts_one_new_document_and_only_its_chunks(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(5):
        (folder / f"d{i}.txt").write_text(f"Document {i} talks about retrieval. " * 40, encoding="utf-8")
    config = ChunkingConfig(size=300, overlap=30)
    with open_workspace(tmp_path / "ws", create=True) as ws:
        first = ingest(ws, stream_sources([folder]), config)
        (folder / "new.txt").write_text("A new document about judging relevance. " * 20, encoding="utf-8")
        second = ingest(ws, stream_sources([folder]), config)
        expected = len(chunk_batch([{"doc_id": "new.txt", "text": (folder / "new.txt").read_text(), "title": "",
                                     "source": "", "metadata": "{}"}], config))  # fmt: skip
    assert (second.new, second.changed, second.unchanged, second.removed) == (1, 0, 5, 0)
    assert second.chunks_added == expected and second.chunks_removed == 0
    assert second.chunks_unchanged == first.chunks_added


def test_a_file_added_to_a_loaded_corpus_joins_its_near_twins_there_as_the_reference_groups_them(tmp_path):
    """The added file's chunks are looked up in the key blocks the first load built, which stay as they were (the
    added keys go beside them): its near and exact twins in the corpus, and its chunks' twins among themselves."""
    import json
    import random

    rng = random.Random(49)
    vocabulary = [f"term{i}" for i in range(400)]
    texts = [" ".join(rng.choice(vocabulary) for _ in range(60)) for _ in range(40)]

    def one_word_changed(text: str, at: int) -> str:
        words = text.split(" ")
        words[at] = "altered"
        return " ".join(words)

    added = {
        "near-3": one_word_changed(texts[3], 10),  # near twins of old chunks
        "near-17": one_word_changed(texts[17], 50),
        "near-17b": one_word_changed(texts[17], 5),  # a second one: both join the same old chunk
        "exact-8": texts[8].upper(),  # an exact twin once normalised
        "fresh": " ".join(rng.choice(vocabulary) for _ in range(60)),
        "fresh-twin": "",  # a near twin of "fresh", within the added file alone
    }
    added["fresh-twin"] = one_word_changed(added["fresh"], 30)
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "old.jsonl").write_text("".join(json.dumps({"_id": f"old-{i}", "text": t}) + "\n"
                                              for i, t in enumerate(texts)), encoding="utf-8")  # fmt: skip
    with open_workspace(tmp_path / "ws", create=True) as ws:
        ingest(ws, stream_sources([folder]), PRECHUNKED)
        blocks = ws.db.execute("SELECT rowid, first_key, keys, chunks FROM chunk_lsh_blocks ORDER BY rowid").fetchall()
        (folder / "new.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in added.items()),
                                          encoding="utf-8")  # fmt: skip
        summary = ingest(ws, stream_sources([folder]), PRECHUNKED)
        after = ws.db.execute("SELECT rowid, first_key, keys, chunks FROM chunk_lsh_blocks ORDER BY rowid").fetchall()
        groups = stored_groups(ws.db)
        reference = reference_groups(ws.db)
        doc_of = dict(ws.db.execute("SELECT chunk_id, doc_id FROM chunks"))
    assert (summary.new, summary.unchanged) == (6, 40)
    assert groups == reference
    assert sorted(sorted(doc_of[c] for c in members) for _, members in groups) == [
        ["exact-8", "old-8"], ["fresh", "fresh-twin"], ["near-17", "near-17b", "old-17"], ["near-3", "old-3"]
    ]  # fmt: skip
    assert blocks and after == blocks


def test_batch_signatures_equal_the_one_text_minhash_of_each_chunk():
    texts = [BASES[0], BASES[0].upper(), "two words", "", "x " * 2000]
    records = signature_batch([{"chunk_id": str(i), "text": t} for i, t in enumerate(texts)])
    from testset_builder.corpus.dedup import band_keys

    for text, record in zip(texts, records, strict=True):
        sets = shingles(text)
        packed = band_keys(minhash(sets)[None, :]).astype("<i8").tobytes() if len(sets) >= 2 else b""
        assert record["band_keys"] == packed


def test_chunks_are_found_by_their_exact_and_normalised_text_hashes(tmp_path):
    import hashlib

    from testset_builder.corpus.dedup import normalised_sha256

    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "a.txt").write_text(BASES[0], encoding="utf-8")
    (folder / "b.txt").write_text(BASES[0].upper(), encoding="utf-8")
    with open_workspace(tmp_path / "ws", create=True) as ws:
        ingest(ws, stream_sources([folder]), PRECHUNKED)
        exact = hashlib.sha256(BASES[0].encode()).hexdigest()
        assert stored.chunks_by_text_sha256(ws.db, [exact, "0" * 64]) == {exact: ["a.txt"]}
        folded = normalised_sha256(BASES[0])
        assert stored.chunks_by_normalised_sha256(ws.db, [folded]) == {folded: ["a.txt", "b.txt"]}


def test_a_prechunked_chunk_whose_text_changes_under_its_id_leaves_its_old_group_and_joins_its_new_twins(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for name, text in [("d0.txt", BASES[1]), ("d1.txt", BASES[1]), ("d2.txt", BASES[0])]:
        (folder / name).write_text(text, encoding="utf-8")
    with open_workspace(tmp_path / "ws", create=True) as ws:
        ingest(ws, stream_sources([folder]), PRECHUNKED)
        assert stored_groups(ws.db) == [("exact", ["d0.txt", "d1.txt"])]
        (folder / "d0.txt").write_text(BASES[0], encoding="utf-8")  # d0.txt's one chunk keeps its id, not its text
        ingest(ws, stream_sources([folder]), PRECHUNKED)
        assert stored_groups(ws.db) == reference_groups(ws.db) == [("exact", ["d0.txt", "d2.txt"])]


near_copy = st.tuples(st.integers(0, 2), st.integers(-1, 12), st.booleans())  # base, word altered (-1: none), upper


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(near_copy, min_size=2, max_size=14), st.integers(1, 6))
def test_a_first_load_groups_as_the_whole_corpus_reference_however_few_candidate_pairs_are_bounded_at_once(
    tmp_path, documents, candidate_slice
):
    import tempfile

    from testset_builder.corpus import regroup

    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    for i, (base, altered, upper) in enumerate(documents):
        words = BASES[base].split()
        if altered >= 0:
            words[altered] = "altered"
        text = " ".join(words)
        (folder / f"d{i}.txt").write_text(text.upper() if upper else text, encoding="utf-8")
    original = regroup.CANDIDATE_SLICE
    regroup.CANDIDATE_SLICE = candidate_slice
    try:
        with open_workspace(Path(tempfile.mkdtemp(dir=tmp_path)) / "ws", create=True) as ws:
            ingest(ws, stream_sources([folder]), PRECHUNKED)
            assert stored_groups(ws.db) == reference_groups(ws.db)
    finally:
        regroup.CANDIDATE_SLICE = original


@settings(max_examples=80, deadline=None)
@given(
    st.sets(st.tuples(st.integers(1, 30), st.integers(0, 6)), max_size=60),
    st.integers(1, 8),
    st.integers(1, 7),
    st.sets(st.integers(1, 30), max_size=10),
)
def test_first_load_candidates_are_every_pair_of_judged_rows_sharing_a_key_however_sliced(
    entries, size, block, unjudged
):
    """Candidates come from (key, row) entries in key order, read a block at a time (a run of one key may go on
    over several blocks) and made :data:`~.regroup.CANDIDATE_SLICE` pairs at a time; rows not judged (a later copy,
    a removed chunk) take no part."""
    import numpy as np

    from testset_builder.corpus import regroup

    spread = {k: (k * 0x9E3779B97F4A7C15) % (1 << 64) for k in range(7)}  # keys with their top bits set too
    ordered = sorted(entries, key=lambda e: (spread[e[1]], e[0]))
    keys = np.array([spread[k] for _, k in ordered], dtype="<u8")
    rows = np.array([r for r, _ in ordered], dtype="<i8")
    blocks = [(keys[i : i + block], rows[i : i + block]) for i in range(0, len(keys), block)]
    judged = np.ones(31, dtype=bool)
    judged[sorted(unjudged)] = False
    original = regroup.CANDIDATE_SLICE
    regroup.CANDIDATE_SLICE = size
    try:
        runs = regroup._shared_key_runs(blocks, judged)
        made = [pair for a, b in regroup._candidate_slices(*runs) for pair in zip(a, b)]
    finally:
        regroup.CANDIDATE_SLICE = original
    expected = [
        (a, b)
        for i, (a, key) in enumerate(ordered)
        for b, other in ordered[i + 1 :]
        if key == other and judged[a] and judged[b]
    ]
    assert sorted(tuple(sorted(map(int, pair))) for pair in made) == sorted(tuple(sorted(p)) for p in expected)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 4)), min_size=1, max_size=60), st.integers(1, 5))
def test_key_blocks_hold_every_key_and_chunk_once_in_order_however_often_given(entries, block):
    """A rebuild may meet a (key, chunk) entry twice (a chunk signed again keeps its old keys too): the blocks hold
    each once, sorted by key then chunk, cut every ``block`` entries."""
    import numpy as np

    from testset_builder.store import duplicates

    spread = [(k * 0x9E3779B97F4A7C15) % (1 << 64) for k in range(6)]
    given_entries = np.array([(spread[k], c) for k, c in entries], dtype=[("key", "<u8"), ("chunk", "<i8")])

    class Written:
        rows: list = []

        def executemany(self, sql, rows):
            self.rows = list(rows)

    written = Written()
    original = duplicates.BLOCK_KEYS
    duplicates.BLOCK_KEYS = block
    try:
        duplicates._write_blocks(written, given_entries)
    finally:
        duplicates.BLOCK_KEYS = original
    held = [
        (key, chunk)
        for _, keys, chunks in written.rows
        for key, chunk in zip(np.frombuffer(keys, "<u8").tolist(), np.frombuffer(chunks, "<i8").tolist())
    ]
    assert held == sorted({(spread[k], c) for k, c in entries})
    assert all(len(keys) <= 8 * block for _, keys, _ in written.rows)
    for first, keys, _ in written.rows:  # the first key, top bit flipped, as a signed integer: SQLite's order
        assert np.array([first], "<i8").view("<u8")[0] ^ np.uint64(1 << 63) == np.frombuffer(keys, "<u8")[0]
