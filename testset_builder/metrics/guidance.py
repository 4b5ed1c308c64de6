"""What people read beside the tables: many runs side by side with their recall@k curves drawn in the terminal,
what clustering did to the intervals, what the set can detect, and the regression gate's verdict."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from rich.markup import escape
from rich.table import Table

from .clusters import DESIGN_EFFECT_THAT_MATTERS
from .gate import GateOutcome
from .power import FEW_CLUSTERS, RULE_OF_THUMB, T_BELOW, SetSize
from .report import kinds_caption

SPARKS = "▁▂▃▄▅▆▇█"
CHART_COLUMNS = 40  # k = 1..100 on a log scale: 1 at the left, 10 in the middle, 100 at the right


def runs_table(reports: list[dict], best: dict[str, dict], alpha: float, clusters: str) -> Table:
    """One row per run, one column per metric: mean [95% CI]; bold is the best run of the metric, ▼ a run
    significantly below it. On a release with estimates each column's header says which figure it is."""
    names = list(reports[0]["metrics"])
    kinds = {name: reports[0]["metrics"][name].get("kind") for name in names}
    tests = sorted({entry.get("test", "paired randomization test") for entry in best.values()})
    intervals = kinds_caption(reports[0]) or f"mean [95% bootstrap CI, {clusters}]"
    table = Table(
        title=f"{len(reports)} runs ({reports[0]['queries']['evaluated_queries']} queries)",
        title_justify="left",
        caption=f"{intervals}; ●: best run of the metric by the figure shown; ▼: significantly below it "
        f"({' or '.join(tests)}; Holm over the other runs of the metric, alpha {alpha})",
        caption_justify="left",
    )
    table.add_column("run", no_wrap=True)
    for name in names:
        table.add_column(name if kinds[name] is None else f"{name}\n{kinds[name]}", justify="right", no_wrap=True)
    for report in reports:
        cells = [escape(report["run"])]
        for name in names:
            entry = report["metrics"][name]
            cell = f"{entry['mean']:.3f}"
            if "ci_low" in entry:
                cell += f" [{entry['ci_low']:.3f}, {entry['ci_high']:.3f}]"
            if best[name]["best"] == report["run"]:
                cell = f"[bold]{cell}[/] ●"
            else:
                cell += " ▼" if best[name]["runs"][report["run"]]["significant"] else "  "
            cells.append(cell)
        table.add_row(*cells)
    return table


def chart_ks(columns: int = CHART_COLUMNS, max_k: int = 100) -> list[int]:
    """The k each chart column shows: log-spaced from 1 to max_k (small ks repeat, as on a log axis)."""
    return [round(max_k ** (j / (columns - 1))) for j in range(columns)]


def sparkline(curve: np.ndarray, low: float, high: float, ks: Sequence[int]) -> str:
    span = max(high - low, 1e-9)
    levels = [min(len(SPARKS) - 1, max(0, round((curve[k - 1] - low) / span * (len(SPARKS) - 1)))) for k in ks]
    return "".join(SPARKS[level] for level in levels)


def recall_curves_table(
    curves: dict[str, np.ndarray], reach: dict[str, dict[str, int | None]], labelled_only: bool = False
) -> Table:
    """Each run's mean recall@k for k = 1..100 as a line of blocks on one shared scale, its recall at 10, 20 and
    100, and the smallest k reaching each target recall. ``labelled_only``: the curves read the labelled pairs
    alone (a release whose other pairs are estimated), and the title says so."""
    ks = chart_ks()
    low = math.floor(10 * min(float(c[0]) for c in curves.values())) / 10
    targets = list(next(iter(reach.values())))
    table = Table(
        title="recall@k, k = 1…100" + (" (labelled pairs only)" if labelled_only else ""),
        title_justify="left",
        caption=f"blocks: k on a log scale (1, 10 in the middle, 100), height {low:.1f} (▁) to 1.0 (█); "
        "smallest k: the first k whose mean recall reaches the target",
        caption_justify="left",
    )
    table.add_column("run", no_wrap=True)
    table.add_column("1 ·· 10 ·· 100", no_wrap=True)
    for k in (10, 20, 100):
        table.add_column(f"@{k}", justify="right")
    for target in targets:
        table.add_column(f"k for {target}", justify="right", no_wrap=True)
    for name, curve in curves.items():
        cells = [escape(name), sparkline(curve, low, 1.0, ks), *(f"{curve[k - 1]:.3f}" for k in (10, 20, 100))]
        cells += [str(k) if k is not None else "not reached by 100" for k in reach[name].values()]
        table.add_row(*cells)
    return table


