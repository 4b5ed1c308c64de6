"""Does the synthetic set tell the same story as real traffic? Where a release labels both synthetic questions and
real (logged) queries, each run is scored on each subset apart, per metric:

* the two rankings of the runs and Kendall's tau-b between them: tau = (C - D) / sqrt((P - T_s)(P - T_r)) over the
  P pairs of runs, C the pairs both subsets order alike, D those they order oppositely, T the pairs a subset ties
  (Kendall 1945); 1 when the synthetic set ranks the runs as real traffic does;
* the optimism gap of each run, its mean on the synthetic questions minus its mean on the real queries: questions
  written from a chunk tend to repeat its words, which flatters lexical retrievers;
* a 95% percentile interval for each, from a stratified bootstrap: each subset's queries resampled with
  replacement apart (seeded), every run on the same resample, so the runs' correlation within a query is kept.

Warnings name what a reader should not miss: a pair of runs the two subsets order oppositely, each with a paired
difference whose interval excludes 0 (a reversal the data shows, not noise); and a run whose gap's interval
excludes 0 (the synthetic set reads it too high, or too low).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from itertools import combinations

import numpy as np

MIN_QUERIES = 2  # labelled queries each subset needs for a comparison
SHOWN = 2  # runs quoted in a gap warning


@dataclass
class MetricTransfer:
    """One metric: each run's mean on each subset, the rank correlation, the gaps, with intervals."""

    metric: str
    runs: list[str]
    synthetic: list[float]
    real: list[float]
    tau: float | None  # None with fewer than two runs, or a subset that ties every run
    tau_interval: tuple[float, float] | None
    gap: list[float]  # synthetic minus real, per run
    gap_interval: list[tuple[float, float]]
    reversed_pairs: list[tuple[str, str]] = field(default_factory=list)  # (better on synthetic, better on real)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Transfer:
    synthetic_queries: int
    real_queries: int
    metrics: list[MetricTransfer]
    warnings: list[str]
    resamples: int
    seed: int

    def as_dict(self) -> dict:
        return {**asdict(self), "metrics": [m.as_dict() for m in self.metrics]}


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> float | None:
    """Kendall's tau-b of two scorings of the same items (ties in either lowered by their count); None when either
    ties every pair or there are fewer than two items."""
    sign_x, sign_y = _pair_signs(x), _pair_signs(y)
    return _tau(sign_x, sign_y)


def _pair_signs(values: np.ndarray) -> np.ndarray:
    """sign(v_i - v_j) over the pairs i < j, along the first axis (more axes: several scorings at once)."""
    pairs = list(combinations(range(values.shape[0]), 2))
    if not pairs:
        return np.zeros((0, *values.shape[1:]))
    left, right = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    return np.sign(values[left] - values[right])


def _tau(sign_x: np.ndarray, sign_y: np.ndarray):
    if sign_x.shape[0] == 0:
        return None
    untied = np.sqrt(np.abs(sign_x).sum(axis=0) * np.abs(sign_y).sum(axis=0))
    concordance = (sign_x * sign_y).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = np.where(untied > 0, concordance / np.where(untied > 0, untied, 1), np.nan)
    if np.ndim(tau) == 0:
        return None if np.isnan(tau) else float(tau)
    return tau


def transfer(
    runs: list[str],
    values: dict[str, np.ndarray],
    synthetic: np.ndarray,
    real: np.ndarray,
    resamples: int = 1000,
    seed: int = 0,
    alpha: float = 0.05,
) -> Transfer | None:
    """The transfer check of :mod:`this module <.transfer>`. ``values[metric]``: runs x queries, one row a run (in
    the order of ``runs``); ``synthetic`` and ``real``: boolean masks over the queries. None when a subset has fewer
    than ``MIN_QUERIES`` queries."""
    synthetic, real = np.asarray(synthetic, bool), np.asarray(real, bool)
    if synthetic.sum() < MIN_QUERIES or real.sum() < MIN_QUERIES:
        return None
    rng = np.random.default_rng(seed)
    weights = {  # resample b's count of each query of a subset, over its size: a mean is values @ weights
        name: rng.multinomial(int(mask.sum()), np.full(int(mask.sum()), 1 / mask.sum()), size=resamples).T / mask.sum()
        for name, mask in (("synthetic", synthetic), ("real", real))
    }
    levels = (100 * alpha / 2, 100 * (1 - alpha / 2))
    metrics, warnings = [], []
    for metric, table in values.items():
        table = np.asarray(table, float)
        on_synthetic, on_real = table[:, synthetic], table[:, real]
        mean_s, mean_r = on_synthetic.mean(axis=1), on_real.mean(axis=1)
        boot_s, boot_r = on_synthetic @ weights["synthetic"], on_real @ weights["real"]  # runs x resamples
        gaps = boot_s - boot_r
        gap_interval = [tuple(float(v) for v in np.percentile(g, levels)) for g in gaps]
        tau = kendall_tau_b(mean_s, mean_r)
        tau_interval = None
        if tau is not None:
            taus = _tau(_pair_signs(boot_s), _pair_signs(boot_r))
            taus = taus[~np.isnan(taus)]
            tau_interval = tuple(float(v) for v in np.percentile(taus, levels)) if len(taus) else None
        found = MetricTransfer(
            metric, list(runs), [float(v) for v in mean_s], [float(v) for v in mean_r], tau, tau_interval,
            [float(v) for v in mean_s - mean_r], gap_interval,
        )  # fmt: skip
        found.reversed_pairs = _reversals(runs, boot_s, boot_r, levels)
        metrics.append(found)
        warnings.extend(_warnings(found))
    return Transfer(int(synthetic.sum()), int(real.sum()), metrics, warnings, resamples, seed)


