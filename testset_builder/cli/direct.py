"""A command's function called straight from a plain command line, without Typer.

Typer converts each option through a pydantic type adapter it builds on every run, and Typer and rich are most of a
small ``score``'s start-up. A plain command line is one with only the command's own long options, each given once
as ``--name VALUE`` (or a flag), values that convert without doubt (digits, a decimal, text, a path) within the
option's bounds, and the arguments. :func:`direct_call` turns such a line into the keyword arguments Typer would
pass (a list option not given is None, as Typer gives it) and returns None for any other line (``--help``,
``--name=VALUE``, a short option, a repeat, a value out of bounds or starting with ``-``, a missing required
option...), which then goes through Typer for its own parsing, messages and exit codes.

The options are read from the commands' declarations (:func:`declared_options`, which imports Typer) into a table
kept in :mod:`~testset_builder.cli.plain_options` (``make reference`` writes it; a test holds it equal to the
declarations), which :func:`plain_call` reads without importing Typer.
"""

from __future__ import annotations

import importlib
import os
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

# settings of an option that change how its value is read: the line goes through Typer unless each is the default
PARSING = (
    "callback", "is_eager", "envvar", "default_factory", "parser", "prompt", "is_flag", "flag_value", "count",
    "clamp", "formats", "mode", "exists", "file_okay", "dir_okay", "writable", "readable", "resolve_path",
    "allow_dash", "path_type", "expose_value", "case_sensitive",
)  # fmt: skip
INTEGER = re.compile(r"[0-9]+")
DECIMAL = re.compile(r"[0-9]+(\.[0-9]+)?")


KINDS = {"bool": bool, "int": int, "float": float, "str": str, "Path": Path}


class Option:
    """One parameter of a command as Typer reads its declaration: its names (on and off for a flag), its type,
    whether it repeats or is an argument, its default (whether it is required), its bounds."""

    def __init__(self, name, on, off, kind, repeats, positional, default, required, low, high) -> None:
        self.name, self.on, self.off, self.kind = name, set(on), set(off), KINDS[kind]
        self.repeats, self.positional, self.default, self.required = repeats, positional, default, required
        self.low, self.high = low, high

    def row(self) -> tuple:
        """The option as a row of :data:`~testset_builder.cli.plain_options.OPTIONS`."""
        kind = next(name for name, kind in KINDS.items() if kind is self.kind)
        names = (sorted(self.on), sorted(self.off))
        return (self.name, *names, kind, self.repeats, self.positional, self.default, self.required, self.low,
                self.high)  # fmt: skip

    def value(self, text: str) -> Any:
        """``text`` as this option's type, or None where Typer might read it otherwise."""
        if not text or text.startswith("-"):
            return None
        if self.kind is int and INTEGER.fullmatch(text):
            number = int(text)
        elif self.kind is float and DECIMAL.fullmatch(text):
            number = float(text)
        elif self.kind is str:
            return text
        elif self.kind is Path:
            return Path(text)
        else:
            return None
        low, high = self.low, self.high
        return number if (low is None or number >= low) and (high is None or number <= high) else None


def _declared(name: str, info: Any, annotation: Any) -> Option | None:
    """The option Typer reads from a parameter's declaration, or None when it is of a kind this module does not
    read (a setting that changes how its value is read, a type other than a flag, a number, text or a path)."""
    from typer.models import ArgumentInfo

    unset = type(info)()
    if not all(getattr(info, a, None) == getattr(unset, a, None) for a in PARSING):
        return None
    positional = isinstance(info, ArgumentInfo)
    kinds = [k for k in typing.get_args(annotation) if k is not type(None)] if _is_union(annotation) else None
    kind = annotation if kinds is None else kinds[0] if len(kinds) == 1 else None
    repeats = typing.get_origin(kind) is list
    kind = typing.get_args(kind)[0] if repeats else kind
    if kind not in KINDS.values() or (kind is bool and (positional or repeats)):
        return None
    flag = name.replace("_", "-")  # Typer's name for an option declared without one
    declared = info.param_decls or ([f"--{flag}/--no-{flag}" if kind is bool else f"--{flag}"])
    on, off = [], []
    for names in () if positional else declared:
        first, _, second = names.partition("/")
        on.append(first.strip())
        if second:
            off.append(second.strip())
    required = info.default is ...
    default = None if required else info.default
    kind_name = next(key for key, value in KINDS.items() if value is kind)
    low, high = getattr(info, "min", None), getattr(info, "max", None)
    return Option(name, on, off, kind_name, repeats, positional, default, required, low, high)


def _is_union(kind: Any) -> bool:
    return isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union


def declared_options(function: Callable) -> list[Option] | None:
    """The parameters of a command's function as its declaration says them, or None when one is of a kind this
    module does not read."""
    from typer.models import ArgumentInfo, OptionInfo
    from typer.utils import get_params_from_function

    found = []
    for name, meta in get_params_from_function(function).items():
        declared = isinstance(meta.default, ArgumentInfo | OptionInfo)
        option = _declared(name, meta.default, meta.annotation) if declared else None
        if option is None:
            return None
        found.append(option)
    return found


def plain_call(command: str, module: str, args: list[str]) -> tuple[Callable, dict[str, Any]] | None:
    """``command``'s function in ``module`` (of this package) and the keyword arguments for ``args`` (what follows
    the command's name), or None when the line is not a plain one."""
    from .plain_options import OPTIONS

    arguments = direct_call([Option(*row) for row in OPTIONS[command]], args) if command in OPTIONS else None
    if arguments is None:
        return None
    return getattr(importlib.import_module(f"{__package__}.{module}"), command), arguments


def direct_call(options: list[Option], args: list[str]) -> dict[str, Any] | None:
    """The keyword arguments Typer would call a command whose parameters are ``options`` with for ``args`` (what
    follows the command's name), or None when the line is not a plain one (see the module docstring)."""
    if any(key.endswith("_COMPLETE") for key in os.environ):  # shell completion: Typer's
        return None
    by_name = {name: option for option in options for name in option.on | option.off}
    positional = [option for option in options if option.positional]
    given: dict[str, Any] = {}
    words = iter(args)
    for word in words:
        if not word.startswith("-"):
            if len(positional) != 1 or not positional[0].repeats:
                return None
            given.setdefault(positional[0].name, []).append(positional[0].value(word))
            continue
        option = by_name.get(word)
        if option is None or not word.startswith("--") or (option.name in given and not option.repeats):
            return None
        if option.kind is bool:
            given[option.name] = word in option.on
            continue
        value = option.value(next(words, ""))
        if value is None:
            return None
        if option.repeats:
            given.setdefault(option.name, []).append(value)
        else:
            given[option.name] = value
    if any(value is None for values in given.values() if isinstance(values, list) for value in values):
        return None
    if any(option.required and option.name not in given for option in options):
        return None
    return {option.name: given.get(option.name, option.default) for option in options}
