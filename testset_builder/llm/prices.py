"""Per-model token prices (``configs/prices.yaml``) and the cost of a call's usage."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from .. import bundled
from ..errors import InputError
from .types import Usage


@dataclass(frozen=True)
class ModelPrice:
    input: float
    output: float
    cached_input: float


@dataclass(frozen=True)
class PriceTable:
    """Prices in USD per million tokens; ``as_of`` is the date they were read from the providers."""

    models: dict[str, ModelPrice] = field(default_factory=dict)
    as_of: str | None = None

    @classmethod
    def empty(cls) -> PriceTable:
        return cls()

    @classmethod
    def load(cls, path: str | Path | None = None) -> PriceTable:
        """The price table at ``path``, or the bundled ``prices.yaml``."""
        source = bundled.config_files() / "prices.yaml" if path is None else Path(path)
        try:
            data = yaml.safe_load(source.read_text(encoding="utf-8")) or {}
            models = {
                name: ModelPrice(float(p["input"]), float(p["output"]), float(p.get("cached_input", p["input"])))
                for name, p in (data.get("models") or {}).items()
            }
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as error:
            raise InputError(f"cannot read prices ({error})", path=path or "prices.yaml (bundled)") from None
        return cls(models=models, as_of=str(data.get("as_of")) if data.get("as_of") else None)

    def price(self, model: str) -> ModelPrice | None:
        matches = [name for name in self.models if model == name or model.startswith(name)]
        return self.models[max(matches, key=len)] if matches else None

    def cost(self, model: str, usage: Usage) -> float | None:
        """USD for ``usage`` on ``model``; None when the model's price is unknown."""
        price = self.price(model)
        if price is None:
            return None
        uncached = max(usage.input_tokens - usage.cached_input_tokens, 0)
        return (
            uncached * price.input + usage.cached_input_tokens * price.cached_input + usage.output_tokens * price.output
        ) / 1e6
