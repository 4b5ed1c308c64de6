"""Routes of the web reviewer: the review page (htmx fragments) and the JSON API, both over one review stage.

Closed to forged requests. The JSON API takes the token as a bearer header only, which no other site's page can
make a browser send. The page's routes take it from a cookie, which a browser sends with any form posted to this
address, even from another site's page; so every state-changing route refuses a request whose ``Origin`` is not this
server or whose ``Sec-Fetch-Site`` says another origin made it (a page on another port of 127.0.0.1 is the same
*site*, so the cookie's SameSite=Strict alone did not stop it), and a form authorised by the cookie must carry the
form token (:func:`form_token`), which only a page this server rendered holds.

Each request runs on a worker thread with that thread's own database connection, and every verdict is committed
before the response (and the next item) goes out, so an acknowledged verdict is never lost, even if the server is
killed right after. Pages send a strict Content-Security-Policy (scripts only from the package's own static files)
and Jinja2 escapes every text, so a chunk's markup is shown, never run.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import re
import time
import uuid
import zipfile
from dataclasses import dataclass
from typing import Annotated, Literal
from urllib.parse import quote

from fastapi import Depends, FastAPI, Form, HTTPException, Query, Request, Response
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape
from pydantic import BaseModel, Field, StrictInt, field_validator

from .. import review_actions, review_guide
from ..config import ReviewConfig
from ..errors import InputError, ReviewConflictError, TestsetBuilderError, UnknownIdError
from ..export.review_tools import ReviewTask
from ..registry import REVIEW_FORMATS
from ..stages import review
from ..stages.review.interchange import tool_files
from ..store.workspace import Workspace

TOKEN_COOKIE = "tsb_token"
TEXT_LIMIT = 2000  # characters of a reason, comment or edited question, the same on the page and in the API
REVIEWER_COOKIE = "tsb_reviewer"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'; "
    "base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
)


class VerdictIn(BaseModel):
    item_id: str
    reviewer: str | None = None  # with a reviewer's own token: theirs (another name is refused)
    action: str  # one of review_actions' (grade, skip, keep_question, drop_question, edit_question, or one added)
    grade: StrictInt | None = None  # true is not a grade
    reason: str | None = Field(default=None, max_length=TEXT_LIMIT)
    comment: str | None = Field(default=None, max_length=TEXT_LIMIT)
    edited_text: str | None = Field(default=None, max_length=TEXT_LIMIT)
    idempotency_key: str = Field(min_length=1, max_length=200)
    seconds: float | None = None
    mode: Literal["queue", "skipped", "adjudicate"] = "queue"  # adjudicate: an admin settling a disagreement

    @field_validator("action")
    @classmethod
    def _declared(cls, action: str) -> str:
        if review_actions.action(action) is None:
            raise ValueError(f"unknown action {action!r}; one of {', '.join(review_actions.names())}")
        return action


class UndoIn(BaseModel):
    reviewer: str | None = None
    idempotency_key: str = Field(min_length=1, max_length=200)


class FailureTagIn(BaseModel):
    query_id: str
    reviewer: str | None = None
    tag: Literal["retrieval", "generation", "none", "unanswerable"]
    comment: str | None = Field(default=None, max_length=TEXT_LIMIT)
    idempotency_key: str = Field(min_length=1, max_length=200)
    seconds: float | None = None


class FailureUntagIn(BaseModel):
    query_id: str
    reviewer: str | None = None
    idempotency_key: str = Field(min_length=1, max_length=200)


def form_token(token: str) -> str:
    """The token each form of the page carries: derived from the review token (so it outlives a restart of the
    server), and unguessable without it."""
    return hmac.new(token.encode(), b"testset-builder review form", hashlib.sha256).hexdigest()


def _refuse_other_origins(request: Request) -> None:
    """A state-changing request made by another origin's page is refused, whatever credentials it carries."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:  # the browser's own word on who made the request, whatever the referrer policy
        if site not in ("same-origin", "none"):
            raise HTTPException(status_code=403, detail=f"refused: a request from another origin ({site})")
        return
    origin = request.headers.get("origin")  # "null" from a privacy-minded browser: the form token decides
    if origin not in (None, "null") and origin != f"{request.url.scheme}://{request.headers.get('host', '')}":
        raise HTTPException(status_code=403, detail="refused: a request from another origin")


