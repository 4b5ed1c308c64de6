"""Review: the web reviewer (``serve``), a terminal session (``review``), reviewers and their tokens, agreement
(``review-stats``), and the round trip through Argilla or Label Studio (``review-export``, ``review-import``)."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError
from .workspace import opened

if TYPE_CHECKING:
    from ..config import Config, ReviewConfig
    from ..stages.review import ReviewItem, ReviewStats
    from ..stages.review.interchange import ExportSummary
    from ..stages.review.interchange import ImportSummary as AnnotationsImport
    from ..store import Workspace

LOOPBACK = "127.0.0.1"


def shared_settings(ws: Workspace, settings: ReviewConfig) -> tuple[ReviewConfig, int | None]:
    """The review settings with the workspace's overlap: one given (flag or config) becomes the workspace's; the
    settings returned leave it to the workspace, so a long-running server follows a later change. Also the
    overlap it replaced (None when unchanged)."""
    from ..stages import review

    before = review.keep_overlap(ws, settings.overlap) if settings.overlap is not None else None
    return settings.model_copy(update={"overlap": None}), before


def _queue_questions(ws: Workspace, config: Config) -> None:
    """Queue the synthetic questions the reviewers are served as they start: every one with ``review.questions``
    on; unset, those a release holds back, by the config's ``release.hold_unreviewed`` when it sets one (recorded
    for every reviewer and command), else by what ``run`` last recorded."""
    from ..labels.policy import holds_unreviewed
    from ..stages import review

    if config.review.questions:
        review.queue_questions(ws)
    elif config.review.questions is None and config.release.hold_unreviewed is not None:
        review.keep_release_gate(ws, holds_unreviewed(config))
    elif config.review.questions is None:
        review.queue_held(ws)


def check_bind(host: str, explicit: bool) -> None:
    """Refuse an address beyond this machine unless it was asked for by name."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not explicit:
        raise InputError(f"refusing to listen on {host}: pass --host {host} to serve reviewers beyond this machine")


def reachable(bind: str) -> str:
    """The host part of the link: a wildcard address (0.0.0.0, ::) is where the server listens, not an address a
    browser can open, so the machine's name stands in for it."""
    if bind in ("0.0.0.0", "::", ""):
        return socket.getfqdn() or socket.gethostname()
    return f"[{bind}]" if ":" in bind else bind


@dataclass
class ReviewServer:
    """The web reviewer, bound and listening (connections wait from the start, so :attr:`url` works at once):
    ``run()`` serves until stopped. ``named``: the reviewers with tokens of their own; ``overlap_before``: the
    workspace's overlap a given one replaced."""

    app: Any
    token: str
    sock: socket.socket
    host: str
    named: list[str] = field(default_factory=list)
    overlap_before: int | None = None
    overlap: int | None = None

    @property
    def url(self) -> str:
        return f"http://{reachable(self.host)}:{self.sock.getsockname()[1]}/?token={self.token}"

    def run(self) -> None:
        import uvicorn

        server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", access_log=False))  # URLs carry tokens
        server.run(sockets=[self.sock])


