"""Two-core parallelism for independent numpy / Arrow steps, which release the GIL while they work."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

SHARED_ROWS = 1 << 16
"""Rows of work below which the tasks run one after the other: starting and joining a thread costs about what numpy
does on tens of thousands of rows, and a small ``score`` builds two tables and a grade matrix per run."""


def in_parallel(*tasks: Callable[[], Any], rows: int | None = None) -> list[Any]:
    """Run the tasks side by side and return their results in order (the first error is raised). The first runs on
    the calling thread, the others on threads of their own; with ``rows`` (the size of the work) below
    :data:`SHARED_ROWS`, all run on the calling thread."""
    if len(tasks) < 2 or (rows is not None and rows < SHARED_ROWS):
        return [task() for task in tasks]
    with ThreadPoolExecutor(max_workers=len(tasks) - 1) as pool:
        futures = [pool.submit(task) for task in tasks[1:]]
        first = tasks[0]()
        return [first, *(future.result() for future in futures)]
