"""The verdicts a reviewer can give, declared once: the store (which count towards an item's overlap), the review
stage (what each needs), the JSON API, the page, the terminal reviewer and the importers all read this table.

A new kind of verdict is one :func:`register_action` call: a name, the item kinds it answers, whether it counts
towards the overlap, whether it needs a reason (a grade or an edit is what the built-in grade and edit do), and its
key and label on the page and in the terminal. An
action needing no field gets a button (and its key) on the page and in the terminal without any other change.
"""

from __future__ import annotations

from dataclasses import dataclass

from .registry import load_plugins

DROP_REASONS = ("unanswerable", "ambiguous", "answer leaked", "not a realistic query", "other")


@dataclass(frozen=True)
class ReviewAction:
    name: str
    kinds: tuple[str, ...]  # the item kinds it answers: "pair", "question"
    counts: bool  # a verdict towards the item's overlap (a skip passes the item on, so it does not)
    needs: str | None = None  # the one field it needs: grade, reason or edited_text
    key: str | None = None  # its key on the page and in the terminal
    label: str = ""
    help: str = ""
    built_in: bool = False  # drawn by the page's own controls (grade buttons, the drop list, the edit box)


ACTIONS: dict[str, ReviewAction] = {}


def register_action(action: ReviewAction) -> ReviewAction:
    """Make ``action`` a verdict reviewers can give (its name must be new; its key free for its item kinds)."""
    if not action.name.replace("_", "").isalnum() or action.name == "undo":
        raise ValueError(f"an action's name is a plain word other than undo, not {action.name!r}")
    if action.name in ACTIONS:
        raise ValueError(f"action {action.name!r} is declared already")
    if not action.kinds or not set(action.kinds) <= {"pair", "question"}:
        raise ValueError(f"action {action.name!r} answers pair and/or question items, not {action.kinds!r}")
    if action.needs not in (None, "reason"):  # a grade makes a judgment, an edit a query: the built-ins' effects
        raise ValueError(f"an added action needs nothing or a reason, not {action.needs!r} ({action.name!r})")
    taken = {a.key for a in ACTIONS.values() if a.key and set(a.kinds) & set(action.kinds)}
    if action.key is not None and (action.key in taken or action.key in RESERVED_KEYS):
        raise ValueError(f"key {action.key!r} is taken; choose another for {action.name!r}")
    ACTIONS[action.name] = action
    return action


def action(name: str) -> ReviewAction | None:
    return ACTIONS.get(name)


def counts(name: str) -> bool:
    """Whether a verdict of this name counts towards its item's overlap (an unknown name, an undo: no)."""
    found = ACTIONS.get(name)
    return found is not None and found.counts


def names() -> tuple[str, ...]:
    return tuple(ACTIONS)


def extra_actions(kind: str) -> list[ReviewAction]:
    """The registered actions beyond the built-in ones that answer items of ``kind`` and need no field: each a
    button (and a key) of its own on the page and in the terminal. One that needs a field is given through the
    JSON API."""
    return [a for a in ACTIONS.values() if not a.built_in and kind in a.kinds and a.needs is None]


# keys the reviewers use for other things: grades, undo, context, the whole document, the comment, the failure tags,
# quit, a failure tag prompt
RESERVED_KEYS = {"0", "1", "2", "u", "c", "w", "m", "r", "g", "n", "a", "q", "t", "e"}

for _built_in in (
    ReviewAction("grade", ("pair",), True, "grade", None, "grade", "0, 1 or 2: how relevant the chunk is", True),
    ReviewAction("skip", ("pair", "question"), False, None, "s", "skip", "pass it to another reviewer", True),
    ReviewAction("keep_question", ("question",), True, None, "k", "keep", "a good test question", True),
    ReviewAction("drop_question", ("question",), True, "reason", "d", "drop", "not a good question: why", True),
    ReviewAction("edit_question", ("question",), True, "edited_text", None, "edit", "the question, rewritten", True),
    # an admin settling a disagreement: not a vote, so it neither counts towards the overlap nor stands as the
    # admin's own grade on the item (review.settle gives it; a reviewer's verdict cannot be one)
    ReviewAction("adjudicate", ("pair",), False, "grade", None, "settle", "an admin's grade settling a pair", True),
):
    ACTIONS[_built_in.name] = _built_in

load_plugins()  # the built-in actions are declared: now a plugin's, after them
