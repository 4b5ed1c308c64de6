"""NPL / Vaswani (electronics, computing and physics abstracts) -> BEIR layout.

Source files (fbergh/IR_Project@1249c3f, data/npl/): doc-text, query-text, rlv-ass.

Format: each record is an id line, then text lines, ended by a line that is
'/' (indented in doc-text and rlv-ass). rlv-ass lists, per query, the ids of
its relevant documents.

Decisions (see README.md):
* No titles in the source: title = "", text = the (lower-case, punctuation
  stripped) record text as given.
* Queries are upper case in the source and are kept as given.
* Relevance is binary: score 1.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _beir_common import Source, arg_parser, clean, main_guard, write_beir


def parse_slash_records(text: str) -> list[tuple[str, str]]:
    records, cur_id, buf = [], None, []
    for line in text.split("\n"):
        s = line.strip()
        if s == "/":
            if cur_id is None:
                raise ValueError("'/' without a record")
            records.append((cur_id, " ".join(buf)))
            cur_id, buf = None, []
        elif cur_id is None:
            if not s:
                continue
            if not s.isdigit():
                raise ValueError(f"expected a record id, got {line!r}")
            cur_id = str(int(s))
        else:
            buf.append(s)
    if cur_id is not None:
        raise ValueError(f"record {cur_id} not terminated")
    return records


def main():
    args = arg_parser("npl").parse_args()
    src = Source(args)
    corpus = {}
    for did, text in parse_slash_records(src.read("data/npl/doc-text")):
        if did in corpus:
            raise SystemExit(f"duplicate doc {did}")
        corpus[did] = {"title": "", "text": clean(text)}
    queries = {qid: clean(t) for qid, t in parse_slash_records(src.read("data/npl/query-text"))}
    qrels = {}
    for qid, ids in parse_slash_records(src.read("data/npl/rlv-ass")):
        for d in ids.split():
            d = str(int(d))
            if d in qrels.get(qid, {}):
                raise SystemExit(f"duplicate qrel {qid} {d}")
            qrels.setdefault(qid, {})[d] = 1
    return write_beir(args.out, corpus, queries, qrels)


if __name__ == "__main__":
    main_guard(main)
