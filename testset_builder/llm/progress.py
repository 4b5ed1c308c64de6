"""A rich progress bar for LLM work that shows the running cost and the cache hits next to the count."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def llm_progress(console: Console | None = None) -> Progress:
    """Tasks on this bar carry ``cost`` (USD so far) and ``cached`` (answers read from the cache) fields."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("${task.fields[cost]:.4f}"),
        TextColumn("{task.fields[cached]} cached"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
    )