def render_guidelines(markdown: str | None) -> Markup | None:
    """The config's guidelines as HTML (:func:`~testset_builder.review_guide.html`: raw HTML shown as text, never
    run, and only safe links), as the terminal renders them too."""
    rendered = review_guide.html(markdown)
    return None if rendered is None else Markup(rendered)


MODES = ("queue", "skipped", "adjudicate")  # what the page serves: the queue, your skipped items, disagreements


TAG_BUTTONS = tuple((tag, *review.FAILURE_TAG_HELP[tag]) for tag in review.FAILURE_TAGS)  # (tag, key, label, meaning)


def highlight(text: str, query: str) -> Markup:
    """``text`` escaped, with the query's words (3+ letters) wrapped in <mark>: split first, escape each piece."""
    words = sorted({w for w in re.findall(r"\w{3,}", query.lower())}, key=len, reverse=True)
    if not words:
        return escape(text)
    pattern = re.compile(r"\b(" + "|".join(re.escape(w) for w in words) + r")", re.IGNORECASE)
    parts, last = [], 0
    for match in pattern.finditer(text):
        parts.append(escape(text[last : match.start()]))
        parts.append(Markup("<mark>") + escape(match.group(0)) + Markup("</mark>"))
        last = match.end()
    parts.append(escape(text[last:]))
    return Markup("").join(parts)


@dataclass
class Served:
    """What every route of the review app shares: the open workspace, its token, the review settings, the
    templates, and the checks of who is asking and in which mode."""

    workspace: Workspace
    token: str
    settings: ReviewConfig
    templates: Jinja2Templates
    guidelines: Markup | None
    grade_buttons: tuple  # (grade, label, what it means)

    def identify(self, request: Request, given: str) -> None:
        """Who holds ``given`` (the workspace's token or a reviewer's own, :func:`review.principal`): kept on the
        request for the routes; 401 for anyone else."""
        who = review.principal(self.workspace, given, self.token)
        if who is None:
            raise HTTPException(status_code=401, detail="a valid review token is needed (open the URL serve printed)")
        request.state.principal, request.state.form_token = who, form_token(given)

    def authorised(self, request: Request) -> None:
        """The JSON API: the bearer token only (a cookie is sent by the browser whoever's page asks)."""
        if request.method not in ("GET", "HEAD"):
            _refuse_other_origins(request)
        self.identify(request, _bearer(request) or "")

    async def page_authorised(self, request: Request) -> None:
        """The page: the bearer token, or the cookie the serve link set; a state-changing request must come from
        this origin, and one the cookie authorises must carry the form token."""
        given = _bearer(request)
        self.identify(request, request.cookies.get(TOKEN_COOKIE, "") if given is None else given)
        if request.method in ("GET", "HEAD"):
            return
        _refuse_other_origins(request)
        if given is None:
            sent = str((await request.form()).get("form_token", ""))
            if not hmac.compare_digest(sent.encode(), request.state.form_token.encode()):
                raise HTTPException(status_code=403, detail="refused: the form lacks this page's form token")

    def serving(self, request: Request, mode: str) -> str:
        """The page's mode, checked: adjudication is for an admin's token (or the workspace's)."""
        if mode not in MODES:
            raise HTTPException(status_code=400, detail=f"mode is one of {', '.join(MODES)}")
        if mode == "adjudicate" and request.state.principal.role != "admin":
            raise HTTPException(status_code=403, detail="only an admin reviewer settles disagreements")
        return mode

    def next_in(self, mode: str, reviewer: str):
        """The reviewer's next item in a mode: the queue, their skipped items, or the disagreements."""
        return review.next_item(
            self.workspace, reviewer, self.settings, adjudicate=mode == "adjudicate", skipped=mode == "skipped"
        )

    def settle(self, admin: str, item_id: str, action: str, grade, key: str, comment=None, seconds=None):
        """An admin's grade in the adjudicate mode settles the disagreement (:func:`review.settle`); nothing else
        is taken there."""
        if action not in ("grade", "adjudicate"):
            raise InputError(f"settling a disagreement takes a grade, not {action}: stop for now to give it back")
        return review.settle(self.workspace, admin, item_id, grade, key, comment, seconds)

    def overlap_in(self, mode: str) -> int | None:
        """The overlap a verdict given in a mode is held to: none for an adjudicator's (always taken)."""
        return None if mode == "adjudicate" else review.workspace_overlap(self.workspace, self.settings)


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    return header[7:].strip() if header.lower().startswith("bearer ") else None


