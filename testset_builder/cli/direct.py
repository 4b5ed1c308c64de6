"""A command's function called straight from a plain command line, without building the click command.

Typer converts each option through a pydantic type adapter it builds on every run, and so imports pydantic: on a
small ``score`` that is a good part of the process's time. A plain command line is one with only the command's own
long options, each given once as ``--name VALUE`` (or a flag), values that convert without doubt (digits, a
decimal, text, a path) within the option's bounds, and the arguments. :func:`direct_call` turns such a line into the
keyword arguments Typer would pass (a list option not given is None, as Typer gives it) and returns None for any
other line (``--help``, ``--name=VALUE``, a short option, a repeat, a value out of bounds or starting with ``-``, a
missing required option...), which then goes through Typer for its own parsing, messages and exit codes.
"""

from __future__ import annotations

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


class _Option:
    """One parameter of a command as Typer reads its declaration: its names (on and off for a flag), its type,
    whether it repeats, its default, its bounds."""

    def __init__(self, name: str, info: Any, annotation: Any) -> None:
        from typer.models import ArgumentInfo

        self.name, self.info = name, info
        self.default, self.required = info.default, info.default is ...
        unset = type(info)()
        self.plain = all(getattr(info, a, None) == getattr(unset, a, None) for a in PARSING)
        self.positional = isinstance(info, ArgumentInfo)
        kinds = [k for k in typing.get_args(annotation) if k is not type(None)] if _is_union(annotation) else None
        kind = annotation if kinds is None else kinds[0] if len(kinds) == 1 else None
        self.repeats = typing.get_origin(kind) is list
        self.kind = typing.get_args(kind)[0] if self.repeats else kind
        flag = name.replace("_", "-")  # Typer's name for an option declared without one
        declared = info.param_decls or ([f"--{flag}/--no-{flag}" if self.kind is bool else f"--{flag}"])
        self.on, self.off = set(), set()
        for names in () if self.positional else declared:
            on, _, off = names.partition("/")
            self.on.add(on.strip())
            if off:
                self.off.add(off.strip())

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
        low, high = getattr(self.info, "min", None), getattr(self.info, "max", None)
        return number if (low is None or number >= low) and (high is None or number <= high) else None


def _is_union(kind: Any) -> bool:
    return isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union


def options_of(function: Callable) -> list[_Option] | None:
    """The parameters of a command's function, or None when one is of a kind this module does not read."""
    from typer.models import ArgumentInfo, OptionInfo
    from typer.utils import get_params_from_function

    found = []
    for name, meta in get_params_from_function(function).items():
        if not isinstance(meta.default, ArgumentInfo | OptionInfo):
            return None
        option = _Option(name, meta.default, meta.annotation)
        readable = option.plain and option.kind in (bool, int, float, str, Path)
        if not readable or (option.kind is bool and (option.positional or option.repeats)):
            return None
        found.append(option)
    return found


def direct_call(function: Callable, args: list[str]) -> dict[str, Any] | None:
    """The keyword arguments Typer would call ``function`` (a command) with for ``args`` (what follows the command's
    name), or None when the line is not a plain one (see the module docstring)."""
    options = options_of(function)
    if options is None or any(key.endswith("_COMPLETE") for key in os.environ):  # shell completion: Typer's
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
