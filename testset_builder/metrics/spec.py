"""Metric names: parsed once, at the entry point, into :class:`MetricSpec`.

Accepted spellings: ``name@k`` (``ndcg@10``, ``recall@100``, ``mrr@10``), the bare name for the whole ranked list
(``map``, ``mrr``, ``ndcg``), and trec_eval's ``P_10`` / ``ndcg_cut_10`` / ``ndcg_cut.10`` forms. Names are
case-insensitive; the canonical spelling (``precision@10``) is what reports print.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UnknownMetricError

# canonical name -> (aliases, cutoff required)
_METRICS: dict[str, tuple[tuple[str, ...], bool]] = {
    "recall": (("r", "recall_cut"), False),
    "precision": (("p", "prec"), True),
    "mrr": (("rr", "recip_rank", "reciprocal_rank"), False),
    "ndcg": (("ndcg_cut",), False),
    "ndcg_exp": (("ndcg_burges", "ndcg_exponential"), False),
    "hit_rate": (("hit", "hits", "success", "hitrate"), False),
    "map": (("ap", "map_cut", "average_precision"), False),
    "r_precision": (("rprec", "r-precision", "rprecision"), False),
    "complete": (("completeness", "all_relevant", "all_evidence"), False),
}
_ALIASES = {alias: name for name, (aliases, _) in _METRICS.items() for alias in (name, *aliases)}
# ASCII digits alone: int() would also read fullwidth and other digits
_PATTERN = re.compile(r"^(?P<name>[a-z_\-]+?)(?:(?:@|_|\.)(?P<k>[0-9]+))?$")


@dataclass(frozen=True, order=True)
class MetricSpec:
    """A metric and its cutoff. ``k=None`` means the whole ranked list."""

    name: str
    k: int | None = None

    def __str__(self) -> str:
        return self.name if self.k is None else f"{self.name}@{self.k}"


def valid_metric_names() -> list[str]:
    def spelled(name: str, cutoff_required: bool) -> str:
        if name == "r_precision":
            return name
        return f"{name}@k" if cutoff_required else f"{name}[@k]"

    return [spelled(name, required) for name, (_, required) in _METRICS.items()]


def parse_metric(text: str) -> MetricSpec:
    """Parse one metric name such as ``ndcg@10``; raises :class:`UnknownMetricError` listing valid names."""
    raw = text.strip()
    match = _PATTERN.match(raw.lower())
    name = _ALIASES.get(match.group("name")) if match else None
    if name is None:
        raise UnknownMetricError(raw, valid_metric_names())
    k = int(match.group("k")) if match.group("k") is not None else None
    if k is not None and k < 1:
        raise UnknownMetricError(raw, valid_metric_names())
    if k is None and _METRICS[name][1]:
        raise UnknownMetricError(f"{raw} (needs a cutoff, e.g. {name}@10)", valid_metric_names())
    if name == "r_precision" and k is not None:
        raise UnknownMetricError(
            f"{raw} (R-precision cuts at the number of relevant chunks; no @k)", valid_metric_names()
        )
    return MetricSpec(name, k)


def parse_metrics(text: str | list[str]) -> list[MetricSpec]:
    """Parse a comma-separated list (or a list) of metric names, keeping order and dropping repeats."""
    parts = text.split(",") if isinstance(text, str) else [p for item in text for p in item.split(",")]
    specs: list[MetricSpec] = []
    for part in parts:
        if part.strip():
            spec = parse_metric(part)
            if spec not in specs:
                specs.append(spec)
    if not specs:
        raise UnknownMetricError("", valid_metric_names())
    return specs