def create_app(workspace: Workspace, token: str, settings: ReviewConfig | None = None) -> FastAPI:
    """The review app for an open workspace; ``token`` guards every route."""
    settings = settings or ReviewConfig()
    grade_buttons = tuple(review_guide.grade_labels(settings.grades))  # (grade, label, what it means)
    app = FastAPI(title="testset-builder review", docs_url=None, redoc_url=None, openapi_url=None)
    environment = Environment(
        loader=PackageLoader("testset_builder.review_ui", "templates"), autoescape=select_autoescape()
    )
    served = Served(
        workspace, token, settings, Jinja2Templates(env=environment), render_guidelines(settings.guidelines_text()),
        grade_buttons,
    )  # fmt: skip
    app.mount("/static", StaticFiles(packages=[("testset_builder.review_ui", "static")]), name="static")

    @app.middleware("http")
    async def secure_headers(request: Request, call_next):
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["Cache-Control"] = "no-store"
        return response

    @app.exception_handler(PermissionError)
    async def not_yours(request: Request, error: PermissionError):
        return JSONResponse({"error": str(error)}, status_code=403)

    @app.exception_handler(TestsetBuilderError)
    async def bad_request(request: Request, error: TestsetBuilderError):
        status = 404 if isinstance(error, UnknownIdError) else 409 if isinstance(error, ReviewConflictError) else 400
        return JSONResponse({"error": str(error)}, status_code=status)

    _api_routes(app, served)
    _page_routes(app, served)
    return app


def _api_routes(app: FastAPI, served: Served) -> None:
    """The JSON API under ``/api``: the bearer token, reviewer or workspace, decides who acts."""
    workspace, settings = served.workspace, served.settings
    serving, next_in, overlap_in = served.serving, served.next_in, served.overlap_in
    auth = [Depends(served.authorised)]

    @app.get("/api/next", dependencies=auth)
    def api_next(request: Request, reviewer: str | None = None, mode: str = "queue"):
        """The next item (``mode``: the queue, your skipped items, or disagreements for an admin); 204 when none is
        left, with ``Retry-After`` when others hold items that may come back."""
        acting, mode = _acting(request, reviewer), serving(request, mode)
        item = next_in(mode, acting)
        if item is not None:
            return item.as_dict()
        free_at = review.free_again_at(workspace, acting, settings) if mode == "queue" else None
        headers = {"Retry-After": str(_seconds_until(free_at, time.time()) + 1)} if free_at else None
        return Response(status_code=204, headers=headers)

    @app.post("/api/verdicts", dependencies=auth)
    def api_verdict(request: Request, verdict: VerdictIn):
        """A verdict; in the adjudicate mode (an admin's), a grade that settles a disagreement."""
        mode = serving(request, "adjudicate" if verdict.action == "adjudicate" else verdict.mode)
        reviewer = _acting(request, verdict.reviewer)
        if mode == "adjudicate":
            result = served.settle(reviewer, verdict.item_id, verdict.action, verdict.grade, verdict.idempotency_key,
                                   verdict.comment, verdict.seconds)  # fmt: skip
        else:
            given = {**verdict.model_dump(exclude={"mode"}), "reviewer": reviewer}
            result = review.submit(workspace, **given, overlap=overlap_in(mode))
        return JSONResponse(result.as_dict(), status_code=201 if result.created else 200)

    @app.post("/api/undo", dependencies=auth)
    def api_undo(request: Request, undo: UndoIn):
        result = review.undo(workspace, _acting(request, undo.reviewer), undo.idempotency_key, settings)
        if result is None:
            return Response(status_code=204)
        return JSONResponse(result.as_dict(), status_code=201 if result.created else 200)

    @app.post("/api/failure-tags", dependencies=auth)
    def api_failure_tag(request: Request, tag: FailureTagIn):
        result = review.tag_failure(workspace, **{**tag.model_dump(), "reviewer": _acting(request, tag.reviewer)})
        return JSONResponse(result.as_dict(), status_code=201 if result.created else 200)

    @app.post("/api/failure-tags/undo", dependencies=auth)
    def api_failure_untag(request: Request, untag: FailureUntagIn):
        reviewer = _acting(request, untag.reviewer)
        result = review.untag_failure(workspace, reviewer, untag.query_id, untag.idempotency_key)
        if result is None:
            return Response(status_code=204)
        return JSONResponse(result.as_dict(), status_code=201 if result.created else 200)

    @app.get("/api/stats", dependencies=auth)
    def api_stats():
        return review.stats(workspace, settings).as_dict()

    @app.get("/api/neighbours", dependencies=auth)
    def api_neighbours(chunk_id: str):
        return review.neighbours(workspace, chunk_id)


