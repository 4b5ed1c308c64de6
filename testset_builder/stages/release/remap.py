"""remap: project a release's labels onto another chunking of the same corpus, held in another workspace.

Each label of the release is anchored to a span of its document: the evidence span when the release has one for
that qrel (``meta/evidence.jsonl``, a synthetic question's quoted evidence), else its chunk's span
(``meta/chunks.jsonl``). A chunk of the target workspace inherits the label when it covers at least
``min_coverage`` of the anchor (:func:`~testset_builder.spans.covers`). When the target's document text is not
the one the span was taken from (``doc_sha256`` differs, or the text at the offsets differs), the anchor's text is
looked for in the new text (verbatim, then whitespace-normalised, nearest the old offset); found, it moves there
(counted as relocated); not found, the label is lost.

Each parent label ends as one of: ``one-to-one`` (one new chunk inherits it, and that chunk inherits nothing else
for the query), ``split`` (several new chunks inherit it), ``merged`` (its one new chunk also inherits other labels
of the query: the new chunk's grade is the max of them), ``ambiguous`` (no new chunk covers enough of it, as when
big chunks are cut into small ones, or the text changed inside it but its first and last words are still there:
each new chunk overlapping it is queued for review as a proposal, and a reviewer's verdict labels it) or ``lost``
(no new chunk overlaps it, or the changed text no longer holds it; the reason says which). Every outcome is
counted, listed and written to the release's ``meta/remap.jsonl``; nothing is dropped silently.

The remapped labels are stored in the target workspace as judgments carrying their origin (a human label stays a
human verdict, by reviewer ``remap:<workspace>@<version>``; a synthetic source label stays one; an unverified LLM
label stays an unverified proposal), with the queries under their own ids; the release is then written from the
target workspace as any release is, so a later ``release`` there keeps them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from ...config import ReleaseConfig
from ...errors import InputError
from ...records import Chunk, Judgment, JudgmentSource, JudgmentStatus, Query, QueryOrigin, Span
from ...spans import coverage, covers, locate
from ...store import corpus as stored_corpus
from ...store import review as review_store
from ...store import rows
from ...store.workspace import Workspace, utc_timestamp
from .reader import LoadedRelease, qrel_origins
from .versions import existing_versions, parse_version
from .writer import ReleaseSummary, RemapOrigin, write_release

OUTCOMES = ("one-to-one", "split", "merged", "ambiguous", "lost")
EDGE_CHARS = 40  # of an anchor's first and last words, looked for where the text inside it changed
ORIGIN_RANK = {"human": 2, "synthetic-source": 1, "llm-unverified": 0}  # which origin a merged label keeps on a tie
REMAP_PRIORITY = 2.0  # an ambiguous label's chunks: above every estimate-driven priority (at most 2, which estimate
# reorders), below pairs drawn for review (3 and up)
UNKNOWN = "llm-unverified"  # a label whose origin the release does not say is carried as a proposal, never as human


@dataclass(frozen=True)
class RemapPolicy:
    min_coverage: float = 0.5

    def describe(self) -> dict:
        return {
            "min_coverage": self.min_coverage,
            "rules": [
                "a label is anchored to its evidence span when the release has one, else to its chunk's span",
                f"a new chunk inherits it when it covers at least {self.min_coverage:g} of the anchor",
                "a new chunk that inherits several labels of a query gets the max grade (merged)",
                "where the document's text changed, the anchor's text is looked for in the new text (verbatim, "
                "then whitespace-normalised); not found, its first and last words are, and the span between them "
                "is the anchor, ambiguous; else the label is lost",
                "a label no new chunk covers enough of is ambiguous: each new chunk overlapping it is queued for "
                "review as a proposal",
            ],
        }


@dataclass
class Outcome:
    """What became of one label of the parent release."""

    query_id: str
    chunk_id: str
    grade: int
    anchor: str  # "evidence" or "chunk"
    outcome: str = "lost"
    to: list[dict] = field(default_factory=list)  # [{chunk_id, coverage}] of the new chunks that inherit it
    relocated: bool = False
    reason: str | None = None

    def as_row(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass
class NewLabel:
    query_id: str
    chunk: Chunk
    grade: int
    origin: str
    parents: list[str]  # the parent release's chunk ids it was inherited from
    evidence: Span | None


@dataclass(frozen=True)
class Proposal:
    """A new chunk overlapping an ambiguous label, queued for a reviewer's verdict."""

    query_id: str
    chunk_id: str
    parent_chunk_id: str
    parent_grade: int
    coverage: float  # the share of the anchor it holds


