"""Progress for long stages: a rich bar on a terminal; plain lines when the output is a file or a pipe.

A rich bar draws nothing until it stops when its console is not a terminal, so a run whose output goes to a log
showed nothing for minutes. :class:`LineProgress` keeps rich's tasks and, off a terminal, prints one line per task
each :data:`LINE_STEP` of its total and at least every :data:`LINE_EVERY_S` seconds while it moves, and a last line
when it completes.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

LINE_STEP = 0.1  # a line each tenth of a task's total
LINE_EVERY_S = 30.0  # and at least this often while a task moves (an unsized task: only this)


class LineProgress(Progress):
    """A :class:`rich.progress.Progress` that, when its console is not a terminal, prints plain progress lines
    instead of drawing nothing (see the module docstring). On a terminal it is rich's bar, unchanged."""

    def __init__(self, *columns, console: Console | None = None, disable: bool = False, **options) -> None:
        console = console or Console(stderr=True)
        self.lines = not disable and not console.is_terminal
        super().__init__(*columns, console=console, disable=disable or self.lines, **options)
        self._shown: dict[TaskID, tuple[float, int]] = {}  # task -> (when its last line was printed, its step)

    def update(self, task_id: TaskID, **changes) -> None:
        super().update(task_id, **changes)
        if self.lines:
            self._line(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        if self.lines:
            self._line(task_id)

    def _line(self, task_id: TaskID) -> None:
        with self._lock:
            task = self._tasks[task_id]
            completed, total, description, fields = task.completed, task.total, task.description, dict(task.fields)
        now = time.monotonic()
        last, last_step = self._shown.get(task_id, (now, 0))
        step = int(completed / total / LINE_STEP) if total else 0
        done = bool(total) and completed >= total
        if done and last_step == -1:
            return  # its last line is printed
        if not (done or step > last_step or now - last >= LINE_EVERY_S):
            self._shown.setdefault(task_id, (now, 0))
            return
        self._shown[task_id] = (now, -1 if done else step)
        self.console.print(progress_line(description, completed, total, fields), highlight=False, soft_wrap=True)


def progress_line(description: str, completed: float, total: float | None, fields: dict) -> str:
    """One plain progress line: "questions (round 1): 40 of 100 (40%), $0.0000, 3 cached"."""
    count = f"{completed:g} of {total:g} ({completed / total:.0%})" if total else f"{completed:g} done"
    extra = []
    if "cost" in fields:
        extra.append(f"${fields['cost']:.4f}")
    if "cached" in fields:
        extra.append(f"{fields['cached']} cached")
    return f"{description}: {count}" + (", " + ", ".join(extra) if extra else "")


def llm_progress(console: Console | None = None) -> Progress:
    """Tasks on this bar carry ``cost`` (USD so far) and ``cached`` (answers read from the cache) fields."""
    return LineProgress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("${task.fields[cost]:.4f}"),
        TextColumn("{task.fields[cached]} cached"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
    )
