"""The question diagnostics (:mod:`.diagnostics`) in words and a table, for ``score``'s terminal output."""

from __future__ import annotations

from rich.table import Table

from .diagnostics import CEILING, QuestionDiagnostics


def discrimination_lines(found: QuestionDiagnostics, shown: int = 5) -> list[str]:
    """The diagnostics in words, for ``score``: a warning line starts with 'warning:'."""
    lines = []
    for entry in found.saturated:
        lines.append(
            f"warning: {entry['metric']} is {CEILING} or more for every run (the lowest: {entry['lowest']:.3f}): the "
            "set is saturated on it and cannot tell the runs apart"
        )
    n = found.questions
    parts = []
    if found.runs:
        who = "the one run scored ranks" if len(found.runs) == 1 else "every run ranks"
        parts.append(f"{found.too_easy} too easy ({who} the relevant chunks first)")
        parts.append(f"{found.too_hard} too hard (no run has a relevant chunk in its top {found.k})")
    if found.synthetic:
        parts.append(f"{found.leaky} of {found.synthetic} synthetic leak their source's rare words")
        parts.append(f"{found.ambiguous} ambiguous (other chunks answer)")
    if parts:
        lines.append(f"questions ({n}): " + "; ".join(parts))
    for entry in found.weakest[:shown]:
        text = f" {entry['text']!r}" if entry.get("text") else ""
        lines.append(f"  weak: {entry['query_id']}{text}: {', '.join(entry['flags'])}")
    lines += [f"generate next: {advice}" for advice in found.generate_next]
    return lines


def chunk_count_table(found: QuestionDiagnostics) -> Table | None:
    """recall@k and complete@k of each run by the relevant chunks a question needs; None when every question needs
    one (the two are then equal)."""
    if not any(found.needing.get(group) for group in ("2", "3+")) or not found.by_chunk_count:
        return None
    k = found.k
    table = Table(
        title=f"recall@{k} / complete@{k} by chunks needed",
        title_justify="left",
        caption=f"complete@{k}: every relevant chunk in the top {k}",
        caption_justify="left",
        min_width=48,
    )
    table.add_column("needs")
    table.add_column("queries", justify="right")
    for run in found.runs:
        table.add_column(run, justify="right")
    for group, entry in found.by_chunk_count.items():
        cells = [
            f"{entry['runs'][run][f'recall@{k}']:.3f} / {entry['runs'][run][f'complete@{k}']:.3f}" for run in found.runs
        ]
        table.add_row(group, str(entry["queries"]), *cells)
    return table
