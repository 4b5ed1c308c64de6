"""What the models this machine called delivered: calls, tokens and seconds per provider and model.

Kept in a small JSON file in the user's cache (``$TESTSET_BUILDER_CACHE_DIR``, else ``$XDG_CACHE_HOME/testset-builder``,
else ``~/.cache/testset-builder``), written when a client closes, so the plan of a later run (``run --dry-run``) times
the embedded local model by what it did on this machine, not by a guess. The local server reports its own prompt and
generation seconds per call (llama.cpp's ``timings``); other providers are timed by each call's wall time. Each new
client's figures are added to the earlier ones halved (:data:`DECAY`), so the figures follow the machine's recent
load rather than its whole history. The file holds no request, answer or key. Two processes writing at once may lose
one's figures, never the file: a write replaces it atomically, and an unreadable or unwritable file is ignored.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, fields

from .._machine import cache_dir
from .types import Completion

FILE_NAME = "throughput.json"
DECAY = 0.5  # what earlier clients measured counts half as much as each new client's figures


@dataclass
class Measured:
    """Sums over calls answered by a provider (cache hits excluded); weighted counts once decayed, hence floats."""

    calls: float = 0
    input_tokens: float = 0
    output_tokens: float = 0
    latency_s: float = 0.0  # each call's wall time, retries and rate-limit waits included
    timed_calls: float = 0  # calls whose server reported its own seconds
    timed_input_tokens: float = 0
    timed_output_tokens: float = 0
    prompt_s: float = 0.0
    output_s: float = 0.0

    def add(self, completion: Completion, latency_s: float) -> None:
        usage = completion.usage
        self.calls += 1
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.latency_s += latency_s
        if completion.server_seconds is not None:
            self.timed_calls += 1
            self.timed_input_tokens += usage.input_tokens
            self.timed_output_tokens += usage.output_tokens
            self.prompt_s += completion.server_seconds[0]
            self.output_s += completion.server_seconds[1]

    def __add__(self, other: Measured) -> Measured:
        return Measured(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    def scaled(self, factor: float) -> Measured:
        return Measured(*(getattr(self, f.name) * factor for f in fields(self)))

    @classmethod
    def from_dict(cls, data: dict) -> Measured:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def key(identity: str, model: str) -> str:
    return f"{identity} {model}"


def read_machine_file(name: str) -> dict | None:
    """A JSON object kept in the machine's cache (:func:`cache_dir`): None when absent or unreadable."""
    try:
        data = json.loads((cache_dir() / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_machine_file(name: str, data: dict) -> None:
    """Replace a JSON object in the machine's cache atomically (best effort: a read-only home loses it, nothing
    else)."""
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=directory, delete=False, suffix=".tmp", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
        os.replace(f.name, directory / name)
    except OSError:
        return


def load() -> dict[str, Measured]:
    """Every provider and model measured on this machine (empty when nothing was, or the file is unreadable)."""
    data = read_machine_file(FILE_NAME) or {}
    try:
        return {name: Measured.from_dict(value) for name, value in data.items() if isinstance(value, dict)}
    except TypeError:
        return {}


def record(measured: dict[str, Measured]) -> None:
    """Add a client's figures to the machine's file (best effort: a read-only home loses them, nothing else)."""
    if not measured:
        return
    merged = load()
    for name, figures in measured.items():
        merged[name] = merged.get(name, Measured()).scaled(DECAY) + figures
    write_machine_file(FILE_NAME, {name: asdict(m) for name, m in sorted(merged.items())})
