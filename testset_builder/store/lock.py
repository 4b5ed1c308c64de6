"""A workspace-wide hold across processes: ``flock`` on a lock file, re-entrant within one process.

The kernel drops an ``flock`` when its process dies, even by ``kill -9``, so a crash never leaves the workspace
held. The holder writes who it is into the file (pid, stage, since when) for the message a waiting process prints.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from ..errors import WorkspaceBusyError

POLL_S = 0.2
_held: dict[str, list] = {}  # lock path -> [file descriptor, depth]
_guard = threading.Lock()
_acquiring = threading.Lock()


def describe_holder(path: Path) -> str:
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
        return f"pid {holder['pid']} ({holder['stage']}, since {holder['since']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process"


def _acquire(path: Path, stage: str, on_wait: Callable[[str], None] | None, wait_s: float | None) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    started, told = time.monotonic(), False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            waited = time.monotonic() - started
            if wait_s is not None and waited >= wait_s:
                os.close(fd)
                raise WorkspaceBusyError(path.parent, describe_holder(path), waited) from None
            if not told and on_wait is not None:
                on_wait(describe_holder(path))
                told = True
            time.sleep(POLL_S)
    since = datetime.now(UTC).isoformat(timespec="seconds")
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "stage": stage, "since": since}).encode(), 0)
    return fd


@contextmanager
def hold(
    path: Path, stage: str, on_wait: Callable[[str], None] | None = None, wait_s: float | None = None
) -> Iterator[None]:
    """Hold ``path`` for ``stage``; a nested hold in the same process (any thread) just counts."""
    key = str(path.resolve())
    with _acquiring:  # one thread at a time asks the kernel, so two threads never wait on each other's flock
        with _guard:
            entry = _held.get(key)
            if entry is not None:
                entry[1] += 1
        if entry is None:
            entry = [_acquire(path, stage, on_wait, wait_s), 1]
            with _guard:
                _held[key] = entry
    try:
        yield
    finally:
        with _guard:
            entry[1] -= 1
            release = entry[1] == 0
            if release:
                del _held[key]
        if release:
            fcntl.flock(entry[0], fcntl.LOCK_UN)
            os.close(entry[0])
