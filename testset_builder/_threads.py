"""Two-core parallelism for independent numpy / Arrow steps, which release the GIL while they work."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def in_parallel(*tasks: Callable[[], Any]) -> list[Any]:
    """Run the tasks on two threads and return their results in order (the first error is raised)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(task) for task in tasks]
        return [future.result() for future in futures]
