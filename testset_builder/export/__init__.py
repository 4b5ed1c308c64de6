"""Readers and writers, one of each per format, found through :mod:`~testset_builder.registry`. ``read_qrels`` /
``read_run`` pick the format from the content.

Qrels: TREC (``qid 0 docid grade``), BEIR TSV (header ``query-id corpus-id score``), JSONL.
Runs: TREC (``qid Q0 docid rank score tag``), JSONL (``{"query_id", "results": [{"chunk_id", "score"}]}``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ..errors import InputError
from ..registry import (
    LOG_FORMATS,
    QRELS,
    RELEASE_EXPORTS,
    REVIEW_FORMATS,
    RUNS,
    LogFormat,
    ReleaseExport,
    ReviewFormat,
    TableFormat,
    detected,
    load_plugins,
    register_log_format,
    register_qrels_format,
    register_release_export,
    register_review_format,
    register_run_format,
)
from ..tables import Qrels, Run
from ._lines import check_readable, fields, first_line
from .beir import is_beir_qrels_header, read_beir_qrels, write_beir_qrels
from .jsonl import read_jsonl_qrels, read_jsonl_run, write_jsonl_qrels, write_jsonl_run
from .trec import read_trec_qrels, read_trec_run, write_trec_qrels, write_trec_run

QrelsFormat = str  # "auto", or a registered qrels format (registry.QRELS: trec, beir, jsonl, ...)
RunFormat = str  # "auto", or a registered run format (registry.RUNS: trec, jsonl, ...)


JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")


def _json_object(line: str) -> bool:
    """A line that is a JSON object (an id may start with "{" in TREC and BEIR files)."""
    if not line.startswith("{"):
        return False
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _jsonl(path: Path, line: str) -> bool:
    return path.suffix.lower() in JSONL_SUFFIXES or _json_object(line)


register_qrels_format(TableFormat("jsonl", read_jsonl_qrels, write_jsonl_qrels, _jsonl, "one JSON object a line"))
register_qrels_format(
    TableFormat("beir", read_beir_qrels, write_beir_qrels, lambda p, line: is_beir_qrels_header(line), "BEIR TSV")
)
register_qrels_format(
    TableFormat("trec", read_trec_qrels, write_trec_qrels, lambda p, line: len(fields(line)) == 4, "qid 0 docid grade")
)
register_run_format(TableFormat("jsonl", read_jsonl_run, write_jsonl_run, _jsonl, "one JSON object a query"))
register_run_format(
    TableFormat("trec", read_trec_run, write_trec_run, lambda p, line: len(fields(line)) == 6, "qid Q0 docid rank")
)


# the built-in formats answer most lookups: the installed plugins (an entry-point scan) are loaded on a miss alone
def _known(table: dict[str, TableFormat], name: str) -> bool:
    """Whether ``name`` is a format of ``table``, the plugins loaded first when it is not a built-in one."""
    if name not in table:
        load_plugins()
    return name in table


def _detected_by_plugins(table: dict[str, TableFormat], path: Path, line: str) -> str | None:
    load_plugins()
    return detected(table, path, line)


def detect_qrels_format(path: Path) -> str:
    """The first registered qrels format that recognises the file: JSONL by suffix or a leading ``{``; BEIR by its
    header; TREC by four fields; then any format registered since (a plugin's: see :func:`_known`)."""
    line = first_line(path)
    if line is None:
        raise InputError("qrels file is empty", path=path)
    found = detected(QRELS, path, line) or _detected_by_plugins(QRELS, path, line)
    if found is None:
        raise InputError(
            "cannot tell the qrels format from the first line: expected TREC 'qid 0 docid grade', "
            "a BEIR header 'query-id<TAB>corpus-id<TAB>score', or a JSON object"
            + (f" (or: {', '.join(list(QRELS)[3:])})" if len(QRELS) > 3 else ""),
            path=path,
            line=1,
        )
    return found


def detect_run_format(path: Path) -> str:
    """The first registered run format that recognises the file: JSONL by suffix or a leading ``{``; TREC by six
    fields; then any format registered since (a plugin's: see :func:`_known`)."""
    line = first_line(path)
    if line is None:
        raise InputError("run file is empty", path=path)
    found = detected(RUNS, path, line) or _detected_by_plugins(RUNS, path, line)
    if found is None:
        raise InputError(
            "cannot tell the run format from the first line: expected TREC 'qid Q0 docid rank score tag' or a JSON "
            "object" + (f" (or: {', '.join(list(RUNS)[2:])})" if len(RUNS) > 2 else ""),
            path=path,
            line=1,
        )
    return found


def read_qrels(path: str | Path, format: QrelsFormat = "auto") -> Qrels:
    path = Path(path)
    check_readable(path)
    fmt = detect_qrels_format(path) if format == "auto" else format
    if not _known(QRELS, fmt):
        raise InputError(f"unknown qrels format {fmt!r}; use one of {', '.join(QRELS)}")
    return QRELS[fmt].read(path)


def read_run(path: str | Path, format: RunFormat = "auto", name: str | None = None) -> Run:
    path = Path(path)
    check_readable(path)
    fmt = detect_run_format(path) if format == "auto" else format
    if not _known(RUNS, fmt):
        raise InputError(f"unknown run format {fmt!r}; use one of {', '.join(RUNS)}")
    return RUNS[fmt].read(path, name=name)


def read_runs(paths) -> list[Run]:
    """The runs of ``paths``, each by its tag; runs sharing a tag are called by their files' names (then paths)."""
    paths = [Path(path) for path in paths]
    loaded = [read_run(path) for path in paths]
    if len({r.name for r in loaded}) < len(loaded):
        loaded = [replace(r, name=path.stem) for r, path in zip(loaded, paths)]
    if len({r.name for r in loaded}) < len(loaded):
        loaded = [replace(r, name=str(path)) for r, path in zip(loaded, paths)]
    return loaded


__all__ = [
    "LOG_FORMATS",
    "QRELS",
    "RELEASE_EXPORTS",
    "REVIEW_FORMATS",
    "RUNS",
    "LogFormat",
    "ReleaseExport",
    "ReviewFormat",
    "TableFormat",
    "detect_qrels_format",
    "detect_run_format",
    "read_annotators",
    "read_beir_qrels",
    "read_jsonl_qrels",
    "read_jsonl_run",
    "read_langfuse",
    "read_log",
    "read_qrels",
    "read_run",
    "read_runs",
    "read_trec_qrels",
    "read_trec_run",
    "register_log_format",
    "register_qrels_format",
    "register_release_export",
    "register_review_format",
    "register_run_format",
    "write_beir_qrels",
    "write_jsonl_qrels",
    "write_jsonl_run",
    "write_trec_qrels",
    "write_trec_run",
]

# the log and review-tool formats register when their modules are imported (registry.BUILT_IN_FORMATS): a score,
# which reads qrels and runs alone, does not import the config and the records they need
LATER = {"read_log": "logs", "read_langfuse": "langfuse", "read_annotators": "review_tools"}


def __getattr__(name: str):
    if name in LATER:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{LATER[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
