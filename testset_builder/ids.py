"""What an id may hold, checked without the records' pydantic models (readers of runs and qrels check every id)."""

from __future__ import annotations

import re
import unicodedata

_NOT_IN_ID = re.compile(r"[\s\x00-\x1f\x7f-\x9f]")
"""Whitespace (``re``'s ``\\s`` is ``str.isspace``) and the control characters (category Cc is exactly these
ranges): one regex search instead of a Python loop over the characters (ids are validated per chunk at ingest)."""


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be an id, or None. An id is any non-empty text without whitespace (Unicode's too) or
    control characters: every format the tool reads and writes (TREC splits on whitespace, BEIR on tabs, JSONL on
    lines) then carries it unchanged. ``#``, quotes, any script and any length are fine."""
    if not value:
        return "an id cannot be empty"
    if value[0] == "\ufeff":  # readers drop a byte-order mark at the start of a file
        return f"an id cannot start with a byte-order mark (U+FEFF): {value[:60]!r}"
    if not _NOT_IN_ID.search(value):
        return None
    for ch in value:
        if ch.isspace() or unicodedata.category(ch) == "Cc":
            return f"an id cannot contain whitespace or control characters ({ch!r} in {value[:60]!r})"
    return None
