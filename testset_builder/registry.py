"""The registries, on the ground floor so that the config (and anything else) can ask what is registered without
importing the layers that register: the provider kinds a config may name, and every file format.

Plugins: a package installed with an entry point in the ``testset_builder`` group (as simonw/llm finds its plugins)
names a module whose import registers what it adds (providers, formats, review actions, stages) through the same
``register_*`` functions. :func:`load_plugins` imports them once per process: the CLI when it starts, the library
on its first lookup of a provider, a format, a review action or a stage. In ``pyproject.toml``::

    [project.entry-points.testset_builder]
    my_provider = "my_package.testset_plugin"

Every file format the tool reads or writes for labels and runs is found through one registry: each format is one
entry holding its reader, its writer and how to recognise a file of it. ``read_qrels``, ``read_run``, ``export``,
``read_log``, the review interchange and the commands' ``--format`` options read these tables;
:func:`register_qrels_format`, :func:`register_run_format`, :func:`register_release_export`,
:func:`register_log_format` and :func:`register_review_format` add one (a format of your own in one file).

A release export writes a loaded release (anything with ``path``, ``queries``, ``corpus`` and ``qrels_table()``)
into an empty folder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TableFormat:
    """A format of qrels or of runs: ``read(path)`` (runs: ``read(path, name=None)``), ``write(table, path)``,
    and ``detect(path, first_line)``: whether a file is in this format (None: only when named)."""

    name: str
    read: Callable[..., Any]
    write: Callable[[Any, Path], None] | None = None
    detect: Callable[[Path, str], bool] | None = None
    description: str = ""


@dataclass(frozen=True)
class ReleaseExport:
    """A way to copy a release out: ``write(release, out_dir)`` into an empty folder."""

    name: str
    write: Callable[[Any, Path], None]
    description: str = ""


@dataclass(frozen=True)
class LogFormat:
    """A production log's format: ``read(path, fields)`` streams its records and unreadable lines
    (:class:`~.logs.LogRecord`, :class:`~.logs.Unreadable`), ``fields`` being the config's ``logs.fields``;
    ``looks_like(head)``: whether the first characters of a file are in this format (None: never guessed), so a log
    refused under another ``--format`` can name this one; ``aliases``: other names it is known by."""

    name: str
    read: Callable[[Path, Any], Any]
    description: str = ""
    looks_like: Callable[[str], bool] | None = None
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReviewFormat:
    """An annotation tool's files (:mod:`.review_tools`): ``write(pairs, suggestions)`` gives the files to hand it,
    ``{name: text or JSON-able}``, for the pairs wanting verdicts (or the disagreements to settle); ``read(records)``
    the grades in its export and how many records had none; ``detect(record)``: whether an exported record is in
    this format; ``settings(task)``: the files that set up the tool's project for the workspace's task (its
    guidelines, grade meanings and overlap: a ``ReviewTask``), None when the tool needs none."""

    name: str
    write: Callable[[list, bool], dict[str, Any]]
    read: Callable[[list[dict]], tuple[list, int]]
    detect: Callable[[dict], bool] | None = None
    description: str = ""
    settings: Callable[[Any], dict[str, Any]] | None = None


QRELS: dict[str, TableFormat] = {}
RUNS: dict[str, TableFormat] = {}
RELEASE_EXPORTS: dict[str, ReleaseExport] = {}
LOG_FORMATS: dict[str, LogFormat] = {}
REVIEW_FORMATS: dict[str, ReviewFormat] = {}


PLUGIN_GROUP = "testset_builder"
_plugins: dict[str, str] = {}  # the plugins loaded: entry point name -> module
_from_plugins: set[tuple[int, str]] = set()  # (id of its table, name) of each format a plugin registered
_loading: list[str] = []  # the plugin being imported (empty: none)
_loaded: list[bool] = [False]


def load_plugins() -> dict[str, str]:
    """Import every module installed under the ``testset_builder`` entry-point group, once per process (later calls
    return at once), and say which: ``{entry point name: module}``. A plugin that fails to import raises
    :class:`~testset_builder.errors.PluginError` naming it."""
    if _loaded[0]:
        return dict(_plugins)
    _loaded[0] = True  # set first: a plugin's import may look something up, which must not load plugins again
    from importlib.metadata import entry_points

    from .errors import PluginError

    for point in entry_points(group=PLUGIN_GROUP):
        _loading.append(point.name)
        try:
            point.load()
        except Exception as error:
            raise PluginError(point.name, point.value, error) from error
        finally:
            _loading.pop()
        _plugins[point.name] = point.value
    return dict(_plugins)


def _register(table: dict, entry, what: str):
    if not entry.name or not entry.name.replace("-", "").replace("_", "").isalnum() or entry.name == "auto":
        raise ValueError(f"a {what} format's name is a plain word other than auto, not {entry.name!r}")
    if entry.name in table:
        raise ValueError(f"{what} format {entry.name!r} is registered already")
    table[entry.name] = entry
    if _loading:
        _from_plugins.add((id(table), entry.name))
    return entry


def _built_in_first(table: dict) -> list:
    """The entries of ``table`` in registration order, the built-in ones before those of plugins (a plugin may load
    before the built-in formats do), so a plugin's format never takes a file the built-in ones recognise."""
    return sorted(table.values(), key=lambda entry: (id(table), entry.name) in _from_plugins)


