"""The ``testset-builder`` command. Thin: parse options, call the library, print.

Commands are registered by importing their modules, and listed in pipeline order (the stages' declarations say
which commands are theirs): corpus (init, config, chunk), indexing (index),
pipeline (run), labels (synthesize, propose, audit, estimate, select, queue, costs, resume), reviewing (serve, review),
releases (release, diff, export, push, import, remap), logs (export-chunks, import-logs), scoring (score, compare,
baseline, report).

A process that runs one of the scoring commands imports that module alone: the others, and the stages' declarations,
are imports a small ``score`` would spend most of its time on. Its options, output and exit codes are the same, since
the command is the same function registered on the same app. ``app`` here (the Typer app with every command, as
``--help`` lists them) and ``PIPELINE`` are built on first use.
"""

from __future__ import annotations

import importlib
import sys

from .app import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK, EXIT_PARTIAL, QUIET, paragraphs, run_app
from .app import app as _app

del app  # noqa: F821  (the submodule's name: the package's ``app`` is the Typer app, from __getattr__)

FIRST = ("init", "run", "config")  # before any stage's commands: a new set, the whole job, the settings
LAST = ("costs", "resume", "score", "compare")  # of no stage: the LLM ledger, scoring runs
MODULES = ("corpus", "indexing", "labels", "logs", "pipeline", "releases", "reviewing", "scoring")
# commands a process may run with their own module imported alone: none of them reads the stages' declarations
ALONE = {"score": "scoring", "compare": "scoring", "baseline": "scoring", "report": "scoring"}


def _name(command) -> str:
    return command.name or command.callback.__name__


def _with_help(commands) -> None:
    for command in commands:  # typer keeps a docstring's line breaks: rich then wraps each line apart
        if command.help is None:
            command.help = paragraphs(command.callback.__doc__)


def _register(module: str) -> None:
    importlib.import_module(f"{__name__}.{module}")
    _with_help(_app.registered_commands)


def every_command():
    """The Typer app with every command registered, in pipeline order: each stage's commands in run's order, as the
    stages declare them (the built-in ones: a plugin's stage brings no command); a command of no stage and not in
    FIRST or LAST goes last."""
    from ..api import stages as _stages  # noqa: F401  (declares the built-in stages)
    from ..registry import STAGES

    for module in MODULES:
        _register(module)
    order = [*FIRST, *(command for stage in STAGES.values() for command in stage.commands), *LAST]
    _app.registered_commands.sort(key=lambda c: order.index(_name(c)) if _name(c) in order else len(order))
    return _app


def __getattr__(name: str):
    if name == "app":
        return every_command()
    if name == "PIPELINE":
        return [_name(command) for command in every_command().registered_commands]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> int:
    """Entry point: register what the arguments need (one scoring command's module, else every command), then run
    the app (:func:`~testset_builder.cli.app.run_app`: exit codes, ``--quiet``, ``--json`` errors). A scoring
    command on a plain line is called without building its click command (:mod:`~testset_builder.cli.direct`)."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = next((arg for arg in args if arg != QUIET), None)
    if command not in ALONE:
        every_command()
        return run_app(args)
    _register(ALONE[command])
    function = next(c.callback for c in _app.registered_commands if _name(c) == command)
    return run_app(args, command=function)


__all__ = ["EXIT_BAD_INPUT", "EXIT_INTERNAL", "EXIT_OK", "EXIT_PARTIAL", "app", "main"]
