"""Reviewing commands: serve (the web reviewer), review (the terminal reviewer)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.panel import Panel

from .. import api, review_guide
from ..errors import InputError, ReviewConflictError
from .typer_app import (
    ConfigOption,
    JsonOption,
    WorkspaceOption,
    app,
    err,
    interactive,
    open_workspace_for,
    out,
    settings,
    waiting,
)


def _review_settings(config, workspace, overlap, lease_s, blind, questions):
    return settings(
        config,
        workspace,
        review__overlap=overlap,
        review__lease_s=lease_s,
        review__blind=blind,
        review__questions=questions,
    )


OverlapOption = Annotated[
    int | None,
    typer.Option(
        "--overlap",
        min=1,
        help="Distinct reviewers each item should get (review.overlap). The workspace keeps it: every reviewer and "
        "command counts with it until it is set again (1 until first set).",
        show_default=False,
    ),
]


def _said_overlap(before: int | None, overlap: int | None) -> None:
    """Say on stderr that a given overlap became the workspace's (``before``: the one it replaced)."""
    if before is not None:
        err.print(
            f"review overlap of this workspace: {before} -> {overlap} (every reviewer and command now counts with it)",
            highlight=False,
        )


LeaseOption = Annotated[
    float | None,
    typer.Option(
        "--lease",
        min=1,
        help="Seconds an item stays with a reviewer before it goes back (review.lease_s).",
        show_default=False,
    ),
]
BlindOption = Annotated[
    bool | None,
    typer.Option(
        "--blind/--show-llm",
        help="Hide the LLM's grade until the reviewer answers (review.blind, on).",
        show_default=False,
    ),
]
QuestionsOption = Annotated[
    bool | None,
    typer.Option(
        "--questions/--no-questions",
        help="Also review every synthetic question: keep, drop or edit (review.questions). Without either flag, the "
        "questions already queued (the doubted ones a release waits for) are served with the pairs.",
        show_default=False,
    ),
]


@app.command()
def serve(
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    host: Annotated[
        str | None,
        typer.Option(
            "--host",
            help="Address to listen on (default 127.0.0.1; anything else must be asked for here).",
            show_default=False,
        ),
    ] = None,
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on (0: any free one).")] = 8765,
    overlap: OverlapOption = None,
    lease_s: LeaseOption = None,
    blind: BlindOption = None,
    questions: QuestionsOption = None,
) -> None:
    """The web reviewer: a page to grade the queue's proposals (keys 0/1/2, s skip, u undo), and a JSON API.

    Listens on 127.0.0.1 unless --host says otherwise. Every request needs the workspace's review token: open the URL
    printed at start (it carries the token once and sets a cookie), or send `Authorization: Bearer TOKEN`. The
    token is $TESTSET_BUILDER_REVIEW_TOKEN, else one made for the workspace (review.token in it). Every verdict is
    committed before the next item shows: stop the server at any time and nothing acknowledged is lost.

    Example: `testset-builder serve --workspace testset`, then open the printed link (`--host 0.0.0.0` to serve
    reviewers on other machines).
    """
    resolved = _review_settings(config, workspace, overlap, lease_s, blind, questions)
    with api.review_server(resolved, host=host, port=port, on_wait=waiting) as server:
        _said_overlap(server.overlap_before, server.overlap)
        with interactive():  # the link is how the server is used: --quiet keeps it
            out.print(f"review at {server.url}", highlight=False, soft_wrap=True)
        if server.named:
            err.print(
                f"reviewers with their own tokens: {', '.join(server.named)} (their verdicts carry the token's "
                "name); the link above is the workspace's: its holder may name any reviewer, so keep it to yourself"
            )
        else:
            err.print(
                "one shared token: whoever holds the link names themselves (`add-reviewer NAME` gives each reviewer "
                "a token of their own, so nobody can act as someone else)"
            )
        err.print("(the token is in that link: share it only with your reviewers; Ctrl-C stops the server)")
        server.run()