def transfer_of(evaluations: list, origin_of, resamples: int = 1000, seed: int = 0, alpha: float = 0.05):
    """The check on runs' evaluations (:class:`~.evaluate.Evaluation`, one a run) of a release, ``origin_of(query
    id)`` giving each query's origin (``synthetic``, ``real``); None unless both subsets have labelled queries."""
    if not evaluations:
        return None
    query_ids = list(evaluations[0].query_ids)
    origins = np.array([origin_of(str(q)) for q in query_ids])
    values = {}
    for spec in evaluations[0].metrics:
        rows = []
        for evaluation in evaluations:
            position = {q: i for i, q in enumerate(evaluation.query_ids)}
            rows.append([evaluation.per_query[str(spec)][position[q]] for q in query_ids])
        values[str(spec)] = np.array(rows, dtype=float)
    runs = [e.run_name for e in evaluations]
    return transfer(runs, values, origins == "synthetic", origins == "real", resamples, seed, alpha)


def _reversals(runs: list[str], boot_s: np.ndarray, boot_r: np.ndarray, levels) -> list[tuple[str, str]]:
    """Pairs of runs whose paired difference's interval excludes 0 on both subsets, with opposite signs."""
    found = []
    for i, j in combinations(range(len(runs)), 2):
        low_s, high_s = np.percentile(boot_s[i] - boot_s[j], levels)
        low_r, high_r = np.percentile(boot_r[i] - boot_r[j], levels)
        if low_s > 0 and high_r < 0:
            found.append((runs[i], runs[j]))
        elif high_s < 0 and low_r > 0:
            found.append((runs[j], runs[i]))
    return found


def _warnings(found: MetricTransfer) -> list[str]:
    said = [
        f"{found.metric}: the synthetic questions rank {better} above {other}, real queries the other way round "
        f"(both clearly; Kendall's tau {found.tau:+.2f})"
        for better, other in found.reversed_pairs
    ]
    off = [
        (run, gap, interval)
        for run, gap, interval in zip(found.runs, found.gap, found.gap_interval)
        if interval[0] > 0 or interval[1] < 0
    ]
    if off:
        quoted = ", ".join(f"{run} {gap:+.3f} [{low:+.3f}, {high:+.3f}]" for run, gap, (low, high) in off[:SHOWN])
        said.append(
            f"{found.metric}: the synthetic questions read {len(off)} of {len(found.runs)} runs differently from "
            f"real queries (synthetic minus real: {quoted})"
        )
    return said


def transfer_lines(found: Transfer) -> list[str]:
    """The check in a few lines for the terminal: per metric, Kendall's tau and each run's gap, with intervals."""
    lines = [
        f"synthetic against real ({found.synthetic_queries} synthetic questions, {found.real_queries} real queries; "
        "gap: synthetic minus real, 95% intervals):"
    ]
    for metric in found.metrics:
        tau = (
            f"Kendall's tau {metric.tau:+.2f} [{metric.tau_interval[0]:+.2f}, {metric.tau_interval[1]:+.2f}]; "
            if metric.tau is not None and metric.tau_interval is not None
            else ""
        )
        gaps = ", ".join(
            f"{run} {gap:+.3f} [{low:+.3f}, {high:+.3f}]"
            for run, gap, (low, high) in zip(metric.runs, metric.gap, metric.gap_interval)
        )
        lines.append(f"  {metric.metric}: {tau}gap {gaps}")
    return lines