def _page_routes(app: FastAPI, served: Served) -> None:
    """The review page and the forms it posts (htmx swaps in each next item)."""
    workspace, token, settings, templates = served.workspace, served.token, served.settings, served.templates
    serving, next_in, overlap_in = served.serving, served.next_in, served.overlap_in
    grade_buttons, guidelines = served.grade_buttons, served.guidelines
    page_auth = [Depends(served.page_authorised)]

    @app.get("/")
    def entry(request: Request, given: Annotated[str, Query(alias="token")] = ""):
        """The link serve prints (``/?token=T``): set the token cookie and go to the review page, so the token
        leaves the address bar at once."""
        if given and review.principal(workspace, given, token) is not None:
            response = RedirectResponse("/review", status_code=303)
            response.set_cookie(TOKEN_COOKIE, given, httponly=True, samesite="strict")
            return response
        if review.principal(workspace, request.cookies.get(TOKEN_COOKIE, ""), token) is not None:
            return RedirectResponse("/review", status_code=303)
        return HTMLResponse("<h1>401</h1><p>Open the link testset-builder serve printed.</p>", status_code=401)

    def page_or_fragment(request: Request, reviewer: str, last: dict | None = None, mode: str = "queue"):
        item = next_in(mode, reviewer)
        stats = review.stats(workspace, settings)
        now = time.time()
        free_at = review.free_again_at(workspace, reviewer, settings) if item is None and mode == "queue" else None
        context = {
            "request": request,
            "reviewer": reviewer,
            "item": item,
            "mode": mode,
            "admin": request.state.principal.role == "admin",
            "query_html": highlight(item.query["text"], "") if item else "",
            "chunk_html": highlight(item.chunk["text"], item.query["text"]) if item and item.chunk else "",
            "key": uuid.uuid4().hex,
            "shown_at": now,
            "stats": stats,
            "skipped": stats.per_reviewer.get(reviewer, {}).get("skip", 0),
            "lease_left": _seconds_until(item.lease_expires_at, now) if item else None,
            "free_in": _seconds_until(free_at, now) if free_at else None,
            "free_at": free_at,
            "last": last,
            "reasons": review.DROP_REASONS,
            "extra_actions": review_actions.extra_actions(item.kind) if item else [],
            "grade_buttons": grade_buttons,
            "guidelines": guidelines,
            "logged": item.logged if item else None,
            "tag_buttons": TAG_BUTTONS,
            "form_token": request.state.form_token,
            "text_limit": TEXT_LIMIT,
            "open_disagreements": len(review.disagreements(workspace)) if mode == "adjudicate" and not item else 0,
        }
        name = "item.html" if request.headers.get("hx-request") else "review.html"
        return templates.TemplateResponse(request, name, context)

    def answered(request: Request, reviewer: str, last: dict, mode: str) -> Response:
        """htmx swaps in the next item; a plain form post (before htmx has bound the forms, or without JavaScript)
        is redirected back to the page, so a reload never posts again."""
        if request.headers.get("hx-request"):
            return page_or_fragment(request, reviewer, last, mode)
        return RedirectResponse("/review" if mode == "queue" else f"/review?mode={mode}", status_code=303)

    @app.get("/review", response_class=HTMLResponse, dependencies=page_auth)
    def review_page(request: Request, mode: str = "queue"):
        reviewer = _named_on_page(request)
        if not reviewer:
            return templates.TemplateResponse(
                request, "name.html", {"request": request, "form_token": request.state.form_token}
            )
        return page_or_fragment(request, reviewer, mode=serving(request, mode))

    @app.post("/ui/name", dependencies=page_auth)
    def set_name(request: Request, reviewer: Annotated[str, Form()]):
        if request.state.principal.name is not None:
            raise HTTPException(status_code=403, detail="your name comes from your own link; it cannot be changed")
        name = " ".join(reviewer.split())[:80]
        response = RedirectResponse("/review", status_code=303)
        if name:
            response.set_cookie(REVIEWER_COOKIE, name, httponly=True, samesite="strict")
        return response

    @app.post("/ui/verdict", response_class=HTMLResponse, dependencies=page_auth)
    def ui_verdict(
        request: Request,
        item_id: Annotated[str, Form()],
        action: Annotated[str, Form()],
        idempotency_key: Annotated[str, Form()],
        shown_at: Annotated[float, Form()],
        grade: Annotated[int | None, Form()] = None,
        reason: Annotated[str | None, Form(max_length=TEXT_LIMIT)] = None,
        comment: Annotated[str | None, Form(max_length=TEXT_LIMIT)] = None,
        edited_text: Annotated[str | None, Form(max_length=TEXT_LIMIT)] = None,
        mode: Annotated[str, Form()] = "queue",
    ):
        reviewer, mode = _reviewer_of(request), serving(request, mode)
        comment, seconds = (comment or "").strip() or None, max(0.0, time.time() - shown_at)
        try:
            if mode == "adjudicate":
                result = served.settle(reviewer, item_id, action, grade, idempotency_key, comment, seconds)
            else:
                result = review.submit(
                    workspace, reviewer, item_id, action, idempotency_key, grade=grade,
                    reason=reason or None if action in ("skip", "drop_question") else None, comment=comment,
                    edited_text=edited_text or None if action == "edit_question" else None, seconds=seconds,
                    overlap=overlap_in(mode),
                )  # fmt: skip
        except (ReviewConflictError, InputError) as error:  # said on the page: an htmx swap shows no error body
            return answered(request, reviewer, {"action": "refused", "why": str(error)}, mode)
        return answered(request, reviewer, {"action": result.verdict.action, "grade": result.verdict.grade}, mode)

    @app.post("/ui/undo", response_class=HTMLResponse, dependencies=page_auth)
    def ui_undo(request: Request, idempotency_key: Annotated[str, Form()], mode: Annotated[str, Form()] = "queue"):
        reviewer, mode = _reviewer_of(request), serving(request, mode)
        undone = review.undo(workspace, reviewer, idempotency_key, settings)
        return answered(request, reviewer, {"action": "undo" if undone else "nothing to undo"}, mode)

    @app.post("/ui/leave", dependencies=page_auth)
    def ui_leave(request: Request):
        """The reviewer stops for now: the item they hold goes back to the queue at once."""
        review.leave(workspace, _reviewer_of(request))
        paused = (
            '<section id="item" class="item"><h2 id="done">Paused: the item you held went back to the queue. '
            '<a href="/review">Go on</a></h2></section>'
        )
        if request.headers.get("hx-request"):
            return HTMLResponse(paused)
        # a page of its own, not a redirect to /review, which would lease the next item straight away
        return templates.TemplateResponse(request, "base.html", {"request": request, "body": Markup(paused)})

    @app.post("/ui/failure-tag", response_class=HTMLResponse, dependencies=page_auth)
    def ui_failure_tag(
        request: Request,
        query_id: Annotated[str, Form()],
        tag: Annotated[str, Form()],
        idempotency_key: Annotated[str, Form()],
        shown_at: Annotated[float, Form()],
        chunk_id: Annotated[str | None, Form()] = None,
    ):
        """Tag the item's logged query; htmx swaps in the logged section with the tag chosen (the pair stays)."""
        reviewer = _reviewer_of(request)
        saved = review.tag_failure(
            workspace, reviewer, query_id, tag, idempotency_key, seconds=max(0.0, time.time() - shown_at)
        )
        if not request.headers.get("hx-request"):
            return RedirectResponse("/review", status_code=303)
        context = {
            "request": request,
            "logged": review.logged_context(workspace, query_id, chunk_id, reviewer),
            "chunk_id": chunk_id,
            "key": uuid.uuid4().hex,
            "shown_at": shown_at,
            "tag_buttons": TAG_BUTTONS,
            "tag_saved": saved.tag.tag,
            "form_token": request.state.form_token,
        }
        return templates.TemplateResponse(request, "failure.html", context)

    def lead_only(request: Request) -> None:
        if request.state.principal.role != "admin":
            raise HTTPException(status_code=403, detail="the lead's page is for an admin reviewer")

    @app.get("/lead", response_class=HTMLResponse, dependencies=page_auth)
    def lead_page(request: Request, revoked: str | None = None):
        """The lead's page (an admin's): progress per reviewer, agreement per pair, the open disagreements with
        their comments, and the reviewers' tokens, each revocable."""
        lead_only(request)
        context = {
            "request": request, "overview": review.lead_overview(workspace, settings),
            "form_token": request.state.form_token, "revoked": revoked, "me": request.state.principal.name,
            "formats": list(REVIEW_FORMATS),
        }  # fmt: skip
        return templates.TemplateResponse(request, "lead.html", context)

    @app.get("/lead/disagreements/{fmt}.zip", dependencies=page_auth)
    def lead_disagreements(request: Request, fmt: str):
        """The open disagreements as files for Argilla or Label Studio (a zip), each with every reviewer's grade
        and comments, to settle there; ``review-import`` brings the answers back as settlements."""
        lead_only(request)
        if fmt not in REVIEW_FORMATS:
            raise HTTPException(status_code=404, detail=f"no review format {fmt!r}: one of {', '.join(REVIEW_FORMATS)}")
        task = ReviewTask(settings.guidelines_text(), dict(settings.grades), review.workspace_overlap(workspace))
        texts, _ = tool_files(workspace, fmt, suggestions=not settings.blind, task=task, disagreements=True)
        packed = io.BytesIO()
        with zipfile.ZipFile(packed, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, text in sorted(texts.items()):
                archive.writestr(name, text)
        attachment = {"Content-Disposition": f'attachment; filename="disagreements-{fmt}.zip"'}
        return Response(packed.getvalue(), media_type="application/zip", headers=attachment)

    @app.post("/ui/reviewers/revoke", dependencies=page_auth)
    def ui_revoke(request: Request, reviewer: Annotated[str, Form()]):
        """Revoke a reviewer's token from the lead's page (their verdicts stay)."""
        lead_only(request)
        review.revoke_reviewer(workspace, reviewer)
        return RedirectResponse(f"/lead?revoked={quote(reviewer)}", status_code=303)

    @app.get("/ui/context/{chunk_id:path}", response_class=HTMLResponse, dependencies=page_auth)
    def ui_context(request: Request, chunk_id: str):
        around = review.neighbours(workspace, chunk_id)
        return templates.TemplateResponse(request, "context.html", {"request": request, **around})

    @app.get("/ui/document/{chunk_id:path}", response_class=HTMLResponse, dependencies=page_auth)
    def ui_document(request: Request, chunk_id: str):
        whole = review.document_around(workspace, chunk_id)
        return templates.TemplateResponse(request, "document.html", {"request": request, **whole})


def _seconds_until(moment: str, now: float) -> int:
    """Whole seconds from ``now`` (a Unix time) to an ISO 8601 time; 0 once it has passed."""
    from datetime import datetime

    return max(0, int(datetime.fromisoformat(moment).timestamp() - now))


def _acting(request: Request, claimed: str | None) -> str:
    """The reviewer an API request acts as: its token's own, or the one the workspace token's holder names (no
    name is a 400, another reviewer's a 403, by the app's error handlers)."""
    return request.state.principal.acting_as(claimed)


def _named_on_page(request: Request) -> str | None:
    """The page's reviewer: the token's own, or the name the workspace token's holder gave (a cookie)."""
    return request.state.principal.name or request.cookies.get(REVIEWER_COOKIE)


def _reviewer_of(request: Request) -> str:
    reviewer = _named_on_page(request)
    if not reviewer:
        raise HTTPException(status_code=400, detail="say who you are first (open /review)")
    return reviewer
