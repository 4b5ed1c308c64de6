"""Readers and writers, one of each per format. ``read_qrels`` / ``read_run`` pick the format from the content.

Qrels: TREC (``qid 0 docid grade``), BEIR TSV (header ``query-id corpus-id score``), JSONL.
Runs: TREC (``qid Q0 docid rank score tag``), JSONL (``{"query_id", "results": [{"chunk_id", "score"}]}``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from ..errors import InputError
from ..tables import Qrels, Run
from ._lines import check_readable, first_line
from .beir import is_beir_qrels_header, read_beir_qrels, write_beir_qrels
from .jsonl import read_jsonl_qrels, read_jsonl_run, write_jsonl_qrels, write_jsonl_run
from .trec import read_trec_qrels, read_trec_run, write_trec_qrels, write_trec_run

QrelsFormat = Literal["auto", "trec", "beir", "jsonl"]
RunFormat = Literal["auto", "trec", "jsonl"]


JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")


def _json_object(line: str) -> bool:
    """A line that is a JSON object (an id may start with "{" in TREC and BEIR files)."""
    if not line.startswith("{"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def detect_qrels_format(path: Path) -> str:
    """JSONL by suffix or a leading ``{``; BEIR by its header; TREC by four fields."""
    line = first_line(path)
    if line is None:
        raise InputError("qrels file is empty", path=path)
    if path.suffix.lower() in JSONL_SUFFIXES or _json_object(line):
        return "jsonl"
    if is_beir_qrels_header(line):
        return "beir"
    if len(line.split()) == 4:
        return "trec"
    raise InputError(
        "cannot tell the qrels format from the first line: expected TREC 'qid 0 docid grade', "
        "a BEIR header 'query-id<TAB>corpus-id<TAB>score', or a JSON object",
        path=path,
        line=1,
    )


def detect_run_format(path: Path) -> str:
    """JSONL by suffix or a leading ``{``; TREC by six fields."""
    line = first_line(path)
    if line is None:
        raise InputError("run file is empty", path=path)
    if path.suffix.lower() in JSONL_SUFFIXES or _json_object(line):
        return "jsonl"
    if len(line.split()) == 6:
        return "trec"
    raise InputError(
        "cannot tell the run format from the first line: expected TREC 'qid Q0 docid rank score tag' or a JSON object",
        path=path,
        line=1,
    )


def read_qrels(path: str | Path, format: QrelsFormat = "auto") -> Qrels:
    path = Path(path)
    check_readable(path)
    fmt = detect_qrels_format(path) if format == "auto" else format
    readers = {"trec": read_trec_qrels, "beir": read_beir_qrels, "jsonl": read_jsonl_qrels}
    if fmt not in readers:
        raise InputError(f"unknown qrels format {fmt!r}; use one of {', '.join(readers)}")
    return readers[fmt](path)


def read_run(path: str | Path, format: RunFormat = "auto", name: str | None = None) -> Run:
    path = Path(path)
    check_readable(path)
    fmt = detect_run_format(path) if format == "auto" else format
    readers = {"trec": read_trec_run, "jsonl": read_jsonl_run}
    if fmt not in readers:
        raise InputError(f"unknown run format {fmt!r}; use one of {', '.join(readers)}")
    return readers[fmt](path, name=name)


__all__ = [
    "detect_qrels_format",
    "detect_run_format",
    "read_beir_qrels",
    "read_jsonl_qrels",
    "read_jsonl_run",
    "read_qrels",
    "read_run",
    "read_trec_qrels",
    "read_trec_run",
    "write_beir_qrels",
    "write_jsonl_qrels",
    "write_jsonl_run",
    "write_trec_qrels",
    "write_trec_run",
]