@contextlib.contextmanager
def review_server(
    config: Config,
    *,
    host: str | None = None,
    port: int = 8765,
    workspace: Workspace | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[ReviewServer]:
    """The web reviewer of the config's workspace (its ``review:`` settings), listening on ``host`` (default
    127.0.0.1: any other address must be named, and is checked before the workspace is opened) at ``port`` (0: any
    free one); use ``with``. ``on_wait`` as :func:`~.workspace.open_workspace` takes it."""
    from ..review_ui import create_app
    from ..stages import review

    bind = host or LOOPBACK
    check_bind(bind, explicit=host is not None)
    with opened(config, workspace, on_wait=on_wait) as ws:
        _queue_questions(ws, config)
        token = ws.review_token()
        shared, before = shared_settings(ws, config.review)
        web = create_app(ws, token, shared)
        named = [name for name, _ in review.reviewers_with_tokens(ws)]
        sock = socket.socket(socket.AF_INET6 if ":" in bind else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((bind, port))
        except OSError as error:
            sock.close()
            raise InputError(
                f"cannot listen on {bind}:{port}: {error.strerror or error} (another server there? --port 0 takes "
                "any free port)"
            ) from None
        sock.listen(128)
        try:
            yield ReviewServer(web, token, sock, bind, named, before, config.review.overlap)
        finally:
            sock.close()


@dataclass
class ReviewSession:
    """One reviewer's session on a workspace, as the terminal reviewer runs it: lease the next item, answer it,
    undo, settle, tag a logged query's failure; :meth:`leave` gives back what they hold."""

    ws: Workspace
    reviewer: str
    settings: ReviewConfig
    adjudicate: bool = False
    overlap_before: int | None = None

    @property
    def guidelines(self) -> str | None:
        return self.settings.guidelines_text()

    @property
    def failure_tags(self) -> dict[str, tuple[str, str, str]]:
        """The failure tags a reviewer gives a logged query: tag -> (its key, label, meaning)."""
        from ..stages.review import FAILURE_TAG_HELP

        return dict(FAILURE_TAG_HELP)

    def next_item(self) -> ReviewItem | None:
        from ..stages import review

        return review.next_item(self.ws, self.reviewer, self.settings, adjudicate=self.adjudicate)

    def stats(self) -> ReviewStats:
        from ..stages import review

        return review.stats(self.ws, self.settings)

    def answer(self, item_id: str, verdict: dict, key: str) -> None:
        """Record a verdict (``{"action": ..., ...}``), or with ``adjudicate`` settle the pair with its grade."""
        from ..stages import review

        if self.adjudicate:
            if verdict["action"] != "grade":
                raise InputError("settling a disagreement takes a grade (0, 1 or 2); q gives it back")
            review.settle(self.ws, self.reviewer, item_id, verdict["grade"], key)
            return
        overlap = review.workspace_overlap(self.ws, self.settings)
        review.submit(self.ws, self.reviewer, item_id, **verdict, idempotency_key=key, overlap=overlap)

    def undo(self, key: str) -> bool:
        from ..stages import review

        return bool(review.undo(self.ws, self.reviewer, key, self.settings))

    def tag_failure(self, query_id: str, tag: str, key: str) -> None:
        from ..stages import review

        review.tag_failure(self.ws, self.reviewer, query_id, tag, key)

    def neighbours(self, chunk_id: str) -> dict:
        from ..stages import review

        return review.neighbours(self.ws, chunk_id)

    def leave(self) -> int:
        from ..stages import review

        return review.leave(self.ws, self.reviewer)


@contextlib.contextmanager
def review_session(
    config: Config, reviewer: str, *, adjudicate: bool = False, workspace: Workspace | None = None
) -> Iterator[ReviewSession]:
    """A review session for ``reviewer`` on the config's workspace (its ``review:`` settings; with ``adjudicate``
    only the pairs others graded differently, to settle); use ``with``."""

    with opened(config, workspace) as ws:
        _queue_questions(ws, config)
        shared, before = shared_settings(ws, config.review)
        yield ReviewSession(ws, reviewer, shared, adjudicate, before)


@dataclass
class ReviewerToken:
    """A reviewer's own token (shown once: only its hash is kept)."""

    reviewer: str
    role: str
    token: str
    replaced: bool = False  # the reviewer had a token, which stopped working

    def as_dict(self) -> dict:
        return asdict(self)


def add_reviewer(
    config: Config, name: str, *, admin: bool = False, workspace: Workspace | None = None
) -> ReviewerToken:
    """Give a reviewer a token of their own (a new one replaces the old); ``admin`` may adjudicate."""
    from ..stages import review
    from ..store.review import reviewers_with_tokens

    role, name = ("admin" if admin else "reviewer"), " ".join(name.split())
    with opened(config, workspace) as ws:
        replaced = name in dict(reviewers_with_tokens(ws.db))
        return ReviewerToken(name, role, review.add_reviewer(ws, name, role), replaced)


@dataclass
class ReviewersResult:
    """The workspace's reviewers (role, token state, standing verdicts, pairs settled, last verdict), and the one
    whose token was revoked."""

    rows: list[Any]
    revoked: str | None = None

    def as_dict(self) -> dict:
        return {"reviewers": [asdict(row) for row in self.rows], "revoked": self.revoked}


def reviewers(config: Config, *, revoke: str | None = None, workspace: Workspace | None = None) -> ReviewersResult:
    """The workspace's reviewers; with ``revoke``, that reviewer's token revoked first (their verdicts stay)."""
    from ..stages import review

    with opened(config, workspace, readonly=revoke is None) as ws:
        if revoke is not None:
            review.revoke_reviewer(ws, revoke)
        return ReviewersResult(review.reviewers(ws), " ".join(revoke.split()) if revoke is not None else None)


@dataclass
class ReviewStatsResult:
    """How far reviewers agree with each other and with the judge (``agreement``: kappas, alpha, the LLM against
    the resolved grade, open disagreements, adjudication), and the failure tags of logged queries."""

    agreement: dict
    failure_tags: dict

    def as_dict(self) -> dict:
        return {**self.agreement, "failure_tags": self.failure_tags}


def review_stats(config: Config, *, workspace: Workspace | None = None) -> ReviewStatsResult:
    """The review's agreement figures, ties resolved towards the config's ``release.adjudicator``. Reads only."""
    from ..stages import review

    adjudicator = config.release.adjudicator
    with opened(config, workspace, readonly=True) as ws:
        return ReviewStatsResult(review.agreement(ws, adjudicator), review.failure_tag_stats(ws, adjudicator))


@dataclass
class ReviewExportResult:
    """The pairs written for an outside annotation tool (``summary``), and the workspace's overlap a given one
    replaced."""

    summary: ExportSummary
    overlap_before: int | None = None
    overlap: int | None = None

    def as_dict(self) -> dict:
        return self.summary.as_dict()


def review_export(
    config: Config,
    fmt: str,
    out_dir: str | Path,
    *,
    limit: int | None = None,
    suggestions: bool = True,
    disagreements: bool = False,
    workspace: Workspace | None = None,
) -> ReviewExportResult:
    """Write the pairs still wanting verdicts for Argilla, Label Studio or a registered review format into
    ``out_dir``, with the settings of the tool's project made from the config's ``review:`` (guidelines, grade
    meanings) and the workspace's overlap; ``suggestions`` attaches the judge's grade. With ``disagreements``, the
    open disagreements instead, each with every reviewer's grade and comments, for an admin to settle there. A
    ``review.overlap`` given becomes the workspace's."""
    from ..export.review_tools import ReviewTask
    from ..stages import review
    from ..stages.review.interchange import export_pending

    overlap = config.review.overlap
    with opened(config, workspace, readonly=overlap is None) as ws:
        _, before = shared_settings(ws, config.review)
        task = ReviewTask(config.review.guidelines_text(), dict(config.review.grades), review.workspace_overlap(ws))
        summary = export_pending(ws, fmt, Path(out_dir), None, limit, suggestions, task, disagreements)
    return ReviewExportResult(summary, before, overlap)


def review_import(
    config: Config,
    source: str | Path,
    *,
    fmt: str | None = None,
    annotators: str | Path | dict[str, str] | None = None,
    workspace: Workspace | None = None,
) -> AnnotationsImport:
    """Bring grades made in Argilla or Label Studio back as human verdicts, and answers to disagreements exported
    to settle as settlements; ``annotators`` (a file or a mapping) gives the annotators' ids readable names."""
    from ..export.review_tools import read_annotators
    from ..stages.review.interchange import import_annotations

    names = read_annotators(annotators) if isinstance(annotators, str | Path) else annotators
    with opened(config, workspace) as ws:
        return import_annotations(ws, Path(source), fmt, names)
