"""The ``testset-builder`` command. Thin: parse options, call the library, print.

Commands are registered by importing their modules, and listed in pipeline order (the stages' declarations say
which commands are theirs): corpus (init, config, chunk), indexing (index),
pipeline (run), labels (synthesize, propose, audit, estimate, select, queue, costs, resume), reviewing (serve, review),
releases (release, diff, export, push, import, remap), logs (export-chunks, import-logs), scoring (score, compare,
baseline, report).

A process that runs one of the scoring commands imports that module alone: the others, and the stages' declarations,
are imports a small ``score`` would spend most of its time on. A plain line of one (:mod:`~.direct`) calls its
function in ``scoring_bodies`` without importing Typer at all; any other line goes through Typer to the same
function. Its options, output and exit codes are the same either way. ``app`` here (the Typer app with every
command, as ``--help`` lists them) and ``PIPELINE`` are built on first use.
"""

from __future__ import annotations

import importlib
import sys

from .direct import plain_call
from .output import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK, EXIT_PARTIAL, QUIET, run_app

FIRST = ("init", "run", "config")  # before any stage's commands: a new set, the whole job, the settings
LAST = ("costs", "resume", "score", "compare")  # of no stage: the LLM ledger, scoring runs
MODULES = ("corpus", "indexing", "labels", "logs", "pipeline", "releases", "reviewing", "scoring")
# commands a process may run with their own module imported alone (the declarations, and the functions a plain
# line calls without Typer): none of them reads the stages' declarations
ALONE = {command: ("scoring", "scoring_bodies") for command in ("score", "compare", "baseline", "report")}


def _name(command) -> str:
    return command.name or command.callback.__name__


def _with_help(commands) -> None:
    from .output import interruptible
    from .typer_app import paragraphs

    for command in commands:  # typer keeps a docstring's line breaks: rich then wraps each line apart
        if command.help is None:
            command.help = paragraphs(command.callback.__doc__)
        command.callback = interruptible(command.callback)


def _register(module: str):
    """The Typer app with ``module``'s commands registered (and those registered before)."""
    from .typer_app import app

    importlib.import_module(f"{__name__}.{module}")
    _with_help(app.registered_commands)
    return app


def every_command():
    """The Typer app with every command registered, in pipeline order: each stage's commands in run's order, as the
    stages declare them (the built-in ones: a plugin's stage brings no command); a command of no stage and not in
    FIRST or LAST goes last."""
    from ..api import stages as _stages  # noqa: F401  (declares the built-in stages)
    from ..registry import STAGES

    for module in MODULES:
        app = _register(module)
    order = [*FIRST, *(command for stage in STAGES.values() for command in stage.commands), *LAST]
    app.registered_commands.sort(key=lambda c: order.index(_name(c)) if _name(c) in order else len(order))
    return app


def __getattr__(name: str):
    if name == "app":
        return every_command()
    if name == "PIPELINE":
        return [_name(command) for command in every_command().registered_commands]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(argv: list[str] | None = None) -> int:
    """Entry point: a plain line of a scoring command calls its function without Typer
    (:mod:`~testset_builder.cli.direct`); any other line registers what it needs (one scoring command's module, else
    every command) and runs the Typer app. Either way :func:`~testset_builder.cli.output.run_app` gives the exit
    code, ``--quiet`` and the ``--json`` error document."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = next((arg for arg in args if arg != QUIET), None)
    if command not in ALONE:
        return run_app(args, app=every_command())
    declared, bodies = ALONE[command]
    called = plain_call(command, bodies, [arg for arg in args if arg != QUIET][1:])
    return run_app(args, direct=called) if called is not None else run_app(args, app=_register(declared))


__all__ = ["EXIT_BAD_INPUT", "EXIT_INTERNAL", "EXIT_OK", "EXIT_PARTIAL", "app", "main"]