@dataclass
class RemapPlan:
    outcomes: list[Outcome]
    labels: list[NewLabel]
    proposals: list[Proposal] = field(default_factory=list)

    def counts(self) -> dict:
        tally = {name: sum(o.outcome == name for o in self.outcomes) for name in OUTCOMES}
        lost = [o for o in self.outcomes if o.outcome == "lost"]
        kept_queries = {label.query_id for label in self.labels}
        return {
            "labels": len(self.outcomes),
            **{name.replace("-", "_"): n for name, n in tally.items()},
            "lost_relevant": sum(o.grade >= 1 for o in lost),
            "relocated": sum(o.relocated for o in self.outcomes),
            "new_labels": len(self.labels),
            "new_labels_merged": sum(len(label.parents) > 1 for label in self.labels),
            "proposals_queued": len({(p.query_id, p.chunk_id) for p in self.proposals}),
            "queries": len(kept_queries),
            "queries_waiting_review": len({p.query_id for p in self.proposals} - kept_queries),
            "queries_lost": len(
                {o.query_id for o in self.outcomes} - kept_queries - {p.query_id for p in self.proposals}
            ),
        }


def plan_remap(
    release: LoadedRelease,
    document: Callable[[str], tuple[str, str] | None],
    chunks_of: Callable[[str], list[Chunk]],
    policy: RemapPolicy,
    origins: dict[tuple[str, str], str] | None = None,
) -> RemapPlan:
    """Project ``release``'s qrels onto the chunks ``chunks_of(doc_id)`` of the documents ``document(doc_id)``
    (current text and its sha256, None when missing). Pure: reads nothing else, writes nothing. Raises when the
    release has no spans or a labelled document is missing."""
    if not release.has_spans:
        raise InputError(
            f"release {release.version} has no meta/chunks.jsonl (it was written before releases said where chunks "
            "lie in their documents): release the workspace it came from again, then remap that release",
            path=release.path,
        )
    labelled = sorted((q, c, g) for q, chunks in release.qrels.items() for c, g in chunks.items())
    unknown = sorted({c for _, c, _ in labelled if c not in release.chunk_spans})
    if unknown:
        raise InputError(f"meta/chunks.jsonl lacks {len(unknown)} labelled chunk ids, e.g. {unknown[0]!r}")
    wanted = sorted({release.chunk_spans[c]["doc_id"] for _, c, _ in labelled})
    texts = {doc_id: document(doc_id) for doc_id in wanted}
    missing = [doc_id for doc_id, found in texts.items() if found is None]
    if missing:
        raise InputError(
            f"the target workspace lacks {len(missing)} of the {len(wanted)} labelled documents (e.g. "
            f"{', '.join(repr(d) for d in missing[:3])}): chunk the same corpus into it first"
        )
    origins = origins or {}
    outcomes, inherited, proposals = [], {}, []
    for query_id, chunk_id, grade in labelled:
        outcome, targets = _project(release, query_id, chunk_id, grade, texts, chunks_of, policy)
        outcomes.append(outcome)
        if outcome.outcome == "ambiguous":
            proposals.extend(Proposal(query_id, to["chunk_id"], chunk_id, grade, to["coverage"]) for to in outcome.to)
            continue
        for chunk, evidence in targets:
            inherited.setdefault((query_id, chunk.chunk_id), []).append((outcome, chunk, evidence))
    standing = {key: max(o.grade for o, _, _ in sources) for key, sources in inherited.items()}
    # a pair another label places keeps it; it is still proposed when the ambiguous label says more (a higher grade)
    proposals = [p for p in proposals if standing.get((p.query_id, p.chunk_id), -1) < p.parent_grade]
    for outcome in outcomes:
        if outcome.outcome == "ambiguous":
            continue
        if len(outcome.to) > 1:
            outcome.outcome = "split"
        elif outcome.to:
            shared = len(inherited[(outcome.query_id, outcome.to[0]["chunk_id"])]) > 1
            outcome.outcome = "merged" if shared else "one-to-one"
    labels = [_merged(query_id, sources, origins) for (query_id, _), sources in sorted(inherited.items())]
    return RemapPlan(outcomes, labels, proposals)


