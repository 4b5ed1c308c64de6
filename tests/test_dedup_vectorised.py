"""The vectorised duplicate kernels give what the one-text definitions give: each chunk's shingle set, and the Jaccard
similarity of any pair, float for float (the incremental index must group exactly as the reference does)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from testset_builder.corpus import dedup
from testset_builder.corpus.dedup import jaccard, normalise, pair_jaccards, shingle_sets, shingles

words = st.sampled_from(["recall", "ndcg", "Recall", "the", "a", "pool", "ÿes", "日本", "x_y", "", " ", "\u00a0"])
texts = st.lists(st.lists(words, max_size=30).map(" ".join), min_size=1, max_size=25)


@settings(max_examples=60, deadline=None)
@given(texts, st.integers(1, 200), st.data())
def test_shingle_sets_and_pair_jaccards_equal_the_one_text_definitions(corpus, slice_characters, data):
    original = dedup.SLICE_CHARACTERS
    dedup.SLICE_CHARACTERS = slice_characters  # slicing the hashing changes nothing
    try:
        hashes, offsets = shingle_sets([normalise(t) for t in corpus])
    finally:
        dedup.SLICE_CHARACTERS = original
    for i, text in enumerate(corpus):
        run = hashes[offsets[i] : offsets[i + 1]]
        assert run.tolist() == sorted(shingles(text))
    index = st.integers(0, len(corpus) - 1)
    pairs = data.draw(st.lists(st.tuples(index, index), max_size=40))
    first = np.array([a for a, _ in pairs], dtype=np.int64)
    second = np.array([b for _, b in pairs], dtype=np.int64)
    expected = [jaccard(shingles(corpus[a]), shingles(corpus[b])) for a, b in pairs]
    assert pair_jaccards((hashes, offsets), first, second).tolist() == expected


@settings(max_examples=80, deadline=None)
@given(texts, st.data())
def test_the_sketch_bound_is_never_below_the_true_jaccard(corpus, data):
    from testset_builder.corpus.dedup import jaccard_upper_bounds, shingle_hashes, signatures_and_sketches

    hashes, offsets = shingle_hashes([normalise(t) for t in corpus])
    _, _, sketches = signatures_and_sketches(hashes, offsets)
    index = st.integers(0, len(corpus) - 1)
    pairs = data.draw(st.lists(st.tuples(index, index), min_size=1, max_size=40))
    first, second = [a for a, _ in pairs], [b for _, b in pairs]
    bounds = jaccard_upper_bounds(sketches[first], sketches[second])
    for (a, b), bound in zip(pairs, bounds.tolist(), strict=True):
        assert jaccard(shingles(corpus[a]), shingles(corpus[b])) <= bound + 1e-12


def test_the_sketch_bound_rules_out_unrelated_chunks_and_keeps_near_copies():
    from testset_builder.corpus.dedup import jaccard_upper_bounds, shingle_hashes, signatures_and_sketches

    base = " ".join(f"word{i}" for i in range(120))
    texts = [base, base.replace("word60", "altered"), " ".join(f"other{i}" for i in range(120))]
    _, _, sketches = signatures_and_sketches(*shingle_hashes([normalise(t) for t in texts]))
    near, unrelated = jaccard_upper_bounds(sketches[[0, 0]], sketches[[1, 2]]).tolist()
    assert near >= 0.8 > unrelated


WHITESPACE = [chr(c) for c in range(0x110000) if chr(c).isspace()]
plain_words = st.lists(st.sampled_from(["Recall", "ndcg", "ÿes", "日本", "x_y", "ﬁnal", "Straße"]), max_size=8)
runs = st.text(st.sampled_from(WHITESPACE), min_size=1, max_size=3)


@settings(max_examples=200, deadline=None)
@given(plain_words, st.data())
def test_texts_that_differ_only_in_whitespace_and_case_normalise_alike(words, data):
    spaced = [data.draw(st.text(st.sampled_from(WHITESPACE), max_size=2))]
    for word in words:
        spaced += [word.upper() if data.draw(st.booleans()) else word, data.draw(runs)]
    text = "".join(spaced)
    assert normalise(text) == normalise(" ".join(words)) == " ".join(normalise(word) for word in words)
