"""The error tree. Every error a user can cause is a :class:`TestsetBuilderError`.

Each class carries the data a user needs to act (a path, a line number, an id) and renders itself as one line.
The CLI prints that line and exits 1; anything else that escapes is an internal error (exit 2).
"""

from __future__ import annotations

from pathlib import Path


class TestsetBuilderError(Exception):
    """Root of every error the tool raises on purpose."""

    __test__ = False  # not a pytest test class, despite the name

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class InputError(TestsetBuilderError):
    """A file or value supplied by the user is malformed; names the file and line where there is one."""

    def __init__(self, message: str, *, path: str | Path | None = None, line: int | None = None) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        where = ""
        if self.path is not None:
            where = f"{self.path}:{line}: " if line is not None else f"{self.path}: "
        super().__init__(f"{where}{message}")


class LargeRemovalError(InputError):
    """Chunking would mark a large share of the corpus removed; nothing was marked removed. Usually a source was left
    out or mistyped; pass --allow-removal when the removal is meant."""

    def __init__(self, removed: int, live: int, share: float, by_source: dict[str, int]) -> None:
        self.removed, self.live, self.share, self.by_source = removed, live, share, by_source
        shown = ", ".join(f"{source} ({n})" for source, n in list(by_source.items())[:3])
        more = f" and {len(by_source) - 3} more sources" if len(by_source) > 3 else ""
        super().__init__(
            f"this would mark {removed} of {live} documents removed (more than {share:.0%}), from {shown}{more}; "
            "nothing was marked removed. Pass --allow-removal if that is meant "
            "(a missing or mistyped source is the usual cause)"
        )


class PromptError(InputError):
    """A prompt file that cannot be found, read or rendered."""


class UnknownMetricError(TestsetBuilderError):
    """A metric name that the metrics module does not know; lists the names it does."""

    def __init__(self, name: str, valid: list[str]) -> None:
        self.name = name
        self.valid = valid
        super().__init__(
            f"unknown metric {name!r}; valid metrics: {', '.join(valid)} (add @k for a cutoff, e.g. ndcg@10)"
        )


class UnknownIdError(TestsetBuilderError):
    """A record refers to an id that does not exist (a query, chunk, document or version)."""

    def __init__(self, kind: str, ident: str) -> None:
        self.kind = kind
        self.ident = ident
        super().__init__(f"unknown {kind} id {ident!r}")


class ReviewConflictError(TestsetBuilderError):
    """A verdict that is no longer wanted: the item got its reviewers while this one's lease had run out. Nothing
    was stored; ask for the next item."""


class WorkspaceError(TestsetBuilderError):
    """The workspace cannot be opened or used as asked."""

    def __init__(self, message: str, *, path: str | Path) -> None:
        self.path = str(path)
        super().__init__(f"workspace {self.path}: {message}")


class SchemaTooNewError(WorkspaceError):
    """The workspace was written by a newer testset-builder than this one."""

    def __init__(self, path: str | Path, found: int, supported: int) -> None:
        self.found = found
        self.supported = supported
        super().__init__(
            f"schema version {found} is newer than this testset-builder supports ({supported}); "
            "upgrade testset-builder to open it (the file was not modified)",
            path=path,
        )


class WorkspaceCorruptError(WorkspaceError):
    """The workspace database file is not a readable SQLite database."""

    def __init__(self, path: str | Path, detail: str) -> None:
        self.detail = detail
        super().__init__(f"not a readable testset-builder database ({detail}); the file was left untouched", path=path)


class WorkspaceBusyError(WorkspaceError):
    """Another process holds the workspace for a stage and did not let go within the wait allowed."""

    def __init__(self, path: str | Path, holder: str, waited_s: float) -> None:
        self.holder = holder
        self.waited_s = waited_s
        super().__init__(f"in use by {holder}; gave up after waiting {waited_s:.0f} s", path=path)


class MissingApiKeyError(TestsetBuilderError):
    """A provider needs a key that the environment does not hold; names the variable, never a value."""

    def __init__(self, provider: str, variable: str) -> None:
        self.provider = provider
        self.variable = variable
        super().__init__(f"{provider} needs an API key: set the environment variable {variable}")


class ProviderError(TestsetBuilderError):
    """A provider call failed. ``retryable`` errors (429, 5xx, 529, timeouts, connection errors, malformed
    responses) are retried by the LLM layer; others (400, 401, 403, 404) are reported with the provider's message."""

    def __init__(
        self,
        provider: str,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
    ) -> None:
        self.provider = provider
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        code = f" {status}" if status is not None else ""
        super().__init__(f"{provider}{code}: {message}")


class StructuredOutputError(TestsetBuilderError):
    """The model's answer failed validation even after one re-ask; carries the last answer and what was spent."""

    def __init__(self, schema: str, detail: str, last_text: str, attempts: int, usage: dict[str, int]) -> None:
        self.schema = schema
        self.detail = detail
        self.last_text = last_text
        self.attempts = attempts
        self.usage = usage
        super().__init__(f"the model's answer failed {schema} validation after {attempts} attempts: {detail}")


class BudgetExceededError(TestsetBuilderError):
    """The next call could take spending past ``--max-cost-usd``; everything done so far is kept."""

    def __init__(self, budget_usd: float, spent_usd: float, next_call_usd: float) -> None:
        self.budget_usd = budget_usd
        self.spent_usd = spent_usd
        self.next_call_usd = next_call_usd
        super().__init__(
            f"stopped before exceeding the budget of ${budget_usd:.4f}: ${spent_usd:.4f} spent, the next call could "
            "cost "
            f"${next_call_usd:.4f}; what was done is kept, rerun with a larger --max-cost-usd to continue"
        )


class LocalModelError(TestsetBuilderError):
    """The embedded local model cannot be started; says what to install or where the server's log is."""


class DenseUnavailableError(TestsetBuilderError):
    """Dense retrieval was asked for but the dense extra is not installed; says how to install it."""


class HubError(TestsetBuilderError):
    """The Hugging Face hub refused or could not be reached; carries its message."""


class EngineError(TestsetBuilderError):
    """An ingest engine could not run (its extra is not installed, its cluster cannot be reached) or one of its tasks
    failed; names what failed. Nothing of the window of batches it failed in is stored."""


class CorpusChangedError(TestsetBuilderError):
    """The live chunks changed while an index was being built from them."""

    def __init__(self) -> None:
        super().__init__("the chunks changed while they were being indexed (another process writing?): run again")


class FitError(TestsetBuilderError):
    """The relevance model's fit did not converge (a bug or a numerical edge: its objective is strictly concave, so
    the line-searched Newton method should always reach the maximum); the estimate keeps its previous model."""


class PluginError(TestsetBuilderError):
    """An installed plugin (an entry point of the ``testset_builder`` group) that failed to load: names it, its
    module and the error, so the user can fix or uninstall it."""

    def __init__(self, name: str, module: str, error: BaseException) -> None:
        self.name, self.module = name, module
        super().__init__(
            f"plugin {name!r} ({module}) failed to load: {type(error).__name__}: {error}; "
            "fix it or uninstall its package"
        )
