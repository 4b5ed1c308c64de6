"""Chunks that are page furniture rather than content: navigation, tables of contents, "this page" and "edit on
GitHub" blocks, cookie banners, repeated headers and footers.

Such a chunk stays in the corpus (a retriever may return it, and a set must be able to say so) but is marked with
why: it is never a synthetic question's source, and never taken for sure as a likely answer in review. A mark is
one of :data:`REASONS`:

- ``navigation``: most of the chunk's characters came from furniture the HTML reader recognised
  (:func:`~.html.html_document`), or are Markdown link markup (a list of ``[text](url)`` links);
- ``furniture``: most of its lines are the words furniture is made of ("Table of Contents", "Show Source",
  "Edit on GitHub", "Previous topic") or breadcrumb trails ("Docs »", "next |"): what is left of furniture in text
  without markup;
- ``repeated``: its duplicate group (:mod:`.dedup`) spans many of the corpus's documents (:func:`repeated_across`),
  as a site's header or footer does on every page.

The first two are decided per chunk, from its text and its document's furniture spans, when it is cut; the third
over the corpus, after each ``chunk`` run has grouped its duplicates.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

NAVIGATION, FURNITURE, REPEATED = "navigation", "furniture", "repeated"
REASONS = (NAVIGATION, FURNITURE, REPEATED)
FURNITURE_KEY = "furniture"
"""The document metadata key under which a reader that knows the markup (HTML) lists the ``[start, end]`` spans of
the text that came from page furniture."""
MOSTLY = 0.5  # a chunk is furniture when at least this share of its visible characters is

FURNITURE_LINE = re.compile(
    r"(navigation|table of contents|contents|on this page|in this article|this page|show source|page source|"
    r"view (page )?source|edit (on|in) github|edit this page|suggest an? edit|improve this page|report an? (bug|issue)|"
    r"previous( topic| page)?|next( topic| page)?|quick search|search|skip to (main )?content|back to top|"
    r"was this (page )?helpful\??|(yes|no)|related topics|documentation overview|index|modules|home|menu|"
    r"(toggle )?(navigation|sidebar|menu|theme)|last updated .*|powered by .*|created using .*|"
    r"built with .*|©.*|copyright (©|\(c\)|\d{4}).*|all rights reserved\.?|accept( all)?( cookies)?|reject( all)?|"
    r"cookie (settings|preferences))",
    re.IGNORECASE,
)
BREADCRUMB_END = ("»", "›", "|", ">")
TRAIL_MARKS = ("»", "›")  # a breadcrumb trail's separators: two in a line make it one
SHORT_LINE = 12  # words: furniture lines are short, so a sentence that starts with "Powered by" stays content
MARKDOWN_LINK = re.compile(r"!?\[[^\]\n]*\]\([^)\n]*\)")
LIST_MARK = re.compile(r"^\s*(#{1,6}|[-*+]|\d+[.)])\s+")


def _visible(text: str) -> int:
    """How many of ``text``'s characters are not whitespace (``str.split`` splits on what ``str.isspace`` calls
    whitespace: the same count as testing each character, without a Python step per character)."""
    return sum(map(len, text.split()))


def furniture_line(line: str) -> bool:
    """A line of text that furniture is made of: a furniture phrase on its own (as a heading or list item too), or
    a short breadcrumb step ("Docs »", "next |")."""
    bare = LIST_MARK.sub("", line).strip().strip("¶").strip()
    if not bare or len(bare.split(None, SHORT_LINE)) > SHORT_LINE:  # more words than that: split no further
        return False
    if bare.startswith("|"):  # a table's row
        return False
    if sum(bare.count(mark) for mark in TRAIL_MARKS) >= 2 or (bare.endswith(BREADCRUMB_END) and len(bare.split()) <= 4):
        return True
    return bool(FURNITURE_LINE.fullmatch(bare.rstrip(":").strip()))


def text_reason(text: str) -> str:
    """Why a chunk's text alone reads as furniture ('' when it does not): mostly Markdown link markup, or mostly
    furniture lines (:func:`furniture_line`). Prose has neither, and then its visible characters are not counted."""
    links = sum(_visible(m.group(0)) for m in MARKDOWN_LINK.finditer(text)) if "](" in text else 0  # a link has "]("
    furniture = sum(_visible(line) for line in text.splitlines() if furniture_line(line))
    if not links and not furniture:
        return ""
    visible = _visible(text)
    if links >= MOSTLY * visible:
        return NAVIGATION
    return FURNITURE if furniture >= MOSTLY * visible else ""


def chunk_reason(text: str, start: int, end: int, furniture_spans: Sequence[Sequence[int]]) -> str:
    """Why the chunk ``text`` (the span ``[start, end)`` of its document) is furniture ('' when it is content):
    ``navigation`` when most of its visible characters lie in its document's furniture spans, else
    :func:`text_reason`."""
    if furniture_spans:
        covered = 0
        for span_start, span_end in furniture_spans:
            low, high = max(start, span_start), min(end, span_end)
            if low < high:
                covered += _visible(text[low - start : high - start])
        if covered and covered >= MOSTLY * _visible(text):
            return NAVIGATION
    return text_reason(text)


REPEATED_MIN_DOCUMENTS = 3
REPEATED_MIN_SHARE = 0.25


def repeated_across(live_documents: int) -> int:
    """How many documents a duplicate group must span for its chunks to be marked ``repeated``: at least
    :data:`REPEATED_MIN_DOCUMENTS`, and at least :data:`REPEATED_MIN_SHARE` of the corpus's documents (a header or
    footer is on every page of its site; a passage that three versions of the same page share is not furniture in
    a corpus of many pages)."""
    return max(REPEATED_MIN_DOCUMENTS, math.ceil(REPEATED_MIN_SHARE * live_documents))
