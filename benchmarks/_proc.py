"""A process's peak resident memory, as the benchmarks report it."""

from __future__ import annotations

from pathlib import Path


def high_water_mb(pid: int | str = "self") -> float:
    """A process's peak resident MB so far: its VmHWM, which resets when the process execs. (``ru_maxrss`` carries
    over fork and exec the RSS of the process that started it: under `make bench`, after the encoding benchmark,
    every child read 3.4 GB.) 0.0 once the process is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    return next((int(line.split()[1]) / 1024 for line in status.splitlines() if line.startswith("VmHWM:")), 0.0)
