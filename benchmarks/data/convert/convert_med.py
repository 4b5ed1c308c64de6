"""MEDLINE / MED (biomedicine) -> BEIR layout.

Source files (fbergh/IR_Project@1249c3f, data/med/): MED.ALL, MED.QRY, MED.REL.

Decisions (see README.md):
* The documents have a single .W field (title sentence followed by the
  abstract); there is no separate title, so title = "" and text = .W.
* MED.REL lines are 'qid 0 docid 1' (TREC-like): score 1. MED.REL.OLD in the
  same folder holds the same 696 pairs in another layout.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _beir_common import Source, arg_parser, clean, main_guard, parse_dot_tagged, write_beir


def main():
    args = arg_parser("med").parse_args()
    src = Source(args)
    corpus = {
        did: {"title": "", "text": clean(f.get("W"))} for did, f in parse_dot_tagged(src.read("data/med/MED.ALL"))
    }
    queries = {qid: clean(f.get("W")) for qid, f in parse_dot_tagged(src.read("data/med/MED.QRY"))}
    qrels = {}
    for line in src.read("data/med/MED.REL").split("\n"):
        if not line.strip():
            continue
        q, _it, d, rel = line.split()
        q, d, rel = str(int(q)), str(int(d)), int(rel)
        if rel != 1:
            raise SystemExit(f"unexpected grade {rel}")
        if d in qrels.get(q, {}):
            raise SystemExit(f"duplicate qrel {q} {d}")
        qrels.setdefault(q, {})[d] = 1
    return write_beir(args.out, corpus, queries, qrels)


if __name__ == "__main__":
    main_guard(main)