def register_qrels_format(fmt: TableFormat) -> TableFormat:
    """Read (and write) qrels in ``fmt``; with ``detect``, ``read_qrels`` recognises its files by itself."""
    return _register(QRELS, fmt, "qrels")


def register_run_format(fmt: TableFormat) -> TableFormat:
    """Read (and write) runs in ``fmt``; with ``detect``, ``read_run`` recognises its files by itself."""
    return _register(RUNS, fmt, "run")


def register_release_export(fmt: ReleaseExport) -> ReleaseExport:
    """Make ``fmt`` a format ``export`` (and ``testset-builder export --format``) writes a release in."""
    return _register(RELEASE_EXPORTS, fmt, "export")


def register_log_format(fmt: LogFormat) -> LogFormat:
    """Make ``fmt`` a format ``import-logs --format`` (and the config's ``logs.format``) reads."""
    return _register(LOG_FORMATS, fmt, "log")


def register_review_format(fmt: ReviewFormat) -> ReviewFormat:
    """Make ``fmt`` a format ``review-export`` writes and ``review-import`` reads."""
    return _register(REVIEW_FORMATS, fmt, "review")


# the modules that register the built-in formats when imported, as a plugin's module registers its own
BUILT_IN_FORMATS = (
    "testset_builder.export",
    "testset_builder.export.logs",
    "testset_builder.export.langfuse",
    "testset_builder.export.review_tools",
)


def load_built_in_formats() -> None:
    """Import the modules of the built-in formats, and so the plugins (once; later calls cost a dictionary lookup
    each)."""
    import importlib

    for module in BUILT_IN_FORMATS:
        importlib.import_module(module)
    load_plugins()


BUILT_IN_LOG_FORMATS = {"jsonl": "jsonl", "csv": "csv", "otel": "otel", "otlp": "otel", "langfuse": "langfuse"}
"""The built-in log formats, by name and by alias: a name among them is known without importing the modules that
register them (every command validates the config's ``logs.format``; those imports are the export layer's)."""


def known_log_format(name: str) -> str:
    """The registered log format ``name`` names, by its name or an alias (``otlp`` for ``otel``), the built-in ones
    registered first (:func:`load_built_in_formats`)."""
    if name in BUILT_IN_LOG_FORMATS:
        return BUILT_IN_LOG_FORMATS[name]
    load_built_in_formats()
    if name in LOG_FORMATS:
        return name
    found = next((fmt.name for fmt in LOG_FORMATS.values() if name in fmt.aliases), None)
    if found is None:
        raise ValueError(f"unknown log format {name!r}: one of {', '.join(LOG_FORMATS)}")
    return found


