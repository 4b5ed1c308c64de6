"""Which path the dense encoder takes on this machine: PyTorch, ONNX float32 or ONNX int8, whichever encodes fastest
here among those that pass the quality guard.

Their speeds differ by CPU: int8 matrix products gain most where the CPU has AVX-512 VNNI or AMX, and may lose to
float32 where it has neither. So the first encoding of at least :data:`SAMPLE` texts on a machine times each path on
that many of its texts, in :data:`ROUNDS` interleaved rounds (each path's best round counts: on a shared machine
load only ever slows a round down), and the choice is kept beside the ONNX files under the machine's key
(:func:`testset_builder._machine.machine_key`: CPU model and flags, runtime versions), so a cache copied to another
machine is measured again there. A smaller encoding before that takes int8 ONNX and measures nothing.

The quality guard: PyTorch is the reference. Another path may be chosen only if, on a labelled collection,
its recall@100 fell at most :data:`GUARD` below PyTorch's (``encoder_quality.json`` beside this module, written by
``benchmarks/encoding_speed.py``), and if on this machine its embeddings of the sample agree with PyTorch's (mean
cosine) at least as well as where that recall was measured, less :data:`AGREEMENT_SLACK`: the same arithmetic
computed differently here (another CPU's kernels) shows first as a lower cosine.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .._machine import write_atomically

SAMPLE = 32  # texts each path encodes per round: a few seconds for all three on two cores
ROUNDS = 3
GUARD = 0.005  # recall@100 a path may lose against PyTorch's
AGREEMENT_SLACK = 0.01  # mean cosine below the one measured with the recall: the sample is small, its mean noisy
CHOICE_FILE = "encoder-choice.json"
QUALITY_FILE = Path(__file__).with_name("encoder_quality.json")

Encode = Callable[[Sequence[str]], np.ndarray]


@dataclass(frozen=True)
class Measurement:
    """What timing the paths on a sample found: texts a second, and each path's mean cosine to the reference's
    embeddings of the same texts."""

    rates: dict[str, float]
    agreements: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Choice:
    """The path chosen on a machine, with what it was chosen from."""

    model: str
    machine: str
    rates: dict[str, float]
    refused: dict[str, str] = field(default_factory=dict)  # path -> why the guard refused it

    def describe(self, names: Mapping[str, str] | None = None) -> str:
        """One line for the plan: the path, and every measured path's rate."""
        names = names or {}
        rates = ", ".join(
            f"{names.get(m, m)} {r:.0f}" + (" (refused: " + self.refused[m] + ")" if m in self.refused else "")
            for m, r in sorted(self.rates.items(), key=lambda item: -item[1])
        )
        fastest = f"{names.get(self.model, self.model)}, the fastest on this machine that passes the quality guard"
        return f"{fastest} (texts/s: {rates})"

    def to_json(self) -> dict:
        return {"model": self.model, "rates": self.rates, "refused": self.refused}


def measure(encoders: Mapping[str, Encode], texts: Sequence[str], reference: str, rounds: int = ROUNDS) -> Measurement:
    """Each encoder's texts a second on ``texts``: its best of ``rounds`` rounds, the paths interleaved (and their
    order turned each round) so a burst of load falls on one round of each, not on one path's every round."""
    best: dict[str, float] = {}
    vectors: dict[str, np.ndarray] = {}
    names = list(encoders)
    for round_ in range(rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            started = time.perf_counter()
            vectors[name] = np.asarray(encoders[name](list(texts)), dtype=np.float32)
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - started)
    agreements = {
        name: float(np.mean(np.sum(v * vectors[reference], axis=1)))
        for name, v in vectors.items()
        if reference in vectors
    }
    return Measurement({name: len(texts) / max(s, 1e-9) for name, s in best.items()}, agreements)


def quality_record(path: Path = QUALITY_FILE) -> dict:
    """Each path's recall@100 beside PyTorch's on a labelled collection, and their mean cosine there (empty when
    the file is missing)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data.get("paths", {}) if isinstance(data, dict) else {}


def refusal(model: str, reference: str, quality: Mapping, agreement: float | None) -> str | None:
    """Why the guard refuses ``model``, or None when it may be chosen (the reference always may)."""
    if model == reference:
        return None
    figures = quality.get(model) or {}
    recall, reference_recall = figures.get("recall@100"), figures.get("reference_recall@100")
    if not isinstance(recall, int | float) or not isinstance(reference_recall, int | float):
        return "its recall@100 was never checked against PyTorch's"
    if reference_recall - recall > GUARD:
        return f"recall@100 {reference_recall - recall:.4f} below PyTorch's"
    checked_at = figures.get("cosine_mean")
    if agreement is not None and isinstance(checked_at, int | float) and agreement < checked_at - AGREEMENT_SLACK:
        return f"its embeddings agree less with PyTorch's here (cosine {agreement:.3f}) than where checked"
    return None


def decide(measurement: Measurement, reference: str, machine: str, quality: Mapping) -> Choice:
    """The fastest path the guard allows (the reference is always allowed)."""
    refused = {
        model: reason
        for model in measurement.rates
        if (reason := refusal(model, reference, quality, measurement.agreements.get(model))) is not None
    }
    allowed = {m: r for m, r in measurement.rates.items() if m not in refused}
    best = max(allowed, key=allowed.__getitem__) if allowed else reference
    return Choice(best, machine, dict(measurement.rates), refused)


def recorded(folder: Path, machine: str) -> Choice | None:
    """The choice kept in ``folder`` for ``machine``, if one was."""
    try:
        data = json.loads((folder / CHOICE_FILE).read_text(encoding="utf-8"))
        entry = data[machine]
        return Choice(entry["model"], machine, dict(entry["rates"]), dict(entry.get("refused") or {}))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def keep(folder: Path, choice: Choice) -> None:
    """Add ``choice`` to ``folder``'s file, beside other machines' (best effort, replaced atomically)."""
    try:
        data = json.loads((folder / CHOICE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    data = {**(data if isinstance(data, dict) else {}), choice.machine: choice.to_json()}
    write_atomically(folder / CHOICE_FILE, lambda target: target.write_text(json.dumps(data, indent=1)))


def chosen(
    folder: Path,
    machine: str,
    sample: Sequence[str],
    measure_sample: Callable[[Sequence[str]], Measurement],
    reference: str,
    quality: Mapping | None = None,
) -> Choice | None:
    """The machine's choice: the one kept in ``folder``, else measured now with ``measure_sample`` on the first
    :data:`SAMPLE` texts of ``sample`` and kept; None when neither (fewer texts than that)."""
    known = recorded(folder, machine)
    if known is not None:
        return known
    if len(sample) < SAMPLE:
        return None
    choice = decide(
        measure_sample(list(sample[:SAMPLE])), reference, machine, quality_record() if quality is None else quality
    )
    keep(folder, choice)
    return choice
