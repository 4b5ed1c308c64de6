"""Writing a release: gather what the policy releases from the workspace, and write ``releases/<version>/``.

It holds ``hf/`` (the MTEB retrieval layout: configs ``corpus``, ``queries``, ``default`` = qrels, plus
``judgments`` with each qrel's origin), ``beir/``, ``qrels.trec``, ``meta/`` (each chunk's document span and the
sha256 of the document text it refers to, each query's origin and source, each qrel's evidence span when the
generator quoted one, and for a remapped release what became of each of its parent's labels: what ``remap`` and
clustered intervals read), ``manifest.json`` and the dataset card ``README.md``. Everything but the manifest's
``created_at`` is a function of the workspace's content, so two releases of the same state are byte-identical and
share a content hash. The directory is written under a
temporary name and renamed into place: a crash never leaves half a release. A version, once written, is never
overwritten. Nothing written names a path of this machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..._hashing import file_sha256 as sha256_file
from ..._version import __version__
from ...config import ReleaseConfig
from ...corpus.language import corpus_languages
from ...errors import InputError, UnknownIdError
from ...export.beir import beir_corpus_text, beir_qrels_text, beir_queries_text
from ...export.hf import dataset_card, write_hf
from ...export.trec import write_trec_qrels
from ...labels import audit
from ...labels.policy import (
    ORIGINS,
    ResolvedQrel,
    agreement,
    describe,
    resolve,
    resolved_failure_tags,
    unanswered_questions,
)  # fmt: skip
from ...metrics.diagnostics import Passages, diagnose
from ...records import Judgment, Query
from ...spans import locate
from ...store import audit as audit_store
from ...store import corpus as stored_corpus
from ...store import draws as draw_store
from ...store import estimates as estimate_store
from ...store import history, rows
from ...store import review as review_store
from ...store.workspace import Workspace, utc_timestamp
from ...tables import Qrels
from .estimated import ESTIMATES_FILE, estimate_counts, estimated_pairs, estimates_text
from .layout import CHUNKS_META, EVIDENCE_META, QUERIES_META, REMAP_META
from .logged import LOGS_META, PRODUCTION_RUN, logged_rows, production_run_text
from .refit import EstimatesRefit, refreshed_estimates, with_heldout
from .versions import existing_versions, parse_version


@dataclass
class ReleaseContent:
    corpus: list[dict]  # {_id, title, text}, sorted by id
    queries: list[dict]  # {_id, text}, sorted by id
    qrels: list[ResolvedQrel]
    query_records: dict[str, Query] = field(default_factory=dict)  # the released queries, with origin and lineage
    estimates: list[dict] = field(default_factory=list)  # the rows of estimates.jsonl (.estimated), when carried
    chunk_spans: list[dict] = field(default_factory=list)  # {_id, doc_id, start, end, doc_sha256}, sorted by id
    evidence: list[dict] = field(default_factory=list)  # {query_id, chunk_id, start, end, text}, sorted by pair
    logs: list[dict] = field(default_factory=list)  # meta/logs.jsonl's rows (.logged), for logged queries
    production: str = ""  # runs/production.trec: the live system's logged retrieval

    def qrels_table(self) -> Qrels:
        return Qrels.from_dict(as_dict(self.qrels))

    def canonical_bytes(self) -> dict[str, bytes]:
        """The BEIR files and the estimates, which are also what the content hash covers."""
        files = {
            "beir/corpus.jsonl": beir_corpus_text(self.corpus).encode("utf-8"),
            "beir/queries.jsonl": beir_queries_text(self.queries).encode("utf-8"),
            "beir/qrels/test.tsv": beir_qrels_text(self.qrels_table()).encode("utf-8"),
        }
        if self.estimates:
            files[ESTIMATES_FILE] = estimates_text(self.estimates).encode("utf-8")
        if self.chunk_spans:
            files[CHUNKS_META] = json_lines(self.chunk_spans).encode("utf-8")
            files[QUERIES_META] = json_lines(query_meta(self.query_records)).encode("utf-8")
        if self.evidence:
            files[EVIDENCE_META] = json_lines(self.evidence).encode("utf-8")
        if self.logs:
            files[LOGS_META] = json_lines(self.logs).encode("utf-8")
        if self.production:
            files[PRODUCTION_RUN] = self.production.encode("utf-8")
        return files

    def content_sha256(self) -> str:
        digest = hashlib.sha256()
        for name, data in sorted(self.canonical_bytes().items()):
            digest.update(f"{name}\n{len(data)}\n".encode())
            digest.update(data)
        return digest.hexdigest()


def json_lines(records: list[dict]) -> str:
    """Canonical JSON lines: keys sorted, compact, in the order given."""
    return "".join(json.dumps(r, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records)


def query_meta(records: dict[str, Query]) -> list[dict]:
    """Each released query's origin, style, and for a synthetic question its source chunk and document."""
    meta = []
    for query_id in sorted(records):
        query = records[query_id]
        row = {"_id": query_id, "origin": query.origin.value, "style": query.style}
        if query.source_chunk_id:
            row["source_chunk_id"] = query.source_chunk_id
        meta.append({k: v for k, v in row.items() if v is not None})
    return meta


