"""The ``testset-builder`` command. Thin: parse options, call the library, print.

Commands are registered by importing their modules, and listed in pipeline order (the stages' declarations say
which commands are theirs): corpus (init, config, chunk), indexing (index),
pipeline (run), labels (synthesize, propose, audit, estimate, select, queue, costs, resume), reviewing (serve, review),
releases (release, diff, export, push, import, remap), logs (export-chunks, import-logs), scoring (score, compare,
baseline, report).
"""

from ..api import stages as _stages  # noqa: F401  (declares the built-in stages)
from ..registry import STAGES
from . import corpus, indexing, labels, logs, pipeline, releases, reviewing, scoring  # noqa: F401  (registers commands)
from .app import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK, EXIT_PARTIAL, app, main, paragraphs

FIRST = ("init", "run", "config")  # before any stage's commands: a new set, the whole job, the settings
LAST = ("costs", "resume", "score", "compare")  # of no stage: the LLM ledger, scoring runs
# --help in pipeline order: each stage's commands in run's order, as the stages declare them (the built-in ones:
# a plugin's stage brings no command); a command of no stage and not listed above goes last
ORDER = [*FIRST, *(command for stage in STAGES.values() for command in stage.commands), *LAST]


def _name(command) -> str:
    return command.name or command.callback.__name__


app.registered_commands.sort(key=lambda c: ORDER.index(_name(c)) if _name(c) in ORDER else len(ORDER))
PIPELINE = [_name(command) for command in app.registered_commands]
for _command in app.registered_commands:  # typer keeps a docstring's line breaks: rich then wraps each line apart
    if _command.help is None:
        _command.help = paragraphs(_command.callback.__doc__)

__all__ = ["EXIT_BAD_INPUT", "EXIT_INTERNAL", "EXIT_OK", "EXIT_PARTIAL", "app", "main"]