@app.command("review")
def review_in_terminal(
    reviewer: Annotated[
        str, typer.Option("--reviewer", "-r", help="Your name (it goes with each verdict).", show_default=False)
    ],
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    overlap: OverlapOption = None,
    lease_s: LeaseOption = None,
    blind: BlindOption = None,
    questions: QuestionsOption = None,
    adjudicate: Annotated[
        bool, typer.Option("--adjudicate", help="Only the pairs other reviewers graded differently (you settle them).")
    ] = False,
) -> None:
    """Review the queue in the terminal: the same queue, leases and verdicts as the web reviewer.

    For a pair type 0, 1 or 2 (grade; what each means shows under the pair: review.grades), s (skip), u (undo your
    last verdict), c (the chunks around it in its document) or q (quit: the item you hold goes back to the queue at
    once, as on Ctrl-C), then Enter. For a question: k (keep), d REASON (drop: unanswerable, ambiguous, answer
    leaked, not a realistic query, other), e NEW TEXT (edit). Progress (overlap counted) shows above each item, the
    config's review.guidelines at the start.
    A query logged in production (import-logs) shows once what the live system did, and asks its failure tag: r
    (retrieval: nothing relevant retrieved), g (generation: retrieved, the answer still failed), n (none), a
    (unanswerable from the corpus), Enter to skip; t at a pair of it asks again (a new tag replaces yours).

    Example: `testset-builder review --reviewer ann --workspace testset`.
    """
    resolved = _review_settings(config, workspace, overlap, lease_s, blind, questions)
    with (
        open_workspace_for(resolved) as ws,
        api.review_session(resolved, reviewer, adjudicate=adjudicate, workspace=ws) as session,
        interactive(),  # the items and answers are the session: --quiet keeps them
    ):
        _said_overlap(session.overlap_before, resolved.review.overlap)
        if guidelines := review_guide.terminal(session.guidelines):  # as the page renders them
            out.print(Panel(guidelines, title="guidelines", expand=False))
        given = [0]  # verdicts given this session, counted as they are stored
        try:
            finished = _review_loop(session, given)
        except (KeyboardInterrupt, typer.Abort, EOFError):  # Ctrl-C or the end of input: a stop like q
            finished = False
        finally:
            returned = session.leave()  # what they held goes back now, not when its lease ends
        gate = session.stats().release_words(f"testset-builder run {config}" if config else "testset-builder run")
    gate = f"; {gate}" if gate else ""
    if finished:
        out.print(f"nothing left for {escape(reviewer)} to review; {given[0]} verdicts given this session{gate}")
        return
    back = "; the item you held went back to the queue" if returned else ""
    out.print(f"stopped; {given[0]} verdicts given this session{back}{gate}", highlight=False)


def _review_loop(session, given: list[int]) -> bool:
    """Serve items until none is left (True) or the reviewer quits (False); ``given[0]`` counts the verdicts."""
    asked = set()  # logged queries whose failure tag was asked for this session
    while True:
        item = session.next_item()
        if item is None:
            return True
        _progress(session.stats(), session.reviewer)
        _show(item, session.settings.grades)
        query_id = item.query["query_id"]
        if item.logged and query_id not in asked and item.logged["tag"] is None:
            asked.add(query_id)
            if not _ask_failure_tag(session, item):
                return False
        while True:  # an answer that shows more (context) keeps the item
            answer = typer.prompt(_choices(item), default="", show_default=False, err=True).strip()
            if answer.lower() != "c" or not item.chunk:
                break
            _show_context(session.neighbours(item.chunk["chunk_id"]))
        if answer.lower() in ("q", "quit"):
            return False
        if answer.lower() == "t" and item.logged:
            if not _ask_failure_tag(session, item):
                return False
            continue
        key = uuid.uuid4().hex
        if answer.lower() == "u":
            undone = session.undo(key)
            out.print("your last verdict was taken back" if undone else "nothing to undo")
            continue
        try:
            session.answer(item.item_id, _parse(answer, item), key)
            given[0] += 1
        except (InputError, ReviewConflictError) as error:
            err.print(f"[yellow]{escape(str(error))}[/]")