def as_dict(qrels: list[ResolvedQrel]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for q in qrels:
        out.setdefault(q.query_id, {})[q.chunk_id] = q.grade
    return out


def gather(workspace: Workspace, policy: ReleaseConfig) -> tuple[ReleaseContent, list[Judgment]]:
    """What a release of the workspace's current state holds: every live chunk (plus any removed one a qrel still
    names), the queries that have qrels, the resolved qrels and, when the policy carries estimates, the estimated
    pairs (:mod:`.estimated`) and the queries they cover."""
    db = workspace.db
    dropped = review_store.dropped_queries(db)  # reviewers dropped or edited these questions away
    if policy.hold_doubted:  # and these wait for a reviewer: their source label is in doubt
        dropped |= {q for q, answered in review_store.doubted_questions(db).items() if not answered}
    held = unanswered_questions(db, policy.hold_unreviewed)  # only questions a person answered go out
    dropped |= held
    judgments = [j for j in rows.iter_judgments(db) if j.query_id not in dropped]
    qrels = resolve(judgments, policy)
    if not qrels:
        why = (
            f"{len(held)} synthetic questions no reviewer kept are held back (release.hold_unreviewed): review them "
            "(`serve`, or `review` in a terminal, after `run`; else with --questions), or release them unchecked "
            "(`release --release-unreviewed`, or release.hold_unreviewed: false in the config)"
            if held
            else "synthesize questions, review proposals, or pass --include-unverified"
        )
        raise InputError(f"nothing to release: no judgment resolves into a qrel under this policy ({why})")
    named = {q.chunk_id for q in qrels}
    released = [row for row in stored_corpus.iter_release_corpus(db) if not row[3] or row[0] in named]
    corpus = [{"_id": chunk_id, "title": title, "text": text} for chunk_id, title, text, *_ in released]
    spans = [
        {"_id": chunk_id, "doc_id": doc_id, "start": start, "end": end, **({"doc_sha256": sha} if sha else {})}
        for chunk_id, _, _, _, doc_id, start, end, sha in released
    ]
    evidence = qrel_evidence(qrels, judgments, {row[0]: row for row in released})
    estimated = []
    if policy.estimates:
        live = {d["_id"] for d in corpus}
        estimated = with_heldout(
            estimated_pairs(
                estimate_store.estimates(db),
                draw_store.pair_draws(db),
                qrels,
                lambda q: q not in dropped,
                live.__contains__,
            )
        )
    query_ids = sorted({q.query_id for q in qrels} | {row["query-id"] for row in estimated})
    records = {query_id: rows.get_query(db, query_id) for query_id in query_ids}
    queries = [{"_id": query.query_id, "text": query.text} for query in records.values()]
    logs = logged_rows(db, query_ids, resolved_failure_tags(db, policy.adjudicator))
    production = production_run_text(db, query_ids)
    return ReleaseContent(corpus, queries, qrels, records, estimated, spans, evidence, logs, production), judgments


def qrel_evidence(qrels: list[ResolvedQrel], judgments: list[Judgment], chunks: dict[str, tuple]) -> list[dict]:
    """Each released qrel's evidence span (from the latest of its pair's judgments that has one), in the document
    offsets of the released chunk: kept as recorded when it lies inside the chunk's span of the same document
    text, else looked for again inside the chunk's text (the chunk may have been revived in a changed text); a
    quote the chunk no longer holds is left out."""
    latest: dict[tuple[str, str], Judgment] = {}
    for judgment in judgments:  # in (created_at, id) order: the last one wins
        if judgment.evidence is not None:
            latest[(judgment.query_id, judgment.chunk_id)] = judgment
    rows = []
    for qrel in qrels:
        judgment = latest.get((qrel.query_id, qrel.chunk_id))
        if judgment is None:
            continue
        _, _, text, _, _, start, end, sha = chunks[qrel.chunk_id]
        span = judgment.evidence
        quote = span.text
        holds = span.doc_sha256 == sha and start <= span.start <= span.end <= end
        if holds and (quote is None or text[span.start - start : span.end - start] == quote):
            found = (span.start - start, span.end - start)
        else:
            found = locate(quote, text) if quote else None
        if found is not None:
            rows.append(
                {
                    "query_id": qrel.query_id,
                    "chunk_id": qrel.chunk_id,
                    "start": start + found[0],
                    "end": start + found[1],
                    "text": text[found[0] : found[1]],
                }
            )
    return rows


@dataclass
class RemapOrigin:
    """What a remapped release records of where its labels came from: the parent release (workspace name,
    version, content sha256; never a path), the remap policy, the counts, and each parent label's outcome
    (written to ``meta/remap.jsonl``; hashed in the manifest, outside the content hash, so a later release of the
    same labels compares equal)."""

    parent: dict
    policy: dict
    counts: dict
    outcomes: list[dict]

    def manifest_entry(self) -> dict:
        return {"parent": self.parent, "policy": self.policy, "counts": self.counts, "outcomes": REMAP_META}


@dataclass
class ReleaseSummary:
    version: str
    path: str
    parent_version: str | None
    content_sha256: str
    same_as_parent: bool
    counts: dict
    estimates_refit: dict | None = None  # what the release did to its estimates first (.refit.EstimatesRefit)
    adjudication: dict | None = None  # how its disagreements were settled (policy.settlement)

    def as_dict(self) -> dict:
        return asdict(self)


def lineage(
    workspace: Workspace, content: ReleaseContent, judgments: list[Judgment], policy: ReleaseConfig | None = None
) -> dict:
    """Where the release came from: documents, chunker configs, models (name and provider identity: a local
    model's carries its file's sha256), prompts by hash, reviewers and their agreement."""
    released = {(q.query_id, q.chunk_id) for q in content.qrels}
    used = [j for j in judgments if (j.query_id, j.chunk_id) in released]
    made_by = [j.lineage for j in used if j.lineage] + [q.lineage for q in content.query_records.values()]
    made_by = [item for item in made_by if item is not None]
    models = sorted({(item.provider, item.model) for item in made_by})
    prompts = sorted({(item.prompt_name, item.prompt_sha256) for item in made_by if item.prompt_name})
    review = agreement(judgments, policy, released)
    kappas = [pair["weighted_kappa"] for pair in review["pairwise"] if pair["weighted_kappa"] is not None]
    documents = hashlib.sha256()
    for doc_id, sha in stored_corpus.chunked_document_hashes(workspace.db):
        documents.update(f"{doc_id}\x00{sha}\n".encode())
    return {
        "documents_sha256": documents.hexdigest(),
        "chunks": len(content.corpus),
        "chunker_configs": stored_corpus.chunker_configs(workspace.db),
        "models": [{"provider": p, "model": m} for p, m in models],
        "prompts": [{"name": n, "sha256": s} for n, s in prompts],
        "reviewers": review["reviewers"],
        "review_agreement": {  # on the released pairs humans graded
            "pairs_reviewed": review["items"],
            "krippendorff_alpha_ordinal": _rounded(review["krippendorff_alpha"]),
            "mean_pairwise_weighted_kappa": _rounded(sum(kappas) / len(kappas) if kappas else None),
            "llm_vs_human_weighted_kappa": _rounded(review["llm_vs_human"]["weighted_kappa"]),
            "llm_vs_human_pairs": review["llm_vs_human"]["items"],
        },
        "adjudication": review["adjudication"],  # how the released pairs reviewers disagreed on were settled
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def write_release(
    workspace: Workspace,
    version: str,
    policy: ReleaseConfig | None = None,
    *,
    notes: str = "",
    parent: str | None = None,
    remapped: RemapOrigin | None = None,
) -> ReleaseSummary:
    """Write ``releases/<version>/`` and record it; refuses a version that exists (releases are immutable). The
    dataset card's name and license come from the policy (the config's ``release:`` section); ``remapped`` says
    which release the labels were projected from (``remap``). Estimates that verdicts came after are refitted first
    (:func:`.refit.refreshed_estimates`)."""
    policy = policy or ReleaseConfig()
    with workspace.exclusive("release"):
        return _write_release(workspace, version, policy, notes, parent, remapped)


def release_if_changed(
    workspace: Workspace,
    policy: ReleaseConfig | None = None,
    bump: str = "minor",
    *,
    notes: str = "",
    parent: str | None = None,
) -> tuple[ReleaseSummary | None, str]:
    """Release the next version (the latest, bumped) when the workspace's content, its estimates refitted first,
    differs from the latest release's; else nothing. Returns the new release's summary (or None) and the version
    that holds the content."""
    from .versions import next_version

    policy = policy or ReleaseConfig()
    with workspace.exclusive("release"):
        refit = _estimates_refit(workspace, policy)
        versions = existing_versions(workspace)
        if versions:
            content, _ = gather(workspace, policy)
            if history.release_content_sha256(workspace.db, versions[-1]) == content.content_sha256():
                return None, versions[-1]
        summary = _write_release(workspace, next_version(versions, bump), policy, notes, parent, refit=refit)
    return summary, summary.version


def _estimates_refit(workspace: Workspace, policy: ReleaseConfig) -> EstimatesRefit | None:
    """The estimates refitted where verdicts came after them, when the release carries estimates."""
    return refreshed_estimates(workspace) if policy.estimates else None


def _write_release(
    workspace: Workspace,
    version: str,
    policy: ReleaseConfig,
    notes: str,
    parent: str | None,
    remapped: RemapOrigin | None = None,
    refit: EstimatesRefit | None = None,
) -> ReleaseSummary:
    """Write the release; its estimates refitted first (:func:`_estimates_refit`) unless the caller did so and
    passes what it found as ``refit``."""
    key = parse_version(version)
    target = workspace.releases_dir / version
    versions = existing_versions(workspace)
    _clear_partials(workspace)
    if version not in versions and (target / "manifest.json").is_file():
        return _adopt(workspace, target)
    if version in versions or target.exists():
        raise InputError(
            f"release {version} already exists and releases are immutable; release a new version "
            "(e.g. a higher patch number)"
        )
    if parent is not None and parent not in versions:
        raise UnknownIdError("release", parent)
    if parent is None:
        older = [v for v in versions if parse_version(v) < key]
        parent = older[-1] if older else None
    refit = refit or _estimates_refit(workspace, policy)
    content, judgments = gather(workspace, policy)
    content_sha = content.content_sha256()
    parent_sha = history.release_content_sha256(workspace.db, parent) if parent else None
    same_as_parent = parent_sha == content_sha

    workspace.releases_dir.mkdir(parents=True, exist_ok=True)
    partial = workspace.releases_dir / f".partial-{version}-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        for relative, data in content.canonical_bytes().items():
            (partial / relative).parent.mkdir(parents=True, exist_ok=True)
            (partial / relative).write_bytes(data)
        if remapped is not None:
            (partial / REMAP_META).parent.mkdir(parents=True, exist_ok=True)
            (partial / REMAP_META).write_bytes(json_lines(remapped.outcomes).encode("utf-8"))
        write_hf(partial, content.corpus, content.queries, content.qrels, content_sha)
        write_trec_qrels(content.qrels_table(), partial / "qrels.trec")
        files = {str(p.relative_to(partial)): sha256_file(p) for p in sorted(partial.rglob("*")) if p.is_file()}
        manifest = _manifest(workspace, version, parent, same_as_parent, content, judgments, files, policy, notes)
        if refit is not None:
            manifest["estimates_refit"] = refit.as_dict()
        if remapped is not None:
            manifest["remap"] = remapped.manifest_entry()
        (partial / "manifest.json").write_text(
            json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        (partial / "README.md").write_text(dataset_card(manifest["name"], manifest, policy.license), encoding="utf-8")
        os.rename(partial, target)  # atomic: the version appears whole or not at all
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    with workspace.transaction() as db:
        history.record_release(db, version, parent, content_sha, manifest)
    refitted = None if refit is None else refit.as_dict()
    return ReleaseSummary(
        version, str(target), parent, content_sha, same_as_parent, manifest["counts"], refitted,
        manifest["lineage"].get("adjudication"),
    )  # fmt: skip


def _clear_partials(workspace: Workspace) -> None:
    """Remove what killed releases left (``.partial-*``): under the workspace's hold no other release is being
    written, so every partial directory is an orphan."""
    if workspace.releases_dir.is_dir():
        for partial in workspace.releases_dir.glob(".partial-*"):
            shutil.rmtree(partial, ignore_errors=True)


def _adopt(workspace: Workspace, target: Path) -> ReleaseSummary:
    """A release directory written whole (it was renamed into place) but not recorded, because the process died
    in between: check every file against its manifest and record it, so the version completes as asked."""
    from .reader import load_release

    manifest = load_release(target).manifest  # raises if any file differs from its manifest hash
    with workspace.transaction() as db:
        history.record_release(
            db, manifest["version"], manifest["parent_version"], manifest["content_sha256"], manifest
        )
    return ReleaseSummary(
        manifest["version"], str(target), manifest["parent_version"], manifest["content_sha256"],
        manifest["same_as_parent"], manifest["counts"], manifest.get("estimates_refit"),  # older manifests lack it
        manifest["lineage"].get("adjudication"),
    )  # fmt: skip


def checked_by_human(workspace, content, hold: bool | None) -> dict:
    """How many released labels of each origin a human checked: every human label; a synthetic question's source
    label when a reviewer kept the question (as it stands, doubted or not) or wrote it (an edit); never an
    unverified LLM proposal. And the doubted questions: how many were queued, answered, and held back unanswered;
    and how many questions ``hold`` (the policy's ``hold_unreviewed``) held back."""
    kept = review_store.kept_queries(workspace.db) | review_store.edited_questions(workspace.db)
    doubted = review_store.doubted_questions(workspace.db)
    by_origin = {o: 0 for o in ORIGINS}
    for qrel in content.qrels:
        by_origin[qrel.origin] += qrel.origin == "human" or (
            qrel.origin == "synthetic-source" and qrel.query_id in kept
        )
    released = {q.query_id for q in content.qrels}
    synthetic = sum(q.origin == "synthetic-source" for q in content.qrels)
    return {
        "qrels_by_origin": by_origin,
        "doubted_questions": len(doubted),
        "doubted_answered": sum(doubted.values()),
        "doubted_held_back": sum(not answered and q not in released for q, answered in doubted.items()),
        "unreviewed_held_back": len(unanswered_questions(workspace.db, hold) - released),
        "synthetic_audit": synthetic_audit(workspace, synthetic - by_origin["synthetic-source"]).as_dict(),
    }


def synthetic_audit(workspace, unchecked: int):
    """The share of wrong labels among the ``unchecked`` synthetic ones, from the audit draws a reviewer answered
    (:mod:`~testset_builder.labels.audit`): a dropped or edited question's label was wrong, a kept one's right."""
    kept, dropped = review_store.kept_queries(workspace.db), review_store.dropped_queries(workspace.db)
    answered = [
        (query_id in dropped, probability)
        for query_id, (probability, drawn) in sorted(audit_store.recorded(workspace.db).items())
        if drawn and (query_id in kept or query_id in dropped)
    ]
    return audit.estimate(unchecked, [wrong for wrong, _ in answered], [p for _, p in answered])


def question_profile(content: ReleaseContent) -> dict:
    """What the card says of the questions before any run is scored (:mod:`~...metrics.diagnostics`): the relevant
    chunks each needs, the synthetic questions that leak their source's rare words or have other answers, and the
    documents without a question."""
    meta = {row.pop("_id"): row for row in query_meta(content.query_records)}
    passages = Passages({d["_id"]: d for d in content.corpus})
    found = diagnose(
        content.qrels_table(), [], [], queries={q["_id"]: q["text"] for q in content.queries}, meta=meta,
        passages=passages, documents={s["_id"]: s["doc_id"] for s in content.chunk_spans} or None,
        estimates=content.estimates,
    )  # fmt: skip
    return found.profile()


def _manifest(workspace, version, parent, same_as_parent, content, judgments, files, policy, notes) -> dict:
    return {
        "name": policy.name or workspace.root.resolve().name,
        "version": version,
        "parent_version": parent,
        "same_as_parent": same_as_parent,
        "created_at": utc_timestamp(),
        "content_sha256": content.content_sha256(),
        "files": files,
        "counts": {
            "corpus": len(content.corpus),
            "queries": len(content.queries),
            "queries_by_origin": dict(sorted(Counter(q.origin.value for q in content.query_records.values()).items())),
            "qrels": len(content.qrels),
            "qrels_by_origin": {o: sum(q.origin == o for q in content.qrels) for o in ORIGINS},
            "qrels_by_grade": {str(g): n for g, n in sorted(Counter(q.grade for q in content.qrels).items())},
            **({"estimates": estimate_counts(content.estimates)} if content.estimates else {}),
            "checked_by_human": checked_by_human(workspace, content, policy.hold_unreviewed),
            "questions": question_profile(content),
        },
        "languages": corpus_languages([d["text"] for d in content.corpus]),
        "policy": describe(policy),
        "lineage": lineage(workspace, content, judgments, policy),
        "notes": notes,
        "testset_builder_version": __version__,
    }
