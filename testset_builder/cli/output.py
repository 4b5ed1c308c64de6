"""Exit codes, the two consoles and the run of one command line: what every command shares, without Typer or rich.

Exit codes scripts can trust: 0 success, 1 bad input (a one-line message names the file, line or value),
2 internal error (a bug: the message says how to get the traceback), 3 finished but some items failed or were
left for lack of budget (what was done is kept; rerun to go on), 4 ``run`` stopped while pairs drawn for review
wait for a human (review them, then run again), 5 ``compare --fail-if-worse``: a run is significantly worse than
the baseline, 130 interrupted (Ctrl-C; what was committed is kept).

Output discipline: reports for people go to ``out`` (stdout), progress bars, warnings and errors to ``err``
(stderr), JSON documents to stdout with a plain ``print``. ``--quiet``, anywhere on the command line, silences
``out`` and every progress bar; errors, warnings, exit codes and the ``--json`` document stay.

A scoring command called straight from a plain line (:mod:`~testset_builder.cli.direct`) runs through this module
alone: Typer is imported only for a line it parses, and rich only when something is printed through a console.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from ..errors import TestsetBuilderError

EXIT_OK, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_PARTIAL, EXIT_REVIEW, EXIT_REGRESSION = 0, 1, 2, 3, 4, 5
EXIT_INTERRUPTED = 130  # Ctrl-C: what was committed is kept
QUIET = "--quiet"


class LazyConsole:
    """A rich ``Console`` made on first use, so a command that prints no report (``score --json``) never imports
    rich; ``quiet`` (``--quiet``) is kept until then and handed to it."""

    def __init__(self, stderr: bool = False) -> None:
        self._stderr, self._quiet, self._made = stderr, False, None

    @property
    def console(self):
        if self._made is None:
            from rich.console import Console

            stream = sys.stderr if self._stderr else sys.stdout
            # piped output (CI logs, files) gets room for the comparison table instead of rich's 80-column default
            self._made = Console(stderr=self._stderr, width=None if stream.isatty() else 160, quiet=self._quiet)
        return self._made

    @property
    def quiet(self) -> bool:
        return self._quiet if self._made is None else self._made.quiet

    @quiet.setter
    def quiet(self, value: bool) -> None:
        if self._made is None:
            self._quiet = value
        else:
            self._made.quiet = value

    def print(self, *objects: Any, **options: Any) -> None:
        self.console.print(*objects, **options)


out, err = LazyConsole(), LazyConsole(stderr=True)


def escape(text: str) -> str:
    """``text`` with rich's markup escaped, for a console line that holds a value (a path, an id, a message)."""
    from rich.markup import escape as escaped

    return escaped(text)


def stages_document(result) -> dict:
    """``run``'s stages (an :class:`~testset_builder.api.RunResult`) as its --json gives them: each one's result and
    exit code (3 where it fell short)."""
    return {
        name: {"exit_code": EXIT_PARTIAL if result.fell_short(name) else EXIT_OK, "result": stage.as_dict()}
        for name, stage in result.stages.items()
    }


def _typer(name: str):
    """Typer's exception class ``name``; no class at all where Typer was never imported (then none was raised)."""
    typer = sys.modules.get("typer")
    return getattr(typer, name) if typer is not None else ()


def run_app(
    argv: list[str] | None = None, app: Callable[..., Any] | None = None, direct: tuple[Callable, dict] | None = None
) -> int:
    """Run one command line and map outcomes to exit codes (see the module docstring): through ``app`` (the Typer
    app with the commands the line needs, registered by :func:`testset_builder.cli.main`), or, for a plain line of
    a scoring command, ``direct``: its function and the arguments :mod:`~testset_builder.cli.direct` read. With
    ``--json``, a failure is one JSON document on stdout too (``{"error", "exit_code"}``), so a script reads one
    document whatever happened.

    ``--quiet`` is taken out of the arguments wherever it stands (users write it after the command, where click
    would refuse an option of the app) and silences ``out`` until this call returns. A call nested in a quiet one
    stays quiet."""
    args = list(sys.argv[1:] if argv is None else argv)
    was_quiet = out.quiet
    out.quiet = was_quiet or QUIET in args
    try:
        return _outcome([arg for arg in args if arg != QUIET], "--json" in args, app, direct)
    finally:
        out.quiet = was_quiet