def log_format_of(head: str) -> str | None:
    """The first registered log format whose ``looks_like`` recognises ``head``, the start of a file."""
    load_built_in_formats()
    formats = _built_in_first(LOG_FORMATS)
    return next((fmt.name for fmt in formats if fmt.looks_like is not None and fmt.looks_like(head)), None)


def detected(table: dict[str, TableFormat], path: Path, line: str) -> str | None:
    """The first format (in registration order, the built-in ones first) that recognises the file."""
    for fmt in _built_in_first(table):
        if fmt.detect is not None and fmt.detect(path, line):
            return fmt.name
    return None


@dataclass(frozen=True)
class Abilities:
    """What a provider's model is, declared on its class (``abilities = Abilities(weak=True, local=True)``) and read
    wherever the tool adapts to the model, never by the kind's name, so a self-hosted small model of any kind gets
    the embedded model's treatment by saying what it is.

    ``weak``: a small model, near chance as a judge of relevance (the relevance estimate grades its pools and decides
    for the critic and mining instead) and writing many unusable questions (reviewers check the doubted ones before
    a release). ``context_tokens``: the model's context window when it is small enough to matter (None: large); the
    plan warns of requests longer than it. ``local``: it runs on this machine: it costs nothing, and its time is its
    measured prompt and output tokens per second, not calls in flight."""

    weak: bool = False
    context_tokens: int | None = None
    local: bool = False


# the provider kinds a config may name: each a class ("module:Class", imported when first used) that declares what
# it can do (``prompt_style``, ``supports_logprobs``, ``supports_completion``, ``abilities``) and builds itself from a
# role's config (``from_config``); :func:`register_provider` adds one
_KINDS: dict[str, type | str] = {
    "openai": "testset_builder.llm.openai_provider:OpenAIProvider",
    "anthropic": "testset_builder.llm.anthropic_provider:AnthropicProvider",
    "local": "testset_builder.llm.local_provider:LocalProvider",
}


def register_provider(kind: str, provider: type | str, replace: bool = False) -> None:
    """Make ``kind`` a provider configs may name (``generator: {kind: KIND, model: ...}``): a class, or
    ``"module:Class"`` imported when first used. The class has ``from_config(config) -> provider`` and the
    abilities :class:`~testset_builder.llm.providers.Provider` lists as class attributes. A kind already there is
    replaced only if asked."""
    if not kind or not kind.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"a provider kind is a plain name, not {kind!r}")
    if kind in _KINDS and not replace:
        raise ValueError(f"provider kind {kind!r} is registered already (replace=True replaces it)")
    if not isinstance(provider, str):
        _check_declared(kind, provider)
    _KINDS[kind] = provider


# what a provider class declares, read without an instance: by the plan, the roles and the config
DECLARED = ("from_config", "prompt_style", "supports_logprobs", "supports_completion", "abilities")


def _check_declared(kind: str, provider: type) -> None:
    missing = [name for name in DECLARED if not hasattr(provider, name)]
    if missing:
        raise ValueError(
            f"provider kind {kind!r}: {provider.__name__} does not declare {', '.join(missing)} (class attributes: "
            "prompt_style 'chat' or 'completion', supports_logprobs, supports_completion, abilities = Abilities(...); "
            "and a from_config classmethod)"
        )
    if not isinstance(provider.abilities, Abilities):
        raise ValueError(f"provider kind {kind!r}: {provider.__name__}.abilities is not an Abilities(...)")


def provider_kinds() -> tuple[str, ...]:
    load_plugins()
    return tuple(_KINDS)


def provider_class(kind: str) -> type:
    """The class of a provider kind (imported now if it was registered by name)."""
    import importlib

    load_plugins()
    found = _KINDS.get(kind)
    if found is None:
        raise ValueError(f"unknown provider kind {kind!r}: one of {', '.join(_KINDS)}")
    if isinstance(found, str):
        module, _, name = found.partition(":")
        found = getattr(importlib.import_module(module), name)
        _check_declared(kind, found)
        _KINDS[kind] = found
    return found


