"""Cranfield 1400 (aeronautics) -> BEIR layout.

Source files (fbergh/IR_Project@1249c3f, data/cran/): cran.all.1400, cran.qry, cran.qrels.

Decisions (see README.md):
* Query ids: cran.qry numbers its queries 001..365 with gaps, but cran.qrels
  refers to queries by their position in cran.qry (1..225). We use the
  position as the query _id, as the qrels do.
* Grades: cran.qrels carries Cleverdon's codes, 1 = complete answer ...
  4 = minimum interest (lower is better). qrels/test.tsv holds
  score = 5 - code, so 4 = complete answer, 3 = high relevance,
  2 = useful background, 1 = minimum interest (higher is better).
* Code -1 (exactly one per query) marks a document that is not a graded
  reference; BM25 ranks it at median rank 2, consistent with it being the
  question's source paper. It is left out of qrels/test.tsv; those pairs are
  listed in qrels/source_docs.tsv, and all original codes (including the
  dropped doc 995 pair) are in qrels/original_codes.tsv.
* Docs 471 and 995 are empty in the source (no title, no text) and are
  dropped, together with the single qrel (query 125 -> doc 995, code 3).
* title = .T, text = .W (in this collection .W repeats the title first).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _beir_common import Source, arg_parser, clean, main_guard, parse_dot_tagged, write_beir


def main():
    args = arg_parser("cranfield").parse_args()
    src = Source(args)
    corpus, dropped = {}, []
    for did, f in parse_dot_tagged(src.read("data/cran/cran.all.1400")):
        title, text = clean(f.get("T")), clean(f.get("W"))
        if not text:
            dropped.append(did)
            continue
        corpus[did] = {"title": title, "text": text}
    queries = {}
    for pos, (_orig_id, f) in enumerate(parse_dot_tagged(src.read("data/cran/cran.qry")), start=1):
        queries[str(pos)] = clean(f.get("W"))

    qrels, original, source_docs = {}, [], []
    for line in src.read("data/cran/cran.qrels").split("\n"):
        if not line.strip():
            continue
        q, d, code = line.split()
        q, d, code = str(int(q)), str(int(d)), int(code)
        original.append((q, d, code))
        if d in dropped:
            print(f"dropping qrel {q} {d} {code}: document is empty in the source")
            continue
        if code == -1:
            source_docs.append((q, d))
            continue
        if code not in (1, 2, 3, 4):
            raise SystemExit(f"unexpected code {code}")
        if d in qrels.get(q, {}):
            raise SystemExit(f"duplicate qrel {q} {d}")
        qrels.setdefault(q, {})[d] = 5 - code

    print(f"dropped empty documents: {dropped}")
    stats = write_beir(args.out, corpus, queries, qrels)
    with open(Path(args.out) / "qrels" / "original_codes.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tcleverdon-code\n")
        for q, d, code in original:
            f.write(f"{q}\t{d}\t{code}\n")
    with open(Path(args.out) / "qrels" / "source_docs.tsv", "w") as f:
        f.write("query-id\tcorpus-id\n")
        for q, d in source_docs:
            f.write(f"{q}\t{d}\n")
    return stats


if __name__ == "__main__":
    main_guard(main)
