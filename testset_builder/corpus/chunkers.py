"""Chunkers: pure functions from a :class:`Document` to :class:`Chunk`s with ``doc.text[start:end] == chunk.text``.

Every chunker works on *spans* of the original text and never rebuilds strings, so a chunk's text is its span by
construction, nothing is dropped (the spans cover the whole document) and no cut falls inside a character: not
inside a combining sequence, an emoji ZWJ sequence, or a variation-selected character.

* ``tokens``: windows of ``size`` tokens (cl100k_base, from the offline ``bpe-openai`` package) advancing by
  ``size - overlap`` tokens; a window boundary inside a multi-token character moves to the character's start.
* ``recursive``: split on paragraph, line, sentence, word boundaries in turn until pieces fit ``size`` characters,
  then merge neighbours up to ``size``.
* ``sentence``: whole sentences merged up to ``size`` characters.

With ``overlap``, each chunk of these (and of ``markdown``) starts by repeating the end of the one before, up to
``overlap`` characters: whole trailing pieces (sentences, lines) when they fit, else the words at the end of the last
one, so a chunk may start inside a sentence. It is shorter only where the next piece leaves less room in a chunk, or
the text has no word boundary near the end of the previous chunk; a markdown chunk never carries text across a
heading.
* ``prechunked``: the input is already chunked: each document is one chunk and keeps its id as the chunk id.
* ``markdown``: a chunk never crosses a heading; each carries its heading path in ``metadata["headings"]``; fenced
  code blocks are never split (one longer than ``size`` becomes a chunk of its own); prose splits as ``recursive``.

Chunk ids are derived from the document id and the chunk's text (plus its rank among identical texts of the
document), so rechunking the same corpus with the same config gives the same ids, and editing one document changes
only that document's chunk ids.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable
from functools import lru_cache

from ..config import ChunkingConfig
from ..records import Chunk, Document

RECURSIVE_SEPARATORS = ("\n\n", "\n", ". ", "? ", "! ", "。", "; ", ", ", " ")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])[\"'”’)\]]*\s+|\n{2,}")


def _joins_previous(ch: str) -> bool:
    """True for characters that belong to the character before them (no cut may fall right before one)."""
    code = ord(ch)
    return (
        bool(unicodedata.combining(ch))
        or code == 0x200D
        or 0xFE00 <= code <= 0xFE0F
        or 0x1F3FB <= code <= 0x1F3FF
        or 0xE0020 <= code <= 0xE007F
    )


def safe_cut(text: str, position: int) -> int:
    """The nearest position at or before ``position`` that does not split a character sequence (0 if none)."""
    while 0 < position < len(text) and (_joins_previous(text[position]) or text[position - 1] == "\u200d"):
        position -= 1
    return position


def _hard_split(text: str, start: int, end: int, size: int) -> list[tuple[int, int]]:
    spans, position = [], start
    while position < end:
        cut = min(position + size, end)
        if cut < end:
            cut = safe_cut(text, cut)
            if cut <= position:  # one sequence longer than size: keep it whole
                cut = position + size
                while cut < end and (_joins_previous(text[cut]) or text[cut - 1] == "\u200d"):
                    cut += 1
        spans.append((position, cut))
        position = cut
    return spans


def _split_recursive(text: str, start: int, end: int, size: int, separators: tuple[str, ...]) -> list[tuple[int, int]]:
    """Pieces of [start, end) no longer than ``size``, cut after separators (kept with the piece before them)."""
    if end - start <= size:
        return [(start, end)]
    for index, separator in enumerate(separators):
        cuts, position = [], text.find(separator, start, end)
        while position != -1:
            cut = position + len(separator)
            if start < cut < end:
                cuts.append(cut)
            position = text.find(separator, cut, end)
        if not cuts:
            continue
        pieces, previous = [], start
        for cut in [*cuts, end]:
            if cut > previous:
                if cut - previous > size:
                    pieces.extend(_split_recursive(text, previous, cut, size, separators[index + 1 :]))
                else:
                    pieces.append((previous, cut))
                previous = cut
        return pieces
    return _hard_split(text, start, end, size)


def _merge(text: str, pieces: list[tuple[int, int]], size: int, overlap: int) -> list[tuple[int, int]]:
    """Greedily merge consecutive pieces up to ``size``. Each new chunk repeats the end of the previous one, up to
    ``overlap`` characters: its trailing pieces that fit, else the words at the end of its last piece (a chunk then
    starts at a word, inside a sentence). The overlap is shorter, or none, only where the next piece leaves less
    room than ``overlap`` in a chunk, or the last piece has no word boundary in its last ``overlap`` characters."""
    spans: list[tuple[int, int]] = []
    window: list[tuple[int, int]] = []
    for piece in pieces:
        if window and piece[1] - window[0][0] > size:
            spans.append((window[0][0], window[-1][1]))
            last = window[-1]
            while window and (window[-1][1] - window[0][0] > overlap or piece[1] - window[0][0] > size):
                window.pop(0)
            if not window and overlap:
                tail = _word_tail(text, last, min(overlap, size - (piece[1] - piece[0])))
                window = [tail] if tail else []
        window.append(piece)
    if window:
        spans.append((window[0][0], window[-1][1]))
    return spans


def _word_tail(text: str, span: tuple[int, int], limit: int) -> tuple[int, int] | None:
    """The longest tail of ``span`` of at most ``limit`` characters that starts at a word (after whitespace)."""
    start, end = span
    for position in range(max(start + 1, end - limit), end):
        if text[position - 1].isspace() and not text[position].isspace() and not _joins_previous(text[position]):
            return position, end
    return None


def recursive_spans(text: str, size: int, overlap: int) -> list[tuple[int, int]]:
    return _merge(text, _split_recursive(text, 0, len(text), size, RECURSIVE_SEPARATORS), size, overlap)


def sentence_spans(text: str, size: int, overlap: int) -> list[tuple[int, int]]:
    cuts = [m.end() for m in _SENTENCE_END.finditer(text) if 0 < m.end() < len(text)]
    pieces, previous = [], 0
    for cut in [*cuts, len(text)]:
        if cut > previous:
            pieces.extend(
                _split_recursive(text, previous, cut, size, RECURSIVE_SEPARATORS[5:])
                if cut - previous > size
                else [(previous, cut)]
            )
            previous = cut
    return _merge(text, pieces, size, overlap)


@lru_cache(maxsize=4)
def _encoding(name: str):
    try:
        import bpe_openai
    except ImportError:  # pragma: no cover - a runtime dependency
        raise RuntimeError("token chunking needs bpe-openai: pip install bpe-openai") from None
    return bpe_openai.get_encoding(name)


def token_spans(text: str, size: int, overlap: int, encoding: str = "cl100k_base") -> list[tuple[int, int]]:
    if not text:
        return []
    tokens = _encoding(encoding).encode_ordinary(text)
    _, offsets = _encoding(encoding).decode_with_offsets(tokens)
    boundaries = [*offsets, len(text)]
    spans, first, step = [], 0, size - overlap
    while True:
        last = min(first + size, len(tokens))
        start, end = (
            safe_cut(text, boundaries[first]),
            safe_cut(text, boundaries[last]) if last < len(tokens) else len(text),
        )
        if spans and start <= spans[-1][0]:  # a character wider than the step: grow the previous window instead
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
        elif end > start:
            spans.append((start, end))
        if last >= len(tokens):
            return spans
        first += step


_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")


def markdown_spans(text: str, size: int, overlap: int) -> list[tuple[int, int, dict]]:
    sections: list[tuple[int, list[str]]] = [(0, [])]  # (start, heading path) of each section
    code_blocks: list[tuple[int, int]] = []
    path: list[tuple[int, str]] = []
    fence, fence_start, offset = None, 0, 0
    for line in text.splitlines(keepends=True):
        stripped = line.rstrip("\r\n")
        marker = _FENCE.match(stripped)
        if fence is None and marker:
            fence, fence_start = marker.group(1), offset
        elif fence is not None and marker and marker.group(1) == fence:
            code_blocks.append((fence_start, offset + len(line)))
            fence = None
        elif fence is None and (heading := _HEADING.match(stripped)):
            level = len(heading.group(1))
            path = [(lvl, title) for lvl, title in path if lvl < level] + [(level, heading.group(2))]
            sections.append((offset, [title for _, title in path]))
        offset += len(line)
    if fence is not None:  # an unclosed fence runs to the end, as renderers show it
        code_blocks.append((fence_start, len(text)))
    spans = []
    bounds = [start for start, _ in sections[1:]] + [len(text)]
    for (start, headings), end in zip(sections, bounds):
        if end <= start:
            continue
        pieces, position = [], start
        for block_start, block_end in code_blocks:
            if start <= block_start < end:
                if block_start > position:
                    pieces.extend(_split_recursive(text, position, block_start, size, RECURSIVE_SEPARATORS))
                pieces.append((block_start, min(block_end, end)))
                position = min(block_end, end)
        if end > position:
            pieces.extend(_split_recursive(text, position, end, size, RECURSIVE_SEPARATORS))
        spans.extend((a, b, {"headings": headings}) for a, b in _merge(text, pieces, size, overlap))
    return spans


_SPANS: dict[str, Callable[..., list]] = {
    "recursive": recursive_spans,
    "sentence": sentence_spans,
    "markdown": markdown_spans,
}


def chunk_id(doc_id: str, text: str, occurrence: int) -> str:
    digest = hashlib.sha256(f"{doc_id}\x00{occurrence}\x00{text}".encode()).hexdigest()[:16]
    return f"{doc_id}#{digest}"


ChunkSpan = tuple[str, int, int, dict]
"""A chunk before it is a record: (chunk id, start, end, its chunker's extra metadata: a markdown chunk's
``headings``, else empty). The text is ``document.text[start:end]``."""


def chunk_spans(doc_id: str, text: str, config: ChunkingConfig) -> list[ChunkSpan]:
    """The chunks of the document ``doc_id`` with ``text``, in order, as :data:`ChunkSpan` (what
    :func:`chunk_document` and the ingest batches build their records from). An empty text has none."""
    if not text:
        return []
    if config.chunker == "prechunked":
        return [(doc_id, 0, len(text), {})]
    if config.chunker == "tokens":
        spans = token_spans(text, config.size, config.overlap, config.encoding)
    else:
        spans = _SPANS[config.chunker](text, config.size, config.overlap)
    seen: dict[str, int] = {}
    chunks = []
    for span in spans:
        start, end = span[0], span[1]
        piece = text[start:end]
        occurrence = seen.get(piece, 0)
        seen[piece] = occurrence + 1
        chunks.append((chunk_id(doc_id, piece, occurrence), start, end, span[2] if len(span) > 2 else {}))
    return chunks


def chunk_metadata(config: ChunkingConfig, index: int, extra: dict) -> dict:
    """A chunk's metadata: its place in the document and how it was cut."""
    if config.chunker == "prechunked":
        return {"index": 0, "chunker": "prechunked"}
    return {"index": index, "chunker": config.chunker, "size": config.size, "overlap": config.overlap, **extra}


def chunk_document(document: Document, config: ChunkingConfig) -> list[Chunk]:
    """The document's chunks, in order. An empty document has none."""
    text = document.text
    return [
        Chunk(
            chunk_id=chunk_id_,
            doc_id=document.doc_id,
            text=text[start:end],
            start=start,
            end=end,
            metadata=chunk_metadata(config, index, extra),
        )
        for index, (chunk_id_, start, end, extra) in enumerate(chunk_spans(document.doc_id, text, config))
    ]
