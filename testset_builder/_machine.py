"""The machine a process runs on: where its caches live, and a key for its CPU.

Figures measured on one machine (the dense encoder's fastest path) are kept under :func:`machine_key`, so a cache
copied to another machine, or kept on a home shared by several, is measured again there rather than trusted: the key
covers the CPU's model and its instruction-set flags (what decides which kernels ONNX Runtime and PyTorch run), and
the versions of the two runtimes.
"""

from __future__ import annotations

import hashlib
import os
import platform
import uuid
from collections.abc import Callable
from importlib import metadata
from pathlib import Path


def cache_dir() -> Path:
    explicit = os.environ.get("TESTSET_BUILDER_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "testset-builder"


def cpu() -> tuple[str, list[str]]:
    """The CPU's model name and its flags, as the kernel reports them (x86 ``flags``, Arm ``Features``); elsewhere
    what :mod:`platform` knows, and no flags."""
    name, flags = "", []
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            field, _, value = line.partition(":")
            field = field.strip()
            if field in ("model name", "Hardware", "CPU part") and not name:
                name = value.strip()
            elif field in ("flags", "Features") and not flags:
                flags = sorted(value.split())
            if name and flags:
                break
    except OSError:
        pass
    return name or platform.processor() or platform.machine(), flags


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "-"


def machine_key(described: tuple[str, list[str]] | None = None) -> str:
    """A short key for this CPU (model and flags; ``described`` stands for :func:`cpu`'s answer) and the runtimes
    that encode on it (onnxruntime, torch)."""
    name, flags = described or cpu()
    text = f"{name}\n{' '.join(sorted(flags))}\n{platform.machine()}\nonnxruntime {_version('onnxruntime')}"
    return hashlib.sha256(f"{text}\ntorch {_version('torch')}".encode()).hexdigest()[:12]


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """``write(temporary)`` then rename it to ``path``: another process's equal file may land first, either is the
    same. Best effort for a small file beside the models (a read-only cache costs the work next time)."""
    temporary = path.with_name(f".{path.stem}.{os.getpid()}-{uuid.uuid4().hex[:8]}{path.suffix}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write(temporary)
        os.replace(temporary, path)
    except OSError:
        pass
    finally:
        temporary.unlink(missing_ok=True)
