"""How big a difference a set can detect, and how many queries a smaller one would need.

Two-sided paired test at level alpha with power 1 - beta:

    MDE = (q_{1 - alpha/2} + q_{1 - beta}) * SE,   SE = sd_diff / sqrt(n_eff),   n_eff = n / design effect

with normal quantiles q, except under :data:`T_BELOW` clusters, where the tests themselves are t with G - 1 degrees
of freedom or G sign flips and normal quantiles promised power they do not have (6 clusters: 41-57% detected at
the "80%" figure): there q are Student's t quantiles with G - 1 degrees of freedom, and under :data:`FEW_CLUSTERS`
the line says the figure is rough. The figure is for one test; ``compare`` decides over all its rows with Holm's
correction, which needs a larger difference (the line says so when there are several rows).
where SE is the standard error of the mean paired difference, cluster-robust when queries are clustered
(:func:`~.stats.mean_variance`, never below the independent one), so clustering shrinks the effective number
of queries. To detect a difference
``d`` instead, the set must grow by ``(MDE / d)^2``: that many times its queries, and its clusters, assuming new
queries come in clusters like the ones it has.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np

from .stats import mean_variance

if TYPE_CHECKING:
    from .evaluate import Evaluation

RULE_OF_THUMB = "course's rule: 50-100 queries are directional, 500+ detect a 2-3% recall difference"
T_BELOW = 30  # clusters: Student's t quantiles (G - 1 df) below this, normal ones from here on
FEW_CLUSTERS = 20  # below this, the figure is rough whatever the quantiles


@dataclass(frozen=True)
class SetSize:
    """What a set of ``queries`` (in ``clusters``) can detect on one metric."""

    metric: str
    queries: int
    clusters: int
    sd_difference: float  # per-query standard deviation of the paired differences
    effective_queries: float  # n / design effect
    min_detectable_difference: float
    alpha: float
    power: float
    detect: float | None = None
    queries_needed: int | None = None
    clusters_needed: int | None = None
    assumption: str = ""

    def as_dict(self) -> dict:
        """JSON-ready: a figure that cannot be computed (no variation) is None, not NaN."""
        return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in asdict(self).items()}


def z_sum(alpha: float = 0.05, power: float = 0.8, clusters: int | None = None) -> float:
    """q_{1 - alpha/2} + q_{power}: normal quantiles (the standard library's: importing scipy.stats takes 1.4 s), or
    Student's t with ``clusters`` - 1 degrees of freedom under :data:`T_BELOW` clusters."""
    if clusters is not None and 2 <= clusters < T_BELOW:
        from scipy import stats

        df = clusters - 1
        return float(stats.t.ppf(1.0 - alpha / 2.0, df) + stats.t.ppf(power, df))
    normal = NormalDist()
    return normal.inv_cdf(1.0 - alpha / 2.0) + normal.inv_cdf(power)


def set_size(
    metric: str,
    differences: np.ndarray,
    clusters: np.ndarray | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    detect: float | None = None,
    variance_factor: float = 1.0,
    assumption: str = "",
) -> SetSize:
    """The minimum detectable difference from per-query paired ``differences`` (and the queries needed to detect
    ``detect``). ``variance_factor`` scales the variance for a stated assumption (2: two uncorrelated runs each as
    variable as ``differences``, when ``score`` has one run and no pair)."""
    differences = np.asarray(differences, dtype=np.float64)
    n = len(differences)
    groups = n if clusters is None else int(clusters.max()) + 1 if n else 0
    # clustering may widen the variance, never narrow it below independence: a few clusters can make the
    # cluster-robust estimate tiny by chance, and guidance should not promise more than the queries themselves
    variance = float(max(mean_variance(differences, clusters)[0], mean_variance(differences)[0])) * variance_factor
    sd = float(differences.std(ddof=1)) * math.sqrt(variance_factor) if n > 1 else 0.0
    effective = sd**2 / variance if variance > 0 else float(n)
    # no variation (identical runs on this metric, or too few queries): nothing to base a figure on
    mde = z_sum(alpha, power, groups) * math.sqrt(variance) if n > 1 and variance > 0 else math.nan
    needed_queries = needed_clusters = None
    if detect is not None and detect > 0 and not math.isnan(mde):
        growth = (mde / detect) ** 2
        needed_queries, needed_clusters = math.ceil(n * growth), math.ceil(groups * growth)
    return SetSize(
        metric, n, groups, sd, effective, mde, alpha, power, detect, needed_queries, needed_clusters, assumption
    )


def set_sizes(
    evaluations: Sequence[Evaluation], clusters: np.ndarray | None, alpha: float, detect: float | None
) -> list[SetSize]:
    """What a set can detect per metric: from the per-query differences of the two best runs of the metric, or,
    with one run, from its own per-query variance doubled (a second run as variable and uncorrelated: the
    variance of a difference is at most that when runs correlate positively, as runs on one set do)."""
    sizes = []
    for spec in evaluations[0].metrics:
        name = str(spec)
        ranked = sorted(evaluations, key=lambda e: e.mean(name), reverse=True)
        if len(ranked) > 1:
            differences = ranked[0].per_query[name] - ranked[1].per_query[name]
            sizes.append(
                set_size(name, differences, clusters, alpha=alpha, detect=detect, assumption="the two best runs")
            )
        else:
            assumption = "one run: a second as variable and uncorrelated assumed, an upper bound; compare measures it"
            values = ranked[0].per_query[name]
            sizes.append(
                set_size(name, values, clusters, alpha, detect=detect, variance_factor=2.0, assumption=assumption)
            )
    return sizes
