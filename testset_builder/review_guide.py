"""What reviewers are told, read one way by every face: the guidelines' Markdown parsed by one CommonMark parser
(tables on, raw HTML shown as text and never run, only safe links: markdown-it refuses ``javascript:``,
``vbscript:`` and ``data:`` other than images), rendered as HTML for the page and the annotation tools, or for a
terminal; and each grade's label and meaning (``review.grades``, ``label: meaning``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from rich.markdown import Markdown


def parser() -> MarkdownIt:
    """The one parser of the guidelines: CommonMark and tables, raw HTML as text."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table")


def html(markdown: str | None) -> str | None:
    """The guidelines as HTML (safe to put in a page as it is); None for none or blank ones."""
    if not markdown or not markdown.strip():
        return None
    return parser().render(markdown)


def terminal(markdown: str | None) -> Markdown | None:
    """The guidelines for a terminal (a rich renderable), parsed as :func:`html` parses them, so raw HTML shows as
    its text there too and the Markdown after it is still rendered; None for none or blank ones."""
    if not markdown or not markdown.strip():
        return None
    from rich.markdown import Markdown

    class Guidelines(Markdown):
        def __init__(self, markup: str) -> None:
            super().__init__(markup)
            self.parsed = parser().parse(markup)  # rich's own parser runs raw HTML, which it then leaves out

    return Guidelines(markdown)


def grade_labels(grades: dict[int, str]) -> list[tuple[int, str, str]]:
    """Each grade with its label and what it means, from ``review.grades`` (``label: meaning``; a meaning without a
    colon has no label)."""
    return [
        (grade, text.split(":", 1)[0].strip() if ":" in text else "", text.split(":", 1)[-1].strip())
        for grade, text in sorted(grades.items())
    ]
