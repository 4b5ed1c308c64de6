"""The report's plots: matplotlib drawn to SVG text (no files, no network), one function per figure."""

from __future__ import annotations

import io
from collections.abc import Sequence
from itertools import pairwise

COLOURS = ("#2b6cb0", "#c05621", "#2f855a", "#6b46c1", "#b83280", "#4a5568")


def _svg(figure) -> str:
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg") :]  # inline: without the XML prolog and doctype


def _axes(width: float = 5.0, height: float = 2.6):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matplotlib.rcParams["svg.hashsalt"] = "testset-builder"  # the same figure gives the same SVG ids
    figure, axes = plt.subplots(figsize=(width, height))
    axes.spines[["top", "right"]].set_visible(False)
    return figure, axes


def bars(labels: Sequence[str], values: Sequence[float], xlabel: str, ylabel: str) -> str:
    figure, axes = _axes()
    axes.bar(list(labels), list(values), color=COLOURS[0])
    for x, value in enumerate(values):
        axes.annotate(f"{value:g}", (x, value), ha="center", va="bottom", fontsize=8)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    return _svg(figure)


def histogram(values: Sequence[float], bins: int, xlabel: str, value_range=(0.0, 1.0)) -> str:
    figure, axes = _axes()
    axes.hist(list(values), bins=bins, range=value_range, color=COLOURS[0], edgecolor="white")
    axes.set_xlabel(xlabel)
    axes.set_ylabel("count")
    return _svg(figure)


def calibration(estimates: Sequence[float], labels: Sequence[int], bins: int = 5) -> str:
    """Reliability diagram: in each bin of the estimate, the share humans called relevant (points sized by count)."""
    figure, axes = _axes(4.0, 3.0)
    axes.plot([0, 1], [0, 1], color="#a0aec0", linestyle="--", linewidth=1)
    edges = [i / bins for i in range(bins + 1)]
    for low, high in pairwise(edges):
        inside = [(p, y) for p, y in zip(estimates, labels) if low <= p < high or (high == 1.0 and p == 1.0)]
        if inside:
            mean_p = sum(p for p, _ in inside) / len(inside)
            share = sum(y for _, y in inside) / len(inside)
            axes.scatter([mean_p], [share], s=20 + 8 * len(inside), color=COLOURS[1])
    axes.set_xlim(0, 1)
    axes.set_ylim(0, 1)
    axes.set_xlabel("estimated P(relevant)")
    axes.set_ylabel("share humans called relevant")
    return _svg(figure)


def curves(
    series: dict[str, tuple[Sequence[int], Sequence[float]]], xlabel: str, ylabel: str, levels: Sequence[float] = ()
) -> str:
    """Lines on a log x axis, with a dashed horizontal line at each of ``levels`` (target recalls)."""
    figure, axes = _axes(5.5, 3.0)
    for level in levels:
        axes.axhline(level, color="#a0aec0", linestyle="--", linewidth=0.8)
        axes.annotate(f"{level:g}", (1, level), fontsize=7, color="#718096", va="bottom")
    for i, (name, (xs, ys)) in enumerate(series.items()):
        axes.plot(list(xs), list(ys), label=name, color=COLOURS[i % len(COLOURS)], linewidth=1.5)
    axes.set_xscale("log")
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_ylim(0, 1.02)
    axes.legend(fontsize=8, frameon=False)
    return _svg(figure)
