"""A BM25 index built in bounded memory, written in bm25s's on-disk format so ``bm25s.BM25.load(mmap=True)`` serves
it from disk.

bm25s's ``index()`` holds every document's tokens as Python lists (gigabytes at a million chunks). Here texts are
tokenized a batch at a time (by the same :func:`~testset_builder.corpus.language.tokenize`), each batch's
(document, term, term frequency) postings are spilled to a file, and a second pass over that file computes each
posting's score and writes it straight into its column of the memory-mapped CSC matrix. The arithmetic repeats
bm25s's "lucene" method step by step (idf by ``math.log``, the term-frequency part in float64, one rounding to
float32), so the matrix equals the one bm25s builds bit for bit; tests compare the two.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from ..corpus.language import tokenize

POSTING = np.dtype([("doc", "<i4"), ("term", "<i4"), ("tf", "<i4")])
SPILL = "postings.spill"
READ = 2_000_000  # postings scored per step of the second pass (24 MB)


def batch_postings(tokenized, vocab: dict[str, int], first_doc: int) -> tuple[np.ndarray, np.ndarray]:
    """A tokenized batch's postings (one per distinct term of a document, sorted by document then term, with global
    term ids from ``vocab``, which grows) and its documents' lengths in tokens."""
    remap = np.empty(len(tokenized.vocab), dtype=np.int64)
    for word, local in tokenized.vocab.items():
        remap[local] = vocab.setdefault(word, len(vocab))
    lengths = np.fromiter((len(ids) for ids in tokenized.ids), dtype=np.int64, count=len(tokenized.ids))
    flat = np.fromiter(itertools.chain.from_iterable(tokenized.ids), dtype=np.int64, count=int(lengths.sum()))
    docs = np.repeat(np.arange(first_doc, first_doc + len(lengths), dtype=np.int64), lengths)
    keys, tf = np.unique((docs << 32) | remap[flat], return_counts=True)
    postings = np.empty(len(keys), dtype=POSTING)
    postings["doc"], postings["term"], postings["tf"] = keys >> 32, keys & 0xFFFFFFFF, tf
    return postings, lengths


def lucene_idf(df: np.ndarray, n_docs: int) -> np.ndarray:
    """idf = ln(1 + (N - df + 0.5) / (df + 0.5)) per term (0 where df = 0), by ``math.log`` as bm25s computes it."""
    idf = np.zeros(len(df), dtype=np.float32)
    for value in np.unique(df[df > 0]).tolist():
        idf[df == value] = math.log(1 + (n_docs - value + 0.5) / (value + 0.5))
    return idf


def lucene_scores(
    tf: np.ndarray, doc_len: np.ndarray, avg_len: float, idf: np.ndarray, k1: float, b: float
) -> np.ndarray:
    """idf * tf / (k1 * (1 - b + b * |d| / avgdl) + tf) per posting (Lucene's BM25; Kamphuis et al., ECIR 2020),
    in float64 and in bm25s's order of operations, rounded once to float32."""
    tf = tf.astype(np.float64)
    return (idf.astype(np.float64) * (tf / (k1 * ((1 - b) + b * doc_len / avg_len) + tf))).astype(np.float32)


def write_bm25(path: Path, text_batches: Iterable[list[str]], language: str, stem: bool, k1: float, b: float) -> int:
    """Index the texts (in order; a batch at a time) into the new directory ``path``; returns how many."""
    path.mkdir(parents=True)
    vocab: dict[str, int] = {}
    df = np.zeros(0, dtype=np.int64)
    lengths: list[np.ndarray] = []
    n_docs = 0
    with open(path / SPILL, "wb") as spill:
        for texts in text_batches:
            postings, batch_lengths = batch_postings(tokenize(texts, language, stem), vocab, n_docs)
            postings.tofile(spill)
            df = np.concatenate([df, np.zeros(len(vocab) - len(df), dtype=np.int64)])
            df += np.bincount(postings["term"], minlength=len(vocab))
            lengths.append(batch_lengths)
            n_docs += len(batch_lengths)
    df = np.concatenate([df, np.zeros(len(vocab) - len(df), dtype=np.int64)])
    vocab[""] = len(vocab)  # bm25s's empty token, beyond the matrix's columns as bm25s leaves it
    doc_len = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    avg_len = float(doc_len.sum()) / n_docs if n_docs else 1.0
    _write_matrix(path, df, doc_len, avg_len, lucene_idf(df, n_docs), k1, b)
    (path / SPILL).unlink()
    (path / "vocab.index.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    params = {"k1": k1, "b": b, "delta": 0.5, "method": "lucene", "idf_method": "lucene", "dtype": "float32"}
    params.update({"int_dtype": "int32", "num_docs": n_docs, "backend": "numpy"})
    (path / "params.index.json").write_text(json.dumps(params, indent=4), encoding="utf-8")
    return n_docs


def _write_matrix(
    path: Path, df: np.ndarray, doc_len: np.ndarray, avg_len: float, idf: np.ndarray, k1: float, b: float
) -> None:
    """The (documents x terms) score matrix in CSC form: column t holds term t's postings by document. The spilled
    postings come in document order; each step puts them in their columns with a stable sort by term."""
    indptr = np.zeros(len(df) + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    nnz = int(indptr[-1])
    data = np.lib.format.open_memmap(path / "data.csc.index.npy", mode="w+", dtype=np.float32, shape=(nnz,))
    indices = np.lib.format.open_memmap(path / "indices.csc.index.npy", mode="w+", dtype=np.int32, shape=(nnz,))
    heads = indptr[:-1].copy()
    with open(path / SPILL, "rb") as spill:
        while len(postings := np.fromfile(spill, dtype=POSTING, count=READ)):
            terms, docs = postings["term"], postings["doc"]
            scores = lucene_scores(postings["tf"], doc_len[docs], avg_len, idf[terms], k1, b)
            order = np.argsort(terms, kind="stable")
            sorted_terms = terms[order]
            rank = np.arange(len(order)) - np.searchsorted(sorted_terms, sorted_terms, side="left")
            where = heads[sorted_terms] + rank
            data[where], indices[where] = scores[order], docs[order]
            heads += np.bincount(terms, minlength=len(heads))
    data.flush()
    indices.flush()
    del data, indices
    np.save(path / "indptr.csc.index.npy", indptr)
