"""What every api function stands on: a config, a workspace opened or held, an event loop, the LLM roles, the
prompts; and the two commands that make or show a config (``init``, ``config``)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ..config import Config
    from ..prompts import PromptLibrary
    from ..scaffold import InitSummary
    from ..store import Workspace

T = TypeVar("T")


def load_config(source: str | Path | Config | None = None, **overrides: Any) -> Config:
    """A config: a file, a bundled config's name, or (None) the default one, with settings replaced by keyword
    (dotted keys spelled with ``__``: ``load_config("c.yaml", synthesize__questions=5, workspace="ws")``); an
    override of None changes nothing. A :class:`Config` given is returned with the overrides applied."""
    from ..config import Config, override, resolve_config

    dotted = {key.replace("__", "."): value for key, value in overrides.items()}
    if isinstance(source, Config):
        return override(source, dotted)
    return resolve_config(source, dotted)


def open_workspace(
    config: Config | str | Path,
    create: bool = False,
    readonly: bool = False,
    on_wait: Callable[[str], None] | None = None,
) -> contextlib.AbstractContextManager[Workspace]:
    """The workspace of ``config`` (or at a path), opened: use ``with``. It is created with ``create``;
    ``on_wait(holder)`` hears when another process holds it and this one waits."""
    from ..store import open_workspace as opening

    root = Path(config) if isinstance(config, str | Path) else config.workspace
    return opening(root, create=create, readonly=readonly, on_wait=on_wait)


@contextlib.contextmanager
def opened(
    config: Config,
    workspace: Workspace | None,
    create: bool = False,
    readonly: bool = False,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[Workspace]:
    """``workspace`` when one is held open, else the config's, opened for the block."""
    if workspace is not None:
        yield workspace
        return
    with open_workspace(config, create=create, readonly=readonly, on_wait=on_wait) as fresh:
        yield fresh


def run_async(awaitable: Awaitable[T]) -> T:
    """Run a coroutine to its end from synchronous code, also where an event loop already runs (a notebook): then
    in a thread of its own."""
    import asyncio

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(awaitable)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, awaitable).result()


def with_roles(config: Config, workspace: Workspace, stage: str, work: Callable[..., Awaitable[T]], progress=None) -> T:
    """``await work(roles, progress)`` with the config's generator and judge opened for ``stage`` (their clients
    share the config's budget, cache and limits); returns what ``work`` returned."""
    from ..llm import roles as llm_roles

    async def go():
        async with llm_roles.open_roles(config, workspace, stage) as roles:
            return await work(roles, progress)

    return run_async(go())


def prompt_library(config: Config) -> PromptLibrary:
    """The prompts the config's stages use: its ``prompts_dir``, the bundled ones filling the gaps."""
    from ..prompts import PromptLibrary

    return PromptLibrary(config.prompts_dir)


def init(directory: str | Path, starting_from: str = "quickstart", force: bool = False) -> InitSummary:
    """A new test set in ``directory``: a config with every setting (started from a bundled one), a sample queries
    file and a README stub; refuses to overwrite them unless ``force``."""
    from ..scaffold import init_project

    return init_project(directory, starting_from, force)


@dataclass
class ConfigView:
    """A config with every default filled in: ``yaml`` as a file a user starts from; ``as_dict()`` with the
    generator and judge roles resolved."""

    config: Config
    folder: Path | None = None  # the folder of the file it was read from (its relative paths are read from there)

    @property
    def yaml(self) -> str:
        from ..config import as_yaml

        return as_yaml(self.config, self.folder)

    def as_dict(self) -> dict:
        data = self.config.model_dump(mode="json")
        data["generator"] = self.config.generator_role().model_dump(mode="json")
        data["judge"] = self.config.judge_role().model_dump(mode="json")
        return data


def describe_config(source: str | Path | Config | None = None, **overrides: Any) -> ConfigView:
    """The config :func:`load_config` gives, with every setting shown (its YAML with paths as the file has them,
    relative to its folder)."""
    is_file = isinstance(source, str | Path) and Path(source).is_file()
    return ConfigView(load_config(source, **overrides), Path(source).parent if is_file else None)
