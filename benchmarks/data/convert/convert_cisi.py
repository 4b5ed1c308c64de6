"""CISI (library and information science) -> BEIR layout.

Source files (fbergh/IR_Project@1249c3f, data/cisi/): CISI.ALL, CISI.QRY, CISI.REL.

Decisions (see README.md):
* title = .T, text = .W. Author (.A), .B, .K, .C and the citation
  cross-references (.X) are not used.
* Query text = .W. For 55 queries the source also gives a bibliographic
  title/author/source (.T/.A/.B); these are not used.
* CISI.REL is binary ('qid docid 0 0.000000' = relevant): score 1.
  Only 76 of the 112 queries have any relevant document; the others are dropped.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _beir_common import Source, arg_parser, clean, main_guard, parse_dot_tagged, write_beir


def main():
    args = arg_parser("cisi").parse_args()
    src = Source(args)
    corpus = {}
    for did, f in parse_dot_tagged(src.read("data/cisi/CISI.ALL")):
        corpus[did] = {"title": clean(f.get("T")), "text": clean(f.get("W"))}
    queries = {qid: clean(f.get("W")) for qid, f in parse_dot_tagged(src.read("data/cisi/CISI.QRY"))}
    qrels = {}
    for line in src.read("data/cisi/CISI.REL").split("\n"):
        if not line.strip():
            continue
        q, d, _a, _b = line.split()
        q, d = str(int(q)), str(int(d))
        if d in qrels.get(q, {}):
            raise SystemExit(f"duplicate qrel {q} {d}")
        qrels.setdefault(q, {})[d] = 1
    return write_beir(args.out, corpus, queries, qrels)


if __name__ == "__main__":
    main_guard(main)