def cluster_line(description: str, effects: dict[str, float]) -> str:
    """What the clustering is, and whether it widened the intervals (design effect > 1.2) or barely mattered."""
    line = f"clusters: {description}"
    if not effects:
        return line
    widened = {name: effect for name, effect in effects.items() if effect > DESIGN_EFFECT_THAT_MATTERS}
    if widened:
        parts = ", ".join(f"{name} ×{math.sqrt(e):.2f} (design effect {e:.2f})" for name, e in widened.items())
        return f"{line}; clustered: intervals widened by {parts}"
    return f"{line}; design effect ≤ {DESIGN_EFFECT_THAT_MATTERS} on every metric: clustering barely matters here"


def _count(value: int) -> str:
    return f"{value:,}"


def _difference(value: float) -> str:
    """A detectable difference of a metric in [0, 1]: one of 1 or more is none at all."""
    return f"{value:.3f}" if value < 1 else "none (it would take a difference over 1: too few queries)"


def set_size_line(sizes: list[SetSize], label: str = "", most: int = 3, tests: int = 1) -> str:
    """One line: the set, the smallest differences it detects, the queries a named difference needs, the rule (the
    first ``most`` metrics with some variation; the rest are in --json). ``tests``: how many differences the command
    decides on together (Holm), which the one-test figure does not include."""
    first = sizes[0]
    varying = [s for s in sizes if not math.isnan(s.min_detectable_difference)]
    shown = varying[:most]
    where = f"{first.queries} queries"
    if first.clusters != first.queries:
        where += f" in {first.clusters} clusters (about {first.effective_queries:.0f} independent queries' worth)"
    detectable = (
        ", ".join(f"{s.metric} {_difference(s.min_detectable_difference)}" for s in shown) or "n/a (no variation)"
    )
    line = (
        f"set size{label}: {where}; smallest difference it detects (paired, two-sided alpha {first.alpha:g}, "
        f"{first.power:.0%} power): {detectable}"
    )
    if first.assumption:
        line += f" ({first.assumption})"
    if first.clusters < T_BELOW:
        line += f" (t quantiles, {first.clusters - 1} df"
        line += f"; rough with under {FEW_CLUSTERS} clusters)" if first.clusters < FEW_CLUSTERS else ")"
    if tests > 1:
        line += f" (for one test; deciding {tests} together with Holm's correction needs a larger difference)"
    if first.detect is not None:
        needs = ", ".join(
            f"{s.metric} ~{_count(s.queries_needed)} queries"
            + (f" ({_count(s.clusters_needed)} clusters)" if s.clusters != s.queries else "")
            for s in shown
        )
        line += f"; to detect {first.detect:g}: {needs}" if needs else ""
    if len(varying) > len(shown):
        line += " (the other metrics in --json)"
    return f"{line}. The {RULE_OF_THUMB}."


def half_width_line(report: dict) -> str:
    """For one run: how precisely the set pins each metric down (the 95% interval's half-width)."""
    parts = [
        f"{name} ±{(entry['ci_high'] - entry['ci_low']) / 2:.3f}"
        for name, entry in report["metrics"].items()
        if "ci_low" in entry
    ]
    return f"precision of the set: 95% interval half-width {', '.join(parts)}" if parts else ""


def gate_lines(outcomes: list[GateOutcome]) -> list[str]:
    lines = []
    for o in outcomes:
        verdict = "[bold red]FAILED[/]" if o.failed else "[green]passed[/]"
        lines.append(
            f"gate {o.metric}:{o.margin:g} on {escape(o.candidate)}: {verdict}: difference {o.difference:+.4f}, "
            f"one-sided {o.confidence:.1%} upper bound {o.upper_bound:+.4f} "
            + ("< " if o.failed else ">= ")
            + f"-{o.margin:g}"
        )
        if o.failed and o.lost_most:
            lost = ", ".join(f"{escape(q['query_id'])} {q['difference']:+.3f}" for q in o.lost_most)
            lines.append(f"  queries that lost most on {o.metric}: {lost}")
    return lines
