"""Two-core parallelism for independent numpy / Arrow steps, which release the GIL while they work."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def in_parallel(*tasks: Callable[[], Any]) -> list[Any]:
    """Run the tasks side by side and return their results in order (the first error is raised). The first runs on
    the calling thread, the others on threads of their own: a thread fewer to start, which on small inputs (a
    ``score`` of a few runs builds a table per run) costs as much as the work."""
    if len(tasks) < 2:
        return [task() for task in tasks]
    with ThreadPoolExecutor(max_workers=len(tasks) - 1) as pool:
        futures = [pool.submit(task) for task in tasks[1:]]
        first = tasks[0]()
        return [first, *(future.result() for future in futures)]
