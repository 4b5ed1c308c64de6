"""Release: resolve judgments into qrels by a stated policy, and write an immutable, versioned labelled set.

Policy (:class:`ReleasePolicy`), per (query, chunk) pair:
1. a human verdict wins: each reviewer's latest verdict that nothing supersedes is a vote (a rejection is grade 0);
   the majority grade is released; a tie goes to the adjudicator's vote when the adjudicator voted, else to the
   most recent verdict;
2. otherwise a synthetic question's source chunk (and its duplicate twins) is grade 2;
3. otherwise unverified LLM proposals are left out, unless ``include_unverified``: then the latest one is released
   and marked ``llm-unverified`` (in the manifest's counts and in the ``judgments`` config).

``releases/<version>/`` holds: ``hf/`` (parquet for the MTEB retrieval layout: configs ``corpus``, ``queries`` and
``default`` = qrels with ``query-id``, ``corpus-id``, ``score``; plus ``judgments`` with each qrel's origin),
``beir/`` (corpus.jsonl, queries.jsonl, qrels/test.tsv), ``qrels.trec``, ``manifest.json`` and the dataset card
``README.md``. Everything but the manifest's ``created_at`` is a function of the workspace's content, so two releases
of the same state are byte-identical and share a content hash. The directory is written under a temporary name and
renamed into place: a crash never leaves half a release. A version, once written, is never overwritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import __version__
from ..errors import InputError, UnknownIdError
from ..records import Judgment, JudgmentSource, JudgmentStatus, Query
from ..store import rows
from ..store.workspace import Workspace, utc_timestamp

SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?$")
ORIGINS = ("human", "synthetic-source", "llm-unverified")


def parse_version(version: str) -> tuple:
    match = SEMVER.match(version)
    if not match:
        raise InputError(f"version {version!r} is not semantic (MAJOR.MINOR.PATCH, e.g. 1.0.0)")
    major, minor, patch, pre = match.groups()
    # a pre-release sorts before its release: 1.0.0-rc1 < 1.0.0
    return (int(major), int(minor), int(patch), 0 if pre else 1, pre or "")


@dataclass(frozen=True)
class ReleasePolicy:
    include_unverified: bool = False
    adjudicator: str | None = None

    def describe(self) -> dict:
        return {
            "rules": [
                "human verdict wins (majority of each reviewer's latest verdict; ties to the adjudicator, else the "
                "latest)",
                "synthetic source chunks and their duplicate twins count as grade 2",
                "unverified LLM proposals "
                + ("included, marked llm-unverified" if self.include_unverified else "excluded"),
            ],
            "include_unverified": self.include_unverified,
            "adjudicator": self.adjudicator,
        }


@dataclass(frozen=True)
class ResolvedQrel:
    query_id: str
    chunk_id: str
    grade: int
    origin: str


def _human_grade(verdicts: list[Judgment], adjudicator: str | None) -> int:
    latest: dict[str, Judgment] = {}
    for verdict in sorted(verdicts, key=lambda j: (j.created_at, j.judgment_id)):
        latest[verdict.reviewer or ""] = verdict
    votes = {reviewer: 0 if j.status is JudgmentStatus.rejected else j.grade for reviewer, j in latest.items()}
    tally = Counter(votes.values())
    best = max(tally.values())
    tied = [grade for grade, n in tally.items() if n == best]
    if len(tied) == 1:
        return tied[0]
    if adjudicator in votes and votes[adjudicator] in tied:
        return votes[adjudicator]
    newest = max(latest.values(), key=lambda j: (j.created_at, j.judgment_id))
    return 0 if newest.status is JudgmentStatus.rejected else newest.grade


def resolve(judgments: list[Judgment], policy: ReleasePolicy = ReleasePolicy()) -> list[ResolvedQrel]:
    """Qrels from an append-only judgment log, by ``policy``; sorted by query then chunk id."""
    superseded = {j.supersedes for j in judgments if j.supersedes}
    by_pair: dict[tuple[str, str], list[Judgment]] = {}
    for judgment in judgments:
        if judgment.judgment_id not in superseded:
            by_pair.setdefault((judgment.query_id, judgment.chunk_id), []).append(judgment)
    resolved = []
    for (query_id, chunk_id), alive in sorted(by_pair.items()):
        human = [j for j in alive if j.source is JudgmentSource.human]
        if human:
            resolved.append(ResolvedQrel(query_id, chunk_id, _human_grade(human, policy.adjudicator), "human"))
        elif any(j.source is JudgmentSource.synthetic_source for j in alive):
            resolved.append(ResolvedQrel(query_id, chunk_id, 2, "synthetic-source"))
        elif policy.include_unverified:
            latest = max(
                (j for j in alive if j.source is JudgmentSource.llm), key=lambda j: (j.created_at, j.judgment_id)
            )
            resolved.append(ResolvedQrel(query_id, chunk_id, latest.grade, "llm-unverified"))
    return resolved


@dataclass
class ReleaseContent:
    corpus: list[dict]  # {_id, title, text}, sorted by id
    queries: list[dict]  # {_id, text}, sorted by id
    qrels: list[ResolvedQrel]
    query_records: dict[str, Query] = field(default_factory=dict)  # the released queries, with origin and lineage

    def canonical_bytes(self) -> dict[str, bytes]:
        """The BEIR files, which are also what the content hash covers."""
        return {
            "beir/corpus.jsonl": "".join(_line(d) for d in self.corpus).encode("utf-8"),
            "beir/queries.jsonl": "".join(_line(q) for q in self.queries).encode("utf-8"),
            "beir/qrels/test.tsv": (
                "query-id\tcorpus-id\tscore\n" + "".join(f"{q.query_id}\t{q.chunk_id}\t{q.grade}\n" for q in self.qrels)
            ).encode("utf-8"),
        }

    def content_sha256(self) -> str:
        digest = hashlib.sha256()
        for name, data in sorted(self.canonical_bytes().items()):
            digest.update(f"{name}\n{len(data)}\n".encode())
            digest.update(data)
        return digest.hexdigest()


def _line(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False, sort_keys=True, separators=(",", ":")) + "\n"


def gather(workspace: Workspace, policy: ReleasePolicy) -> tuple[ReleaseContent, list[Judgment]]:
    """What a release of the workspace's current state holds: every live chunk (plus any removed one a qrel still
    names), the queries that have qrels, and the resolved qrels."""
    judgments = list(rows.iter_judgments(workspace.db))
    qrels = resolve(judgments, policy)
    if not qrels:
        raise InputError(
            "nothing to release: no judgment resolves into a qrel under this policy "
            "(synthesize questions, review proposals, or pass --include-unverified)"
        )
    named = {q.chunk_id for q in qrels}
    corpus = []
    for chunk_id, title, text, removed in workspace.db.execute(
        "SELECT c.chunk_id, d.title, c.text, c.removed_at FROM chunks c JOIN documents d USING (doc_id) ORDER BY "
        "c.chunk_id"
    ):
        if removed is None or chunk_id in named:
            corpus.append({"_id": chunk_id, "title": title, "text": text})
    records = {query_id: rows.get_query(workspace.db, query_id) for query_id in sorted({q.query_id for q in qrels})}
    queries = [{"_id": query.query_id, "text": query.text} for query in records.values()]
    return ReleaseContent(corpus, queries, qrels, records), judgments


@dataclass
class ReleaseSummary:
    version: str
    path: str
    parent_version: str | None
    content_sha256: str
    same_as_parent: bool
    counts: dict

    def as_dict(self) -> dict:
        return asdict(self)


def existing_versions(workspace: Workspace) -> list[str]:
    return sorted((r[0] for r in workspace.db.execute("SELECT version FROM releases")), key=parse_version)


def _lineage(workspace: Workspace, content: ReleaseContent, judgments: list[Judgment]) -> dict:
    from ..metrics.agreement import cohen_kappa

    released = {(q.query_id, q.chunk_id) for q in content.qrels}
    used = [j for j in judgments if (j.query_id, j.chunk_id) in released]
    lineages = [j.lineage for j in used if j.lineage] + [q.lineage for q in content.query_records.values()]
    lineages = [l for l in lineages if l is not None]
    models = sorted({(l.provider, l.model) for l in lineages})
    prompts = sorted({(l.prompt_name, l.prompt_sha256) for l in lineages if l.prompt_name})
    human = [j for j in used if j.source is JudgmentSource.human]
    reviewers = sorted({j.reviewer for j in human if j.reviewer})
    by_reviewer = {
        r: {
            (j.query_id, j.chunk_id): j.grade >= 1 for j in sorted(human, key=lambda j: j.created_at) if j.reviewer == r
        }
        for r in reviewers
    }
    kappas = []
    for i, a in enumerate(reviewers):
        for b in reviewers[i + 1 :]:
            shared = sorted(by_reviewer[a].keys() & by_reviewer[b].keys())
            kappa = (
                cohen_kappa([by_reviewer[a][p] for p in shared], [by_reviewer[b][p] for p in shared])
                if shared
                else None
            )
            if kappa is not None:
                kappas.append(kappa)
    configs = sorted(
        {
            r[0]
            for r in workspace.db.execute("SELECT DISTINCT config_sha256 FROM chunks WHERE config_sha256 IS NOT NULL")
        }
    )
    documents = hashlib.sha256()
    for doc_id, sha in workspace.db.execute(
        "SELECT doc_id, content_sha256 FROM documents WHERE doc_id IN (SELECT DISTINCT doc_id FROM chunks) ORDER BY "
        "doc_id"
    ):
        documents.update(f"{doc_id}\x00{sha}\n".encode())
    return {
        "documents_sha256": documents.hexdigest(),
        "chunks": len(content.corpus),
        "chunker_configs": configs,
        "models": [{"provider": p, "model": m} for p, m in models],
        "prompts": [{"name": n, "sha256": s} for n, s in prompts],
        "reviewers": reviewers,
        "reviewer_agreement_kappa": round(sum(kappas) / len(kappas), 4) if kappas else None,
    }


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_release(
    workspace: Workspace,
    version: str,
    policy: ReleasePolicy = ReleasePolicy(),
    *,
    notes: str = "",
    parent: str | None = None,
    name: str | None = None,
    license_id: str = "other",
) -> ReleaseSummary:
    """Write ``releases/<version>/`` and record it; refuses a version that exists (releases are immutable)."""
    from ..export.hf import dataset_card, write_hf
    from ..export.trec import write_trec_qrels
    from ..tables import Qrels

    key = parse_version(version)
    target = workspace.releases_dir / version
    versions = existing_versions(workspace)
    if version in versions or target.exists():
        raise InputError(
            f"release {version} already exists and releases are immutable; release a new version (e.g. a higher "
            "patch number)"
        )
    if parent is not None and parent not in versions:
        raise UnknownIdError("release", parent)
    if parent is None:
        older = [v for v in versions if parse_version(v) < key]
        parent = older[-1] if older else None
    content, judgments = gather(workspace, policy)
    content_sha = content.content_sha256()
    parent_sha = (
        workspace.db.execute("SELECT content_sha256 FROM releases WHERE version = ?", (parent,)).fetchone()
        if parent
        else None
    )
    same_as_parent = bool(parent_sha and parent_sha[0] == content_sha)

    workspace.releases_dir.mkdir(parents=True, exist_ok=True)
    partial = workspace.releases_dir / f".partial-{version}-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        for relative, data in content.canonical_bytes().items():
            (partial / relative).parent.mkdir(parents=True, exist_ok=True)
            (partial / relative).write_bytes(data)
        write_hf(partial, content.corpus, content.queries, content.qrels)
        write_trec_qrels(Qrels.from_dict(_as_dict(content.qrels)), partial / "qrels.trec")
        files = {str(p.relative_to(partial)): _sha256_file(p) for p in sorted(partial.rglob("*")) if p.is_file()}
        manifest = {
            "name": name or workspace.root.resolve().name,
            "version": version,
            "parent_version": parent,
            "same_as_parent": same_as_parent,
            "created_at": utc_timestamp(),
            "content_sha256": content_sha,
            "files": files,
            "counts": {
                "corpus": len(content.corpus),
                "queries": len(content.queries),
                "queries_by_origin": dict(
                    sorted(Counter(q.origin.value for q in content.query_records.values()).items())
                ),
                "qrels": len(content.qrels),
                "qrels_by_origin": {o: sum(q.origin == o for q in content.qrels) for o in ORIGINS},
                "qrels_by_grade": {str(g): n for g, n in sorted(Counter(q.grade for q in content.qrels).items())},
            },
            "policy": policy.describe(),
            "lineage": _lineage(workspace, content, judgments),
            "notes": notes,
            "testset_builder_version": __version__,
        }
        (partial / "manifest.json").write_text(
            json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        (partial / "README.md").write_text(dataset_card(manifest["name"], manifest, license_id), encoding="utf-8")
        os.rename(partial, target)  # atomic: the version appears whole or not at all
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    with workspace.transaction() as db:
        db.execute(
            "INSERT INTO releases (version, parent_version, content_sha256, manifest, created_at) VALUES (?, ?, ?, "
            "?, ?)",
            (version, parent, content_sha, json.dumps(manifest), manifest["created_at"]),
        )
    return ReleaseSummary(version, str(target), parent, content_sha, same_as_parent, manifest["counts"])


def _as_dict(qrels: list[ResolvedQrel]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for q in qrels:
        out.setdefault(q.query_id, {})[q.chunk_id] = q.grade
    return out


@dataclass
class LoadedRelease:
    path: Path
    manifest: dict
    corpus: dict[str, dict]  # _id -> {"title", "text"}
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]

    @property
    def version(self) -> str:
        return self.manifest["version"]

    def qrels_table(self):
        from ..tables import Qrels

        return Qrels.from_dict(self.qrels)


def load_release(path: str | Path, verify: bool = True) -> LoadedRelease:
    """Read a release directory; with ``verify``, every file must match the sha256 its manifest lists."""
    from ..export.beir import read_beir_qrels

    path = Path(path)
    manifest_path = path / "manifest.json"
    if not manifest_path.exists():
        raise InputError("not a release directory (no manifest.json)", path=path)
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    if verify:
        for relative, expected in manifest["files"].items():
            file = path / relative
            if not file.exists() or _sha256_file(file) != expected:
                raise InputError(
                    f"{relative} does not match the sha256 in manifest.json: the release was modified", path=path
                )
    corpus = {}
    for line in (path / "beir" / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        corpus[record["_id"]] = {"title": record.get("title", ""), "text": record["text"]}
    queries = {}
    for line in (path / "beir" / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        queries[record["_id"]] = record["text"]
    return LoadedRelease(
        path, manifest, corpus, queries, read_beir_qrels(path / "beir" / "qrels" / "test.tsv").to_dict()
    )


def next_version(versions: list[str], bump: str) -> str:
    """The version after the highest of ``versions`` (0.0.0 when none) with its ``bump`` part raised."""
    major, minor, patch = parse_version(versions[-1])[:3] if versions else (0, 0, 0)
    if bump == "major":
        return f"{major + 1}.0.0"
    if bump == "minor":
        return f"{major}.{minor + 1}.0"
    if bump == "patch":
        return f"{major}.{minor}.{patch + 1}"
    raise InputError(f"--bump takes major, minor or patch, not {bump!r}")


def release_dir(workspace_root: str | Path, version: str) -> Path:
    """``releases/<version>`` of a workspace; ``latest`` is the highest version released."""
    if version == "latest":
        released = sorted(
            (
                p.name
                for p in (Path(workspace_root) / "releases").glob("*")
                if (p / "manifest.json").exists() and SEMVER.match(p.name)
            ),
            key=parse_version,
        )
        if not released:
            raise UnknownIdError("release", f"latest (no release in {workspace_root})")
        version = released[-1]
    path = Path(workspace_root) / "releases" / version
    if not (path / "manifest.json").exists():
        raise UnknownIdError("release", f"{version} (no {path})")
    return path


@dataclass
class ReleaseDiff:
    old: str
    new: str
    queries_added: list[str] = field(default_factory=list)
    queries_removed: list[str] = field(default_factory=list)
    queries_changed: list[str] = field(default_factory=list)  # same id, new text
    qrels_added: list[tuple[str, str, int]] = field(default_factory=list)
    qrels_removed: list[tuple[str, str, int]] = field(default_factory=list)
    qrels_regraded: list[tuple[str, str, int, int]] = field(default_factory=list)
    corpus_added: int = 0
    corpus_removed: int = 0

    @property
    def unchanged(self) -> bool:
        return not any(
            (
                self.queries_added,
                self.queries_removed,
                self.queries_changed,
                self.qrels_added,
                self.qrels_removed,
                self.qrels_regraded,
                self.corpus_added,
                self.corpus_removed,
            )
        )

    def as_dict(self) -> dict:
        return {**asdict(self), "unchanged": self.unchanged}


def diff_releases(old: LoadedRelease, new: LoadedRelease) -> ReleaseDiff:
    result = ReleaseDiff(old.version, new.version)
    result.queries_added = sorted(new.queries.keys() - old.queries.keys())
    result.queries_removed = sorted(old.queries.keys() - new.queries.keys())
    result.queries_changed = sorted(
        q for q in old.queries.keys() & new.queries.keys() if old.queries[q] != new.queries[q]
    )
    before = {(q, c): g for q, chunks in old.qrels.items() for c, g in chunks.items()}
    after = {(q, c): g for q, chunks in new.qrels.items() for c, g in chunks.items()}
    result.qrels_added = sorted((q, c, after[(q, c)]) for q, c in after.keys() - before.keys())
    result.qrels_removed = sorted((q, c, before[(q, c)]) for q, c in before.keys() - after.keys())
    result.qrels_regraded = sorted(
        (q, c, before[(q, c)], after[(q, c)])
        for q, c in before.keys() & after.keys()
        if before[(q, c)] != after[(q, c)]
    )
    result.corpus_added = len(new.corpus.keys() - old.corpus.keys())
    result.corpus_removed = len(old.corpus.keys() - new.corpus.keys())
    return result


def export(release: LoadedRelease, fmt: str, out_dir: str | Path) -> list[Path]:
    """Copy ``release`` out as ``hf`` (parquet, card, manifest), ``beir``, ``trec`` (qrels.trec and queries.tsv) or
    ``jsonl`` (qrels, queries, corpus); refuses a non-empty ``out_dir``."""
    from ..export.jsonl import write_jsonl_qrels

    out_dir = Path(out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        raise InputError("the output directory is not empty; choose a new one", path=out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    source = release.path
    if fmt == "hf":
        shutil.copytree(source / "hf", out_dir / "hf")
        for name in ("README.md", "manifest.json"):
            shutil.copy2(source / name, out_dir / name)
    elif fmt == "beir":
        shutil.copytree(source / "beir", out_dir, dirs_exist_ok=True)
    elif fmt == "trec":
        shutil.copy2(source / "qrels.trec", out_dir / "qrels.trec")
        (out_dir / "queries.tsv").write_text(
            "".join(f"{q}\t{' '.join(t.split())}\n" for q, t in sorted(release.queries.items())), encoding="utf-8"
        )
    elif fmt == "jsonl":
        write_jsonl_qrels(release.qrels_table(), out_dir / "qrels.jsonl")
        shutil.copy2(source / "beir" / "queries.jsonl", out_dir / "queries.jsonl")
        shutil.copy2(source / "beir" / "corpus.jsonl", out_dir / "corpus.jsonl")
    else:
        raise InputError(f"unknown export format {fmt!r}; use hf, beir, trec or jsonl")
    return sorted(p for p in out_dir.rglob("*") if p.is_file())