def _progress(stats, reviewer: str) -> None:
    gate = f" · {stats.release_words()}" if stats.release_words() else ""
    out.print(
        f"[dim]{stats.verdicts} of {stats.verdicts_wanted} verdicts given ({stats.done} of {stats.total} items done)"
        f" · {stats.given_by(reviewer)} by you{escape(gate)}[/]",
        highlight=False,
    )


def _show_context(around: dict) -> None:
    lines = [f"[dim]before:[/] {escape(around['before'])}" if around["before"] else "[dim]no chunk before it[/]"]
    lines.append(f"[dim]after:[/] {escape(around['after'])}" if around["after"] else "[dim]no chunk after it[/]")
    out.print(Panel("\n\n".join(lines), title="around the chunk in its document", expand=False))


def _choices(item) -> str:
    from ..review_actions import extra_actions

    context = "c context, " if item.chunk else ""
    extra = "".join(f"{a.key} {a.label or a.name}, " for a in extra_actions(item.kind) if a.key)
    if item.kind == "pair":
        return f"grade 0/1/2, {extra}s skip, u undo, " + context + ("t failure tag, " if item.logged else "") + "q quit"
    return f"k keep, d REASON drop, e TEXT edit, {extra}s skip, u undo, {context}q quit"


def _parse(answer: str, item) -> dict:
    word, _, rest = answer.partition(" ")
    word, kind = word.lower(), item.kind
    if word == "s":
        return {"action": "skip"}
    if kind == "pair" and word in ("0", "1", "2"):
        return {"action": "grade", "grade": int(word)}
    if kind == "question" and word == "k":
        return {"action": "keep_question"}
    if kind == "question" and word == "d":
        return {"action": "drop_question", "reason": rest.strip() or "other"}
    if kind == "question" and word == "e":
        return {"action": "edit_question", "edited_text": rest.strip()}
    from ..review_actions import extra_actions

    for extra in extra_actions(kind):
        if extra.key and word == extra.key:
            return {"action": extra.name}
    raise InputError(f"{answer!r} is not one of: {_choices(item)}")


def _ask_failure_tag(session, item) -> bool:
    """Show what the live system did for the item's logged query and ask for its failure tag (Enter skips);
    False when the reviewer quits."""
    tags = session.failure_tags
    keys = {key: tag for tag, (key, _, _) in tags.items()}
    choices = ", ".join(f"{key} {label}" for key, label, _ in tags.values())
    _show_logged(item.logged)
    while True:
        answer = typer.prompt(f"failure tag: {choices}; Enter skip, q quit", default="", show_default=False, err=True)
        answer = answer.strip().lower()
        if answer in ("", "s"):
            return True
        if answer in ("q", "quit"):
            return False
        if answer in keys:
            session.tag_failure(item.query["query_id"], keys[answer], uuid.uuid4().hex)
            out.print(f"tagged {keys[answer]}: {tags[keys[answer]][2]}", highlight=False)
            return True
        err.print(f"[yellow]{escape(repr(answer))} is not one of: {escape(choices)}[/]")


def _show_logged(logged: dict) -> None:
    rating = f", mean rating {logged['rating']} of {logged['ratings']}" if logged["rating"] is not None else ""
    lines = [
        f"asked {logged['frequency']} times: thumbs up {logged['thumbs_up']}, thumbs down {logged['thumbs_down']}"
        f"{rating}; a citation clicked in {logged['clicked']} of {logged['cited']} cited answers",
        f"[bold]answer:[/] {escape(logged['answer'])}" if logged["answer"] else "[dim]no answer logged[/]",
    ]
    if logged["comment"]:
        lines.append(f"latest comment: {escape(logged['comment'])}")
    for result in logged["results"]:
        mark = "[reverse] the chunk under review [/] " if result["reviewed"] else ""
        title = f"{escape(result['title'])}: " if result["title"] else ""
        lines.append(
            f"{result['rank']:>3}. {mark}{title}{escape(result['snippet'])} [dim]({escape(result['chunk_id'])})[/]"
        )
    if not logged["results"]:
        lines.append("[dim]it retrieved nothing the workspace knows[/]")
    out.print(Panel("\n".join(lines), title="this query in production", expand=False))


