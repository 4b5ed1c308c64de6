"""Document spans, pure functions: find a quoted text in a passage, and measure how much of one span another covers.

Labels are anchored to spans of documents (a chunk's ``[start, end)``, or the evidence a question was written
from), so that they can outlive a chunking: a chunk of another chunking inherits a label when it covers enough of
the labelled span (:func:`coverage`). When a document's text has changed, offsets no longer hold, and the labelled
text is looked for in the new text instead (:func:`locate`).
"""

from __future__ import annotations

import re

_SPACE = re.compile(r"\s+")


def _collapsed(text: str) -> tuple[str, list[int]]:
    """``text`` with every run of whitespace made one space, and for each character of the result the offset in
    ``text`` it came from."""
    out, where = [], []
    for match in re.finditer(r"\s+|\S+", text):
        if match.group(0)[0].isspace():
            out.append(" ")
            where.append(match.start())
        else:
            out.append(match.group(0))
            where.extend(range(match.start(), match.end()))
    return "".join(out), where


def _nearest(text: str, needle: str, near: int) -> int:
    """The start of the occurrence of ``needle`` in ``text`` closest to ``near`` (-1 when there is none)."""
    best, position = -1, text.find(needle)
    while position != -1:
        if best == -1 or abs(position - near) < abs(best - near):
            best = position
        position = text.find(needle, position + 1)
    return best


def locate(needle: str, text: str, near: int = 0) -> tuple[int, int] | None:
    """Where ``needle`` lies in ``text`` as ``(start, end)``: verbatim first, else with runs of whitespace (line
    breaks, double spaces) counted as one space on both sides; of several occurrences the one starting nearest to
    ``near``. None when it is not there, or when ``needle`` is blank."""
    if not needle.strip():
        return None
    position = _nearest(text, needle, near)
    if position != -1:
        return position, position + len(needle)
    wanted = _SPACE.sub(" ", needle.strip())
    collapsed, where = _collapsed(text)
    near_collapsed = next((i for i, offset in enumerate(where) if offset >= near), 0)
    position = _nearest(collapsed, wanted, near_collapsed)
    if position == -1:
        return None
    return where[position], where[position + len(wanted) - 1] + 1


def overlap(a: tuple[int, int], b: tuple[int, int]) -> int:
    """How many characters the spans ``a`` and ``b`` share."""
    return max(0, min(a[1], b[1]) - max(a[0], b[0]))


def coverage(anchor: tuple[int, int], chunk: tuple[int, int]) -> float:
    """The share of ``anchor`` (a labelled span) that ``chunk`` covers: 1.0 when it holds all of it. An empty
    anchor is covered by a chunk that contains its position."""
    length = anchor[1] - anchor[0]
    if length <= 0:
        return 1.0 if chunk[0] <= anchor[0] < chunk[1] else 0.0
    return overlap(anchor, chunk) / length


def covers(anchor: tuple[int, int], chunk: tuple[int, int], min_coverage: float) -> bool:
    """Whether ``chunk`` inherits a label anchored at ``anchor``: it covers at least ``min_coverage`` of it (and
    some of it: a threshold of 0 still needs an overlap)."""
    share = coverage(anchor, chunk)
    return share > 0 and share >= min_coverage - 1e-12
