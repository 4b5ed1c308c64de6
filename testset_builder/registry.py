"""The registries, on the ground floor so that the config (and anything else) can ask what is registered without
importing the layers that register: the provider kinds a config may name, and every file format.

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


def _register(table: dict, entry, what: str):
    if not entry.name or not entry.name.replace("-", "").replace("_", "").isalnum() or entry.name == "auto":
        raise ValueError(f"a {what} format's name is a plain word other than auto, not {entry.name!r}")
    if entry.name in table:
        raise ValueError(f"{what} format {entry.name!r} is registered already")
    table[entry.name] = entry
    return entry


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
BUILT_IN_FORMATS = ("testset_builder.export",)


def load_built_in_formats() -> None:
    """Import the modules of the built-in formats (once; later calls cost a dictionary lookup each)."""
    import importlib

    for module in BUILT_IN_FORMATS:
        importlib.import_module(module)


def known_log_format(name: str) -> str:
    """The registered log format ``name`` names, by its name or an alias (``otlp`` for ``otel``), the built-in ones
    registered first (:func:`load_built_in_formats`)."""
    load_built_in_formats()
    if name in LOG_FORMATS:
        return name
    found = next((fmt.name for fmt in LOG_FORMATS.values() if name in fmt.aliases), None)
    if found is None:
        raise ValueError(f"unknown log format {name!r}: one of {', '.join(LOG_FORMATS)}")
    return found


def log_format_of(head: str) -> str | None:
    """The first registered log format whose ``looks_like`` recognises ``head``, the start of a file."""
    return next((fmt.name for fmt in LOG_FORMATS.values() if fmt.looks_like is not None and fmt.looks_like(head)), None)


def detected(table: dict[str, TableFormat], path: Path, line: str) -> str | None:
    """The first format (in registration order: the built-in ones first) that recognises the file."""
    for fmt in table.values():
        if fmt.detect is not None and fmt.detect(path, line):
            return fmt.name
    return None


# the provider kinds a config may name: each a class ("module:Class", imported when first used) that declares what
# it can do (``prompt_style``, ``supports_logprobs``, ``supports_completion``) and builds itself from a role's config
# (``from_config``); :func:`register_provider` adds one
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
    _KINDS[kind] = provider


def provider_kinds() -> tuple[str, ...]:
    return tuple(_KINDS)


def provider_class(kind: str) -> type:
    """The class of a provider kind (imported now if it was registered by name)."""
    import importlib

    found = _KINDS.get(kind)
    if found is None:
        raise ValueError(f"unknown provider kind {kind!r}: one of {', '.join(_KINDS)}")
    if isinstance(found, str):
        module, _, name = found.partition(":")
        found = _KINDS[kind] = getattr(importlib.import_module(module), name)
    return found