def abilities(kind: str) -> Abilities:
    """What the model of a provider kind is, as its class declares it."""
    return provider_class(kind).abilities


def _never(result: Any) -> bool:
    return False


def _free(result: Any) -> float:
    return 0.0


@dataclass(frozen=True)
class Stage:
    """A stage of ``run``, declared once: ``run`` calls it, its printed line comes from it, the plan asks it for its
    steps, and ``--help`` lists its commands in its place. A new stage is its module and one of these
    (:func:`register_stage`).

    ``run(step)``: how ``run`` calls it, given a :class:`~testset_builder.api.pipeline.RunStep` (the config with
    what is left of the run's budget, the open workspace, the stages so far); it returns the stage's result (an
    object with ``as_dict()``), or None when it has nothing to do this time. ``summary(document)``: one line of what
    it did, from its result's ``as_dict()`` (None: "done"). ``plan(planning)``: its steps in the plan, a list of
    :class:`~testset_builder.stages.plan.Step` from a :class:`~testset_builder.stages.plan.Planning` (None: it makes
    no LLM call). ``fell_short(result)``: it did less than asked, so ``run`` stops there (a rerun can do more);
    ``cost_usd(result)``: what it spent, taken from the run's budget. ``section``: its config section; ``api``: the
    library function that runs it alone; ``commands``: the commands of its part of the pipeline, in ``--help``
    order; ``workspace``: whether it runs in the workspace ``run`` holds open (chunking comes before it is opened,
    the report after it is closed); ``after``: the stage it comes after (None: after those registered before it)."""

    name: str
    run: Callable[[Any], Any]
    summary: Callable[[dict], str] | None = None
    plan: Callable[[Any], list] | None = None
    fell_short: Callable[[Any], bool] = _never
    cost_usd: Callable[[Any], float] = _free
    section: str | None = None
    api: Callable[..., Any] | None = None
    commands: tuple[str, ...] = ()
    workspace: bool = True
    after: str | None = None


STAGES: dict[str, Stage] = {}
# the module that declares the built-in stages when imported, as a plugin's module declares its own
BUILT_IN_STAGES = ("testset_builder.api.stages",)


def register_stage(stage: Stage) -> Stage:
    """Make ``stage`` a stage of ``run`` (its name new), placed after ``stage.after`` or after those before it."""
    if not stage.name or not stage.name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"a stage's name is a plain word, not {stage.name!r}")
    if stage.name in STAGES:
        raise ValueError(f"stage {stage.name!r} is registered already")
    STAGES[stage.name] = stage
    return stage


def run_stages() -> list[Stage]:
    """The stages of ``run`` in order: the built-in ones and the plugins', each declared ``after`` another right
    after it (and after any declared after that one before it)."""
    import importlib

    for module in BUILT_IN_STAGES:
        importlib.import_module(module)
    load_plugins()
    ordered = [stage for stage in STAGES.values() if stage.after is None]
    placed = {stage.name for stage in ordered}
    waiting = [stage for stage in STAGES.values() if stage.after is not None]
    while waiting:
        ready = [stage for stage in waiting if stage.after in placed]
        if not ready:
            named = ", ".join(f"{s.name!r} after {s.after!r}" for s in waiting)
            raise ValueError(f"stages placed after no stage there is: {named}")
        for stage in ready:
            position = next(i for i, placed_stage in enumerate(ordered) if placed_stage.name == stage.after) + 1
            while position < len(ordered) and ordered[position].after == stage.after:
                position += 1
            ordered.insert(position, stage)
            placed.add(stage.name)
        waiting = [stage for stage in waiting if stage.name not in placed]
    return ordered


def stage_named(name: str) -> Stage | None:
    """The stage called ``name`` (None: no stage is)."""
    return next((stage for stage in run_stages() if stage.name == name), None)