def _project(release, query_id, chunk_id, grade, texts, chunks_of, policy) -> tuple[Outcome, list]:
    span = release.chunk_spans[chunk_id]
    evidence = release.evidence.get((query_id, chunk_id))
    anchor_text = evidence["text"] if evidence else release.corpus[chunk_id]["text"]
    anchor = (evidence["start"], evidence["end"]) if evidence else (span["start"], span["end"])
    outcome = Outcome(query_id, chunk_id, grade, "evidence" if evidence else "chunk")
    text, sha = texts[span["doc_id"]]
    holds = span.get("doc_sha256") in (None, sha) and text[anchor[0] : anchor[1]] == anchor_text
    edited = False
    if not holds:
        found = locate(anchor_text, text, near=anchor[0])
        if found is None:
            found, edited = _between_edges(anchor_text, text, anchor[0]), True
        if found is None:
            outcome.reason = f"the document's text changed and no longer holds the labelled {outcome.anchor} text"
            return outcome, []
        anchor, outcome.relocated = found, True
    chunks = chunks_of(span["doc_id"])
    shares = [(coverage(anchor, (c.start, c.end)), c) for c in chunks]
    targets = [(share, c) for share, c in shares if covers(anchor, (c.start, c.end), policy.min_coverage)]
    if not targets or edited:
        overlapping = sorted(((share, c) for share, c in shares if share > 0), key=lambda pair: -pair[0])
        if overlapping:
            outcome.outcome = "ambiguous"
            outcome.to = [{"chunk_id": c.chunk_id, "coverage": round(share, 4)} for share, c in overlapping]
            outcome.reason = (
                f"the text inside the labelled {outcome.anchor} span changed (its first and last words are still "
                "there): each chunk overlapping it is queued for review"
                if edited
                else f"no chunk covers {policy.min_coverage:g} of the {outcome.anchor} span (at most "
                f"{overlapping[0][0]:.2f}): the {len(overlapping)} chunks overlapping it are queued for review"
            )
            return outcome, []
        outcome.reason = f"no chunk overlaps the {outcome.anchor} span"
        return outcome, []
    outcome.to = [{"chunk_id": c.chunk_id, "coverage": round(share, 4)} for share, c in targets]
    kept = []
    for _, chunk in targets:
        inside = (max(anchor[0], chunk.start), min(anchor[1], chunk.end))
        quote = text[inside[0] : inside[1]] if evidence else None
        kept.append(
            (chunk, Span(doc_id=chunk.doc_id, start=inside[0], end=inside[1], doc_sha256=sha, text=quote))
            if evidence
            else (chunk, None)
        )
    return outcome, kept


