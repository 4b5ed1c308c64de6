"""Which chunks get questions: filters for informative chunks, then a seeded sample stratified across documents.

Pure functions over (chunk_id, doc_id, text) rows, so the same corpus, settings and seed give the same sample.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .boilerplate import text_reason

BOILERPLATE = re.compile(
    r"all rights reserved|cookie|privacy policy|terms of (use|service)|subscribe|sign in|log in|copyright|©|"
    r"table of contents|click here|skip to (main )?content",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class SourceChunk:
    chunk_id: str
    doc_id: str
    text: str


def skip_reason(text: str, min_chars: int) -> str | None:
    """Why a chunk is not worth a question: too short, mostly non-letters (tables of numbers, markup), repetitive,
    or page furniture (copyright lines, cookie banners, navigation); None when it is informative."""
    stripped = text.strip()
    if len(stripped) < min_chars:
        return "short"
    letters = sum(ch.isalpha() for ch in stripped)
    if letters / len(stripped) < 0.5:
        return "boilerplate"
    words = re.findall(r"\w+", stripped.lower())
    if len(words) >= 20 and len(set(words)) / len(words) < 0.3:
        return "boilerplate"
    lines = [line for line in stripped.splitlines() if line.strip()]
    if lines and sum(bool(BOILERPLATE.search(line)) for line in lines) / len(lines) > 0.3:
        return "boilerplate"
    if text_reason(stripped):  # what the chunk stage marks by text (a chunk cut before marks existed has none)
        return "boilerplate"
    return None


def eligible_chunks(
    chunks: Sequence[SourceChunk],
    duplicate_group: Mapping[str, str],
    min_chars: int,
    boilerplate: Mapping[str, str] | frozenset[str] = frozenset(),
) -> tuple[list[SourceChunk], Counter]:
    """Informative chunks, one per duplicate group (the smallest id stands for its twins); and a count of the
    skipped by reason (short, boilerplate, duplicate). ``boilerplate``: the chunks the chunk stage marked as page
    furniture (:mod:`~testset_builder.corpus.boilerplate`), never a source."""
    skipped: Counter = Counter()
    kept, seen_groups = [], set()
    for chunk in sorted(chunks, key=lambda c: c.chunk_id):
        reason = "boilerplate" if chunk.chunk_id in boilerplate else skip_reason(chunk.text, min_chars)
        if reason is None and chunk.chunk_id in duplicate_group:
            group = duplicate_group[chunk.chunk_id]
            reason = "duplicate" if group in seen_groups else None
            seen_groups.add(group)
        if reason:
            skipped[reason] += 1
        else:
            kept.append(chunk)
    return kept, skipped


def _rank(seed: int, *parts: str) -> str:
    """A key's place in a seeded order that does not depend on the other keys: adding or removing a chunk or a
    document leaves every other one's place as it was, so a corpus change moves few picks."""
    return hashlib.sha256("\x00".join([str(seed), *parts]).encode()).hexdigest()


def _style_counts(count: int, weights: Mapping[str, float]) -> Counter:
    """``count`` slots shared among the styles exactly in proportion to ``weights`` (largest remainder)."""
    total = sum(weights.values())
    exact = {style: count * weight / total for style, weight in weights.items() if weight > 0}
    counts = Counter({style: math.floor(value) for style, value in exact.items()})
    for style in sorted(exact, key=lambda s: (-(exact[s] - counts[s]), s))[: count - sum(counts.values())]:
        counts[style] += 1
    return counts


def allocate_styles(
    keys: Sequence[str], weights: Mapping[str, float], seed: int, fixed: Mapping[int, str] | None = None
) -> list[str]:
    """A style for each key (a question slot), exactly in proportion to ``weights`` (largest remainder). Which slot
    gets which style follows the slots' seeded ranks, so a slot added or removed moves at most one slot across each
    boundary between styles: the other slots keep their style, and so their cached question. ``fixed``: slots whose
    style is given (by position: a question already made there); the others share what is left of each style's
    count, in rank order, which gives each the style it had beside them."""
    count, fixed = len(keys), dict(fixed or {})
    if count <= 0 or sum(weights.values()) <= 0:
        return []
    free = [i for i in range(count) if i not in fixed]
    left = _style_counts(count, weights)
    left.subtract(Counter(fixed.values()))
    if any(n < 0 for n in left.values()) or sum(left.values()) != len(free):  # fixed styles off the proportions
        left = _style_counts(len(free), weights)
    blocks = [style for style in sorted(left) for _ in range(left[style])]
    labels = [fixed.get(i, "") for i in range(count)]
    for place, index in enumerate(sorted(free, key=lambda i: (_rank(seed, "style", keys[i]), i))):
        labels[index] = blocks[place]
    return labels


def stratified_sample(
    chunks: Sequence[SourceChunk],
    count: int,
    seed: int,
    per_document_cap: int | None = None,
    taken: Mapping[str, int] | None = None,
) -> list[SourceChunk]:
    """``count`` chunks, round-robin across documents in a seeded order (each document's chunks in a seeded order
    too), so questions spread over the corpus instead of piling up on its largest files. Each place comes from the
    seed and the id alone, so a corpus change moves few picks and the rest keep their cached questions. ``taken``
    counts chunks already drawn per document in earlier rounds, against ``per_document_cap``."""
    by_doc: dict[str, list[SourceChunk]] = defaultdict(list)
    for chunk in chunks:
        by_doc[chunk.doc_id].append(chunk)
    order = sorted(by_doc, key=lambda doc: _rank(seed, "document", doc))
    queues = {  # popped from the end: the first in seeded order last
        doc: sorted(by_doc[doc], key=lambda c: _rank(seed, "chunk", c.chunk_id), reverse=True) for doc in order
    }
    used = Counter(taken or {})
    picked: list[SourceChunk] = []
    while len(picked) < count:
        progressed = False
        for doc in order:
            if len(picked) == count:
                break
            if queues[doc] and (per_document_cap is None or used[doc] < per_document_cap):
                picked.append(queues[doc].pop())
                used[doc] += 1
                progressed = True
        if not progressed:
            break
    return picked


def corpus_fingerprint(chunks: Sequence[SourceChunk]) -> str:
    """The sha256 of the sorted chunk ids: the synthesize stage records what it sampled from, and the plan asks
    whether the corpus is still that one."""
    return hashlib.sha256("\n".join(sorted(c.chunk_id for c in chunks)).encode()).hexdigest()


def slot_seed(seed: int, *parts: str) -> int:
    """A stable per-question seed (sent to the model, so each question's request, and cache key, is distinct)."""
    return int(_rank(seed, *parts)[:8], 16) & 0x7FFFFFFF


def round_chunks(round_number: int, want: int, attempted: float, accepted: float, per_chunk: int) -> int:
    """Chunks a synthesis round samples to get ``want`` more questions: as many as wanted in the first round; after
    it, more by how many the filters removed so far (``attempted`` requests for ``accepted`` questions), 1.5 to 4
    times. The synthesize stage samples with it, and the plan counts with it."""
    factor = 1.0 if round_number == 0 else min(4.0, max(1.5, attempted / max(1.0, accepted)))
    return math.ceil(want * factor / per_chunk)
