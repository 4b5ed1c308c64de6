"""The ``testset-builder`` command. Thin: parse options, call the library, print.

Commands are registered in pipeline order by importing their modules: corpus (init, config, chunk), indexing (index),
pipeline (run), labels (synthesize, propose, audit, estimate, select, queue, costs, resume), reviewing (serve, review),
releases (release, diff, export, push, import, remap), logs (export-chunks, import-logs), scoring (score, compare,
baseline, report).
"""

from . import corpus, indexing, labels, logs, pipeline, releases, reviewing, scoring  # noqa: F401  (registers commands)
from .app import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK, EXIT_PARTIAL, app, main, paragraphs

PIPELINE = [
    "init", "run", "config", "chunk", "index", "synthesize", "propose", "audit", "estimate", "select", "queue",
    "add-reviewer", "reviewers", "serve",
    "review", "review-stats", "review-export", "review-import", "costs", "resume", "release", "diff", "export",
    "push", "import", "remap", "export-chunks", "import-logs", "score", "compare", "baseline", "report",
]  # fmt: skip
app.registered_commands.sort(key=lambda c: PIPELINE.index(c.name or c.callback.__name__))  # --help in pipeline order
for _command in app.registered_commands:  # typer keeps a docstring's line breaks: rich then wraps each line apart
    if _command.help is None:
        _command.help = paragraphs(_command.callback.__doc__)

__all__ = ["EXIT_BAD_INPUT", "EXIT_INTERNAL", "EXIT_OK", "EXIT_PARTIAL", "app", "main"]