def _show(item, meanings: dict[int, str]) -> None:
    lines = [f"[bold]{escape(item.query['text'])}[/]"]
    if item.chunk:
        title = f"[dim]{escape(item.chunk['title'])}[/]\n" if item.chunk.get("title") else ""
        lines.append(f"{title}{escape(item.chunk['text'])}")
    if item.suggestion:
        lines.append(f"[dim]the LLM judge said {item.suggestion['grade']}[/]")
    if item.graded_by:
        given = ", ".join(f"{grade} by {escape(who)}" for who, grade in sorted(item.graded_by.items()))
        lines.append(f"[yellow]graded {given}: your grade settles it[/]")
        if item.self_party:
            lines.append("[yellow]you graded it yourself: settled by you, it counts as self-settled[/]")
        for said in item.comments or []:
            lines.append(f"[dim]{escape(said['reviewer'])} said:[/] {escape(said['comment'])}")
    if item.kind == "pair":
        lines.append("\n".join(f"[dim]{grade} · {escape(meaning)}[/]" for grade, meaning in meanings.items()))
    label = "is this chunk relevant to the query?" if item.kind == "pair" else "is this a good test question?"
    out.print(Panel("\n\n".join(lines), title=label, subtitle=item.reason, expand=False))


@app.command("add-reviewer")
def add_reviewer(
    name: Annotated[str, typer.Argument(help="The reviewer's name, as their verdicts will carry it.")],
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    admin: Annotated[bool, typer.Option("--admin", help="May adjudicate disagreements.")] = False,
    json_output: JsonOption = False,
) -> None:
    """Give a reviewer a token of their own: whoever holds it is that reviewer, in the browser and the API.

    The token is printed once (only its SHA-256 is kept); running this again for the same name gives a new one and
    the old stops working. Send the reviewer `/?token=TOKEN` on the address `serve` prints. With reviewers' own
    tokens a verdict's reviewer comes from the token, not from a name the request gives, so nobody can grade, undo
    or rename as someone else; the workspace's own token still lets its holder name any reviewer (one person, or a
    trusted script).

    Example: `testset-builder add-reviewer ann --workspace testset`.
    """
    resolved = settings(config, workspace)
    with open_workspace_for(resolved) as ws:
        made = api.add_reviewer(resolved, name, admin=admin, workspace=ws)
    if json_output:
        print(json.dumps(made.as_dict()))
        return
    with interactive():  # the token is what the command is for: --quiet keeps it
        out.print(f"{made.reviewer} ({made.role}): /?token={made.token}", highlight=False, soft_wrap=True)
    err.print("(shown once: send it to that reviewer only, on the address `serve` prints)")
    if made.replaced:
        err.print(f"{made.reviewer}'s earlier token stopped working: send them this one", highlight=False)


