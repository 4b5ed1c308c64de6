"""The ``testset-builder`` command. Thin: parse options, call the library, print.

Commands are registered in pipeline order by importing their modules: corpus (config, chunk), labels (synthesize,
propose, audit, queue, costs, resume), releases (release, diff, export, push, import), scoring (score, compare,
baseline).
"""

from . import corpus, labels, releases, scoring  # noqa: F401  (registers the commands)
from .app import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_OK, EXIT_PARTIAL, app, main

__all__ = ["EXIT_BAD_INPUT", "EXIT_INTERNAL", "EXIT_OK", "EXIT_PARTIAL", "app", "main"]
