"""Tables the commands write for people and spreadsheets: the per-query scores (``score --per-query``), the
relevance estimates of pairs (``estimate --output``) and an audit's disagreements (``audit --out``). Each is
written whole to a temporary file and then renamed, so a reader never finds half a table."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from ..errors import InputError

ESTIMATE_COLUMNS = ("query-id", "corpus-id", "p_relevant", "model", "verdicts")
AUDIT_COLUMNS = ("query-id", "corpus-id", "label", "judge", "confidence", "rationale")


def check_writable(path: str | Path, option: str) -> None:
    """A clear error before any work when ``path`` cannot be written: its folder is missing, or it is a folder."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{option}: is a directory, expected a file name", path=path)
    if not path.parent.is_dir():
        raise InputError(f"{option}: no such folder {str(path.parent)!r} (create it first)", path=path)


def _replace(path: str | Path, text: str) -> None:
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", encoding="utf-8", newline="") as handle:
        handle.write(text)
    partial.replace(path)


def write_per_query_csv(evaluations, path: str | Path) -> None:
    """One row per (run, query) with a column per metric; queries in the evaluations' (sorted id) order.
    ``evaluations``: :class:`~testset_builder.metrics.evaluate.Evaluation` objects."""
    names = [str(spec) for spec in evaluations[0].metrics]
    check_writable(path, "--per-query")
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["run", "query_id", *names])
    for evaluation in evaluations:
        columns = [evaluation.per_query[name] for name in names]
        for i, query_id in enumerate(evaluation.query_ids):
            writer.writerow([evaluation.run_name, query_id, *(repr(float(column[i])) for column in columns)])
    _replace(path, buffer.getvalue())


def write_estimates(rows: list[dict], path: str | Path) -> None:
    """Pairs' estimates: TSV with :data:`ESTIMATE_COLUMNS` when ``path`` ends in ``.tsv``, else JSON lines."""
    if Path(path).suffix == ".tsv":
        text = "\t".join(ESTIMATE_COLUMNS) + "\n"
        text += "".join("\t".join(str(r[c]) for c in ESTIMATE_COLUMNS) + "\n" for r in rows)
    else:
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    _replace(path, text)


def write_audit_tsv(disagreements: list[dict], path: str | Path) -> None:
    """An audit's disagreements between the labels and the judge, one TSV row each (:data:`AUDIT_COLUMNS`)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, delimiter="\t", lineterminator="\n")
    writer.writerow(AUDIT_COLUMNS)
    for d in disagreements:
        confidence = "" if d["confidence"] is None else f"{d['confidence']:.3f}"
        writer.writerow([d["query_id"], d["chunk_id"], d["label"], d["judge"], confidence, d["rationale"] or ""])
    _replace(path, buffer.getvalue())