@app.command("reviewers")
def reviewers_command(
    action: Annotated[
        str | None, typer.Argument(help="Leave out to list the reviewers; `revoke` to revoke NAME's token.")
    ] = None,
    name: Annotated[str | None, typer.Argument(help="The reviewer to revoke.", show_default=False)] = None,
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    json_output: JsonOption = False,
) -> None:
    """List the workspace's reviewers with their verdicts, or revoke one's token (`reviewers revoke NAME`).

    The list shows each reviewer's role, whether their own token is active, revoked or none (a name given with the
    workspace's token, or an imported annotator), their standing verdicts by action, the pairs they settled, and
    their last verdict. Revoking stops their token at once (the page and the API answer 401); their verdicts stay
    and count as before. `add-reviewer NAME` gives them a new token.

    Example: `testset-builder reviewers revoke bob --workspace testset`.
    """
    from dataclasses import asdict

    if action not in (None, "list", "revoke") or (action == "revoke") != (name is not None):
        raise InputError("use `reviewers` to list them, or `reviewers revoke NAME`")
    resolved = settings(config, workspace)
    with open_workspace_for(resolved, readonly=action != "revoke") as ws:
        rows = api.reviewers(resolved, revoke=name if action == "revoke" else None, workspace=ws).rows
    if action == "revoke":
        if json_output:
            print(json.dumps({"revoked": " ".join(name.split())}))
        else:
            out.print(f"revoked {escape(name)}'s token: it no longer works; their verdicts stay", highlight=False)
        return
    if json_output:
        print(json.dumps([asdict(row) for row in rows], indent=2))
        return
    from rich.table import Table

    table = Table(title="reviewers", title_justify="left")
    for column in ("reviewer", "role", "token", "verdicts", "settled", "last verdict"):
        table.add_column(column, justify="right" if column in ("verdicts", "settled") else "left")
    for row in rows:
        given = ", ".join(f"{n} {action.replace('_', ' ')}" for action, n in sorted(row.standing.items())) or "0"
        table.add_row(
            escape(row.name), row.role or "", row.token, given, str(row.adjudications), (row.last_verdict_at or "")[:19]
        )
    out.print(table)


