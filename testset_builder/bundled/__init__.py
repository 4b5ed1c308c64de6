"""Files the package carries beside its code: the repository's top-level ``configs/`` and ``prompts/`` folders.

``pyproject.toml`` maps them into this package (``package-dir``), so a wheel holds them as
``testset_builder/bundled/configs`` and ``testset_builder/bundled/prompts``, and an editable checkout reads the
top-level folders themselves. Both are read through :mod:`importlib.resources`, never through a path computed
from ``__file__``, so they work from any install.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable

# (the functions are not named configs() and prompts(): importing the subpackages of those names would replace them)


def config_files() -> Traversable:
    """The bundled configs: quickstart.yaml (the local model), openai.yaml, anthropic.yaml, prices.yaml."""
    return files("testset_builder.bundled.configs")


def prompt_files() -> Traversable:
    """The bundled prompt files: synthesize/*.md and judge/*.md."""
    return files("testset_builder.bundled.prompts")


def config_names() -> list[str]:
    """Names a user can pass to ``--config`` instead of a path (every bundled config but the price table)."""
    return sorted(
        p.name[: -len(".yaml")]
        for p in config_files().iterdir()
        if p.name.endswith(".yaml") and p.name != "prices.yaml"
    )