def _between_edges(anchor_text: str, text: str, near: int) -> tuple[int, int] | None:
    """Where an anchor whose inside was edited lies now: from its first words to its last (each found nearest the
    old place), when both are still there in order and the span is within half to twice the old length."""
    edge = min(EDGE_CHARS, len(anchor_text) // 2)
    if edge < 8:
        return None
    head = locate(anchor_text[:edge], text, near=near)
    tail = locate(anchor_text[-edge:], text, near=near + len(anchor_text) - edge)
    if head is None or tail is None or tail[1] <= head[0]:
        return None
    length = tail[1] - head[0]
    return (head[0], tail[1]) if len(anchor_text) / 2 <= length <= 2 * len(anchor_text) else None


def _merged(query_id: str, sources: list, origins: dict) -> NewLabel:
    """One new label from the parent labels a new chunk inherits: the max grade, the origin of the label that
    gave it (human before synthetic before unverified on a tie), the evidence of that label."""

    def rank(item):
        outcome, _, _ = item
        return outcome.grade, ORIGIN_RANK.get(origins.get((outcome.query_id, outcome.chunk_id), UNKNOWN), 0)

    best, chunk, evidence = max(sources, key=rank)
    origin = origins.get((best.query_id, best.chunk_id), UNKNOWN)
    return NewLabel(query_id, chunk, best.grade, origin, sorted(o.chunk_id for o, _, _ in sources), evidence)


# the command's work ---------------------------------------------------------------------------------------------
@dataclass
class RemapSummary:
    parent: dict
    version: str
    path: str
    content_sha256: str
    policy: dict
    counts: dict
    lost: list[dict]
    outcomes: list[dict]

    def as_dict(self) -> dict:
        return asdict(self)


def parent_of(release: LoadedRelease) -> dict:
    """The parent release as a manifest records it: its workspace's directory name (when it lies in
    ``WORKSPACE/releases/VERSION``), its set name, version and content hash; never a path."""
    folder = release.path.resolve()
    workspace = folder.parent.parent.name if folder.parent.name == "releases" else None
    return {
        "workspace": workspace,
        "name": release.manifest.get("name"),
        "version": release.version,
        "content_sha256": release.manifest.get("content_sha256"),
    }


def remap_release(
    release: LoadedRelease,
    target: Workspace,
    version: str,
    policy: RemapPolicy,
    release_policy: ReleaseConfig | None = None,
    notes: str = "",
) -> RemapSummary:
    """Project ``release`` onto ``target``'s chunks, store the labels and queries there, and release ``version``
    of ``target`` recording the parent and the policy. Checks everything before writing anything."""
    parse_version(version)
    with target.exclusive("remap"):
        _refuse_same_workspace(release, target)
        if version in existing_versions(target) or (target.releases_dir / version).exists():
            raise InputError(f"release {version} already exists in {target.root} and releases are immutable")
        if not rows.has_live_chunks(target.db):
            raise InputError(
                "has no chunks: chunk the same corpus into it first (e.g. `testset-builder chunk SOURCE "
                "--workspace W2 --size 512`), then remap",
                path=target.root,
            )
        origins = qrel_origins(release)
        if not origins:
            raise InputError(
                "the release has no hf/judgments file saying where each label came from (human, synthetic, "
                "unverified), so its labels cannot be carried over as what they are",
                path=release.path,
            )
        plan = plan_remap(
            release,
            lambda doc_id: stored_corpus.live_document(target.db, doc_id),
            lambda doc_id: rows.live_chunks_of(target.db, doc_id),
            policy,
            origins,
        )
        parent = parent_of(release)
        _refuse_another_policy(target, plan, f"{parent['workspace'] or parent['name']}@{parent['version']}", policy)
        counts = plan.counts()
        if not plan.labels and plan.proposals:
            _store(target, release, plan, parent, policy.describe())  # kept for review, so nothing is lost
            raise InputError(
                f"no label of release {release.version} maps onto one chunk of {target.root.name} as it is "
                f"({counts['ambiguous']} ambiguous, {counts['lost']} lost): the {counts['proposals_queued']} chunks "
                "overlapping them are queued for review there; review them (`testset-builder serve`), then "
                "`release` that workspace, or remap again with a lower --min-coverage"
            )
        if not plan.labels:
            raise InputError(
                f"no label of release {release.version} survived the remap ({counts['lost']} lost; e.g. "
                f"{plan.outcomes[0].reason}): lower --min-coverage?"
            )
        _store(target, release, plan, parent, policy.describe())
        policy_used = _release_policy(release, release_policy)
        outcomes = [o.as_row() for o in plan.outcomes]
        origin = RemapOrigin(parent, policy.describe(), counts, outcomes)
        label = f"{parent['workspace'] or parent['name']}@{parent['version']}"
        summary: ReleaseSummary = write_release(
            target, version, policy_used, notes=notes or f"remapped from {label}", remapped=origin
        )
    return RemapSummary(
        parent,
        summary.version,
        summary.path,
        summary.content_sha256,
        policy.describe(),
        counts,
        [row for row in outcomes if row["outcome"] == "lost"],
        outcomes,
    )


def _refuse_another_policy(target: Workspace, plan: RemapPlan, label: str, policy: RemapPolicy) -> None:
    """A second remap of one parent into one workspace must use the same policy: its labels would otherwise sit
    beside the first one's (a chunk a stricter policy drops would keep the first remap's grade). The same remap
    again (after a crash, say) is fine: it stores nothing twice."""
    wanted = sorted({new.query_id for new in plan.labels})
    for query_id in sorted(rows.existing_query_ids(target.db, wanted)):
        metadata = rows.get_query(target.db, query_id).metadata
        stamped = "remap_policy" in metadata  # a query that got proposals only holds no label of that remap
        if metadata.get("remapped_from") == label and stamped and metadata["remap_policy"] != policy.describe():
            raise InputError(
                f"this workspace already holds the labels of {label} remapped with {metadata.get('remap_policy')}; "
                f"remapping it again with {policy.describe()} would mix the two: remap into a fresh workspace "
                "(chunk the corpus there), or use the same policy",
                path=target.root,
            )


def _refuse_same_workspace(release: LoadedRelease, target: Workspace) -> None:
    if target.releases_dir.resolve() in release.path.resolve().parents:
        raise InputError(
            "the release is the target workspace's own: remap projects a release onto another workspace holding "
            "the same corpus chunked differently (chunk it into a new workspace first)"
        )


def _release_policy(release: LoadedRelease, configured: ReleaseConfig | None) -> ReleaseConfig:
    """The target's release policy, releasing unverified proposals when the parent did (they stay marked)."""
    configured = configured or ReleaseConfig()
    parent_unverified = bool(release.manifest.get("policy", {}).get("include_unverified"))
    return configured.model_copy(update={"include_unverified": configured.include_unverified or parent_unverified})


def _store(target: Workspace, release: LoadedRelease, plan: RemapPlan, parent: dict, policy: dict) -> None:
    label = f"{parent['workspace'] or parent['name']}@{parent['version']}"
    by_query: dict[str, list[NewLabel]] = {p.query_id: [] for p in plan.proposals}
    for new in plan.labels:
        by_query.setdefault(new.query_id, []).append(new)
    queries = [_query(release, query_id, labels, label, policy) for query_id, labels in sorted(by_query.items())]
    judgments = [_judgment(new, parent, label) for new in plan.labels]
    best: dict[tuple[str, str], Proposal] = {}
    for proposal in plan.proposals:  # one item a pair: the parent label it holds most of
        key = (proposal.query_id, proposal.chunk_id)
        if key not in best or proposal.coverage > best[key].coverage:
            best[key] = proposal
    items = [
        review_store.QueuedItem(
            review_store.pair_item_id(p.query_id, p.chunk_id),
            "pair",
            p.query_id,
            p.chunk_id,
            round(REMAP_PRIORITY + p.coverage / 2, 6),
            f"remap from {label}: {p.coverage:.0%} of a grade-{p.parent_grade} label on {p.parent_chunk_id}",
            1,
        )
        for p in best.values()
    ]
    with target.transaction() as db:
        rows.put_queries_checked(db, queries)
        rows.add_judgments(db, judgments)
        review_store.enqueue(db, items, utc_timestamp())


def _query(release: LoadedRelease, query_id: str, labels: list[NewLabel], label: str, policy: dict) -> Query:
    meta = release.query_meta.get(query_id, {})
    source = meta.get("source_chunk_id")
    from_source = [new for new in labels if source in new.parents]
    new_source = max(from_source, key=lambda new: (new.grade, -len(new.parents)), default=None)
    return Query(
        query_id=query_id,
        text=release.queries[query_id],
        origin=QueryOrigin(meta.get("origin", "real")),
        style=meta.get("style"),
        source_chunk_id=new_source.chunk.chunk_id if new_source else None,
        metadata={
            "remapped_from": label,
            **({"remap_policy": policy} if labels else {}),  # a query with proposals only holds no remapped label
            **({"parent_source_chunk_id": source} if source else {}),
        },
    )


def _judgment(new: NewLabel, parent: dict, label: str) -> Judgment:
    key = f"{parent['content_sha256']}\x00{new.query_id}\x00{new.chunk.chunk_id}"
    if len(new.parents) > 1:
        merged = f"merged from {len(new.parents)} chunks ({', '.join(new.parents)}): the max grade"
    else:
        merged = f"from chunk {new.parents[0]}"
    common = dict(
        judgment_id="remap-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:24],
        query_id=new.query_id,
        chunk_id=new.chunk.chunk_id,
        grade=new.grade,
        rationale=f"remapped from release {label}, {merged}",
        evidence=new.evidence,
    )
    if new.origin == "synthetic-source":
        return Judgment(source=JudgmentSource.synthetic_source, status=JudgmentStatus.final, **common)
    if new.origin == "llm-unverified":
        return Judgment(source=JudgmentSource.llm, status=JudgmentStatus.pending, **common)
    return Judgment(source=JudgmentSource.human, status=JudgmentStatus.final, reviewer=f"remap:{label}", **common)