@app.command("review-stats")
def review_stats(
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    adjudicator: Annotated[
        str | None,
        typer.Option(
            "--adjudicator", help="The reviewer whose grade breaks ties (release.adjudicator).", show_default=False
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one JSON document on stdout instead of tables.")
    ] = False,
) -> None:
    """How far reviewers agree with each other and with the LLM judge.

    Quadratic-weighted Cohen's kappa for each pair of reviewers, Krippendorff's alpha (ordinal) across all of them,
    exact agreement, and the LLM judge against the reviewers' resolved grade (weighted kappa and a confusion
    matrix); then the items reviewers disagree on and no admin settled yet (`review --adjudicate`, or the page's
    adjudicate mode). Settled pairs are reported apart: an adjudication is not a grade, so it moves no kappa or
    alpha. --adjudicator names the reviewer whose own grade breaks the ties left open.
    With production logs: how many logged queries have a failure tag, the split by tag (retrieval, generation, none,
    unanswerable; resolved like grades) and, where two or more reviewers tagged a query, their agreement (share
    alike, Cohen's kappa per pair of reviewers).

    Example: `testset-builder review-stats --workspace testset --adjudicator ann`.
    """
    from rich.table import Table

    resolved = settings(config, workspace, release__adjudicator=adjudicator)
    with open_workspace_for(resolved, readonly=True) as ws:
        report = api.review_stats(resolved, workspace=ws).as_dict()
    if json_output:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return

    def fmt(value) -> str:
        return "n/a" if value is None else f"{value:.3f}"

    out.print(
        f"{report['verdicts']} grades on {report['items']} items by {len(report['reviewers'])} reviewers; "
        f"Krippendorff's alpha (ordinal) {fmt(report['krippendorff_alpha'])}; "
        f"exact agreement {fmt(report['agreement'])}"
    )
    if report["pairwise"]:
        out.print(_pairs_table("reviewer pairs", report["pairwise"], "shared items", "weighted_kappa", fmt))
    judge = report["llm_vs_human"]
    out.print(
        f"LLM judge against the resolved human grade on {judge['items']} items: weighted kappa "
        f"{fmt(judge['weighted_kappa'])}, agreement {fmt(judge['agreement'])}"
    )
    if judge["items"]:
        matrix = Table(title="LLM grade (rows) by human grade (columns)", title_justify="left")
        matrix.add_column("")
        for grade in range(3):
            matrix.add_column(f"human {grade}", justify="right")
        for grade, row in enumerate(judge["confusion"]):
            matrix.add_row(f"LLM {grade}", *map(str, row))
        out.print(matrix)
    for item in report["disagreements"][:10]:
        grades = ", ".join(f"{escape(r)} {g}" for r, g in sorted(item["grades"].items()))
        out.print(f"  disagree: {escape(item['query_id'])} / {escape(item['chunk_id'])}: {grades}", highlight=False)
    if len(report["disagreements"]) > 10:
        out.print(f"  ... and {len(report['disagreements']) - 10} more (--json lists them all)")
    settled = report["adjudication"]
    if settled["adjudicated"]:
        by = ", ".join(f"{n} by {escape(admin)}" for admin, n in settled["by"].items())
        out.print(
            f"settled by an admin (not counted in the agreement above): {settled['adjudicated']} pairs ({by}), "
            f"{settled['self_settled']} of them self-settled (the admin had graded the pair too); "
            f"{settled['open']} disagreements still open",
            highlight=False,
        )
    if report["failure_tags"]["logged_queries"]:
        _print_failure_tags(report["failure_tags"], fmt)


def _print_failure_tags(tags: dict, fmt) -> None:

    split = ", ".join(f"{tag} {n}" for tag, n in tags["split"].items())
    out.print(
        f"failure tags: {tags['tagged']} of {tags['logged_queries']} logged queries tagged ({split})", highlight=False
    )
    agreement = tags["agreement"]
    if not agreement["queries"]:
        return
    out.print(
        f"  tagged by two or more on {agreement['queries']} queries: all alike on {fmt(agreement['unanimous'])}, "
        f"reviewer pairs agreeing {fmt(agreement['pairwise_agreement'])}",
        highlight=False,
    )
    out.print(_pairs_table("failure tags, reviewer pairs", agreement["pairwise"], "shared queries", "kappa", fmt))


KAPPA_COLUMNS = {"weighted_kappa": "weighted kappa", "kappa": "Cohen's kappa"}


def _pairs_table(title: str, pairs: list[dict], shared: str, kappa: str, fmt):
    """Reviewer pairs (:func:`~testset_builder.labels.agreement.pairwise_agreement`'s rows): what both judged, their
    ``kappa`` (the rows' key for it) and the exact agreement."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for column in ("reviewers", shared, KAPPA_COLUMNS[kappa], "agreement"):
        table.add_column(column, justify="left" if column == "reviewers" else "right")
    for pair in pairs:
        names = f"{escape(pair['a'])} / {escape(pair['b'])}"
        table.add_row(names, str(pair["shared"]), fmt(pair[kappa]), fmt(pair["agreement"]))
    return table


FormatOption = Annotated[
    str,
    typer.Option("--format", "-f", help="argilla, label-studio, or a registered review format.", show_default=False),
]


@app.command("review-export")
def review_export(
    fmt: FormatOption,
    out_dir: Annotated[
        Path, typer.Option("--out", "-o", help="Folder to write the files into (made if missing).", show_default=False)
    ],
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    overlap: OverlapOption = None,
    limit: Annotated[
        int | None, typer.Option("--limit", "-n", min=1, help="At most this many pairs.", show_default=False)
    ] = None,
    suggestions: Annotated[
        bool,
        typer.Option(
            "--suggestions/--blind",
            help="Attach the LLM judge's grade as a suggestion (Argilla) or prediction (Label Studio).",
        ),
    ] = True,
    disagreements: Annotated[
        bool,
        typer.Option(
            "--disagreements",
            help="Export the open disagreements instead: each pair with every reviewer's grade and comments, for an "
            "admin to settle in the tool. review-import records the answers as settlements, not votes.",
        ),
    ] = False,
    json_output: JsonOption = False,
) -> None:
    """Export the pairs still wanting verdicts for a team that reviews in Argilla or Label Studio.

    argilla: records.json (load with dataset.records.from_json) and settings.json (rg.Settings.from_json).
    label-studio: tasks.json (import into a project), label_config.xml (the project's labelling interface) and
    project.json (its settings, for projects.create). The settings carry the config's review.guidelines, what
    each grade means (review.grades) and the workspace's overlap.
    Annotate there, export the annotations as JSON, and bring them back with `review-import`.

    Example: `testset-builder review-export --format label-studio --out to-label/ --workspace testset`.
    """
    resolved = _review_settings(config, workspace, overlap, None, None, None)
    with open_workspace_for(resolved, readonly=resolved.review.overlap is None) as ws:
        exported = api.review_export(
            resolved, fmt, out_dir, limit=limit, suggestions=suggestions, disagreements=disagreements, workspace=ws
        )
    _said_overlap(exported.overlap_before, exported.overlap)
    summary = exported.summary
    if json_output:
        print(json.dumps(summary.as_dict(), indent=2))
        return
    what = "disagreements to settle" if summary.disagreements else "pairs"
    out.print(
        f"exported {summary.items} {what} for {fmt} ({summary.with_suggestion} with the LLM's grade attached) -> "
        f"{out_dir}: {', '.join(summary.files)}",
        highlight=False,
    )


@app.command("review-import")
def review_import(
    source: Annotated[
        Path,
        typer.Argument(
            help="Annotations exported from Argilla (records JSON, nested or flattened) or Label Studio (JSON export).",
            show_default=False,
        ),
    ],
    workspace: WorkspaceOption = None,
    config: ConfigOption = None,
    fmt: Annotated[
        str | None,
        typer.Option(
            "--format",
            "-f",
            help="argilla, label-studio or a registered review format (default: told from the file).",
        ),
    ] = None,
    annotators: Annotated[
        Path | None,
        typer.Option(
            "--annotators",
            help="Readable names for the annotators' ids: JSON or YAML {id: name}, or the tool's list of users "
            "(id with username or email). Kept in the workspace for later imports. A name that is already a "
            "reviewer here maps the annotator onto that reviewer. Unusable entries are skipped with a warning, "
            "unless they annotated in the file.",
            show_default=False,
        ),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Bring grades made in Argilla or Label Studio back as human verdicts (reviewer argilla:USER or
    label-studio:USER, USER the annotator's id, or the name --annotators gives it).

    Answers to disagreements exported with `review-export --disagreements` settle them: per pair the latest answer,
    under the annotator who gave it (name them onto an admin with --annotators). A pair settled meanwhile, or whose
    reviewers agree by now, is kept out and counted.

    Only submitted answers count (drafts, discarded records and cancelled annotations do not). The file is checked
    whole first: a malformed record or an item this workspace does not have stores nothing. Importing the same file
    again stores nothing new; a grade changed since is recorded as the annotator's new verdict. Each grade keeps
    the time its tool gives it (updated_at): one older than the grade its annotator already stands by is kept out
    and counted, so an older export imported after a newer one changes nothing.

    Example: `testset-builder review-import annotations.json --workspace testset --annotators users.json`.
    """
    resolved = settings(config, workspace)
    with open_workspace_for(resolved) as ws:
        summary = api.review_import(resolved, source, fmt=fmt, annotators=annotators, workspace=ws)
    if json_output:
        print(json.dumps(summary.as_dict(), indent=2))
        return
    for warning in summary.warnings:
        err.print(f"[yellow]{escape(warning)}[/]", highlight=False)
    older = f", {summary.older} older than the grade already stored (kept out)" if summary.older else ""
    settled = f", {summary.settled} disagreements settled" if summary.settled else ""
    if summary.not_open:
        settled += f", {summary.not_open} answers to disagreements no longer open (settled or agreed on; kept out)"
    out.print(
        f"imported {summary.format} {source.name}: {summary.grades} grades from {len(summary.reviewers)} annotators "
        f"on {summary.records} records: {summary.new_verdicts} new verdicts{settled}, {summary.unchanged} already "
        f"recorded{older}, {summary.unanswered} records unanswered",
        highlight=False,
    )