class Interrupted(Exception):
    """Ctrl-C in a command, carried past Typer (which turns a KeyboardInterrupt into exit code 130 and drops it):
    ``interrupt`` is the KeyboardInterrupt, with what ``run`` did before it (``run_so_far``) for ``--json``."""

    def __init__(self, interrupt: KeyboardInterrupt) -> None:
        super().__init__("interrupted")
        self.interrupt = interrupt


def interruptible(callback: Callable[..., Any]) -> Callable[..., Any]:
    """A command's callback whose Ctrl-C reaches :func:`_outcome` as :class:`Interrupted` (once wrapped, kept)."""
    if getattr(callback, "interruptible", False):
        return callback

    @functools.wraps(callback)  # Typer reads the parameters through __wrapped__
    def called(*args, **kwargs):
        try:
            return callback(*args, **kwargs)
        except KeyboardInterrupt as interrupt:
            raise Interrupted(interrupt) from interrupt

    called.interruptible = True
    return called


def _called(function: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    """``function(**arguments)`` as click runs a command's callback: the end of input an abort, a closed pipe on
    stdout exit code 1 (Ctrl-C is said by :func:`_outcome`)."""
    try:
        return function(**arguments)
    except EOFError as error:
        import typer

        print(file=sys.stderr)
        raise typer.Abort() from error
    except OSError as error:
        if error.errno != errno.EPIPE:
            raise
        from click.utils import PacifyFlushWrapper

        sys.stdout, sys.stderr = PacifyFlushWrapper(sys.stdout), PacifyFlushWrapper(sys.stderr)
        sys.exit(1)


def _outcome(args: list[str], json_mode: bool, app: Callable[..., Any] | None, direct: tuple | None) -> int:
    """Run ``args`` and turn what happened into an exit code (and, with ``--json``, an error document)."""

    def failed(code: int, message: str, error: BaseException | None = None) -> int:
        if json_mode:
            document = {"error": message, "exit_code": code}
            so_far = getattr(error, "run_so_far", None)  # run: the stages that ended before this one failed
            if so_far is not None:
                document["stages"] = stages_document(so_far)
            print(json.dumps(document))
        return code

    def interrupted(error: BaseException | None) -> int:
        err.print("interrupted: what was finished is kept; rerun to go on")
        return failed(EXIT_INTERRUPTED, "interrupted", error)

    try:
        if direct is None:
            from ..registry import load_plugins

            load_plugins()  # installed plugins' providers, formats, review actions and stages, before any command
            code = app(args=args, standalone_mode=False)  # without standalone mode, click returns typer.Exit's code
            if code == EXIT_INTERRUPTED:  # Typer turns Ctrl-C into this code, and says nothing
                return interrupted(None)
        else:  # a scoring command called directly loads them only for a format it does not know
            code = _called(*direct)
        if isinstance(code, int) and code != EXIT_OK:
            return code
    except _typer("Exit") as done:
        return done.exit_code
    except _typer("Abort"):
        err.print("aborted")
        return failed(EXIT_BAD_INPUT, "aborted")
    except _typer("TyperException") as error:  # usage errors: unknown option, missing argument, bad value
        error.show(file=sys.stderr)
        return failed(EXIT_BAD_INPUT, error.format_message())
    except TestsetBuilderError as error:
        err.print(f"[bold red]error:[/] {escape(str(error))}", highlight=False, soft_wrap=True)  # one line, unfolded
        return failed(EXIT_BAD_INPUT, str(error), error)
    except KeyboardInterrupt as error:
        return interrupted(error)
    except Interrupted as error:
        return interrupted(error.interrupt)
    except Exception as error:  # anything else is our bug: say so, show the traceback only on request
        if os.environ.get("TESTSET_BUILDER_DEBUG"):
            raise
        err.print(
            f"[bold red]internal error:[/] {type(error).__name__}: {escape(str(error))}\n"
            "This is a bug in testset-builder; rerun with TESTSET_BUILDER_DEBUG=1 for the traceback.",
            highlight=False,
        )
        return failed(EXIT_INTERNAL, f"internal error: {type(error).__name__}: {error}", error)
    return EXIT_OK
