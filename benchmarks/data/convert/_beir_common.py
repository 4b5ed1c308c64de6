"""Shared helpers for the convert_<name>.py scripts in this folder.

The classic test collections are read straight out of a fetched bare git
snapshot (``git --git-dir=... show COMMIT:PATH``), so that a conversion can be
re-run exactly from the pinned source commit. ``--raw-dir`` may be given
instead to read the same relative paths from an ordinary directory.

Output is the BEIR layout:
    <out>/corpus.jsonl        {"_id", "title", "text"}
    <out>/queries.jsonl       {"_id", "text"}
    <out>/qrels/test.tsv      query-id <TAB> corpus-id <TAB> score  (with header)
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

# Source of all five classic collections (see README.md).
SOURCE_REPO = "fbergh/IR_Project"
SOURCE_COMMIT = "1249c3f6797bbce7df8bc675a5dbf7b11fa779e6"
DEFAULT_GIT_DIR = "/work/.mirror/fbergh+IR_Project/repo"
HELDOUT_DIR = Path(__file__).resolve().parent

_TAG_RE = re.compile(r"^\.([A-Z])(?:\s+(\S+))?\s*$")


def arg_parser(name: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=f"Convert the {name} collection to BEIR layout.")
    p.add_argument("--git-dir", default=DEFAULT_GIT_DIR, help=f"bare git dir of {SOURCE_REPO}")
    p.add_argument("--commit", default=SOURCE_COMMIT)
    p.add_argument("--raw-dir", default=None, help="read source files from this directory instead of git")
    p.add_argument("--out", default=str(HELDOUT_DIR / name))
    return p


class Source:
    def __init__(self, args: argparse.Namespace):
        self.git_dir = args.git_dir
        self.commit = args.commit
        self.raw_dir = args.raw_dir

    def read(self, path: str) -> str:
        if self.raw_dir:
            data = Path(self.raw_dir, path).read_bytes()
        else:
            data = subprocess.run(
                ["git", f"--git-dir={self.git_dir}", "show", f"{self.commit}:{path}"],
                check=True,
                capture_output=True,
            ).stdout
        if data.startswith(b"version https://git-lfs"):
            raise SystemExit(f"{path} is a Git LFS pointer, not data")
        # The files are ASCII; latin-1 never fails and keeps any stray byte visible.
        text = data.decode("latin-1")
        return text.replace("\r\n", "\n").replace("\r", "\n")


def parse_dot_tagged(text: str) -> list[tuple[str, dict[str, str]]]:
    """Parse SMART-style records: '.I <id>' starts a record, '.X' lines start fields.

    Returns [(id, {field_letter: raw_text})] in file order. A field that appears
    twice in one record is concatenated.
    """
    records: list[tuple[str, dict[str, list[str]]]] = []
    field = None
    for line in text.split("\n"):
        m = _TAG_RE.match(line)
        if m:
            tag, arg = m.group(1), m.group(2)
            if tag == "I":
                if arg is None:
                    raise ValueError(f"'.I' without id: {line!r}")
                records.append((arg, {}))
                field = None
            else:
                if not records:
                    raise ValueError(f"field {line!r} before first .I")
                field = tag
                records[-1][1].setdefault(field, [])
                if arg is not None:  # e.g. '.K some words' -- keep the words
                    records[-1][1][field].append(line[2:].strip())
            continue
        if field is not None:
            records[-1][1][field].append(line)
    return [(rid, {k: "\n".join(v) for k, v in fields.items()}) for rid, fields in records]


def clean(s: str | None) -> str:
    """Collapse all whitespace runs to single spaces."""
    return " ".join((s or "").split())


def write_beir(
    out: str | Path,
    corpus: dict[str, dict[str, str]],
    queries: dict[str, str],
    qrels: dict[str, dict[str, int]],
) -> dict[str, int]:
    """Validate and write. Keeps only queries with >=1 judgment of score > 0.

    qrels may hold non-positive scores (judged non-relevant); they are written
    too, but a query needs at least one positive score to be kept.
    """
    out = Path(out)
    # integrity checks on the source side
    missing_q = sorted({q for q in qrels if q not in queries})
    missing_d = sorted({d for rels in qrels.values() for d in rels if d not in corpus})
    if missing_q:
        raise SystemExit(f"qrels name unknown query ids: {missing_q[:10]}")
    if missing_d:
        raise SystemExit(f"qrels name unknown doc ids: {missing_d[:10]}")
    empty_docs = [d for d, v in corpus.items() if not v["text"].strip()]
    if empty_docs:
        raise SystemExit(f"{len(empty_docs)} documents have empty text, e.g. {empty_docs[:5]}")

    kept = {q for q, rels in qrels.items() if any(s > 0 for s in rels.values())}
    empty_q = [q for q in kept if not queries[q].strip()]
    if empty_q:
        raise SystemExit(f"queries with empty text: {empty_q}")

    def key(x: str):
        return (0, int(x), x) if x.isdigit() else (1, 0, x)

    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for d in sorted(corpus, key=key):
            f.write(
                json.dumps({"_id": d, "title": corpus[d]["title"], "text": corpus[d]["text"]}, ensure_ascii=False)
                + "\n"
            )
    with open(out / "queries.jsonl", "w", encoding="utf-8") as f:
        for q in sorted(kept, key=key):
            f.write(json.dumps({"_id": q, "text": queries[q]}, ensure_ascii=False) + "\n")
    n_pairs = n_rel = 0
    with open(out / "qrels" / "test.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q in sorted(kept, key=key):
            for d in sorted(qrels[q], key=key):
                f.write(f"{q}\t{d}\t{int(qrels[q][d])}\n")
                n_pairs += 1
                n_rel += qrels[q][d] > 0
    stats = {
        "docs": len(corpus),
        "queries_in_source": len(queries),
        "queries_with_judgments": len(qrels),
        "queries_kept": len(kept),
        "judged_pairs": n_pairs,
        "relevant_pairs": n_rel,
    }
    validate(out)
    print(json.dumps(stats))
    return stats


def validate(out: str | Path) -> None:
    """Re-read a written BEIR folder and check it is self-consistent."""
    out = Path(out)
    docs, queries = set(), set()
    for name, ids, fields in (
        ("corpus.jsonl", docs, ("_id", "title", "text")),
        ("queries.jsonl", queries, ("_id", "text")),
    ):
        with open(out / name, encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                assert set(rec) == set(fields), (name, rec.keys())
                assert isinstance(rec["_id"], str) and rec["_id"], rec
                assert rec["text"].strip(), f"empty text in {name}: {rec['_id']}"
                assert rec["_id"] not in ids, f"duplicate id in {name}: {rec['_id']}"
                ids.add(rec["_id"])
    seen_q = set()
    with open(out / "qrels" / "test.tsv", encoding="utf-8") as f:
        assert f.readline() == "query-id\tcorpus-id\tscore\n"
        pairs = set()
        for line in f:
            q, d, s = line.rstrip("\n").split("\t")
            int(s)
            assert q in queries, f"qrel query {q} not in queries"
            assert d in docs, f"qrel doc {d} not in corpus"
            assert (q, d) not in pairs, f"duplicate qrel {q} {d}"
            pairs.add((q, d))
            if int(s) > 0:
                seen_q.add(q)
    assert seen_q == queries, "every kept query must have a relevant doc, and vice versa"


def main_guard(fn) -> None:
    try:
        fn()
    except subprocess.CalledProcessError as e:
        sys.stderr.write(e.stderr.decode(errors="replace"))
        raise SystemExit(1) from None
